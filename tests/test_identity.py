"""Who is at the other end of a sweep (:mod:`resgd.pipeline.identity`): a worker running other code,
another version of resgd, on another engine path or with other data refuses its task in one line,
and an address that is not a Dask scheduler is refused before any work."""

from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _another_version(folder: Path) -> Path:
    """A copy of resgd as another version would be: its version string differs and ``GDConfig`` is
    no longer in ``resgd.core.trainer`` (renamed throughout), so our tasks cannot be unpickled there."""
    copy = folder / "resgd"
    shutil.copytree(ROOT / "src" / "resgd", copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for path in copy.rglob("*.py"):
        text = path.read_text()
        if path == copy / "__init__.py":
            text = re.sub(r'__version__ = "[^"]*"', '__version__ = "0.0.1"', text)
        path.write_text(text.replace("GDConfig", "GDSettings"))
    return folder


def test_a_worker_of_another_version_is_refused_in_one_line_before_it_unpickles_a_task(tmp_path):
    """A ``dask worker`` whose resgd is another version, one where ``GDConfig`` cannot be unpickled,
    refuses the sweep's task in one line naming both versions and what to do: the identity is
    compared on the worker from plain values before any object of ours is unpickled there; nothing
    is cached."""
    pytest.importorskip("distributed")
    import resgd
    from fault_helpers import Cluster, toy_configs
    from resgd.experiments import study as ex
    from resgd.infra.user_errors import describe
    from resgd.pipeline.identity import CodeMismatchError

    older = _another_version(tmp_path / "older")
    cluster, raised = Cluster(tmp_path), []

    def sweep() -> None:
        try:
            ex.sweep(toy_configs(1), cache_dir=tmp_path / "runs", scheduler=cluster.address)
        except Exception as err:  # noqa: BLE001 - asserted below
            raised.append(err)

    try:
        cluster.worker(env={**cluster.env, "PYTHONPATH": str(older), "PYTHONDONTWRITEBYTECODE": "1"})
        running = threading.Thread(target=sweep, daemon=True)  # a worker ended by its first task: the sweep waits
        running.start()
        running.join(timeout=240)
    finally:
        cluster.close()
    assert raised and isinstance(raised[0], CodeMismatchError), f"no refusal within 240 s: {raised}"
    message = str(raised[0])
    assert "\n" not in message and message.startswith("Dask worker tcp://127.0.0.1:"), message
    assert " runs resgd 0.0.1 with sources sha256 " in message
    assert f"the client runs resgd {resgd.__version__} with sources sha256 " in message
    assert "install the client's resgd on every worker (then restart them)" in message
    assert describe(raised[0]) == (2, message)
    assert not list((tmp_path / "runs").glob("*.pkl"))


def _unpickled() -> None:
    raise AssertionError("the task was unpickled on a worker of other code")


class _Tripwire:
    """Unpickling it fails the test: it stands for a class another version has moved."""

    def __reduce__(self):
        return _unpickled, ()


def test_a_plain_task_compares_identities_before_it_unpickles_anything():
    """What a Dask worker is sent holds only builtins and plain values; it runs the task when the
    identities agree, and refuses it without unpickling the task when they differ; the refusal
    becomes the one line, and a worker whose resgd cannot tell its sources' hash is named so."""
    import pickle

    from resgd.infra.source_hash import code_identity
    from resgd.pipeline.identity import CodeMismatchError, check_refusal, plain_task

    mine = code_identity(())
    fn, args = plain_task(abs, -3, ((), mine))
    assert fn is eval and fn(*pickle.loads(pickle.dumps(args))) == 3
    other = {"version": "9.9.9", "source": "0" * 64}
    fn, args = plain_task(abs, _Tripwire(), ((), other))
    reply = fn(*args)
    assert reply[2] == mine and reply[1].startswith("process ")
    with pytest.raises(CodeMismatchError) as caught:
        check_refusal(reply, other)
    message = str(caught.value)
    assert "\n" not in message and f"runs resgd {mine['version']} with sources sha256 {mine['source']}" in message
    assert "the client runs resgd 9.9.9" in message and "install the client's resgd on every worker" in message
    unknown = {"version": "0.2.0", "source": None, "error": "ModuleNotFoundError: No module named 'resgd.infra'"}
    with pytest.raises(CodeMismatchError, match=r"runs resgd 0\.2\.0 \(the hash of its sources unknown: ModuleNotFound"):
        check_refusal(("resgd: this worker runs other code", "Dask worker tcp://h:1", unknown), mine)
    check_refusal(3, mine)  # a result: no refusal
