"""``python -m resgd``: argument errors are clear, targets are called, missing parts are named."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from resgd import cli

CALLS: list[tuple] = []


@pytest.fixture
def fake_targets(monkeypatch):
    """Two fake modules in sys.modules, one with a reproduce function and one without."""
    CALLS.clear()
    done = types.ModuleType("resgd_fake_done")
    done.reproduce = lambda quick, directory: CALLS.append(("done", quick, directory))
    data = types.ModuleType("resgd_fake_data")
    data.reproduce = lambda dataset, quick, directory, n_jobs=2: CALLS.append((dataset, quick, directory, n_jobs))
    empty = types.ModuleType("resgd_fake_empty")
    for module in (done, data, empty):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return {
        "setup": ("resgd_fake_done", "reproduce"),
        "theorem1": ("resgd_fake_empty", "reproduce"),
        "collapse": ("resgd_fake_missing_module", "reproduce"),
        "jena": ("resgd_fake_data", "reproduce"),
    }


def test_reproduce_calls_the_named_parts(fake_targets, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RESGD_RESULTS_DIR", str(tmp_path / "before"))  # restored after the test
    code = cli.main(["reproduce", "--quick", "--only", "jena", "setup", "--figures-dir", str(tmp_path),
                     "--jobs", "1", "--results-dir", str(tmp_path / "r")], targets=fake_targets)
    assert code == 0
    assert CALLS == [("jena", True, str(tmp_path), 1), ("done", True, str(tmp_path))]
    assert "jena, setup done" in capsys.readouterr().out
    import os

    assert os.environ["RESGD_RESULTS_DIR"] == str(tmp_path / "r")


def test_unknown_name_is_a_clear_usage_error(fake_targets, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["reproduce", "--only", "figure9"], targets=fake_targets)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'figure9'" in err and "setup" in err and "jena" in err


@pytest.mark.parametrize("argv, message", [
    ([], "required: COMMAND"),
    (["reproduce", "--jobs", "0"], "expected a whole number >= 1"),
    (["reproduce", "--jobs", "two"], "expected a whole number >= 1, got 'two'"),
    (["reproduce", "--only"], "expected at least one argument"),
    (["reproduc"], "invalid choice: 'reproduc'"),
])
def test_argument_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("name, message", [
    ("theorem1", "resgd_fake_empty has no function reproduce(quick, directory) yet"),
    ("collapse", "module resgd_fake_missing_module does not exist yet"),
])
def test_a_part_that_is_not_written_yet_is_named(fake_targets, capsys, name, message):
    assert cli.main(["reproduce", "--only", "setup", name], targets=fake_targets) == 1
    assert message in capsys.readouterr().err
    assert CALLS == []  # checked before any work starts


def test_default_targets_cover_the_documented_names():
    assert list(cli.TARGETS) == ["setup", "theorem1", "collapse", "jena", "sst2", "robustness"]
    assert cli.resolve("jena").__module__ == "resgd.experiments"
    assert cli.resolve("robustness").__module__ == "resgd.robustness"
    with pytest.raises(cli.CLIError, match="unknown name 'fig9'"):
        cli.resolve("fig9")


def test_info_prints_versions_and_data_source(monkeypatch, capsys):
    monkeypatch.setattr(cli, "data_sources", lambda: "jena: STAND-IN (synthetic)")
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "resgd " in out and "torch " in out and "STAND-IN" in out


def test_module_entry_point_help():
    proc = subprocess.run([sys.executable, "-m", "resgd", "reproduce", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert "--only NAME" in proc.stdout and "--quick" in proc.stdout
