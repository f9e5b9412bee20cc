"""Stacked training (``resgd.core.trainer.train_stacked``) against one run at a time (``resgd.core.trainer.train_gd``).

Per-run time of R runs that share shapes (mixed seeds and β, a small step size so nothing
diverges), for the robustness map's sizes (N = 16, n = 8) and the headline experiments' sizes
(N = 128, n = 24 / 16), L = 1 and 10. The two ways are timed round-robin (single, stacked,
single, …) in one process with one torch thread, so a change of machine load hits both alike;
the reported time is the median over ``--repeats``. Writes ``benchmarks/results/bench_stacked.csv``
(git ignores the folder) and prints a Markdown table. A benchmark, not a test: nothing fails.

    python benchmarks/bench_stacked.py [--quick] [--iterations 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import pandas as pd
import torch

from report import publish_table  # benchmarks/ is on sys.path when a script runs
from resgd.experiments import configuration
from resgd.data.spec import load_dataset
from resgd.core.model import init_params
from resgd.robustness.grid import map_grid
from resgd.core.trainer import train_gd, train_stacked

CASES = {  # name → (settings factory, stack sizes R)
    "map": (lambda ds: map_grid(False).settings(ds, 1.0, 16), (1, 8, 32, 96)),
    "headline": (lambda ds: configuration.settings(ds, False), (1, 3, 6, 15)),
}


def time_case(settings, L: int, R: int, iterations: int, repeats: int) -> dict:
    betas = (1.0, 0.0, 0.5)
    configs = [settings.config(betas[r % 3], L, r, 1e-4, iterations=iterations) for r in range(R)]
    data = load_dataset(configs[0].dataset, configs[0].dtype)
    params = [init_params(c.model, c.seed) for c in configs]
    args = (data.X_train, data.Y_train)

    def single():
        for c, p in zip(configs, params):
            train_gd(p, c.model, *args, c.gd, mask=data.mask_train)

    def stacked():
        train_stacked(params, [c.model for c in configs], *args, [c.gd for c in configs], mask=data.mask_train)

    single(), stacked()  # warm-up
    times = {"single": [], "stacked": []}
    for _ in range(repeats):
        for name, fn in (("single", single), ("stacked", stacked)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    per_run = {name: statistics.median(v) / R for name, v in times.items()}
    return {"ms_per_run_single": 1e3 * per_run["single"], "ms_per_run_stacked": 1e3 * per_run["stacked"],
            "speedup": per_run["single"] / per_run["stacked"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="map sizes only, R up to 32")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for case, (factory, sizes) in CASES.items():
        if args.quick and case != "map":
            continue
        for dataset in ("jena", "sst2"):
            s = factory(dataset)
            for L in (1, 10):
                for R in sizes:
                    if args.quick and R > 32:
                        continue
                    row = {"case": case, "dataset": dataset, "N": s.N, "n": s.n, "L": L, "R": R,
                           "iterations": args.iterations, **time_case(s, L, R, args.iterations, args.repeats)}
                    rows.append(row)
                    print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    table = pd.DataFrame(rows)
    publish_table(table, args.out, "bench_stacked")
    return table


if __name__ == "__main__":
    main()
