"""A small on-disk cache of parsed arrays, so the second load of a data set is quick.

Entries are ``.npz`` files under ``<cache_dir>/processed/``, named by a hash of everything
that determines their content: the source file's content (its SHA-256, read in chunks: a file
edited with its mtime restored is parsed again), the preprocessing parameters and the parser's
own source (:func:`source_digest`: an edited parser parses again, with no version to bump by hand).
Each entry also stores its key, checked on read: an entry copied over another's name is not served.
They are derived data: an unreadable or mismatched entry is ignored and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..infra.atomic import atomic_path


CHUNK_BYTES = 1 << 20
_HASHED: dict[tuple, str] = {}
"""This process's hashes by (path, device, inode, size, mtime, ctime): only a memo of computed hashes
(the ctime cannot be set back by hand), never a key by itself."""


def file_sha256(path: Path) -> str:
    """SHA-256 of the file's bytes, read in chunks (memory stays small whatever the size)."""
    stat = os.stat(path)
    memo = (str(Path(path).resolve()), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if memo not in _HASHED:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
                digest.update(chunk)
        _HASHED[memo] = digest.hexdigest()
    return _HASHED[memo]


def file_fingerprint(path: Path) -> dict[str, Any]:
    """The file's content (SHA-256 and size): changes whenever its bytes do, whatever its mtime says."""
    return {"sha256": file_sha256(path), "size": os.stat(path).st_size}


KEY_FIELD = "_key"
"""The array of an entry that holds its key (JSON text)."""


def source_digest(*modules: Any) -> str:
    """SHA-256 of the source files of ``modules`` (module objects or paths): a parser's version,
    derived from its code."""
    digest = hashlib.sha256()
    for module in modules:
        digest.update(Path(getattr(module, "__file__", module)).read_bytes() + b"\0")
    return digest.hexdigest()


def _key_text(key: dict[str, Any]) -> str:
    return json.dumps(key, sort_keys=True, default=str)


def entry_path(cache_dir: Path, prefix: str, key: dict[str, Any]) -> Path:
    """The cache file for ``key`` (any JSON-serializable description of the content)."""
    digest = hashlib.sha256(_key_text(key).encode()).hexdigest()
    return cache_dir / "processed" / f"{prefix}_{digest[:24]}.npz"


def load_entry(path: Path, key: dict[str, Any] | None = None) -> dict[str, np.ndarray] | None:
    """The arrays stored at ``path``, or None when missing, unreadable or (with ``key``) stored under
    another key than ``key``."""
    if not path.is_file():
        return None
    try:
        # Open the file ourselves: np.load leaks its handle when the archive is corrupt.
        with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
        return None
    stored_key = arrays.pop(KEY_FIELD, None)
    if key is not None and (stored_key is None or str(stored_key) != _key_text(key)):
        return None
    return arrays


def save_entry(path: Path, arrays: dict[str, np.ndarray], key: dict[str, Any] | None = None) -> None:
    """Write ``arrays`` (and ``key``, checked by :func:`load_entry`) to ``path`` atomically (readers
    never see a half-written entry)."""
    extra = {} if key is None else {KEY_FIELD: np.array(_key_text(key))}
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, **arrays, **extra)


def cache_writable(path: Path) -> bool:
    """Whether entries can be written below ``path`` (a read-only cache just is not used)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK)
