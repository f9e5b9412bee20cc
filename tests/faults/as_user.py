"""Run a function as an ordinary user, so that file permissions are real faults even when the tests run as root.

Root may read and write anything, so a ``chmod 000`` entry or a read-only folder is no fault for
root. :func:`run_as_user` forks, drops to ``nobody`` when the process is root (else stays the
same user), runs the function and sends its result back. The child runs only Python and file
code (no torch computation: OpenMP is not safe after ``fork``).
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

NOBODY = 65534


@contextmanager
def shared_folder():
    """A fresh folder every user may enter (``tmp_path`` lies below root's private folder)."""
    folder = Path(tempfile.mkdtemp(prefix="resgd-faults-", dir="/tmp"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        for path in [folder, *folder.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)


def run_as_user(fn: Callable[[], Any], *, limits: dict[int, int] | None = None) -> Any:
    """``fn()`` in a forked child (as ``nobody`` if we are root; ``limits``: resource → soft limit);
    returns its value, or raises AssertionError with the child's traceback."""
    import resource
    import signal

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        try:
            if limits:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
                for which, soft in limits.items():
                    resource.setrlimit(which, (soft, resource.getrlimit(which)[1]))
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            payload = ("ok", fn())
        except BaseException:  # noqa: BLE001 - sent back to the parent
            payload = ("error", traceback.format_exc())
        with os.fdopen(write, "wb") as out:
            out.write(pickle.dumps(payload))
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as incoming:
        data = incoming.read()
    os.waitpid(pid, 0)
    status, value = pickle.loads(data)
    if status == "error":
        raise AssertionError(f"in the child process:\n{value}")
    return value
