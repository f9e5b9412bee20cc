"""The one file lock (:mod:`resgd.infra.file_lock`): the cache's per-entry locks and the publish lock are it."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from resgd.infra import file_lock
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
    publish = reproduce._lock_file(tmp_path / reproduce.LOCK_NAME)
    try:
        assert isinstance(publish, file_lock.FileLock)
        assert reproduce._holder(tmp_path / reproduce.LOCK_NAME) == f"run {os.getpid()} on {socket.gethostname()}"
    finally:
        publish.close()
