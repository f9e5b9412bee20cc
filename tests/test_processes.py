"""The processes ``/proc`` tells of (:mod:`resgd.infra.processes`): states, start times and descendants of real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from resgd.infra import processes

SRC = Path(__file__).resolve().parents[1] / "src" / "resgd"
pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="no /proc")


def test_proc_is_read_in_one_module_only():
    users = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                   if any(quote + "/proc" in p.read_text(encoding="utf-8") for quote in "\"'"))
    assert set(users) <= {"infra/processes.py", "core/engine.py"}, users  # engine.py reads /proc/cpuinfo (the CPU's name)


def test_state_start_time_and_descendants_of_a_real_child():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert processes.state(child.pid) == "running"
        assert child.pid in processes.descendants(os.getpid())
        started = processes.start_time(child.pid)
        assert started is not None and abs(started - time.time()) < 30
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while processes.state(child.pid) != "stopped" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes.state(child.pid) == "stopped"
        os.kill(child.pid, signal.SIGCONT)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert processes.state(child.pid) == "gone" and processes.start_time(child.pid) is None
