"""The book build publishes by one switch: its figures, results files, executed notebooks and report
go together, or not at all, whatever a notebook or a second build does meanwhile.

Each fault is inflicted on the real build (:func:`resgd.publish.build.build`, papermill and a kernel):
a cell that fails after writing a figure (B1), and two builds of the same notebook at once (B6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from test_book_build import make_book

from resgd.publish import build as bb

WRITE = ("import os, pathlib\nfrom resgd.infra.atomic import write_text\n"
         "figures = pathlib.Path(os.environ['RESGD_FIGURES_DIR'])\n")


def _report(root: Path) -> dict:
    return json.loads((root / "_build" / "execution_report.json").read_text())


def test_a_cell_failing_after_one_figure_leaves_the_figures_as_they_were(tmp_path):
    """Before: a notebook that failed after one ``glue_figure`` left ``figures/`` half rewritten (the
    new a.png beside the old b.png), and the build said only that the previous notebook was kept.
    After: the failed notebook's files are dropped with it; the figures, the notebook and the report
    the book shows are the last good build's, and the other notebook's new figure is published."""
    good = WRITE + "for name in ('a', 'b'):\n    write_text(figures / f'{name}.txt', 'old')"
    root = make_book(tmp_path, {"01_fig": good, "02_other": WRITE + "write_text(figures / 'c.txt', 'old')"})
    assert [r.ok for r in bb.build(root, "quick", log=lambda *a: None)] == [True, True]
    old_notebook = (root / "notebooks" / "01_fig.ipynb").read_bytes()
    md = root / "notebooks" / "01_fig.md"
    md.write_text(md.read_text().replace(good, WRITE + "write_text(figures / 'a.txt', 'new')\n"
                                         "raise ValueError('after one figure')"))
    md = root / "notebooks" / "02_other.md"
    md.write_text(md.read_text().replace("'c.txt', 'old'", "'c.txt', 'new'"))
    records = bb.build(root, "quick", keep_going=True, log=lambda *a: None)
    assert [r.ok for r in records] == [False, True] and "after one figure" in records[0].error
    seen = {n: (root / "figures" / f"{n}.txt").read_text() for n in "abc"}
    assert seen == {"a": "old", "b": "old", "c": "new"}, seen
    assert (root / "notebooks" / "01_fig.ipynb").read_bytes() == old_notebook
    assert [(r["notebook"], r["ok"]) for r in _report(root)["notebooks"]] == \
        [("notebooks/01_fig", False), ("notebooks/02_other", True)]
    builds = root / "figures" / ".resgd-builds" / "builds"
    assert len(list(builds.iterdir())) == 1 and not any((root / "_build" / "stages").iterdir())


def test_two_builds_at_once_leave_a_report_that_matches_the_notebooks(tmp_path):
    """Before: build A (its 01 fails, slowly) and build B (its 01 succeeds) at once: B published the
    good 01, then A wrote a report and ``book/execution.md`` saying 01 failed, beside B's good page.
    After: the builds publish in turn, each from the current build; A's failure does not overwrite the
    record of the page B published since A began (A says it failed, in its own output)."""
    src = ("import os, pathlib, time\n"
           "if os.environ.get('BUILD') == 'A':\n"
           "    pathlib.Path('a.started').write_text('x')\n"
           "    deadline = time.monotonic() + 300\n"
           "    while not pathlib.Path('b.done').exists() and time.monotonic() < deadline:\n"
           "        time.sleep(0.1)\n"
           "    raise ValueError('A failed')\n"
           "print('built by', os.environ.get('BUILD'))")
    root = make_book(tmp_path, {"01_page": src})
    started, done = root / "notebooks" / "a.started", root / "notebooks" / "b.done"
    a = subprocess.Popen([sys.executable, "-m", "resgd.publish.build", "--mode", "quick", "--root", str(root)],
                         env={**os.environ, "BUILD": "A"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not started.exists():
            assert time.monotonic() < deadline and a.poll() is None, "build A never began its notebook"
            time.sleep(0.2)
        os.environ["BUILD"] = "B"
        try:
            assert [r.ok for r in bb.build(root, "quick", log=lambda *a: None)] == [True]
        finally:
            del os.environ["BUILD"]
        done.write_text("x")
        _, err = a.communicate(timeout=300)
    finally:
        a.kill()
    assert a.returncode == 1 and "A failed" in err  # A says its run failed
    page = (root / "notebooks" / "01_page.ipynb").read_text()
    assert "built by B" in page
    report = _report(root)
    assert [(r["notebook"], r["ok"]) for r in report["notebooks"]] == [("notebooks/01_page", True)]
    assert "A failed" not in (root / "book" / "execution.md").read_text()
