"""Run a function as an ordinary user, so that file permissions are real faults even when the tests run as root.

Root may read and write anything, so a ``chmod 000`` entry or a read-only folder is no fault for
root. :func:`run_as_user` forks, drops to ``nobody`` when the process is root (else stays the
same user), runs the function and sends its result back. The child runs only Python and file
code (no torch computation: OpenMP is not safe after ``fork``).
"""

from __future__ import annotations

import os
import pickle
import select
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

NOBODY = 65534
TIMEOUT_S = 120
"""A child that has not answered by then is killed and the test fails (it never hangs the suite)."""


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
    if pid == 0:  # the child: whatever happens, it never returns into pytest (os._exit in finally)
        try:
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
            try:
                data = pickle.dumps(payload)
            except Exception:  # noqa: BLE001 - an unpicklable value is reported, not raised in the child
                data = pickle.dumps(("error", traceback.format_exc()))
            with os.fdopen(write, "wb") as out:
                out.write(data)
        finally:
            os._exit(0)
    os.close(write)
    deadline = time.monotonic() + TIMEOUT_S
    chunks = []
    with os.fdopen(read, "rb") as incoming:
        while True:  # a child stuck (e.g. on a lock another thread held at fork) is killed, not waited on forever
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([incoming], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise AssertionError(f"run_as_user: the child gave no answer within {TIMEOUT_S} s (killed)")
            chunk = os.read(incoming.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.waitpid(pid, 0)
    status, value = pickle.loads(b"".join(chunks))
    if status == "error":
        raise AssertionError(f"in the child process:\n{value}")
    return value
