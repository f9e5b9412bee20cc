"""Two statistics the studies share: the measured convergence rate and Spearman's rank correlation.

Kept apart from every study so that the theory, the experiments and the claims use the same
definitions without importing one another.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def empirical_rate(history: pd.DataFrame, start: int | None = None, stop: int | None = None) -> float:
    """Minus the least-squares slope of ``log Φ`` against the iteration, over ``start <= iteration < stop``.

    Positive for a decaying loss (``Φ(t) ≈ C e^{-rate·t}``, so the per-step factor is ``exp(-rate)``);
    NaN when fewer than two finite, positive losses fall in the window.
    """
    it = np.asarray(history["iteration"], dtype=float)
    loss = np.asarray(history["loss"], dtype=float)
    keep = np.ones_like(it, dtype=bool)
    if start is not None:
        keep &= it >= start
    if stop is not None:
        keep &= it < stop
    with np.errstate(divide="ignore", invalid="ignore"):
        log_loss = np.log(loss)
    keep &= np.isfinite(log_loss) & np.isfinite(it)
    x, y = it[keep], log_loss[keep]
    if x.size < 2 or np.ptp(x) == 0:
        return math.nan
    xc = x - x.mean()
    slope = float((xc * (y - y.mean())).sum() / (xc * xc).sum())
    return -slope


def _average_ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size, dtype=float)
    sorted_values = values[order]
    i = 0
    while i < values.size:
        j = i
        while j + 1 < values.size and sorted_values[j + 1] == sorted_values[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(x, y) -> float:
    """Spearman rank correlation (Pearson correlation of average ranks; ties share their mean rank).

    Pairs with a non-finite member are dropped; NaN when fewer than 3 pairs remain or a side is constant.
    """
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"spearman: x and y differ in length ({x.size} vs {y.size})")
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size < 3:
        return math.nan
    rx, ry = _average_ranks(x), _average_ranks(y)
    rx -= rx.mean()
    ry -= ry.mean()
    denom = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / denom) if denom > 0 else math.nan
