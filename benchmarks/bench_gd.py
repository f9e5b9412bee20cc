"""Benchmark of one full-batch GD step: ours against a torch.nn baseline and the machine's matmul rate.

Run from the repository root (with the project's virtual environment active)::

    python benchmarks/bench_gd.py --quick            # < 2 minutes: a few sizes, quick sweep check
    python benchmarks/bench_gd.py                    # the full table (10-20 minutes)
    python benchmarks/bench_gd.py --threads 1,2      # also with two intra-op threads

What is measured (side by side, in one process, on the same inputs, interleaved round-robin so
that a change in machine load hits every implementation alike):

* ``ours``          — the trainer: ``resgd.core.trainer.train_gd`` (a stack of one of
                      ``resgd.core.trainer.train_stacked``) per iteration, its bookkeeping included
                      (gradient norm, history rows, σ(Z) every 10 iterations);
* ``ours_autograd`` — ``resgd.core.autograd_reference.autograd_loss_and_grad`` (autograd over resgd.core.model, the
                      reference) + the update p − lr g;
* ``nn``            — what a user writes with ``torch.nn``: ``nn.Linear`` projections, softmax
                      attention, residuals, ``nn.Linear`` FFN, autograd, ``torch.optim.SGD``
                      full batch (``zero_grad``/``backward``/``step``); same model, same FLOPs;
* ``mha``           — the same with ``nn.MultiheadAttention`` (one head; adds an output
                      projection W_O, so its FLOP count is larger, see ``mha_step_flops``);
* ``jax``           — the JAX peer (``jax_peer.py``, optional extra ``[jax]``; skipped when jax is
                      absent): the same model and loss, ``jax.jit`` of ``value_and_grad`` plus the
                      update in one compiled step, one XLA thread, float64 enabled; its compile
                      time is measured apart (``compile_s``) and not in the step time;
* ``limit``         — the machine's dense matmul rate: a square ``torch.matmul`` (2048², or
                      1024² in ``--quick``) in the same dtype and with the same thread count.

Steps/s is the inverse of the median over repeats of the per-step wall time (after warm-up
steps). Achieved GFLOP/s = matmul FLOPs of one forward+backward pass / step time, with the FLOP
count of ``flops.step_flops`` (formula in its docstring and in the README).
Threads: ``torch.set_num_threads`` is set to each value of ``--threads`` (default 1: the
machine this was written on has 2 cores shared with other users, and with 2 OpenMP threads a
busy second core stalls every parallel region).

Results go to ``--out`` (default ``benchmarks/results``): ``bench_gd.csv`` (one row per case and
implementation), ``bench_gd.json`` (everything, with machine, load and settings) and
``bench_gd_ratios.png``, all written atomically.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import datetime as dt
import json
import math
import multiprocessing as mp
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import jax_peer  # noqa: E402
from baselines import MHAModel, NNModel, load_params, make_sgd_step, nn_gradients, nn_loss  # noqa: E402

from resgd.infra.mkl_path import reexec_if_requested  # noqa: E402
from flops import step_flops  # noqa: E402
from resgd.infra.atomic import write_json, write_text, write_with  # noqa: E402
from resgd.core.model import ModelConfig, init_params  # noqa: E402
from resgd.core.trainer import GDConfig, train_gd  # noqa: E402
from resgd.core.autograd_reference import autograd_loss_and_grad  # noqa: E402

# The two data sets' shapes: Jena climate (14 features, 24 hourly tokens, per-token regression)
# and SST-2 (50-d GloVe, 16 tokens, mean-pooled ±1 label, padding mask). d_qk = d and m = 4d are
# the benchmark's choice (the book's experiments may use others; the costs scale as documented).
SIZES = {
    "jena": dict(d=14, n=24, pooling="none", masked=False),
    "sst2": dict(d=50, n=16, pooling="mean", masked=True),
}
IMPLS = ("ours", "ours_autograd", "nn", "mha", "jax")
DTYPES = {"float64": torch.float64, "float32": torch.float32}
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = CLOCKS["wall"]  # what a timed block is measured with (--clock); budgets always use wall time


# --------------------------------------------------------------------------------------------
# Inputs and implementations


def make_case(size: str, N: int, L: int, dtype: torch.dtype, seed: int = 0):
    spec = SIZES[size]
    d, n = spec["d"], spec["n"]
    cfg = ModelConfig(d=d, d_qk=d, m=4 * d, n_layers=L, pooling=spec["pooling"])
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, n, d, generator=g, dtype=torch.float64).to(dtype)
    mask = None
    if spec["masked"]:
        lengths = torch.randint(1, n + 1, (N,), generator=g)
        mask = torch.arange(n)[None, :] < lengths[:, None]
        X = X * mask[..., None]
    shape = (N, cfg.k) if cfg.pooling == "mean" else (N, n, cfg.k)
    Y = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    params = init_params(cfg, seed, dtype=dtype)
    return cfg, X, Y, mask, params


def mha_step_flops(cfg: ModelConfig, N: int, n: int) -> int:
    """FLOPs of the nn.MultiheadAttention model: unfolded Q, K, V projections plus W_O (d×d)."""
    d, m, L = cfg.d, cfg.m, cfg.n_layers
    T = N * n
    layer = 2 * T * d * 3 * d + 2 * T * d * d + 2 * 2 * N * n * n * d + 2 * 2 * T * d * m
    first_input_grad = 2 * T * d * 3 * d
    rows = N if cfg.pooling == "mean" else T
    output = 2 * rows * d * cfg.k
    return 3 * (L * layer + output) - first_input_grad


def tiny_step(cfg, X, Y, mask, params) -> float:
    """A step size that moves the weights by ~1e-6 of their norm: the weights hardly change over the
    timed steps (no divergence, no drift into another numerical regime), yet every step is real."""
    _, grads, _ = autograd_loss_and_grad(params, cfg, X, Y, mask)
    return 1e-6 * _norm(params) / max(_norm(grads), 1e-300)


def _norm(tensors: dict) -> float:
    return float(torch.linalg.vector_norm(torch.cat([t.reshape(-1) for t in tensors.values()])))


def build_impls(cfg, X, Y, mask, params, lr, names, compile_s: dict | None = None):
    """name -> (zero-argument step function, FLOPs per step); ``compile_s`` gets the JAX compile time."""
    N, n, _ = X.shape
    flops = step_flops(cfg, N, n)["total"]
    impls = {}
    state = {"ours_autograd": dict(params)}
    if "ours" in names:
        iterations = 20 if flops < 2e9 else 3  # fewer iterations per call at the large sizes

        def train_step():
            train_gd(params, cfg, X, Y, GDConfig(lr=lr, iterations=iterations - 1), mask)

        impls["ours"] = (train_step, flops, iterations)
    if "ours_autograd" in names:
        def autograd_step():
            current = state["ours_autograd"]
            _, grads, _ = autograd_loss_and_grad(current, cfg, X, Y, mask, "sum")
            state["ours_autograd"] = {k: p - lr * grads[k] for k, p in current.items()}

        impls["ours_autograd"] = (autograd_step, flops)
    if "nn" in names:
        model = load_params(NNModel(cfg).to(X.dtype), params)
        impls["nn"] = (make_sgd_step(model, X, Y, mask, lr), flops)
    if "mha" in names:
        torch.manual_seed(0)
        model = MHAModel(cfg).to(X.dtype)
        impls["mha"] = (make_sgd_step(model, X, Y, mask, lr), mha_step_flops(cfg, N, n))
    if "jax" in names:
        step, seconds = jax_peer.make_jax_step(cfg, X, Y, mask, params, lr)
        impls["jax"] = (step, flops)
        if compile_s is not None:
            compile_s["jax"] = seconds
    return impls


def check_equivalence(size: str, dtype: torch.dtype, with_jax: bool = False) -> dict:
    """Our loss and gradients against the torch.nn baseline's (and the JAX peer's) on a small case (the same function)."""
    cfg, X, Y, mask, params = make_case(size, 32, 2, dtype, seed=1)
    loss, grads, _ = autograd_loss_and_grad(params, cfg, X, Y, mask)
    model = load_params(NNModel(cfg).to(dtype), params)
    nn_value = nn_loss(model, X, Y, mask)
    nn_value.backward()
    theirs = nn_gradients(model)
    rel = max(float((grads[k] - theirs[k]).abs().max() / theirs[k].abs().max().clamp_min(1e-30)) for k in grads)
    tol = 1e-9 if dtype == torch.float64 else 1e-3
    loss_rel = abs(float(loss) - float(nn_value.detach())) / abs(float(nn_value.detach()))
    if not (rel < tol and loss_rel < tol):
        raise AssertionError(f"{size} {dtype}: ours and the nn baseline disagree (grad rel {rel:.2e}, loss rel {loss_rel:.2e})")
    result = {"size": size, "dtype": str(dtype).removeprefix("torch."), "max_rel_grad_diff": rel, "rel_loss_diff": loss_rel}
    if with_jax:
        value, jax_grads = jax_peer.value_and_grad(cfg, X, Y, mask, params)
        jax_rel, jax_loss_rel = jax_peer.max_rel_diff(jax_grads, grads), abs(value - float(loss)) / abs(float(loss))
        if not (jax_rel < tol and jax_loss_rel < tol):
            raise AssertionError(f"{size} {dtype}: ours and the JAX peer disagree (grad rel {jax_rel:.2e}, loss rel {jax_loss_rel:.2e})")
        result.update(jax_max_rel_grad_diff=jax_rel, jax_rel_loss_diff=jax_loss_rel)
    return result


# --------------------------------------------------------------------------------------------
# Timing


def time_impls(impls: dict, budget_s: float, min_reps: int, max_reps: int, warmup: int = 2,
               essential: tuple[str, ...] = (), slow_s: float = math.inf) -> dict[str, list[float]]:
    """Per-step times, ``reps`` repeats per implementation, interleaved round-robin.

    Each implementation runs ``warmup`` steps first. When the first one's step takes longer than
    ``slow_s``, only the ``essential`` implementations are timed (with one warm-up step and the
    minimum number of repeats), to keep the largest cases affordable.
    """
    inner = {}
    per_call_steps = {}
    for name, spec in list(impls.items()):
        if inner and essential and name not in essential and next(iter(inner.values())) == -1:
            del impls[name]
            continue
        fn = spec[0]
        per_call_steps[name] = spec[2] if len(spec) > 2 else 1
        start = time.perf_counter()
        fn()
        one = time.perf_counter() - start
        slow = one > slow_s
        for _ in range(0 if slow else warmup - 1):
            fn()
        inner[name] = -1 if (slow and not inner) else max(1, int(0.05 / max(one, 1e-9)))  # >= ~50 ms per block
        if slow:
            min_reps = max_reps = min(min_reps, 3)
    inner = {name: max(1, value) for name, value in inner.items()}
    samples: dict[str, list[float]] = {name: [] for name in impls}
    started = time.perf_counter()
    reps = 0
    while reps < max_reps and (reps < min_reps or time.perf_counter() - started < budget_s):
        for name, spec in impls.items():
            fn = spec[0]
            t0 = _clock()
            for _ in range(inner[name]):
                fn()
            samples[name].append((_clock() - t0) / (inner[name] * per_call_steps[name]))
        reps += 1
    return samples


_PROFILER_CHATTER = re.compile(rb"^USDT:.*\] profiler_(start|stop)\s*$")


@contextlib.contextmanager
def _without_profiler_chatter():
    """Drop the ``USDT: … profiler_start/stop`` lines Kineto writes to fd 2 on every profiler session.

    They come from C++ (no environment variable or log level silences them), so file descriptor
    2 is captured for the duration and every other line is written back to stderr unchanged.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().splitlines(keepends=True) if not _PROFILER_CHATTER.match(line)]
            if kept:
                sys.stderr.buffer.write(b"".join(kept))
                sys.stderr.flush()


MATMUL_OPS = frozenset({"aten::mm", "aten::bmm", "aten::addmm", "aten::addmm_", "aten::baddbmm", "aten::baddbmm_"})


def matmul_breakdown(step, per_call: int = 1, seconds: float = 0.3, max_steps: int = 20) -> dict:
    """Time per step spent inside the step's own matrix-product kernels (torch.profiler self time).

    This is the floor for any implementation built on these kernels at these shapes: what the
    step would cost if everything else (softmax, activations, residual adds, the loss, the update,
    Python and dispatch) were free. Self time excludes child ops (the input copy of an out-of-place
    ``addmm`` counts as elementwise work). The profiler adds ~1 µs per op, so the profiled step is
    reported beside the unprofiled one.
    """
    from torch.profiler import ProfilerActivity, profile

    start = time.perf_counter()
    step()
    steps = max(1, min(max_steps, int(seconds / max(time.perf_counter() - start, 1e-9))))
    with _without_profiler_chatter(), profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        wall = time.perf_counter() - t0
    matmul_us = sum(event.self_cpu_time_total for event in prof.key_averages() if event.key in MATMUL_OPS)
    return {"profiled_step_ms": 1e3 * wall / steps / per_call, "matmul_ms": matmul_us / 1e3 / steps / per_call,
            "profiled_steps": steps * per_call}


def matmul_rate(dtype: torch.dtype, size: int, reps: int = 7) -> dict:
    """Dense square matmul GFLOP/s (median and best of ``reps`` after one warm-up)."""
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    torch.matmul(a, b)
    times = []
    for _ in range(reps):
        t0 = _clock()
        torch.matmul(a, b)
        times.append(_clock() - t0)
    flops = 2 * size**3
    return {"size": size, "median_gflops": flops / statistics.median(times) / 1e9, "best_gflops": flops / min(times) / 1e9}


# --------------------------------------------------------------------------------------------
# Sweep of many small independent runs: processes with one thread each vs one process


def _sweep_worker_init(threads: int) -> None:
    torch.set_num_threads(threads)


def sweep_run(seed: int, N: int, iterations: int) -> float:
    """One small independent training run (Jena sizes), as a sweep would do; returns the final loss."""
    cfg, X, Y, mask, params = make_case("jena", N, 1, torch.float64, seed=seed)
    result = train_gd(params, cfg, X, Y, GDConfig(lr=1e-3, iterations=iterations, reduction="mean"), mask)
    return float(result.history["loss"].iloc[-1])


def sweep_benchmark(runs: int, N: int, iterations: int) -> list[dict]:
    seeds = list(range(runs))
    rows = []
    saved_threads = torch.get_num_threads()

    def record(mode, seconds, losses, note=""):
        rows.append({"mode": mode, "runs": runs, "N": N, "iterations": iterations, "wall_s": seconds, "final_loss_sum": sum(losses), "note": note})

    for threads in (1, 2):
        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        losses = [sweep_run(s, N, iterations) for s in seeds]
        record(f"1 process x {threads} thread(s), sequential", time.perf_counter() - t0, losses)
    torch.set_num_threads(1)
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        t0 = time.perf_counter()
        losses = list(pool.map(lambda s: sweep_run(s, N, iterations), seeds))
        record("1 process, 2 Python threads x 1 torch thread", time.perf_counter() - t0, losses)
    context = mp.get_context("spawn")
    t0 = time.perf_counter()
    with cf.ProcessPoolExecutor(max_workers=2, mp_context=context, initializer=_sweep_worker_init, initargs=(1,)) as pool:
        list(pool.map(_sweep_worker_init, [1, 1]))  # start both workers
        started = time.perf_counter()
        losses = list(pool.map(sweep_run, seeds, [N] * runs, [iterations] * runs))
        done = time.perf_counter()
    record("2 processes x 1 thread (spawn), incl. start-up", done - t0, losses, note=f"start-up {started - t0:.2f} s")
    record("2 processes x 1 thread (spawn), warm pool", done - started, losses)
    try:
        import joblib

        for attempt in ("cold (incl. start-up)", "warm (workers reused)"):
            t0 = time.perf_counter()
            with joblib.parallel_config(backend="loky", n_jobs=2, inner_max_num_threads=1):
                losses = joblib.Parallel()(joblib.delayed(sweep_run)(s, N, iterations) for s in seeds)
            record(f"joblib loky n_jobs=2, inner_max_num_threads=1, {attempt}", time.perf_counter() - t0, losses)
    except ImportError:
        pass
    torch.set_num_threads(saved_threads)
    return rows


# --------------------------------------------------------------------------------------------
# torch.compile: does it pay off?


def compile_benchmark(cases: list[tuple[str, int, int]], dtype: torch.dtype) -> list[dict]:
    """torch.compile (inductor, default mode): compile time and step time against ours, and the break-even.

    Two natural uses are compiled: the model's loss as a pure function (``resgd.core.model.block`` per
    layer, pooling, loss; AOTAutograd compiles forward and backward) differentiated with
    ``torch.autograd.grad``, and ``torch.compile(model)`` of the torch.nn baseline with its SGD
    step. ``compile_s`` is the wall time of the first step (tracing + code generation + the C++
    compiler), on a cold in-process cache.
    """
    from resgd.core.model import block, pool
    from resgd.core.loss import loss_from_output

    rows = []
    for size, N, L in cases:
        cfg, X, Y, mask, params = make_case(size, N, L, dtype)

        def loss_fn(p):
            H = X
            for layer in range(cfg.n_layers):
                H = block(H, p, layer, cfg, mask).H
            return loss_from_output(pool(H, mask, cfg.pooling) @ p["W_U"], Y, mask, "sum")

        row = {"size": size, "N": N, "L": L, "dtype": str(dtype).removeprefix("torch.")}
        try:
            torch._dynamo.reset()
            compiled_loss = torch.compile(loss_fn)

            def compiled_step():
                leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
                return torch.autograd.grad(compiled_loss(leaves), list(leaves.values()))

            t0 = time.perf_counter()
            compiled_step()
            row["compile_s"] = time.perf_counter() - t0
            model = torch.compile(load_params(NNModel(cfg).to(dtype), params))
            nn_step = make_sgd_step(model, X, Y, mask, 1e-9)
            t0 = time.perf_counter()
            nn_step()
            row["compile_nn_s"] = time.perf_counter() - t0
            impls = {"compiled": (compiled_step,), "compiled_nn": (nn_step,), "ours": (lambda: train_gd(params, cfg, X, Y, GDConfig(lr=1e-9, iterations=9), mask), 10)}
            samples = time_impls(impls, 2.0, 5, 50)
            for name in impls:
                row[f"{name}_step_ms"] = 1e3 * statistics.median(samples[name])
            gain = row["ours_step_ms"] - row["compiled_step_ms"]
            row["break_even_steps"] = math.inf if gain <= 0 else 1e3 * row["compile_s"] / gain
        except Exception as error:  # noqa: BLE001 — report, do not fail the benchmark
            row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        rows.append(row)
    return rows


# --------------------------------------------------------------------------------------------
# Plot (no computation: takes the tidy table)


def plot_ratios(table: pd.DataFrame):
    import matplotlib

    matplotlib.use("Agg")  # a script, not a notebook
    import matplotlib.pyplot as plt
    import seaborn as sns

    from resgd.plots import use_style

    use_style()
    wide = table.pivot_table(index=["threads", "dtype", "size", "L", "N"], columns="impl", values=["steps_per_s", "frac_of_limit"]).reset_index()
    frame = pd.DataFrame({
        "threads": wide["threads"], "dtype": wide["dtype"], "N": wide["N"],
        "case": wide["size"] + ", L=" + wide["L"].astype(str),
        "ours / nn baseline": wide[("steps_per_s", "ours")] / wide[("steps_per_s", "nn")],
        "ours / limit": wide[("frac_of_limit", "ours")],
        "nn / limit": wide[("frac_of_limit", "nn")],
    })
    frame.columns = [c if isinstance(c, str) else c[0] for c in frame.columns]
    ours = table[table["impl"] == "ours"]
    ceiling = None
    if "matmul_gflops" in ours.columns:  # the rate of the step's own matmul kernels: the ceiling of the middle panel
        ceiling = ours.assign(case=ours["size"] + ", L=" + ours["L"].astype(str),
                              **{"kernels / limit": ours["matmul_gflops"] / ours["limit_gflops"]})
    threads = sorted(frame["threads"].unique())
    orders = {"hue_order": sorted(frame["case"].unique()), "style_order": sorted(frame["dtype"].unique())}  # same look in every panel
    panels = 2 if ceiling is None else 3
    fig, axes = plt.subplots(len(threads), panels, figsize=(5.5 * panels, 4 * len(threads)), squeeze=False)
    for row, t in enumerate(threads):
        part = frame[frame["threads"] == t]
        ax = axes[row][0]
        sns.lineplot(data=part, x="N", y="ours / nn baseline", hue="case", style="dtype", markers=True, ax=ax, **orders)
        ax.axhline(3.0, color="grey", ls=":", lw=1)
        ax.axhline(1.5, color="grey", ls="--", lw=1)
        ax.set(xscale="log", title=f"speed-up over the torch.nn baseline ({t} thread(s))", ylabel="steps/s ratio")
        ax.legend(fontsize=8, ncol=2)
        ax = axes[row][1]
        sns.lineplot(data=part, x="N", y="ours / limit", hue="case", style="dtype", markers=True, ax=ax, **orders)
        ax.axhline(0.5, color="grey", ls="--", lw=1)
        ax.set(xscale="log", title="achieved GFLOP/s / matmul GFLOP/s", ylabel="fraction of the matmul rate", ylim=(0, None))
        ax.legend(fontsize=8, ncol=2)
        if ceiling is not None:
            ax = axes[row][2]
            sns.lineplot(data=ceiling[ceiling["threads"] == t], x="N", y="kernels / limit", hue="case", style="dtype", markers=True, ax=ax, **orders)
            ax.axhline(0.5, color="grey", ls="--", lw=1)
            ax.set(xscale="log", title="the step's matmul kernels alone / matmul GFLOP/s", ylabel="fraction of the matmul rate", ylim=(0, None))
            ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------


def cpu_name() -> str:
    """The CPU's model name with its family/model numbers (:func:`resgd.core.engine.cpu_id`,
    the one way the project names a CPU: two "AMD EPYC" hosts differed 2x in matmul rate)."""
    from resgd.core.engine import cpu_id

    return cpu_id()


def machine_info() -> dict:
    from resgd.infra.mkl_path import active

    return {
        "cpu": cpu_name(),
        "mkl_intel_path": active(),
        "logical_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "mkl": torch.backends.mkl.is_available(),
        "platform": platform.platform(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few sizes only (< 2 minutes)")
    parser.add_argument("--out", default=str(HERE / "results"), help="results folder")
    parser.add_argument("--threads", default="1", help="comma-separated torch thread counts (default 1)")
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--sizes", default="jena,sst2")
    parser.add_argument("--layers", default=None, help="comma-separated L (default 1,10; quick 1)")
    parser.add_argument("--N", default=None, help="comma-separated N (default 64,256,1024,4096,8192; quick 64,1024)")
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--budget", type=float, default=None, help="seconds of timing per case (default 3; quick 0.5)")
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                        help="wall time, or CPU time of the process (for a machine shared with other work; the "
                             "profiler's matmul floor stays wall time)")
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args(argv)
    if argv is None:  # as a script only: exec would replace a caller's process (a test's pytest worker)
        reexec_if_requested([__file__, *sys.argv[1:]])  # $RESGD_MKL_INTEL_PATH=1, as CI

    quick = args.quick
    global _clock
    _clock = CLOCKS[args.clock]
    Ns = [int(v) for v in (args.N or ("64,1024" if quick else "64,256,1024,4096,8192")).split(",")]
    Ls = [int(v) for v in (args.layers or ("1" if quick else "1,10")).split(",")]
    thread_counts = [int(v) for v in args.threads.split(",")]
    dtypes = [DTYPES[v] for v in args.dtypes.split(",")]
    sizes = args.sizes.split(",")
    impl_names = args.impls.split(",")
    if "jax" in impl_names and jax_peer.import_jax() is None:
        print("jax is not installed (pip install -c requirements.lock -e '.[jax]'): the JAX peer is skipped", flush=True)
        impl_names.remove("jax")
    budget = args.budget if args.budget is not None else (0.5 if quick else 3.0)
    min_reps, max_reps = (3, 15) if quick else (5, 41)
    out = Path(args.out)

    started = dt.datetime.now(dt.timezone.utc)
    meta = {"started_utc": started.isoformat(timespec="seconds"), "quick": quick, "machine": machine_info(),
            "loadavg_start": os.getloadavg(), "budget_s_per_case": budget, "min_reps": min_reps, "max_reps": max_reps,
            "impls": impl_names, "clock": args.clock}
    print(f"machine: {meta['machine']['cpu']}, {meta['machine']['logical_cpus']} CPUs, torch {torch.__version__}; load {meta['loadavg_start']}", flush=True)

    torch.set_num_threads(1)
    meta["equivalence"] = [check_equivalence(size, dtype, "jax" in impl_names) for size in sizes for dtype in dtypes]
    print("equivalence with the nn baseline" + (" and the JAX peer" if "jax" in impl_names else "") + ": ok", flush=True)

    rows, limits = [], []
    for threads in thread_counts:
        torch.set_num_threads(threads)
        for dtype in dtypes:
            dname = str(dtype).removeprefix("torch.")
            limit = matmul_rate(dtype, 1024 if quick else 2048)
            limits.append({"threads": threads, "dtype": dname, **limit})
            print(f"[{threads} thread(s)] {dname} matmul limit: {limit['median_gflops']:.1f} GFLOP/s (best {limit['best_gflops']:.1f})", flush=True)
            for size in sizes:
                for L in Ls:
                    for N in Ns:
                        cfg, X, Y, mask, params = make_case(size, N, L, dtype)
                        lr = tiny_step(cfg, X, Y, mask, params)
                        compile_s = {}
                        impls = build_impls(cfg, X, Y, mask, params, lr, impl_names, compile_s)
                        load0 = os.getloadavg()[0]
                        samples = time_impls(impls, budget, min_reps, max_reps, essential=("ours", "nn", "jax"), slow_s=0.5)
                        breakdown = matmul_breakdown(*impls["ours"][::2]) if "ours" in samples else {}
                        load1 = os.getloadavg()[0]
                        line = []
                        for name, times in samples.items():
                            median = statistics.median(times)
                            flops = impls[name][1]
                            gflops = flops / median / 1e9
                            rows.append({"threads": threads, "dtype": dname, "size": size, "d": cfg.d, "n": X.shape[1], "m": cfg.m, "L": L, "N": N,
                                         "impl": name, "step_ms": 1e3 * median, "step_ms_min": 1e3 * min(times), "reps": len(times),
                                         "steps_per_s": 1.0 / median, "flops": flops, "gflops": gflops,
                                         "limit_gflops": limit["median_gflops"], "frac_of_limit": gflops / limit["median_gflops"],
                                         "loadavg": 0.5 * (load0 + load1)})
                            if name in compile_s:
                                rows[-1]["compile_s"] = compile_s[name]
                            if name == "ours" and breakdown:
                                rows[-1].update(breakdown, matmul_share=breakdown["matmul_ms"] / breakdown["profiled_step_ms"],
                                                matmul_gflops=flops / breakdown["matmul_ms"] / 1e6)
                            line.append(f"{name} {1e3 * median:.3g} ms")
                        ours = statistics.median(samples["ours"]) if "ours" in samples else math.nan
                        nn = statistics.median(samples["nn"]) if "nn" in samples else math.nan
                        print(f"[{threads}t] {dname} {size} L={L} N={N}: " + ", ".join(line)
                              + f" | ours/nn x{nn / ours:.2f}, ours {rows[-len(samples)]['gflops']:.1f} GFLOP/s (load {load1:.1f})", flush=True)
                        del impls
    table = pd.DataFrame(rows)
    if "ours" in impl_names:
        for other in ("nn", "mha", "ours_autograd", "jax"):
            if other in impl_names:
                key = ["threads", "dtype", "size", "L", "N"]
                ref = table[table["impl"] == other].set_index(key)["step_ms"]
                mine = table[table["impl"] == "ours"].set_index(key)["step_ms"]
                table.loc[table["impl"] == "ours", f"speedup_vs_{other}"] = (ref / mine).reindex(table[table["impl"] == "ours"].set_index(key).index).to_numpy()

    def save(sweep, compiled):
        meta["finished_utc"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        meta["loadavg_end"] = os.getloadavg()
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "bench_gd.csv", table.to_csv(index=False))
        write_json(out / "bench_gd.json", {"meta": meta, "limits": limits, "rows": json.loads(table.to_json(orient="records")),
                                           "sweep": sweep, "compile": compiled})

    save([], [])
    fig = plot_ratios(table)
    write_with(out / "bench_gd_ratios.png", lambda tmp: fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight"))

    torch.set_num_threads(1)
    sweep = []
    if not args.no_sweep:
        runs, N, iterations = (4, 128, 30) if quick else (8, 256, 200)
        try:
            sweep = sweep_benchmark(runs, N, iterations)
        except Exception as error:  # noqa: BLE001 — the grid is already saved; report and go on
            sweep = [{"mode": "failed", "runs": runs, "N": N, "iterations": iterations, "wall_s": math.nan,
                      "final_loss_sum": math.nan, "note": f"{type(error).__name__}: {error}"}]
        for row in sweep:
            print(f"sweep: {row['mode']}: {row['wall_s']:.2f} s {row['note']}", flush=True)
    compiled = []
    if not args.no_compile and not quick:
        compiled = compile_benchmark([("jena", 256, 1), ("jena", 4096, 1), ("sst2", 1024, 1)], torch.float64)
        for row in compiled:
            print(f"torch.compile: {row}", flush=True)
    save(sweep, compiled)
    print(f"wrote {out / 'bench_gd.csv'}, {out / 'bench_gd.json'}, {out / 'bench_gd_ratios.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
