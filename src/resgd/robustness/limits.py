"""Each configuration's own stability limit: the largest step size on the probe grid at which it learns.

A probe is ``probe_iterations`` GD steps from seed ``seeds[0]``; its outcome follows
:func:`resgd.robustness.outcomes.outcome`. The limit is the largest step size whose probe
**learns** (loses at least ``stall_drop`` of Φ(0)): a step at which the loss merely does not rise
is not called stable, because a flat landscape (a twin whose signal died at initialisation)
tolerates any step. A configuration none of whose probes learns is **stalled** (limit NaN),
never "stable at the top of the grid". Unlike :func:`resgd.experiments.steps.choose_lr`, which
probes only the β = 1 model, the map probes every (β, L) it trains, so ``own`` can put each
configuration at the same fraction of *its own* limit. The grid is spaced by about 3×, so the
true limit lies between the reported one and the next grid value above it.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pandas as pd

from ..experiments.configuration import RunConfig, Settings, config_key
from ..experiments.runs import sweep
from .grid import MapGrid
from .outcomes import OUTCOMES, outcome


POINT_KEYS = ["beta", "n_layers", "init"]
"""A model point: (β, L, ``init``), ``init`` the twin initialisation (:attr:`MapGrid.twins`) of
its sublayers without skip (a model with β > 0 is the same under every ``init``)."""


def model_points(grid: MapGrid) -> list[tuple[float, int, str]]:
    """Every (β, L, init) the map trains: the β sweep at L = 1, and at each depth the residual
    model and the twins without residual of ``grid.twins``."""
    first = grid.twins[0]
    return ([(b, 1, first) for b in grid.betas]
            + [point for L in grid.depths for point in [(1.0, L, first)] + [(0.0, L, t) for t in grid.twins]])


def point_config(s: Settings, beta: float, n_layers: int, init: str, seed: int, lr: float,
                 iterations: int | None = None) -> RunConfig:
    """The run of one model point, its twin initialisation ``init`` (``Settings.twin_init``)."""
    return replace(s, twin_init=init).config(beta, n_layers, seed, lr, iterations=iterations)


def probe_items(grid: MapGrid) -> list[tuple[RunConfig, dict]]:
    items = []
    for dataset in grid.datasets:
        for qk in grid.qk_scales:
            for N in grid.sizes:
                s = grid.settings(dataset, qk, N)
                items += [(point_config(s, beta, L, init, grid.seeds[0], lr, iterations=grid.probe_iterations),
                           dict(qk_scale=float(qk), N=int(N), init=init))
                          for beta, L, init in model_points(grid) for lr in grid.lr_grid]
    return items


def stability_limits(grid: MapGrid, *, n_jobs: int = 2, cache_dir: str | os.PathLike | None = None,
                     progress: bool = False, scheduler: str | None = None) -> pd.DataFrame:
    """One row per (dataset, qk_scale, N, β, L, init): ``limit`` (largest step size whose probe learns;
    NaN when none does), ``n_learns``/``n_stalled``/``n_diverged`` (probes of each outcome) and
    ``status`` (``learns``; else ``stalled`` when a probe stalled, ``diverged`` when all diverged)."""
    runs = tagged_sweep(probe_items(grid), n_jobs=n_jobs, cache_dir=cache_dir, progress=progress,
                        scheduler=scheduler, desc="robustness: stability probes")
    rows = []
    by = ["dataset", "qk_scale", "N", *POINT_KEYS]
    for (dataset, qk, N, beta, L, init, lr), h in runs.groupby([*by, "lr"], sort=False):
        loss = h.sort_values("iteration")["loss"].to_numpy(dtype=float)
        rows.append(dict(dataset=dataset, qk_scale=float(qk), N=int(N), beta=float(beta), n_layers=int(L), init=init,
                         lr=float(lr), outcome=outcome(loss, bool(h["diverged"].iloc[0]), grid.stall_drop)))
    probes = pd.DataFrame(rows)
    limit = probes[probes["outcome"] == "learns"].groupby(by)["lr"].max().rename("limit")
    counts = pd.crosstab([probes[c] for c in by], probes["outcome"]).reindex(columns=list(OUTCOMES), fill_value=0)
    counts.columns = [f"n_{c}" for c in OUTCOMES]
    table = pd.concat([counts, limit], axis=1).reset_index()
    table["status"] = ["learns" if lim == lim else "stalled" if n > 0 else "diverged"
                       for lim, n in zip(table["limit"], table["n_stalled"])]
    return table


def tagged_sweep(items: list[tuple[RunConfig, dict]], **kwargs) -> pd.DataFrame:
    """:func:`resgd.experiments.runs.sweep` of the configs, each run's rows joined with its tags (a run
    with several tags, e.g. shared by two protocols, appears once per tag)."""
    configs = [config for config, _ in items]
    runs = sweep(configs, **kwargs)
    if runs.empty:
        return runs
    tags = pd.DataFrame([{**tag, "key": config_key(config)} for config, tag in items]).drop_duplicates()
    shared = ["key"] + [c for c in tags.columns if c in runs.columns and c != "key"]  # e.g. "dataset"
    return runs.merge(tags, on=shared, how="inner")
