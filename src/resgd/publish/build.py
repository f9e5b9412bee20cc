"""Execute the book's notebooks before ``jupyter-book build`` (whose own execution is off).

    python -m resgd.publish.build [--mode quick|full] [--only NAME] [--timeout SECONDS] [--jobs J]

For each notebook in ``_toc.yml`` order (entries under ``notebooks/``), up to ``--jobs`` at a
time (default 1; ``make book`` uses 2; the order: :mod:`resgd.publish.schedule`):

1. ``notebooks/NN_name.md`` (MyST text notebook, the committed source) is converted by
   jupytext to an ``.ipynb`` under ``_build/notebook_inputs/`` (papermill cannot read text
   notebooks);
2. papermill executes it with kernel ``python3``, cwd ``notebooks/`` and no injected
   parameters: the notebooks' ``quick`` parameter reads ``RESGD_MODE`` (:func:`notebook_quick`),
   so the executed notebook has the same cells as its source. Papermill writes its output, cell
   by cell, under ``_build/notebook_outputs/``; only a notebook that ran to the end is kept
   (without papermill's per-cell run metadata) as ``notebooks/NN_name.ipynb``, the ``.md``'s
   jupytext pair, which is what Sphinx renders: ``jupytext --sync`` finds the pair in agreement;
3. each notebook runs in its own process group with a wall-clock timeout
   (:mod:`resgd.publish.notebook_run`), and in a workspace of its own (:class:`BookStage`):
   ``RESGD_FIGURES_DIR`` and ``RESGD_RESULTS_DIR`` point into it, and only a notebook that ran to
   the end has its files kept.

Per-notebook wall times are printed. When all have run, the figures and results files the
notebooks wrote, the executed notebooks, ``_build/execution_report.json`` and its page
``book/execution.md`` (:mod:`resgd.publish.report`, :mod:`resgd.publish.sphinx_ext`) are published
together by one pointer switch (:mod:`resgd.infra.builds`, as ``reproduce`` publishes); the paths
above are links through it. A failed or timed-out notebook leaves its previous page and files; an
interrupted build publishes nothing. An execution error exits non-zero and names the notebook and the cell.

The quick/full setting comes from one place: ``--mode`` if given, else the environment
variable ``RESGD_MODE``, else ``"full"``. The notebooks' processes see ``RESGD_MODE`` (resolved)
and ``RESGD_FIGURES_DIR`` (the notebook's workspace, published into ``figures/``) (:mod:`resgd.publish.environment`).

This module is the entry point: it ties the table of contents (:mod:`resgd.publish.toc`), the
mode, the schedule, the runs and the report together.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..infra.atomic import write_text
from ..infra.builds import (
    SIDES, Builds, _adopt, _clean_leftovers, _clone, _drop_unless_current, _link_absent, _link_or_copy, _place_link,
    publish_lock,
)
from ..infra.file_lock import try_lock
from ..infra.mode_stamp import claim

from .environment import DEFAULT_MODE, MODE_ENV, MODES, claim_outputs, notebook_env, resolve_mode
from .environment import notebook_quick  # noqa: F401 - the notebooks' API: `from resgd.publish.build import notebook_quick`
from .notebook_run import execute
from .report import REPORT, EngineProbe, Record, read_report, write_report
from .schedule import book_needs, run_in_order
from .toc import NOTEBOOK_DIR, BookBuildError, find_root, select, toc_notebooks

# Wall-clock limit per notebook, by mode (override with --timeout).
DEFAULT_TIMEOUT_S = {"quick": 1800, "full": 4 * 3600}


def build(
    root: Path,
    mode: str,
    only: Sequence[str] | None = None,
    timeout: float | None = None,
    keep_going: bool = False,
    log=print,
    jobs: int = 1,
) -> list[Record]:
    """Execute the TOC's notebooks, up to ``jobs`` at a time; returns this run's records (TOC order).

    A notebook starts once every notebook of its header's ``needs``
    (:func:`resgd.publish.schedule.notebook_needs`) has run; the others start in TOC order
    (:func:`resgd.publish.schedule.run_in_order`, which says why ``jobs = 2`` pays on a 2-core
    machine). After a failure no new notebook starts (unless ``keep_going``; a notebook whose needs
    failed never starts); running ones finish. The report lists this run's notebooks; with
    ``only``, it also keeps the earlier records of the TOC's other notebooks, so that it always
    describes every executed notebook on disk.
    """
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise BookBuildError(f"--jobs: expected an integer >= 1, got {jobs!r}")
    from .pages import TemplateError, write_pages

    try:
        write_pages(root)  # 04_jena.md and 05_sst2.md from their one template (a hand-edited page stops here)
    except TemplateError as exc:
        raise BookBuildError(str(exc)) from None
    toc = toc_notebooks(root / "_toc.yml")
    names = select(toc, only)
    needs = book_needs(root, toc, names)
    timeout = timeout or DEFAULT_TIMEOUT_S[mode]
    for folder in ("figures", "results", "_build"):
        (root / folder).mkdir(exist_ok=True)
    env = notebook_env(root, mode)
    claim_outputs(env, mode)
    log(f"book_build: mode={mode}, {len(names)} notebook(s), {jobs} at a time, timeout {timeout:g} s each")
    start = time.perf_counter()
    stage = BookStage(root, mode, env)
    try:
        engine = EngineProbe(env)  # asked beside the first notebooks; logged with the first record

        def run(name: str) -> Record:
            work = stage.workspace(name)
            try:
                rec = execute(name, root, mode, timeout, {**env, **work.env}, into=work.notebooks)
                if rec.ok:
                    stage.accept(work)
                return rec
            finally:
                work.drop()

        def finish(rec: Record, done: Mapping[str, Record]) -> None:
            if len(done) == 1:
                log(f"book_build: engine: {engine()}")
            rec.engine = engine()
            log(f"  {rec.notebook:<32} {rec.seconds:8.1f} s  {'ok' if rec.ok else 'FAILED'}")

        def not_run(name: str, failed: list[str]) -> Record:
            return Record(f"{NOTEBOOK_DIR}/{name}", mode, 0.0, False, f"not run: needs {failed}, which failed")

        done = run_in_order(names, needs, run, finish, not_run, jobs=jobs, keep_going=keep_going,
                            interrupted=engine.stop)
        engine()  # the probe ends here when no notebook ran
        records = [done[n] for n in names if n in done]
        stage.publish(records, toc, time.perf_counter() - start, jobs)  # one switch: all of it, or none
    finally:
        stage.close()
    log(f"book_build: {time.perf_counter() - start:.1f} s in all; report {REPORT}")
    return records


STAGES = Path("_build") / "stages"
"""Where a running book build keeps its stage (one folder per build, its lock inside while it runs)."""
EXECUTION_PAGE = Path("book") / "execution.md"
BOOK = "book"
"""The side of a build that holds the book's own outputs, at their paths in the book root:
``notebooks/NN_name.ipynb``, ``_build/execution_report.json`` and ``book/execution.md``."""


class BookStage:
    """One book build's outputs, published together by one pointer switch (:mod:`resgd.infra.builds`).

    Why: a notebook writes figures and results files as it runs; written at today's paths, a cell
    failing after one ``glue_figure`` left the figures half rewritten, and two builds at once left a
    report that did not match the notebooks. Here each notebook runs in a workspace of its own (the
    stage's files, hard-linked; ``RESGD_FIGURES_DIR`` and ``RESGD_RESULTS_DIR`` point into it, the
    run cache and the results folder's other entries are linked in); only a notebook that ran to
    the end has its new files moved into the stage, with its executed notebook. At the end, under
    the publish lock, the stage's new files go into a new build made from the current one (so a
    part published meanwhile is kept), with the report merged from the current build's; one rename
    switches to it. Two builds at once take turns there: the report always matches the notebooks.
    """

    def __init__(self, root: Path, mode: str, env: Mapping[str, str]):
        self.root, self.mode = root, mode
        self.roots = {"figures": Path(env["RESGD_FIGURES_DIR"]), "results": Path(env["RESGD_RESULTS_DIR"])}
        self.builds = Builds(self.roots["figures"])
        home = root / STAGES
        home.mkdir(parents=True, exist_ok=True)
        for left in home.iterdir():  # a killed build's stage: its lock is free
            if left.is_dir() and (lock := try_lock(left / ".lock")) is not None:
                lock.close()
                shutil.rmtree(left, ignore_errors=True)
        self.folder = Path(tempfile.mkdtemp(prefix=f"{mode}-", dir=home))
        self.lock = try_lock(self.folder / ".lock")
        self.guard = threading.Lock()
        self.stage = self.folder / "stage"
        with publish_lock(self._locked()):
            self._adopt()
            base = self.builds.current(mode)
            for side in (*SIDES, BOOK):
                (self.stage / side).mkdir(parents=True)
                if base is not None and (base / side).is_dir():
                    _clone(base / side, self.stage / side)
        self.origin = _inodes(self.stage)

    def _locked(self) -> list[Path]:
        return [self.roots[side] for side in SIDES if side == "figures" or self.roots[side].is_dir()]

    def _adopt(self) -> None:
        """Files at today's paths that are not links into a build (an earlier version's) taken into one."""
        results = self.roots["results"]
        folders = {n for n in (os.listdir(results) if results.is_dir() else ())
                   if not n.startswith(".") and n != "cache" and (results / n).is_dir() and not (results / n).is_symlink()}
        _clean_leftovers(self.builds, self.roots)
        _adopt(self.builds, self.roots, self.mode, {"figures": set(), "results": folders},
               ("figures", "results") if results.is_dir() else ("figures",))

    def workspace(self, name: str) -> Workspace:
        """A notebook's own copy of the stage (hard links) and the environment that points into it."""
        work = self.folder / "work" / name
        with self.guard:
            for side in (*SIDES, BOOK):
                (work / side).mkdir(parents=True)
                _clone(self.stage / side, work / side)
        results = self.roots["results"]
        for entry in sorted(os.listdir(results)) if results.is_dir() else ():
            if not entry.startswith(".") and not os.path.lexists(work / "results" / entry):
                os.symlink(os.path.abspath(results / entry), work / "results" / entry)  # the cache, verification.json
        return Workspace(work, _inodes(work), {"RESGD_FIGURES_DIR": str(work / "figures"),
                                               "RESGD_RESULTS_DIR": str(work / "results")})

    def accept(self, work: Workspace) -> None:
        """Move what a notebook that ran to the end wrote (files new or replaced) into the stage."""
        with self.guard:
            for relative in _changed(work.folder, work.origin):
                dest = self.stage / relative
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(work.folder / relative, dest)

    def publish(self, records: Sequence[Record], toc: Sequence[str], total: float, jobs: int) -> None:
        """Publish the stage and the report in one switch; the report keeps the current build's records
        of the TOC's notebooks this build did not run (those whose executed notebook is in the build)."""
        from .sphinx_ext import execution_page

        with publish_lock(self._locked()):
            claim(self.roots["figures"], self.mode, how_to_move="another checkout")
            self._adopt()
            current = self.builds.current(self.mode)
            build = self.builds.new(self.mode, current)
            try:
                book = build / BOOK
                for relative in _changed(self.stage, self.origin):
                    dest = build / relative
                    if os.path.lexists(dest):
                        os.unlink(dest)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    _link_or_copy(self.stage / relative, dest)
                legacy = [rel for rel in [*(Path(NOTEBOOK_DIR) / f"{n}.ipynb" for n in toc), REPORT]
                          if (self.root / rel).is_file() and not (self.root / rel).is_symlink()]
                for rel in legacy:  # an earlier version's outputs, in place: kept unless replaced
                    if not os.path.lexists(book / rel):
                        (book / rel).parent.mkdir(parents=True, exist_ok=True)
                        _link_or_copy(self.root / rel, book / rel)
                earlier = {r.notebook: r for r in read_report(book / REPORT)
                           if Path(r.notebook).name in toc and (book / f"{r.notebook}.ipynb").is_file()}
                newer = {r.notebook for r in records if not r.ok and r.notebook in earlier
                         and self._replaced_since(current, f"{r.notebook}.ipynb")}
                merged = {**earlier, **{r.notebook: r for r in records if r.notebook not in newer}}
                in_order = [merged[k] for k in (f"{NOTEBOOK_DIR}/{n}" for n in toc) if k in merged]
                write_report(book / REPORT, in_order, self.mode, total, jobs)
                write_text(book / EXECUTION_PAGE, execution_page(self.root, json.loads((book / REPORT).read_text())))
                (build / "mode").write_text(f"{self.mode}\n")
                for side in SIDES:
                    if side == "figures" or self.roots[side].is_dir():
                        _link_absent(self.builds, self.roots[side], build, self.mode, side)
                links = {rel: self.root / rel for rel in _files(book)}
                for rel, live in links.items():  # today's path absent or a link already: nothing shows until the switch
                    if not os.path.lexists(live) or live.is_symlink():
                        live.parent.mkdir(parents=True, exist_ok=True)
                        _place_link(live, self.builds.link_text(live, self.mode, BOOK, rel))
                self.builds.switch(self.mode, build)  # the one commit point
            except BaseException:
                _drop_unless_current(self.builds, self.mode, build)
                raise
            for rel, live in links.items():  # an earlier version's file: the build holds it as it was
                if not live.is_symlink():
                    _place_link(live, self.builds.link_text(live, self.mode, BOOK, rel))
            self.builds.remove_unused()

    def _replaced_since(self, current: Path | None, notebook: str) -> bool:
        """Whether another build published ``notebook`` since this one began: its record, not this
        build's failure, then describes the page the book shows (this build's failure is in its own output)."""
        try:
            st = os.stat(current / BOOK / notebook)
        except (OSError, TypeError):
            return False
        return self.origin.get(os.path.join(BOOK, notebook)) != (st.st_dev, st.st_ino)

    def close(self) -> None:
        """Remove the stage (what was not published is dropped)."""
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.lock is not None:
            self.lock.close()


@dataclass
class Workspace:
    folder: Path
    origin: dict[str, tuple[int, int]]
    env: dict[str, str]

    @property
    def notebooks(self) -> Path:
        return self.folder / BOOK / NOTEBOOK_DIR

    def drop(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _files(folder: Path) -> list[str]:
    """The files under ``folder`` (relative paths), not following symlinked folders."""
    found = []
    for dirpath, _, names in os.walk(folder):
        found += [os.path.relpath(os.path.join(dirpath, n), folder) for n in names
                  if not os.path.islink(os.path.join(dirpath, n))]
    return found


def _inodes(folder: Path) -> dict[str, tuple[int, int]]:
    """Each file under ``folder`` by its inode: a file written since (atomically: a new inode) is told apart."""
    return {rel: ((st := os.stat(folder / rel)).st_dev, st.st_ino) for rel in _files(folder)}


def _changed(folder: Path, origin: Mapping[str, tuple[int, int]]) -> list[str]:
    """The files under ``folder`` that are new or replaced since ``origin`` was taken."""
    now = _inodes(folder)
    return sorted(rel for rel, ino in now.items() if origin.get(rel) != ino)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m resgd.publish.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=MODES, help=f"default: ${MODE_ENV}, else {DEFAULT_MODE}")
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this notebook (name or prefix; repeatable)")
    parser.add_argument("--timeout", type=float, help="seconds per notebook (default: quick 1800, full 14400)")
    parser.add_argument("--keep-going", action="store_true", help="run the remaining notebooks after a failure")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks executed at a time (default 1; make book: 2)")
    parser.add_argument("--root", type=Path, help="book root (default: nearest folder with _toc.yml)")
    args = parser.parse_args(argv)
    from ..infra.user_errors import describe_stop, stop_on_signals  # imports the data package: not for the notebooks

    try:
        mode = resolve_mode(args.mode)
        root = find_root(args.root)
        with stop_on_signals():  # SIGTERM as Ctrl-C: build() kills every papermill tree, no orphans
            records = build(root, mode, args.only, args.timeout, args.keep_going, jobs=args.jobs)
    except KeyboardInterrupt as stop:
        status, message = describe_stop(stop, "book_build")
        print(f"book_build: {message}; notebooks/ keeps each page's previous version", file=sys.stderr)
        return status
    except (BookBuildError, ValueError) as exc:
        print(f"book_build: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a read-only checkout (EROFS), a full disk, a mode stamp refused: not a bug
        if exc.errno is None or exc.filename is None:
            print(f"book_build: error: {exc}", file=sys.stderr)
            return 1
        print(f"book_build: error: {exc.filename}: {exc.strerror}; the build writes figures/, results/, _build/ and "
              f"the executed notebooks inside the book root: build from a writable copy of it", file=sys.stderr)
        return 1
    failed = [r for r in records if not r.ok]
    for rec in failed:
        print(f"book_build: {rec.notebook}.md failed: {rec.error}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
