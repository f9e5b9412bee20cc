"""How fast could the book's two experiment pages be? Their GD work at the machine's dense matmul rate.

    python benchmarks/book_floor.py [--mode full|quick] [--report _build/execution_report.json] [--out DIR]
                                    [--repeats 5] [--no-ceiling]

After ``make book`` in that mode (it reads the results cache and trains nothing: a run missing
from the cache is an error), for the Jena and SST-2 pages (04, 05):

* the work: every run of the β and depth sweeps, the iterations it ran (to its divergence, if it
  diverged) times the matrix-product FLOPs of one step (``flops.step_flops``: the
  products any implementation must compute; softmax, activations and residual adds are not
  counted). The step-size probes are left out, so the sum is a lower bound;
* the limit: a dense square float64 ``torch.matmul`` (2048²) on one thread, measured now (with the
  ceiling, the median of its rates timed beside each shape, so that one load spike does not move
  every page's floor);
* the floor: work / limit, the CPU seconds the two pages would take if every product ran at the
  dense rate and nothing else cost anything; beside it each page's wall time in the last full
  build (``_build/execution_report.json``; two notebooks ran at a time, each on two processes).

Beside the dense floor, what these pages' products can reach at their shapes: for each shape the
pages train (data set, depth, samples), one GD evaluation's own GEMM calls are captured and replayed
alone (``gemm_ceiling.py``, as ``bench_map.py`` does for the map), and the trainer
(``train_gd``, recording as the pages do) is timed per iteration, interleaved with the replay and
the dense product. Summed over the runs (iterations × per-iteration time of their shape):

* the **GEMM-ceiling floor**: CPU seconds if every step cost only its products at their isolated
  rate. ``dense floor / GEMM-ceiling floor`` is the largest fraction of the dense floor an
  implementation calling these kernels on these layouts could reach;
* the **GD time**: the trainer's measured per-iteration time × iterations, against both floors
  (the pages' wall time also holds the step-size probes, metrics and plotting).
* where the gap between GD and the ceiling lies: the share of GD's time spent inside its GEMMs
  (``torch.profiler``), and how close those GEMMs come, inside the step, to their isolated rate.
  ``GD / ceiling floor`` is the product of the two; only work outside the GEMMs can be removed
  without changing the products' layouts, and ``dense floor / GD's GEMM time`` is the fraction
  of the dense floor GD would reach with all of that work gone.

This is a benchmark: it measures and prints, nothing fails when it is slow.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

import pandas as pd
import torch

from resgd.experiments.configuration import settings
from resgd.experiments.study import run_experiments
import resgd.experiments.runs
from bench_gd import cpu_name, matmul_rate  # this folder is on sys.path when run as a script
from flops import step_flops
from gemm_ceiling import HOT, CaptureGemms, gemm_flops, gemm_seconds, interleaved, operator_breakdown, profiled, replay
from resgd.infra.atomic import write_json, write_text
from resgd.core.model import init_params
from resgd.core.hand_pass import hand_loss_and_grads
from resgd.core.trainer import train_gd
from resgd.data.spec import DTYPES, load_dataset
from resgd.infra.mkl_path import active as mkl_active, reexec_if_requested
from resgd.infra.threads import torch_threads

HERE = Path(__file__).resolve().parent

PAGES = {"jena": "notebooks/04_jena", "sst2": "notebooks/05_sst2"}


DENSE = 2048
"""The dense limit's size: a square float64 matmul of this side on one thread (``bench_gd``'s limit)."""


def dense_rate() -> float:
    """Median GFLOP/s of a square float64 matmul (:data:`DENSE`²) on one thread."""
    with torch_threads(1):
        return matmul_rate(torch.float64, DENSE)["median_gflops"]


def _cache_only(configs):
    raise RuntimeError(f"{len(configs)} run(s) are not in the results cache: run `make book` in this mode first")


def page_work(dataset: str, quick: bool, cache_dir: str | Path | None = None) -> pd.DataFrame:
    """One row per trained run of the page: its shape, the iterations it ran and their FLOPs."""
    s = settings(dataset, quick)
    compute, resgd.experiments.runs._compute_stack = resgd.experiments.runs._compute_stack, _cache_only  # read, never train
    try:
        results = run_experiments(s, n_jobs=1, cache_dir=cache_dir)
    finally:
        resgd.experiments.runs._compute_stack = compute
    rows = []
    # one row per trained configuration (its cache key): a run two arms share was trained once
    for _, h in results.runs.groupby("key", sort=False):
        last = h.iloc[-1]
        ran = int(last["diverged_at"]) if bool(last["diverged"]) else int(last["iterations"])
        beta, L = float(last["beta"]), int(last["n_layers"])
        flops = step_flops(s.model(beta, L, float(last["beta_ffn"]), seed=int(last["seed"])), int(last["n_train"]), s.n)["total"]
        rows.append({"dataset": dataset, "experiment": last["experiment"], "beta": beta, "n_layers": L,
                     "n_train": int(last["n_train"]), "seed": int(last["seed"]), "iterations_run": ran, "step_flops": flops, "flops": flops * ran})
    return pd.DataFrame(rows)


def shape_case(dataset: str, quick: bool, n_layers: int, n_train: int, iterations: int):
    """(RunConfig, data) of one shape a page trains (β = 1, seed 0, a small step: timing only)."""
    s = dataclasses.replace(settings(dataset, quick), N=n_train)
    config = s.config(1.0, n_layers, seed=0, lr=1e-4, iterations=iterations)
    return config, load_dataset(config.dataset, config.dtype)


def shape_rates(dataset: str, quick: bool, n_layers: int, n_train: int, repeats: int = 5,
                iterations: int = 10) -> tuple[dict, pd.DataFrame]:
    """One page shape, one thread: the trainer's seconds per iteration (``train_gd`` over
    ``iterations`` steps, σ(Z) recorded as the page records it), the seconds one evaluation's GEMMs
    take replayed alone, and the dense rate, interleaved; medians, and ratios per repeat. Then the
    gap between trainer and ceiling, split: ``train_of_ceiling`` ≈ ``gemm_share_of_train`` (the
    step's time inside its GEMMs, profiled) × ``ceiling_of_gemm_in_step`` (how close those GEMMs
    run, inside the step, to their isolated rate). The time outside the GEMMs, 1 − share, is what
    an engine could still remove without changing the products. Returns that row and the last
    profiled repeat's :func:`~gemm_ceiling.operator_breakdown` (per evaluation, t = 0..T)."""
    config, data = shape_case(dataset, quick, n_layers, n_train, iterations)
    params = init_params(config.model, config.seed, dtype=DTYPES[config.dtype])
    X, Y, mask, gd = data.X_train, data.Y_train, data.mask_train, config.gd
    with torch_threads(1):
        with CaptureGemms() as capture:
            hand_loss_and_grads([params], [config.model], X, Y, mask, gd.reduction)
        calls = capture.calls
        square = torch.randn(DENSE, DENSE, dtype=torch.float64)

        def run_gd():
            return train_gd(params, config.model, X, Y, gd, mask)
        run_profiled, profiles = profiled(run_gd)
        wall, _ = interleaved({"train": run_gd, "gemms in the step": run_profiled, "ceiling": replay(calls),
                               "dense": lambda: torch.matmul(square, square)}, repeats)
    train = [w / (iterations + 1) for w in wall["train"]]  # train_gd evaluates t = 0..T
    gemms = [gemm_seconds(p) / (iterations + 1) for p in profiles[-repeats:]]  # less the warm-up call's
    ceiling = [w / HOT for w in wall["ceiling"]]
    flops, dense_flops = gemm_flops(calls), 2.0 * DENSE ** 3
    row = {"dataset": dataset, "n_layers": n_layers, "n_train": n_train, "gemms_per_step": len(calls),
           "gemm_gflop_per_step": flops / 1e9,
           "train_s_per_step": statistics.median(train), "ceiling_s_per_step": statistics.median(ceiling),
           "gemm_in_step_s_per_step": statistics.median(gemms),
           "dense_gflops": dense_flops / statistics.median(wall["dense"]) / 1e9,
           "train_of_ceiling": statistics.median(c / t for c, t in zip(ceiling, train)),
           "gemm_share_of_train": statistics.median(g / t for g, t in zip(gemms, train)),
           "ceiling_of_gemm_in_step": statistics.median(c / g for c, g in zip(ceiling, gemms)),
           "ceiling_of_dense": statistics.median((flops / c) / (dense_flops / d) for c, d in zip(ceiling, wall["dense"]))}
    operators = operator_breakdown(profiles[-1], iterations + 1)
    return row, operators.assign(dataset=dataset, n_layers=n_layers, n_train=n_train)


def page_ceilings(work: pd.DataFrame, quick: bool, repeats: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`shape_rates` of every (data set, depth, samples) shape in ``work``: one row each, and
    their operators, one row per shape and operator."""
    shapes = work[["dataset", "n_layers", "n_train"]].drop_duplicates()
    rates, operators = [], []
    for dataset, L, N in shapes.itertuples(index=False):
        row, ops = shape_rates(dataset, quick, int(L), int(N), repeats=repeats)
        rates.append(row), operators.append(ops)
        print({k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in row.items()}, flush=True)
        other = ops[~ops["gemm"]]
        top = ", ".join(f"{r.operator.removeprefix('aten::')} {r.self_ms_per_step:.2f}" for r in other.head(4).itertuples())
        print(f"  profiled ms per step: GEMMs {ops[ops['gemm']]['self_ms_per_step'].sum():.2f}, other operators "
              f"{other['self_ms_per_step'].sum():.2f} ({other['calls_per_step'].sum():.0f} calls; {top})", flush=True)
    return pd.DataFrame(rates), pd.concat(operators, ignore_index=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("full", "quick"), default="full")
    parser.add_argument("--report", type=Path, default=Path("_build/execution_report.json"))
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats per shape (ceiling)")
    parser.add_argument("--no-ceiling", action="store_true", help="the dense floor only (no per-shape timing)")
    args = parser.parse_args(argv)
    if argv is None:  # as a script only: exec would replace a caller's process (a test's pytest worker)
        reexec_if_requested([__file__, *sys.argv[1:]])  # $RESGD_MKL_INTEL_PATH=1, as CI
    quick = args.mode == "quick"
    walls = {}
    if args.report.is_file():
        report = json.loads(args.report.read_text(encoding="utf8"))
        if report.get("mode") == args.mode:
            walls = {r["notebook"]: r["seconds"] for r in report["notebooks"]}
    work = pd.concat([page_work(d, quick) for d in PAGES], ignore_index=True)
    rates, operators = (None, None) if args.no_ceiling else page_ceilings(work, quick, args.repeats)
    rate = dense_rate() if rates is None else statistics.median(rates["dense_gflops"])
    summary = {"mode": args.mode, "cpu": cpu_name(), "mkl_intel_path": mkl_active(), "dense_gflops": rate,
               "pages": {}}
    print(f"{summary['cpu']}: dense float64 matmul, one thread: {rate:.1f} GFLOP/s; MKL Intel path: {mkl_active()}")
    if rates is not None:
        work = work.merge(rates[["dataset", "n_layers", "n_train", "train_s_per_step", "ceiling_s_per_step",
                                 "gemm_in_step_s_per_step"]], on=["dataset", "n_layers", "n_train"], how="left")
        for per_step, total in (("ceiling_s_per_step", "ceiling_s"), ("train_s_per_step", "train_s"),
                                ("gemm_in_step_s_per_step", "gemm_in_step_s")):
            work[total] = work[per_step] * work["iterations_run"]
    lines = ["| page | runs | GFLOP (matrix products) | dense floor (CPU s) | GEMM-ceiling floor (CPU s) | "
             "dense floor / ceiling floor | GD at the measured rate (CPU s) | GD / ceiling floor | GD / dense floor "
             "| GD's time in its GEMMs | ceiling / GEMMs in the step | dense floor / GD's GEMM time "
             "| last build: wall (s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for dataset, page in PAGES.items():
        w = work[work["dataset"] == dataset]
        gflop = w["flops"].sum() / 1e9
        entry = {"runs": len(w), "gflop": gflop, "floor_cpu_s": gflop / rate, "wall_s": walls.get(page)}
        if rates is not None:
            entry.update({"ceiling_floor_cpu_s": w["ceiling_s"].sum(), "gd_cpu_s": w["train_s"].sum(),
                          "gd_gemm_cpu_s": w["gemm_in_step_s"].sum()})
            entry.update({"reachable_of_dense_floor": entry["floor_cpu_s"] / entry["ceiling_floor_cpu_s"],
                          "gd_of_ceiling_floor": entry["ceiling_floor_cpu_s"] / entry["gd_cpu_s"],
                          "gd_of_dense_floor": entry["floor_cpu_s"] / entry["gd_cpu_s"],
                          "gemm_share_of_gd": entry["gd_gemm_cpu_s"] / entry["gd_cpu_s"],
                          "ceiling_of_gemm_in_step": entry["ceiling_floor_cpu_s"] / entry["gd_gemm_cpu_s"],
                          "gemm_only_of_dense_floor": entry["floor_cpu_s"] / entry["gd_gemm_cpu_s"]})
        summary["pages"][page] = entry

        def cell(key, fmt):
            return "n/a" if entry.get(key) is None else format(entry[key], fmt)

        lines.append(f"| {page} | {len(w)} | {gflop:,.0f} | {entry['floor_cpu_s']:.0f} | "
                     f"{cell('ceiling_floor_cpu_s', '.0f')} | {cell('reachable_of_dense_floor', '.0%')} | "
                     f"{cell('gd_cpu_s', '.0f')} | {cell('gd_of_ceiling_floor', '.0%')} | "
                     f"{cell('gd_of_dense_floor', '.0%')} | {cell('gemm_share_of_gd', '.0%')} | "
                     f"{cell('ceiling_of_gemm_in_step', '.0%')} | {cell('gemm_only_of_dense_floor', '.0%')} | "
                     f"{cell('wall_s', '.0f')} |")
    total = sum(p["floor_cpu_s"] for p in summary["pages"].values())
    summary["floor_cpu_s"] = total
    print("\n".join(lines))
    print(f"04 + 05 at the dense rate: {total:.0f} CPU s, i.e. {total / 2:.0f} s of wall on two cores "
          f"with both kept busy by these two pages alone")
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / f"book_floor_{args.mode}.json", summary)
    write_text(args.out / f"book_floor_{args.mode}_runs.csv", work.to_csv(index=False))
    if rates is not None:
        write_text(args.out / f"book_floor_{args.mode}_shapes.csv", rates.to_csv(index=False))
        write_text(args.out / f"book_floor_{args.mode}_operators.csv", operators.to_csv(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
