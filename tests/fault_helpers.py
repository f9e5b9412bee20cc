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


class Cluster:
    """A ``dask scheduler`` process, and ``dask worker`` processes started on demand (a worker's
    environment may differ: another installation of resgd on its path)."""

    def __init__(self, folder):
        import json
        import os
        import sys
        from pathlib import Path

        tests = Path(__file__).parent
        self.dask = Path(sys.executable).with_name("dask")
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent / "src"),
                                                                 os.environ.get("PYTHONPATH", "")])}
        file = Path(folder) / "scheduler.json"
        self.procs = [self._start([str(self.dask), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                   "--scheduler-file", str(file)], self.env)]
        self.address = json.loads(wait_for(lambda: file.is_file() and file.read_text(), 120, "the scheduler file"))["address"]

    @staticmethod
    def _start(argv: list[str], env: dict[str, str]):
        import subprocess

        return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def worker(self, env: dict[str, str] | None = None):
        proc = self._start([str(self.dask), "worker", self.address, "--nthreads", "1", "--no-dashboard", "--host",
                            "127.0.0.1", "--no-nanny"], self.env if env is None else env)
        self.procs.append(proc)
        return proc

    @staticmethod
    def kill(proc) -> None:
        import os
        import signal

        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)

    def close(self) -> None:
        for proc in self.procs:
            self.kill(proc)


def toy_configs(n: int, iterations: int = 8) -> list:
    """``n`` runs (seeds 0 to n - 1) on the tiny ``toy`` data: each a fraction of a second."""
    from dataclasses import replace

    from resgd.core.model import ModelConfig
    from resgd.core.trainer import GDConfig
    from resgd.data.spec import DatasetSpec
    from resgd.experiments import study as ex

    spec = DatasetSpec("toy", n_train=6, n_tokens=4, n_test=4, seed=0)
    base = ex.RunConfig(spec, ModelConfig(d=6, d_qk=3, m=5, beta=1.0),
                        GDConfig(lr=0.05, iterations=iterations, reduction="mean", record_every=iterations // 2))
    return [replace(base, seed=s) for s in range(n)]
