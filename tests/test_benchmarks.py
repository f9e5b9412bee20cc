"""The benchmark script runs end to end on a tiny case and its report renders (no timing asserted).

``benchmarks/`` is not a package: its modules are imported from their folder, as the script
itself does. Speed is never checked here (that is the benchmark's job, not a test's); what is
checked is that every column the README's tables are made of is written and consistent.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from resgd.experiments.configuration import settings
from resgd.experiments.study import run_experiments

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_gd  # noqa: E402
from flops import step_flops  # noqa: E402
import bench_engine_ab  # noqa: E402
import bench_map  # noqa: E402
import book_cpu  # noqa: E402
import book_floor  # noqa: E402
import gemm_ceiling  # noqa: E402
import report  # noqa: E402


def run_tiny(out, N: int, impls: str) -> int:
    """bench_gd on one tiny Jena case (float64, L = 1, no sweep), restoring torch's thread count.

    With ``$RESGD_MKL_INTEL_PATH=1``, as in CI: a script re-executes itself under MKL's Intel path,
    but ``main(argv)`` called from here must not (an exec replaced this pytest worker once)."""
    threads = torch.get_num_threads()
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("RESGD_MKL_INTEL_PATH", "1")
            return bench_gd.main(["--quick", "--sizes", "jena", "--dtypes", "float64", "--N", str(N), "--layers",
                                  "1", "--impls", impls, "--no-sweep", "--budget", "0.02", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    assert run_tiny(out, 4, "ours,nn") == 0
    return out


def test_writes_every_column_the_tables_need(tiny_run):
    rows = pd.read_csv(tiny_run / "bench_gd.csv")
    assert set(rows["impl"]) == {"ours", "nn"}
    ours = rows[rows["impl"] == "ours"].iloc[0]
    assert ours["N"] == 4 and ours["L"] == 1 and ours["step_ms"] > 0
    assert ours["speedup_vs_nn"] == pytest.approx(rows[rows["impl"] == "nn"].iloc[0]["step_ms"] / ours["step_ms"])
    # the matmul floor: some, but not all, of a profiled step is spent in matrix products
    assert 0 < ours["matmul_ms"] < ours["profiled_step_ms"]
    assert ours["matmul_share"] == pytest.approx(ours["matmul_ms"] / ours["profiled_step_ms"])
    assert ours["matmul_gflops"] == pytest.approx(ours["flops"] / ours["matmul_ms"] / 1e6)
    assert json.loads((tiny_run / "bench_gd.json").read_text())["meta"]["equivalence"][0]["max_rel_grad_diff"] < 1e-9
    assert (tiny_run / "bench_gd_ratios.png").stat().st_size > 0


def test_report_renders_the_tables(tiny_run, capsys):
    assert report.main([str(tiny_run / "bench_gd.json")]) == 0
    text = capsys.readouterr().out
    assert "| 1 | float64 | jena | 1 | 4 |" in text
    assert "in matmul kernels (ms)" in text and "nn / 3 (ms)" in text


def test_matmul_breakdown_counts_only_matrix_products():
    a = torch.randn(64, 64, dtype=torch.float64)

    def elementwise_only():
        torch.exp(a).sum()

    def with_products():
        torch.mm(a, a).exp_()

    assert bench_gd.matmul_breakdown(elementwise_only, seconds=0.01)["matmul_ms"] == 0
    assert bench_gd.matmul_breakdown(with_products, seconds=0.01)["matmul_ms"] > 0


def test_case_order_puts_float64_first():
    cases = [(1, "float32", "jena", 1, 64), (1, "float64", "sst2", 1, 64), (1, "float64", "jena", 10, 64)]
    assert sorted(cases, key=report.case_order) == [cases[2], cases[1], cases[0]]


def test_profiler_chatter_is_dropped_and_other_stderr_kept(capfd):
    # Kineto writes "USDT: … profiler_start/stop" to fd 2 from C++ on every profiler session; the
    # benchmark drops exactly those lines and passes any other line through unchanged
    import os

    with bench_gd._without_profiler_chatter():
        os.write(2, b"USDT:2026-01-01 00:00:00 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"a real warning\n")
        os.write(2, b"USDT:2026-01-01 00:00:00 1:1 SyncActivityProfilerHandler.cpp:59] profiler_stop\n")
    bench_gd.matmul_breakdown(lambda: torch.mm(torch.ones(4, 4), torch.ones(4, 4)), seconds=0.001)
    err = capfd.readouterr().err
    assert "a real warning" in err
    assert "profiler_start" not in err and "profiler_stop" not in err


def test_cpu_clock_runs_report_without_the_wall_time_floor(tiny_run, tmp_path, capsys):
    # the profiler's floor is wall time: next to steps timed in CPU time on a busy machine it would mislead
    data = json.loads((tiny_run / "bench_gd.json").read_text())
    assert data["meta"]["clock"] == "wall"
    data["meta"]["clock"] = "cpu"
    (tmp_path / "cpu.json").write_text(json.dumps(data))
    assert report.main([str(tmp_path / "cpu.json")]) == 0
    text = capsys.readouterr().out
    assert "cpu time" in text and "in matmul kernels (ms)" not in text
    assert bench_gd.CLOCKS["cpu"] is time.process_time


def test_jax_peer_is_skipped_with_a_message_when_jax_is_missing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench_gd.jax_peer, "import_jax", lambda: None)
    assert run_tiny(tmp_path, 2, "ours,nn,jax") == 0
    assert "the JAX peer is skipped" in capsys.readouterr().out
    assert set(pd.read_csv(tmp_path / "bench_gd.csv")["impl"]) == {"ours", "nn"}


def test_book_floor_counts_the_cached_runs_and_never_trains(tmp_path):
    with pytest.raises(RuntimeError, match="not in the results cache: run `make book`"):
        book_floor.page_work("toy", True, cache_dir=tmp_path)
    s = settings("toy", True)
    results = run_experiments(s, n_jobs=1, cache_dir=tmp_path)
    work = book_floor.page_work("toy", True, cache_dir=tmp_path)
    assert len(work) == results.runs["key"].nunique()  # each trained configuration once
    assert (work["iterations_run"] <= max(s.iterations, s.depth_iterations)).all() and (work["iterations_run"] > 0).all()
    deeper = work.groupby("n_layers")["step_flops"].first()
    assert deeper.is_monotonic_increasing and deeper.iloc[0] > 0  # more layers, more products per step
    assert (work["flops"] == work["step_flops"] * work["iterations_run"]).all()


def test_book_floor_ceiling_captures_the_single_run_steps_products():
    """The pages' ceiling replays the products of one evaluation of the trainer: the work
    ``step_flops`` counts (plus the small weight-only products)."""
    threads = torch.get_num_threads()
    for L in (1, 2):
        row, ops = book_floor.shape_rates("toy", True, L, 8, repeats=1, iterations=1)
        assert torch.get_num_threads() == threads
        s = dataclasses.replace(settings("toy", True), N=8)
        counted = step_flops(s.model(1.0, L, 1.0), 8, s.n)["total"]
        assert counted <= row["gemm_gflop_per_step"] * 1e9 <= 1.05 * counted
        assert row["gemms_per_step"] == 21 * L  # 8 products forward, 13 backward per layer, as the stacked step
        for name in ("train_s_per_step", "ceiling_s_per_step", "dense_gflops", "train_of_ceiling", "ceiling_of_dense",
                     "ceiling_of_gemm_in_step"):
            assert row[name] > 0
        # the profiler finds the step's products, and at the toy's tiny sizes they are not all of its time
        assert 0 < row["gemm_share_of_train"] < 1
        gemms = ops[ops["gemm"]]
        assert gemms["calls_per_step"].sum() >= 21 * L  # the step's products (plus σ(Z)'s Gram product)
        assert (ops["self_ms_per_step"] >= 0).all() and ops["self_ms_per_step"].is_monotonic_decreasing
        assert {"aten::threshold_backward", "aten::_softmax"} <= set(ops["operator"])  # ReLU's and softmax's kernels


def test_the_cpu_is_named_with_its_family_and_model():
    """Two hosts both called "AMD EPYC" differed 2× in matmul rate: the family/model tells them apart."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    if "cpu family" not in text:
        pytest.skip("no /proc/cpuinfo with a cpu family here")
    family = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("cpu family"))
    assert f"(family {family}, model " in bench_gd.cpu_name()
    assert bench_gd.machine_info()["cpu"] == bench_gd.cpu_name()


def test_bench_map_counts_gemm_flops_and_reports_fractions_of_both_rates():
    a, b, c = torch.zeros(2, 3, 4), torch.zeros(2, 4, 5), torch.zeros(2, 3, 5)
    assert gemm_ceiling.gemm_flops([(torch.bmm, [a, b], {"out": c}),
                                    (torch.Tensor.baddbmm_, [c, a, b], {})]) == 2 * (2 * 2 * 3 * 4 * 5)
    assert gemm_ceiling.gemm_flops([(torch.mm, [a[0], b[0]], {}), (torch.Tensor.addmm_, [c[0], a[0], b[0]], {})]) \
        == 2 * (2 * 3 * 4 * 5)
    threads = torch.get_num_threads()
    try:
        row = bench_map.measure("sst2", 1, 16, 2, iterations=1, repeats=1)
    finally:
        torch.set_num_threads(threads)
    # one step at L = 1: 8 products forward, 13 backward (the Gram of Z for σ(Z), every 10th step, is not timed)
    assert row["gemms_per_step"] == 21 and row["R"] == 2
    for name in ("ours_gflops", "ceiling_gflops", "dense_gflops"):
        assert row[name] > 0
    assert row["of_ceiling"] == pytest.approx(row["ours_gflops"] / row["ceiling_gflops"])
    assert row["of_dense"] == pytest.approx(row["ours_gflops"] / row["dense_gflops"])


def test_bench_map_ceiling_replays_the_steps_own_gemms_on_their_own_layouts():
    """The ceiling runs the very calls of a step: transposed operands stay views, ``out=`` buffers
    are kept, and replaying a call gives what the step computed (so the kernels are the same)."""
    stack = bench_map.map_shape("jena", 1, 16, 2, 1)
    calls = bench_map.step_gemms(stack)
    assert len(calls) == 2 * 21  # two evaluations (t = 0 and t = 1) of one layer, no Gram
    transposed = [t for _, args, _ in calls for t in args if isinstance(t, torch.Tensor) and not t.is_contiguous()]
    assert transposed, "the step's transposed operands were copied contiguous"
    func, args, kwargs = next(c for c in calls if "out" in c[2])
    expected = func(*[t.clone() for t in args]).clone()
    gemm_ceiling.replay([(func, args, kwargs)])()
    assert torch.equal(kwargs["out"], expected)


def test_engine_ab_times_every_shape_and_leaves_torchs_threads_as_they_were():
    threads = torch.get_num_threads()
    times = bench_engine_ab.child(iterations=1)
    assert set(times) == set(bench_engine_ab.SHAPES) and all(t > 0 for t in times.values())
    assert torch.get_num_threads() == threads


def test_engine_ab_wants_two_named_trees(capsys):
    with pytest.raises(SystemExit):
        bench_engine_ab.main(["--src", f"only={Path(bench_engine_ab.__file__).parents[1] / 'src'}"])
    assert "--src NAME=PATH twice" in capsys.readouterr().err


BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"


def test_book_cpu_attributes_each_process_to_its_notebook(tmp_path, capsys, monkeypatch):
    """A kernel-like child (its command line names papermill and a notebook input) and the build
    around it: each one's CPU time in its own row, none lost between the samples."""
    kernel = [sys.executable, "-c", BURN.format(s=0.6), "papermill", "_build/notebook_inputs/01_toy.ipynb"]
    monkeypatch.setenv("TOY_KERNEL", json.dumps(kernel))  # not on the build's own command line
    build = f"import json, os, subprocess\n{BURN.format(s=0.3)}subprocess.run(json.loads(os.environ['TOY_KERNEL']), check=True)\n"
    assert book_cpu.main(["--out", str(tmp_path), "--every", "0.05", "--", sys.executable, "-c", build]) == 0
    table = pd.read_csv(tmp_path / "book_cpu.csv").set_index("part")
    assert set(table.index) == {"01_toy", "build", "all"}
    assert 0.5 <= table.loc["01_toy", "cpu_s"] < 2 and 0.25 <= table.loc["build", "cpu_s"] < 2
    assert table.loc["all", "cpu_s"] == pytest.approx(table.loc[["01_toy", "build"], "cpu_s"].sum())
    assert "CPU: " in capsys.readouterr().out
