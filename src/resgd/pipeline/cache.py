"""The one results cache: where results go, cache keys, verified atomic entries and per-entry locks.

An entry is one computed result (for the experiments: one training run's table) stored as
``<cache>/<key>.pkl``. What makes it trustworthy:

* **atomic**: written through :mod:`resgd.infra.atomic`, so a reader sees the old entry or the whole new one;
* **verified**: the file holds the key it was written under and a SHA-256 of its content; an
  entry whose key is not its file's (another run's entry copied over it) or whose content does
  not match its checksum (edited or damaged) is not used: :meth:`ResultsCache.read` reports it
  (a :class:`CacheEntryRejected` warning) and returns None, so the caller recomputes;
* **from the code that ran it**: the entry records the code that computed it, as this process
  imported it (:func:`resgd.infra.source_hash.compute_hash`), and the engine; another code's entry
  is not used (the key holds what the numbers depend on besides the code: see
  :func:`resgd.experiments.configuration.entry_key`), so an edited step recomputes. A process whose
  compute modules were edited on disk since it imported them writes nothing
  (:func:`resgd.infra.source_hash.check_unchanged`: one line, rerun);
* **bounded**: an entry file larger than :data:`MAX_ENTRY_BYTES` is not read (reported, recomputed);
* **behind the results store**: :meth:`ResultsCache.read` first asks the results store
  (:mod:`resgd.pipeline.store`), whose entries ``make verify`` proves by re-executing them;
* **locked**: :meth:`ResultsCache.lock` takes an exclusive lock per key
  (``<cache>/locks/<key>.lock``, POSIX ``flock``), so two runs on the same results folder do not
  compute the same entry twice: the second waits for the first and reuses its entry. The lock
  file holds its owner's pid and host; a waiting run says which process it waits for
  (:meth:`ResultsCache.wait_lock`) and gives up waiting on an owner that is gone or has been
  stopped (SIGSTOP, Ctrl-Z) for more than :data:`STOPPED_GIVE_UP_S` seconds: it then computes the
  entry itself (entries are written atomically, so the worst case is the same entry written twice).
  An owner on another host cannot be looked at, so holders refresh their lock file's mtime every
  :data:`HEARTBEAT_S` seconds and a lock of another host unrefreshed for :data:`STOPPED_GIVE_UP_S`
  seconds (its owner stopped, or its host gone) is given up on the same way: unrefreshed means its
  mtime unchanged that long on this host's own monotonic clock (or dated that long ago), so a lock
  dated in the future by a clock ahead of this one's is not waited for longer; it is named at once.
  A released lock's file is removed (the locker checks that the file it locked is still the one
  at the path, so removal cannot let two processes hold one key).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import socket
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import settings
from ..infra.atomic import write_bytes
from ..infra import processes
from ..infra.file_lock import FileLock, lock_owner, try_lock
from . import store

RESULTS_ENV = "RESGD_RESULTS_DIR"
STOPPED_GIVE_UP_S = 120.0
"""A lock whose owner has been stopped this long (seconds) is not waited for any more."""
LOCK_POLL_S = 0.25
HEARTBEAT_S = 10.0
"""How often a held lock's file gets a fresh mtime (the sign of life an owner on another host gives)."""
UNREADABLE_NAME_S = 10.0
"""A lock whose owner record stays unreadable (not "pid host": another program's file, or damaged)
this long is named, with what to do (a record being written is unreadable for microseconds)."""
CLOCK_SLACK_S = 2.0
"""A lock dated further than this ahead of this host's clock is named (hosts set by NTP differ by
milliseconds; file systems round times to a second at most)."""
ENTRY_FORMAT = "resgd-cache-entry/1"
MAX_ENTRY_BYTES = 256 << 20
"""No entry resgd writes comes near this (a full-mode run's table is about 0.2 MB, a thousandth of it):
a larger file is not an entry (a sparse or runaway file); read whole, it could exhaust the memory."""


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
        self._given_up: set[tuple[int, str]] = set()  # owners stopped too long: not waited for again
        self._told: set[object] = set()  # owners (and owners' clocks) already named on stderr
        self._reported: set[tuple[str, int, int]] = set()  # rejected entries already reported
        self._computed_on: dict[str, str] = {}  # see computed_on

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.pkl"

    def write(self, key: str, value: Any, *, data: dict[str, str] | None = None, cpu_s: float | None = None) -> Path:
        """Store ``value`` under ``key`` atomically, with the key, a checksum of its content and
        ``data``: the digest of each data set it was computed on (checked against the client's);
        default: those of the enclosing :meth:`computed_on` block. ``cpu_s``: what computing it cost
        (the results store records it while ``make results`` fills it)."""
        from ..infra.source_hash import check_unchanged

        check_unchanged()  # else the old code's numbers under the identity a new process reads as the new code's
        content = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        record = {"format": ENTRY_FORMAT, "key": key, "sha256": _checksum(content), "content": content,
                  "data": dict(self._computed_on if data is None else data), "code": _code()}
        _fill_store(key, value, cpu_s)
        return write_bytes(self.path(key), pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))

    @contextmanager
    def computed_on(self, data: dict[str, str]) -> Iterator[None]:
        """Within the block, :meth:`write` records ``data`` (data set → digest) with each entry."""
        self._computed_on = dict(data)
        try:
            yield
        finally:
            self._computed_on = {}

    def read(self, key: str) -> Any | None:
        """The value stored under ``key``: from the results store if it has it, else from this cache
        when computed by the code this process runs; None when absent, computed by other code, or not
        trustworthy (then reported)."""
        stored = store.active()
        if stored is not None:
            value = stored.get(key)
            if value is not None:
                return value
        path = self.path(key)
        if not path.is_file():
            return None
        problem = self._problem(path, key)
        if problem is None:
            return None  # computed by other code: recomputed, as expected after an edit
        if isinstance(problem, str):
            stat = path.stat()
            seen = (key, stat.st_size, stat.st_mtime_ns)
            if seen not in self._reported:  # once per damaged file, however often it is looked at
                self._reported.add(seen)
                warnings.warn(f"cache entry {path} not used ({problem}); recomputing it", CacheEntryRejected, stacklevel=2)
            return None
        _fill_store(key, problem[0])
        return problem[0]

    def read_or_compute(self, key: str, compute: Callable[[], Any], *, refresh: bool = False) -> Any:
        """The value under ``key`` (:meth:`read`), else ``compute()`` written with what it cost; a result
        missing from a required store is an error instead (:func:`resgd.pipeline.store.check_complete`)."""
        value = None if refresh else self.read(key)
        if value is None:
            store.check_complete(1, 1)
            start = time.process_time()
            value = compute()
            self.write(key, value, cpu_s=time.process_time() - start)
        return value

    @staticmethod
    def _problem(path: Path, key: str) -> str | tuple[Any] | None:
        """What is wrong with the entry at ``path``, ``(value,)`` when nothing is, None when it was
        computed by other code than this process runs."""
        try:
            size = path.stat().st_size
            if size > MAX_ENTRY_BYTES:
                return f"{size} bytes: larger than any entry resgd writes, {MAX_ENTRY_BYTES >> 20} MiB at most; not read"
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
            value = pickle.loads(content)
        except Exception as err:  # noqa: BLE001
            return f"content unreadable: {type(err).__name__}"
        return (value,) if record.get("code") == _code() else None  # sound, but another code's

    @contextmanager
    def lock(self, key: str, *, wait: bool = True) -> Iterator[bool]:
        """Hold the exclusive lock of ``key`` for the block; yields False (without waiting) when
        ``wait=False`` and another process holds it."""
        handle = self.wait_lock(key) if wait else self.try_lock(key)
        try:
            yield handle is not None
        finally:
            if handle is not None:
                handle.close()

    def lock_path(self, key: str) -> Path:
        return self.directory / "locks" / f"{key}.lock"

    def try_lock(self, key: str, *, wait: bool = False) -> "Lock | None":
        """A :class:`Lock` holding ``key``'s exclusive lock (close it to release), or None when
        another process holds it. ``wait=True`` is :meth:`wait_lock` (which may also return None)."""
        if wait:
            return self.wait_lock(key)
        return try_lock(self.lock_path(key), Lock)

    def wait_lock(self, key: str, *, on_wait: Callable[[str], None] | None = None,
                  give_up_s: float | None = None) -> "Lock | None":
        """``key``'s lock once its owner releases it; None (give up waiting, compute without it) when
        the owner is gone or has been stopped for ``give_up_s`` (default :data:`STOPPED_GIVE_UP_S`)
        seconds, or (an owner on another host) has not refreshed its lock for that long, timed on this
        host's clock. ``on_wait(message)`` is told once which process it waits for, and at once when
        the lock is dated ahead of this host's clock (default: stderr)."""
        give_up_s = STOPPED_GIVE_UP_S if give_up_s is None else give_up_s
        say = on_wait or _say
        stopped_since = unreadable_since = None
        seen_mtime, refreshed_at = None, time.monotonic()
        while True:
            handle = self.try_lock(key)
            if handle is not None:
                return handle
            owner = lock_owner(self.lock_path(key))
            if owner in self._given_up:
                return None
            remote = owner is not None and owner[1] != socket.gethostname()
            state = process_state(owner) if owner is not None and not remote else None
            if owner not in self._told:  # once per owner, not once per entry
                who = f"process {owner[0]} on {owner[1]}" if owner is not None else "another process"
                limit = (f"given up if its lock is not refreshed for {give_up_s:g} s (it runs on another host, "
                         f"whose processes cannot be looked at from here)" if remote else
                         f"given up if that process is gone or stays stopped {give_up_s:g} s")
                say(f"cache entry {key}: waiting for {who}, which holds its lock ({self.lock_path(key)}); {limit}")
                self._told.add(owner)
            if owner is None:  # judged as a far owner is: by whether its lock is refreshed
                unreadable_since = unreadable_since if unreadable_since is not None else time.monotonic()
                mtime = _mtime(self.lock_path(key))
                if mtime != seen_mtime:
                    seen_mtime, refreshed_at = mtime, time.monotonic()
                if time.monotonic() - unreadable_since >= UNREADABLE_NAME_S and (key, "unreadable") not in self._told:
                    say(f"cache entry {key}: its lock {self.lock_path(key)} is held, but its owner record cannot be read "
                        f"(not 'pid host': a program other than resgd, or a damaged file): if no run uses {self.directory}, "
                        f"end whatever holds it (fuser {self.lock_path(key)}) or remove the file; given up if it is not "
                        f"refreshed for {give_up_s:g} s")
                    self._told.add((key, "unreadable"))
                if mtime is not None and time.monotonic() - refreshed_at >= give_up_s:
                    say(f"cache entry {key}: its lock's unreadable holder has not refreshed it for {give_up_s:g} s: "
                        f"the entry is computed here instead")
                    return None
                time.sleep(LOCK_POLL_S)
                continue
            unreadable_since = None
            if remote:
                mtime = _mtime(self.lock_path(key))
                if mtime != seen_mtime:
                    seen_mtime, refreshed_at = mtime, time.monotonic()
                ahead = mtime - time.time() if mtime is not None else 0.0
                if ahead > CLOCK_SLACK_S and (owner, "ahead") not in self._told:
                    say(f"cache entry {key}: its lock {self.lock_path(key)} is dated {ahead:.0f} s ahead of this host's "
                        f"clock ({owner[1]}'s clock is ahead, or this one's behind): its holder is judged by whether it "
                        f"refreshes the lock, timed here; set both hosts' clocks from one time server (NTP)")
                    self._told.add((owner, "ahead"))
                unrefreshed = max(time.monotonic() - refreshed_at, -ahead)
                if mtime is not None and unrefreshed >= give_up_s:
                    say(f"process {owner[0]} on {owner[1]} (another host) has not refreshed its lock for "
                        f"{unrefreshed:.0f} s (stopped, or its host is gone): its entries are computed here instead")
                    self._given_up.add(owner)
                    return None
                time.sleep(LOCK_POLL_S)
                continue
            if state == "gone":
                return None
            if state == "stopped":
                stopped_since = stopped_since if stopped_since is not None else time.monotonic()
                if time.monotonic() - stopped_since >= give_up_s:
                    say(f"process {owner[0]} has been stopped for {give_up_s:g} s: its entries are computed here instead")
                    self._given_up.add(owner)
                    return None
            else:
                stopped_since = None
            time.sleep(LOCK_POLL_S)


def _code() -> dict[str, str]:
    """The code and engine this process computes with (recorded in each run-cache entry)."""
    from ..core.engine import engine_path_digest
    from ..infra.source_hash import compute_hash

    return {"source": compute_hash(), "engine": engine_path_digest()}


def _fill_store(key: str, value: Any, cpu_s: float | None = None) -> None:
    """While ``make results`` fills the store, a result of this cache enters it too."""
    stored = store.active()
    if stored is not None and stored.filling is not None:
        description = stored.filling(key)
        if description is not None:
            stored.put(key, value, description, cpu_s)


def _mtime(path: Path) -> float | None:
    """When ``path`` was last modified, by the clock of whoever modified it (None when it is gone)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return None


_HELD: "weakref.WeakSet[Lock]" = weakref.WeakSet()
_heartbeat_lock = threading.Lock()
_heartbeat: list[threading.Thread] = []


def refresh_held_locks() -> None:
    """Give every lock this process holds a fresh mtime (its sign of life)."""
    for lock in list(_HELD):
        try:
            if not lock.handle.closed:
                os.utime(lock.handle.fileno())
        except (OSError, ValueError):
            pass  # released meanwhile


def _beat() -> None:
    while True:
        time.sleep(HEARTBEAT_S)
        refresh_held_locks()


def _start_heartbeat() -> None:
    with _heartbeat_lock:
        if not _heartbeat or not _heartbeat[0].is_alive():
            _heartbeat[:] = [threading.Thread(target=_beat, name="resgd-lock-heartbeat", daemon=True)]
            _heartbeat[0].start()


class Lock(FileLock):
    """A held per-key lock (:class:`resgd.infra.file_lock.FileLock`) whose file gets a fresh mtime every
    :data:`HEARTBEAT_S` seconds while held (the sign of life an owner on another host gives)."""

    def __init__(self, path: Path, handle):
        super().__init__(path, handle)
        _HELD.add(self)
        _start_heartbeat()


def process_state(owner: tuple[int, str]) -> str:
    """``"gone"``, ``"stopped"`` or ``"running"`` for a lock owner on this host (another host:
    ``"running"``; :meth:`ResultsCache.wait_lock` judges those by their lock's heartbeat)."""
    pid, host = owner
    if host != socket.gethostname():
        return "running"
    return processes.state(pid)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
