"""Outputs that survive: other code on a worker, interrupted publishes, stale locks and caches,
huge or odd input files and unclear settings, each inflicted on the real code."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- code identity of Dask workers


def test_a_worker_s_identity_covers_the_cached_runs_and_its_task_s_own_code():
    """The identity a worker reports: the version and the hash of the code, as imported, of the cached
    runs' modules and of the module that defines its task (the Theorem 1 sweep's is outside the cache's)."""
    from resgd.infra import source_hash
    from resgd.theorem1 import sweep

    assert source_hash.entries_of([abs]) == source_hash.COMPUTE_ENTRIES
    entries = source_hash.entries_of([sweep.sweep_chunk])
    assert set(entries) == {*source_hash.COMPUTE_ENTRIES, "theorem1/sweep.py"}
    identity = source_hash.code_identity(entries)
    assert identity == {"version": source_hash.package_version(), "source": source_hash.imported_hash(entries)}
    assert identity["source"] != source_hash.compute_hash() == source_hash.code_identity()["source"]


@pytest.mark.parametrize("what", ["version", "source"])
def test_a_worker_running_other_resgd_code_refuses_the_task_and_nothing_is_cached(tmp_path, monkeypatch, what):
    """A worker with another version or other code refuses the task in one line naming the worker and
    both identities; nothing is cached under the client's key."""
    distributed = pytest.importorskip("distributed")
    from resgd.infra import source_hash
    from resgd.pipeline.cache import ResultsCache
    from resgd.pipeline.identity import CodeMismatchError
    from resgd.pipeline.sweep import Task, cached_sweep
    from resgd.infra.user_errors import describe

    real = source_hash.code_identity()
    if what == "version":  # the client differs from its workers: as a worker differs from its client
        monkeypatch.setattr(source_hash, "package_version", lambda: "9.9.9")
    else:
        monkeypatch.setattr(source_hash, "imported_hash", lambda entries=(): "0" * 64)
    cache = ResultsCache(tmp_path / "runs")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with pytest.raises(CodeMismatchError) as caught:
            cached_sweep([Task("k", abs, -3)], cache, n_jobs=1, scheduler=cluster.scheduler_address)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("Dask worker tcp://127.0.0.1:")
    assert f"runs resgd {real['version']} with sources sha256 {real['source']}" in message
    assert ("the client runs resgd 9.9.9" if what == "version" else "0" * 64) in message
    assert describe(caught.value) == (2, message)
    assert not list((tmp_path / "runs").glob("*.pkl"))


# --------------------------------------------------------------------------- a lock held on another host


def _held_by_another_host(cache, key: str, age_s: float):
    """``key``'s lock held (flock) with an owner on another host, its file last touched ``age_s`` ago."""
    import fcntl
    import time

    path = cache.lock_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+b")  # noqa: SIM115 - closed by the test
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
    handle.write(b"4242 another-host.example\n")
    handle.flush()
    os.utime(path, (time.time() - age_s,) * 2)
    return handle


def test_a_lock_held_on_another_host_and_no_longer_refreshed_is_given_up_on_after_the_stated_time(tmp_path):
    """A lock of another host's process that is no longer refreshed is given up on after the stated
    time, and the messages say why."""
    from resgd.pipeline.cache import ResultsCache

    cache, said = ResultsCache(tmp_path), []
    handle = _held_by_another_host(cache, "k", age_s=30)
    try:
        assert cache.wait_lock("k", give_up_s=20, on_wait=said.append) is None
    finally:
        handle.close()
    assert len(said) == 2 and "\n" not in "".join(said)
    assert "waiting for process 4242 on another-host.example" in said[0]
    assert "given up if its lock is not refreshed for 20 s (it runs on another host" in said[0]
    assert "has not refreshed its lock for 30 s" in said[1] and "computed here instead" in said[1]


def test_a_lock_of_another_host_that_is_refreshed_is_waited_for_and_held_locks_are_refreshed(tmp_path, monkeypatch):
    import threading
    import time

    from resgd.pipeline import cache as cache_module
    from resgd.pipeline.cache import ResultsCache, refresh_held_locks

    cache = ResultsCache(tmp_path)
    handle = _held_by_another_host(cache, "k", age_s=0)
    got = []
    waiter = threading.Thread(target=lambda: got.append(cache.wait_lock("k", give_up_s=1.5, on_wait=lambda m: None)))
    waiter.start()
    for _ in range(10):  # refreshed by its owner: not given up on
        time.sleep(0.3)
        os.utime(cache.lock_path("k"))
    assert waiter.is_alive()
    handle.close()  # released: the waiter takes it
    waiter.join(timeout=30)
    assert got and got[0] is not None
    os.utime(cache.lock_path("k"), (time.time() - 100,) * 2)
    refresh_held_locks()  # what the holder's heartbeat does every HEARTBEAT_S seconds
    assert time.time() - cache.lock_path("k").stat().st_mtime < 5
    got[0].close()
    assert cache_module.HEARTBEAT_S < cache_module.STOPPED_GIVE_UP_S / 2


# --------------------------------------------------------------------------- stale parsed data


def test_a_jena_file_edited_with_its_mtime_restored_is_parsed_again(tmp_path):
    """The parsed-data cache is keyed by the file's content: an edit with size and mtime restored is
    parsed again (and the data's digest follows)."""
    from resgd.data.jena import load_jena
    from resgd.data.jena_schema import JENA_FILE_NAME
    from resgd.data.standin import write_standin_csv

    path = tmp_path / "data" / "jena" / JENA_FILE_NAME
    write_standin_csv(path, days=20, seed=2)
    options = dict(n_tokens=4, n_train=8, n_test=8, data_dir=tmp_path / "data", cache_dir=tmp_path / "cache",
                   allow_download=False, check_canonical=False)
    first = load_jena(**options)
    stat = path.stat()
    lines = path.read_text().splitlines(keepends=True)
    fields = lines[6].split(",")  # 01:00, an hour's reading
    fields[2] = fields[2].replace(fields[2].strip()[-1], "0" if fields[2].strip()[-1] != "0" else "1")  # T (degC), same length
    lines[6] = ",".join(fields)
    path.write_text("".join(lines))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    second = load_jena(**options)
    assert len(list((tmp_path / "cache" / "processed").glob("jena_hourly_*.npz"))) == 2
    assert second.info["train_mean"] != first.info["train_mean"]


# --------------------------------------------------------------------------- quick and full outputs kept apart


def test_a_run_of_the_other_mode_does_not_overwrite_a_folder_s_figures(tmp_path, monkeypatch, capsys):
    """A figures folder is stamped with its mode: a run of the other mode is refused in one line before
    any work, and the folder's figures are kept."""
    from resgd import cli

    monkeypatch.delenv("RESGD_MODE", raising=False)
    figures, drawn = tmp_path / "figures", []

    def part(quick, figures_dir, *, n_jobs, scheduler):
        drawn.append(quick)
        Path(figures_dir, "fig.png").write_text("quick" if quick else "full")

    argv = ["reproduce", "--only", "setup", "--figures-dir", str(figures)]
    assert cli.main(argv, parts={"setup": part}) == 0
    assert cli.main([*argv, "--quick"], parts={"setup": part}) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: {figures} holds full-mode outputs") and "a quick run would overwrite them" in err
    assert "--figures-dir or $RESGD_FIGURES_DIR" in err
    assert drawn == [False] and (figures / "fig.png").read_text() == "full"
    assert cli.main(argv, parts={"setup": part}) == 0  # the same mode again: fine
    assert cli.main([*argv[:-1], str(tmp_path / "quick"), "--quick"], parts={"setup": part}) == 0  # elsewhere: fine


def test_a_damaged_mode_stamp_is_refused_not_read_as_no_stamp(tmp_path):
    """A damaged mode stamp (``full\xff``) is refused in one line naming it, not read as no stamp;
    nothing is written."""
    from resgd.infra.mode_stamp import STAMP, claim
    from resgd.validation import OutputError

    (tmp_path / STAMP).write_bytes(b"full\xff\n")
    with pytest.raises(OutputError, match="the stamp is damaged") as caught:
        claim(tmp_path, "quick", how_to_move="--figures-dir")
    assert str(tmp_path / STAMP) in str(caught.value) and "\n" not in str(caught.value)
    assert (tmp_path / STAMP).read_bytes() == b"full\xff\n"


def test_two_first_runs_of_both_modes_cannot_both_stamp_a_new_folder(tmp_path):
    """The stamp is created exclusively: of two first runs (quick and full) racing into a new folder,
    exactly one is let in and the other refused, in every one of 40 races."""
    import threading

    from resgd.infra.mode_stamp import claim, stamped_mode
    from resgd.validation import OutputError

    for trial in range(40):
        folder, outcomes, start = tmp_path / f"new{trial}", {}, threading.Barrier(2)

        def first_run(mode, folder=folder, outcomes=outcomes, start=start):
            start.wait()
            try:
                claim(folder, mode, how_to_move="--figures-dir")
                outcomes[mode] = "in"
            except OutputError:
                outcomes[mode] = "refused"

        runs = [threading.Thread(target=first_run, args=(mode,)) for mode in ("quick", "full")]
        for run in runs:
            run.start()
        for run in runs:
            run.join()
        winner = stamped_mode(folder)
        assert outcomes == {winner: "in", ({"quick", "full"} - {winner}).pop(): "refused"}, outcomes
        assert sorted(p.name for p in folder.iterdir()) == [".resgd-mode"]  # no temporary file left


def test_a_book_build_in_a_read_only_checkout_is_one_line(tmp_path, monkeypatch, capsys):
    """A book build in a read-only checkout is one line and exit 1, not an OSError traceback."""
    import errno

    from resgd.publish import build

    shutil.copy(ROOT / "_toc.yml", tmp_path / "_toc.yml")
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns("*.ipynb"))
    real = os.mkdir

    def read_only(path, *args, **kwargs):
        if str(path).startswith(str(tmp_path)):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", read_only)
    assert build.main(["--root", str(tmp_path), "--only", "01", "--mode", "quick"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"book_build: error: {tmp_path / 'figures'}: Read-only file system; ")


# --------------------------------------------------------------------------- huge and odd input files


def _sparse(path: Path, size: int) -> Path:
    """A file of ``size`` zero bytes that takes no disk space (no line end anywhere)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


def _jena_options(tmp_path: Path) -> dict:
    return dict(n_tokens=4, n_train=8, n_test=8, data_dir=tmp_path / "data", cache_dir=tmp_path / "cache",
                allow_download=False, check_canonical=False)


def test_a_5_gb_jena_file_without_line_ends_is_refused_in_one_line_before_it_is_read(tmp_path):
    """A huge Jena file without line ends is refused in one line, naming the header's length, before it
    is read into memory."""
    from resgd.data import DataError, load_jena
    from resgd.data.jena_schema import JENA_FILE_NAME

    _sparse(tmp_path / "data" / "jena" / JENA_FILE_NAME, 5 << 30)
    with pytest.raises(DataError) as caught:
        load_jena(**_jena_options(tmp_path))
    assert "\n" not in str(caught.value) and "line 1 (header) is longer than 64 KiB" in str(caught.value)


@pytest.mark.parametrize("kind", ["FIFO", "/dev/zero", "folder"])
def test_a_jena_path_that_is_not_a_regular_file_is_refused_not_replaced_by_the_standin(tmp_path, kind):
    """A FIFO, ``/dev/zero`` or a folder given as the Jena file is refused in one line naming it; the run
    does not fall back to the synthetic stand-in."""
    from resgd.data import DataError, load_jena
    from resgd.data.jena_schema import JENA_FILE_NAME

    path = tmp_path / "data" / "jena" / JENA_FILE_NAME
    path.parent.mkdir(parents=True)
    {"FIFO": os.mkfifo, "/dev/zero": lambda p: os.symlink("/dev/zero", p), "folder": os.mkdir}[kind](path)
    with pytest.raises(DataError) as caught:
        load_jena(**_jena_options(tmp_path))
    what = {"FIFO": "a FIFO (named pipe)", "/dev/zero": "a character device", "folder": "a folder"}[kind]
    assert str(caught.value) == (f"{path}: is {what}, not a regular file; expected a Jena climate CSV: "
                                 f"put the file there or remove {path}")


@pytest.mark.parametrize("kind", ["FIFO", "/dev/zero"])
def test_an_sst2_path_that_is_not_a_regular_file_is_refused_in_one_line(tmp_path, kind):
    from resgd.data import DataError
    from resgd.data.sst2 import locate_sst2, parse_sst2_tsv

    path = tmp_path / "data" / "sst2" / "dev.tsv"
    path.parent.mkdir(parents=True)
    {"FIFO": os.mkfifo, "/dev/zero": lambda p: os.symlink("/dev/zero", p)}[kind](path)
    for call in (lambda: locate_sst2(tmp_path / "data", tmp_path / "cache", allow_download=False, timeout=1),
                 lambda: parse_sst2_tsv(path)):
        with pytest.raises(DataError, match=r"dev\.tsv: is a (FIFO|character device).*, not a regular file") as caught:
            call()
        assert "\n" not in str(caught.value)


def test_a_3_gb_sst2_file_is_refused_in_one_line_while_it_is_read(tmp_path):
    """An oversized SST-2 file is refused in one line once the read passes the size limit, without
    holding it all in memory."""
    from resgd.data import DataError
    from resgd.data.sst2 import SHA256, parse_sst2_tsv

    path = _sparse(tmp_path / "train.tsv", 3 << 30)
    with pytest.raises(DataError) as caught:
        parse_sst2_tsv(path, expected_sha256=SHA256["train"])
    assert "\n" not in str(caught.value) and "train.tsv: over 64 MiB (uncompressed)" in str(caught.value)


def test_an_sst2_file_with_windows_line_ends_says_so(tmp_path):
    """An SST-2 file with Windows line ends is rejected with a message that names the CRLF line ends."""
    import hashlib

    from resgd.data import DataError
    from resgd.data.sst2 import parse_sst2_tsv

    text = "sentence\tlabel\na fine film \t1\na dull one \t0\n"
    path = tmp_path / "dev.tsv"
    path.write_bytes(text.replace("\n", "\r\n").encode())
    with pytest.raises(DataError) as caught:
        parse_sst2_tsv(path, expected_sha256=hashlib.sha256(text.encode()).hexdigest())
    assert "\n" not in str(caught.value) and "Windows line ends (CRLF) where the official file has LF" in str(caught.value)


def test_a_dask_worker_over_its_memory_limit_ends_the_sweep_in_one_line(tmp_path):
    """A Dask worker over its memory limit ends the sweep with a cluster error in one line, exit 1,
    saying what to check."""
    distributed = pytest.importorskip("distributed")
    import dask

    from fault_helpers import allocate
    from resgd.pipeline.dask_backend import DaskSweepError, execute_dask
    from resgd.pipeline.sweep import Task
    from resgd.infra.user_errors import describe

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                      memory_limit="200MB") as cluster:
            with pytest.raises(DaskSweepError) as caught:
                list(execute_dask([Task("big", allocate, 1200)], cluster.scheduler_address, max_resubmits=0))
    status, message = describe(caught.value)
    assert status == 1 and "\n" not in message and "over its memory limit" in message and "--memory-limit" in message


# --------------------------------------------------------------------------- path settings


def test_a_relative_results_dir_reaches_the_notebooks_as_an_absolute_path(tmp_path, monkeypatch):
    """A relative ``RESGD_RESULTS_DIR`` is resolved against the working folder at startup, so the
    notebooks (run in notebooks/) read the same folder."""
    from resgd import cli
    from resgd.publish.environment import notebook_env

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RESGD_RESULTS_DIR", "results")
    monkeypatch.setenv("RESGD_CACHE_DIR", "cache")
    env = notebook_env(ROOT, "quick")
    assert env["RESGD_RESULTS_DIR"] == str(tmp_path / "results") and env["RESGD_CACHE_DIR"] == str(tmp_path / "cache")
    seen = []
    part = lambda quick, figures_dir, **kw: seen.append((os.environ["RESGD_RESULTS_DIR"], figures_dir))  # noqa: E731
    assert cli.main(["reproduce", "--only", "setup", "--figures-dir", "figs"], parts={"setup": part}) == 0
    assert seen == [(str(tmp_path / "results"), str(tmp_path / "figs"))]


@pytest.mark.parametrize("argv, env, expected", [
    (["--results-dir", ""], {}, "--results-dir '': an empty path"),
    (["--figures-dir", " "], {}, "--figures-dir '': an empty path"),
    ([], {"RESGD_RESULTS_DIR": ""}, "$RESGD_RESULTS_DIR is set but empty"),
    ([], {"RESGD_FIGURES_DIR": " "}, "$RESGD_FIGURES_DIR is set but empty"),
    ([], {"RESGD_CACHE_DIR": ""}, "$RESGD_CACHE_DIR is set but empty"),
    ([], {"RESGD_DATA_DIR": ""}, "$RESGD_DATA_DIR is set but empty"),
])
def test_an_empty_path_setting_is_refused_in_one_line(tmp_path, monkeypatch, capsys, argv, env, expected):
    """An empty path setting (``--results-dir ""``) is refused in one line, exit 2, with nothing run or
    written (it would silently mean the default folder)."""
    from resgd import cli

    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ran = []
    assert cli.main(["reproduce", "--only", "setup", *argv], parts={"setup": lambda *a, **k: ran.append(1)}) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {expected}") and "\n" not in err
    assert ran == [] and list(tmp_path.iterdir()) == []


def test_a_worker_on_another_engine_path_refuses_the_task():
    """A worker on another engine path (instruction set or MKL path, whose last digits differ) refuses
    the task in one line naming both engine paths, before it runs: its rows never reach the client's cache."""
    from resgd.core.engine import engine_path
    from resgd.pipeline.identity import EngineMismatchError
    from resgd.pipeline.sweep import _checked_call
    from resgd.infra.source_hash import COMPUTE_ENTRIES, code_identity
    from resgd.infra.user_errors import describe

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


def test_a_publish_lock_held_by_a_stopped_or_far_run_is_given_up_in_one_line(tmp_path):
    """A publish lock held by a stopped run (SIGSTOP), or by a run on a host whose clock is an hour
    ahead, is given up after the stated time on the waiter's own monotonic clock, in one line naming the
    holder; nothing of that run is published."""
    import fcntl
    import time

    from resgd.infra import builds
    from resgd.pipeline import reproduce
    from resgd.infra.user_errors import describe

    path = tmp_path / reproduce.LOCK_NAME
    holder = open(path, "a+b")  # another open file: flock conflicts as with another process
    try:
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
        holder.write(b"4242 far-host\n")  # what every lock holder writes (resgd.infra.file_lock)
        holder.flush()
        os.utime(path, (time.time() + 3600, time.time() + 3600))  # the holder's clock an hour ahead
        start = time.monotonic()
        with pytest.raises(OSError) as caught:
            builds.lock_file(path, give_up_s=0.5)
        assert time.monotonic() - start < 5
    finally:
        holder.close()
    message = str(caught.value)
    assert "\n" not in message and "run 4242 on far-host has held its publish lock" in message
    assert "nothing of this run was published" in message and describe(caught.value)[0] == 1
    lock = builds.lock_file(path, give_up_s=0.5)  # free again: taken at once
    try:
        assert path.read_text().startswith(f"{os.getpid()} ")
    finally:
        lock.close()
    assert not path.exists()  # a released lock's file is removed
