"""A run of ``python -m resgd reproduce`` (:mod:`resgd.pipeline.reproduce`) under faults inflicted on
the real code, with a small part that goes through the real sweep, cache and publish
(:mod:`faults.toy_reproduce`): interrupted by kill -9 and SIGTERM then resumed by two runs at once
(the bytes of an uninterrupted run), an output folder that cannot be written (one line before any
work), a real file-size limit while publishing (one line, the old outputs kept).

Permission faults run as ``nobody`` when the suite runs as root (:mod:`faults.as_user`); a full
disk is a real ``EFBIG`` from ``RLIMIT_FSIZE`` (no tmpfs without root).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # tests only

import os  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from fault_helpers import Counting, entries, leftovers, reproduce_toy  # noqa: E402
from faults.as_user import run_as_user, shared_folder  # noqa: E402

import resgd.plots  # noqa: E402,F401 - imported here: a child that is `nobody` has no matplotlib config folder
from resgd import cli  # noqa: E402
from resgd.experiments import runs  # noqa: E402
from resgd.experiments.study import reproduce  # noqa: E402
from resgd.pipeline.cache import RESULTS_ENV  # noqa: E402
from resgd.pipeline.reproduce import OutputError, check_writable  # noqa: E402

TESTS = Path(__file__).parent
SCRIPT = TESTS / "faults" / "toy_reproduce.py"


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


def test_unwritable_output_folder_is_reported_before_any_work(tmp_path, monkeypatch):
    blocked = tmp_path / "figures"
    blocked.write_text("a file where the figures folder should be")
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path / "results"))
    counter = Counting()
    monkeypatch.setattr(runs, "_compute_stack", counter)
    with pytest.raises(OutputError, match=f"output folder {blocked} is not writable"):
        reproduce("toy", True, blocked, n_jobs=1, progress=False)
    assert counter.calls == [] and not (tmp_path / "results" / "tables").exists()
    check_writable([tmp_path / "ok" / "nested"])  # a missing folder is made, not an error


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
