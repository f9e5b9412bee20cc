"""The Dask backend against a real LocalCluster (2 worker processes × 1 thread).

The tasks are real training runs on the tiny ``toy`` data (``resgd.experiments.runs._compute``, what the sweep engine sends), so
"identical results" compares whole loss histories bit for bit with the in-process computation.
The last test runs a whole cached sweep (``resgd.experiments.runs.sweep``) through the engine's
``scheduler`` seam against the local backend.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace
from typing import Callable

import pandas as pd
import pytest

distributed = pytest.importorskip("distributed")

from resgd.experiments import runs  # noqa: E402
from resgd.experiments.configuration import RunConfig  # noqa: E402
from resgd.data.spec import DatasetSpec  # noqa: E402
from resgd.infra.atomic import write_with  # noqa: E402
from resgd.core.model import ModelConfig  # noqa: E402
from resgd.pipeline.dask_backend import DaskSweepError, execute_dask  # noqa: E402
from resgd.pipeline.identity import resolve_scheduler  # noqa: E402
from resgd.pipeline.sweep import Task  # noqa: E402
from resgd.core.trainer import GDConfig  # noqa: E402


def toy_tasks(n: int, iterations: int = 30) -> list[Task]:
    spec = DatasetSpec("toy", n_train=6, n_tokens=4, n_test=4, seed=0)
    base = RunConfig(spec, ModelConfig(d=6, d_qk=3, m=5, beta=1.0),
                        GDConfig(lr=0.05, iterations=iterations, reduction="mean", record_every=5))
    configs = [replace(base, seed=s, model=replace(base.model, beta=b)) for s in range(n // 2) for b in (0.0, 1.0)]
    return [Task(f"run{i}", runs._compute, c) for i, c in enumerate(configs)]


def slow_square(x: int) -> int:
    time.sleep(0.4)
    return x * x


def fails(x: int) -> int:
    raise ZeroDivisionError(f"task {x} failed on purpose")


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        yield c


def test_same_results_as_in_process(cluster):
    tasks = toy_tasks(6)
    got = dict(execute_dask(tasks, cluster.scheduler_address))
    assert sorted(got) == sorted(t.key for t in tasks)
    for task in tasks:
        pd.testing.assert_frame_equal(got[task.key], task.fn(task.arg), check_exact=True)


def _read_cache(folder) -> dict[str, int]:
    return {p.stem: pd.read_pickle(p) for p in sorted(folder.glob("*.pkl"))}


def _sweep_with_caller_cache(tasks, address, folder, disturb: Callable[[], None]) -> list[str]:
    """Consume execute_dask like the sweep engine: write each result atomically; call ``disturb``
    after the first result. Returns the keys in the order delivered."""
    delivered = []
    for key, value in execute_dask(tasks, address):
        write_with(folder / f"{key}.pkl", lambda tmp, value=value: pd.to_pickle(value, tmp))
        delivered.append(key)
        if len(delivered) == 1:
            disturb()
    return delivered


def _check_once_and_cache(tasks, delivered, folder):
    assert sorted(delivered) == sorted(t.key for t in tasks), "every task delivered exactly once"
    assert not list(folder.glob(".*.part")), "no temporary file left behind"
    cache = _read_cache(folder)
    assert cache == {t.key: t.fn(t.arg) for t in tasks}


def test_worker_killed_mid_sweep(cluster, tmp_path):
    from distributed import Client

    tasks = [Task(f"sq{i}", slow_square, i) for i in range(12)]

    def kill_one_worker():
        with Client(cluster.scheduler_address, set_as_default=False) as other:
            pids = other.run(os.getpid)  # {worker address: pid}
        os.kill(next(iter(pids.values())), signal.SIGKILL)

    delivered = _sweep_with_caller_cache(tasks, cluster.scheduler_address, tmp_path, kill_one_worker)
    _check_once_and_cache(tasks, delivered, tmp_path)


def test_restart_mid_sweep(cluster, tmp_path, caplog):
    from distributed import Client

    tasks = [Task(f"sq{i}", slow_square, i) for i in range(10)]
    restarted = threading.Event()

    def restart():
        with Client(cluster.scheduler_address, set_as_default=False) as other:
            # a nanny that has not shut its worker down within the timeout has it removed, not restarted,
            # and the sweep would wait for a worker forever: on two busy cores that takes more than Dask's 30 s
            other.restart(timeout=120, wait_for_workers=False)
        restarted.set()

    delivered = _sweep_with_caller_cache(tasks, cluster.scheduler_address, tmp_path, restart)
    assert restarted.is_set()
    assert "resubmitting" in caplog.text, "the restart cancelled running tasks, which were resubmitted"
    _check_once_and_cache(tasks, delivered, tmp_path)


def test_task_error_propagates_and_duplicate_keys_refused(cluster):
    with pytest.raises(ZeroDivisionError, match="on purpose"):
        list(execute_dask([Task("bad", fails, 1)], cluster.scheduler_address))
    with pytest.raises(ValueError, match="unique"):
        list(execute_dask([Task("a", slow_square, 1), Task("a", slow_square, 2)], cluster.scheduler_address))
    assert list(execute_dask([], cluster.scheduler_address)) == []


def test_scheduler_address_from_env(monkeypatch):
    monkeypatch.delenv("RESGD_SCHEDULER", raising=False)
    assert resolve_scheduler() is None
    monkeypatch.setenv("RESGD_SCHEDULER", " tcp://scheduler.invalid:8786 ")
    assert resolve_scheduler() == "tcp://scheduler.invalid:8786"
    assert resolve_scheduler("tcp://h:1") == "tcp://h:1"


def test_cached_sweep_on_the_cluster_equals_the_local_sweep(cluster, tmp_path):
    """The same sweep through the engine: identical tables, and the caller wrote every entry once."""
    configs = [t.arg for t in toy_tasks(6)]
    local = runs.sweep(configs, n_jobs=1, cache_dir=tmp_path / "local")
    remote = runs.sweep(configs, cache_dir=tmp_path / "dask", scheduler=cluster.scheduler_address)
    pd.testing.assert_frame_equal(remote, local, check_exact=True)
    entries = sorted(p.name for p in (tmp_path / "dask").glob("*.pkl"))
    assert entries == sorted(p.name for p in (tmp_path / "local").glob("*.pkl")) and len(entries) == 6


def test_error_type_is_runtime_error():
    assert issubclass(DaskSweepError, RuntimeError)


def test_a_dask_worker_over_its_memory_limit_ends_the_sweep_in_one_line(tmp_path):
    """A Dask worker over its memory limit ends the sweep with a cluster error in one line, exit 1,
    saying what to check."""
    distributed = pytest.importorskip("distributed")
    import dask

    from fault_helpers import allocate
    from resgd.pipeline.dask_backend import DaskSweepError, execute_dask
    from resgd.pipeline.sweep import Task
    from resgd.infra.user_errors import describe

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                      memory_limit="200MB") as cluster:
            with pytest.raises(DaskSweepError) as caught:
                list(execute_dask([Task("big", allocate, 1200)], cluster.scheduler_address, max_resubmits=0))
    status, message = describe(caught.value)
    assert status == 1 and "\n" not in message and "over its memory limit" in message and "--memory-limit" in message
