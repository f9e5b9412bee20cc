"""A sweep's local worker pool under faults from outside: a closed terminal's SIGHUP to the whole
process group, and workers killed again and again. Each is inflicted on the real code (loky's
workers and resource tracker) and must end in one line, with no worker left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from resgd.infra.user_errors import ClusterError, describe

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
