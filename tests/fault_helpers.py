"""Helpers that several test files share: task functions for real Dask and local workers (importable
there: the workers get ``tests/`` on their path), a real ``dask scheduler`` with its workers, tiny
sweeps, a toy ``reproduce`` and a fault at any file-system step.

Each helper imports what it needs when called: a Dask worker that imports this module for a task
function does not load the package's computing modules for it."""

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
    from resgd.experiments.configuration import RunConfig

    spec = DatasetSpec("toy", n_train=6, n_tokens=4, n_test=4, seed=0)
    base = RunConfig(spec, ModelConfig(d=6, d_qk=3, m=5, beta=1.0),
                        GDConfig(lr=0.05, iterations=iterations, reduction="mean", record_every=iterations // 2))
    return [replace(base, seed=s) for s in range(n)]


def toy_config(seed: int = 0):
    """One run of :func:`toy_configs` (8 iterations), with seed ``seed``."""
    return toy_configs(seed + 1)[seed]


def jena_config(seed: int):
    """A tiny run on Jena (the data loaded where the run computes: the stand-in without a data folder)."""
    from resgd.core.model import ModelConfig
    from resgd.core.trainer import GDConfig
    from resgd.data.spec import DatasetSpec
    from resgd.experiments.configuration import RunConfig

    spec = DatasetSpec("jena", n_train=8, n_tokens=4, n_test=4, seed=seed)
    return RunConfig(spec, ModelConfig(d=11, d_qk=3, m=5, beta=1.0),
                        GDConfig(lr=0.01, iterations=5, reduction="mean", record_every=5))


class Counting:
    """Stands in for ``runs._compute_stack`` (where every run is computed, alone or stacked) and
    records the configs it computed."""

    def __init__(self):
        from resgd.experiments import runs

        self.calls = []
        self.original = runs._compute_stack

    def __call__(self, configs):
        self.calls.extend(configs)
        return self.original(configs)


def reproduce_toy(root, *extra: str) -> int:
    """The toy part (:mod:`faults.toy_reproduce`) through ``cli.main`` in this process, as the script
    does without pacing; its outputs under ``root``."""
    from faults.toy_reproduce import toy_part
    from resgd import cli

    return cli.main(["reproduce", "--only", "toy", "--figures-dir", str(root / "figures"),
                     "--results-dir", str(root / "results"), *extra], parts={"toy": toy_part})


def entries(root) -> list:
    """The run-cache entries of a toy reproduce under ``root``."""
    return sorted((root / "results" / "cache").glob("*.pkl"))


def leftovers(root) -> list:
    """Temporary or staged files that a finished or killed run must not leave behind."""
    return [p for p in root.rglob("*") if ".tmp" in p.name or ".resgd-stage-" in str(p) or p.suffix == ".part"]


def run_cli_with_scheduler(address: str, tmp_path, capsys) -> tuple[int, str, float]:
    """``reproduce --scheduler address`` of a part that must not run: (exit status, its one error line, seconds)."""
    from resgd import cli

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


def reproduce_part_on_data(part: str, data, tmp_path, monkeypatch, capsys) -> tuple[int, str]:
    """``reproduce --quick --only part`` on the data folder ``data``, offline, with this test's own data
    cache and output folders: (exit status, what it wrote to stderr)."""
    from resgd import cli

    for name, value in {"RESGD_DATA_DIR": data, "RESGD_OFFLINE": 1, "RESGD_CACHE_DIR": tmp_path / "cache"}.items():
        monkeypatch.setenv(name, str(value))
    status = cli.main(["reproduce", "--quick", "--only", part, "--figures-dir", str(tmp_path / "figures"),
                       "--results-dir", str(tmp_path / "results")])
    return status, capsys.readouterr().err


def one_line(exc) -> str:
    """The message of a caught exception (``pytest.ExceptionInfo``), which must be one line."""
    message = str(exc.value)
    assert "\n" not in message
    return message


def re_file(path) -> str:
    """A regular expression for a message's start that names ``path``."""
    import re

    return re.escape(str(path)) + ": "


def sparse_file(path, size: int):
    """A file of ``size`` zero bytes that takes no disk space (no line end anywhere)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


STEPS = ("replace", "rename", "symlink", "link", "fsync", "mkdir")
"""The file-system calls :func:`with_fault_at_step` counts as steps."""


def with_fault_at_step(action, event: str, at: int) -> tuple[int, int]:
    """``action()`` in a forked process, ``event`` (kill -9 or a signal's name) at its ``at``-th
    file-system step (:data:`STEPS`); returns (exit status, steps taken): the status is 0 when the
    action ended before step ``at``. The publish's and the book build's fault sweeps share it."""
    import os
    import signal

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        status = 0
        try:
            from resgd.infra.user_errors import Stopped, stop_on_signals

            count = [0]

            def wrap(real):
                def step(*args, **kwargs):
                    count[0] += 1
                    os.write(write, b".")
                    if count[0] == at:
                        if event == "kill -9":
                            os._exit(9)
                        os.kill(os.getpid(), getattr(signal, event))
                    return real(*args, **kwargs)
                return step

            for name in STEPS:
                setattr(os, name, wrap(getattr(os, name)))
            try:
                with stop_on_signals():
                    action()
            except Stopped as stop:
                status = 128 + stop.signum
        except BaseException:  # noqa: BLE001 - the child reports by its status only
            status = 1
        os._exit(status)
    os.close(write)
    steps = 0
    while chunk := os.read(read, 4096):
        steps += len(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), steps
