"""One way every part of the book is reproduced without Jupyter, and how its outputs are published.

A study (``theory``, ``collapse``, ``experiments``) describes a part by a function that computes
and returns :class:`Outputs` (figures, and files for the figures and the results folders);
:func:`reproduce_part` does the rest the same way for all of them:

1. every output folder is checked to be writable **before** any work starts (a read-only
   figures folder is reported at once, not after the sweep);
2. the part is computed and drawn;
3. its files are **published by one rename** (:func:`publish`). Every publish writes a new build
   folder, ``<figures>/.resgd-builds/builds/<id>/`` (``figures/`` and ``results/`` inside, and the
   mode): the current build's files (hard links), then this part's new files, all fsynced; then it
   replaces one pointer, the symlink ``<figures>/.resgd-builds/current-<mode>``, by ``rename(2)``.
   Quick and full have their own pointer. Today's paths are links through the pointer: each name
   in the figures folder (``figures/f.png``) and each top folder in the results folder
   (``results/tables``, ``results/claims``, ...) is a symlink to ``.resgd-builds/current-<mode>/...``,
   so a reader sees the old build or the new one, whole, whatever signal or kill comes when.
   Builds no pointer names (replaced ones, or one a killed run left) are removed by the next
   publish. A file written at a today's path by other means (a notebook's ``glue_figure``, an older
   version's outputs) is taken into a build first, as it is, and then replaced by its link.
   The run cache (``results/cache``) is not an output: it keeps its own atomic writes, untouched.
   Runs publishing into the same folders take turns (:func:`publish_lock`).
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..infra.atomic import current_umask, write_with
from ..infra.file_lock import FileLock, lock_order, lock_owner, try_lock
from ..infra.mode_stamp import MODES
from ..validation import OutputError
from .cache import resolve_cache_dir, resolve_results_dir

Writer = Callable[[Path], object]
HOME = ".resgd-builds"
"""The builds and their pointers, inside the figures folder (the one folder every part writes)."""
SIDES = ("figures", "results")
STAGE_PREFIX = ".resgd-stage-"
"""Staging folders of earlier versions' publish (a write-ahead protocol): removed when found."""


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
            results_dir: str | os.PathLike | None = None, mode: str | None = None) -> dict[str, Path]:
    """Write every output of ``outputs`` into a new build beside the current one's files, then switch
    the mode's pointer to it in one rename (see the module docstring): old or new outputs, whole,
    under any signal or kill. ``mode``: quick or full (default: ``$RESGD_MODE``, else full); the
    figures folder is stamped with it (:mod:`resgd.infra.mode_stamp`), here too, so that outputs
    and stamp cannot part (a folder removed mid-run is stamped again). Runs that publish into the
    same folders take turns (:func:`publish_lock`). Returns label → path at today's place (a figure
    ``name`` → its PNG, ``name.pdf`` → its PDF)."""
    from .. import settings
    from ..infra.mode_stamp import claim
    from ..plots import figures_dir as resolve_figures_dir

    mode = settings.mode(mode)
    roots = {"figures": resolve_figures_dir(figures_dir), "results": resolve_results_dir(results_dir)}
    files = {"figures": outputs.figure_files, "results": outputs.result_files}
    for side, entries in files.items():
        for label, (relative, _) in entries.items():
            if not _confined(str(relative)):
                raise OutputError(f"output {label!r}: {str(relative)!r} is not a path inside the {side} folder "
                                  f"(relative, without '..'); nothing was published")
    written = {side: {Path(relative).parts[0] for relative, _ in files[side].values()} for side in SIDES}
    written["figures"] |= {f"{name}.{ext}" for name in outputs.figures for ext in ("png", "pdf")}
    sides = SIDES if outputs.result_files or roots["results"].is_dir() else ("figures",)
    with publish_lock([roots[side] for side in sides]):
        claim(roots["figures"], mode, how_to_move="--figures-dir or $RESGD_FIGURES_DIR")
        builds = Builds(roots["figures"])
        _clean_leftovers(builds, roots)
        _adopt(builds, roots, mode, written, sides)
        build = builds.new(mode, builds.current(mode))
        try:
            paths = _write(outputs, build, roots)
            (build / "mode").write_text(f"{mode}\n")
            for side in sides:  # a new name's link dangles until the switch: absent, as it was
                _link_absent(builds, roots[side], build, mode, side, {str(Path(r)) for r, _ in files[side].values()}
                             | ({*written["figures"]} if side == "figures" else set()))
            builds.switch(mode, build)  # the one commit point
        except BaseException:
            _drop_unless_current(builds, mode, build)
            raise
        builds.remove_unused()
    return paths


class Builds:
    """The builds of one figures folder (``<figures>/.resgd-builds``) and their pointers, one per mode."""

    def __init__(self, figures: Path):
        self.home = figures / HOME
        self.folder = self.home / "builds"

    def pointer(self, mode: str) -> Path:
        return self.home / f"current-{mode}"

    def current(self, mode: str) -> Path | None:
        """The build ``mode``'s pointer names (None without one): a folder of ``builds/``, nothing else."""
        try:
            target = os.readlink(self.pointer(mode))
        except OSError:
            return None
        if not _confined(target) or Path(target).parent != Path("builds"):
            return None
        build = self.home / target
        return build if build.is_dir() else None

    def new(self, mode: str, base: Path | None) -> Path:
        """A new build folder: ``base``'s files (hard links: a publish replaces files, never edits
        them), its folders made anew."""
        self.folder.mkdir(parents=True, exist_ok=True)
        build = Path(tempfile.mkdtemp(prefix=f"{mode}-{time.strftime('%Y%m%dT%H%M%S')}-", dir=self.folder))
        os.chmod(build, 0o777 & ~current_umask())  # mkdtemp makes 0700: a group sharing the folder reads it
        for side in SIDES:
            (build / side).mkdir()
            if base is not None and (base / side).is_dir():
                _clone(base / side, build / side)
        return build

    def switch(self, mode: str, build: Path) -> None:
        """Make ``build`` the current one: everything in it fsynced, then the pointer replaced in one rename."""
        _fsync_tree(build)
        tmp = self.home / f".current-{mode}.{os.getpid()}.tmp"
        tmp.unlink(missing_ok=True)
        os.symlink(os.path.join("builds", build.name), tmp)
        os.replace(tmp, self.pointer(mode))
        _fsync_dir(self.home)

    def remove_unused(self) -> None:
        """Remove every build no pointer names (replaced ones; one a killed run left), and stray pointers."""
        kept = {self.current(mode) for mode in MODES}
        for build in (self.folder.iterdir() if self.folder.is_dir() else ()):
            if build not in kept:
                shutil.rmtree(build, ignore_errors=True)
        for tmp in self.home.glob(".current-*.tmp"):
            tmp.unlink(missing_ok=True)

    def link_text(self, live: Path, mode: str, side: str, relative: str) -> str:
        """What the link at ``live`` (``relative`` in its side's folder) holds: the path through
        ``mode``'s pointer, relative to the link's folder (a moved checkout keeps its links)."""
        return os.path.relpath(os.path.join(os.path.realpath(self.home), f"current-{mode}", side, relative),
                               os.path.realpath(live.parent))

    def is_link(self, live: Path, side: str, relative: str) -> bool:
        """Whether ``live`` is one of this folder's links (through either mode's pointer)."""
        try:
            text = os.readlink(live)
        except OSError:
            return False
        return text in {self.link_text(live, mode, side, relative) for mode in MODES}


def _write(outputs: Outputs, build: Path, roots: dict[str, Path]) -> dict[str, Path]:
    """Write ``outputs`` into ``build``; an error names the path at today's place, not the build's."""
    import matplotlib.pyplot as plt

    from ..plots import save_figure

    paths: dict[str, Path] = {}
    try:
        for name, fig in outputs.figures.items():
            saved = save_figure(fig, name, build / "figures")
            plt.close(fig)
            for ext, path in saved.items():
                paths[name if ext == "png" else f"{name}.{ext}"] = roots["figures"] / path.name
        for side, files in (("figures", outputs.figure_files), ("results", outputs.result_files)):
            for label, (relative, writer) in files.items():
                write_with(build / side / relative, writer)
                paths[label] = roots[side] / relative
    except OSError as exc:
        for side in SIDES:
            if exc.filename and exc.errno is not None and Path(exc.filename).is_relative_to(build / side):
                live = roots[side] / Path(exc.filename).relative_to(build / side)
                raise OSError(exc.errno, f"{exc.strerror}; nothing was published, the outputs are as before",
                              str(live)) from exc
        raise
    return paths


def _adopt(builds: Builds, roots: dict[str, Path], mode: str, written: dict[str, set[str]],
           sides: Iterable[str]) -> None:
    """Take files at today's paths that are not links into a build (an older version's outputs, a
    notebook's ``glue_figure``) into a build as they are, switch to it, then replace each by its
    link in one rename: what a reader sees does not change, and the next build starts from it. A
    real folder at today's path stays a folder (a rename cannot put a link in its place): its files
    become links, one by one."""
    current = builds.current(mode)
    found: list[tuple[str, str]] = []

    def walk(side: str, relative: str) -> None:
        live = roots[side] / relative
        if builds.is_link(live, side, relative):
            return
        if live.is_dir() and not live.is_symlink():
            for name in sorted(os.listdir(live)):
                if not name.startswith("."):  # temporaries, locks
                    walk(side, os.path.join(relative, name))
        elif os.path.lexists(live):
            found.append((side, relative))

    for side in sides:
        names = set(written[side]) | (set(os.listdir(current / side)) if current is not None else set())
        if side == "figures":
            names |= {n for n in os.listdir(roots[side]) if not n.startswith(".")}
        for name in sorted(names):
            if os.path.lexists(roots[side] / name):
                walk(side, name)
    if not found:
        return
    build = builds.new(mode, current)
    try:
        for side, relative in found:
            source, dest = roots[side] / relative, build / side / relative
            _remove(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():  # a symlink to a folder elsewhere: its files are taken in
                dest.mkdir()
                _clone(source, dest)
            elif source.is_file():
                _link_or_copy(source, dest)
        for side in sides:
            _link_absent(builds, roots[side], build, mode, side)
        builds.switch(mode, build)
    except BaseException:
        _drop_unless_current(builds, mode, build)
        raise
    for side, relative in found:  # each shows what it showed: the build holds it as it was
        _place_link(roots[side] / relative, builds.link_text(roots[side] / relative, mode, side, relative))


def _drop_unless_current(builds: Builds, mode: str, build: Path) -> None:
    """After a failure or a signal: remove ``build`` unless the pointer names it already (the switch
    was made; a signal came after it)."""
    if builds.current(mode) != build:
        shutil.rmtree(build, ignore_errors=True)


def _link_absent(builds: Builds, root: Path, build: Path, mode: str, side: str, written: set[str] = frozenset(),
                 relative: str = "") -> None:
    """A link at today's path for every entry of ``build``'s side that has none (inside a real
    folder there, one per file). A folder where a file of ``written`` goes is an error (before the
    switch); where another part's file goes, it is left (that part's next run names it)."""
    for name in os.listdir(build / side / relative):
        rel = os.path.join(relative, name)
        live = root / rel
        if not os.path.lexists(live):
            _place_link(live, builds.link_text(live, mode, side, rel))
        elif live.is_dir() and not live.is_symlink():
            if not (build / side / rel).is_dir():
                if rel not in written:
                    continue
                raise IsADirectoryError(errno.EISDIR, "a folder stands where an output file goes: remove it; "
                                        "nothing was published, the outputs are as before", str(live))
            _link_absent(builds, root, build, mode, side, written, rel)


def _place_link(path: Path, text: str) -> None:
    """Put a symlink holding ``text`` at ``path`` (nothing there, a file or a link) in one rename."""
    tmp = path.parent / f".{path.name}.resgd-link-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    os.symlink(text, tmp)
    os.replace(tmp, path)


def _clean_leftovers(builds: Builds, roots: dict[str, Path]) -> None:
    """What a killed publish (or an earlier version's) left: unnamed builds, half-placed links, and
    the earlier versions' staging folders (their files are not outputs)."""
    for root in roots.values():
        if root.is_dir():
            for left in root.glob(f"{STAGE_PREFIX}*"):
                shutil.rmtree(left, ignore_errors=True)
            for left in [*root.glob(".*.resgd-link-*"), *root.glob("*/.*.resgd-link-*")]:
                left.unlink(missing_ok=True)
    builds.remove_unused()


def _clone(source: Path, target: Path) -> None:
    """Every file under ``source`` hard-linked under ``target`` (copied where a link cannot be made);
    folders made anew (writable, whatever their mode in ``source``); symlinks copied, not followed."""
    for entry in os.scandir(source):
        dest = target / entry.name
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), dest)
        elif entry.is_dir():
            dest.mkdir()
            _clone(Path(entry.path), dest)
        elif entry.is_file():
            _link_or_copy(Path(entry.path), dest)


def _link_or_copy(source: Path, dest: Path) -> None:
    try:
        os.link(source, dest)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copy2(source, dest)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def _fsync_tree(folder: Path) -> None:
    """Every file and folder under ``folder`` on disk before the switch names it."""
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        _fsync_dir(dirpath)


def _fsync_dir(folder: str | os.PathLike) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _confined(relative: str) -> bool:
    """Whether a relative path stays inside the folder it is relative to (no ``..``, not absolute)."""
    if not isinstance(relative, str) or not relative or os.path.isabs(relative):
        return False
    return ".." not in Path(relative).parts


LOCK_NAME = ".resgd-publish.lock"


@contextmanager
def publish_lock(folders: Iterable[str | os.PathLike]) -> Iterator[None]:
    """Hold the publish lock of every folder (``<folder>/.resgd-publish.lock``, ``flock``, in the one
    global order :func:`resgd.infra.file_lock.lock_order`)."""
    held: list[FileLock] = []
    folders = list(folders)
    for folder in folders:
        Path(folder).mkdir(parents=True, exist_ok=True)  # before its real path is known
    try:
        for folder in lock_order(folders):
            held.append(_lock_file(folder / LOCK_NAME))
        yield
    finally:
        for lock in reversed(held):
            lock.close()


PUBLISH_GIVE_UP_S = 120.0
"""How long a run waits for another run's publish (seconds of writing) before it stops in one line:
the holder may be stopped (SIGSTOP), hung, or on another host with a skewed clock. Measured on the
waiter's own monotonic clock, so no clock but its own counts."""
LOCK_POLL_S = 0.25
TELL_AFTER_S = 5.0
"""A wait for another run's publish is said on stderr only once it lasts this long: a publish takes
about a second, two notebooks of one book build often publish at once, and a notebook's stderr is
printed on its page."""


def _holder(path: Path) -> str:
    """Who holds the publish lock at ``path``, as its holder wrote it (pid and host), or what is wrong with it."""
    owner = lock_owner(path)
    if owner is not None:
        return f"run {owner[0]} on {owner[1]}"
    return f"a holder whose owner record in {path.name} cannot be read (not written by resgd, or damaged)"


def _lock_file(path: Path, give_up_s: float | None = None) -> FileLock:
    """The publish lock of ``path`` (:func:`resgd.infra.file_lock.try_lock`), waiting for its holder (said
    once on stderr after :data:`TELL_AFTER_S`) at most :data:`PUBLISH_GIVE_UP_S`, then
    :class:`resgd.validation.OutputError` in one line."""
    give_up_s = PUBLISH_GIVE_UP_S if give_up_s is None else give_up_s
    told, start = False, time.monotonic()
    while (lock := try_lock(path)) is None:
        waited = time.monotonic() - start
        if not told and waited >= min(TELL_AFTER_S, give_up_s):
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


def reproduce_part(
    compute: Callable[[], Outputs],
    *,
    figures_dir: str | os.PathLike | None = None,
    results_dir: str | os.PathLike | None = None,
    writes_results: bool = False,
    mode: str | None = None,
) -> dict[str, Path]:
    """Check the output folders, ``compute()`` the part in the book's style, publish it in one switch."""
    from ..plots import figures_dir as resolve_figures_dir
    from ..plots import use_style

    folders = [resolve_figures_dir(figures_dir)]
    if writes_results:
        folders += [resolve_results_dir(results_dir), resolve_cache_dir()]
    check_writable(folders)
    use_style()
    return publish(compute(), figures_dir, results_dir, mode)
