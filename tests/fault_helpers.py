"""Task functions for the fault tests' real Dask workers (importable there: the workers get ``tests/`` on their path)."""

from __future__ import annotations

import time


def slow_square(x: int) -> int:
    """A task that takes a while, so that the test can disturb the cluster mid-run."""
    time.sleep(0.3 if x == 0 else 3.0)
    return x * x


def dies_once(arg: tuple[str, int]) -> int:
    """Kills its own worker process the first time (a marker file says it happened), then returns x + 1."""
    import os
    import signal
    from pathlib import Path

    marker, x = arg
    if x == 0 and not Path(marker).exists():
        Path(marker).write_text("died")
        os.kill(os.getpid(), signal.SIGKILL)
    return x + 1


def stops_once(arg: tuple[str, int]) -> int:
    """Stops its own worker process (SIGSTOP) the first time, after writing its pid into the marker
    file; returns x + 1 (once continued)."""
    import os
    import signal
    from pathlib import Path

    marker, x = arg
    if x == 0 and not Path(marker).exists():
        Path(marker).write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)
    return x + 1


def wait_for(condition, deadline_s: float, what: str):
    """Poll ``condition()`` every 0.2 s until it returns something true (returned), or fail naming ``what``."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {deadline_s} s: {what}")


def allocate(megabytes: int) -> int:
    """Holds ``megabytes`` of touched memory for a while (a worker with a smaller memory limit is ended)."""
    block = bytearray(megabytes << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(10)
    return len(block)


def always_dies(x: int) -> int:
    """Kills its own worker process, every time (a worker pool that dies again and again)."""
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)
    return x
