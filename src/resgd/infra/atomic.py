"""Atomic writes: a reader sees the old file or the complete new one, never a partial one.

Results, cache entries, the results store, figures, pages and data caches are written through here,
so an interrupted run leaves nothing half-written behind and can simply be started again. Four other
places make a file appear in one step their own way, each because a plain file rename does not do
what they need: the build pointer and the published links (:mod:`resgd.pipeline.reproduce`: symlinks
renamed over), the MKL stub (:mod:`resgd.infra.mkl_path`: a compiler's output renamed), the mode
stamp (:mod:`resgd.infra.mode_stamp`: hard-linked, so that two first runs cannot both stamp) and a
download (:mod:`resgd.data.download`: a temporary file checked before it is used).

A write goes to a temporary ``.<name>.<host>-<pid>.<random>.part`` beside the target. A process
killed inside that window cannot remove it, so the first write of a process into a folder removes
the folder's stale temporaries of this naming: those whose writer (host and pid in the name) is
gone. See :func:`clean_stale_temporaries`.
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .processes import start_time

HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:32] or "host"
TEMP_NAME = re.compile(r"^\.(?P<target>.+)\.(?P<host>[A-Za-z0-9-]+)-(?P<pid>\d+)\.[a-z0-9_]{8}\.part$")
"""Our temporaries: ``.<target>.<host>-<pid>.<8 random characters from mkstemp>.part``."""
OLD_TEMP_NAME = re.compile(r"^\.(?P<target>.+)\.[a-z0-9_]{8}\.part$")
"""Temporaries without their writer in the name, ``.<target>.<8 random characters>.part``: this
module's before it named the writer, and today a download's (``.download.<random>.part``,
:func:`resgd.data.download.downloaded`); judged by age alone (:data:`UNCHECKED_MAX_AGE_S`)."""
UNCHECKED_MAX_AGE_S = 24 * 3600.0
"""A temporary whose writer cannot be checked (another host, or no writer in the name) is stale after a
day (companion's choice): no write of this project takes that long."""
START_SLACK_S = 2.0
"""Process start times from ``/proc`` are exact to about a second (the boot time is whole seconds)."""

_cleaned: set[str] = set()
_cleaned_lock = threading.Lock()


def current_umask() -> int:
    """This process's umask (read by setting it and setting it back: there is no other way)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def temp_prefix(path: Path) -> str:
    """The start of the temporary file names for ``path`` written by this process."""
    return f".{path.name}.{HOST}-{os.getpid()}."


def writer_alive(pid: int, modified: float) -> bool:
    """Whether process ``pid`` of this host may still be writing a file last modified at ``modified``.

    False when no such process exists, or when the process with that pid started after the file
    was last written (the pid was reused); True when in doubt.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    started = start_time(pid)
    return started is None or started <= modified + START_SLACK_S


def is_stale_temporary(path: Path, now: float | None = None) -> bool:
    """Whether ``path`` is a temporary of :func:`atomic_path` that no live process is writing."""
    match = TEMP_NAME.match(path.name)
    if match is None and OLD_TEMP_NAME.match(path.name) is None:
        return False  # not ours
    try:
        modified = path.lstat().st_mtime
    except OSError:
        return False  # gone already
    now = time.time() if now is None else now
    if match is not None and match["host"] == HOST:
        return not writer_alive(int(match["pid"]), modified)
    return now - modified > UNCHECKED_MAX_AGE_S


def clean_stale_temporaries(directory: str | os.PathLike) -> list[Path]:
    """Remove the stale temporaries of :func:`atomic_path` in ``directory``; returns what was removed."""
    removed = []
    try:
        entries = [Path(entry.path) for entry in os.scandir(directory) if entry.name.endswith(".part")]
    except OSError:
        return removed
    for path in entries:
        if is_stale_temporary(path):
            try:
                path.unlink()
            except OSError:
                continue  # removed by another process, or not ours to remove
            removed.append(path)
    return removed


def _clean_once(directory: Path) -> None:
    """:func:`clean_stale_temporaries` on the first write of this process into ``directory``."""
    key = str(directory.resolve())
    with _cleaned_lock:
        if key in _cleaned:
            return
        _cleaned.add(key)
    clean_stale_temporaries(directory)


def _raise_naming_target(exc: OSError, tmp: str | None, path: Path) -> None:
    """Raise ``exc`` again, naming the target ``path`` instead of the temporary ``tmp`` (or of no file)."""
    if exc.errno is None or exc.filename not in (None, tmp):
        raise exc
    raise OSError(exc.errno, exc.strerror, str(path)) from exc  # the errno's subclass, e.g. PermissionError


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` in one rename.

    On an exception the temporary file is removed and ``path`` is left as it was; an
    :class:`OSError` that names the temporary file (or no file) is raised again naming ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _clean_once(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".part", dir=path.parent)
    except OSError as exc:
        _raise_naming_target(exc, exc.filename, path)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~current_umask())  # mkstemp makes 0600; published files get the usual mode
        os.replace(tmp_path, path)
    except OSError as exc:
        _raise_naming_target(exc, str(tmp_path), path)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_with(path: str | os.PathLike, writer: Callable[[Path], object]) -> Path:
    """Call ``writer(tmp_path)`` and move the result to ``path`` atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return write_with(path, lambda tmp: tmp.write_bytes(data))


def write_text(path: str | os.PathLike, text: str) -> Path:
    return write_with(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def json_text(obj: object) -> str:
    """The project's JSON layout: indented, sorted keys, one final newline."""
    return json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"


def write_json(path: str | os.PathLike, obj: object) -> Path:
    return write_text(path, json_text(obj))
