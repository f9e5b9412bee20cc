"""The map's training runs: every cell × protocol × (β, L) × seed, cached, as one per-run table.

Protocols (the step size of a configuration at step ``fraction`` f, or constant c):

* ``common`` — f × the stability limit of the β = 1 model at the same depth, for every β (the
  headline experiments' rule: one step size per comparison);
* ``own`` — f × the configuration's own stability limit (:mod:`.limits`);
* ``theory`` — μ = c / L̂(θ⁰) for each run (the theorem's step; the experiments' rule, L̂ at
  that run's own initial weights, so the seeds of a configuration each get their own μ).

A configuration with no learning step on the probe grid is not trained under ``own``: it is booked
with the outcome of its probes (``stalled``: Φ(T)/Φ(0) = 1 and no loss at T; ``diverged``: +∞),
marked ``trained = False``. Runs shared by two protocols (β = 1 under ``common`` and ``own``) run
once (cache).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd

from ..core.stats import empirical_rate
from ..experiments.configuration import RunConfig
from ..pipeline.presets import experiments as preset
from ..experiments.steps import theory_lr, warm_smoothness as warm
from .grid import MapGrid
from .limits import POINT_KEYS, model_points, point_config, tagged_sweep
from .outcomes import outcome

TAGS = ["dataset", "qk_scale", "fraction", "N", "protocol"]
RUN_KEYS = TAGS + POINT_KEYS + ["seed"]


def warm_smoothness(grid: MapGrid, *, n_jobs: int = 2, cache_dir: str | os.PathLike | None = None,
                    scheduler: str | None = None) -> None:
    """Compute (through the sweep engine, the seeds of a configuration stacked) and cache L̂(θ⁰) of
    every run the ``theory`` protocol trains, one per seed
    (:func:`resgd.experiments.steps.warm_smoothness`), so :func:`run_items` only reads them; c
    does not enter L̂, so every c shares them."""
    if "theory" not in grid.protocols:
        return
    warm([(replace(grid.settings(d, q, N), twin_init=init), beta, L, None, seed)
          for d in grid.datasets for q in grid.qk_scales for N in grid.sizes for beta, L, init in model_points(grid)
          for seed in grid.seeds], n_jobs=n_jobs, cache_dir=cache_dir, scheduler=scheduler)


def run_items(grid: MapGrid, limits: pd.DataFrame, *, cache_dir: str | os.PathLike | None = None,
              ) -> tuple[list[tuple[RunConfig, dict]], pd.DataFrame]:
    """The runs to train (config, tags) and the table of configurations left untrained (no
    learning step size), with the same tags and their probes' ``status``. Under ``theory`` the
    step is the experiments' rule :func:`resgd.experiments.steps.theory_lr` (L̂ at each seed's
    own θ⁰, one μ per run; cached in ``cache_dir``)."""
    table = limits.set_index(["dataset", "qk_scale", "N", *POINT_KEYS])
    items, missing = [], []
    for cell in grid.cells():
        s = grid.settings(cell["dataset"], cell["qk_scale"], cell["N"])
        protocol, step = cell["protocol"], cell["fraction"]
        for beta, L, init in model_points(grid):
            tags = {**cell, "init": init}
            if protocol == "theory":
                theory_s = replace(s, twin_init=init)
                items += [(point_config(s, beta, L, init, seed, theory_lr(theory_s, beta, L, step, seed=seed, cache_dir=cache_dir)),
                           tags) for seed in grid.seeds]
                continue
            reference = (1.0, L, grid.twins[0]) if protocol == "common" else (beta, L, init)
            key = (cell["dataset"], cell["qk_scale"], cell["N"], *reference)
            lim = float(table["limit"].get(key, math.nan))
            if math.isfinite(lim):
                items += [(point_config(s, beta, L, init, seed, step * lim), tags) for seed in grid.seeds]
            else:
                status = str(table["status"].get(key, "diverged"))
                missing += [{**tags, "beta": float(beta), "n_layers": int(L), "seed": int(seed), "outcome": status}
                            for seed in grid.seeds]
    return items, pd.DataFrame(missing, columns=RUN_KEYS + ["outcome"])


def summarize_runs(runs: pd.DataFrame, grid: MapGrid, target_fraction: dict[str, float]) -> pd.DataFrame:
    """One row per (tags, β, L, seed): Φ(0) (``loss_start``), at every horizon T the loss
    (``loss_T``, +∞ after a divergence) and the relative loss (``relative_T`` = Φ(T)/Φ(0)), the
    run's ``outcome``, the linear ``rate`` over the second half of the run, iterations to the
    preset's target loss (NaN if not reached) and σ_min²/σ_max²(Z⁰)."""
    rows = []
    for keys, h in runs.groupby(RUN_KEYS, sort=False):
        h = h.sort_values("iteration")
        first = h.iloc[0]
        loss = pd.Series(h["loss"].to_numpy(dtype=float), index=h["iteration"].to_numpy())
        start = float(loss.iloc[0])
        row = dict(zip(RUN_KEYS, keys))
        row.update(lr=float(first["lr"]), trained=True, diverged=bool(first["diverged"]),
                   is_standin=bool(first["is_standin"]), source_label=str(first.get("source_label", "")),
                   loss_start=start,
                   outcome=outcome(loss.to_numpy(), bool(first["diverged"]), grid.stall_drop))
        for T in grid.horizons:
            value = loss.get(T, math.inf)
            row[f"loss_{T}"] = value if math.isfinite(value) else math.inf
            row[f"relative_{T}"] = row[f"loss_{T}"] / start if start > 0 else math.nan
        row["rate"] = empirical_rate(h, start=grid.iterations // 2) if row["outcome"] != "diverged" else math.nan
        target = target_fraction[first["dataset"]] * float(first["loss_zero"])
        reached = loss.index[loss.to_numpy() <= target]
        row["iterations_to_target"] = float(reached[0]) if len(reached) else math.nan
        sigma = h.dropna(subset=["sigma_min_Z"])
        smin, smax = float(sigma["sigma_min_Z"].iloc[0]), float(sigma["sigma_max_Z"].iloc[0])
        row["rate_ratio_Z0"] = (smin / smax) ** 2 if smax > 0 else 0.0
        rows.append(row)
    return pd.DataFrame(rows)


def untrained_rows(missing: pd.DataFrame, grid: MapGrid) -> pd.DataFrame:
    """Configurations without a learning step size, booked by their probes' outcome: stalled —
    Φ(T)/Φ(0) = 1 and the loss at T unknown (NaN); diverged — both +∞."""
    if missing.empty:
        return missing
    stalled = missing["outcome"] == "stalled"
    out = missing.assign(lr=np.nan, trained=False, diverged=~stalled, is_standin=False, source_label="", loss_start=np.nan,
                         rate=np.nan, iterations_to_target=np.nan, rate_ratio_Z0=np.nan)
    for T in grid.horizons:
        out[f"loss_{T}"] = np.where(stalled, np.nan, math.inf)
        out[f"relative_{T}"] = np.where(stalled, 1.0, math.inf)
    return out


def map_runs(grid: MapGrid, limits: pd.DataFrame, *, n_jobs: int = 2, cache_dir: str | os.PathLike | None = None,
             progress: bool = False, scheduler: str | None = None,
             reader: Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame] | None = None) -> pd.DataFrame:
    """Train (or read from the cache) every run of the map; the per-run table. ``reader(table, runs)``
    adds columns read from the runs' histories (``runs``, one row per recorded iteration) to the
    table: a measure that only reads cached numbers stays outside this module, which the cache key
    covers (:func:`resgd.infra.source_hash.compute_modules`)."""
    warm_smoothness(grid, n_jobs=n_jobs, cache_dir=cache_dir, scheduler=scheduler)
    items, missing = run_items(grid, limits, cache_dir=cache_dir)
    runs = tagged_sweep(items, n_jobs=n_jobs, cache_dir=cache_dir, progress=progress, scheduler=scheduler,
                        desc="robustness: map runs")
    targets = {d: preset(d, grid.quick)["target_fraction"] for d in grid.datasets}
    table = summarize_runs(runs, grid, targets) if not runs.empty else pd.DataFrame()
    table = pd.concat([table, untrained_rows(missing, grid)], ignore_index=True)
    return reader(table, runs) if reader is not None else table
