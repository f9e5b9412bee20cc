"""The run cache (:mod:`resgd.pipeline.cache`): an entry is used only whole and verified (damaged,
edited, copied over, of another format, unreadable, oversized: reported once and recomputed to the
same result), records the digest of its data, and its locks let two runs share a folder (a stopped,
killed or far owner is given up on after the stated time; lock files are removed when released).

Permission faults run as ``nobody`` when the suite runs as root (:mod:`faults.as_user`).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # tests only

import hashlib  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from fault_helpers import Counting, entries, jena_config, leftovers, reproduce_toy, toy_config, toy_configs  # noqa: E402
from faults.as_user import run_as_user, shared_folder  # noqa: E402

import resgd.plots  # noqa: E402,F401 - imported here: a child that is `nobody` has no matplotlib config folder
from resgd.data.spec import data_fingerprint  # noqa: E402
from resgd.experiments import runs  # noqa: E402
from resgd.experiments.configuration import config_key  # noqa: E402
from resgd.pipeline.cache import ENTRY_FORMAT, CacheEntryRejected, ResultsCache  # noqa: E402


def test_another_runs_entry_copied_over_is_rejected_and_recomputed(tmp_path, monkeypatch):
    a, b = toy_config(0), toy_config(1)
    runs.sweep([a, b], n_jobs=1, cache_dir=tmp_path)
    cache = ResultsCache(tmp_path)
    key_a, key_b = config_key(a), config_key(b)
    truth = cache.read(key_a)
    cache.path(key_a).write_bytes(cache.path(key_b).read_bytes())  # b's valid entry under a's name
    counter = Counting()
    monkeypatch.setattr(runs, "_compute_stack", counter)
    with pytest.warns(CacheEntryRejected, match=f"holds the entry of key '{key_b}'"):
        table = runs.sweep([a, b], n_jobs=1, cache_dir=tmp_path)
    assert [c.seed for c in counter.calls] == [0]
    pd.testing.assert_frame_equal(table[table["key"] == key_a].drop(columns="key").reset_index(drop=True), truth)
    assert cache.read(key_a).equals(truth)  # repaired


def test_edited_entry_fails_its_checksum_and_is_recomputed(tmp_path, monkeypatch):
    config = toy_config()
    key = config_key(config)
    original = runs.run(config, tmp_path)
    path = ResultsCache(tmp_path).path(key)
    record = pickle.loads(path.read_bytes())
    frame = pickle.loads(record["content"])
    frame.loc[frame.index[-1], "loss"] *= 100  # the fault: last loss ×100, old checksum kept
    record["content"] = pickle.dumps(frame)
    path.write_bytes(pickle.dumps(record))
    counter = Counting()
    monkeypatch.setattr(runs, "_compute_stack", counter)
    with pytest.warns(CacheEntryRejected, match="does not match its checksum"):
        again = runs.run(config, tmp_path)
    assert len(counter.calls) == 1
    pd.testing.assert_frame_equal(again, original)


def test_unverified_old_format_entry_is_rejected(tmp_path):
    config = toy_config()
    key = config_key(config)
    ResultsCache(tmp_path).path(key).parent.mkdir(parents=True, exist_ok=True)
    runs.run(config, tmp_path).to_pickle(ResultsCache(tmp_path).path(key))  # a bare pickled table
    with pytest.warns(CacheEntryRejected, match="not a verified entry"):
        assert ResultsCache(tmp_path).read(key) is None


def _record(key: str, **changes) -> bytes:
    content = pickle.dumps({"a": 1})
    record = {"format": ENTRY_FORMAT, "key": key, "sha256": hashlib.sha256(content).hexdigest(), "content": content,
              "data": {}}
    record.update(changes)
    return pickle.dumps(record)


class _Gone:  # pickled by reference: unpickling it needs its module
    pass


def _entry_of_a_class_that_no_longer_exists(key: str) -> bytes:
    module = _Gone.__module__.encode()
    content = pickle.dumps(_Gone()).replace(module, b"x" * len(module))  # a module name that does not exist
    return _record(key, content=content, sha256=hashlib.sha256(content).hexdigest())


DAMAGES = {  # damage: (the entry's bytes, its key) -> new bytes; the reason the warning gives
    "zero-length": (lambda good, key: b"", "unreadable: EOFError"),
    "garbage bytes": (lambda good, key: bytes(range(256)) * 4, "unreadable: "),
    "cut in half": (lambda good, key: good[: len(good) // 2], "unreadable: "),
    "a pickle that is not an entry": (lambda good, key: pickle.dumps([1, 2, 3]), "not a verified entry"),
    "a newer entry format": (lambda good, key: _record(key, format="resgd-cache-entry/2"), "not a verified entry"),
    "content that is not bytes": (lambda good, key: _record(key, content="text"), "does not match its checksum"),
    "checksum right, content not a pickle": (
        lambda good, key: _record(key, content=b"xx", sha256=hashlib.sha256(b"xx").hexdigest()),
        "content unreadable: UnpicklingError"),
    "content of a class that no longer exists": (lambda good, key: _entry_of_a_class_that_no_longer_exists(key),
                                                 "content unreadable: ModuleNotFoundError"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_run_cache_entry_is_reported_and_recomputed_to_the_same_result(tmp_path, damage):
    configs = toy_configs(2)
    first = runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
    cache = ResultsCache(tmp_path)
    key = config_key(configs[0])
    damaged, problem = DAMAGES[damage]
    data = damaged(cache.path(key).read_bytes(), key)
    cache.path(key).write_bytes(data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
    messages = [str(w.message) for w in caught if issubclass(w.category, CacheEntryRejected)]
    assert len(messages) == 1 and str(cache.path(key)) in messages[0] and problem in messages[0], messages
    assert again.equals(first)
    assert ResultsCache(tmp_path).read(key) is not None  # written again, whole


def test_a_rejected_cache_entry_is_reported_once(tmp_path):
    """A damaged cache entry is reported once per sweep, not once per read."""
    import warnings

    from resgd.pipeline.cache import CacheEntryRejected

    configs = toy_configs(1, iterations=6)
    runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
    entry = next(tmp_path.glob("*.pkl"))
    entry.write_bytes(entry.read_bytes()[:-10])  # damaged
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
    assert len([w for w in caught if issubclass(w.category, CacheEntryRejected)]) == 1


def test_a_cache_entry_larger_than_any_resgd_writes_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """A cache entry larger than any this package writes (a sparse 6 GB file) is refused by its size in
    one line, before it is read, and the entry is computed again."""
    from resgd.pipeline import cache as cache_module
    from resgd.pipeline.cache import CacheEntryRejected, ResultsCache

    cache = ResultsCache(tmp_path)
    path = cache.path("k")
    with open(path, "wb") as handle:
        handle.truncate(6 << 30)
    read = Path.read_bytes

    def guarded(self):
        assert self != path, "the oversized entry was read"
        return read(self)

    monkeypatch.setattr(Path, "read_bytes", guarded)
    with pytest.warns(CacheEntryRejected) as caught:
        assert cache.read("k") is None
    message = str(caught[0].message)
    assert "\n" not in message and f"cache entry {path} not used ({6 << 30} bytes: larger than any entry" in message
    assert cache_module.MAX_ENTRY_BYTES == 256 << 20


def test_an_unreadable_cache_entry_is_reported_and_recomputed(tmp_path):
    """``chmod 000`` on an entry: reported as unreadable, recomputed, and the new entry is readable."""
    with shared_folder() as root:
        configs = toy_configs(1)
        cache_dir = root / "cache"
        first = runs.sweep(configs, n_jobs=1, cache_dir=cache_dir)
        for path in [cache_dir, *cache_dir.rglob("*")]:
            path.chmod(0o777 if path.is_dir() else 0o666)
        key = config_key(configs[0])
        entry = ResultsCache(cache_dir).path(key)
        entry.chmod(0o000)

        def reread():
            cache = ResultsCache(cache_dir)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert cache.read(key) is None
            cache.write(key, ResultsCache.__name__)  # what the sweep does next: write it again
            return [str(w.message) for w in caught], cache.read(key)

        messages, value = run_as_user(reread)
        assert len(messages) == 1 and "unreadable: PermissionError" in messages[0]
        assert value == "ResultsCache" and not first.empty


def test_a_folder_where_a_cache_entry_should_be_is_one_line_exit_1_and_the_other_entries_are_kept(tmp_path, capsys):
    assert reproduce_toy(tmp_path, "--jobs", "1") == 0
    victim = entries(tmp_path)[0]
    for entry in entries(tmp_path):
        entry.unlink()
    victim.mkdir()
    (victim / "something").write_text("a user's file")
    assert reproduce_toy(tmp_path, "--jobs", "1") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(line) == 1 and str(victim) in line[0] and "a folder stands where a file is needed" in line[0]
    assert (victim / "something").read_text() == "a user's file"  # nothing of the user's removed
    assert leftovers(tmp_path) == []


def test_every_cache_entry_holds_the_digest_of_its_data(client_standin):
    tmp_path = client_standin
    config = jena_config(seed=9102)
    runs.sweep([config, replace(config, seed=1)], n_jobs=1, cache_dir=tmp_path / "runs")
    entries = list((tmp_path / "runs").glob("*.pkl"))
    assert len(entries) == 2
    digest = data_fingerprint(config.dataset, config.dtype)
    for entry in entries:
        assert list(pickle.loads(entry.read_bytes())["data"].values()) == [digest]


HOLD_LOCKS = """
import os, signal, sys
from resgd.pipeline.cache import ResultsCache
cache = ResultsCache(sys.argv[1])
held = [cache.try_lock(key) for key in sys.argv[2:]]
assert all(held)
print("held", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)  # a run stopped with Ctrl-Z while it holds its locks
sys.stdin.readline()
"""


def test_a_stopped_run_does_not_block_a_second_one_forever(tmp_path, monkeypatch, capfd):
    """A second run names the process it waits for and, once that process has been stopped past the
    stated time, computes the entries itself."""
    import signal
    import subprocess
    import sys

    from resgd.pipeline import cache as cache_module

    monkeypatch.setattr(cache_module, "STOPPED_GIVE_UP_S", 1.0)
    configs = toy_configs(3, iterations=6)
    keys = [config_key(c) for c in configs]
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCKS, str(tmp_path), *keys], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        table = runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
        assert sorted(table["seed"].unique()) == [0, 1, 2]
        err = capfd.readouterr().err
        assert f"waiting for process {holder.pid} on " in err and "has been stopped for 1 s" in err
        assert err.count("waiting for process") == 1  # once per owner, not once per entry
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)


def test_lock_files_are_removed_when_released(tmp_path):
    """A sweep leaves no lock file behind once its entries are written."""
    runs.sweep(toy_configs(3, iterations=6), n_jobs=1, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.pkl"))) == 3
    assert list((tmp_path / "locks").glob("*")) == []


def test_removing_a_released_lock_file_never_lets_two_holders_in(tmp_path):
    from resgd.pipeline.cache import ResultsCache

    cache = ResultsCache(tmp_path)
    first = cache.try_lock("k")
    assert first is not None and cache.try_lock("k") is None
    first.close()
    second = cache.try_lock("k")
    assert second is not None and cache.try_lock("k") is None
    second.close()


HOLD = """
import sys
from resgd.pipeline.cache import ResultsCache
cache = ResultsCache(sys.argv[1])
held = [cache.try_lock(key) for key in sys.argv[2:]]
assert all(held)
print("held", flush=True)
sys.stdin.readline()
"""


def test_locks_of_a_run_killed_with_kill_9_are_taken_over_at_once(tmp_path):
    """A run killed while it holds its entries' locks (their files stay behind, with its pid):
    the next run computes those entries without waiting for anyone."""
    import time

    configs = toy_configs(2)
    keys = [config_key(c) for c in configs]
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), *keys], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait(timeout=60)
    assert sorted(p.stem for p in (tmp_path / "locks").iterdir()) == sorted(keys)  # left behind
    start = time.monotonic()
    table = runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
    assert time.monotonic() - start < 60 and sorted(table["seed"].unique()) == [0, 1]
    assert list((tmp_path / "locks").iterdir()) == []


def test_a_read_only_lock_folder_is_one_line_not_a_traceback():
    """The run cache writable but its ``locks/`` folder not (made by another user): one line, exit 1."""
    with shared_folder() as root:
        locks = root / "results" / "cache" / "locks"
        locks.mkdir(parents=True)
        for path in (root / "results", root / "results" / "cache"):
            path.chmod(0o777)
        locks.chmod(0o555)

        def run():
            import contextlib
            import io

            from resgd.infra.user_errors import describe
            from resgd.pipeline.sweep import Task, cached_sweep

            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                try:
                    cached_sweep([Task("k", abs, -1)], ResultsCache(root / "results" / "cache"), n_jobs=1)
                except Exception as exc:  # noqa: BLE001
                    return describe(exc)
            return "no error"

        described = run_as_user(run)
    assert described is not None and described != "no error", "a traceback (not a user error)"
    status, message = described
    assert status == 1 and str(locks) in message and "not writable" in message


def _held_by_another_host(cache, key: str, age_s: float):
    """``key``'s lock held (flock) with an owner on another host, its file last touched ``age_s`` ago."""
    import fcntl
    import time

    path = cache.lock_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+b")  # noqa: SIM115 - closed by the test
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
    handle.write(b"4242 another-host.example\n")
    handle.flush()
    os.utime(path, (time.time() - age_s,) * 2)
    return handle


def test_a_lock_held_on_another_host_and_no_longer_refreshed_is_given_up_on_after_the_stated_time(tmp_path):
    """A lock of another host's process that is no longer refreshed is given up on after the stated
    time, and the messages say why."""
    from resgd.pipeline.cache import ResultsCache

    cache, said = ResultsCache(tmp_path), []
    handle = _held_by_another_host(cache, "k", age_s=30)
    try:
        assert cache.wait_lock("k", give_up_s=20, on_wait=said.append) is None
    finally:
        handle.close()
    assert len(said) == 2 and "\n" not in "".join(said)
    assert "waiting for process 4242 on another-host.example" in said[0]
    assert "given up if its lock is not refreshed for 20 s (it runs on another host" in said[0]
    assert "has not refreshed its lock for 30 s" in said[1] and "computed here instead" in said[1]


def test_a_lock_of_another_host_that_is_refreshed_is_waited_for_and_held_locks_are_refreshed(tmp_path, monkeypatch):
    import threading
    import time

    from resgd.pipeline import cache as cache_module
    from resgd.pipeline.cache import ResultsCache, refresh_held_locks

    cache = ResultsCache(tmp_path)
    handle = _held_by_another_host(cache, "k", age_s=0)
    got = []
    waiter = threading.Thread(target=lambda: got.append(cache.wait_lock("k", give_up_s=1.5, on_wait=lambda m: None)))
    waiter.start()
    for _ in range(10):  # refreshed by its owner: not given up on
        time.sleep(0.3)
        os.utime(cache.lock_path("k"))
    assert waiter.is_alive()
    handle.close()  # released: the waiter takes it
    waiter.join(timeout=30)
    assert got and got[0] is not None
    os.utime(cache.lock_path("k"), (time.time() - 100,) * 2)
    refresh_held_locks()  # what the holder's heartbeat does every HEARTBEAT_S seconds
    assert time.time() - cache.lock_path("k").stat().st_mtime < 5
    got[0].close()
    assert cache_module.HEARTBEAT_S < cache_module.STOPPED_GIVE_UP_S / 2
