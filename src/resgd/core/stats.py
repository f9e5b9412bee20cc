"""Statistics the studies share: the measured convergence rate, Spearman's rank correlation and a
distribution-free interval for a median (the robustness map's verdicts).

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


def order_statistic_coverage(n: int, k: int) -> float:
    """Exact coverage of ``[x_(k), x_(n+1−k)]`` for the median of ``n`` i.i.d. continuous draws.

    The interval misses the median only when fewer than ``k`` draws fall on one side of it:
    coverage ``1 − 2·P(Bin(n, ½) ≤ k − 1)`` (the inverted sign test; at least this with ties).
    """
    if not (isinstance(n, int) and isinstance(k, int)) or n < 1 or not 1 <= k <= (n + 1) // 2:
        raise ValueError(f"order_statistic_coverage: expected integers n >= 1 and 1 <= k <= (n+1)//2, got n={n!r}, k={k!r}")
    tail = sum(math.comb(n, j) for j in range(k)) / 2.0**n
    return 1.0 - 2.0 * tail


def median_interval(values, min_coverage: float = 0.9) -> tuple[float, float, float]:
    """Distribution-free interval for the median of ``values``: ``(lo, hi, coverage)``.

    Why this one: the map has 8–12 seeds per cell, heavy tails and ±∞ (diverged) values, where a
    t or percentile-bootstrap interval's level is unknown. The order-statistic interval
    ``[x_(k), x_(n+1−k)]`` with the largest ``k`` whose exact coverage
    (:func:`order_statistic_coverage`) is ``>= min_coverage`` has a known level for any
    continuous distribution (8 values: k = 2, 93.0 %; 12 values: k = 3, 96.1 %). NaN values are
    dropped; ±∞ are kept (they sort). ``(nan, nan, nan)`` when no ``k`` reaches ``min_coverage``.
    """
    if not 0 < min_coverage < 1:
        raise ValueError(f"median_interval: min_coverage must lie in (0, 1), got {min_coverage!r}")
    x = np.sort(np.asarray(values, dtype=float).ravel())
    x = x[~np.isnan(x)]
    n = int(x.size)
    k = interval_k(n, min_coverage)
    if k is None:
        return math.nan, math.nan, math.nan
    return float(x[k - 1]), float(x[n - k]), float(order_statistic_coverage(n, k))


def interval_level(n: int, min_coverage: float = 0.9) -> float:
    """The exact level of :func:`median_interval`'s interval for ``n`` values: a property of the design
    (how many seeds an arm trains), known before any run; NaN when no ``k`` reaches ``min_coverage``."""
    k = interval_k(n, min_coverage)
    return order_statistic_coverage(n, k) if k is not None else math.nan


def interval_min_n(min_coverage: float = 0.9) -> int:
    """The fewest values for which :func:`median_interval` has an interval at ``min_coverage``."""
    n = 1
    while interval_k(n, min_coverage) is None:
        n += 1
    return n


def interval_k(n: int, min_coverage: float = 0.9) -> int | None:
    """The ``k`` of :func:`median_interval` for ``n`` values (None when no ``k`` reaches
    ``min_coverage``): its interval lies above 0 exactly when at least ``n + 1 − k`` values do."""
    best = None
    for k in range(1, (n + 1) // 2 + 1):
        if order_statistic_coverage(n, k) < min_coverage:
            break
        best = k
    return best
