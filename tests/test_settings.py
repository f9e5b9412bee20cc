"""Path settings (:mod:`resgd.settings`): a relative folder is resolved once, at startup, so the
notebooks read the same one; an empty one is refused in one line, with nothing run or written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_a_relative_results_dir_reaches_the_notebooks_as_an_absolute_path(tmp_path, monkeypatch):
    """A relative ``RESGD_RESULTS_DIR`` is resolved against the working folder at startup, so the
    notebooks (run in notebooks/) read the same folder."""
    from resgd import cli
    from resgd.publish.environment import notebook_env

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RESGD_RESULTS_DIR", "results")
    monkeypatch.setenv("RESGD_CACHE_DIR", "cache")
    env = notebook_env(ROOT, "quick")
    assert env["RESGD_RESULTS_DIR"] == str(tmp_path / "results") and env["RESGD_CACHE_DIR"] == str(tmp_path / "cache")
    seen = []
    part = lambda quick, figures_dir, **kw: seen.append((os.environ["RESGD_RESULTS_DIR"], figures_dir))  # noqa: E731
    assert cli.main(["reproduce", "--only", "setup", "--figures-dir", "figs"], parts={"setup": part}) == 0
    assert seen == [(str(tmp_path / "results"), str(tmp_path / "figs"))]


@pytest.mark.parametrize("argv, env, expected", [
    (["--results-dir", ""], {}, "--results-dir '': an empty path"),
    (["--figures-dir", " "], {}, "--figures-dir '': an empty path"),
    ([], {"RESGD_RESULTS_DIR": ""}, "$RESGD_RESULTS_DIR is set but empty"),
    ([], {"RESGD_FIGURES_DIR": " "}, "$RESGD_FIGURES_DIR is set but empty"),
    ([], {"RESGD_CACHE_DIR": ""}, "$RESGD_CACHE_DIR is set but empty"),
    ([], {"RESGD_DATA_DIR": ""}, "$RESGD_DATA_DIR is set but empty"),
])
def test_an_empty_path_setting_is_refused_in_one_line(tmp_path, monkeypatch, capsys, argv, env, expected):
    """An empty path setting (``--results-dir ""``) is refused in one line, exit 2, with nothing run or
    written (it would silently mean the default folder)."""
    from resgd import cli

    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ran = []
    assert cli.main(["reproduce", "--only", "setup", *argv], parts={"setup": lambda *a, **k: ran.append(1)}) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {expected}") and "\n" not in err
    assert ran == [] and list(tmp_path.iterdir()) == []
