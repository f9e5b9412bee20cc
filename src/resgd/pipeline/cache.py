"""The one results cache: where results go, cache keys, verified atomic entries and per-entry locks.

An entry is one computed result (for the experiments: one training run's table) stored as
``<cache>/<key>.pkl``. What makes it trustworthy:

* **atomic**: written through :mod:`resgd.atomic`, so a reader sees the old entry or the whole new one;
* **verified**: the file holds the key it was written under and a SHA-256 of its content; an
  entry whose key is not its file's (another run's entry copied over it) or whose content does
  not match its checksum (edited or damaged) is not used: :meth:`ResultsCache.read` reports it
  (a :class:`CacheEntryRejected` warning) and returns None, so the caller recomputes;
* **locked**: :meth:`ResultsCache.lock` takes an exclusive lock per key
  (``<cache>/locks/<key>.lock``, POSIX ``flock``), so two runs on the same results folder do not
  compute the same entry twice: the second waits for the first and reuses its entry.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pickle
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import settings
from ..atomic import write_bytes

RESULTS_ENV = "RESGD_RESULTS_DIR"
ENTRY_FORMAT = "resgd-cache-entry/1"


class CacheEntryRejected(UserWarning):
    """A cache entry was found but not used (wrong key, checksum mismatch, unreadable); it is recomputed."""


def resolve_results_dir(directory: str | os.PathLike | None = None) -> Path:
    """Where results go: the argument, else ``$RESGD_RESULTS_DIR``, else ``./results`` (:mod:`resgd.settings`)."""
    return Path(directory) if directory else settings.results_dir()


def resolve_cache_dir(directory: str | os.PathLike | None = None) -> Path:
    """The run cache (training runs; not the download cache of :func:`resgd.settings.download_cache_dir`):
    the argument, else ``<results_dir()>/cache``."""
    return Path(directory) if directory else resolve_results_dir() / "cache"


def hash_key(payload: Any, length: int = 24) -> str:
    """A cache key: the first ``length`` hex digits of SHA-256 of ``payload`` as sorted JSON."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:length]


def _checksum(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ResultsCache:
    """Verified entries under one folder, one file per key."""

    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = resolve_cache_dir(directory)

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.pkl"

    def write(self, key: str, value: Any, *, data: dict[str, str] | None = None) -> Path:
        """Store ``value`` under ``key`` atomically, with the key, a checksum of its content and
        ``data``: the digest of each data set it was computed on (checked against the client's)."""
        content = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        record = {"format": ENTRY_FORMAT, "key": key, "sha256": _checksum(content), "content": content,
                  "data": dict(data or {})}
        return write_bytes(self.path(key), pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))

    def data_of(self, key: str) -> dict[str, str] | None:
        """The data digests stored with ``key``'s entry (None when absent or not trustworthy)."""
        path = self.path(key)
        if not path.is_file() or isinstance(self._problem(path, key), str):
            return None
        return pickle.loads(path.read_bytes()).get("data", {})

    def read(self, key: str) -> Any | None:
        """The value stored under ``key``, or None when absent or not trustworthy (then reported)."""
        path = self.path(key)
        if not path.is_file():
            return None
        problem = self._problem(path, key)
        if isinstance(problem, str):
            warnings.warn(f"cache entry {path} not used ({problem}); recomputing it", CacheEntryRejected, stacklevel=2)
            return None
        return problem[0]

    @staticmethod
    def _problem(path: Path, key: str) -> str | tuple[Any]:
        """What is wrong with the entry at ``path``, or ``(value,)`` when nothing is."""
        try:
            record = pickle.loads(path.read_bytes())
        except Exception as err:  # noqa: BLE001 - any damage means the entry is not used
            return f"unreadable: {type(err).__name__}"
        if not isinstance(record, dict) or record.get("format") != ENTRY_FORMAT:
            return "not a verified entry (written by an older version, or not by resgd)"
        if record.get("key") != key:
            return f"it holds the entry of key {record.get('key')!r}, not {key!r}"
        content = record.get("content")
        if not isinstance(content, bytes) or _checksum(content) != record.get("sha256"):
            return "its content does not match its checksum"
        try:
            return (pickle.loads(content),)
        except Exception as err:  # noqa: BLE001
            return f"content unreadable: {type(err).__name__}"

    @contextmanager
    def lock(self, key: str, *, wait: bool = True) -> Iterator[bool]:
        """Hold the exclusive lock of ``key`` for the block; yields False (without waiting) when
        ``wait=False`` and another process holds it."""
        handle = self.try_lock(key, wait=wait)
        try:
            yield handle is not None
        finally:
            if handle is not None:
                handle.close()

    def try_lock(self, key: str, *, wait: bool = False):
        """An open lock file holding ``key``'s exclusive lock (close it to release), or None when
        ``wait=False`` and another process holds it."""
        path = self.directory / "locks" / f"{key}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+b")  # noqa: SIM115 - closed by the caller, which releases the lock
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.close()
            return None
        except BaseException:
            handle.close()
            raise
        return handle
