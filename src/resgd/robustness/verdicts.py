"""Effect sizes, seed-bootstrap confidence intervals and verdicts of the map's cells.

Every effect is oriented so that a **positive** value is the direction the paper claims:

* (a) ``residual_helps`` — mean over seeds of log(loss without / loss with residual) at L = 1,
  paired by seed (same initialisation);
* (b) ``beta_monotone`` — minus Spearman(β, seed-mean loss) over the five β at L = 1;
* (c) ``depth_residual_helps`` — the smallest over L = 2, 6, 10 of the mean log ratio (the claim
  is "at every depth").

Confidence interval: percentile bootstrap over seeds (``B`` resamples of the seeds with
replacement; the same resampled seeds for every β or depth of a cell, so pairing is kept).
Verdict: **holds** when the whole interval is above 0, **fails** when it is below 0, and
**undecided** when it contains 0 — the seeds do not separate the effect from none. With three
seeds the 95 % interval spans roughly the smallest to the largest seed's effect, so "holds"
means every seed agrees. A +∞ loss (diverged, or no stable step size) enters as log ratios
capped at ±``LOG_CAP``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from ..theorem1.study import spearman
from .grid import MapGrid
from .map_runs import TAGS

CLAIM_NAMES = ("residual_helps", "beta_monotone", "depth_residual_helps")
CLAIM_LABELS = {"residual_helps": "(a) residual vs none", "beta_monotone": "(b) β ordering",
                "depth_residual_helps": "(c) residual vs none, L = 2, 6, 10"}
VERDICTS = ("holds", "fails", "undecided")
LOG_CAP = 20.0
_BIG = np.finfo(float).max


def log_ratio(without: np.ndarray, with_res: np.ndarray) -> np.ndarray:
    """log(without / with), +∞ losses handled: capped at ±LOG_CAP; NaN when both are +∞."""
    without, with_res = np.asarray(without, float), np.asarray(with_res, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(without) - np.log(with_res)
    return np.clip(out, -LOG_CAP, LOG_CAP)


def verdict(lo: float, hi: float) -> str:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "undecided"
    return "holds" if lo > 0 else "fails" if hi < 0 else "undecided"


def _interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    samples = samples[np.isfinite(samples)]
    if samples.size == 0:
        return math.nan, math.nan
    tail = 100 * (1 - confidence) / 2
    return float(np.percentile(samples, tail)), float(np.percentile(samples, 100 - tail))


def _resamples(n_seeds: int, grid: MapGrid, salt: int) -> np.ndarray:
    rng = np.random.default_rng([2506, 5249, salt])  # fixed: the map's numbers are reproducible
    return rng.integers(0, n_seeds, size=(grid.bootstrap, n_seeds))


def _pair_matrix(rows: pd.DataFrame, loss: str, depths: list[int]) -> np.ndarray:
    """(depth, seed) matrix of log ratios without/with residual."""
    out = []
    for L in depths:
        at = rows[rows["n_layers"] == L]
        w = at[at["beta"] == 1.0].set_index("seed")[loss]
        wo = at[at["beta"] == 0.0].set_index("seed")[loss]
        seeds = sorted(set(w.index) & set(wo.index))
        out.append(log_ratio(wo[seeds].to_numpy(), w[seeds].to_numpy()))
    return np.array(out, dtype=float)


def _min_of_means(matrix: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray | float:
    if idx is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return float(np.nanmin(np.nanmean(matrix, axis=1))) if matrix.size else math.nan
    with warnings.catch_warnings():  # a resample whose seeds are all NaN gives NaN (dropped later)
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmin(np.nanmean(matrix[:, idx], axis=2), axis=0)  # (B,)


def spearman_rows(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Spearman(x, row) for every row of ``rows`` at once (average ranks for ties; +∞ ranks
    last; NaN for a constant row or one with a NaN) — the bootstrap's hot loop, vectorised."""
    rows = np.where(np.isinf(rows), _BIG, np.asarray(rows, dtype=float))
    ranks = pd.DataFrame(rows).rank(axis=1).to_numpy()
    rx = pd.Series(np.asarray(x, dtype=float)).rank().to_numpy()
    rc, xc = ranks - ranks.mean(axis=1, keepdims=True), rx - rx.mean()
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rc @ xc) / (np.sqrt((rc**2).sum(axis=1)) * np.sqrt((xc**2).sum()))


def _spearman_effect(means: np.ndarray, betas: np.ndarray) -> float:
    ranked = np.where(np.isinf(means), _BIG, means)
    return -float(spearman(betas, ranked))


def cell_effects(rows: pd.DataFrame, grid: MapGrid, horizon: int, salt: int) -> list[dict]:
    """The three claims' effects, intervals and verdicts in one cell × protocol at ``horizon``."""
    loss = f"loss_{horizon}"
    single = rows[rows["n_layers"] == 1]
    out = []
    # (a) and (c): the same statistic over one depth or several
    for name, depths in (("residual_helps", [1]), ("depth_residual_helps", list(grid.depths))):
        matrix = _pair_matrix(single if depths == [1] else rows, loss, depths)
        idx = _resamples(matrix.shape[1], grid, salt)
        lo, hi = _interval(_min_of_means(matrix, idx), grid.confidence)
        out.append(dict(claim=name, effect=_min_of_means(matrix), lo=lo, hi=hi, seeds=int(matrix.shape[1])))
    # (b): minus Spearman of β against the seed-mean loss
    table = single.pivot_table(index="beta", columns="seed", values=loss, aggfunc="first").sort_index()
    values, betas = table.to_numpy(dtype=float), table.index.to_numpy(dtype=float)
    idx = _resamples(values.shape[1], grid, salt + 1)
    boot = -spearman_rows(betas, values[:, idx].mean(axis=2).T)
    lo, hi = _interval(boot, grid.confidence)
    out.insert(1, dict(claim="beta_monotone", effect=_spearman_effect(values.mean(axis=1), betas), lo=lo, hi=hi,
                       seeds=int(values.shape[1])))
    for item in out:
        item["verdict"] = verdict(item["lo"], item["hi"])
    # supplementary for (a): speed, log(iterations to target without / with); not reached = 2T
    it = single.assign(steps=single["iterations_to_target"].fillna(2 * grid.iterations))
    speed = _pair_matrix(it, "steps", [1])
    out[0]["speed_effect"] = _min_of_means(speed)
    return out


BEST = "best"
"""The derived protocol: each (β, L) at the step fraction (of its own limit) with the lowest
seed-mean loss at the horizon, chosen from the grid's fractions (no extra runs; ``fraction``
is NaN in its rows)."""


def cell_table(per_run: pd.DataFrame, grid: MapGrid) -> pd.DataFrame:
    """One row per cell × protocol × horizon × claim: effect, lo, hi, verdict (+ the cell's
    predicted gain log(σ²-ratio(Z⁰) with / without residual), for the theory link). Protocols:
    those of the runs, plus :data:`BEST`."""
    rows = []
    for salt, (keys, g) in enumerate(per_run.groupby(TAGS, sort=True)):
        gain = predicted_gain(g)
        for T in grid.horizons:
            for item in cell_effects(g, grid, T, salt * 2):
                rows.append({**dict(zip(TAGS, keys)), "horizon": T, **item, "predicted_gain": gain})
    own = per_run[per_run["protocol"] == "own"]
    for salt, ((dataset, qk, N), g) in enumerate(own.groupby(["dataset", "qk_scale", "N"], sort=True), start=10**6):
        gain = predicted_gain(g)
        for T in grid.horizons:
            for item in cell_effects(best_step_rows(g, T), grid, T, salt * 2):
                rows.append(dict(dataset=dataset, qk_scale=qk, fraction=math.nan, N=N, protocol=BEST, horizon=T,
                                 **item, predicted_gain=gain))
    return pd.DataFrame(rows)


def best_step_rows(own: pd.DataFrame, horizon: int) -> pd.DataFrame:
    """Of one (data set, Q/K scale, N)'s ``own`` runs, those at each (β, L)'s best fraction."""
    loss = f"loss_{horizon}"
    means = own.groupby(["beta", "n_layers", "fraction"])[loss].mean().reset_index()
    best = means.sort_values([loss, "fraction"], ascending=[True, False]).drop_duplicates(["beta", "n_layers"])
    return own.merge(best[["beta", "n_layers", "fraction"]], on=["beta", "n_layers", "fraction"])


def predicted_gain(rows: pd.DataFrame) -> float:
    """Mean over seeds of log(σ_min²/σ_max²(Z⁰) with residual / without), single layer."""
    single = rows[rows["n_layers"] == 1]
    with_res = single[single["beta"] == 1.0].set_index("seed")["rate_ratio_Z0"]
    without = single[single["beta"] == 0.0].set_index("seed")["rate_ratio_Z0"]
    seeds = sorted(set(with_res.dropna().index) & set(without.dropna().index))
    if not seeds:
        return math.nan
    with np.errstate(divide="ignore"):
        ratio = np.log(with_res[seeds].to_numpy()) - np.log(without[seeds].to_numpy())
    ratio = ratio[np.isfinite(ratio)]
    return float(ratio.mean()) if ratio.size else math.nan


def tally(cells: pd.DataFrame, horizon: int) -> pd.DataFrame:
    """Claim × data set × protocol → number of cells that hold / fail / are undecided, and K."""
    at = cells[cells["horizon"] == horizon]
    counts = at.groupby(["claim", "dataset", "protocol"])["verdict"].value_counts().unstack(fill_value=0)
    counts = counts.reindex(columns=list(VERDICTS), fill_value=0)
    counts["K"] = counts.sum(axis=1)
    return counts.reset_index()


def theory_link(cells: pd.DataFrame, horizon: int) -> pd.DataFrame:
    """Per data set × protocol (and pooled): Spearman across cells between the predicted gain
    and claim (a)'s measured effect at ``horizon``."""
    at = cells[(cells["horizon"] == horizon) & (cells["claim"] == "residual_helps")]
    rows = []
    groups = list(at.groupby(["dataset", "protocol"])) + [(("all", p), g) for p, g in at.groupby("protocol")]
    for (dataset, protocol), g in groups:
        rows.append(dict(dataset=dataset, protocol=protocol, cells=len(g),
                         spearman=float(spearman(g["predicted_gain"], g["effect"]))))
    return pd.DataFrame(rows)


def agreement(quick: pd.DataFrame, full: pd.DataFrame) -> pd.DataFrame:
    """Cells decided by both maps (at each map's last horizon), with ``agree``; the ``best``
    protocol is left out (it picks from each grid's own fractions, so its cells differ)."""
    keys = TAGS + ["claim"]
    quick, full = quick[quick["protocol"] != BEST], full[full["protocol"] != BEST]  # best-of differs by grid
    q = quick[quick["horizon"] == quick["horizon"].max()][keys + ["verdict", "effect"]]
    f = full[full["horizon"] == full["horizon"].max()][keys + ["verdict", "effect"]]
    both = q.merge(f, on=keys, suffixes=("_quick", "_full"))
    decided = both[(both["verdict_quick"] != "undecided") & (both["verdict_full"] != "undecided")]
    return decided.assign(agree=decided["verdict_quick"] == decided["verdict_full"])
