"""The one sweep engine: many independent computations, in parallel, with the results cache.

:func:`execute` is the seam every backend plugs into: it takes :class:`Task` objects (a key, a
picklable module-level function and its argument; ``fn(arg)`` computes, touches no file and
returns the result) and yields ``(key, result)`` as each one completes, in any order. The calling
process writes the cache (:func:`cached_sweep`), so a backend only ever computes.

Grouped tasks: a :class:`Group` computes several keys in one call (``fn(arg)`` returns one result
per key, in order), e.g. many small training runs stacked into one (:mod:`resgd.core.stacked`).
:func:`cached_sweep` forms the groups *after* the cache filter (its ``group`` argument), so only
missing entries are computed and an interrupted sweep resumes; :func:`execute` sends a group to
any backend as one plain task and yields its keys one by one, each written to the cache as it
arrives. A group that fails writes none of its keys (the entries of groups done before stay).

Data identity: every task travels with the client's data fingerprints
(:func:`resgd.data.spec.known_fingerprints`) and runs inside :func:`resgd.data.spec.expecting`,
so a worker whose data differ fails before it trains (naming itself and both digests); the
client checks the digests the task reports once more and stores them in the cache entry, so
nothing computed on other data is ever stored under the client's key.

Code identity: every task also carries the client's package version and the hash of the code it
runs as the client imported it (:func:`resgd.infra.source_hash.code_identity`: the cached runs' modules
and the tasks' own, with everything they import); a worker whose imported code differs (another
version, an edited step, a file edited after the client started) refuses the task before it trains
(:class:`CodeMismatchError`, one line naming the worker and both identities), and the client checks
the identity each result reports once more.

Backends: local processes (joblib's loky, one torch thread per worker; ``n_jobs == 1`` runs
in-process) unless a scheduler address is given (``scheduler=`` or ``$RESGD_SCHEDULER``), which
goes to :func:`resgd.pipeline.dask_backend.execute_dask`.

Clean shutdown of local workers: SIGTERM stops a sweep as SIGINT does (the workers are shut
down, no process is left behind), and a worker whose parent died (SIGKILL) exits within about a
second instead of living on as an orphan. A local worker stopped (SIGSTOP, Ctrl-Z) for
:data:`STOPPED_WORKER_S` seconds is named on stderr, once, with how to resume or end it
(:func:`_name_stopped_workers`): the sweep waits for it, but not in silence.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from ..validation import ConfigError
from ..infra import processes
from . import store
from .cache import ResultsCache
from .polling import polling

# Imported by every local worker before its first task: it imports no torch at module level, so a
# worker watches its parent (:func:`_watch_parent`, its initializer) from its first second on.

SCHEDULER_ENV = "RESGD_SCHEDULER"
ORPHAN_POLL_S = 0.5


class Task(NamedTuple):
    """One computation of a sweep: ``fn(arg)``, cached under ``key``."""

    key: str
    fn: Callable[[Any], Any]
    arg: Any


class Group(NamedTuple):
    """Several computations in one call: ``fn(arg)`` returns one result per key of ``keys``, in order."""

    keys: tuple[str, ...]
    fn: Callable[[Any], Any]
    arg: Any


def _run_group(group: Group) -> list[Any]:
    """A group as one plain task (module level, so any backend can pickle it)."""
    results = list(group.fn(group.arg))
    if len(results) != len(group.keys):
        raise RuntimeError(f"group of {len(group.keys)} keys returned {len(results)} results")
    return results


def _as_task(item: Task | Group) -> tuple[Task, tuple[str, ...] | None]:
    if isinstance(item, Group):
        return Task(f"group-{item.keys[0]}-{len(item.keys)}", _run_group, item), item.keys
    return item, None


class CodeMismatchError(ConfigError):
    """A worker runs other ``resgd`` code than the client (version or sources differ): a setup to fix, exit 2."""


def _describe_identity(identity: object) -> str:
    if not isinstance(identity, dict):
        return "resgd code of unknown identity (older than this check)"
    return f"resgd {identity.get('version')} with sources sha256 {identity.get('source')}"


def check_code(theirs: object, mine: dict[str, str], worker: str) -> None:
    """Raise :class:`CodeMismatchError` unless ``theirs`` is ``mine`` (see :mod:`resgd.infra.source_hash`)."""
    if theirs != mine:
        raise CodeMismatchError(
            f"{worker} runs {_describe_identity(theirs)}, the client runs {_describe_identity(mine)}: "
            f"install the client's resgd on every worker (then restart them); nothing was cached"
        )


class EngineMismatchError(CodeMismatchError):
    """A worker computes on another engine path than the client (instruction set, MKL path, torch):
    its numbers would differ in the last digits under the client's cache key; a setup to fix, exit 2."""


def _describe_engine(engine: object) -> str:
    if not isinstance(engine, dict):
        return "an engine of unknown path"
    return ", ".join(f"{k}={v}" for k, v in sorted(engine.items()))


def check_engine(theirs: object, mine: dict[str, str], worker: str) -> None:
    """Raise :class:`EngineMismatchError` unless the worker's engine path ``theirs`` is the client's
    ``mine`` (:func:`resgd.core.engine.engine_path`): cached rows are keyed by the client's."""
    if theirs != mine:
        raise EngineMismatchError(
            f"{worker} computes on {_describe_engine(theirs)}, the client on {_describe_engine(mine)}: its results "
            f"would differ in the last digits under the client's cache key; run every worker with the client's "
            f"instruction set, $RESGD_MKL_INTEL_PATH and torch; nothing was cached"
        )


def check_n_jobs(n_jobs: object) -> int:
    from ..validation import ConfigError

    if not isinstance(n_jobs, int) or isinstance(n_jobs, bool) or n_jobs == 0 or n_jobs < -1:
        raise ConfigError(f"n_jobs: expected an integer >= 1 (or -1 for all cores), got {n_jobs!r}")
    return n_jobs


def resolve_scheduler(scheduler: str | None = None) -> str | None:
    """The scheduler address: the argument, else ``$RESGD_SCHEDULER``, else None (local processes)."""
    from .. import settings

    return (scheduler or "").strip() or settings.scheduler()


SCHEDULER_CHECK_S = 5.0
"""How long :func:`check_scheduler` waits for the scheduler's port to answer."""
_ADDRESS = re.compile(r"^(?:(?P<scheme>[a-z]+)://)?(?P<host>\[[0-9a-fA-F:]+\]|[^:/\s\[\]]+):(?P<port>[0-9]{1,5})/?$")


def check_scheduler(address: str, timeout: float = SCHEDULER_CHECK_S) -> str:
    """``address`` if it parses (``[tcp://]host:port``) and a Dask scheduler answers there; else a
    :class:`resgd.validation.ConfigError` in one line, within about twice ``timeout`` seconds, before any work."""
    from ..validation import ConfigError

    where = f"scheduler {address!r} (from --scheduler or ${SCHEDULER_ENV})"
    match = _ADDRESS.match(address.strip())
    if match is None or not 0 < int(match["port"]) < 65536 or (match["scheme"] or "tcp") not in ("tcp", "tls"):
        raise ConfigError(f"{where}: not an address of the form tcp://HOST:PORT (e.g. tcp://127.0.0.1:8786)")
    host = match["host"].strip("[]")
    try:
        with socket.create_connection((host, int(match["port"])), timeout=timeout):
            pass
    except OSError as err:
        raise ConfigError(
            f"{where}: nothing answers at {host}:{match['port']} within {timeout:g} s "
            f"({err.strerror or type(err).__name__}); start `dask scheduler` there, or drop --scheduler / "
            f"unset {SCHEDULER_ENV} to run locally"
        ) from None
    kind = _dask_identity(address if match["scheme"] else f"tcp://{address.strip()}", timeout)
    if kind != "Scheduler":
        what = (f"a Dask {kind.lower()}, not the scheduler" if kind else
                f"something that does not answer as a Dask scheduler within {timeout:g} s (the dashboard's port?)")
        raise ConfigError(
            f"{where}: {host}:{match['port']} is {what}; give the address that `dask scheduler` prints "
            f"(port 8786 by default), or drop --scheduler / unset {SCHEDULER_ENV} to run locally"
        )
    return address


def _dask_identity(address: str, timeout: float) -> str | None:
    """The ``type`` a Dask server at ``address`` gives for itself (``"Scheduler"``, ``"Worker"``),
    None when it does not answer Dask's handshake within ``timeout`` seconds; ``"Scheduler"``
    when Dask is not installed (that is reported when the sweep starts).

    Why: ``distributed.Client`` waits for ever on a port that accepts connections but does not
    speak Dask. Run in its own thread and event loop, so that it also works inside a notebook's running loop."""
    import threading

    try:
        from distributed.comm import connect
    except ModuleNotFoundError:
        return "Scheduler"
    import asyncio

    async def ask() -> object:
        comm = await connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    answer: list[object] = []

    def run() -> None:
        try:
            answer.append(asyncio.run(asyncio.wait_for(ask(), timeout)))
        except Exception:  # noqa: BLE001 - no Dask reply in time: the caller says so
            pass

    thread = threading.Thread(target=run, daemon=True, name="resgd-dask-identity")
    thread.start()
    thread.join(timeout + 1)
    reply = answer[0] if answer else None
    return str(reply.get("type")) if isinstance(reply, dict) and reply.get("type") else None


def execute(tasks: list[Task | Group], *, n_jobs: int, scheduler: str | None = None) -> Iterator[tuple[str, Any]]:
    """``(key, fn(arg))`` for every task, as each completes (any order); for a :class:`Group`,
    ``(key, result)`` for each of its keys when the group completes."""
    for key, value, _ in execute_checked(tasks, n_jobs=n_jobs, scheduler=scheduler):
        yield key, value


def execute_checked(tasks: list[Task | Group], *, n_jobs: int, scheduler: str | None = None,
                    cpu: dict[str, float] | None = None) -> Iterator[tuple[str, Any, dict[str, str]]]:
    """As :func:`execute`, with the data each result was computed on: ``{data set: digest}``, every
    digest checked against the client's (else :class:`resgd.data.spec.DataMismatchError`). ``cpu``,
    if given, receives each result's CPU-seconds on its worker (a group's shared out evenly)."""
    from ..core.engine import engine_path
    from ..data.spec import known_fingerprints
    from ..infra.source_hash import check_unchanged, code_identity, entries_of

    expected = known_fingerprints()
    entries = entries_of(item.fn for item in tasks)
    identity = code_identity(entries)
    engine = engine_path()
    plain, members = [], {}
    for item in tasks:
        task, keys = _as_task(item)
        plain.append(Task(task.key, _checked_call, (task.fn, task.arg, expected, (entries, identity), engine)))
        if keys is not None:
            members[task.key] = keys
    try:
        for key, reply in _execute(plain, n_jobs=n_jobs, scheduler=scheduler):
            value, used, worker, theirs, seconds = (*reply, None, None)[:5]
            check_code(theirs, identity, worker)
            data = _client_check(used, worker)
            if key in members:
                for member, result in zip(members[key], value):
                    if cpu is not None and seconds is not None:
                        cpu[member] = seconds / len(members[key])
                    yield member, result, data
            else:
                if cpu is not None and seconds is not None:
                    cpu[key] = seconds
                yield key, value, data
    except CodeMismatchError:
        check_unchanged()  # a local worker started after the client's files were edited: name that edit
        raise


def _checked_call(packed: tuple) -> tuple[Any, dict, str, dict[str, str]]:
    """On the worker: ``fn(arg)`` with the client's code identity (of the modules ``entries``, as each
    side imported them), engine path and data fingerprints enforced (code and engine before anything
    runs); returns the result, the fingerprints of the data it loaded, who computed it, its code
    identity and the CPU-seconds ``fn`` took."""
    from ..core.engine import engine_path
    from ..data.spec import expecting, where_am_i
    from ..infra.source_hash import code_identity

    fn, arg, expected, (entries, identity), engine = packed
    mine = code_identity(entries)
    check_code(mine, identity, where_am_i())
    check_engine(engine_path(), engine, where_am_i())
    with expecting(expected) as used:
        start = time.process_time()
        value = fn(arg)
        return value, dict(used), where_am_i(), mine, time.process_time() - start


def _client_check(used: dict, worker: str) -> dict[str, str]:
    """The digests a worker reports, each equal to the client's own (computed here if need be)."""
    from ..data.spec import DataMismatchError, data_fingerprint, describe_spec

    checked = {}
    for (spec, dtype), digest in used.items():
        mine = data_fingerprint(spec, dtype)
        if digest != mine:
            raise DataMismatchError(
                f"{worker}: its result was computed on data {describe_spec(spec, dtype)} with digest {digest}, "
                f"the client's have {mine}: give every worker the client's data files; nothing was cached"
            )
        checked[describe_spec(spec, dtype)] = digest
    return checked


def _execute(tasks: list[Task], *, n_jobs: int, scheduler: str | None = None) -> Iterator[tuple[str, Any]]:
    tasks = list(tasks)
    check_n_jobs(n_jobs)
    address = resolve_scheduler(scheduler)
    if address is not None:
        from ..validation import ConfigError

        try:
            from .dask_backend import execute_dask
        except ModuleNotFoundError as err:
            if err.name not in (f"{__package__}.dask_backend", "dask", "distributed"):
                raise
            raise ConfigError(
                f"scheduler {address!r} (from --scheduler or ${SCHEDULER_ENV}): this installation has no Dask "
                f"({err.name} is missing): install the project's 'cluster' extra (make install does), or unset "
                f"{SCHEDULER_ENV} / drop --scheduler to run locally"
            ) from None
        check_scheduler(address)
        yield from execute_dask(tasks, address)
        return
    if not tasks:
        return
    if n_jobs == 1 or len(tasks) == 1:
        from ..infra.threads import torch_threads

        with torch_threads(1):
            for task in tasks:
                yield task.key, task.fn(task.arg)
        return
    yield from _execute_local(tasks, n_jobs)


LOCAL_RETRIES = 3
"""How many times the tasks of a dead local worker process are run again (as Dask resubmits them)."""


def _execute_local(tasks: list[Task], n_jobs: int) -> Iterator[tuple[str, Any]]:
    """The tasks on local worker processes. A worker that dies (killed, out of memory) takes the
    pool down with it: the tasks not yet delivered run again on a fresh pool, up to
    :data:`LOCAL_RETRIES` times; an exception raised by a task itself is not retried."""
    from joblib import Parallel, delayed
    from joblib.parallel import LokyBackend
    from joblib.externals.loky.process_executor import TerminatedWorkerError

    remaining = {task.key: task for task in tasks}
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
        except TerminatedWorkerError as err:
            if attempt == LOCAL_RETRIES:
                raise RuntimeError(f"a local worker process died {attempt + 1} times; {len(remaining)} task(s) "
                                   f"not computed (the cached ones are kept): {str(err).splitlines()[0]}") from None
            print(f"a local worker process died; running its {len(remaining)} undelivered task(s) again "
                  f"(retry {attempt + 1} of {LOCAL_RETRIES})", file=sys.stderr, flush=True)


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


def _in_worker(task: Task) -> tuple[str, Any]:
    """What a worker process runs: one torch thread, then the task."""
    import torch

    torch.set_num_threads(1)
    return task.key, task.fn(task.arg)


_WATCHED: set[int] = set()


def _watch_parent() -> None:
    """In a worker: exit as soon as the parent process is gone (the worker is reparented)."""
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


def cached_sweep(
    tasks: Iterable[Task],
    cache: ResultsCache,
    *,
    n_jobs: int,
    scheduler: str | None = None,
    on_result: Callable[[str], None] | None = None,
    group: Callable[[list[Task]], list[Group]] | None = None,
) -> dict[str, Any]:
    """Every task's result by key, from ``cache`` where there and computed (then cached) otherwise.

    Resumes an interrupted sweep (finished entries are read back). A task whose entry another
    process is computing right now (its lock is held) is not computed twice: this process first
    computes the rest, then waits for that lock and reads the entry (computing it only if the
    other process stopped without writing it). ``on_result(key)`` is called after each entry is
    computed and written.

    ``group``: turns the tasks left to compute (not in the cache, locked by this process) into
    :class:`Group` objects covering exactly those keys; each group is computed by one call and
    each of its entries written as the group completes. Without it each task is computed alone.
    """
    tasks = list({task.key: task for task in tasks}.values())
    check_n_jobs(n_jobs)
    stored = store.active()
    before = len(stored.used) if stored is not None else 0
    results: dict[str, Any] = {}
    held: dict[str, Any] = {}
    busy: list[Task] = []
    try:
        todo = []
        for task in tasks:
            value = cache.read(task.key)
            if value is not None:
                results[task.key] = value
                continue
            handle = cache.try_lock(task.key)
            if handle is None:
                busy.append(task)
                continue
            held[task.key] = handle
            value = cache.read(task.key)  # finished while we looked?
            if value is None:
                todo.append(task)
            else:
                results[task.key] = value
                held.pop(task.key).close()
        _not_in_store(stored, len(todo) + len(busy), len(tasks), before)
        _compute(_grouped(todo, group), cache, results, held, n_jobs, scheduler, on_result)
        for task in busy:  # computed by another process: wait for it, then reuse its entry
            handle = cache.wait_lock(task.key)  # None: its owner is gone or stopped; compute it here
            held[task.key] = handle if handle is not None else _NoLock()
            value = cache.read(task.key)
            if value is None:
                _compute(_grouped([task], group), cache, results, held, n_jobs, scheduler, on_result)
            else:
                results[task.key] = value
                held.pop(task.key).close()
    finally:
        for handle in held.values():
            handle.close()
    return results


def _not_in_store(stored: store.Store | None, missing: int, total: int, used_before: int) -> None:
    """Results about to be computed that the results store lacks: an error under ``RESGD_STORE=require``
    (CI); else said once per sweep that the store covers in part (some of its results were read from
    it since it had ``used_before`` in use; a sweep the store has nothing of, quick mode's, is not the
    store's business)."""
    if not missing:
        return
    store.check_complete(missing, total)
    if stored is not None and stored.filling is None and len(stored.used) > used_before:
        print(f"results store: {missing} of these {total} results are not in the store ({stored.root}); "
              f"computing them here (`make results` adds them to the store)", file=sys.stderr, flush=True)


class _NoLock:
    """Stands for a lock given up on (its owner is gone or stopped): nothing to release."""

    def close(self) -> None:
        pass


def _grouped(todo: list[Task], group) -> list[Task | Group]:
    if group is None or not todo:
        return todo
    groups = list(group(todo))
    covered = [key for g in groups for key in g.keys]
    if sorted(covered) != sorted(task.key for task in todo):
        raise RuntimeError("cached_sweep: the groups must cover each task left to compute exactly once")
    return groups


def _compute(todo, cache, results, held, n_jobs, scheduler, on_result) -> None:
    cpu: dict[str, float] = {}
    for key, value, data in execute_checked(todo, n_jobs=n_jobs, scheduler=scheduler, cpu=cpu):
        with cache.computed_on(data):  # the entry records the digests of the data it was computed on
            cache.write(key, value, cpu_s=cpu.get(key))
        results[key] = value
        held.pop(key).close()
        if on_result is not None:
            on_result(key)
