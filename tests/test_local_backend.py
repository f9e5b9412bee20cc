"""A sweep's local worker pool (:mod:`resgd.pipeline.local_backend`, joblib's loky) under faults from
outside, inflicted on the real code: a worker killed (its tasks run again), stopped (named within the
stated time) or killed again and again (one line); a sweep stopped by SIGTERM, kill -9 or a closed
terminal's SIGHUP to its process group (no worker outlives it); an open-file limit too low for the
pool (one line before any worker starts, or raised when the hard limit allows).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from resgd.infra.user_errors import ClusterError, describe


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


def test_a_worker_pool_that_dies_again_and_again_is_one_line(monkeypatch):
    """A local worker killed again and again ends the run in one line saying how often, what is kept
    and what to do, exit status 1, not a traceback."""
    from fault_helpers import always_dies

    from resgd.pipeline import local_backend, sweep

    monkeypatch.setattr(local_backend, "LOCAL_RETRIES", 0)  # one pool (each retry starts another: seconds)
    try:
        dict(sweep.execute([sweep.Task(str(x), always_dies, x) for x in range(3)], n_jobs=2))
    except ClusterError as exc:
        status, line = describe(exc)
    else:
        raise AssertionError("the sweep did not fail")
    assert status == 1 and "\n" not in line
    assert line.startswith("a local worker process died 1 time (killed, or out of memory")
    assert "the cached ones are kept" in line and "--jobs" in line


ROOT = Path(__file__).resolve().parents[1]


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


SWEEPING_CLI = """
import sys, time
from resgd import cli
from resgd.pipeline.sweep import Task, execute
def reproduce(quick, figures_dir, *, n_jobs, scheduler):
    print("started", flush=True)
    dict(execute([Task(str(i), time.sleep, 600) for i in range(4)], n_jobs=2))
raise SystemExit(cli.main(["reproduce", "--only", "setup", "--figures-dir", sys.argv[1]], parts={"setup": reproduce}))
"""


def test_sighup_to_the_process_group_mid_sweep_is_one_line_and_no_worker_outlives_it(tmp_path):
    """SIGHUP to the process group (a closed terminal) mid-sweep is one line and exit 129: loky's
    resource tracker and the workers ignore it (no KeyError traceback per released resource), and the
    run, which stops on it, ends them."""
    proc = subprocess.Popen([sys.executable, "-c", SWEEPING_CLI, str(tmp_path / "figures")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "RESGD_OFFLINE": "1"})
    try:
        assert proc.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 90
        while len(children := psutil.Process(proc.pid).children(recursive=True)) < 3:  # the tracker, two workers
            assert time.monotonic() < deadline, "the workers never started"
            time.sleep(0.2)
        time.sleep(1.0)  # the workers in their task
        os.killpg(proc.pid, signal.SIGHUP)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    lines = [ln for ln in err.splitlines() if ln.strip() and "reproduce (" not in ln]
    assert proc.returncode == 129 and "Traceback" not in err and "relaunching" not in err, err
    assert lines == ["python -m resgd reproduce stopped by SIGHUP; its worker processes were ended; "
                     "the results computed so far are cached and a new run resumes from them"]
    deadline = time.monotonic() + 15
    while alive := [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]:
        assert time.monotonic() < deadline, f"processes outlived the run: {alive}"
        time.sleep(0.2)


@pytest.mark.parametrize("soft, hard, said", [
    (24, 24, "error: this process may open at most 24 files (`ulimit -n`, hard limit 24), too few for 2 local worker"),
    (24, 4096, None),
], ids=["hard-24", "soft-24"])
def test_an_open_file_limit_too_low_for_the_pool_is_one_line_or_raised(tmp_path, soft, hard, said):
    """Under ``ulimit -n 24`` a pool of two workers is refused in one line before any worker starts,
    saying what to do (was: an error naming a joblib file, then each half-made worker's traceback);
    when only the soft limit is low, the run raises it to what the pool needs and runs."""
    import resource

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT / "src")]), "RESGD_OFFLINE": "1"}
    script = ROOT / "tests" / "faults" / "toy_reproduce.py"
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "out"), "0", "--jobs", "2"], capture_output=True,
                         text=True, env=env, timeout=300,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))
    errors = [line for line in out.stderr.replace("\r", "\n").splitlines() if line.startswith("error:")]
    if said is None:
        assert out.returncode == 0 and not errors, out.stderr[-2000:]
        return
    assert out.returncode == 1, out.stderr[-2000:]
    assert len(errors) == 1 and errors[0].startswith(said) and "--jobs 1" in errors[0], out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
