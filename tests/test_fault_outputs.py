"""Outputs that survive: other code on a worker, interrupted publishes, stale locks and caches,
huge or odd input files and unclear settings, each inflicted on the real code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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
    entries = source_hash.entries_of([sweep._sweep_rows])
    assert set(entries) == {*source_hash.COMPUTE_ENTRIES, "theorem1/sweep.py"}
    identity = source_hash.code_identity(entries)
    assert identity == {"version": source_hash.package_version(), "source": source_hash.imported_hash(entries)}
    assert identity["source"] != source_hash.compute_hash() == source_hash.code_identity()["source"]


@pytest.mark.parametrize("what", ["version", "source"])
def test_a_worker_running_other_resgd_code_refuses_the_task_and_nothing_is_cached(tmp_path, monkeypatch, what):
    """Before: a worker with another version and an edited step trained, and its result was cached
    under the client's key. After: one line naming the worker and both identities; nothing cached."""
    distributed = pytest.importorskip("distributed")
    from resgd.infra import source_hash
    from resgd.pipeline.cache import ResultsCache
    from resgd.pipeline.sweep import CodeMismatchError, Task, cached_sweep
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


# --------------------------------------------------------------------------- publish: all or nothing, one at a time

PUBLISH = """
import os, signal, sys, time
from pathlib import Path
from resgd.pipeline import reproduce
from resgd.infra.user_errors import Stopped, stop_on_signals
root, tag, event, at = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
figs = {f"f{i}": (f"f{i}.txt", lambda tmp, i=i: tmp.write_text(f"{tag} {i}")) for i in range(5)}
files = {f"t{i}": (f"tables/t{i}.csv", lambda tmp, i=i: tmp.write_text(f"{tag} {i}")) for i in range(5)}
real, calls = os.replace, []
def replace(src, dst):
    if ".resgd-stage-" not in str(dst):  # a final rename
        calls.append(dst)
        if len(calls) == 1:
            print("committed", flush=True)
        while event == "held" and not (root / "go").exists():  # until the test lets it go on
            time.sleep(0.05)
        if len(calls) == at and event in ("SIGTERM", "SIGINT"):
            os.kill(os.getpid(), getattr(signal, event))  # a signal between the renames
    real(src, dst)
    if event == "kill-after-manifest" and str(dst).endswith(reproduce.MANIFEST):
        os._exit(9)
    if event == "kill-while-staging" and "tables" in str(dst) and ".resgd-stage-" in str(dst):
        os._exit(9)
reproduce.os.replace = replace
try:
    with stop_on_signals():
        reproduce.publish(reproduce.Outputs(figure_files=figs, result_files=files),
                          figures_dir=root / "figures", results_dir=root / "results")
except Stopped as stop:
    print("stopped", stop.signum, flush=True)
    raise SystemExit(128 + stop.signum)
"""


def _old_outputs(root: Path) -> None:
    (root / "results" / "tables").mkdir(parents=True)
    (root / "figures").mkdir()
    for i in range(5):
        (root / "figures" / f"f{i}.txt").write_text(f"old {i}")
        (root / "results" / "tables" / f"t{i}.csv").write_text(f"old {i}")


def _tags(root: Path) -> set[str]:
    files = [root / "figures" / f"f{i}.txt" for i in range(5)] + [root / "results" / "tables" / f"t{i}.csv" for i in range(5)]
    return {path.read_text().split()[0] for path in files}


def _stages(root: Path) -> list[Path]:
    return list(root.glob("*/.resgd-stage-*"))


def _publish(root: Path, tag: str, event: str, at: int = 0, **kwargs):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", PUBLISH, str(root), tag, event, str(at)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.mark.parametrize("signame, status", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_between_the_renames_of_a_publish_acts_once_every_output_is_new(tmp_path, signame, status):
    """Before: SIGTERM after the manifest left some new and some old outputs and removed the stage,
    so nothing could complete them. After: the signal acts once every rename is done."""
    _old_outputs(tmp_path)
    proc = _publish(tmp_path, "new", signame, at=4)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == status and f"stopped {status - 128}" in out, err
    assert _tags(tmp_path) == {"new"} and _stages(tmp_path) == []


@pytest.mark.parametrize("event, after", [("kill-after-manifest", "new"), ("kill-while-staging", "old")])
def test_a_publish_killed_at_its_commit_point_or_before_is_rolled_forward_or_back_by_the_next_run(tmp_path, event, after):
    """kill -9 right after the one manifest is written (no rename done yet): the next publish into
    either folder completes every rename (roll forward); before it: the stages are dropped (roll back)."""
    from resgd.pipeline.reproduce import publish_lock

    _old_outputs(tmp_path)
    proc = _publish(tmp_path, "new", event)
    proc.communicate(timeout=300)
    assert proc.returncode == 9 and _tags(tmp_path) == {"old"} and _stages(tmp_path)
    with publish_lock([tmp_path / "results"]):  # the results folder's stage names the figures folder's manifest
        pass
    assert _tags(tmp_path) == {after}
    with publish_lock([tmp_path / "figures"]):
        pass
    assert _stages(tmp_path) == []


def test_two_runs_publishing_into_one_folder_take_turns(tmp_path):
    """Before: two runs on one results folder published a mix of their outputs. After: the second
    waits for the first (and says so), then publishes all of its own."""
    _old_outputs(tmp_path)
    first = _publish(tmp_path, "first", "held")
    try:
        assert first.stdout.readline().strip() == "committed"
        second = _publish(tmp_path, "second", "none")
        waiting = second.stderr.readline()
        (tmp_path / "go").write_text("")
        _, err = second.communicate(timeout=300)
        first.communicate(timeout=300)
    finally:
        first.kill()
    assert second.returncode == 0 and first.returncode == 0, err
    assert "which publishes there now" in waiting
    assert _tags(tmp_path) == {"second"} and _stages(tmp_path) == []


# --------------------------------------------------------------------------- publish: a committed stage in odd places


def _files(tag: str, names=("a", "b", "c")):
    """Outputs writing ``tag`` into figures/<name>.txt and results/tables/<name>.csv."""
    from resgd.pipeline.reproduce import Outputs

    return Outputs(figure_files={n: (f"{n}.txt", lambda tmp, n=n: tmp.write_text(f"{tag} {n}")) for n in names},
                   result_files={n: (f"tables/{n}.csv", lambda tmp, n=n: tmp.write_text(f"{tag} {n}")) for n in names})


def _read_all(root: Path, names=("a", "b", "c")) -> dict[str, str]:
    return {f"{folder}/{n}": (root / folder / sub / f"{n}.{ext}").read_text().split()[0]
            for folder, sub, ext in (("figures", "", "txt"), ("results", "tables", "csv")) for n in names}


def _publish_failing_after(root: Path, tag: str, monkeypatch, moves_done: int) -> None:
    """Publish ``tag`` and fail (an OSError, the process lives on) after ``moves_done`` final moves: the
    commit is written, the stages stay behind (as after kill -9 or a full disk mid-publish)."""
    from resgd.pipeline import reproduce

    real, done = reproduce._move, []

    def move(staged, final):
        if len(done) >= moves_done:
            raise OSError(28, "No space left on device", str(final))
        done.append(final)
        real(staged, final)

    monkeypatch.setattr(reproduce, "_move", move)
    with pytest.raises(OSError):
        reproduce.publish(_files(tag), root / "figures", root / "results")
    monkeypatch.setattr(reproduce, "_move", real)


def test_a_committed_stage_left_by_a_live_run_is_completed_before_the_next_publish_not_after(tmp_path, monkeypatch):
    """Before: v2 failed after its commit in a process that lived on (its pid alive, so its stage was
    skipped); v3 published; a later run rolled v2's stage forward over v3's file: a = v3, b = v3, c = v2.
    After: under the publish lock no stage belongs to a publish in progress, whatever its pid, so v3
    first completes v2, then publishes: all v3, no stage left."""
    from resgd.pipeline.reproduce import publish, publish_lock

    publish(_files("v1"), tmp_path / "figures", tmp_path / "results")
    _publish_failing_after(tmp_path, "v2", monkeypatch, moves_done=2)
    left = list(tmp_path.glob("*/.resgd-stage-*"))
    assert left and all(f"-{os.getpid()}-" in p.name for p in left)  # the stages' pid is alive: this process
    publish(_files("v3"), tmp_path / "figures", tmp_path / "results")
    with publish_lock([tmp_path / "figures", tmp_path / "results"]):
        pass
    assert set(_read_all(tmp_path).values()) == {"v3"} and not list(tmp_path.glob("*/.resgd-stage-*"))


def test_completing_a_commit_never_replaces_a_file_written_after_it(tmp_path, monkeypatch):
    """A file written after a commit (by a later run, or by hand) is newer than anything that commit
    staged, so completing the commit keeps it."""
    import time

    from resgd.pipeline.reproduce import publish, publish_lock

    publish(_files("v1"), tmp_path / "figures", tmp_path / "results")
    _publish_failing_after(tmp_path, "v2", monkeypatch, moves_done=0)
    time.sleep(0.02)
    (tmp_path / "results" / "tables" / "c.csv").write_text("later c")
    with publish_lock([tmp_path / "figures", tmp_path / "results"]):
        pass
    seen = _read_all(tmp_path)
    assert seen.pop("results/c") == "later" and set(seen.values()) == {"v2"}


def test_a_publish_replaces_an_old_file_dated_in_the_future(tmp_path):
    """The newer-file rule is for completing someone else's commit only: the publish that just
    committed (under the lock since) replaces every file, even one whose mtime is ahead of the clock
    (files unpacked from another machine, a server's clock)."""
    import time

    from resgd.pipeline.reproduce import publish

    publish(_files("v1"), tmp_path / "figures", tmp_path / "results")
    ahead = time.time() + 3600
    for path in (tmp_path / "figures" / "a.txt", tmp_path / "results" / "tables" / "a.csv"):
        os.utime(path, (ahead, ahead))
    publish(_files("v2"), tmp_path / "figures", tmp_path / "results")
    assert set(_read_all(tmp_path).values()) == {"v2"}


def test_a_folder_on_another_file_system_is_published_by_copy_then_rename(tmp_path, monkeypatch):
    """Before: results/tables a symlink to another file system: "Invalid cross-device link" after the
    commit point, new figures with old tables, and every later run failed until the stage was removed
    by hand. After: a move that cannot be a rename is a copy beside the destination renamed onto it."""
    import errno

    from resgd.pipeline import reproduce

    real = os.replace

    def replace(src, dst):
        if "/tables/" in str(dst) and ".resgd-stage-" in str(src) and ".resgd-stage-" not in str(dst):  # stage → tables/
            raise OSError(errno.EXDEV, "Invalid cross-device link", str(dst))
        real(src, dst)

    reproduce.publish(_files("v1"), tmp_path / "figures", tmp_path / "results")
    monkeypatch.setattr(reproduce.os, "replace", replace)
    reproduce.publish(_files("v2"), tmp_path / "figures", tmp_path / "results")
    assert set(_read_all(tmp_path).values()) == {"v2"}
    assert not list(tmp_path.rglob(".resgd-stage-*")) and not list(tmp_path.rglob("*.part"))


def test_a_folder_renamed_after_a_killed_publish_completes_it_where_it_now_is(tmp_path, monkeypatch):
    """Before: the commit record held absolute paths, so after the folder was renamed the next run
    completed the moves into the old path (or failed). After: each stage's moves are relative to it."""
    from resgd.pipeline.reproduce import publish, publish_lock

    root = tmp_path / "checkout"
    publish(_files("v1"), root / "figures", root / "results")
    _publish_failing_after(root, "v2", monkeypatch, moves_done=1)
    root.rename(tmp_path / "renamed")
    with publish_lock([tmp_path / "renamed" / "figures", tmp_path / "renamed" / "results"]):
        pass
    assert set(_read_all(tmp_path / "renamed").values()) == {"v2"} and not root.exists()


def test_publishing_into_a_copy_completes_the_copy_and_leaves_the_original_to_its_own_run(tmp_path, monkeypatch):
    """Before: a `cp -a` copy of folders holding a committed stage: publishing into the copy also
    completed the moves in the original (absolute paths). After: a stage whose recorded place still
    holds its original is a copy: it completes its own files only; the original's run completes its own."""
    from resgd.pipeline.reproduce import publish, publish_lock

    original, copy = tmp_path / "original", tmp_path / "copy"
    publish(_files("v1"), original / "figures", original / "results")
    _publish_failing_after(original, "v2", monkeypatch, moves_done=0)
    shutil.copytree(original, copy, symlinks=True)
    publish(_files("v3", names=("a",)), copy / "figures", copy / "results")
    seen = _read_all(copy)
    assert {seen.pop("figures/a"), seen.pop("results/a")} == {"v3"} and set(seen.values()) == {"v2"}
    assert set(_read_all(original).values()) == {"v1"} and list(original.glob("*/.resgd-stage-*"))  # untouched
    with publish_lock([original / "figures", original / "results"]):
        pass
    assert set(_read_all(original).values()) == {"v2"} and not list(original.glob("*/.resgd-stage-*"))


def test_a_folder_shared_by_two_checkouts_through_a_symlink_is_completed_once_and_whole(tmp_path, monkeypatch):
    """Two checkouts share one results folder through a symlink; the first's publish is killed after
    its commit. The second checkout's run (same results folder, by another path) completes it whole
    before publishing its own: every file of both folders from one run at each step."""
    from resgd.pipeline.reproduce import publish

    first, second = tmp_path / "first", tmp_path / "second"
    publish(_files("v1"), first / "figures", first / "results")
    second.mkdir()
    (second / "results").symlink_to(first / "results")
    _publish_failing_after(first, "v2", monkeypatch, moves_done=1)
    publish(_files("v3"), first / "figures", second / "results")
    assert set(_read_all(first).values()) == {"v3"} and not list(tmp_path.rglob(".resgd-stage-*"))


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
    """Before: a lock of a stopped process on another host was waited on for ever. After: once its
    file has not been refreshed for the stated time it is given up on, and the messages say why."""
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
    """Before: the parsed-data cache trusted size and mtime, so the old parse (and digest) stayed.
    After: it is keyed by the file's content."""
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
    """Before: --quick overwrote full-mode figures of the same names, with no mode on them. After:
    the folder is stamped with its mode; a run of the other mode is refused in one line, before any work."""
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
    """Before: a stamp holding ``full\\xff`` counted as no stamp, so a quick run overwrote full figures and
    restamped the folder. After: one line naming the stamp; nothing is written."""
    from resgd.infra.mode_stamp import STAMP, claim
    from resgd.validation import OutputError

    (tmp_path / STAMP).write_bytes(b"full\xff\n")
    with pytest.raises(OutputError, match="the stamp is damaged") as caught:
        claim(tmp_path, "quick", how_to_move="--figures-dir")
    assert str(tmp_path / STAMP) in str(caught.value) and "\n" not in str(caught.value)
    assert (tmp_path / STAMP).read_bytes() == b"full\xff\n"


def test_two_first_runs_of_both_modes_cannot_both_stamp_a_new_folder(tmp_path):
    """Before: two first runs (quick and full) into a new folder both published in 1 of 5 tries (each
    read "no stamp", then wrote its own). After: the stamp is created exclusively; exactly one run is
    let in, the other is refused, in every one of 40 races."""
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
    """Before: the build raised an OSError (EROFS) traceback making figures/. After: one line, exit 1."""
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
    """Before: read whole before any check (MemoryError after 35 s). After: one line, the header's length."""
    from resgd.data import DataError, load_jena
    from resgd.data.jena_schema import JENA_FILE_NAME

    _sparse(tmp_path / "data" / "jena" / JENA_FILE_NAME, 5 << 30)
    with pytest.raises(DataError) as caught:
        load_jena(**_jena_options(tmp_path))
    assert "\n" not in str(caught.value) and "line 1 (header) is longer than 64 KiB" in str(caught.value)


@pytest.mark.parametrize("kind", ["FIFO", "/dev/zero", "folder"])
def test_a_jena_path_that_is_not_a_regular_file_is_refused_not_replaced_by_the_standin(tmp_path, kind):
    """Before: a FIFO, /dev/zero or a folder as the Jena file sent the run to the synthetic stand-in
    without a word. After: one line naming it."""
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
    """Before: read whole, then checksummed (MemoryError). After: refused once past the size limit."""
    from resgd.data import DataError
    from resgd.data.sst2 import SHA256, parse_sst2_tsv

    path = _sparse(tmp_path / "train.tsv", 3 << 30)
    with pytest.raises(DataError) as caught:
        parse_sst2_tsv(path, expected_sha256=SHA256["train"])
    assert "\n" not in str(caught.value) and "train.tsv: over 64 MiB (uncompressed)" in str(caught.value)


def test_an_sst2_file_with_windows_line_ends_says_so(tmp_path):
    """Before: 'corrupt' without a word on line ends. After: the message names the CRLF line ends."""
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
    """Before: a DaskSweepError traceback. After: a cluster error in one line, exit 1, saying what to check."""
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
    """Before: RESGD_RESULTS_DIR=results made the notebooks (run in notebooks/) look in
    notebooks/results. After: relative folders are resolved against the working folder at startup."""
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
    """Before: --results-dir "" wrote to ./results. After: one line, exit 2, nothing run or written."""
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
    """Before: a worker with another instruction set (or MKL path) stored its rows under the client's
    engine key, and a later local run served them (last digits differ). After: one line naming both
    engine paths, before the task runs."""
    from resgd.core.engine import engine_path
    from resgd.pipeline.sweep import EngineMismatchError, _checked_call
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
    """Before: a run waited without end on a publish lock held by a stopped run (SIGSTOP), or by a run
    on another host whose clock is an hour ahead. After: it stops after the stated time on its own
    monotonic clock, in one line naming the holder; nothing of it is published."""
    import fcntl
    import time

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
            reproduce._lock_file(path, give_up_s=0.5)
        assert time.monotonic() - start < 5
    finally:
        holder.close()
    message = str(caught.value)
    assert "\n" not in message and "run 4242 on far-host has held its publish lock" in message
    assert "nothing of this run was published" in message and describe(caught.value)[0] == 1
    lock = reproduce._lock_file(path, give_up_s=0.5)  # free again: taken at once
    try:
        assert path.read_text().startswith(f"{os.getpid()} ")
    finally:
        lock.close()
    assert not path.exists()  # a released lock's file is removed
