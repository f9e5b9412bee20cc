"""The builds of an output folder and the one pointer per mode that names the current one.

Why a module of its own: every publish (a ``reproduce`` part, :mod:`resgd.pipeline.reproduce`, and
the whole book, :mod:`resgd.publish.book_outputs`) writes a new build folder,
``<figures>/.resgd-builds/builds/<id>/`` (``figures/``, ``results/`` and ``book/`` inside, and the
mode), complete and fsynced, then replaces the symlink ``<figures>/.resgd-builds/current-<mode>``
by one ``rename(2)``: a reader sees the old build or the new one, whole, whatever signal or kill
comes when. Today's paths are relative links through the pointer. Builds no pointer names are
removed by the next publish. Publishes into the same folders take turns (:func:`publish_lock`).
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..validation import OutputError
from .atomic import current_umask
from .file_lock import FileLock, lock_order, lock_owner, try_lock
from .mode_stamp import MODES

HOME = ".resgd-builds"
"""The builds and their pointers, inside the figures folder (the one folder every part writes)."""
SIDES = ("figures", "results")
"""The sides of a build that have a folder of today's paths given by the caller."""
BOOK = "book"
"""The side of a build that holds the book build's own outputs at their paths in the book's root
(``notebooks/NN_name.ipynb``, ``_build/execution_report.json``, ``book/execution.md``)."""
STAGE_PREFIX = ".resgd-stage-"
"""Staging folders of earlier versions' publish (a write-ahead protocol): removed when found."""
WORKSPACE_ENV = "RESGD_BOOK_WORKSPACE"
"""Set by the book build for each notebook: the notebook's own workspace, whose ``figures/`` and
``results/`` its publishes write as plain files (:func:`workspace_of`)."""


def workspace_of(roots: dict[str, Path]) -> Path | None:
    """The book build's workspace the output folders ``roots`` are, or None: only when
    ``$RESGD_BOOK_WORKSPACE`` names a folder and ``roots`` are its ``figures/`` and ``results/``
    (a publish into other folders, or a stale setting, publishes by a switch as always)."""
    named = os.environ.get(WORKSPACE_ENV)
    if not named:
        return None
    work = Path(os.path.realpath(named))
    if all(os.path.realpath(roots[side]) == str(work / side) for side in SIDES) and work.is_dir():
        return work
    return None

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
        if not confined(target) or Path(target).parent != Path("builds"):
            return None
        build = self.home / target
        return build if build.is_dir() else None

    def new(self, mode: str, base: Path | None) -> Path:
        """A new build folder: ``base``'s files (hard links: a publish replaces files, never edits
        them), its folders made anew; the book's side too, so that a part's publish keeps the
        book build's executed notebooks and report."""
        self.folder.mkdir(parents=True, exist_ok=True)
        build = Path(tempfile.mkdtemp(prefix=f"{mode}-{time.strftime('%Y%m%dT%H%M%S')}-", dir=self.folder))
        os.chmod(build, 0o777 & ~current_umask())  # mkdtemp makes 0700: a group sharing the folder reads it
        for side in (*SIDES, BOOK):
            (build / side).mkdir()
            if base is not None and (base / side).is_dir():
                clone(base / side, build / side)
        return build

    def switch(self, mode: str, build: Path) -> None:
        """Make ``build`` the current one: everything in it fsynced, then the pointer replaced in one rename."""
        fsync_tree(build)
        tmp = self.home / f".current-{mode}.{os.getpid()}.tmp"
        tmp.unlink(missing_ok=True)
        os.symlink(os.path.join("builds", build.name), tmp)
        os.replace(tmp, self.pointer(mode))
        fsync_dir(self.home)

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


def adopt(builds: Builds, roots: dict[str, Path], mode: str, written: dict[str, set[str]],
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
            remove(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():  # a symlink to a folder elsewhere: its files are taken in
                dest.mkdir()
                clone(source, dest)
            elif source.is_file():
                link_or_copy(source, dest)
        for side in sides:
            link_absent(builds, roots[side], build, mode, side)
        builds.switch(mode, build)
    except BaseException:
        drop_unless_current(builds, mode, build)
        raise
    for side, relative in found:  # each shows what it showed: the build holds it as it was
        place_link(roots[side] / relative, builds.link_text(roots[side] / relative, mode, side, relative))


def drop_unless_current(builds: Builds, mode: str, build: Path) -> None:
    """After a failure or a signal: remove ``build`` unless the pointer names it already (the switch
    was made; a signal came after it)."""
    if builds.current(mode) != build:
        shutil.rmtree(build, ignore_errors=True)


def link_absent(builds: Builds, root: Path, build: Path, mode: str, side: str, written: set[str] = frozenset(),
                 relative: str = "") -> None:
    """A link at today's path for every entry of ``build``'s side that has none (inside a real
    folder there, one per file). A folder where a file of ``written`` goes is an error (before the
    switch); where another part's file goes, it is left (that part's next run names it)."""
    for name in os.listdir(build / side / relative):
        rel = os.path.join(relative, name)
        live = root / rel
        if not os.path.lexists(live):
            place_link(live, builds.link_text(live, mode, side, rel))
        elif live.is_dir() and not live.is_symlink():
            if not (build / side / rel).is_dir():
                if rel not in written:
                    continue
                raise IsADirectoryError(errno.EISDIR, "a folder stands where an output file goes: remove it; "
                                        "nothing was published, the outputs are as before", str(live))
            link_absent(builds, root, build, mode, side, written, rel)


def place_link(path: Path, text: str) -> None:
    """Put a symlink holding ``text`` at ``path`` (nothing there, a file or a link) in one rename."""
    tmp = path.parent / f".{path.name}.resgd-link-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    os.symlink(text, tmp)
    os.replace(tmp, path)


def clean_leftovers(builds: Builds, roots: dict[str, Path]) -> None:
    """What a killed publish (or an earlier version's) left: unnamed builds, half-placed links, and
    the earlier versions' staging folders (their files are not outputs)."""
    for root in roots.values():
        if root.is_dir():
            for left in root.glob(f"{STAGE_PREFIX}*"):
                shutil.rmtree(left, ignore_errors=True)
            for left in [*root.glob(".*.resgd-link-*"), *root.glob("*/.*.resgd-link-*")]:
                left.unlink(missing_ok=True)
    builds.remove_unused()


def clone(source: Path, target: Path) -> None:
    """Every file under ``source`` hard-linked under ``target`` (copied where a link cannot be made);
    folders made anew (writable, whatever their mode in ``source``); symlinks copied, not followed."""
    for entry in os.scandir(source):
        dest = target / entry.name
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), dest)
        elif entry.is_dir():
            dest.mkdir()
            clone(Path(entry.path), dest)
        elif entry.is_file():
            link_or_copy(Path(entry.path), dest)


def link_or_copy(source: Path, dest: Path) -> None:
    try:
        os.link(source, dest)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copy2(source, dest)


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def fsync_tree(folder: Path) -> None:
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
        fsync_dir(dirpath)


def fsync_dir(folder: str | os.PathLike) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def confined(relative: str) -> bool:
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
            held.append(lock_file(folder / LOCK_NAME))
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
about a second, and a notebook's stderr is printed on its page."""


def holder(path: Path) -> str:
    """Who holds the publish lock at ``path``, as its holder wrote it (pid and host), or what is wrong with it."""
    owner = lock_owner(path)
    if owner is not None:
        return f"run {owner[0]} on {owner[1]}"
    return f"a holder whose owner record in {path.name} cannot be read (not written by resgd, or damaged)"


def lock_file(path: Path, give_up_s: float | None = None) -> FileLock:
    """The publish lock of ``path`` (:func:`resgd.infra.file_lock.try_lock`), waiting for its holder (said
    once on stderr after :data:`TELL_AFTER_S`) at most :data:`PUBLISH_GIVE_UP_S`, then
    :class:`resgd.validation.OutputError` in one line."""
    give_up_s = PUBLISH_GIVE_UP_S if give_up_s is None else give_up_s
    told, start = False, time.monotonic()
    while (lock := try_lock(path)) is None:
        waited = time.monotonic() - start
        if not told and waited >= min(TELL_AFTER_S, give_up_s):
            print(f"publishing into {path.parent}: waiting for {holder(path)}, which publishes there now "
                  f"(at most {give_up_s:g} s)", file=sys.stderr, flush=True)
            told = True
        if waited >= give_up_s:
            raise OutputError(
                f"publishing into {path.parent}: {holder(path)} has held its publish lock for {waited:.0f} s "
                f"(stopped, hung or on another host): nothing of this run was published, its cached results "
                f"are kept; resume or end that run (or remove {path} if it is gone), then run again")
        time.sleep(LOCK_POLL_S)
    return lock
