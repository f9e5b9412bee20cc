"""Atomic writes: a reader sees the old file or the complete new one, never a partial one.

Every result, cache entry and figure the project writes goes through here, so an interrupted
run leaves nothing half-written behind and can simply be started again.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` in one rename.

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; published files get the usual mode
        os.replace(tmp_path, path)
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
