"""The pipeline layer under injected faults: tampered cache entries, unwritable outputs, a failure
while publishing, SIGTERM / SIGKILL of a parallel sweep, two runs on one results folder."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # tests only; never in a notebook

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from resgd.experiments import runs  # noqa: E402
from resgd.experiments.configuration import RunConfig, config_key  # noqa: E402
from resgd.experiments.study import reproduce  # noqa: E402
from resgd.data.spec import DatasetSpec  # noqa: E402
from resgd.pipeline.cache import RESULTS_ENV  # noqa: E402
from resgd.core.model import ModelConfig  # noqa: E402
from resgd.pipeline.cache import CacheEntryRejected, ResultsCache  # noqa: E402
from resgd.pipeline.reproduce import OutputError, Outputs, check_writable, publish  # noqa: E402
from resgd.pipeline.identity import SCHEDULER_ENV  # noqa: E402
from resgd.pipeline.sweep import Task, execute  # noqa: E402
from resgd.core.trainer import GDConfig  # noqa: E402
from resgd.validation import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def toy_config(seed: int = 0) -> RunConfig:
    spec = DatasetSpec("toy", n_train=6, n_tokens=4, n_test=4, seed=0)
    return RunConfig(spec, ModelConfig(d=6, d_qk=3, m=5, beta=1.0),
                        GDConfig(lr=0.05, iterations=8, reduction="mean", record_every=4), seed=seed)


class Counting:
    def __init__(self):
        self.calls = []
        self.original = runs._compute_stack  # every run is computed there, alone or stacked

    def __call__(self, configs):
        self.calls.extend(configs)
        return self.original(configs)


# --------------------------------------------------------------------------- verified entries

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


# --------------------------------------------------------------------------- outputs

def test_unwritable_output_folder_is_reported_before_any_work(tmp_path, monkeypatch):
    blocked = tmp_path / "figures"
    blocked.write_text("a file where the figures folder should be")
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path / "results"))
    counter = Counting()
    monkeypatch.setattr(runs, "_compute_stack", counter)
    with pytest.raises(OutputError, match=f"output folder {blocked} is not writable"):
        reproduce("toy", True, blocked, n_jobs=1, progress=False)
    assert counter.calls == [] and not (tmp_path / "results" / "tables").exists()
    check_writable([tmp_path / "ok" / "nested"])  # a missing folder is made, not an error


def test_a_failure_while_publishing_leaves_every_earlier_output_as_it_was(tmp_path):
    import matplotlib.pyplot as plt

    figures, results = tmp_path / "figures", tmp_path / "results"
    publish(Outputs(result_files={"t": ("tables/t.csv", lambda p: Path(p).write_text("old\n"))}), figures, results)

    class Broken:
        def savefig(self, *args, **kwargs):
            raise OSError(28, "No space left on device (simulated)")

    fig = plt.figure()
    outputs = Outputs(figures={"good": fig, "broken": Broken()},
                      result_files={"t": ("tables/t.csv", lambda p: Path(p).write_text("new\n"))})
    with pytest.raises(OSError, match="No space left"):
        publish(outputs, figures, results)
    plt.close(fig)
    assert (results / "tables" / "t.csv").read_text() == "old\n"  # not half-updated
    assert not (figures / "good.png").exists()
    builds = list((figures / ".resgd-builds" / "builds").iterdir())
    assert [b.name for b in builds] == [os.readlink(figures / ".resgd-builds" / "current-full").split("/")[-1]]  # the failed build is gone
    leftovers = [p for p in tmp_path.rglob("*") if p.suffix == ".part" or ".resgd-link-" in p.name]
    assert leftovers == []


# --------------------------------------------------------------------------- the seam

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


# --------------------------------------------------------------------------- locks

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


# --------------------------------------------------------------------------- shutdown

PARALLEL_SLEEP = textwrap.dedent("""
    import time
    from resgd.pipeline.sweep import Task, execute
    print("start", flush=True)
    for _ in execute([Task(str(i), time.sleep, 120) for i in range(2)], n_jobs=2):
        pass
""")


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def _start_workers() -> tuple[subprocess.Popen, set[int]]:
    """A parallel sweep of two long tasks; returns it once both workers are up and watching."""
    proc = subprocess.Popen([sys.executable, "-c", PARALLEL_SLEEP], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline().strip() == "start"
    deadline = time.monotonic() + 120
    workers: set[int] = set()
    while time.monotonic() < deadline:
        children = _children(proc.pid)
        workers = {c for c in children if "popen_loky" in Path(f"/proc/{c}/cmdline").read_text(errors="ignore")}
        if len(workers) >= 2 and all(_threads(w) >= 2 for w in workers):
            return proc, children
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the sweep did not start its workers")


def _gone_within(pids: set[int], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    return {p for p in pids if _alive(p)}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_no_worker_outlives_a_stopped_sweep(sig):
    proc, workers = _start_workers()
    try:
        os.kill(proc.pid, sig)
        proc.wait(timeout=60)
        assert _gone_within(workers, 30) == set()
    finally:
        for pid in workers | {proc.pid}:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
