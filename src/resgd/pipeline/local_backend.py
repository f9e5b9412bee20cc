"""Run a sweep's tasks on local worker processes (joblib's loky, one torch thread per worker).

The sweep engine (:func:`resgd.pipeline.sweep.execute`) calls :func:`execute_local` when no scheduler
address is given and more than one task runs on more than one process; :mod:`.dask_backend` is the
other backend. Workers only compute; the calling process writes the cache.

Robustness: a worker that dies (killed, out of memory) takes the pool down with it, and the tasks not
yet delivered run again on a fresh pool, up to :data:`LOCAL_RETRIES` times. SIGTERM stops a sweep as
SIGINT does (the workers are shut down, no process is left behind), and a worker whose parent died
(SIGKILL) exits within about a second instead of living on as an orphan. A worker stopped (SIGSTOP,
Ctrl-Z) for :data:`STOPPED_WORKER_S` seconds is named on stderr, once, with how to resume or end it
(:func:`_name_stopped_workers`): the sweep waits for it, but not in silence.

Imported by every local worker before its first task: it imports no torch at module level, so a
worker watches its parent (:func:`_watch_parent`, its initializer) from its first second on.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..infra import processes
from ..infra.user_errors import ClusterError
from .polling import polling

ORPHAN_POLL_S = 0.5


LOCAL_RETRIES = 3
"""How many times the tasks of a dead local worker process are run again (as Dask resubmits them)."""


def execute_local(tasks: Sequence[Any], n_jobs: int) -> Iterator[tuple[str, Any]]:
    """The tasks (:class:`resgd.pipeline.sweep.Task`) on local worker processes. A worker that dies
    (killed, out of memory) takes the pool down with it: the tasks not yet delivered run again on a
    fresh pool, up to :data:`LOCAL_RETRIES` times; an exception raised by a task itself is not retried."""
    from joblib import Parallel, delayed
    from joblib.parallel import LokyBackend
    from joblib.externals.loky.process_executor import TerminatedWorkerError

    remaining = {task.key: task for task in tasks}
    _ensure_open_files(n_jobs)
    _start_tracker_deaf_to_sighup()
    for attempt in range(LOCAL_RETRIES + 1):
        jobs = [delayed(_in_worker)(task) for task in remaining.values()]
        backend = LokyBackend(initializer=_watch_parent)
        try:
            # each result as soon as it is ready, so the caller caches it at once
            with _sigterm_as_interrupt(), _name_stopped_workers():
                for key, value in Parallel(n_jobs=n_jobs, backend=backend, return_as="generator_unordered")(jobs):
                    remaining.pop(key)
                    yield key, value
            return
        except TerminatedWorkerError:
            if attempt == LOCAL_RETRIES:
                raise ClusterError(
                    f"a local worker process died {attempt + 1} time{'s' if attempt else ''} (killed, or out of memory: see `dmesg`); "
                    f"{len(remaining)} task(s) not computed, the cached ones are kept: run again with fewer "
                    f"--jobs or more free memory") from None
            print(f"a local worker process died; running its {len(remaining)} undelivered task(s) again "
                  f"(retry {attempt + 1} of {LOCAL_RETRIES})", file=sys.stderr, flush=True)


FILES_PER_WORKER = 16
FILES_BASE = 32
"""Open files a pool needs, about: this process's own (data, cache, locks) plus each worker's pipes,
semaphores and files (a pool of 2 failed under ``ulimit -n 24`` and ran under 40)."""


def _ensure_open_files(n_jobs: int) -> None:
    """Raise this process's open-file limit to what a pool of ``n_jobs`` workers needs when its hard
    limit allows; else stop in one line before any worker starts (a pool started short of files dies
    half-made, each worker printing its own traceback)."""
    import resource

    need = FILES_BASE + FILES_PER_WORKER * max(1, n_jobs)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard == resource.RLIM_INFINITY or hard >= need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        return
    raise ClusterError(f"this process may open at most {soft} files (`ulimit -n`, hard limit {hard}), too few for "
                       f"{n_jobs} local worker processes (about {need}): raise it (ulimit -n 1024), or run with --jobs 1")


def _start_tracker_deaf_to_sighup() -> None:
    """Start loky's resource tracker (a process of its own) with SIGHUP ignored. A closed terminal
    sends SIGHUP to the whole process group: the tracker died of it, loky started another, which
    printed a KeyError traceback for every resource the pool then released. This process stops on
    SIGHUP (:func:`resgd.infra.user_errors.stop_on_signals`) and ends the pool itself; an ignored
    signal stays ignored across the tracker's ``exec``."""
    if threading.current_thread() is not threading.main_thread():
        return
    from joblib.externals.loky.backend.resource_tracker import ensure_running

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        ensure_running()
    finally:
        signal.signal(signal.SIGHUP, previous)


STOPPED_WORKER_S = 30.0
"""A local worker process stopped this long (seconds) is named on stderr (once per process)."""
STOPPED_POLL_S = 2.0


def _name_stopped_workers():
    """While the block runs, look at this process's worker processes every :data:`STOPPED_POLL_S`
    seconds and name, once, each one stopped for :data:`STOPPED_WORKER_S` seconds (a stopped worker
    holds its tasks: the sweep would wait without a word)."""
    since: dict[int, float] = {}
    told: set[int] = set()

    def check() -> None:
        now = time.monotonic()
        for pid in processes.descendants(os.getpid()):
            if processes.state(pid) != "stopped":
                since.pop(pid, None)
                continue
            if now - since.setdefault(pid, now) >= STOPPED_WORKER_S and pid not in told:
                told.add(pid)
                print(f"local worker process {pid} has been stopped (SIGSTOP or Ctrl-Z) for "
                      f"{STOPPED_WORKER_S:g} s: the sweep waits for it; resume it (kill -CONT {pid}) or end it "
                      f"(kill -9 {pid}: its tasks run again on a new worker)", file=sys.stderr, flush=True)

    return polling(STOPPED_POLL_S, check, "resgd-stopped-workers")


def _in_worker(task: Any) -> tuple[str, Any]:
    """What a worker process runs: one torch thread, then the task."""
    import torch

    torch.set_num_threads(1)
    return task.key, task.fn(task.arg)


_WATCHED: set[int] = set()


def _watch_parent() -> None:
    """In a worker: exit as soon as the parent process is gone (the worker is reparented); ignore
    SIGHUP (a closed terminal reaches the whole group: the parent, which stops on it, ends its workers)."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pid = os.getpid()
    if pid in _WATCHED:
        return
    _WATCHED.add(pid)
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="resgd-orphan-watch", daemon=True).start()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM raises KeyboardInterrupt (so joblib shuts its workers down
    as on Ctrl-C); only in the main thread and only where SIGTERM has its default action."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum} (SIGTERM)")

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
