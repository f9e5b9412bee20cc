"""Execute the book's notebooks before ``jupyter-book build`` (whose own execution is off).

    python -m resgd.publish.build [--mode quick|full] [--only NAME] [--timeout SECONDS] [--jobs J]

For each notebook in ``_toc.yml`` order (entries under ``notebooks/``), up to ``--jobs`` at a
time (default 1; ``make book`` uses 2, see :func:`build`):

1. ``notebooks/NN_name.md`` (MyST text notebook, the committed source) is converted by
   jupytext to an ``.ipynb`` under ``_build/notebook_inputs/`` (papermill cannot read text
   notebooks);
2. papermill executes it with kernel ``python3``, cwd ``notebooks/`` and no injected
   parameters: the notebooks' ``quick`` parameter reads ``RESGD_MODE`` (:func:`notebook_quick`),
   so the executed notebook has the same cells as its source. Papermill writes its output, cell
   by cell, under ``_build/notebook_outputs/``; only a notebook that ran to the end is published
   (atomically, without papermill's per-cell run metadata) as ``notebooks/NN_name.ipynb``, the
   ``.md``'s jupytext pair, which is what Sphinx renders: ``jupytext --sync`` finds the pair in
   agreement, and a failed or timed-out run leaves nothing there for ``make html`` to render;
3. each notebook runs in its own process group with a wall-clock timeout.

Per-notebook wall times are printed and ``_build/execution_report.json`` is written atomically,
then rendered as the book's page ``book/execution.md`` (:mod:`resgd.publish.sphinx_ext`).
An execution error exits non-zero and names the notebook and the cell.

The quick/full setting comes from one place: ``--mode`` if given, else the environment
variable ``RESGD_MODE``, else ``"full"``. The notebooks' processes see ``RESGD_MODE`` (resolved)
and ``RESGD_FIGURES_DIR`` (the repository's ``figures/``).
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Sequence


from .. import settings
from ..infra.atomic import write_text, write_with
from ..infra.mkl_path import child_env
from .toc import NOTEBOOK_DIR, BookBuildError, find_root, select, toc_docs, toc_notebooks  # noqa: F401 - re-exported

MODES = settings.MODES
MODE_ENV = "RESGD_MODE"
DEFAULT_MODE = "full"
KERNEL = "python3"
# Wall-clock limit per notebook, by mode (override with --timeout).
DEFAULT_TIMEOUT_S = {"quick": 1800, "full": 4 * 3600}
REPORT = Path("_build") / "execution_report.json"
PARTIAL_DIR = Path("_build") / "notebook_outputs"
"""Where papermill writes while a notebook runs; a failed run's output stays here for a look."""
# Figures glued by myst-nb must be rich (image/png) outputs: a non-inline backend set in the
# caller's environment (e.g. MPLBACKEND=Agg on CI) would turn every glued figure into text.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
KERNEL_THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""The thread settings of the notebooks' kernels (:func:`notebook_env`): one intra-op thread each."""


@dataclass
class Record:
    notebook: str
    mode: str
    seconds: float
    ok: bool
    error: str | None = None
    engine: str = ""
    """How the notebook's steps were computed (:class:`EngineProbe`): engine version, MKL path, ISA, torch."""


_ENGINE_CODE = ("from resgd.core.engine import engine_path; p = engine_path(); "
                "print(', '.join(f'{k}={p[k]}' for k in ('engine', 'mkl_path', 'isa', 'torch')))")


class EngineProbe:
    """The engine path (:func:`resgd.core.engine.engine_path`) of a process started with the notebooks'
    environment, as one line (the reason when it cannot be asked): asked in a process started now and
    read by calling the object, so its start-up (torch's import, seconds) overlaps the first
    notebooks' instead of delaying them; :meth:`stop` ends it when the build is interrupted. Asked
    once per process and environment (the folders and the mode do not change the engine)."""

    _known: dict[frozenset, str] = {}
    PER_BUILD = ("RESGD_FIGURES_DIR", "RESGD_RESULTS_DIR", MODE_ENV)

    def __init__(self, env: Mapping[str, str]):
        self.key = frozenset((k, v) for k, v in env.items() if k not in self.PER_BUILD)
        self.answer: str | None = self._known.get(self.key)
        self.proc = None
        if self.answer is not None:
            return
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", _ENGINE_CODE], env=dict(env), stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True)
        except OSError as exc:
            self.proc, self.answer = None, f"unknown ({exc})"

    def __call__(self) -> str:
        if self.answer is None:
            try:
                out, _ = self.proc.communicate(timeout=300)
            except subprocess.TimeoutExpired as exc:
                self.stop()
                self.answer = f"unknown ({exc})"
            else:
                lines = out.strip().splitlines()
                self.answer = lines[-1] if self.proc.returncode == 0 and lines else "unknown"
                if self.answer != "unknown":
                    self._known[self.key] = self.answer
        return self.answer

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def resolve_mode(flag: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The build's mode: ``flag``, else ``$RESGD_MODE``, else ``full`` (the rule of :func:`resgd.settings.mode`)."""
    return settings.mode(flag, environ=environ)


def notebook_quick(environ: Mapping[str, str] | None = None) -> bool:
    """The notebooks' ``quick`` parameter: the same rule as :func:`resolve_mode`, for a notebook
    (``interactive``: unset ``$RESGD_MODE`` means quick in a session opened by hand).

    The book build sets ``RESGD_MODE`` for every notebook, so what it publishes follows the build's
    mode. Reading the mode here instead of injecting it with papermill keeps each executed
    notebook's cells identical to its ``.md`` source (papermill's ``-p quick False`` still overrides it).
    """
    return settings.mode(interactive=True, environ=environ) == "quick"


def notebook_env(root: Path, mode: str | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the notebooks execute in (the book build's, and JupyterLab's: :mod:`resgd.publish.lab`).

    ``mode=None`` leaves ``RESGD_MODE`` as ``base`` has it (a reader's session: quick unless set).
    """
    env = dict(os.environ if base is None else base)
    settings.absolute_paths(env)  # the kernels run in notebooks/: a relative folder would point there
    if mode is not None:
        env[MODE_ENV] = mode
    env["RESGD_FIGURES_DIR"] = str(root / "figures")
    # The results cache and the verdicts live at the repository root (the notebooks run in notebooks/).
    env.setdefault("RESGD_RESULTS_DIR", str(root / "results"))
    env["MPLBACKEND"] = INLINE_BACKEND
    # One intra-op thread in every kernel (and the workers it starts): notebooks run two at a time,
    # each with its own worker pool, and a kernel's second OpenMP thread only spins against them
    # (the twin tables' L̂ took 3-5x its CPU time in wall time at two threads under that load).
    env.update(KERNEL_THREADS)
    # The interpreter's scripts (jupytext, resgd, ...) first on PATH, as in an activated venv.
    bindir = str(Path(sys.executable).parent)
    if env.get("PATH", "").split(os.pathsep)[0] != bindir:
        env["PATH"] = os.pathsep.join(p for p in (bindir, env.get("PATH", "")) if p)
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # quiets debugpy in the kernel
    return child_env(env)  # opt-in $RESGD_MKL_INTEL_PATH: the kernels (and their workers) preload the stub


def claim_outputs(env: Mapping[str, str], mode: str) -> None:
    """Stamp the notebooks' figures folder with ``mode`` (a build of the other mode would overwrite its
    figures, whose names carry no mode: refused, :mod:`resgd.infra.mode_stamp`)."""
    from ..infra.mode_stamp import claim

    claim(env["RESGD_FIGURES_DIR"], mode, how_to_move="another checkout")  # results carry the mode in their names


def md_to_ipynb(md: Path, ipynb: Path) -> None:
    """Convert a MyST text notebook to .ipynb (kernelspec python3 when the source has none)."""
    import jupytext

    nb = jupytext.read(md)
    nb.metadata.setdefault(
        "kernelspec", {"name": KERNEL, "display_name": "Python 3", "language": "python"}
    )
    ipynb.parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(nb, ipynb)


NEEDS_KEY = "resgd"
"""A notebook's ``.md`` header may say which notebooks must have run before it, e.g.::

    resgd:
      needs: [04_jena, 05_sst2]

(with ``notebook_metadata_filter: resgd`` under ``jupytext:``, so ``jupytext --sync`` keeps it)."""


def notebook_needs(md: Path) -> list[str]:
    """The names of the notebooks ``md`` reads results from (its header's ``resgd: needs:``)."""
    import jupytext

    needs = jupytext.read(md).metadata.get(NEEDS_KEY, {}).get("needs", [])
    if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
        raise BookBuildError(f"{md}: header field {NEEDS_KEY}.needs must be a list of notebook names, got {needs!r}")
    return needs


def has_parameters_cell(ipynb: Path) -> bool:
    import nbformat

    nb = nbformat.read(ipynb, as_version=4)
    return any("parameters" in c.get("metadata", {}).get("tags", []) for c in nb.cells)


def describe_failure(executed: Path) -> str:
    """Name the cell that failed (or was running at a timeout) in a papermill output notebook."""
    try:
        import nbformat

        nb = nbformat.read(executed, as_version=4)
    except Exception as exc:  # no output notebook, or a truncated one
        return f"(no readable output notebook: {exc})"
    # Number code cells as in the .md source: from 1 (no cell is injected, see execute()).
    cells = [c for c in nb.cells if c.cell_type == "code"]
    running = None
    for number, cell in enumerate(cells, start=1):
        where = f"code cell {number} `{_first_line(cell.source)}`"
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return f"{where}: {out.get('ename')}: {out.get('evalue')}"
        if cell.get("metadata", {}).get("papermill", {}).get("status") == "running":
            running = f"{where} was running"
    return running or "(no failing cell recorded)"


def _first_line(source: str) -> str:
    lines = [ln for ln in source.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    line = lines[0].strip() if lines else "<empty>"
    return line if len(line) <= 60 else line[:57] + "..."


def execute(
    name: str,
    root: Path,
    mode: str,
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> Record:
    """Execute ``notebooks/<name>.md`` into ``notebooks/<name>.ipynb``; never raises on failure."""
    nb_dir = root / NOTEBOOK_DIR
    source = nb_dir / f"{name}.md"
    executed = nb_dir / f"{name}.ipynb"
    staged = root / "_build" / "notebook_inputs" / f"{name}.ipynb"
    output = root / PARTIAL_DIR / f"{name}.ipynb"
    start = time.perf_counter()

    def record(ok: bool, error: str | None = None) -> Record:
        if error is not None and executed.exists():
            error += f"\n(the previous {executed.relative_to(root)} is kept)"
        return Record(f"{NOTEBOOK_DIR}/{name}", mode, round(time.perf_counter() - start, 2), ok, error)

    if not source.is_file():
        return record(False, f"no source {source.relative_to(root)}")
    try:
        md_to_ipynb(source, staged)
    except Exception as exc:
        return record(False, f"jupytext could not read {source.relative_to(root)}: {exc}")
    if not has_parameters_cell(staged):
        print(f"book_build: warning: {source.relative_to(root)} has no cell tagged `parameters`;"
              " papermill needs one to set its parameters from the command line", file=sys.stderr)
    # A previous notebooks/NN.ipynb stays until the new one is complete: a failed
    # rebuild keeps the last good page, and the report says this run failed.
    output.parent.mkdir(parents=True, exist_ok=True)
    output.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "papermill", str(staged), str(output),
        "--kernel", KERNEL, "--cwd", str(nb_dir),
        "--no-progress-bar", "--log-level", "WARNING",
    ]
    proc = subprocess.Popen(
        cmd, env=dict(env or notebook_env(root, mode)), start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    with _LIVE_LOCK:
        _LIVE.add(proc)
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        proc.communicate()
        return record(False, f"timed out after {timeout:g} s; {describe_failure(output)} (partial output: {output.relative_to(root)})")
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    if proc.returncode != 0:
        tail = "\n".join(log.strip().splitlines()[-5:])
        return record(False, f"{describe_failure(output)} (output: {output.relative_to(root)})\n"
                             f"--- papermill output (last lines) ---\n{tail}")
    publish(output, executed)
    return record(True)


def publish(output: Path, executed: Path) -> None:
    """Write papermill's complete ``output`` to ``executed`` atomically, without its per-cell run metadata.

    The metadata (durations, status) would be synced into the ``.md`` by jupytext; so would the
    empty tag lists papermill adds, so each cell's metadata is its source's. The notebook-level
    ``papermill`` metadata (parameters, total duration) stays: jupytext keeps it out of the
    ``.md`` header.
    """
    import nbformat

    nb = nbformat.read(output, as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        if cell.metadata.get("tags") == []:
            del cell.metadata["tags"]
    write_with(executed, lambda tmp: nbformat.write(nb, tmp))
    output.unlink()


_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()
"""Papermill processes running now (several with ``jobs > 1``): killed if the build is interrupted."""


def kill_tree(proc: subprocess.Popen) -> None:
    """Kill papermill and its kernel (jupyter_client starts kernels in a session of their own)."""
    import psutil

    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def write_report(path: Path, records: Sequence[Record], mode: str, total: float, jobs: int = 1) -> None:
    """Write the execution report atomically (:mod:`resgd.infra.atomic`); ``jobs``: notebooks run at a time."""
    report = {
        "mode": mode,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "total_seconds": round(total, 2),
        "jobs": int(jobs),
        "ok": all(r.ok for r in records),
        "notebooks": [asdict(r) for r in records],
    }
    write_text(path, json.dumps(report, indent=2) + "\n")


def read_report(path: Path) -> list[Record]:
    """The records of an earlier report ([] when there is none or it cannot be read)."""
    try:
        return [Record(**r) for r in json.loads(path.read_text(encoding="utf8"))["notebooks"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []


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

    Why ``jobs = 2`` pays on a 2-core machine: much of a notebook is one busy core (kernel start,
    plotting, serial sweeps), and a second notebook fills the other. A notebook starts once every
    notebook of its header's ``needs`` (:func:`notebook_needs`) has run; the others start in TOC
    order. The results cache is safe for concurrent notebooks (per-entry locks). After a failure
    no new notebook starts (unless ``keep_going``; a notebook whose needs failed never starts);
    running ones finish. The report lists this run's notebooks; with ``only``, it also keeps the
    earlier records of the TOC's other notebooks, so that it always describes every executed
    notebook on disk.
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
    needs = {}
    for name in names:
        source = root / NOTEBOOK_DIR / f"{name}.md"
        wanted = notebook_needs(source) if source.is_file() else []
        unknown = [n for n in wanted if n not in toc]
        if unknown:
            raise BookBuildError(f"{source.relative_to(root)}: needs {unknown}, which the TOC does not list")
        needs[name] = [n for n in wanted if n in names]  # the others ran in an earlier build
    earlier = {  # kept in the report until this run replaces them (a failed build keeps the others' records)
        r.notebook: r for r in read_report(root / REPORT)
        if Path(r.notebook).name in toc and (root / f"{r.notebook}.ipynb").is_file()
    }
    timeout = timeout or DEFAULT_TIMEOUT_S[mode]
    for folder in ("figures", "results", "_build"):
        (root / folder).mkdir(exist_ok=True)
    env = notebook_env(root, mode)
    claim_outputs(env, mode)
    log(f"book_build: mode={mode}, {len(names)} notebook(s), {jobs} at a time, timeout {timeout:g} s each")
    done: dict[str, Record] = {}
    pending = list(names)
    start = time.perf_counter()

    def failed_needs(name: str) -> list[str]:
        return [n for n in needs[name] if n in done and not done[n].ok]

    engine = EngineProbe(env)  # asked beside the first notebooks; logged with the first record

    def finish(rec: Record) -> None:
        if not done:
            log(f"book_build: engine: {engine()}")
        rec.engine = engine()
        done[Path(rec.notebook).name] = rec
        log(f"  {rec.notebook:<32} {rec.seconds:8.1f} s  {'ok' if rec.ok else 'FAILED'}")
        merged = {**earlier, **{r.notebook: r for r in done.values()}}
        in_order = [merged[k] for k in (f"{NOTEBOOK_DIR}/{n}" for n in toc) if k in merged]
        write_report(root / REPORT, in_order, mode, time.perf_counter() - start, jobs)

    with futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        running: dict[futures.Future, str] = {}
        try:
            while pending or running:
                stop = not keep_going and any(not r.ok for r in done.values())
                for name in [n for n in pending if not stop and failed_needs(n)]:
                    pending.remove(name)
                    finish(Record(f"{NOTEBOOK_DIR}/{name}", mode, 0.0, False, f"not run: needs {failed_needs(name)}, which failed"))
                ready = [n for n in pending if all(m in done for m in needs[n])]
                while ready and len(running) < jobs and not stop:
                    name = ready.pop(0)
                    pending.remove(name)
                    running[pool.submit(execute, name, root, mode, timeout, env)] = name
                if not running:
                    break
                finished, _ = futures.wait(running, return_when=futures.FIRST_COMPLETED)
                for future in finished:
                    running.pop(future)
                    finish(future.result())
        except BaseException:
            with _LIVE_LOCK:
                for proc in list(_LIVE):
                    kill_tree(proc)
            engine.stop()
            raise
    engine()  # the probe ends here when no notebook ran
    from .sphinx_ext import write_execution_page

    write_execution_page(root)  # the report's page in the book (Sphinx rewrites it from the same JSON)
    log(f"book_build: {time.perf_counter() - start:.1f} s in all; report {REPORT}")
    return [done[n] for n in names if n in done]


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
