"""Each configuration's own stability limit: the largest stable step size on the probe grid.

The rule reuses the headline experiments' probe (:func:`resgd.experiments.study.probe_stable`): a
step size is stable when ``probe_iterations`` GD steps from seed ``seeds[0]`` neither diverge
nor end above the starting loss. Unlike :func:`resgd.experiments.study.choose_lr`, which probes only
the β = 1 model, the map probes every (β, L) it trains, so the ``own`` protocol can put each
configuration at the same fraction of *its own* limit. The grid is spaced by about 3×, so the
true limit lies between the reported one and the next grid value above it.
"""

from __future__ import annotations

import os

import pandas as pd

from ..experiments import study as ex
from .grid import MapGrid


def model_points(grid: MapGrid) -> list[tuple[float, int]]:
    """Every (β, L) the map trains: the β sweep at L = 1 and both twins at each depth."""
    return [(b, 1) for b in grid.betas] + [(b, L) for L in grid.depths for b in (1.0, 0.0)]


def probe_items(grid: MapGrid) -> list[tuple[ex.RunConfig, dict]]:
    items = []
    for dataset in grid.datasets:
        for qk in grid.qk_scales:
            for N in grid.sizes:
                s = grid.settings(dataset, qk, N)
                items += [(s.config(beta, L, grid.seeds[0], lr, iterations=grid.probe_iterations),
                           dict(qk_scale=float(qk), N=int(N)))
                          for beta, L in model_points(grid) for lr in grid.lr_grid]
    return items


def stability_limits(grid: MapGrid, *, n_jobs: int = 2, cache_dir: str | os.PathLike | None = None,
                     progress: bool = False, scheduler: str | None = None) -> pd.DataFrame:
    """One row per (dataset, qk_scale, N, β, L): ``limit`` (largest stable step size; NaN when
    none on the grid is stable) and ``n_stable``."""
    runs = tagged_sweep(probe_items(grid), n_jobs=n_jobs, cache_dir=cache_dir, progress=progress,
                        scheduler=scheduler, desc="robustness: stability probes")
    rows = []
    for (dataset, qk, N, beta, L, lr), h in runs.groupby(["dataset", "qk_scale", "N", "beta", "n_layers", "lr"], sort=False):
        diverged = bool(h["diverged"].iloc[0])
        rows.append(dict(dataset=dataset, qk_scale=float(qk), N=int(N), beta=float(beta), n_layers=int(L),
                         lr=float(lr), stable=ex.probe_stable(h.sort_values("iteration"), diverged)))
    probes = pd.DataFrame(rows)
    by = ["dataset", "qk_scale", "N", "beta", "n_layers"]
    stable = probes[probes["stable"]].groupby(by)["lr"].max().rename("limit")
    count = probes.groupby(by)["stable"].sum().rename("n_stable")
    return pd.concat([count, stable], axis=1).reset_index()


def tagged_sweep(items: list[tuple[ex.RunConfig, dict]], **kwargs) -> pd.DataFrame:
    """:func:`resgd.experiments.study.sweep` of the configs, each run's rows joined with its tags (a run
    with several tags, e.g. shared by two protocols, appears once per tag)."""
    configs = [config for config, _ in items]
    runs = ex.sweep(configs, **kwargs)
    if runs.empty:
        return runs
    tags = pd.DataFrame([{**tag, "key": ex.config_key(config)} for config, tag in items]).drop_duplicates()
    shared = ["key"] + [c for c in tags.columns if c in runs.columns and c != "key"]  # e.g. "dataset"
    return runs.merge(tags, on=shared, how="inner")
