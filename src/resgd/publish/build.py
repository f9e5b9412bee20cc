"""Execute the book's notebooks before ``jupyter-book build`` (whose own execution is off).

    python -m resgd.publish.build [--mode quick|full] [--only NAME] [--timeout SECONDS] [--jobs J]

For each notebook of ``_toc.yml`` (entries under ``notebooks/``), up to ``--jobs`` at a time
(default 1; ``make book`` uses 2; the order, longest first: :mod:`resgd.publish.schedule`):

1. ``notebooks/NN_name.md`` (MyST text notebook, the committed source) is converted by
   jupytext to an ``.ipynb`` under ``_build/notebook_inputs/`` (papermill cannot read text
   notebooks);
2. papermill executes it with kernel ``python3``, cwd ``notebooks/`` and no injected
   parameters: the notebooks' ``quick`` parameter reads ``RESGD_MODE`` (:func:`notebook_quick`),
   so the executed notebook has the same cells as its source. Papermill writes its output, cell
   by cell, under ``_build/notebook_outputs/`` of the notebook's workspace; only a notebook that
   ran to the end has its executed notebook (without papermill's per-cell run metadata) published as
   ``notebooks/NN_name.ipynb``, the ``.md``'s jupytext pair, which is what Sphinx renders:
   ``jupytext --sync`` finds the pair in agreement, and a failed or timed-out run leaves nothing
   there for ``make html`` to render (its partial output is kept under ``_build/notebook_outputs/``);
3. each notebook runs in its own process group with a wall-clock timeout
   (:mod:`resgd.publish.notebook_run`), in a workspace of its own (:mod:`resgd.publish.book_outputs`).

Per-notebook wall times are printed. Everything the build produces (figures, results files,
executed notebooks, ``_build/execution_report.json`` and its page ``book/execution.md``,
:mod:`resgd.publish.report`, :mod:`resgd.publish.sphinx_ext`) is published at the end by one
pointer switch (:mod:`resgd.publish.book_outputs`): a notebook that fails leaves the previous
outputs of its page whole, an interrupted build leaves all of them. An execution error exits
non-zero and names the notebook and the cell.

The quick/full setting comes from one place: ``--mode`` if given, else the environment
variable ``RESGD_MODE``, else ``"full"``. The notebooks' processes see ``RESGD_MODE`` (resolved)
and ``RESGD_FIGURES_DIR`` / ``RESGD_RESULTS_DIR`` (their workspace's folders, published with the
build) (:mod:`resgd.publish.environment`).

This module is the entry point: it ties the table of contents (:mod:`resgd.publish.toc`), the
mode, the schedule, the runs and the report together.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

from .environment import DEFAULT_MODE, MODE_ENV, MODES, claim_outputs, notebook_env, resolve_mode
from .environment import notebook_jobs, notebook_quick  # noqa: F401 - the notebooks' API: `from resgd.publish.build import notebook_quick`
from .book_outputs import BookOutputs
from .notebook_run import execute
from .report import REPORT, EngineProbe, Record
from .schedule import ESTIMATE_S, book_needs, longest_first, run_in_order
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
    (:func:`resgd.publish.schedule.notebook_needs`) has run; the others start longest chain first
    (:func:`resgd.publish.schedule.longest_first`, by :data:`~resgd.publish.schedule.ESTIMATE_S`;
    :func:`resgd.publish.schedule.run_in_order`, which says why ``jobs = 2`` pays on a 2-core
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
    outputs = BookOutputs(root, mode, env, toc)
    try:
        engine = EngineProbe(env)  # asked beside the first notebooks; logged with the first record

        def run(name: str) -> Record:
            work = outputs.workspace(name)
            try:
                rec = execute(name, root, mode, timeout, {**env, **work.env}, work=work.folder, into=work.notebooks)
                if rec.ok:
                    outputs.accept(work)
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

        order = longest_first(names, needs, ESTIMATE_S.get(mode, {}))
        done = run_in_order(order, needs, run, finish, not_run, jobs=jobs, keep_going=keep_going,
                            interrupted=engine.stop)
        engine()  # the probe ends here when no notebook ran
        records = [done[n] for n in names if n in done]
        outputs.publish(records, time.perf_counter() - start, jobs)  # one switch: all of it, or none
    finally:
        outputs.close()
    log(f"book_build: {time.perf_counter() - start:.1f} s in all; report {REPORT}")
    return records


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
