"""Faults that once gave a wrong result with exit 0, a hang or a traceback, each as a test.

The Dask ones run against a real ``LocalCluster`` (worker processes on 127.0.0.1). Each test polls
for its condition with a generous deadline instead of sleeping a fixed time.
"""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from resgd.core.model import ModelConfig
from resgd.core.trainer import GDConfig
from resgd.data.spec import DataMismatchError, DatasetSpec, data_fingerprint
from resgd.data.standin import DEFAULT_STANDIN_DAYS, standin_file_name, write_standin_csv
from resgd.experiments import runs
from resgd.experiments.configuration import RunConfig, config_key


def jena_config(seed: int) -> RunConfig:
    spec = DatasetSpec("jena", n_train=8, n_tokens=4, n_test=4, seed=seed)
    return RunConfig(spec, ModelConfig(d=11, d_qk=3, m=5, beta=1.0),
                        GDConfig(lr=0.01, iterations=5, reduction="mean", record_every=5))


@pytest.fixture
def client_standin(monkeypatch, tmp_path):
    """The client runs Jena on the stand-in of its own cache folder (offline, no data folder)."""
    monkeypatch.delenv("RESGD_DATA_DIR", raising=False)
    monkeypatch.setenv("RESGD_OFFLINE", "1")
    monkeypatch.setenv("RESGD_CACHE_DIR", str(tmp_path / "client-cache"))
    return tmp_path


def test_a_worker_with_other_data_fails_before_training_and_nothing_is_cached(client_standin):
    """A worker whose data differ from the client's (another Jena file) stops before training, in one
    line naming the worker and both digests; no cache entry is written."""
    distributed = pytest.importorskip("distributed")
    tmp_path = client_standin
    worker_cache = tmp_path / "worker-cache"
    # another file that passes every check: the stand-in of another seed, where the worker looks
    write_standin_csv(worker_cache / "jena" / "standin" / standin_file_name(DEFAULT_STANDIN_DAYS, 0),
                      days=DEFAULT_STANDIN_DAYS, seed=1)
    config = jena_config(seed=9101)
    client_digest = data_fingerprint(config.dataset, config.dtype)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                  env={"RESGD_CACHE_DIR": str(worker_cache)}) as cluster:
        with pytest.raises(DataMismatchError) as caught:
            runs.sweep([config], cache_dir=tmp_path / "runs", scheduler=cluster.scheduler_address)
    message = str(caught.value)
    assert "\n" not in message and "Dask worker tcp://127.0.0.1:" in message
    assert f"the client's have {client_digest}" in message and "have digest " in message
    assert not list((tmp_path / "runs").glob("*.pkl"))


def test_every_cache_entry_holds_the_digest_of_its_data(client_standin):
    tmp_path = client_standin
    config = jena_config(seed=9102)
    runs.sweep([config, replace(config, seed=1)], n_jobs=1, cache_dir=tmp_path / "runs")
    entries = list((tmp_path / "runs").glob("*.pkl"))
    assert len(entries) == 2
    digest = data_fingerprint(config.dataset, config.dtype)
    for entry in entries:
        assert list(pickle.loads(entry.read_bytes())["data"].values()) == [digest]


# --------------------------------------------------------------------------- locks

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


def toy_configs(n: int) -> list[RunConfig]:
    spec = DatasetSpec("toy", n_train=6, n_tokens=4, n_test=4, seed=0)
    base = RunConfig(spec, ModelConfig(d=6, d_qk=3, m=5, beta=1.0),
                        GDConfig(lr=0.05, iterations=6, reduction="mean", record_every=3))
    return [replace(base, seed=s) for s in range(n)]


def test_a_stopped_run_does_not_block_a_second_one_forever(tmp_path, monkeypatch, capfd):
    """A second run names the process it waits for and, once that process has been stopped past the
    stated time, computes the entries itself."""
    import signal
    import subprocess
    import sys

    from resgd.pipeline import cache as cache_module

    monkeypatch.setattr(cache_module, "STOPPED_GIVE_UP_S", 1.0)
    configs = toy_configs(3)
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
    runs.sweep(toy_configs(3), n_jobs=1, cache_dir=tmp_path)
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


# --------------------------------------------------------------------------- a scheduler lost mid-run


def test_a_scheduler_killed_mid_run_is_one_line_and_the_results_so_far_are_kept(tmp_path):
    """A scheduler killed mid-run is a ClusterError in one line naming the scheduler and how many results
    were kept; those results are in the cache."""
    pytest.importorskip("distributed")
    import json
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from fault_helpers import slow_square, wait_for

    from resgd.pipeline.cache import ResultsCache
    from resgd.pipeline.sweep import Task, cached_sweep
    from resgd.infra.user_errors import ClusterError, describe

    dask = Path(sys.executable).with_name("dask")
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    file = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(file)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)]
    try:
        address = json.loads(wait_for(lambda: file.is_file() and file.read_text(), 120, "the scheduler file"))["address"]
        procs.append(subprocess.Popen([str(dask), "worker", address, "--nthreads", "1", "--no-dashboard",
                                       "--host", "127.0.0.1"], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))
        cache = ResultsCache(tmp_path / "cache")
        tasks = [Task(str(x), slow_square, x) for x in range(4)]

        killed = []

        def kill_scheduler(key: str) -> None:  # after the first result is cached
            os.killpg(procs[0].pid, signal.SIGKILL)
            killed.append(time.monotonic())

        with pytest.raises(ClusterError) as caught:
            cached_sweep(tasks, cache, n_jobs=1, scheduler=address, on_result=kill_scheduler)
        took = time.monotonic() - killed[0]
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=60)
    message = str(caught.value)
    assert "\n" not in message and f"the Dask scheduler at {address!r} was lost mid-run" in message
    assert "the 1 of 4 results that arrived are cached" in message
    assert cache.read("0") == 0 and describe(caught.value)[0] == 1
    assert took < 30, took  # reported at once, not after the client's reconnect timeout


# --------------------------------------------------------------------------- a dead local worker


def test_a_dead_local_worker_s_tasks_are_run_again(tmp_path, capfd):
    """A local worker process that dies does not abort the sweep: its undelivered tasks run again on a
    fresh pool, as on Dask."""
    from fault_helpers import dies_once

    from resgd.pipeline.sweep import Task, execute

    marker = str(tmp_path / "died")
    got = dict(execute([Task(str(x), dies_once, (marker, x)) for x in range(4)], n_jobs=2))
    assert got == {"0": 1, "1": 2, "2": 3, "3": 4}
    assert "a local worker process died; running its" in capfd.readouterr().err


def test_a_stopped_local_worker_is_named_within_the_stated_time(tmp_path, capfd, monkeypatch):
    """A local worker stopped with SIGSTOP is named on stderr once, with its pid and how to resume or end
    it, after ``STOPPED_WORKER_S``."""
    import os
    import signal
    import threading
    import time
    from pathlib import Path

    from fault_helpers import stops_once, wait_for

    from resgd.pipeline import local_backend, sweep

    monkeypatch.setattr(local_backend, "STOPPED_WORKER_S", 1.0)
    monkeypatch.setattr(local_backend, "STOPPED_POLL_S", 0.2)
    marker = tmp_path / "stopped"

    def resume_later() -> None:
        pid = int(wait_for(lambda: marker.exists() and marker.read_text(), 120, "the worker to stop itself"))
        time.sleep(3.0)  # long enough to be named (1 s + polls), then continue it
        os.kill(pid, signal.SIGCONT)

    helper = threading.Thread(target=resume_later, daemon=True)
    helper.start()
    got = dict(sweep.execute([sweep.Task(str(x), stops_once, (str(marker), x)) for x in range(4)], n_jobs=2))
    helper.join(timeout=30)
    assert got == {"0": 1, "1": 2, "2": 3, "3": 4}
    pid = Path(marker).read_text()
    err = capfd.readouterr().err
    assert err.count(f"local worker process {pid} has been stopped (SIGSTOP or Ctrl-Z) for 1 s") == 1, err
    assert f"kill -CONT {pid}" in err and f"kill -9 {pid}" in err


# --------------------------------------------------------------------------- clean stops

STOPPABLE_CLI = """
import sys, time
from resgd import cli
def reproduce(quick, figures_dir, *, n_jobs, scheduler):
    print("started", flush=True)
    time.sleep(600)
raise SystemExit(cli.main(["reproduce", "--only", "setup", "--figures-dir", sys.argv[1]], parts={"setup": reproduce}))
"""


@pytest.mark.parametrize("signame, status", [("SIGTERM", 143), ("SIGINT", 130)])
def test_reproduce_stops_on_a_signal_in_one_line(tmp_path, signame, status):
    """A signal stops reproduce in one line, without a traceback: exit 143 for SIGTERM, 130 for SIGINT."""
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "RESGD_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-c", STOPPABLE_CLI, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "started"
        proc.send_signal(getattr(signal, signame))
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    lines = [line for line in err.splitlines() if line.strip() and "reproduce (" not in line and "%|" not in line]
    assert proc.returncode == status and "Traceback" not in err
    assert lines == [f"python -m resgd reproduce stopped by {signame}; its worker processes were ended; "
                     f"the results computed so far are cached and a new run resumes from them"]


def test_a_rejected_cache_entry_is_reported_once(tmp_path):
    """A damaged cache entry is reported once per sweep, not once per read."""
    import warnings

    from resgd.pipeline.cache import CacheEntryRejected

    configs = toy_configs(1)
    runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
    entry = next(tmp_path.glob("*.pkl"))
    entry.write_bytes(entry.read_bytes()[:-10])  # damaged
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
    assert len([w for w in caught if issubclass(w.category, CacheEntryRejected)]) == 1
