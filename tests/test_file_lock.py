"""The one file lock (:mod:`resgd.infra.file_lock`): the cache's per-entry locks and the publish lock are it."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from resgd.infra import builds, file_lock
from resgd.pipeline import cache, reproduce

SRC = Path(__file__).resolve().parents[1] / "src" / "resgd"


def test_flock_is_called_in_one_module_only():
    users = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if "fcntl.flock" in p.read_text(encoding="utf-8"))
    assert users == ["infra/file_lock.py"]


def test_a_lock_names_its_holder_excludes_others_and_leaves_no_file(tmp_path):
    path = tmp_path / "sub" / "x.lock"
    lock = file_lock.try_lock(path)
    assert lock is not None and file_lock.lock_owner(path) == (os.getpid(), socket.gethostname())
    assert file_lock.try_lock(path) is None  # another open file description: flock conflicts
    lock.close()
    assert not path.exists()
    with file_lock.try_lock(path) as again:
        assert again is not None
    assert file_lock.lock_owner(path) is None  # released: gone


def test_the_cache_and_the_publish_lock_are_the_same_lock(tmp_path):
    entry = cache.ResultsCache(tmp_path).try_lock("k")
    try:
        assert isinstance(entry, file_lock.FileLock)
    finally:
        entry.close()
    publish = builds.lock_file(tmp_path / reproduce.LOCK_NAME)
    try:
        assert isinstance(publish, file_lock.FileLock)
        assert builds.holder(tmp_path / reproduce.LOCK_NAME) == f"run {os.getpid()} on {socket.gethostname()}"
    finally:
        publish.close()


def test_a_file_system_without_locks_is_named_with_what_to_do(tmp_path, monkeypatch):
    """A file system without locks (``flock`` fails with ENOLCK, as NFS without its lock service) is one
    line naming the folder and how to run without shared locks."""
    import errno

    import pytest

    from resgd.infra.user_errors import describe
    from resgd.validation import OutputError

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(file_lock.fcntl, "flock", no_locks)
    with pytest.raises(OutputError) as caught:
        cache.ResultsCache(tmp_path / "cache").try_lock("k")
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'cache' / 'locks'}: its file system gives no file locks (No locks available")
    assert "\n" not in message and "--results-dir" in message and "local disk" in message
    assert describe(caught.value) == (1, message)


def _held_elsewhere(path: Path, owner: bytes) -> object:
    """``path`` locked through another open file (``flock`` conflicts as with another process) by ``owner``."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+b")  # noqa: SIM115 - closed by the test
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
    handle.write(owner)
    handle.flush()
    return handle


def test_a_lock_dated_in_the_future_is_named_at_once_and_not_waited_for_past_the_bound(tmp_path):
    """A lock of a host whose clock is an hour ahead (it looks freshly refreshed) is named at once, with
    the dates and what to do, and given up once unrefreshed for the stated time on the waiter's own clock."""
    import threading
    import time

    entries = cache.ResultsCache(tmp_path)
    holder = _held_elsewhere(entries.lock_path("k"), b"4242 far-host.example\n")
    ahead = time.time() + 3600
    os.utime(entries.lock_path("k"), (ahead, ahead))
    said, got, start = [], [], time.monotonic()
    waiter = threading.Thread(target=lambda: got.append(entries.wait_lock(
        "k", give_up_s=1.0, on_wait=lambda m: said.append((time.monotonic() - start, m)))), daemon=True)
    try:
        waiter.start()
        waiter.join(timeout=30)
    finally:
        holder.close()
    assert got == [None] and time.monotonic() - start < 10
    assert len(said) == 3 and "\n" not in "".join(m for _, m in said)
    when, message = said[1]
    assert when < 30 and f"its lock {entries.lock_path('k')} is dated 3600 s ahead of this host's clock" in message
    assert "far-host.example's clock is ahead" in message and "NTP" in message
    assert "has not refreshed its lock for 1 s" in said[2][1] and "computed here instead" in said[2][1]


def test_folders_are_locked_in_one_order_by_their_real_paths(tmp_path, monkeypatch):
    """The publish locks are taken in one order, by resolved real path, each folder once: two runs naming
    one folder through a symlink cannot wait for each other, and a run naming one folder twice does not
    wait for itself."""
    tmp_path = tmp_path.resolve()
    figures, results = tmp_path / "b_figures", tmp_path / "c_results"
    results.mkdir()
    (tmp_path / "a_link").symlink_to(results)
    assert file_lock.lock_order([figures, tmp_path / "a_link", results]) == [figures, results]
    taken = []
    real = builds.lock_file  # publish_lock's own module (reproduce and the book build share it)
    monkeypatch.setattr(builds, "lock_file", lambda path: taken.append(path) or real(path, give_up_s=2))
    with reproduce.publish_lock([figures, results]):
        pass
    first, taken[:] = list(taken), []
    with reproduce.publish_lock([tmp_path / "a_link", figures]):  # by name: a_link (the results) first
        pass
    assert taken == first == [figures / reproduce.LOCK_NAME, results / reproduce.LOCK_NAME]
    taken.clear()
    with reproduce.publish_lock([results, tmp_path / "a_link"]):  # one folder, two names: locked once
        pass
    assert taken == [results / reproduce.LOCK_NAME]


def test_a_lock_whose_owner_record_cannot_be_read_is_named_then_given_up(tmp_path, monkeypatch):
    """A cache lock with no readable "pid host" record (another program's, a damaged file) is named with
    what to do within ``UNREADABLE_NAME_S`` (10 s), and given up once it goes unrefreshed for the stated time."""
    import fcntl
    import time

    from resgd.pipeline import cache as cache_module
    from resgd.pipeline.cache import ResultsCache

    monkeypatch.setattr(cache_module, "UNREADABLE_NAME_S", 0.5)
    cache = ResultsCache(tmp_path / "cache")
    path = cache.lock_path("k")
    path.parent.mkdir(parents=True)
    holder = open(path, "a+b")
    said = []
    try:
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
        holder.write(b"\x00garbage")
        holder.flush()
        start = time.monotonic()
        assert cache.wait_lock("k", on_wait=said.append, give_up_s=2.0) is None
        waited = time.monotonic() - start
    finally:
        holder.close()
    assert 2.0 <= waited < 6
    named = [m for m in said if "owner record cannot be read" in m]
    assert len(named) == 1 and str(path) in named[0] and "remove the file" in named[0]
    assert "computed here instead" in said[-1]
