"""The book build publishes by one switch: a fault at any moment leaves the old outputs or the new ones, whole.

The outputs of a book build are its notebooks' figures and results files, the executed notebooks,
the execution report and its page (:mod:`resgd.publish.book_outputs`). The first test inflicts
kill -9, SIGHUP, SIGTERM and SIGINT at every file-system step of a book build's outputs (its
stage, a notebook's workspace and publish, the switch) in a forked process; the others run real
notebooks: a cell that fails after one figure is saved, two builds at once.

"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_helpers import with_fault_at_step
from test_book_build import make_book

from resgd.infra.builds import WORKSPACE_ENV
from resgd.pipeline.reproduce import Outputs, publish
from resgd.publish import build as bb
from resgd.publish.book_outputs import BookOutputs
from resgd.publish.report import REPORT, Record


@pytest.fixture(autouse=True)
def _book_results_in_the_book(monkeypatch):
    """A book build's results folder is its book's ``results/`` (under the test's ``tmp_path``): the
    suite's own per-test ``$RESGD_RESULTS_DIR`` would take the build's results elsewhere."""
    monkeypatch.delenv("RESGD_RESULTS_DIR", raising=False)


TAGS = ("OLDTAG", "NEWTAG", "LATERTAG")


VIEW = ("figures/f.txt", "figures/g.txt", "results/tables/t.csv", "results/claims/c.json",
        "notebooks/01_a.ipynb", str(REPORT), "book/execution.md")


def _view(root: Path) -> dict[str, str]:
    """What a reader sees at today's paths: each output's tag ("missing" when it cannot be read)."""
    seen = {}
    for rel in VIEW:
        try:
            text = (root / rel).read_text()
        except OSError:
            seen[rel] = "missing"
            continue
        seen[rel] = next((t for t in TAGS if t in text), "untagged")
    return seen


def _book_build(root: Path, tag: str) -> None:
    """A book build of one notebook, without a kernel: its workspace gets what the notebook writes
    (a publish of its figures and results, a ``glue_figure``'s file, the executed notebook), then
    the build publishes; as :func:`resgd.publish.build.build` does, the stage goes in any case."""
    env = {"RESGD_FIGURES_DIR": str(root / "figures"), "RESGD_RESULTS_DIR": str(root / "results")}
    outputs = BookOutputs(root, "quick", env, ["01_a"])
    try:
        work = outputs.workspace("01_a")
        os.environ[WORKSPACE_ENV] = str(work.folder)
        try:
            write = lambda tmp: tmp.write_text(tag)  # noqa: E731
            publish(Outputs(figure_files={"f": ("f.txt", write)},
                            result_files={"t": ("tables/t.csv", write), "c": ("claims/c.json", write)}),
                    work.folder / "figures", work.folder / "results", mode="quick")
        finally:
            del os.environ[WORKSPACE_ENV]
        (work.folder / "figures" / "g.txt").write_text(tag)
        work.notebooks.mkdir(parents=True, exist_ok=True)
        (work.notebooks / "01_a.ipynb").write_text(json.dumps({"tag": tag}))
        outputs.accept(work)
        work.drop()
        outputs.publish([Record("notebooks/01_a", "quick", 1.0, True, engine=tag)], 1.0, 1)
    finally:
        outputs.close()


def _fresh(tmp_path: Path, at: int) -> Path:
    """A book whose outputs are an "old" build's (copied from the first one made: its links are relative)."""
    template = tmp_path / "template"
    if not template.exists():
        template.mkdir()
        make_book(template, {"01_a": "x = 1"})
        (template / "book").mkdir()
        (template / "_build").mkdir()
        _book_build(template, "OLDTAG")
    root = tmp_path / f"r{at}"
    shutil.copytree(template, root, symlinks=True)
    return root


def _leftovers(root: Path) -> list[str]:
    builds = root / "figures" / ".resgd-builds"
    current = {os.path.basename(os.readlink(p)) for p in builds.glob("current-*")}
    extra = [b.name for b in (builds / "builds").iterdir() if b.name not in current]
    stages = [s.name for s in (builds / "stages").iterdir()]
    stray = [p.name for p in root.rglob("*") if p.suffix == ".part" or ".resgd-link-" in p.name or p.name.endswith(".tmp")]
    return extra + stages + stray


def _build_with_fault(root: Path, event: str, at: int) -> tuple[int, int]:
    """The "new" book build with ``event`` at its ``at``-th file-system step (:func:`with_fault_at_step`)."""
    return with_fault_at_step(lambda: _book_build(root, "NEWTAG"), event, at)


EVERY = 8
"""Each case faults every eighth step from its own first one: the eight cases together fault every step."""


EVENTS = ("kill -9", "SIGHUP", "SIGTERM", "SIGINT")


@pytest.mark.parametrize(("first", "event"), [(first, EVENTS[(first - 1) % 4]) for first in range(1, EVERY + 1)])
def test_a_fault_at_any_step_of_a_book_build_leaves_the_old_outputs_or_the_new_ones_whole(tmp_path, first, event):
    """A book build stopped at any step of its outputs' life (stage, workspace, the notebook's publish,
    the switch) leaves a reader the old build or the new one, whole, never figures, results, pages and
    report of two builds; the next build leaves one build and no stage."""
    old = {k: "OLDTAG" for k in VIEW}
    assert _view(_fresh(tmp_path, 0)) == old
    at, outcomes = first, set()
    while True:
        root = _fresh(tmp_path, at)
        status, steps = _build_with_fault(root, event, at)
        seen = _view(root)
        assert seen in (old, {k: "NEWTAG" for k in VIEW}), (at, event, seen)
        outcomes.add(seen["figures/f.txt"])  # "NEWTAG" after the switch: a fault among its last few steps
        _book_build(root, "LATERTAG")
        assert set(_view(root).values()) == {"LATERTAG"} and _leftovers(root) == [], (at, _leftovers(root))
        shutil.rmtree(root)
        if status == 0:  # the build ended before the step: every step was faulted once
            assert steps < at
            break
        assert status in (9, -signal.SIGHUP, 128 + signal.SIGHUP, 143, 130), status
        at += EVERY
    assert at > 100 and "OLDTAG" in outcomes  # faults came both before and after the switch


WRITES = (  # what a notebook of the book does: a glue_figure's file, then its results published
    "import os, pathlib\nfrom resgd.infra.atomic import write_text\nfrom resgd.pipeline.reproduce import Outputs, publish\n"
    "tag = os.environ.get('BOOK_TAG', 'OLDTAG')\nprint(tag)\n"
    "write_text(pathlib.Path(os.environ['RESGD_FIGURES_DIR']) / 'g.txt', tag)\n"
    "publish(Outputs(figure_files={'f': ('f.txt', lambda tmp: tmp.write_text(tag))},\n"
    "                result_files={'c': ('claims/c.json', lambda tmp: tmp.write_text(tag))}))\n"
    "os.environ.get('BOOK_WAIT') and pathlib.Path(os.environ['BOOK_WAIT'] + '.started').write_text('x')\n"
    "deadline = __import__('time').monotonic() + 60\n"
    "while os.environ.get('BOOK_WAIT') and not pathlib.Path(os.environ['BOOK_WAIT']).exists():\n"
    "    assert __import__('time').monotonic() < deadline\n    __import__('time').sleep(0.1)\n"
    "assert os.environ.get('BOOK_FAIL') != '1', 'deliberate failure after the figures'"
)
"""``BOOK_TAG`` tags its files; with ``BOOK_WAIT`` it waits for that file, with ``BOOK_FAIL=1`` its last cell fails."""


def _outputs(root: Path) -> dict[str, str]:
    return {rel: (root / rel).read_text() for rel in ("figures/g.txt", "figures/f.txt", "results/claims/c.json")}


def test_a_cell_failing_after_a_figure_leaves_the_previous_outputs_whole(tmp_path, monkeypatch, capsys):
    """A cell failing after one ``glue_figure`` leaves no figure half rewritten: the failed notebook's
    workspace is dropped whole (figures, results, executed notebook as the last good build left them)
    and the report says it failed."""
    root = make_book(tmp_path, {"01_a": WRITES})
    assert bb.main(["--root", str(root), "--mode", "quick", "--timeout", "120"]) == 0
    before = {**_outputs(root), "nb": (root / "notebooks" / "01_a.ipynb").read_text()}
    assert set(_outputs(root).values()) == {"OLDTAG"}
    monkeypatch.setenv("BOOK_TAG", "NEWTAG")
    monkeypatch.setenv("BOOK_FAIL", "1")
    assert bb.main(["--root", str(root), "--mode", "quick", "--timeout", "120"]) == 1
    err = capsys.readouterr().err
    assert "deliberate failure after the figures" in err and "(the previous notebooks/01_a.ipynb is kept)" in err
    assert {**_outputs(root), "nb": (root / "notebooks" / "01_a.ipynb").read_text()} == before
    report = json.loads((root / REPORT).read_text())
    assert [(r["notebook"], r["ok"]) for r in report["notebooks"]] == [("notebooks/01_a", False)]
    assert "failed" in (root / "book" / "execution.md").read_text()
    assert not list((root / "figures" / ".resgd-builds" / "stages").iterdir())


def test_two_book_builds_at_once_publish_a_report_that_matches_their_pages(tmp_path):
    """Two builds at once each publish in one switch; a build whose 01 failed after another build
    published a good 01 keeps that one's record, so the report and book/execution.md describe the
    pages there."""
    root = make_book(tmp_path, {"01_a": WRITES})
    go = tmp_path / "go"
    base = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(bb.__file__).parents[2]),
                                                                         os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "resgd.publish.build", "--root", str(root), "--mode", "quick", "--timeout", "120"]
    failing = subprocess.Popen(cmd, env={**base, "BOOK_TAG": "OLDTAG", "BOOK_WAIT": str(go), "BOOK_FAIL": "1"},
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90  # its 01 runs, in a stage taken before the other build's switch
        while not Path(f"{go}.started").exists():
            assert time.monotonic() < deadline and failing.poll() is None, "the first build's 01 never began"
            time.sleep(0.1)
        good = subprocess.run(cmd, env={**base, "BOOK_TAG": "NEWTAG"}, capture_output=True, text=True, timeout=120)
        assert good.returncode == 0, good.stderr
        assert set(_outputs(root).values()) == {"NEWTAG"}
        go.write_text("x")  # the first build's 01 goes on, and fails
        _, err = failing.communicate(timeout=120)
    finally:
        failing.kill()
    assert failing.returncode == 1 and "deliberate failure after the figures" in err
    assert set(_outputs(root).values()) == {"NEWTAG"}  # the failed notebook's files never published
    report = json.loads((root / REPORT).read_text())
    assert [(r["notebook"], r["ok"]) for r in report["notebooks"]] == [("notebooks/01_a", True)]
    assert "every notebook ran to the end" in (root / "book" / "execution.md").read_text()
    assert "NEWTAG" in (root / "notebooks" / "01_a.ipynb").read_text()  # the good build's page, as its record says
