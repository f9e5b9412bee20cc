"""Faults of a run: interrupts, damaged cache entries, dead lock owners, real permission
and file-size faults. Each is inflicted on the real code: ``python -m resgd reproduce`` with a small
part that goes through the real sweep, cache and publish (:mod:`faults.toy_reproduce`), or the
experiments' sweep on toy data.

Permission faults run as ``nobody`` when the suite runs as root (:mod:`faults.as_user`); a full
disk is a real ``EFBIG`` from ``RLIMIT_FSIZE`` (no tmpfs without root).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import resource
import signal
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # tests only

import pytest  # noqa: E402

import resgd.plots  # noqa: E402,F401 - imported here: a child that is `nobody` has no matplotlib config folder
from faults.as_user import run_as_user, shared_folder
from faults.toy_reproduce import toy_part
from resgd import cli
from resgd.core.model import ModelConfig
from resgd.core.trainer import GDConfig
from resgd.data.spec import DatasetSpec
from resgd.experiments import runs
from resgd.experiments.configuration import RunConfig, config_key
from resgd.pipeline.cache import ENTRY_FORMAT, CacheEntryRejected, ResultsCache

TESTS = Path(__file__).parent
SCRIPT = TESTS / "faults" / "toy_reproduce.py"


def toy_configs(n: int) -> list[RunConfig]:
    spec = DatasetSpec("toy", n_train=6, n_tokens=4, n_test=4, seed=0)
    base = RunConfig(spec, ModelConfig(d=6, d_qk=3, m=5, beta=1.0),
                        GDConfig(lr=0.05, iterations=8, reduction="mean", record_every=4))
    return [replace(base, seed=s) for s in range(n)]


def reproduce_toy(root: Path, *extra: str) -> int:
    """The toy part through ``cli.main`` in this process (as the script does, without pacing)."""
    return cli.main(["reproduce", "--only", "toy", "--figures-dir", str(root / "figures"),
                     "--results-dir", str(root / "results"), *extra], parts={"toy": toy_part})


def entries(root: Path) -> list[Path]:
    return sorted((root / "results" / "cache").glob("*.pkl"))


def leftovers(root: Path) -> list[Path]:
    """Temporary or staged files that a finished or killed run must not leave behind."""
    return [p for p in root.rglob("*") if ".tmp" in p.name or ".resgd-stage-" in str(p) or p.suffix == ".part"]


# --------------------------------------------------------------------------- interrupts, then a rerun


def start_paced(root: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "RESGD_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, str(SCRIPT), str(root), "1.0", "--jobs", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def interrupt_after(proc: subprocess.Popen, n_computed: int, sig: int) -> str:
    """Send ``sig`` while the ``n_computed``-th run of this process is computed but not yet cached."""
    try:
        for _ in range(n_computed):
            assert proc.stdout.readline().startswith("computed"), proc.stderr.read()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return err


def test_kill_9_then_sigterm_mid_sweep_then_two_reruns_at_once_give_the_bytes_of_an_uninterrupted_run(tmp_path):
    """kill -9 after the first cached entry, SIGTERM after the next one: each cached entry is kept,
    nothing half-written is left. Then two runs at once on that results folder (concurrent
    runs): only the missing entries are computed, once, and the table has the bytes of a run never
    interrupted."""
    assert reproduce_toy(tmp_path / "clean", "--jobs", "1") == 0
    reference = (tmp_path / "clean" / "results" / "toy" / "runs.csv").read_bytes()
    root = tmp_path / "interrupted"

    interrupt_after(start_paced(root), 2, signal.SIGKILL)  # the 2nd run computed, not cached
    assert len(entries(root)) == 1 and leftovers(root) == []
    assert not (root / "results" / "toy" / "runs.csv").exists()

    proc = start_paced(root)
    err = interrupt_after(proc, 2, signal.SIGTERM)
    assert proc.returncode == 143 and "Traceback" not in err and "stopped by SIGTERM" in err
    assert len(entries(root)) == 2 and leftovers(root) == []  # one more: the one before the signal

    # two runs resume at once: the first to lock the 4 missing entries computes them, the other
    # says whom it waits for and reuses them; both publish the table
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]), "RESGD_OFFLINE": "1"}
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), str(root), "0.2", "--jobs", "1", "--wait-for-go"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:  # both start now
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outs = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [err[-2000:] for _, err in outs]
    counts = [out.count("computed") for out, _ in outs]
    assert sorted(counts) == [0, 4], counts  # 6 runs, 2 cached before: resumed, nothing computed twice
    waiter, owner = (0, 1) if counts[0] == 0 else (1, 0)
    assert f"waiting for process {procs[owner].pid} on " in outs[waiter][1]  # they did run at once
    assert (root / "results" / "toy" / "runs.csv").read_bytes() == reference
    assert len(entries(root)) == 6 and leftovers(root) == []


# --------------------------------------------------------------------------- damaged run-cache entries


def _record(key: str, **changes) -> bytes:
    content = pickle.dumps({"a": 1})
    record = {"format": ENTRY_FORMAT, "key": key, "sha256": hashlib.sha256(content).hexdigest(), "content": content,
              "data": {}}
    record.update(changes)
    return pickle.dumps(record)


class _Gone:  # pickled by reference: unpickling it needs its module
    pass


def _entry_of_a_class_that_no_longer_exists(key: str) -> bytes:
    module = _Gone.__module__.encode()
    content = pickle.dumps(_Gone()).replace(module, b"x" * len(module))  # a module name that does not exist
    return _record(key, content=content, sha256=hashlib.sha256(content).hexdigest())


DAMAGES = {  # damage: (the entry's bytes, its key) -> new bytes; the reason the warning gives
    "zero-length": (lambda good, key: b"", "unreadable: EOFError"),
    "garbage bytes": (lambda good, key: bytes(range(256)) * 4, "unreadable: "),
    "cut in half": (lambda good, key: good[: len(good) // 2], "unreadable: "),
    "a pickle that is not an entry": (lambda good, key: pickle.dumps([1, 2, 3]), "not a verified entry"),
    "a newer entry format": (lambda good, key: _record(key, format="resgd-cache-entry/2"), "not a verified entry"),
    "content that is not bytes": (lambda good, key: _record(key, content="text"), "does not match its checksum"),
    "checksum right, content not a pickle": (
        lambda good, key: _record(key, content=b"xx", sha256=hashlib.sha256(b"xx").hexdigest()),
        "content unreadable: UnpicklingError"),
    "content of a class that no longer exists": (lambda good, key: _entry_of_a_class_that_no_longer_exists(key),
                                                 "content unreadable: ModuleNotFoundError"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_run_cache_entry_is_reported_and_recomputed_to_the_same_result(tmp_path, damage):
    configs = toy_configs(2)
    first = runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
    cache = ResultsCache(tmp_path)
    key = config_key(configs[0])
    damaged, problem = DAMAGES[damage]
    data = damaged(cache.path(key).read_bytes(), key)
    cache.path(key).write_bytes(data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
    messages = [str(w.message) for w in caught if issubclass(w.category, CacheEntryRejected)]
    assert len(messages) == 1 and str(cache.path(key)) in messages[0] and problem in messages[0], messages
    assert again.equals(first)
    assert ResultsCache(tmp_path).read(key) is not None  # written again, whole


def test_a_folder_where_a_cache_entry_should_be_is_one_line_exit_1_and_the_other_entries_are_kept(tmp_path, capsys):
    assert reproduce_toy(tmp_path, "--jobs", "1") == 0
    victim = entries(tmp_path)[0]
    for entry in entries(tmp_path):
        entry.unlink()
    victim.mkdir()
    (victim / "something").write_text("a user's file")
    assert reproduce_toy(tmp_path, "--jobs", "1") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(line) == 1 and str(victim) in line[0] and "a folder stands where a file is needed" in line[0]
    assert (victim / "something").read_text() == "a user's file"  # nothing of the user's removed
    assert leftovers(tmp_path) == []


# --------------------------------------------------------------------------- locks of dead processes

HOLD = """
import sys
from resgd.pipeline.cache import ResultsCache
cache = ResultsCache(sys.argv[1])
held = [cache.try_lock(key) for key in sys.argv[2:]]
assert all(held)
print("held", flush=True)
sys.stdin.readline()
"""


def test_locks_of_a_run_killed_with_kill_9_are_taken_over_at_once(tmp_path):
    """A run killed while it holds its entries' locks (their files stay behind, with its pid):
    the next run computes those entries without waiting for anyone."""
    import time

    configs = toy_configs(2)
    keys = [config_key(c) for c in configs]
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), *keys], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait(timeout=60)
    assert sorted(p.stem for p in (tmp_path / "locks").iterdir()) == sorted(keys)  # left behind
    start = time.monotonic()
    table = runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
    assert time.monotonic() - start < 60 and sorted(table["seed"].unique()) == [0, 1]
    assert list((tmp_path / "locks").iterdir()) == []


# --------------------------------------------------------------------------- real permissions (as an ordinary user)


def test_an_unreadable_cache_entry_is_reported_and_recomputed(tmp_path):
    """``chmod 000`` on an entry: reported as unreadable, recomputed, and the new entry is readable."""
    with shared_folder() as root:
        configs = toy_configs(1)
        cache_dir = root / "cache"
        first = runs.sweep(configs, n_jobs=1, cache_dir=cache_dir)
        for path in [cache_dir, *cache_dir.rglob("*")]:
            path.chmod(0o777 if path.is_dir() else 0o666)
        key = config_key(configs[0])
        entry = ResultsCache(cache_dir).path(key)
        entry.chmod(0o000)

        def reread():
            cache = ResultsCache(cache_dir)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert cache.read(key) is None
            cache.write(key, ResultsCache.__name__)  # what the sweep does next: write it again
            return [str(w.message) for w in caught], cache.read(key)

        messages, value = run_as_user(reread)
        assert len(messages) == 1 and "unreadable: PermissionError" in messages[0]
        assert value == "ResultsCache" and not first.empty


@pytest.mark.parametrize("folder", ["figures", "results", "results/cache"])
def test_a_read_only_output_folder_stops_the_run_before_any_work(folder):
    """``chmod 555``: one line naming the folder, exit 1, no part started."""
    with shared_folder() as root:
        for name in ("figures", "results", "results/cache"):
            (root / name).mkdir(parents=True, exist_ok=True)
            (root / name).chmod(0o777)
        (root / folder).chmod(0o555)
        called = []

        def part(quick, figures_dir, **kw):
            called.append(1)

        def run():
            import contextlib
            import io

            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                status = cli.main(["reproduce", "--only", "jena", "--figures-dir", str(root / "figures"),
                                   "--results-dir", str(root / "results")], parts={"jena": part})
            return status, err.getvalue(), called

        status, err, called = run_as_user(run)
    assert status == 1 and called == [] and "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(lines) == 1 and str(root / folder) in lines[0] and "not writable" in lines[0], err


def test_a_read_only_lock_folder_is_one_line_not_a_traceback():
    """The run cache writable but its ``locks/`` folder not (made by another user): one line, exit 1."""
    with shared_folder() as root:
        locks = root / "results" / "cache" / "locks"
        locks.mkdir(parents=True)
        for path in (root / "results", root / "results" / "cache"):
            path.chmod(0o777)
        locks.chmod(0o555)

        def run():
            import contextlib
            import io

            from resgd.pipeline.sweep import Task, cached_sweep
            from resgd.infra.user_errors import describe

            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                try:
                    cached_sweep([Task("k", abs, -1)], ResultsCache(root / "results" / "cache"), n_jobs=1)
                except Exception as exc:  # noqa: BLE001
                    return describe(exc)
            return "no error"

        described = run_as_user(run)
    assert described is not None and described != "no error", "a traceback (not a user error)"
    status, message = described
    assert status == 1 and str(locks) in message and "not writable" in message


# --------------------------------------------------------------------------- a full disk: a real EFBIG

WRITES = """
def part(quick, figures_dir, *, n_jobs, scheduler):
    import os
    from pathlib import Path
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from resgd.infra.atomic import write_text
    from resgd.pipeline.reproduce import Outputs, reproduce_part
    def compute():
        fig, ax = plt.subplots()
        ax.plot(range(200), [i ** 0.5 for i in range(200)])
        return Outputs(figures={"curve": fig},
                       result_files={"table": ("part/table.csv", lambda tmp: tmp.write_text("x\\n" + "1.0\\n" * SIZE))})
    return reproduce_part(compute, figures_dir=figures_dir, writes_results=True)
"""


@pytest.mark.parametrize("what, size", [("a table", 20000), ("a figure", 10)])
def test_a_file_size_limit_hit_while_publishing_is_one_line_and_the_old_outputs_stay(tmp_path, what, size):
    """RLIMIT_FSIZE 8 KB (as a full disk: the write fails with EFBIG): one line, exit 1, the outputs of
    the previous run untouched, no temporary file left; the same run without the limit succeeds."""
    namespace: dict = {}
    exec(WRITES.replace("SIZE", str(size)), namespace)
    with shared_folder() as root:
        argv = ["reproduce", "--only", "part", "--figures-dir", str(root / "figures"), "--results-dir", str(root / "results")]
        assert cli.main(argv, parts={"part": namespace["part"]}) == 0
        before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
        for path in [root, *root.rglob("*")]:
            path.chmod(0o777 if path.is_dir() else 0o666)
        if size == 10:  # a small table, a figure that does not fit
            assert (root / "results" / "part" / "table.csv").stat().st_size < 8000

        def run():
            import contextlib
            import io

            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                return cli.main(argv, parts={"part": namespace["part"]}), err.getvalue()

        status, err = run_as_user(run, limits={resource.RLIMIT_FSIZE: 8000})
        assert status == 1 and "Traceback" not in err, err
        lines = [x for x in err.splitlines() if x.startswith("error: ")]
        assert len(lines) == 1 and "File too large" in lines[0] and str(root) in lines[0], err
        assert "ulimit -f" in lines[0], err  # the advice for a file-size limit, as for a full disk
        after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
        assert after == before and leftovers(root) == []

