"""The sweep engine (:mod:`resgd.pipeline.sweep`): ``execute`` yields every result through the seam,
a scheduler without the Dask backend names its setting, and ``cached_sweep`` computes each run once
when two sweeps share a results folder (one waits for the other's entry and reuses it).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from fault_helpers import Counting, toy_config

from resgd.experiments import runs
from resgd.experiments.configuration import config_key
from resgd.pipeline.cache import ResultsCache
from resgd.pipeline.identity import SCHEDULER_ENV
from resgd.pipeline.sweep import Task, execute
from resgd.validation import ConfigError


def test_execute_yields_every_result_locally(monkeypatch):
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    tasks = [Task(str(i), abs, -i) for i in range(4)]
    assert dict(execute(tasks, n_jobs=1)) == {"0": 0, "1": 1, "2": 2, "3": 3}
    assert dict(execute(tasks, n_jobs=2)) == {"0": 0, "1": 1, "2": 2, "3": 3}
    with pytest.raises(ConfigError, match="n_jobs"):
        list(execute(tasks, n_jobs=0))


def test_a_scheduler_without_the_dask_backend_names_the_setting(monkeypatch):
    import importlib.util

    if importlib.util.find_spec("resgd.pipeline.dask_backend") is not None:
        pytest.skip("the Dask backend is installed")
    monkeypatch.setenv(SCHEDULER_ENV, "tcp://127.0.0.1:1")
    with pytest.raises(ConfigError, match=SCHEDULER_ENV):
        list(execute([Task("a", abs, -1)], n_jobs=1))


def test_a_second_sweep_waits_for_a_running_entry_and_reuses_it(tmp_path, monkeypatch):
    configs = [toy_config(s) for s in range(3)]
    cache = ResultsCache(tmp_path)
    busy = config_key(configs[0])
    holder = cache.try_lock(busy)  # another run is computing configs[0] right now
    computed_elsewhere = runs._compute(configs[0])

    def finish_later():
        time.sleep(1.0)
        cache.write(busy, computed_elsewhere)
        holder.close()

    thread = threading.Thread(target=finish_later)
    thread.start()
    counter = Counting()
    monkeypatch.setattr(runs, "_compute_stack", counter)
    table = runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
    thread.join()
    assert sorted(c.seed for c in counter.calls) == [1, 2]  # not configs[0]: it waited and reused it
    assert sorted(table["seed"].unique()) == [0, 1, 2]


def test_an_entry_whose_owner_died_is_computed_after_the_wait(tmp_path, monkeypatch):
    config = toy_config()
    cache = ResultsCache(tmp_path)
    holder = cache.try_lock(config_key(config))
    threading.Timer(0.5, holder.close).start()  # released without writing the entry
    counter = Counting()
    monkeypatch.setattr(runs, "_compute_stack", counter)
    runs.sweep([config], n_jobs=1, cache_dir=tmp_path)
    assert len(counter.calls) == 1


ROOT = Path(__file__).resolve().parents[1]


SLOW_SWEEP = textwrap.dedent("""
    import sys, time
    from resgd.experiments import runs
    from resgd.experiments.configuration import RunConfig
    from resgd.data.spec import DatasetSpec
    from resgd.core.model import ModelConfig
    from resgd.core.trainer import GDConfig
    computed = []
    original = runs._compute_stack
    def slow(configs):
        for config in configs:
            computed.append(config.seed)
            time.sleep(0.4)
        return original(configs)
    runs._compute_stack = slow
    spec = DatasetSpec("toy", n_train=6, n_tokens=4, n_test=4, seed=0)
    configs = [RunConfig(spec, ModelConfig(d=6, d_qk=3, m=5, beta=1.0),
                            GDConfig(lr=0.05, iterations=8, reduction="mean", record_every=4), seed=s) for s in range(6)]
    print("ready", flush=True)
    sys.stdin.readline()
    table = runs.sweep(configs, n_jobs=1, cache_dir=sys.argv[1])
    print(len(computed), table["loss"].sum(), flush=True)
""")


def test_two_runs_on_one_results_folder_compute_each_run_once(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", SLOW_SWEEP, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(2)]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:  # start both sweeps together
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outs = [proc.communicate(timeout=120)[0].split() for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    assert sum(int(out[0]) for out in outs) == 6  # without locks: up to 12
    assert outs[0][1] == outs[1][1]  # the same results
