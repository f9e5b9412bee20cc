"""Who is at the other end of a sweep: the code and engine a worker computes with, and the scheduler.

Why its own module: these checks are the sweep's guard against numbers computed by other code, on
another engine path, or sent to something that is not a Dask scheduler; the sweep engine
(:mod:`resgd.pipeline.sweep`) calls them, the CLI checks a scheduler address with them before any
work, and none of them computes.

Code identity: every task carries the client's package version and the hash of the code it runs as
the client imported it (:func:`resgd.infra.source_hash.code_identity`); a worker whose imported code
differs refuses the task before it trains (:func:`check_code`, :class:`CodeMismatchError`, one line
naming the worker and both identities), and the client checks the identity each result reports once
more. A Dask worker is sent each task as Python source and plain values (:func:`plain_task`): it
compares identities before it unpickles anything of ours, so a worker of another version, where our
classes may have moved or changed, refuses the task in that one line instead of failing to unpickle
it (a worker ends on a message it cannot unpickle, and the sweep would wait for ever). Engine
identity: a worker on another engine path (:func:`resgd.core.engine.engine_path`) refuses it too
(:func:`check_engine`, :class:`EngineMismatchError`).

Scheduler: :func:`resolve_scheduler` (the argument, else ``$RESGD_SCHEDULER``) and
:func:`check_scheduler` (the address parses and a Dask scheduler answers there, within seconds).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from typing import Any

from ..validation import ConfigError

SCHEDULER_ENV = "RESGD_SCHEDULER"


class CodeMismatchError(ConfigError):
    """A worker runs other ``resgd`` code than the client (version or sources differ): a setup to fix, exit 2."""


def _describe_identity(identity: object) -> str:
    if not isinstance(identity, dict):
        return "resgd code of unknown identity (older than this check)"
    if identity.get("version") is None:
        return f"no importable resgd ({identity.get('error')})"
    if identity.get("source") is None:
        return f"resgd {identity.get('version')} (the hash of its sources unknown: {identity.get('error')})"
    return f"resgd {identity.get('version')} with sources sha256 {identity.get('source')}"


def check_code(theirs: object, mine: dict[str, str], worker: str) -> None:
    """Raise :class:`CodeMismatchError` unless ``theirs`` is ``mine`` (see :mod:`resgd.infra.source_hash`)."""
    if theirs != mine:
        raise CodeMismatchError(
            f"{worker} runs {_describe_identity(theirs)}, the client runs {_describe_identity(mine)}: "
            f"install the client's resgd on every worker (then restart them); nothing was cached"
        )


REFUSED = "resgd: this worker runs other code"
"""The first item of a worker's refusal: ``(REFUSED, worker, its identity)``, plain values."""

WORKER_CHECK = '''
def _worker_name():
    try:
        from distributed import get_worker

        return f"Dask worker {get_worker().address}"
    except Exception:
        import os, socket

        return f"process {os.getpid()} on {socket.gethostname()}"


def _worker_identity(entries):
    try:
        from resgd.infra.source_hash import code_identity

        return code_identity(tuple(entries))
    except Exception as err:
        try:
            import resgd

            version = str(resgd.__version__)
        except Exception:
            version = None
        return {"version": version, "source": None, "error": " ".join(f"{type(err).__name__}: {err}".split())}


def _checked_task(entries, identity, payload, refused):
    mine = _worker_identity(entries)
    if mine != identity:
        return (refused, _worker_name(), mine)
    import pickle

    fn, arg = pickle.loads(payload)
    return fn(arg)
'''
"""What a Dask worker runs before a task, sent as source: it works with the resgd of any version (or none)."""

_WORKER_CALL = "exec(check) or _checked_task(entries, identity, payload, refused)"


def plain_task(fn: Callable[[Any], Any], arg: Any, code: tuple[tuple[str, ...], dict[str, str]]) -> tuple[Callable, tuple]:
    """``(function, args)`` to submit for ``fn(arg)``: :func:`eval` of :data:`WORKER_CHECK`'s call, with
    ``fn`` and ``arg`` pickled into bytes. A worker unpickles only builtins, strings, bytes and dicts
    until it has found its identity for ``code`` (``(entries, the client's identity)``) equal to the
    client's; else it returns ``(REFUSED, worker, its identity)`` (:func:`check_refusal`)."""
    import cloudpickle

    entries, identity = code
    scope = {"check": WORKER_CHECK, "entries": tuple(entries), "identity": dict(identity),
             "payload": cloudpickle.dumps((fn, arg)), "refused": REFUSED}
    return eval, (_WORKER_CALL, scope)


def check_refusal(result: Any, identity: dict[str, str]) -> None:
    """Raise :class:`CodeMismatchError` when ``result`` is a worker's refusal of a :func:`plain_task`."""
    if isinstance(result, tuple) and len(result) == 3 and result[0] == REFUSED:
        check_code(result[2], identity, str(result[1]))


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
