"""Run a sweep's tasks on an existing ``dask.distributed`` cluster.

The sweep engine (:func:`resgd.pipeline.sweep.execute`) calls :func:`execute_dask` when a
scheduler address is given (``--scheduler ADDRESS`` or ``$RESGD_SCHEDULER``). Workers only
compute: each task is ``fn(arg)`` with ``fn`` a picklable module-level function that touches no
file, and its result travels back to the calling process, which writes the cache. So a cluster
needs no shared file system and a worker that dies leaves no half-written cache entry behind.

Identity first: each task is sent as source and plain values (:func:`resgd.pipeline.identity.plain_task`),
so a worker running another version of resgd refuses it in one line before it unpickles anything of
ours (a class moved between versions would otherwise end the worker on its first message).

Robustness (why the loop below is more than ``as_completed``):

* a worker killed mid-sweep: the scheduler reruns the tasks it held on another worker (up to
  Dask's ``distributed.scheduler.allowed-failures``; after that the future errs with
  ``KilledWorker``, which we resubmit ourselves);
* ``client.restart()`` (by us or anyone sharing the cluster) cancels every future: cancelled
  tasks are resubmitted under a fresh key;
* each task's result is yielded exactly once, whatever happened to its futures; an exception
  raised *by the task itself* is not retried and propagates to the caller unchanged.

* a worker stopped (SIGSTOP), hung or cut off while it holds tasks: named on stderr once it has not
  reported to its scheduler for :data:`SILENT_WORKER_S` seconds (:func:`_name_silent_workers`);
* a scheduler stopped, hung or cut off with its connection open: named on stderr once it has left
  a question unanswered for :data:`SILENT_SCHEDULER_S` seconds (the same watch);
* a scheduler without a worker (none started yet, or every one gone and not back): named on stderr
  once it has had none for :data:`NO_WORKER_S` seconds (the same watch), with the command that starts one.

A task is resubmitted at most ``max_resubmits`` times; then :class:`DaskSweepError` names it.

A scheduler lost mid-run (killed, network gone) ends the sweep within about ``timeout`` seconds
with a :class:`resgd.infra.user_errors.ClusterError` in one line: every result that arrived before is
already in the caller's cache, so a new run resumes from there.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from typing import Any

from .polling import polling

MAX_RESUBMITS = 5
log = logging.getLogger(__name__)


from ..infra.user_errors import ClusterError  # noqa: E402 - this module is imported only when a scheduler is used


class DaskSweepError(ClusterError):
    """A task could not be completed on the cluster (it kept losing its worker or being cancelled):
    one line, as every cluster problem, not a traceback; the message says what to check."""


CONNECTION_LOST = ("ClosedClientError", "CommClosedError", "CancelledError", "FutureCancelledError", "TimeoutError")


def _connection_lost(err: BaseException) -> bool:
    """An error of the client's connection (not of a task): the scheduler is gone."""
    return isinstance(err, (OSError, TimeoutError)) or type(err).__name__ in CONNECTION_LOST


def _lost_scheduler(address: Any, done: int, total: int, reason: str):
    from ..infra.user_errors import ClusterError

    return ClusterError(
        f"the Dask scheduler at {address!r} was lost mid-run ({reason}); the {done} of {total} "
        f"results that arrived are cached and a new run resumes from them: restart the scheduler, or "
        f"drop --scheduler to run locally"
    )


SILENT_WORKER_S = 30.0
"""A worker that holds tasks and has not reported to its scheduler for this long (seconds, on the
client's own clock) is named on stderr, once: stopped (SIGSTOP), hung or cut off."""
SILENT_POLL_S = 2.0
SILENT_SCHEDULER_S = 20.0
"""A scheduler that has left the watch's question unanswered this long (seconds, on the client's
clock) is named on stderr, once: stopped (SIGSTOP), hung or cut off with its connection open (a
closed one ends the sweep at once)."""
NO_WORKER_S = 30.0
"""A scheduler seen without any worker for this long (seconds, on the client's clock) is named on
stderr, once until a worker joins, with the command that starts one."""


def _name_silent_workers(client, scheduler: Any = None):
    """While the block runs, ask the scheduler every :data:`SILENT_POLL_S` seconds when each worker
    last reported (its ``last_seen``) and name each one holding tasks whose report has not changed
    for :data:`SILENT_WORKER_S` seconds. Only changes count, timed here: no clock of another host
    is compared with this one's. The question is asked from a thread of its own, so a scheduler that
    does not answer (stopped, hung, cut off: the sweep's own wait cannot tell) is named once it has
    left one unanswered for :data:`SILENT_SCHEDULER_S` seconds, instead of blocking the watch."""
    seen: dict[str, tuple[Any, float]] = {}  # address -> (its last_seen, when it last changed here)
    told: set[str] = set()
    no_worker: dict[str, float] = {}  # "since": when the scheduler was first seen without a worker
    asked: dict[str, Any] = {}  # the question in flight: its thread, when it was asked, its answer

    def ask(answer: dict[str, Any]) -> None:
        try:
            answer["workers"] = client.scheduler_info()["workers"]
            answer["busy"] = client.processing()
        except Exception:  # noqa: BLE001 - the sweep itself reports a lost scheduler
            answer["failed"] = True

    def scheduler_answered() -> dict[str, Any] | None:
        """The answer to the question in flight (a new one asked when none is), or None while it waits."""
        now = time.monotonic()
        if "thread" not in asked:
            answer: dict[str, Any] = {}
            thread = threading.Thread(target=ask, args=(answer,), name="resgd-ask-scheduler", daemon=True)
            asked.update(thread=thread, since=now, answer=answer)
            thread.start()
        asked["thread"].join(min(1.0, SILENT_POLL_S))
        if asked["thread"].is_alive():
            waited = time.monotonic() - asked["since"]
            if waited >= SILENT_SCHEDULER_S and "scheduler" not in told:
                told.add("scheduler")
                print(f"the Dask scheduler at {scheduler!r} has not answered for {waited:.0f} s (stopped, hung or cut "
                      f"off): the sweep waits for it; resume it (kill -CONT) or end it (the sweep then stops in one "
                      f"line; the results that arrived are cached)", file=sys.stderr, flush=True)
            return None
        answer = asked["answer"]
        asked.clear()
        return None if answer.get("failed") else answer

    def check() -> None:
        answer = scheduler_answered()
        if answer is None:
            return
        workers, busy = answer["workers"], answer["busy"]
        now = time.monotonic()
        if workers:
            no_worker.clear()
            told.discard("no worker")  # a worker came: a later loss of every worker is named again
        elif now - no_worker.setdefault("since", now) >= NO_WORKER_S and "no worker" not in told:
            told.add("no worker")
            print(f"the Dask scheduler at {scheduler!r} has had no worker for {NO_WORKER_S:g} s: the sweep waits "
                  f"for one; start one (dask worker {scheduler}) or end the sweep (the results that arrived are "
                  f"cached)", file=sys.stderr, flush=True)
        for address, info in workers.items():
            last = info.get("last_seen")
            if address not in seen or seen[address][0] != last:
                seen[address] = (last, now)
            elif busy.get(address) and now - seen[address][1] >= SILENT_WORKER_S and address not in told:
                told.add(address)
                print(f"Dask worker {address} (host {info.get('host')}) has not reported to its scheduler for "
                      f"{SILENT_WORKER_S:g} s and holds {len(busy[address])} task(s) (stopped, hung or cut off): the "
                      f"sweep waits for it; resume it (kill -CONT) or end it (its tasks are then resubmitted)",
                      file=sys.stderr, flush=True)

    return polling(SILENT_POLL_S, check, "resgd-silent-workers")


def _lost(future) -> bool:
    """True when the future failed for a reason outside the task: cancelled, or its worker kept dying."""
    from distributed.scheduler import KilledWorker

    if future.status == "cancelled":
        return True
    if future.status == "error":
        return isinstance(future.exception(), KilledWorker)
    return False


def execute_dask(tasks: Sequence[Any], address: Any, *, max_resubmits: int = MAX_RESUBMITS,
                 timeout: float = 30, code: tuple[tuple[str, ...], dict[str, str]] | None = None) -> Iterator[tuple[str, Any]]:
    """Yield ``(task.key, task.fn(task.arg))`` for every task, computed on the cluster at ``address``.

    ``tasks``: objects with ``key`` (a string, unique), ``fn`` and ``arg``. ``address``: a
    scheduler address (``"tcp://host:8786"``) or a ``distributed.LocalCluster``. Results come as
    they complete, in any order. The client is closed when the generator ends, fails or is
    closed early (then the cluster drops the remaining tasks). ``code``: ``(entries, identity)``
    each worker must have before it unpickles a task (:class:`resgd.pipeline.identity.CodeMismatchError`
    otherwise); by default the package version alone (tasks that run no cached computation).
    """
    from distributed import Client, as_completed

    from ..infra.source_hash import code_identity
    from .identity import check_refusal, plain_task

    if code is None:
        code = ((), code_identity(()))

    tasks = list(tasks)
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise ValueError("execute_dask: task keys must be unique")
    if not tasks:
        return
    by_key = {t.key: t for t in tasks}
    try:
        client = Client(address, set_as_default=False, timeout=timeout)
    except (OSError, TimeoutError) as err:
        from ..infra.user_errors import ClusterError

        raise ClusterError(f"cannot reach the Dask scheduler at {address!r} within {timeout:g} s "
                           f"({type(err).__name__}); start it, or drop --scheduler to run locally") from None
    watching = ExitStack()
    try:
        watching.enter_context(_name_silent_workers(client, address))
        attempts = dict.fromkeys(by_key, 0)
        owner: dict[str, str] = {}  # Dask future key -> task key

        def submit(task_key: str):
            task = by_key[task_key]
            fn, args = plain_task(task.fn, task.arg, code)
            future = client.submit(fn, *args, key=f"resgd-{task_key}-{attempts[task_key]}", pure=False)
            owner[future.key] = task_key
            return future

        pending = as_completed([submit(k) for k in keys], loop=client.loop)
        delivered: set[str] = set()
        iterator = iter(pending)
        while True:
            try:
                future = next(iterator)
            except StopIteration:
                break
            except Exception as err:
                if _connection_lost(err):
                    raise _lost_scheduler(address, len(delivered), len(tasks), type(err).__name__) from None
                raise
            task_key = owner.pop(future.key)
            if task_key in delivered:  # a stale duplicate (cannot normally happen): ignore it
                future.release()
                continue
            if _lost(future):
                if client.status != "running":  # cancelled because the scheduler went away, not by a restart
                    raise _lost_scheduler(address, len(delivered), len(tasks), f"tasks cancelled, client {client.status}")
                attempts[task_key] += 1
                if attempts[task_key] > max_resubmits:
                    raise DaskSweepError(
                        f"task {task_key!r} was lost {attempts[task_key]} times (cancelled, or its worker died: a worker "
                        f"over its memory limit is ended by its nanny); the {len(delivered)} of {len(tasks)} results that "
                        f"arrived are cached and a new run resumes from them: give the workers more memory "
                        f"(dask worker --memory-limit) or check the cluster at {address!r}"
                    )
                log.warning("task %s lost (%s); resubmitting (attempt %d)", task_key, future.status, attempts[task_key] + 1)
                future.release()
                pending.add(submit(task_key))
                continue
            try:
                result = future.result()  # re-raises the task's own exception
            except Exception as err:
                if future.status != "error" and _connection_lost(err):
                    raise _lost_scheduler(address, len(delivered), len(tasks), type(err).__name__) from None
                raise
            future.release()
            check_refusal(result, code[1])
            delivered.add(task_key)
            yield task_key, result
    finally:
        watching.close()
        quiet = client.status != "running"  # a lost scheduler: closing logs its reconnect's traceback
        loggers = [logging.getLogger(name) for name in ("distributed.client", "distributed.comm", "distributed.core")]
        levels = [logger.level for logger in loggers]
        if quiet:
            for logger in loggers:
                logger.setLevel(logging.CRITICAL + 1)
        try:
            client.close(timeout=2)
        except Exception:  # noqa: BLE001 - a lost scheduler cannot be closed cleanly; nothing is left to close
            pass
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)
