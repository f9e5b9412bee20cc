"""Who is at the other end of a sweep (:mod:`resgd.pipeline.identity`): a worker running other code,
another version of resgd, on another engine path or with other data refuses its task in one line,
and an address that is not a Dask scheduler is refused before any work."""

from __future__ import annotations

import re
import shutil
import socket
import threading
from pathlib import Path

import pytest
from fault_helpers import jena_config, run_cli_with_scheduler

from resgd import cli
from resgd.data.spec import DataMismatchError, data_fingerprint
from resgd.data.standin import DEFAULT_STANDIN_DAYS, standin_file_name, write_standin_csv
from resgd.experiments import runs

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
    from fault_helpers import Cluster, toy_configs

    import resgd
    from resgd.infra.user_errors import describe
    from resgd.pipeline.identity import CodeMismatchError

    older = _another_version(tmp_path / "older")
    cluster, raised = Cluster(tmp_path), []

    def sweep() -> None:
        try:
            runs.sweep(toy_configs(1), cache_dir=tmp_path / "runs", scheduler=cluster.address)
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


@pytest.fixture(scope="module")
def one_worker():
    """A LocalCluster of one worker process running this checkout's resgd, shared by the cases that differ
    only on the client's side (a worker process takes seconds to start on two busy cores)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster


@pytest.mark.parametrize("what", ["version", "source"])
def test_a_worker_running_other_resgd_code_refuses_the_task_and_nothing_is_cached(tmp_path, monkeypatch, what,
                                                                                   one_worker):
    """A worker with another version or other code refuses the task in one line naming the worker and
    both identities; nothing is cached under the client's key."""
    from resgd.infra import source_hash
    from resgd.infra.user_errors import describe
    from resgd.pipeline.cache import ResultsCache
    from resgd.pipeline.identity import CodeMismatchError
    from resgd.pipeline.sweep import Task, cached_sweep

    real = source_hash.code_identity()
    if what == "version":  # the client differs from its workers: as a worker differs from its client
        monkeypatch.setattr(source_hash, "package_version", lambda: "9.9.9")
    else:
        monkeypatch.setattr(source_hash, "imported_hash", lambda entries=(): "0" * 64)
    cache = ResultsCache(tmp_path / "runs")
    with pytest.raises(CodeMismatchError) as caught:
        cached_sweep([Task("k", abs, -3)], cache, n_jobs=1, scheduler=one_worker.scheduler_address)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("Dask worker tcp://127.0.0.1:")
    assert f"runs resgd {real['version']} with sources sha256 {real['source']}" in message
    assert ("the client runs resgd 9.9.9" if what == "version" else "0" * 64) in message
    assert describe(caught.value) == (2, message)
    assert not list((tmp_path / "runs").glob("*.pkl"))


def test_a_worker_on_another_engine_path_refuses_the_task():
    """A worker on another engine path (instruction set or MKL path, whose last digits differ) refuses
    the task in one line naming both engine paths, before it runs: its rows never reach the client's cache."""
    from resgd.core.engine import engine_path
    from resgd.infra.source_hash import COMPUTE_ENTRIES, code_identity
    from resgd.infra.user_errors import describe
    from resgd.pipeline.identity import EngineMismatchError
    from resgd.pipeline.sweep import _checked_call

    code = (COMPUTE_ENTRIES, code_identity())
    client = {**engine_path(), "isa": "DEFAULT"}  # e.g. ATEN_CPU_CAPABILITY=default on the client's side
    ran = []
    with pytest.raises(EngineMismatchError) as caught:
        _checked_call((ran.append, 1, {}, code, client))
    message = str(caught.value)
    assert not ran and "\n" not in message
    assert f"isa={engine_path()['isa']}" in message and "the client on" in message and "isa=DEFAULT" in message
    assert describe(caught.value)[0] == 2
    assert _checked_call((abs, -3, {}, code, engine_path()))[0] == 3  # the same path runs


def test_a_worker_with_other_data_fails_before_training_and_nothing_is_cached(client_standin):
    """A worker whose data differ from the client's (another Jena file) stops before training, in one
    line naming the worker and both digests; no cache entry is written."""
    distributed = pytest.importorskip("distributed")
    tmp_path = client_standin
    worker_cache = tmp_path / "worker-cache"
    # another file that passes every check: the stand-in of another seed, where the worker looks
    write_standin_csv(worker_cache / "jena" / "standin" / standin_file_name(DEFAULT_STANDIN_DAYS, 0),
                      days=DEFAULT_STANDIN_DAYS, seed=1)
    config = jena_config(seed=9101)
    client_digest = data_fingerprint(config.dataset, config.dtype)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                  env={"RESGD_CACHE_DIR": str(worker_cache)}) as cluster:
        with pytest.raises(DataMismatchError) as caught:
            runs.sweep([config], cache_dir=tmp_path / "runs", scheduler=cluster.scheduler_address)
    message = str(caught.value)
    assert "\n" not in message and "Dask worker tcp://127.0.0.1:" in message
    assert f"the client's have {client_digest}" in message and "have digest " in message
    assert not list((tmp_path / "runs").glob("*.pkl"))


def test_a_port_that_accepts_but_is_not_a_scheduler_is_one_line_exit_2_not_a_hang(tmp_path, capsys):
    """A port that accepts connections and says nothing is refused as a scheduler in one line within
    seconds, exit 2 (the Dask client would wait for ever)."""
    pytest.importorskip("distributed")
    with socket.create_server(("127.0.0.1", 0)) as silent:
        accepted: list = []
        threading.Thread(target=lambda: accepted.append(silent.accept()), daemon=True).start()
        status, line, took = run_cli_with_scheduler(f"tcp://127.0.0.1:{silent.getsockname()[1]}", tmp_path, capsys)
    assert status == 2 and "does not answer as a Dask scheduler within 5 s" in line and took < 30, (line, took)


def test_a_bad_scheduler_address_in_the_environment_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RESGD_SCHEDULER", "tcp://127.0.0.1:1")
    called = []
    status = cli.main(["reproduce", "--only", "setup", "--figures-dir", str(tmp_path)],
                      parts={"setup": lambda *a, **kw: called.append(1)})
    err = capsys.readouterr().err
    assert status == 2 and called == [] and "Traceback" not in err
    assert "from --scheduler or $RESGD_SCHEDULER): nothing answers at 127.0.0.1:1" in err
