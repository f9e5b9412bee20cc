"""The Dask backend (:mod:`resgd.pipeline.dask_backend`) against real ``dask scheduler`` and ``dask
worker`` processes on 127.0.0.1: a worker started late, the only worker killed mid-sweep and
replaced, a worker's address given as the scheduler, a worker or the scheduler stopped (SIGSTOP) and
named within the stated time, a scheduler without a worker named, the scheduler killed mid-run (one line, the results so far kept). A
worker killed while another one remains and a cluster restart are in test_dask_backend.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("distributed")

import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

from fault_helpers import Cluster, run_cli_with_scheduler, slow_square  # noqa: E402

from resgd.pipeline.cache import ResultsCache  # noqa: E402
from resgd.pipeline.sweep import Task, cached_sweep  # noqa: E402


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(tmp_path)
    try:
        yield made
    finally:
        made.close()


def test_a_late_worker_then_its_kill_9_mid_sweep_then_a_worker_s_address_as_the_scheduler(cluster, tmp_path, capsys):
    """Three faults on one real cluster (worker processes are slow to start on two busy cores):

    1. the sweep starts on a scheduler with no worker yet: it waits, and runs once one joins;
    2. that only worker is killed (-9) after the first result: its task is resubmitted when a new
       worker joins, and every result is the right one, written once;
    3. the new worker's address given as the scheduler: one line, exit 2, before any work."""
    from distributed import Client

    cache = ResultsCache(tmp_path / "cache")
    workers: list[subprocess.Popen] = []
    threading.Timer(2.0, lambda: workers.append(cluster.worker())).start()
    written: list[str] = []

    def after_each(key: str) -> None:
        written.append(key)
        if len(written) == 1:
            cluster.kill(workers[0])
            threading.Timer(1.0, lambda: workers.append(cluster.worker())).start()

    got = cached_sweep([Task(str(x), slow_square, x) for x in (0, 1, 2)], cache, n_jobs=1, scheduler=cluster.address,
                       on_result=after_each)
    assert got == {"0": 0, "1": 1, "2": 4} and sorted(written) == ["0", "1", "2"] and len(workers) == 2
    assert [cache.read(k) for k in ("0", "1", "2")] == [0, 1, 4]

    with Client(cluster.address, set_as_default=False, timeout=60) as client:
        worker = next(iter(client.scheduler_info()["workers"]))
    status, line, _ = run_cli_with_scheduler(worker, tmp_path, capsys)
    assert status == 2 and "is a Dask worker, not the scheduler" in line


def _sweep_with_a_stop(cluster: Cluster, tmp_path: Path, proc: subprocess.Popen, continue_after_s: float) -> dict:
    """Tasks 0 (0.3 s) and 1 (3 s) swept on ``cluster``; once 0 is delivered (the worker then computes
    1), ``proc`` is stopped (SIGSTOP) and continued ``continue_after_s`` later. Returns the results."""

    def after_each(key: str) -> None:
        if key == "0":
            os.killpg(proc.pid, signal.SIGSTOP)
            threading.Timer(continue_after_s, lambda: os.killpg(proc.pid, signal.SIGCONT)).start()

    return cached_sweep([Task(str(x), slow_square, x) for x in (0, 1)], ResultsCache(tmp_path / "cache"), n_jobs=1,
                        scheduler=cluster.address, on_result=after_each)


def test_a_stopped_worker_is_named_within_the_stated_time(cluster, tmp_path, monkeypatch, capfd):
    """A worker stopped with SIGSTOP is named once it has not reported to its scheduler for
    ``SILENT_WORKER_S`` seconds (timed on the client's clock); continued, it delivers and the sweep ends."""
    from resgd.pipeline import dask_backend

    monkeypatch.setattr(dask_backend, "SILENT_WORKER_S", 3.0)
    monkeypatch.setattr(dask_backend, "SILENT_POLL_S", 0.5)
    worker = cluster.worker()
    assert _sweep_with_a_stop(cluster, tmp_path, worker, 8.0) == {"0": 0, "1": 1}
    err = capfd.readouterr().err
    # named once; how many tasks the scheduler still lists for it depends on when the stop came
    assert err.count("has not reported to its scheduler for 3 s and holds ") == 1, err


def test_a_stopped_scheduler_is_named_within_the_stated_time(cluster, tmp_path, monkeypatch, capfd):
    """A scheduler stopped with SIGSTOP (its connection open, so the sweep's own wait cannot tell) is
    named once it has left the watch's question unanswered for ``SILENT_SCHEDULER_S`` seconds;
    continued, it delivers and the sweep ends."""
    from resgd.pipeline import dask_backend

    monkeypatch.setattr(dask_backend, "SILENT_SCHEDULER_S", 2.0)
    monkeypatch.setattr(dask_backend, "SILENT_POLL_S", 0.5)
    cluster.worker()
    assert _sweep_with_a_stop(cluster, tmp_path, cluster.procs[0], 6.0) == {"0": 0, "1": 1}  # procs[0]: the scheduler
    err = capfd.readouterr().err
    assert err.count(f"the Dask scheduler at {cluster.address!r} has not answered for ") == 1, err
    assert "resume it (kill -CONT) or end it" in err


def test_a_scheduler_without_a_worker_is_named_with_the_command_that_starts_one(cluster, tmp_path, monkeypatch,
                                                                             capfd):
    """A sweep on a scheduler that has no worker names it once it has had none for ``NO_WORKER_S``
    seconds, with the command that starts one; once a worker joins, the sweep ends with every result."""
    from resgd.pipeline import dask_backend

    monkeypatch.setattr(dask_backend, "NO_WORKER_S", 1.0)
    monkeypatch.setattr(dask_backend, "SILENT_POLL_S", 0.5)
    late = threading.Timer(4.0, cluster.worker)
    late.start()
    try:
        got = cached_sweep([Task(str(x), slow_square, x) for x in (0, 1)], ResultsCache(tmp_path / "cache"), n_jobs=1,
                           scheduler=cluster.address)
    finally:
        late.join()
    assert got == {"0": 0, "1": 1}
    err = capfd.readouterr().err
    assert err.count(f"the Dask scheduler at {cluster.address!r} has had no worker for 1 s") == 1, err
    assert f"start one (dask worker {cluster.address})" in err


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

    from resgd.infra.user_errors import ClusterError, describe
    from resgd.pipeline.cache import ResultsCache
    from resgd.pipeline.sweep import Task, cached_sweep

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
