"""Running one notebook: jupytext stages its ``.md`` as an ``.ipynb``, papermill executes it in its
own process group with a wall-clock timeout, and only a notebook that ran to the end is published
as ``notebooks/NN_name.ipynb``.

1. ``notebooks/NN_name.md`` (MyST text notebook, the committed source) is converted by
   jupytext to an ``.ipynb`` under ``_build/notebook_inputs/`` (papermill cannot read text
   notebooks);
2. papermill executes it with kernel ``python3``, cwd ``notebooks/`` and no injected
   parameters: the notebooks' ``quick`` parameter reads ``RESGD_MODE``
   (:func:`resgd.publish.environment.notebook_quick`), so the executed notebook has the same cells
   as its source. Papermill writes its output, cell by cell, under ``_build/notebook_outputs/``;
   only a notebook that ran to the end is published (atomically, without papermill's per-cell run
   metadata, its input and output paths relative to the book's root) as ``notebooks/NN_name.ipynb``, the ``.md``'s jupytext pair, which is what Sphinx
   renders: ``jupytext --sync`` finds the pair in agreement, and a failed or timed-out run leaves
   nothing there for ``make html`` to render;
3. a failure becomes a :class:`~resgd.publish.report.Record` naming the cell, never an exception.

Why a module of its own: the kernel's process tree (papermill starts the kernel in a session of its
own) must be killed on a timeout or an interrupted build, wherever the notebook was scheduled
(:mod:`resgd.publish.schedule`); every papermill process running now is known here
(:func:`kill_running`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Mapping

from ..infra.atomic import write_with
from .environment import notebook_env
from .report import Record
from .toc import NOTEBOOK_DIR

KERNEL = "python3"
PARTIAL_DIR = Path("_build") / "notebook_outputs"
"""Where papermill writes while a notebook runs; a failed run's output stays here for a look."""


def md_to_ipynb(md: Path, ipynb: Path) -> None:
    """Convert a MyST text notebook to .ipynb (kernelspec python3 when the source has none)."""
    import jupytext

    nb = jupytext.read(md)
    nb.metadata.setdefault(
        "kernelspec", {"name": KERNEL, "display_name": "Python 3", "language": "python"}
    )
    ipynb.parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(nb, ipynb)


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
    work: Path | None = None,
    into: Path | None = None,
) -> Record:
    """Execute ``notebooks/<name>.md`` into ``notebooks/<name>.ipynb`` (into ``into`` when given: the
    book build's workspace, published with the build); never raises on failure. ``work``: the folder
    whose ``_build/`` holds papermill's input and output (default the book's root): two builds at
    once each have their own. A failed run's output is kept under the root's ``_build/`` for a look."""
    nb_dir = root / NOTEBOOK_DIR
    source = nb_dir / f"{name}.md"
    executed = nb_dir / f"{name}.ipynb"
    base = work or root
    staged = base / "_build" / "notebook_inputs" / f"{name}.ipynb"
    output = base / PARTIAL_DIR / f"{name}.ipynb"
    kept = root / PARTIAL_DIR / f"{name}.ipynb"
    start = time.perf_counter()

    def record(ok: bool, error: str | None = None) -> Record:
        if error is not None and executed.exists():
            error += f"\n(the previous {executed.relative_to(root)} is kept)"
        return Record(f"{NOTEBOOK_DIR}/{name}", mode, round(time.perf_counter() - start, 2), ok, error)

    def keep_partial() -> Path:
        if output != kept and output.exists():
            kept.parent.mkdir(parents=True, exist_ok=True)
            os.replace(output, kept)
        return kept

    if not source.is_file():
        return record(False, f"no source {source.relative_to(root)}")
    try:
        md_to_ipynb(source, staged)
    except Exception as exc:
        return record(False, f"jupytext could not read {source.relative_to(root)}: {_one_line(exc)}")
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
        log = _wait(proc, timeout, f"{NOTEBOOK_DIR}/{name}")
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        proc.communicate()
        partial = keep_partial()
        return record(False, f"timed out after {timeout:g} s; {describe_failure(partial)} (partial output: {partial.relative_to(root)})")
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    if proc.returncode != 0:
        tail = "\n".join(log.strip().splitlines()[-5:])
        partial = keep_partial()
        return record(False, f"{describe_failure(partial)} (output: {partial.relative_to(root)})\n"
                             f"--- papermill output (last lines) ---\n{tail}")
    publish(output, (into or nb_dir) / f"{name}.ipynb", base)
    return record(True)


def _one_line(exc: Exception) -> str:
    """An exception as one line (a YAML error spans several: problem, place, the line quoted)."""
    return " ".join(str(exc).split())


STOPPED_KERNEL_S = 30.0
"""How long a notebook's kernel (or papermill) may stay stopped (SIGSTOP, Ctrl-Z) before the build
names it on stderr: a stopped kernel makes no progress and says nothing until the timeout."""
WATCH_S = 5.0
"""How often the build looks at its notebooks' processes while it waits."""


def _wait(proc: subprocess.Popen, timeout: float, notebook: str) -> str:
    """Papermill's output once it ends (``TimeoutExpired`` after ``timeout`` s), naming on stderr,
    once, a process of its tree that has been stopped for :data:`STOPPED_KERNEL_S`."""
    deadline = time.monotonic() + timeout
    stopped_since: dict[int, float] = {}
    told: set[int] = set()
    while True:
        left = deadline - time.monotonic()
        try:
            log, _ = proc.communicate(timeout=max(0.0, min(left, WATCH_S)))
            return log
        except subprocess.TimeoutExpired:
            if left <= WATCH_S:
                raise subprocess.TimeoutExpired(proc.args, timeout) from None
        now, stopped = time.monotonic(), _stopped(proc)
        for pid in stopped:
            since = stopped_since.setdefault(pid, now)
            if now - since >= STOPPED_KERNEL_S and pid not in told:
                told.add(pid)
                print(f"book_build: {notebook}: process {pid} (its kernel or papermill) has been stopped for "
                      f"{now - since:.0f} s and makes no progress: resume it with `kill -CONT {pid}`, or end it "
                      f"with `kill -9 {pid}` (the notebook then fails and its previous page is kept)",
                      file=sys.stderr, flush=True)
        stopped_since = {pid: t for pid, t in stopped_since.items() if pid in stopped}  # resumed: counted anew


def _stopped(proc: subprocess.Popen) -> list[int]:
    """The stopped processes (SIGSTOP, SIGTSTP) of papermill's tree, its kernel's included."""
    import psutil

    try:
        parent = psutil.Process(proc.pid)
        tree = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    found = []
    for p in tree:
        try:
            if p.status() == psutil.STATUS_STOPPED:
                found.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return found


PAPERMILL_PATHS = ("input_path", "output_path")


def publish(output: Path, executed: Path, root: Path) -> None:
    """Write papermill's complete ``output`` to ``executed`` atomically, without its per-cell run metadata.

    The metadata (durations, status) would be synced into the ``.md`` by jupytext; so would the
    empty tag lists papermill adds, so each cell's metadata is its source's. The notebook-level
    ``papermill`` metadata (parameters, total duration) stays: jupytext keeps it out of the
    ``.md`` header. Its input and output paths become relative to ``root``: the notebook is the
    book's download, and the build machine's absolute paths say nothing to a reader.
    """
    import nbformat

    nb = nbformat.read(output, as_version=4)
    run = nb.metadata.get("papermill", {})
    for key in PAPERMILL_PATHS:
        if run.get(key):
            run[key] = os.path.relpath(run[key], root)
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



def kill_running() -> None:
    """Kill every papermill process running now, with its kernel (an interrupted build)."""
    with _LIVE_LOCK:
        for proc in list(_LIVE):
            kill_tree(proc)
