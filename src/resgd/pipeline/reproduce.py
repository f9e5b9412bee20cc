"""One way every part of the book is reproduced without Jupyter, and how its outputs are published.

A study (``theory``, ``collapse``, ``experiments``) describes a part by a function that computes
and returns :class:`Outputs` (figures, and files for the figures and the results folders);
:func:`reproduce_part` does the rest the same way for all of them:

1. every output folder is checked to be writable **before** any work starts (a read-only
   figures folder is reported at once, not after the sweep);
2. the part is computed and drawn;
3. its files are **published together** (:func:`publish`): each is written completely into a
   staging folder beside its destination, and only when all of them are ready are they moved
   into place. A failure before that point leaves every earlier output as it was, so tables,
   verdicts and figures never come from two different runs. Before the first move a manifest of
   all moves is written (atomically) into the first staging folder: it is the one commit point
   (the other staging folders name it). SIGTERM and SIGINT from there on act only once every move
   is done; a run killed (even with kill -9) after it leaves its stages and manifest behind, and
   the next publish into those folders first completes the moves (:func:`recover_stages`, roll
   forward); stages whose manifest does not exist were never committed and are removed (roll
   back). A stage is removed only after its moves are complete. So a part's outputs are all old
   or all new. Runs publishing into the same folders take turns (:func:`publish_lock`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..infra.atomic import write_with, writer_alive
from ..infra.file_lock import FileLock, lock_owner, try_lock
from ..validation import OutputError
from .cache import resolve_cache_dir, resolve_results_dir

Writer = Callable[[Path], object]
STAGE_PREFIX = ".resgd-stage-"
MANIFEST = "resgd-publish-manifest.json"


@dataclass
class Outputs:
    """What one part publishes. ``figures``: name → matplotlib figure (PNG + PDF in the figures
    folder); ``figure_files`` / ``result_files``: label → (path relative to the figures / results
    folder, writer called with a temporary path)."""

    figures: dict[str, Any] = field(default_factory=dict)
    figure_files: dict[str, tuple[str, Writer]] = field(default_factory=dict)
    result_files: dict[str, tuple[str, Writer]] = field(default_factory=dict)


def check_writable(folders: Iterable[str | os.PathLike]) -> None:
    """Raise :class:`OutputError` unless a file can be created in every folder (made if missing)."""
    for folder in dict.fromkeys(Path(f) for f in folders):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".resgd-write-check-", dir=folder)
            os.close(fd)
            os.unlink(probe)
        except OSError as err:
            raise OutputError(
                f"output folder {folder} is not writable ({err.strerror or err}); nothing was computed. "
                "Fix its permissions or choose another folder (--figures-dir / --results-dir, "
                "$RESGD_FIGURES_DIR / $RESGD_RESULTS_DIR)"
            ) from None


def publish(outputs: Outputs, figures_dir: str | os.PathLike | None = None,
            results_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Write every output of ``outputs`` into staging folders, then move all into place.

    All or nothing under SIGTERM, SIGINT and kill -9 at any instant (see the module docstring);
    runs that publish into the same folders take turns (:func:`publish_lock`).
    Returns label → final path (a figure ``name`` → its PNG, ``name.pdf`` → its PDF).
    """
    import matplotlib.pyplot as plt

    from ..plots import figures_dir as resolve_figures_dir
    from ..plots import save_figure

    roots = {"figures": resolve_figures_dir(figures_dir), "results": resolve_results_dir(results_dir)}
    stages: dict[str, Path] = {}
    moves: list[tuple[Path, Path]] = []
    paths: dict[str, Path] = {}

    def stage(root: str) -> Path:
        if root not in stages:
            folder = Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{os.getpid()}-", dir=roots[root]))
            if stages:  # a secondary stage: committed if and only if the first stage's manifest exists
                write_with(folder / PREPARED, lambda tmp: tmp.write_text(json.dumps(
                    {"manifest": str(next(iter(stages.values())) / MANIFEST)})))
            stages[root] = folder
        return stages[root]

    used = [roots["figures"]] * bool(outputs.figures or outputs.figure_files) + [roots["results"]] * bool(outputs.result_files)
    with publish_lock(used):
        committed = False
        try:
            for name, fig in outputs.figures.items():
                staged = save_figure(fig, name, stage("figures"))
                plt.close(fig)
                for ext, path in staged.items():
                    final = roots["figures"] / path.name
                    moves.append((path, final))
                    paths[name if ext == "png" else f"{name}.{ext}"] = final
            for root, files in (("figures", outputs.figure_files), ("results", outputs.result_files)):
                for label, (relative, writer) in files.items():
                    moves.append((write_with(stage(root) / relative, writer), roots[root] / relative))
                    paths[label] = roots[root] / relative
            if not stages:
                return paths
            order = list(stages.values())
            manifest = json.dumps({"stages": [str(folder) for folder in order],
                                   "moves": [[str(staged), str(final)] for staged, final in moves]})
            with signals_deferred():  # SIGTERM/SIGINT act once the publish is complete
                write_with(order[0] / MANIFEST, lambda tmp: tmp.write_text(manifest))  # the one commit point
                committed = True
                _complete(moves)
                _remove_stages(order)
        finally:
            if not committed:  # never committed: roll back (the outputs stay as they were)
                for folder in stages.values():
                    shutil.rmtree(folder, ignore_errors=True)
            # committed: the stages are removed only once every move is done; after a failure
            # they stay, and the next publish into these folders rolls them forward
    return paths


PREPARED = "resgd-publish-prepared.json"
"""In a secondary stage: the path of the manifest (in the first stage) that commits it."""
LOCK_NAME = ".resgd-publish.lock"


@contextmanager
def publish_lock(folders: Iterable[str | os.PathLike]) -> Iterator[None]:
    """Hold the publish lock of every folder (``<folder>/.resgd-publish.lock``, ``flock``, in a fixed
    order) and complete or roll back what a killed run left there, before anything else is written."""
    held: list[FileLock] = []
    try:
        for folder in sorted(dict.fromkeys(str(Path(f)) for f in folders)):
            Path(folder).mkdir(parents=True, exist_ok=True)
            held.append(_lock_file(Path(folder) / LOCK_NAME))
        for folder in sorted(dict.fromkeys(str(Path(f)) for f in folders)):
            recover_stages(folder)
        yield
    finally:
        for lock in reversed(held):
            lock.close()


PUBLISH_GIVE_UP_S = 120.0
"""How long a run waits for another run's publish (renames of seconds) before it stops in one line:
the holder may be stopped (SIGSTOP), hung, or on another host with a skewed clock. Measured on the
waiter's own monotonic clock, so no clock but its own counts."""
LOCK_POLL_S = 0.25


def _holder(path: Path) -> str:
    """Who holds the publish lock at ``path``, as its holder wrote it (pid and host), or "another run"."""
    owner = lock_owner(path)
    return f"run {owner[0]} on {owner[1]}" if owner else "another run"


def _lock_file(path: Path, give_up_s: float | None = None) -> FileLock:
    """The publish lock of ``path`` (:func:`resgd.infra.file_lock.try_lock`), waiting for its holder (said
    once on stderr) at most :data:`PUBLISH_GIVE_UP_S`, then :class:`resgd.validation.OutputError` in one line."""
    give_up_s = PUBLISH_GIVE_UP_S if give_up_s is None else give_up_s
    told, start = False, time.monotonic()
    while (lock := try_lock(path)) is None:
        waited = time.monotonic() - start
        if not told:
            print(f"publishing into {path.parent}: waiting for {_holder(path)}, which publishes there now "
                  f"(at most {give_up_s:g} s)", file=sys.stderr, flush=True)
            told = True
        if waited >= give_up_s:
            raise OutputError(
                f"publishing into {path.parent}: {_holder(path)} has held its publish lock for {waited:.0f} s "
                f"(stopped, hung or on another host): nothing of this run was published, its cached results "
                f"are kept; resume or end that run (or remove {path} if it is gone), then run again")
        time.sleep(LOCK_POLL_S)
    return lock


@contextmanager
def signals_deferred(signums: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> Iterator[None]:
    """SIGTERM and SIGINT received inside the block act when it ends (main thread only; elsewhere
    the block runs as is and kill -9 safety comes from the manifest)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in signums}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(received):
            signal.raise_signal(sig)


def _complete(moves: Iterable[tuple[Path, Path]]) -> None:
    """Move each staged file whose stage still holds it into place (again after a kill: idempotent)."""
    for staged, final in moves:
        if staged.exists():
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, final)


def _remove_stages(order: list[Path]) -> None:
    """The secondary stages first, the first stage (which holds the manifest) last."""
    for folder in reversed(order):
        shutil.rmtree(folder, ignore_errors=True)


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _roll_forward(manifest: object) -> None:
    if isinstance(manifest, list):  # the older layout: a list of moves
        manifest = {"stages": [], "moves": manifest}
    _complete((Path(staged), Path(final)) for staged, final in manifest.get("moves", []))
    _remove_stages([Path(folder) for folder in manifest.get("stages", [])])


def recover_stages(folder: str | os.PathLike) -> None:
    """Finish or drop what a killed run left in ``folder``: a stage whose manifest exists (its own,
    or for a secondary stage the first stage's) was committed, so its moves are completed; any other
    was not, so it is removed (live runs' stages are left alone)."""
    for stale in Path(folder).glob(f"{STAGE_PREFIX}*-*"):
        pid = stale.name[len(STAGE_PREFIX):].split("-", 1)[0]
        try:
            modified = stale.stat().st_mtime
        except OSError:
            continue  # removed by its own run meanwhile
        if not pid.isdigit() or writer_alive(int(pid), modified):
            continue
        manifest = _read_json(stale / MANIFEST)
        if manifest is None:
            pointer = _read_json(stale / PREPARED)
            if isinstance(pointer, dict) and isinstance(pointer.get("manifest"), str):
                manifest = _read_json(Path(pointer["manifest"]))
        if isinstance(manifest, (list, dict)):
            _roll_forward(manifest)
        shutil.rmtree(stale, ignore_errors=True)


def reproduce_part(
    compute: Callable[[], Outputs],
    *,
    figures_dir: str | os.PathLike | None = None,
    results_dir: str | os.PathLike | None = None,
    writes_results: bool = False,
) -> dict[str, Path]:
    """Check the output folders, ``compute()`` the part in the book's style, publish it together."""
    from ..plots import figures_dir as resolve_figures_dir
    from ..plots import use_style

    folders = [resolve_figures_dir(figures_dir)]
    if writes_results:
        folders += [resolve_results_dir(results_dir), resolve_cache_dir()]
    check_writable(folders)
    with publish_lock(folders[:2]):
        pass  # a publish a killed run left half done is completed (or rolled back) before anything else
    use_style()
    return publish(compute(), figures_dir, results_dir)
