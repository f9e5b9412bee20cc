"""A notebook's run (:mod:`resgd.publish.notebook_run`) watches its kernel: one stopped (SIGSTOP) is
named with what to do long before the notebook's timeout, and the notebook finishes once it is resumed.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from test_book_build import make_book

from resgd.publish import build as bb
from resgd.publish import notebook_run


@pytest.fixture(autouse=True)
def _book_results_in_the_book(monkeypatch):
    """A book build's results folder is its book's ``results/`` (under the test's ``tmp_path``): the
    suite's own per-test ``$RESGD_RESULTS_DIR`` would take the build's results elsewhere."""
    monkeypatch.delenv("RESGD_RESULTS_DIR", raising=False)


def test_a_stopped_kernel_is_named_with_what_to_do(tmp_path, monkeypatch, capsys):
    """A notebook's kernel stopped with SIGSTOP is named on stderr once it has been stopped for
    STOPPED_KERNEL_S (30 s; shortened here), with its pid and kill -CONT / kill -9, long before the
    notebook timeout; resumed, the notebook finishes."""
    monkeypatch.setattr(notebook_run, "STOPPED_KERNEL_S", 1.0)
    monkeypatch.setattr(notebook_run, "WATCH_S", 0.3)
    src = "import os, pathlib, time\npathlib.Path('kernel.pid').write_text(str(os.getpid()))\ntime.sleep(4)"
    root = make_book(tmp_path, {"01_slow": src})
    pid_file = root / "notebooks" / "kernel.pid"

    def stop_then_resume():
        deadline = time.monotonic() + 90
        while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        kernel = int(pid_file.read_text())
        os.kill(kernel, signal.SIGSTOP)
        time.sleep(3)
        os.kill(kernel, signal.SIGCONT)

    helper = threading.Thread(target=stop_then_resume)
    helper.start()
    records = bb.build(root, "quick", timeout=120, log=lambda *a: None)
    helper.join()
    kernel = int(pid_file.read_text())
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "has been stopped" in ln]
    assert len(lines) == 1 and f"process {kernel}" in lines[0]
    assert f"kill -CONT {kernel}" in lines[0] and f"kill -9 {kernel}" in lines[0]
    assert records[0].ok
