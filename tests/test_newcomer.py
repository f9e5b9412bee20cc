"""The newcomer's sequence, ``make book MODE=quick`` then ``make test``, cheaply enough for CI's test stage.

The whole sequence costs about ten minutes on two cores: CI cannot afford it on top of its own full
build. This test runs a one-page version of it, in a copy of the repository, with the real commands.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import output_guard
import pytest

ROOT = Path(__file__).resolve().parents[1]

PAGE = "01_setup"
"""The page the quick book is built from: the smallest notebook, and the one every reader opens first."""

LEFT_OUT_OF_THE_COPY = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", ".ipynb_checkpoints",
                        "_build", "figures", "results", ".cache"}
"""What a fresh clone has not (the build's outputs, caches) or the test does not need (git's history)."""

ONE_PAGE_TOC = f"""\
format: jb-book
root: notebooks/{PAGE}
parts:
  - caption: About this companion
    numbered: true
    chapters:
      - file: book/execution
"""
"""The book cut to the built page and the execution report (every other page glues numbers from
notebooks this build does not run)."""

WHOLE_BOOK_TESTS = ("test_every_toc_page_is_built", "test_intro_pastes_every_number",
                    "test_plumbing_cells_are_hidden_on_the_pages", "test_mathjax_is_local")
"""Site checks that count the whole book's pages or read its intro: a one-page site cannot pass them."""

READERS_OF_THE_BUILD = [
    "tests/test_site.py",
    "tests/test_cli.py::test_jena_on_the_standin_is_said_on_the_console",
]
"""The tests that read the user's build (``_build/html``) or run the CLI's ``reproduce`` beside it (its
default folders are the ones the quick build stamped). The null-rate tests of ``tests/test_claims.py`` and
``tests/test_robustness_agreement.py`` read only a full build's tables, and without them compute
their own (minutes): left out."""

EXPECTED_SKIPS = {"test_site.py": "make verify"}  # a local build need not verify the store first
"""Which inner tests may skip, and the words their reason holds: anything else that skips fails this test."""

CLEARED = (output_guard.ACTIVE, "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_CURRENT_TEST",
           "RESGD_MODE", "RESGD_REQUIRE_SITE", "RESGD_FIGURES_DIR", "RESGD_RESULTS_DIR", "MPLBACKEND")
"""What CI or this test's own session sets and a newcomer's shell does not: the inner commands run as
the newcomer runs them, the output folders the repository's own."""


def _copy(dest: Path) -> Path:
    """The repository's sources as a fresh clone has them, the store's objects apart (no page built here reads them)."""
    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n in LEFT_OUT_OF_THE_COPY or n.endswith(".ipynb")}
        if Path(folder) == ROOT / "store":
            skipped.add("objects")
        return skipped

    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)
    (dest / "_toc.yml").write_text(ONE_PAGE_TOC)
    config = dest / "_config.yml"
    text = config.read_text()
    # the built page links the pages left out by {doc}: the only warning of a one-page site, so -W stays on
    assert "      - myst.domains\n" in text, "the book's suppress_warnings list moved: update this test"
    config.write_text(text.replace("      - myst.domains\n", "      - myst.domains\n      - ref.doc\n", 1))
    return dest


BESIDE_THE_QUICK_BUILD = "tests/test_beside_a_quick_build.py"
"""Where the copy gets :data:`FULL_MODE_PART` (a file of the copy's tests, so that the project's plugins serve it)."""

FULL_MODE_PART = '''
from resgd import cli


def test_a_full_mode_part_through_the_default_folders():
    calls = []
    part = lambda quick, figures_dir, *, n_jobs, scheduler: calls.append(quick)  # noqa: E731
    assert cli.main(["reproduce", "--only", "setup"], parts={"setup": part}) == 0
    assert calls == [False]
'''
"""A full-mode ``reproduce`` through the CLI's default folders: refused by the quick stamp there, unless
the output guard gives each test folders of its own (:func:`test_full_mode_tests_pass_beside_the_users_quick_build`)."""

UNGUARDED = '''
import pytest


@pytest.fixture(autouse=True)
def _the_users_folders(_own_output_folders, monkeypatch):
    for variable in ("RESGD_FIGURES_DIR", "RESGD_RESULTS_DIR"):
        monkeypatch.delenv(variable)
'''
"""A plugin that undoes the output guard's folders: the tests then use the CLI's default ones, the user's."""


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-3000:]}"
    return proc


@dataclass(frozen=True)
class Newcomer:
    """The copy after its quick build, and the run of the tests that read it beside that build."""

    copy: Path
    env: dict
    built: dict  # the copy's guarded outputs after the build
    after: dict  # the same after the tests ran
    out: str  # the tests' console output
    returncode: int
    outcomes: dict  # node id: passed, failed, skipped or error


def _outcomes(junit: Path) -> dict[str, str]:
    found = {}
    for case in ET.parse(junit).iter("testcase"):
        node = f"{case.get('classname').replace('.', '/')}.py::{case.get('name')}"
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        found[node] = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(kinds[0] if kinds else "", "passed")
    return found


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory) -> Newcomer:
    """One quick build in a copy of the repository (a minute), then one pytest run of the tests that read
    it: :data:`READERS_OF_THE_BUILD` and :data:`FULL_MODE_PART`. Both tests of this file read it."""
    copy = _copy(tmp_path_factory.mktemp("newcomer") / "clone")
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(copy / "src"), env.get("PYTHONPATH", "")) if p)
    bindir = Path(sys.executable).parent

    _run([sys.executable, "-m", "resgd.publish.build", "--mode", "quick", "--only", PAGE, "--jobs", "1"], copy, env, 600)
    _run([str(bindir / "jupyter-book"), "build", ".", "-W", "--keep-going", "--all"], copy, env, 600)

    built = output_guard.listing(copy)
    (copy / BESIDE_THE_QUICK_BUILD).write_text(FULL_MODE_PART)
    junit = copy.parent / "readers.xml"
    deselect = [arg for name in WHOLE_BOOK_TESTS for arg in ("--deselect", f"tests/test_site.py::{name}")]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-rs",
                           f"--junitxml={junit}", *deselect, *READERS_OF_THE_BUILD, BESIDE_THE_QUICK_BUILD], cwd=copy,
                          env=env, capture_output=True, text=True, timeout=600)
    return Newcomer(copy, env, built, output_guard.listing(copy), proc.stdout + proc.stderr, proc.returncode,
                    _outcomes(junit) if junit.is_file() else {})


@pytest.mark.slow
def test_the_tests_that_read_a_users_quick_build_pass_beside_it(newcomer):
    """A newcomer's ``make book MODE=quick`` then ``make test``, on one page, in a copy of the repository.

    Covered, with the commands of ``make book MODE=quick`` and ``make test``: the book build in quick
    mode through ``python -m resgd.publish.build`` (the real papermill kernel, the workspace, the
    publish by one pointer switch, the ``quick`` stamp on ``figures/``, the execution
    report) and ``jupyter-book build -W``; then, with a newcomer's environment (no ``RESGD_REQUIRE_SITE``,
    no ``RESGD_MODE``, no output folders set), pytest with the project's plugins (the output guard
    watching this copy's ``figures/``, ``results/``, ``_build/``) on every test that reads the user's
    build (:data:`READERS_OF_THE_BUILD`): the site checks on the quick site, the CLI's ``reproduce``
    in full mode through the default folders a quick build stamped. They pass, skip only for the
    reasons of :data:`EXPECTED_SKIPS`, and leave the user's build as it was.

    Not covered: the other six notebooks (their quick runs: ``make book MODE=quick``'s two minutes;
    a one-page build cannot meet the four site checks of the whole book, :data:`WHOLE_BOOK_TESTS`);
    ``make``'s install step (the copy runs this interpreter); the browser, PDF and JupyterLab checks
    (Chromium: CI's test stage runs them against its full build); the null-rate and claims'-map
    agreement checks (a full build's tables); the rest of the suite, which never reads the user's build (the output guard's folders, ``tests/output_guard.py``); two xdist
    workers (one process here: the guard's per-worker check is ``tests/test_output_guard.py``'s).
    """
    copy, out = newcomer.copy, newcomer.out
    assert (copy / "figures" / ".resgd-mode").read_text().strip() == "quick"  # results/ carry the mode in their names
    report = json.loads((copy / "_build" / "execution_report.json").read_text())
    assert report["mode"] == "quick" and [n["notebook"] for n in report["notebooks"]] == [f"notebooks/{PAGE}"]
    page = (copy / "_build" / "html" / "notebooks" / f"{PAGE}.html").read_text()
    assert "resgd-quick-banner" in page  # the quick book says so on its page

    assert newcomer.returncode == 0, out[-6000:]
    assert "tests changed the user's outputs" not in out, out[-3000:]
    assert newcomer.after == newcomer.built
    readers = [node for node, outcome in newcomer.outcomes.items()
               if outcome == "passed" and not node.startswith(BESIDE_THE_QUICK_BUILD)]
    assert len(readers) >= 20, out[-3000:]  # the site checks ran: the site was there
    skips = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    unexpected = [line for line in skips
                  if not any(f"{name}:" in line and words in line for name, words in EXPECTED_SKIPS.items())]
    assert not unexpected, "\n".join(unexpected)


@pytest.mark.slow
def test_full_mode_tests_pass_beside_the_users_quick_build(newcomer):
    """The newcomer's sequence: ``make book MODE=quick`` left figures/ and results/ stamped quick in the
    folder ``make test`` runs from. A full-mode ``reproduce`` through the CLI's default folders
    (:data:`FULL_MODE_PART`), and the CLI test that reproduces Jena in full mode, pass there, and the
    user's folders stay as they were. Without the guard's folders the first is refused by the quick
    stamp: the scenario is real."""
    copy = newcomer.copy
    cli_test = "tests/test_cli.py::test_jena_on_the_standin_is_said_on_the_console"
    part = f"{BESIDE_THE_QUICK_BUILD}::test_a_full_mode_part_through_the_default_folders"
    assert (copy / "figures" / ".resgd-mode").read_text().strip() == "quick"
    assert newcomer.outcomes.get(part) == "passed" and newcomer.outcomes.get(cli_test) == "passed", \
        newcomer.out[-3000:]
    assert newcomer.after == newcomer.built

    (copy / "tests" / "unguarded.py").write_text(UNGUARDED)
    before = output_guard.listing(copy)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-p", "unguarded",
                           BESIDE_THE_QUICK_BUILD], cwd=copy, capture_output=True, text=True, timeout=600,
                          env={**newcomer.env, "PYTHONPATH": os.pathsep.join([str(copy / "tests"), newcomer.env["PYTHONPATH"]])})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "holds quick-mode outputs" in out, out[-3000:]
    files = lambda found: {path: entry for path, entry in found.items() if entry[0] != "folder"}  # noqa: E731
    assert files(output_guard.listing(copy)) == files(before)  # refused before any work (a lock came and went)
