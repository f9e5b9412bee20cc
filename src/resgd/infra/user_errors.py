"""Which errors are the user's or the machine's (bad data, a bad setting, a full or read-only disk),
and the one line that says so.

The command line prints that line instead of a traceback (which stays for bugs, and for everything
with ``--debug``): a traceback tells a user that the program is broken when the fix is theirs.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..validation import ConfigError, DataError, OutputError

EXIT_DATA_IO = 1
"""Exit status for bad or missing data and for files that cannot be written."""
EXIT_USAGE = 2
"""Exit status for a setting the program cannot use (as argparse's usage errors)."""

_WHERE = "--results-dir, --figures-dir, or $RESGD_CACHE_DIR for the data cache"
_HINTS = {
    errno.ENOSPC: f"the disk is full: free some space or write elsewhere ({_WHERE}), then run again",
    errno.EDQUOT: f"the disk quota is used up: free some space or write elsewhere ({_WHERE}), then run again",
    errno.EFBIG: f"a file reached the largest size allowed here (see `ulimit -f`): raise the limit or write elsewhere ({_WHERE}), then run again",
    errno.EACCES: f"this place is not writable: make it writable or write elsewhere ({_WHERE})",
    errno.EPERM: f"this place is not writable: make it writable or write elsewhere ({_WHERE})",
    errno.EROFS: f"the file system is read-only: write elsewhere ({_WHERE})",
    errno.ENOTDIR: f"a file stands where a folder is needed: move the file or choose another folder ({_WHERE})",
    errno.EEXIST: f"a file stands where a folder is needed: move the file or choose another folder ({_WHERE})",
    errno.EISDIR: "a folder stands where a file is needed: move the folder away",
    errno.EMFILE: "this process reached its limit of open files (`ulimit -n`): raise it (ulimit -n 1024), or run "
                  "with --jobs 1, then run again",
    errno.ENFILE: "the system reached its limit of open files: end other programs, or run with --jobs 1, then run again",
}


class StdoutError(OutputError):
    """Standard output cannot be written (a closed pipe, a full disk, closed from the start)."""


def stdout_failure(what: str) -> StdoutError:
    return StdoutError(f"standard output cannot be written ({what}): what the command printed is lost; send it to "
                       f"a file on a disk with room, or to a reader that reads it all (> /dev/null to discard it)")


class GuardedStdout:
    """Standard output whose write failures are a :class:`StdoutError` (an OSError of stdout names no
    file: it read "writing a file: Broken pipe"). :func:`resgd.cli.main` puts it in ``sys.stdout``."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as err:
            raise stdout_failure(err.strerror or type(err).__name__) from None

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as err:
            raise stdout_failure(err.strerror or type(err).__name__) from None

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def discard_stdout() -> None:
    """Point file descriptor 1 at /dev/null once its failure is reported, so that Python's own flush
    at exit does not fail again (an "Exception ignored" traceback and exit status 120)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


class ClusterError(RuntimeError):
    """The Dask cluster, or the local worker processes again and again, went away or could not be used
    mid-run; the message says what was kept and what to do."""


FULL_DISK = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
OUT_OF_FILES = frozenset({errno.EMFILE, errno.ENFILE})
MACHINE_LIMITS = FULL_DISK | OUT_OF_FILES
"""Errors of the machine that break other code on their way up (clean-up, a worker pool's start):
found behind whatever error they caused."""


def os_error_in_chain(exc: BaseException, errnos: frozenset[int] | None = None) -> OSError | None:
    """``exc`` if it is an :class:`OSError`, else the first one (with an errno in ``errnos``, if
    given) that it was raised from or during.

    Libraries can hide the real cause: after a full disk, matplotlib's clean-up of a PDF raises
    ``zlib.error: inconsistent stream state``, with the ``OSError(ENOSPC)`` only as its context.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError) and (current is exc or errnos is None or current.errno in errnos):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def describe_os_error(exc: OSError) -> str:
    """``<file>: <what happened>; <what to do>`` for an error of the file system."""
    where = exc.filename if exc.filename is not None else "writing a file"
    what = exc.strerror or str(exc)
    hint = _HINTS.get(exc.errno or 0)
    return f"{where}: {what}" + (f"; {hint}" if hint else "")


def describe(exc: BaseException) -> tuple[int, str] | None:
    """``(exit status, one-line message)`` for an error of the user or the machine; None for a bug."""
    if isinstance(exc, DataError):
        return EXIT_DATA_IO, str(exc)
    if isinstance(exc, ConfigError):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, OutputError):  # checked before any work; its message already says what to do
        return EXIT_DATA_IO, str(exc)
    if isinstance(exc, ClusterError):
        return EXIT_DATA_IO, str(exc)
    # An OSError, or a full disk or an open-file limit behind another error (they break clean-up
    # code and worker pools too); other errors raised while handling an OSError may be bugs and keep
    # their traceback.
    os_error = os_error_in_chain(exc, MACHINE_LIMITS)
    if os_error is not None and os_error.errno is not None:
        return EXIT_DATA_IO, describe_os_error(os_error)
    return None


class Stopped(KeyboardInterrupt):
    """SIGTERM (or SIGINT) received: raised like Ctrl-C so every ``finally`` and worker pool shuts
    down (joblib stops its workers on KeyboardInterrupt), then reported in one line."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """While the block runs (main thread only), SIGTERM, SIGINT and SIGHUP raise :class:`Stopped`.
    SIGHUP (the terminal closed) takes SIGTERM's path: the block's clean-up ends every child process
    (papermill and its kernel run in sessions of their own, which a closed terminal does not reach)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def describe_stop(exc: KeyboardInterrupt, what: str) -> tuple[int, str]:
    """``(128 + signal number, one line)`` for a stop: 143 for SIGTERM, 130 for SIGINT (Ctrl-C), 129 for SIGHUP."""
    signum = getattr(exc, "signum", signal.SIGINT)
    return 128 + signum, f"{what} stopped by {signal.Signals(signum).name}; its worker processes were ended"
