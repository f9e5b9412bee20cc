"""The one sweep engine: many independent computations, in parallel, with the results cache.

:func:`execute` is the seam every backend plugs into: it takes :class:`Task` objects (a key, a
picklable module-level function and its argument; ``fn(arg)`` computes, touches no file and
returns the result) and yields ``(key, result)`` as each one completes, in any order. The calling
process writes the cache (:func:`cached_sweep`), so a backend only ever computes.

Grouped tasks: a :class:`Group` computes several keys in one call (``fn(arg)`` returns one result
per key, in order), e.g. many small training runs stacked into one (:mod:`resgd.core.trainer`).
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
(:class:`resgd.pipeline.identity.CodeMismatchError`, one line naming the worker and both identities),
and the client checks the identity each result reports once more. The checks themselves are in
:mod:`resgd.pipeline.identity`; a Dask worker compares identities before it unpickles the task
(:func:`resgd.pipeline.identity.plain_task`), so a worker of another version, where our classes may
have moved, refuses it in the same one line.

Backends: local processes (:func:`resgd.pipeline.local_backend.execute_local`: joblib's loky, one
torch thread per worker, retries and clean shutdown; ``n_jobs == 1`` runs in-process) unless a
scheduler address is given (``scheduler=`` or ``$RESGD_SCHEDULER``, checked by
:func:`resgd.pipeline.identity.check_scheduler`), which goes to
:func:`resgd.pipeline.dask_backend.execute_dask`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from . import store
from .cache import ResultsCache
from .identity import SCHEDULER_ENV, CodeMismatchError, check_code, check_engine, check_scheduler, resolve_scheduler
from .local_backend import execute_local


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


def check_n_jobs(n_jobs: object) -> int:
    from ..validation import ConfigError

    if not isinstance(n_jobs, int) or isinstance(n_jobs, bool) or n_jobs == 0 or n_jobs < -1:
        raise ConfigError(f"n_jobs: expected an integer >= 1 (or -1 for all cores), got {n_jobs!r}")
    return n_jobs


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
        for key, reply in _execute(plain, n_jobs=n_jobs, scheduler=scheduler, code=(entries, identity)):
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


def _execute(tasks: list[Task], *, n_jobs: int, scheduler: str | None = None,
             code: tuple[tuple[str, ...], dict[str, str]] | None = None) -> Iterator[tuple[str, Any]]:
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
        yield from execute_dask(tasks, address, code=code)
        return
    if not tasks:
        return
    if n_jobs == 1 or len(tasks) == 1:
        from ..infra.threads import torch_threads

        with torch_threads(1):
            for task in tasks:
                yield task.key, task.fn(task.arg)
        return
    yield from execute_local(tasks, n_jobs)


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
