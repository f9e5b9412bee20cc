"""The map's training runs: every cell × protocol × (β, L) × seed, cached, as one per-run table.

Protocols (the step size of a configuration at step fraction f):

* ``common`` — f × the stability limit of the β = 1 model at the same depth, for every β (the
  headline experiments' rule: one step size per comparison);
* ``own`` — f × the configuration's own stability limit (the theory's rate is μα with μ bounded
  by a smoothness constant that depends on β, so each β may take a different step).

A configuration with no stable step size on the probe grid is not trained; its loss counts as
+∞ (like a diverged run). β = 1 runs are identical in both protocols and run once (cache).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd

from ..experiments import study as ex
from .grid import PROTOCOLS, MapGrid
from .limits import model_points, tagged_sweep

TAGS = ["dataset", "qk_scale", "fraction", "N", "protocol"]


def run_items(grid: MapGrid, limits: pd.DataFrame) -> tuple[list[tuple[ex.RunConfig, dict]], pd.DataFrame]:
    """The runs to train (config, tags) and the table of configurations left untrained (no
    stable step size), with the same tags."""
    limit = limits.set_index(["dataset", "qk_scale", "N", "beta", "n_layers"])["limit"]
    items, missing = [], []
    for cell in grid.cells():
        s = grid.settings(cell["dataset"], cell["qk_scale"], cell["N"])
        for protocol in PROTOCOLS:
            for beta, L in model_points(grid):
                reference = 1.0 if protocol == "common" else beta
                lim = float(limit.get((cell["dataset"], cell["qk_scale"], cell["N"], reference, L), math.nan))
                tags = {**cell, "protocol": protocol}
                for seed in grid.seeds:
                    if math.isfinite(lim):
                        items.append((s.config(beta, L, seed, cell["fraction"] * lim), tags))
                    else:
                        missing.append({**tags, "beta": float(beta), "n_layers": int(L), "seed": int(seed)})
    return items, pd.DataFrame(missing, columns=TAGS + ["beta", "n_layers", "seed"])


def summarize_runs(runs: pd.DataFrame, grid: MapGrid, target_fraction: dict[str, float]) -> pd.DataFrame:
    """One row per (tags, β, L, seed): loss at every horizon (+∞ after a divergence),
    iterations to the target loss (NaN if not reached), σ_min²/σ_max²(Z⁰)."""
    rows = []
    for keys, h in runs.groupby(TAGS + ["beta", "n_layers", "seed"], sort=False):
        h = h.sort_values("iteration")
        first = h.iloc[0]
        loss = pd.Series(h["loss"].to_numpy(dtype=float), index=h["iteration"].to_numpy())
        row = dict(zip(TAGS + ["beta", "n_layers", "seed"], keys))
        row.update(lr=float(first["lr"]), diverged=bool(first["diverged"]), is_standin=bool(first["is_standin"]))
        for T in grid.horizons:
            value = loss.get(T, math.inf)
            row[f"loss_{T}"] = value if math.isfinite(value) else math.inf
        target = target_fraction[first["dataset"]] * float(first["loss_zero"])
        reached = loss.index[loss.to_numpy() <= target]
        row["iterations_to_target"] = float(reached[0]) if len(reached) else math.nan
        sigma = h.dropna(subset=["sigma_min_Z"])
        smin, smax = float(sigma["sigma_min_Z"].iloc[0]), float(sigma["sigma_max_Z"].iloc[0])
        row["rate_ratio_Z0"] = (smin / smax) ** 2 if smax > 0 else 0.0
        rows.append(row)
    return pd.DataFrame(rows)


def untrained_rows(missing: pd.DataFrame, grid: MapGrid) -> pd.DataFrame:
    """Configurations without a stable step size, as per-run rows with loss +∞."""
    if missing.empty:
        return missing
    out = missing.assign(lr=np.nan, diverged=True, is_standin=False, iterations_to_target=np.nan, rate_ratio_Z0=np.nan)
    for T in grid.horizons:
        out[f"loss_{T}"] = math.inf
    return out


def map_runs(grid: MapGrid, limits: pd.DataFrame, *, n_jobs: int = 2, cache_dir: str | os.PathLike | None = None,
             progress: bool = False, scheduler: str | None = None) -> pd.DataFrame:
    """Train (or read from the cache) every run of the map; the per-run table."""
    items, missing = run_items(grid, limits)
    runs = tagged_sweep(items, n_jobs=n_jobs, cache_dir=cache_dir, progress=progress, scheduler=scheduler,
                        desc="robustness: map runs")
    targets = {d: ex.preset(d, True)["target_fraction"] for d in grid.datasets}
    table = summarize_runs(runs, grid, targets) if not runs.empty else pd.DataFrame()
    return pd.concat([table, untrained_rows(missing, grid)], ignore_index=True)
