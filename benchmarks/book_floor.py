"""How fast could the book's two experiment pages be? Their GD work at the machine's dense matmul rate.

    python benchmarks/book_floor.py [--mode full|quick] [--report _build/execution_report.json] [--out DIR]

After ``make book`` in that mode (it reads the results cache and trains nothing: a run missing
from the cache is an error), for the Jena and SST-2 pages (04, 05):

* the work: every run of the β and depth sweeps, the iterations it ran (to its divergence, if it
  diverged) times the matrix-product FLOPs of one step (``resgd.core.fastgrad.step_flops``: the
  products any implementation must compute; softmax, activations and residual adds are not
  counted). The step-size probes are left out, so the sum is a lower bound;
* the limit: a dense square float64 ``torch.matmul`` (2048²) on one thread, measured now;
* the floor: work / limit, the CPU seconds the two pages would take if every product ran at the
  dense rate and nothing else cost anything; beside it each page's wall time in the last full
  build (``_build/execution_report.json``; two notebooks ran at a time, each on two processes).

This is a benchmark: it measures and prints, nothing fails when it is slow.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import torch

import resgd.experiments.study as ex
import resgd.experiments.runs
from bench_gd import cpu_name, matmul_rate  # this folder is on sys.path when run as a script
from resgd.atomic import write_json, write_text
from resgd.core.fastgrad import step_flops
from resgd.threads import torch_threads

HERE = Path(__file__).resolve().parent

PAGES = {"jena": "notebooks/04_jena", "sst2": "notebooks/05_sst2"}


def dense_rate() -> float:
    """Median GFLOP/s of a square float64 matmul (2048²) on one thread: ``bench_gd``'s limit."""
    with torch_threads(1):
        return matmul_rate(torch.float64, 2048)["median_gflops"]


def _cache_only(configs):
    raise RuntimeError(f"{len(configs)} run(s) are not in the results cache: run `make book` in this mode first")


def page_work(dataset: str, quick: bool, cache_dir: str | Path | None = None) -> pd.DataFrame:
    """One row per trained run of the page: its shape, the iterations it ran and their FLOPs."""
    s = ex.settings(dataset, quick)
    compute, resgd.experiments.runs._compute_stack = resgd.experiments.runs._compute_stack, _cache_only  # read, never train
    try:
        results = ex.run_experiments(s, n_jobs=1, cache_dir=cache_dir)
    finally:
        resgd.experiments.runs._compute_stack = compute
    rows = []
    # one row per trained configuration (its cache key): a run two arms share was trained once
    for _, h in results.runs.groupby("key", sort=False):
        last = h.iloc[-1]
        ran = int(last["diverged_at"]) if bool(last["diverged"]) else int(last["iterations"])
        beta, L = float(last["beta"]), int(last["n_layers"])
        flops = step_flops(s.model(beta, L, float(last["beta_ffn"])), int(last["n_train"]), s.n)["total"]
        rows.append({"dataset": dataset, "experiment": last["experiment"], "beta": beta, "n_layers": L,
                     "seed": int(last["seed"]), "iterations_run": ran, "step_flops": flops, "flops": flops * ran})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("full", "quick"), default="full")
    parser.add_argument("--report", type=Path, default=Path("_build/execution_report.json"))
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    rate = dense_rate()
    walls = {}
    if args.report.is_file():
        report = json.loads(args.report.read_text(encoding="utf8"))
        if report.get("mode") == args.mode:
            walls = {r["notebook"]: r["seconds"] for r in report["notebooks"]}
    work = pd.concat([page_work(d, args.mode == "quick") for d in PAGES], ignore_index=True)
    lines = ["| page | runs | GFLOP (matrix products) | floor at the dense rate (CPU s) | last build: wall (s) |",
             "|---|---:|---:|---:|---:|"]
    summary = {"mode": args.mode, "dense_gflops": rate, "pages": {}}
    for dataset, page in PAGES.items():
        w = work[work["dataset"] == dataset]
        gflop = w["flops"].sum() / 1e9
        floor = gflop / rate
        wall = walls.get(page)
        summary["pages"][page] = {"runs": len(w), "gflop": gflop, "floor_cpu_s": floor, "wall_s": wall}
        lines.append(f"| {page} | {len(w)} | {gflop:,.0f} | {floor:.0f} | "
                     f"{'n/a' if wall is None else f'{wall:.0f}'} |")
    total = sum(p["floor_cpu_s"] for p in summary["pages"].values())
    summary["floor_cpu_s"] = total
    summary["cpu"] = cpu_name()
    print(f"{summary['cpu']}: dense float64 matmul, one thread: {rate:.1f} GFLOP/s")
    print("\n".join(lines))
    print(f"04 + 05 at the dense rate: {total:.0f} CPU s, i.e. {total / 2:.0f} s of wall on two cores "
          f"with both kept busy by these two pages alone")
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / f"book_floor_{args.mode}.json", summary)
    write_text(args.out / f"book_floor_{args.mode}_runs.csv", work.to_csv(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
