"""Dask faults against real ``dask scheduler`` and ``dask worker`` processes on 127.0.0.1:
a worker started late, the only worker killed mid-sweep and replaced, and scheduler addresses that
answer but are not a Dask scheduler (a port that says nothing, a worker's port). A worker killed
while another one remains, a cluster restart and a lost scheduler are in test_dask_backend.py and
test_faults.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from fault_helpers import slow_square, wait_for  # noqa: E402
from resgd import cli  # noqa: E402
from resgd.pipeline.cache import ResultsCache  # noqa: E402
from resgd.pipeline.sweep import Task, cached_sweep  # noqa: E402

TESTS = Path(__file__).parent
DASK = Path(sys.executable).with_name("dask")


class Cluster:
    """A ``dask scheduler`` process, and ``dask worker`` processes started on demand."""

    def __init__(self, folder: Path):
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent / "src"),
                                                                 os.environ.get("PYTHONPATH", "")])}
        file = folder / "scheduler.json"
        self.procs = [self._start([str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                   "--scheduler-file", str(file)])]
        self.address = json.loads(wait_for(lambda: file.is_file() and file.read_text(), 120, "the scheduler file"))["address"]

    def _start(self, argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen(argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)

    def worker(self) -> subprocess.Popen:
        proc = self._start([str(DASK), "worker", self.address, "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1",
                            "--no-nanny"])
        self.procs.append(proc)
        return proc

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)

    def close(self) -> None:
        for proc in self.procs:
            self.kill(proc)


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


def run_cli_with_scheduler(address: str, tmp_path: Path, capsys) -> tuple[int, str, float]:
    called = []
    start = time.monotonic()
    status = cli.main(["reproduce", "--only", "setup", "--figures-dir", str(tmp_path), "--scheduler", address],
                      parts={"setup": lambda *a, **kw: called.append(1)})
    took = time.monotonic() - start
    assert called == []  # before any work
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1, err
    return status, errors[0], took


def test_a_port_that_accepts_but_is_not_a_scheduler_is_one_line_exit_2_not_a_hang(tmp_path, capsys):
    """A port that accepts connections and says nothing is refused as a scheduler in one line within
    seconds, exit 2 (the Dask client would wait for ever)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        accepted: list = []
        threading.Thread(target=lambda: accepted.append(silent.accept()), daemon=True).start()
        status, line, took = run_cli_with_scheduler(f"tcp://127.0.0.1:{silent.getsockname()[1]}", tmp_path, capsys)
    assert status == 2 and "does not answer as a Dask scheduler within 5 s" in line and took < 30, (line, took)


def test_a_bad_scheduler_address_in_the_environment_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RESGD_SCHEDULER", "tcp://127.0.0.1:1")
    called = []
    status = cli.main(["reproduce", "--only", "setup", "--figures-dir", str(tmp_path)],
                      parts={"setup": lambda *a, **kw: called.append(1)})
    err = capsys.readouterr().err
    assert status == 2 and called == [] and "Traceback" not in err
    assert "from --scheduler or $RESGD_SCHEDULER): nothing answers at 127.0.0.1:1" in err


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
