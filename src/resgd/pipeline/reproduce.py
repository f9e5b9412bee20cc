"""One way every part of the book is reproduced without Jupyter, and how its outputs are published.

A study (``theory``, ``collapse``, ``experiments``) describes a part by a function that computes
and returns :class:`Outputs` (figures, and files for the figures and the results folders);
:func:`reproduce_part` does the rest the same way for all of them:

1. every output folder is checked to be writable **before** any work starts (a read-only
   figures folder is reported at once, not after the sweep);
2. the part is computed and drawn;
3. its files are **published together** (:func:`publish`), by a write-ahead record under one lock:
   every file is written completely into a staging folder beside its destination, each stage
   describes its own moves (relative to itself and its folder), and one commit record, written
   atomically into the first stage, lists every stage by name; only then are the files moved into
   place. **Under the publish lock of every folder a commit spans, any stage found was left by a
   run that is no longer publishing** (whatever its pid or host), so the next run completes it if a
   commit record lists it and removes it otherwise, before it writes anything: outputs are all old
   or all new, and a file written after a commit is never replaced by it. Moves are resolved where
   the stage now is (a renamed or copied folder completes its own files, not the original's), and
   cross to another file system by copy-then-rename. SIGTERM and SIGINT after the commit act once
   every move is done; runs publishing into the same folders take turns (:func:`publish_lock`).
"""

from __future__ import annotations

import errno
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

from ..infra.atomic import write_with
from ..infra.file_lock import FileLock, lock_order, lock_owner, try_lock
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
    runs that publish into the same folders take turns (:func:`publish_lock`, held on every folder
    written and every existing one, so a commit spanning both is completed only by their holder).
    Returns label → final path (a figure ``name`` → its PNG, ``name.pdf`` → its PDF).
    """
    import matplotlib.pyplot as plt

    from ..plots import figures_dir as resolve_figures_dir
    from ..plots import save_figure

    roots = {"figures": resolve_figures_dir(figures_dir), "results": resolve_results_dir(results_dir)}
    stages: dict[str, Path] = {}
    moves: dict[str, list[tuple[Path, Path]]] = {}
    paths: dict[str, Path] = {}

    def stage(root: str) -> Path:
        if root not in stages:
            stages[root] = Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{os.getpid()}-", dir=roots[root])).resolve()
            moves[root] = []
        return stages[root]

    used = [roots["figures"]] * bool(outputs.figures or outputs.figure_files) + [roots["results"]] * bool(outputs.result_files)
    with publish_lock(_spanned(used, roots.values())):
        committed = False
        try:
            for name, fig in outputs.figures.items():
                saved = save_figure(fig, name, stage("figures"))
                plt.close(fig)
                for ext, path in saved.items():
                    moves["figures"].append((path, roots["figures"] / path.name))
                    paths[name if ext == "png" else f"{name}.{ext}"] = roots["figures"] / path.name
            for root, files in (("figures", outputs.figure_files), ("results", outputs.result_files)):
                for label, (relative, writer) in files.items():
                    staged = write_with(stage(root) / relative, writer)
                    moves[root].append((staged, roots[root] / relative))
                    paths[label] = roots[root] / relative
            if not stages:
                return paths
            order = list(stages.values())
            primary = order[0]
            for root, folder in stages.items():  # every stage describes its own moves before the commit
                _write_prepared(folder, roots[root], moves[root], primary / MANIFEST)
            with signals_deferred():  # SIGTERM/SIGINT act once the publish is complete
                write_with(primary / MANIFEST, lambda tmp: tmp.write_text(json.dumps({  # the one commit point
                    "format": 2, "stages": [{"id": f.name, "abs": str(f), "rel": os.path.relpath(f, primary)} for f in order]})))
                committed = True
                _finish_commit(primary, keep_newer=False)  # under the lock since the commit: nothing is newer
        finally:
            if not committed:  # never committed: roll back (the outputs stay as they were)
                for folder in stages.values():
                    shutil.rmtree(folder, ignore_errors=True)
            # committed: a stage is removed only once its moves are done; after a failure the stages
            # stay, and the next publish into these folders completes them first
    return paths


def _spanned(written: Iterable[Path], outputs: Iterable[Path]) -> list[Path]:
    """The folders a publish locks: those it writes and every existing output folder, since a commit
    left there may span both and is completed only by the holder of both locks."""
    return list(dict.fromkeys([*written, *(f for f in outputs if f.is_dir())]))


PREPARED = "resgd-publish-prepared.json"
"""In every stage: its own moves (relative to the stage and to its folder) and where the commit record is."""
LOCK_NAME = ".resgd-publish.lock"


def _write_prepared(stage: Path, root: Path, moves: list[tuple[Path, Path]], manifest: Path) -> None:
    """A stage's description, written before the commit: its id (the folder's name, which a copy or a
    rename keeps), its moves relative to itself and to its folder (so a renamed or copied folder
    completes them where it now is), and the commit record's path, absolute and relative."""
    info = {"format": 2, "id": stage.name,  # a destination stays relative to its folder as named (symlinks followed then)
            "moves": [[os.path.relpath(staged, stage), os.path.relpath(final, root)] for staged, final in moves],
            "manifest": {"abs": str(manifest), "rel": os.path.relpath(manifest, stage)}}
    write_with(stage / PREPARED, lambda tmp: tmp.write_text(json.dumps(info)))


@contextmanager
def publish_lock(folders: Iterable[str | os.PathLike]) -> Iterator[None]:
    """Hold the publish lock of every folder (``<folder>/.resgd-publish.lock``, ``flock``, in the one
    global order :func:`resgd.infra.file_lock.lock_order`) and complete or roll back what a killed run
    left there, before anything else is written."""
    held: list[FileLock] = []
    folders = list(folders)
    for folder in folders:
        Path(folder).mkdir(parents=True, exist_ok=True)  # before its real path is known
    ordered = lock_order(folders)
    try:
        for folder in ordered:
            held.append(_lock_file(folder / LOCK_NAME))
        for folder in ordered:
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


def _move(staged: Path, final: Path) -> None:
    """``os.replace`` the staged file onto ``final``; onto another file system (a folder that is a
    symlink to another mount) by a copy beside ``final`` (its mtime kept) replaced onto it, then the
    staged file removed: the same all-or-nothing rename, where a plain rename cannot cross."""
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(staged, final)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".part", dir=final.parent)
        os.close(fd)
        try:
            shutil.copy2(staged, tmp)
            os.replace(tmp, final)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        staged.unlink()


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _finish_stage(stage: Path, committed_ns: int | None) -> None:
    """Complete one committed stage's moves where the stage now is, then remove it. A destination
    written after the commit (``committed_ns``; a later publish's file, or one written by hand) is
    newer than this one and is kept; ``None``: every move is made (the publish that just committed)."""
    info = _read_json(stage / PREPARED)
    root = stage.parent
    for move in (info.get("moves", []) if isinstance(info, dict) else []):
        if not (isinstance(move, list) and len(move) == 2 and all(_confined(p) for p in move)):
            print(f"publish: {stage / PREPARED}: a move {move!r} that leaves its folder is not made",
                  file=sys.stderr, flush=True)
            continue  # a record names paths inside the stage and the output folder, nothing else
        staged_rel, final_rel = move
        staged, final = stage / staged_rel, root / final_rel
        if not staged.exists():
            continue  # moved already (this is a rerun of the same completion)
        try:
            newer = committed_ns is not None and final.stat().st_mtime_ns > committed_ns
        except OSError:
            newer = False
        if newer:
            continue
        _move(staged, final)
    shutil.rmtree(stage, ignore_errors=True)


def _confined(relative: object) -> bool:
    """Whether a path from a record stays inside the folder it is relative to: a relative path
    with no ``..`` part (what a publish writes; anything else is a damaged or forged record)."""
    if not isinstance(relative, str) or not relative or os.path.isabs(relative):
        return False
    return ".." not in Path(relative).parts


def _stage_at(candidates: Iterable[Path], stage_id: str) -> Path | None:
    """The first candidate that is a stage folder named ``stage_id`` (a renamed or copied folder keeps it)."""
    for path in candidates:
        if path.name == stage_id and (path / PREPARED).is_file():
            return path
    return None


def _listed(record: object) -> list[dict]:
    """The stages a commit record of this layout lists (none for the earlier layout or an unreadable file)."""
    if not isinstance(record, dict) or "format" not in record:
        return []
    return [s for s in record.get("stages", []) if isinstance(s, dict)]


def _is_copy(stage: Path, listed: list[dict]) -> bool:
    """Whether ``stage`` is a copy: the place its record gives for it still holds another folder (the original)."""
    recorded = next((Path(s["abs"]) for s in listed if s.get("id") == stage.name and s.get("abs")), None)
    return recorded is not None and recorded != stage and recorded.exists()


def _finish_commit(primary: Path, keep_newer: bool = True) -> None:
    """Complete the commit whose record ``primary`` holds: its other stages first (where the record
    says, else where they are relative to ``primary``), the record's own stage last (the others
    look for it). A copied ``primary`` (its recorded place still holds the original) completes only
    its own moves: the original's stages belong to the original."""
    manifest = primary / MANIFEST
    record = _read_json(manifest)
    committed_ns = manifest.stat().st_mtime_ns if keep_newer else None
    if isinstance(record, list) or (isinstance(record, dict) and "moves" in record):
        return _finish_format_1(record)
    listed = _listed(record)
    if not _is_copy(primary, listed):
        for entry in listed:
            if entry.get("id") == primary.name:
                continue
            other = _stage_at([Path(entry.get("abs", "")), primary / entry.get("rel", "")], entry.get("id", ""))
            if other is not None:
                _finish_stage(other, committed_ns)
    _finish_stage(primary, committed_ns)


def _finish_format_1(record: dict | list) -> None:
    """A commit record of the earlier layout (absolute paths, moves in the record), left by a run of
    an earlier version: rolled forward as that version did, so its outputs are not lost."""
    record = {"stages": [], "moves": record} if isinstance(record, list) else record
    for staged, final in record.get("moves", []):
        if Path(staged).exists():
            _move(Path(staged), Path(final))
    for folder in reversed(record.get("stages", [])):
        shutil.rmtree(folder, ignore_errors=True)


def _commit_record(stage: Path) -> Path | None:
    """The commit record (manifest) that lists ``stage``: its own, or the first stage's, found from
    where ``stage`` now is, then where it was; None when the publish never committed (or its record
    was completed and removed before this stage was found)."""
    if (stage / MANIFEST).is_file():
        return stage / MANIFEST
    info = _read_json(stage / PREPARED)
    if isinstance(info, dict) and isinstance(info.get("manifest"), str):  # the earlier layout: an absolute path
        return Path(info["manifest"]) if (Path(info["manifest"])).is_file() else None
    where = info.get("manifest", {}) if isinstance(info, dict) else {}
    for candidate in (stage / where.get("rel", ""), Path(where.get("abs", ""))):
        record = _read_json(candidate) if candidate.name == MANIFEST else None
        if any(s.get("id") == stage.name for s in _listed(record)):
            return candidate
    return None


def recover_stages(folder: str | os.PathLike) -> None:
    """Finish or drop what an earlier run left in ``folder`` (called with its publish lock held, so
    no stage there belongs to a publish in progress, whatever its pid or host): a stage listed by a
    commit record is completed, any other was never committed and is removed."""
    for stale in sorted(Path(folder).glob(f"{STAGE_PREFIX}*")):
        stale = stale.resolve()
        if not stale.is_dir():
            continue  # completed meanwhile, as part of another stage's commit
        record = _commit_record(stale)
        if record is None:
            shutil.rmtree(stale, ignore_errors=True)
            continue
        listed = _listed(_read_json(record))
        if record.parent == stale or not listed:
            _finish_commit(record.parent)  # the record's own stage, or a stage of the earlier layout
        else:  # a stage the record lists: the whole commit is completed, unless this stage is a copy
            committed_ns = record.stat().st_mtime_ns
            if not _is_copy(stale, listed):
                _finish_commit(record.parent)
            if stale.exists():  # a copy (its original belongs to the original), or not found from the record
                _finish_stage(stale, committed_ns)


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
    with publish_lock(_spanned(folders[:2], [folders[0], resolve_results_dir(results_dir)])):
        pass  # a publish a killed run left half done is completed (or rolled back) before anything else
    use_style()
    return publish(compute(), figures_dir, results_dir)
