"""The robustness map's workload: the stacked trainer against the JAX peer, its own GEMMs in
isolation and the host's dense matmul rate, shape by shape.

For each shape the map trains (Jena-like d = 14 per-token and SST-2-like d = 50 mean-pooled, padded;
d_QK = 16, m = 64, n = 8, N = 16/32, L = 1/2/6/10; stacks of R = 16 runs, as :data:`resgd.experiments.runs.MAX_STACK`;
synthetic data of those shapes, a small step so nothing diverges), one call trains ``--iterations``
GD steps (default: the book map's 100, so a call's fixed costs weigh as they do in the map; σ(Z)
recorded at t = 0 and every 10th, as the map's runs):

* ``ours``: :func:`resgd.core.trainer.train_stacked`, run-steps per second and GFLOP/s (the
  step's matrix-product FLOPs, 2·b·m·k·n summed over the GEMMs one step calls);
* ``jax``: the JAX peer (:func:`jax_peer.make_stacked_train`): ``jax.jit`` of ``lax.scan`` over the
  steps of ``jax.vmap`` of one run's step, gradient by ``jax.grad``, same weights, β, μ and data;
  before timing, its loss and ‖∇Φ‖ histories must equal ours to 1e-12 (relative) or the run stops;
  its compile time is measured apart;
* ``ceiling`` (``gemm_ceiling.py``, shared with ``book_floor.py``): the step's own GEMM calls,
  captured with copies of their tensors (same shapes, strides and ``out=`` buffers: the same
  kernels on the same layouts), each replayed ``HOT`` times in a row (so in cache) with nothing
  between them: the rate the step's GEMMs reach alone.
  (Fresh contiguous tensors of the profiled shapes, each call allocating its output, would time
  allocation, page faults and other layouts too: a ceiling up to ~2x too slow);
* ``dense``: a square float64 ``torch.matmul`` (1024²), the host's dense rate.

One thread for all: ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` = 1 and ``torch.set_num_threads(1)``;
XLA gets ``--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1`` before jax loads
(``jax_peer.import_jax``); and since XLA still used up to 1.46 CPU-s per wall-second on some
shapes with those flags alone, the whole process is pinned to one CPU (``sched_setaffinity``;
``--no-pin`` leaves it free). Each row reports CPU time / wall time of ours and JAX. With ``$RESGD_MKL_INTEL_PATH=1`` (as CI) the script restarts itself with MKL's Intel path.
The four are timed **interleaved** (ours, jax, ceiling, dense, ours, …); ratios are taken per
repeat and their medians reported, so a load change on a shared machine hits all alike. A
benchmark, not a test. Writes ``benchmarks/results/bench_map.csv`` (atomically) and prints a table.

    python benchmarks/bench_map.py [--quick] [--repeats 5] [--iterations 100] [--shapes jena:16:1,...] [--no-jax]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread everywhere, before torch (and jax) load their runtimes

import pandas as pd
import torch

from gemm_ceiling import HOT, CaptureGemms, gemm_flops, interleaved, replay
from jax_peer import import_jax  # benchmarks/ is on sys.path when a script runs; sets XLA's one-thread flags
from report import map_table, publish_table
from resgd.infra.mkl_path import active as mkl_active, reexec_if_requested
from resgd.core.model import ModelConfig, init_params
from resgd.core.trainer import GDConfig, train_stacked
from resgd.robustness.grid import map_grid

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


def step_gemms(stack) -> list:
    """The GEMM calls (function, args, kwargs) of one ``train_stacked`` call of one iteration: two
    evaluations (t = 0 and t = 1), i.e. two steps' GEMMs."""
    params, models, X, Y, gds, mask = stack
    one = [GDConfig(lr=g.lr, iterations=1, reduction=g.reduction, record_every=g.record_every) for g in gds]
    with CaptureGemms() as capture:
        train_stacked(params, models, X, Y, one, mask)
    return capture.calls


def history_arrays(out) -> dict:
    """Our histories as (steps, R) arrays per column (the shape of the JAX peer's rows)."""
    import numpy as np

    return {c: np.stack([o.history[c].to_numpy() for o in out], axis=1) for c in ("loss", "grad_norm")}


def check_peer(ours: dict, peer: tuple) -> dict:
    """Max relative difference of the peer's loss and ‖∇Φ‖ histories from ours; ValueError above 1e-12."""
    import numpy as np

    diff = {}
    for (name, a), b in zip(ours.items(), peer):
        if a.shape != b.shape or not np.isfinite(a).all():
            raise ValueError(f"JAX peer: {name} history of shape {b.shape}, ours {a.shape} (or not finite)")
        diff[name] = float(np.max(np.abs(a - b) / np.abs(a)))
    if max(diff.values()) > 1e-12:
        raise ValueError(f"JAX peer differs from train_stacked by more than 1e-12 (relative): {diff}")
    return diff


def measure(kind: str, L: int, N: int, R: int, iterations: int, repeats: int, jax=None) -> dict:
    """One shape: ours, the JAX peer (when ``jax``), the GEMM ceiling and the dense rate, interleaved.

    Ratios are taken per repeat (the calls of one repeat ran back to back under the same load)
    and their median is reported; times are wall clock, with the CPU-time ratio beside it."""
    load0 = os.getloadavg()[0]
    stack = map_shape(kind, L, N, R, iterations)
    calls = step_gemms(stack)
    flops_two_steps = gemm_flops(calls)  # the profiled run evaluates t = 0 and t = 1: two steps
    step_flops = flops_two_steps / 2
    ceiling = replay(calls)
    square = torch.randn(1024, 1024, dtype=torch.float64)
    params, models, X, Y, gds, mask = stack
    steps = iterations + 1

    def ours():
        train_stacked(params, models, X, Y, gds, mask)

    def dense():
        torch.matmul(square, square)

    fns = {"ours": ours, "ceiling": ceiling, "dense": dense}
    row = {"dataset": kind, "N": N, "n": 8, "L": L, "R": R, "steps": steps, "gemms_per_step": len(calls) // 2}
    if jax is not None:
        from jax_peer import make_stacked_train

        peer, row["jax_compile_s"] = make_stacked_train(models[0], gds[0], X, Y, mask, params, [g.lr for g in gds],
                                                        [m.beta for m in models], [m.residual_ffn for m in models])
        diff = check_peer(history_arrays(train_stacked(params, models, X, Y, gds, mask)), peer())
        row.update({"jax_loss_rel_diff": diff["loss"], "jax_grad_norm_rel_diff": diff["grad_norm"]})
        fns = {"ours": ours, "jax": peer, "ceiling": ceiling, "dense": dense}
    wall, cpu = interleaved(fns, repeats)
    med = {k: statistics.median(v) for k, v in wall.items()}
    ceiling_step = [w / (2 * HOT) for w in wall["ceiling"]]  # the replay runs two steps' GEMMs HOT times

    def per_repeat(num, den):
        return statistics.median(a / b for a, b in zip(num, den))

    row.update({
        "run_steps_per_s": R * steps / med["ours"],
        "ours_gflops": step_flops * steps / med["ours"] / 1e9,
        "ceiling_gflops": HOT * flops_two_steps / med["ceiling"] / 1e9,
        "dense_gflops": 2.0 * 1024 ** 3 / med["dense"] / 1e9,
        "of_ceiling": per_repeat([c * steps for c in ceiling_step], wall["ours"]),
        "of_dense": per_repeat([d * step_flops * steps / (2.0 * 1024 ** 3) for d in wall["dense"]], wall["ours"]),
        "ours_spread": (max(wall["ours"]) - min(wall["ours"])) / med["ours"],
    })
    if jax is not None:
        row.update({"jax_gflops": step_flops * steps / med["jax"] / 1e9,
                    "jax_over_ours": per_repeat(wall["jax"], wall["ours"]),
                    "jax_over_ours_cpu": per_repeat(cpu["jax"], cpu["ours"]),
                    "jax_of_ceiling": per_repeat([c * steps for c in ceiling_step], wall["jax"]),
                    "jax_cpu_per_wall": statistics.median(c / w for c, w in zip(cpu["jax"], wall["jax"]))})
    row["ours_cpu_per_wall"] = statistics.median(c / w for c, w in zip(cpu["ours"], wall["ours"]))
    row["load"] = (load0 + os.getloadavg()[0]) / 2
    return row


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 16, L = 1 and 10 only")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=map_grid(False).iterations,
                        help="GD iterations per call (default: the book map's; σ(Z) at 0 and every 10th)")
    parser.add_argument("--stack", type=int, default=16)
    parser.add_argument("--shapes", default="", help="only these, e.g. jena:16:1,sst2:32:10 (data:N:L)")
    parser.add_argument("--no-jax", action="store_true", help="leave the JAX peer out")
    parser.add_argument("--no-pin", action="store_true", help="do not pin the process to one CPU")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    if argv is None:  # as a script only: exec would replace a caller's process (a test's pytest worker)
        reexec_if_requested([__file__, *sys.argv[1:]])  # $RESGD_MKL_INTEL_PATH=1, as CI
    torch.set_num_threads(1)
    if not args.no_pin and hasattr(os, "sched_setaffinity"):  # XLA may start helper threads despite its flags:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one CPU for every thread of the process
    jax = None if args.no_jax else import_jax()
    if jax is None and not args.no_jax:
        print("jax is not installed (optional extra [jax]): the peer is left out", flush=True)
    shapes = [(kind, N, L) for kind in ("jena", "sst2") for N in ((16,) if args.quick else (16, 32))
              for L in ((1, 10) if args.quick else (1, 2, 6, 10))]
    if args.shapes:
        shapes = [(k, int(N), int(L)) for k, N, L in (item.split(":") for item in args.shapes.split(","))]
    pinned = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "n/a"
    print(f"MKL Intel path: {mkl_active()}; CPUs allowed: {pinned}; threads: torch {torch.get_num_threads()}, "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}, OMP/MKL_NUM_THREADS={os.environ['OMP_NUM_THREADS']}/"
          f"{os.environ['MKL_NUM_THREADS']}", flush=True)
    rows = []
    for kind, N, L in shapes:
        row = measure(kind, L, N, args.stack, args.iterations, args.repeats, jax)
        rows.append(row)
        print({k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    table = pd.DataFrame(rows)
    publish_table(table, args.out, "bench_map")
    if jax is not None:
        print("\n" + map_table(table))
    return table


if __name__ == "__main__":
    main()
