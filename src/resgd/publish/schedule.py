"""The order the book's notebooks run in: up to ``jobs`` at a time, the longest chain of work first
(:func:`longest_first`), each once the notebooks its header ``needs`` have run; after a failure, no new one starts (unless ``keep_going``),
and a notebook whose needs failed never starts.

Why a module of its own: these rules are the build's only concurrency. Why ``jobs = 2`` pays on a
2-core machine: much of a notebook is one busy core (kernel start, plotting, serial sweeps), and a
second notebook fills the other; the results cache is safe for concurrent notebooks (per-entry
locks). Kept apart from what running one notebook means (:mod:`resgd.publish.notebook_run`) and
from what is reported (:mod:`resgd.publish.report`).
"""

from __future__ import annotations

import concurrent.futures as futures
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .notebook_run import kill_running
from .report import Record
from .toc import NOTEBOOK_DIR, BookBuildError

NEEDS_KEY = "resgd"
"""A notebook's ``.md`` header may say which notebooks must have run before it, e.g.::

    resgd:
      needs: [04_jena, 05_sst2]

(with ``notebook_metadata_filter: resgd`` under ``jupytext:``, so ``jupytext --sync`` keeps it)."""


def read_header(md: Path) -> dict:
    """The notebook-level metadata of the MyST notebook ``md``; a header that cannot be read (broken
    YAML) is one :class:`BookBuildError` line naming the file's line, not the parser's traceback."""
    import jupytext
    import yaml

    try:
        return jupytext.read(md).metadata
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f", line {mark.line + 1}" if mark is not None else ""  # 0-based, in the file
        raise BookBuildError(f"{md}{where}: the notebook's header is not valid YAML ({exc.problem or exc.context}): "
                             "fix it between the two '---' lines") from None
    except Exception as exc:  # noqa: BLE001 - jupytext's own errors on a damaged header
        raise BookBuildError(f"{md}: the notebook cannot be read ({' '.join(str(exc).split())}): fix its header") from None


def notebook_needs(md: Path) -> list[str]:
    """The names of the notebooks ``md`` reads results from (its header's ``resgd: needs:``)."""
    needs = read_header(md).get(NEEDS_KEY, {}).get("needs", [])
    if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
        raise BookBuildError(f"{md}: header field {NEEDS_KEY}.needs must be a list of notebook names, got {needs!r}")
    return needs


def book_needs(root: Path, toc: Sequence[str], names: Sequence[str]) -> dict[str, list[str]]:
    """Each of ``names``' needs (its header's, :func:`notebook_needs`) among ``names``: the others ran
    in an earlier build. A need the TOC does not list is an error, named with the notebook."""
    needs = {}
    for name in names:
        source = root / NOTEBOOK_DIR / f"{name}.md"
        wanted = notebook_needs(source) if source.is_file() else []
        unknown = [n for n in wanted if n not in toc]
        if unknown:
            raise BookBuildError(f"{source.relative_to(root)}: needs {unknown}, which the TOC does not list")
        needs[name] = [n for n in wanted if n in names]  # the others ran in an earlier build
    return needs


ESTIMATE_S = {
    "quick": {"01_setup": 6, "02_theorem1": 22, "03_rank_collapse": 18, "04_jena": 40, "05_sst2": 52,
              "06_robustness": 50, "07_claims": 18},
    "full": {"01_setup": 17, "02_theorem1": 25, "03_rank_collapse": 35, "04_jena": 38, "05_sst2": 38,
             "06_robustness": 47, "07_claims": 22},
}
"""Each notebook's wall time in seconds, by mode (a fresh clone's ``make book`` on a 2-core machine,
two at a time): they only order the start (:func:`longest_first`), so they need not be exact."""


def longest_first(names: Sequence[str], needs: Mapping[str, Sequence[str]],
                  estimates: Mapping[str, float]) -> list[str]:
    """``names`` in the order to start them: the longest chain of work first, a notebook's chain being
    its own estimate plus the longest chain of the notebooks that need it; ties (and notebooks
    without an estimate, which go first) in the order of ``names``.

    Why: the build's wall time is at least its longest chain; started first, the longest chains keep
    every job busy until close to it, where a long notebook started last would run beside nothing."""
    chain: dict[str, float] = {}

    def length(name: str, seen: tuple[str, ...] = ()) -> float:
        if name not in chain:
            after = [m for m in names if name in needs.get(m, ()) and m not in seen]
            chain[name] = estimates.get(name, float("inf")) + max((length(m, (*seen, name)) for m in after), default=0.0)
        return chain[name]

    return sorted(names, key=lambda n: (-length(n), names.index(n)))


def run_in_order(
    names: Sequence[str],
    needs: Mapping[str, Sequence[str]],
    execute: Callable[[str], Record],
    finish: Callable[[Record, Mapping[str, Record]], None],
    not_run: Callable[[str, list[str]], Record],
    *,
    jobs: int,
    keep_going: bool = False,
    interrupted: Callable[[], None] = lambda: None,
) -> dict[str, Record]:
    """Run ``execute(name)`` for each of ``names``, up to ``jobs`` at a time; returns the records by name.

    A notebook starts once every notebook of ``needs[name]`` (those among ``names``) has run; the
    others start in the order of ``names``. Each record, as it comes, enters the records by name and
    is handed to ``finish(record, records)``; a notebook whose needs failed gets
    ``not_run(name, failed needs)`` instead of running. After a failure no new notebook starts
    (unless ``keep_going``); running ones finish. Interrupted (Ctrl-C, SIGTERM, an error in
    ``finish``), it kills every papermill process and its kernel, calls ``interrupted()`` and raises.
    """
    done: dict[str, Record] = {}
    pending = list(names)

    def failed_needs(name: str) -> list[str]:
        return [n for n in needs[name] if n in done and not done[n].ok]

    def record(name: str, rec: Record) -> None:
        done[name] = rec
        finish(rec, done)

    with futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        running: dict[futures.Future, str] = {}
        try:
            while pending or running:
                stop = not keep_going and any(not r.ok for r in done.values())
                for name in [n for n in pending if not stop and failed_needs(n)]:
                    pending.remove(name)
                    record(name, not_run(name, failed_needs(name)))
                ready = [n for n in pending if all(m in done for m in needs[n])]
                while ready and len(running) < jobs and not stop:
                    name = ready.pop(0)
                    pending.remove(name)
                    running[pool.submit(execute, name)] = name
                if not running:
                    break
                finished, _ = futures.wait(running, return_when=futures.FIRST_COMPLETED)
                for future in finished:
                    record(running.pop(future), future.result())
        except BaseException:
            kill_running()
            interrupted()
            raise
    return done
