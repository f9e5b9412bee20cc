"""The one exclusive file lock of the package: the results cache's per-entry locks
(:mod:`resgd.pipeline.cache`) and the publish lock (:mod:`resgd.pipeline.reproduce`) are both this.

POSIX ``flock`` on a file that holds its holder's pid and host (so a waiter can say whom it waits for,
and judge whether that process is gone or stopped). A released lock's file is removed while still
held; a locker therefore checks that the file it locked is still the one at the path, so removing a
released lock can never let two holders in. How long to wait, and what to say meanwhile, is each
caller's policy. A process that takes several (the publish locks of several folders) takes them in
one global order, :func:`lock_order`, so two processes cannot each hold one and wait for the other.
A file system without ``flock`` (NFS mounted without its lock service) is an
:class:`resgd.validation.OutputError` naming the folder, not a bare "No locks available".
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from collections.abc import Iterable
from pathlib import Path

from ..validation import OutputError

NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP})
"""What ``flock`` fails with where the file system has no locks (NFS without lockd, some FUSE mounts)."""


class FileLock:
    """A held lock; :meth:`close` removes its file, then releases it."""

    def __init__(self, path: Path, handle):
        self.path, self.handle = path, handle

    def close(self) -> None:
        if self.handle.closed:
            return
        try:
            self.path.unlink(missing_ok=True)  # while still held: a waiter re-checks the inode
        finally:
            self.handle.close()

    def __enter__(self) -> "FileLock":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def try_lock(path: str | os.PathLike, cls: type[FileLock] = FileLock) -> FileLock | None:
    """The lock of ``path`` (created if need be, its folder too) as a ``cls``, or None at once when
    another process holds it. The holder's pid and host are written into the file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        handle = open(path, "a+b")  # noqa: SIM115 - closed by FileLock.close, which releases the lock
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None
        except OSError as err:
            handle.close()
            if err.errno in NO_LOCKS:
                raise OutputError(
                    f"{path.parent}: its file system gives no file locks ({err.strerror}; NFS mounted without "
                    f"its lock service?), so runs sharing it cannot take turns: put the results and figures on a "
                    f"local disk (--results-dir and --figures-dir, or $RESGD_RESULTS_DIR and $RESGD_FIGURES_DIR), "
                    f"or mount it with locking") from None
            raise
        except BaseException:
            handle.close()
            raise
        try:
            same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:  # not a file its previous holder removed while we opened it
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()} {socket.gethostname()}\n".encode())
            handle.flush()
            return cls(path, handle)
        handle.close()


def lock_owner(path: str | os.PathLike) -> tuple[int, str] | None:
    """``(pid, host)`` written in a lock file, or None when unreadable (being written, or removed)."""
    try:
        pid, host = Path(path).read_text().split()
        return int(pid), host
    except (OSError, ValueError):
        return None


def lock_order(folders: Iterable[str | os.PathLike]) -> list[Path]:
    """``folders`` without repeats, by resolved real path: the one order in which every process takes
    their locks (a folder named two ways, through a symlink, is one folder: locked twice by one
    process, ``flock`` would make it wait for itself)."""
    return sorted({Path(os.path.realpath(folder)) for folder in folders})
