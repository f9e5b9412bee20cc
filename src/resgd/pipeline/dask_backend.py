"""Run a sweep's tasks on an existing ``dask.distributed`` cluster.

The sweep engine (:func:`resgd.pipeline.sweep.execute`) calls :func:`execute_dask` when a
scheduler address is given (``--scheduler ADDRESS`` or ``$RESGD_SCHEDULER``). Workers only
compute: each task is ``fn(arg)`` with ``fn`` a picklable module-level function that touches no
file, and its result travels back to the calling process, which writes the cache. So a cluster
needs no shared file system and a worker that dies leaves no half-written cache entry behind.

Robustness (why the loop below is more than ``as_completed``):

* a worker killed mid-sweep: the scheduler reruns the tasks it held on another worker (up to
  Dask's ``distributed.scheduler.allowed-failures``; after that the future errs with
  ``KilledWorker``, which we resubmit ourselves);
* ``client.restart()`` (by us or anyone sharing the cluster) cancels every future: cancelled
  tasks are resubmitted under a fresh key;
* each task's result is yielded exactly once, whatever happened to its futures; an exception
  raised *by the task itself* is not retried and propagates to the caller unchanged.

A task is resubmitted at most ``max_resubmits`` times; then :class:`DaskSweepError` names it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

MAX_RESUBMITS = 5
log = logging.getLogger(__name__)


class DaskSweepError(RuntimeError):
    """A task could not be completed on the cluster (it kept losing its worker or being cancelled)."""


def _lost(future) -> bool:
    """True when the future failed for a reason outside the task: cancelled, or its worker kept dying."""
    from distributed.scheduler import KilledWorker

    if future.status == "cancelled":
        return True
    if future.status == "error":
        return isinstance(future.exception(), KilledWorker)
    return False


def execute_dask(tasks: Sequence[Any], address: Any, *, max_resubmits: int = MAX_RESUBMITS,
                 timeout: float = 60) -> Iterator[tuple[str, Any]]:
    """Yield ``(task.key, task.fn(task.arg))`` for every task, computed on the cluster at ``address``.

    ``tasks``: objects with ``key`` (a string, unique), ``fn`` and ``arg``. ``address``: a
    scheduler address (``"tcp://host:8786"``) or a ``distributed.LocalCluster``. Results come as
    they complete, in any order. The client is closed when the generator ends, fails or is
    closed early (then the cluster drops the remaining tasks).
    """
    from distributed import Client, as_completed

    tasks = list(tasks)
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise ValueError("execute_dask: task keys must be unique")
    if not tasks:
        return
    by_key = {t.key: t for t in tasks}
    client = Client(address, set_as_default=False, timeout=timeout)
    try:
        attempts = dict.fromkeys(by_key, 0)
        owner: dict[str, str] = {}  # Dask future key -> task key

        def submit(task_key: str):
            task = by_key[task_key]
            future = client.submit(task.fn, task.arg, key=f"resgd-{task_key}-{attempts[task_key]}", pure=False)
            owner[future.key] = task_key
            return future

        pending = as_completed([submit(k) for k in keys], loop=client.loop)
        delivered: set[str] = set()
        for future in pending:
            task_key = owner.pop(future.key)
            if task_key in delivered:  # a stale duplicate (cannot normally happen): ignore it
                future.release()
                continue
            if _lost(future):
                attempts[task_key] += 1
                if attempts[task_key] > max_resubmits:
                    raise DaskSweepError(
                        f"task {task_key!r} was lost {attempts[task_key]} times (cancelled or its worker died); "
                        f"check the cluster at {address!r}"
                    )
                log.warning("task %s lost (%s); resubmitting (attempt %d)", task_key, future.status, attempts[task_key] + 1)
                future.release()
                pending.add(submit(task_key))
                continue
            result = future.result()  # re-raises the task's own exception
            future.release()
            delivered.add(task_key)
            yield task_key, result
    finally:
        client.close()
