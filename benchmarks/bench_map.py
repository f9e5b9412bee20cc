"""The robustness map's workload: the stacked trainer against its own GEMMs in isolation and the
host's dense matmul rate, shape by shape (issue 22 item 5).

For each shape the map trains (Jena-like d = 14 per-token and SST-2-like d = 50 mean-pooled, padded;
d_QK = 16, m = 64, n = 8, N = 16/32, L = 1/2/6/10; stacks of R = 16 runs, as :data:`resgd.experiments.runs.MAX_STACK`;
synthetic data of those shapes, a small step so nothing diverges):

* ``ours``: :func:`resgd.core.stacked.train_stacked`, run-steps per second and GFLOP/s (the
  step's matrix-product FLOPs, 2·b·m·k·n summed over the GEMMs the profiler records in one step,
  the Gram of Z for σ(Z) included although it is computed every 10th step only: < 1 % of them);
* ``ceiling``: the same GEMMs (same shapes, same transposes) replayed back to back in isolation;
* ``dense``: a square float64 ``torch.matmul`` (1024²), the host's dense rate.

One torch thread; the three are timed **interleaved** (ours, ceiling, dense, ours, …) and the
medians of ``--repeats`` are reported, so a load change on a shared machine hits all alike; the
fractions ours/ceiling and ours/dense come from the same run. A benchmark, not a test. Writes
``benchmarks/results/bench_map.csv`` (atomically) and prints a Markdown table.

    python benchmarks/bench_map.py [--quick] [--repeats 5] [--iterations 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import pandas as pd
import torch

from report import publish_table  # benchmarks/ is on sys.path when a script runs
from resgd.core.model import ModelConfig, init_params
from resgd.core.stacked import train_stacked
from resgd.core.train import GDConfig

GEMMS = ("aten::bmm", "aten::baddbmm", "aten::baddbmm_")
SCALE = 10 ** -0.5  # the presets' v_scale and ffn_scale


def map_shape(kind: str, L: int, N: int, R: int, iterations: int):
    """(params, models, X, Y, gds, mask) of a stack of R runs of one map shape, synthetic data."""
    g = torch.Generator().manual_seed(0)
    d, n = (14, 8) if kind == "jena" else (50, 8)
    X = torch.randn(N, n, d, generator=g, dtype=torch.float64)
    mask = None
    if kind == "jena":
        Y = torch.randn(N, n, 1, generator=g, dtype=torch.float64)
    else:
        mask = torch.arange(n).view(1, n) < torch.randint(2, n + 1, (N,), generator=g).view(N, 1)
        X, Y = X * mask.unsqueeze(-1), torch.where(torch.rand(N, 1, generator=g) < 0.5, -1.0, 1.0).double()
    models = [ModelConfig(d=d, d_qk=16, m=64, k=1, n_layers=L, beta=(0.0, 0.5, 1.0)[r % 3],
                          pooling="none" if kind == "jena" else "mean", v_scale=SCALE, ffn_scale=SCALE)
              for r in range(R)]
    gds = [GDConfig(lr=1e-4, iterations=iterations, reduction="mean", record_every=10)] * R
    return [init_params(m, r) for r, m in enumerate(models)], models, X, Y, gds, mask


def step_gemms(stack) -> list[tuple[str, list[list[int]]]]:
    """The GEMM calls (name, input shapes) of one training step of ``stack`` (one iteration: t = 0, 1)."""
    from torch.profiler import ProfilerActivity, profile

    params, models, X, Y, gds, mask = stack
    one = [GDConfig(lr=g.lr, iterations=1, reduction=g.reduction, record_every=10) for g in gds]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        train_stacked(params, models, X, Y, one, mask)
    calls = [(e.name, [list(s) for s in e.input_shapes if s]) for e in prof.events() if e.name in GEMMS]
    return calls  # both evaluations: t = 0 and t = 1


def gemm_flops(calls) -> float:
    total = 0.0
    for name, shapes in calls:
        a, b = shapes[-2], shapes[-1]  # (batch, m, k) and (batch, k, n)
        total += 2.0 * a[0] * a[1] * a[2] * b[2]
    return total


def replay(calls):
    """A function running ``calls`` back to back on fresh tensors of their shapes (the ceiling)."""
    g = torch.Generator().manual_seed(1)
    work = []
    for name, shapes in calls:
        tensors = [torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes]
        work.append((name, tensors))

    def run():
        for name, t in work:
            if name == "aten::bmm":
                torch.bmm(t[0], t[1])
            else:
                torch.baddbmm(t[0], t[1], t[2])
    return run


def measure(kind: str, L: int, N: int, R: int, iterations: int, repeats: int) -> dict:
    stack = map_shape(kind, L, N, R, iterations)
    calls = step_gemms(stack)
    flops_two_steps = gemm_flops(calls)  # the profiled run evaluates t = 0 and t = 1: two steps
    step_flops = flops_two_steps / 2
    ceiling = replay(calls)
    square = torch.randn(1024, 1024, dtype=torch.float64)
    params, models, X, Y, gds, mask = stack

    def ours():
        train_stacked(params, models, X, Y, gds, mask)

    def dense():
        torch.matmul(square, square)

    ours(), ceiling(), dense()  # warm-up
    times = {"ours": [], "ceiling": [], "dense": []}
    for _ in range(repeats):
        for name, fn in (("ours", ours), ("ceiling", ceiling), ("dense", dense)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    steps = iterations + 1
    ours_rate = step_flops * steps / med["ours"] / 1e9
    ceiling_rate = flops_two_steps / med["ceiling"] / 1e9
    dense_rate = 2.0 * 1024 ** 3 / med["dense"] / 1e9
    return {"dataset": kind, "N": N, "n": 8, "L": L, "R": R, "gemms_per_step": len(calls) // 2,
            "run_steps_per_s": R * steps / med["ours"], "ours_gflops": ours_rate, "ceiling_gflops": ceiling_rate,
            "dense_gflops": dense_rate, "of_ceiling": ours_rate / ceiling_rate, "of_dense": ours_rate / dense_rate,
            "ours_spread": (max(times["ours"]) - min(times["ours"])) / med["ours"]}


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 16, L = 1 and 10 only")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--stack", type=int, default=16)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for kind in ("jena", "sst2"):
        for N in ((16,) if args.quick else (16, 32)):
            for L in ((1, 10) if args.quick else (1, 2, 6, 10)):
                row = measure(kind, L, N, args.stack, args.iterations, args.repeats)
                rows.append(row)
                print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    table = pd.DataFrame(rows)
    publish_table(table, args.out, "bench_map")
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
