"""The pre-registered decision rules as functions (:mod:`resgd.experiments.design` states them):
the exact sign test, Holm's correction, the interval for the median of a per-seed statistic, and
the exact chance of Spearman's bound.

Why a module of its own: the claims (:mod:`resgd.experiments.claims`) and the null simulation of
every rule's false-decision rate (:mod:`resgd.experiments.null_rates`) must decide by the same code.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..core.stats import interval_level, interval_min_n, median_interval, spearman
from .design import ALPHA, MIN_COVERAGE, MIN_INTERVAL_SEEDS, SPEARMAN_BOUND


def binomial_tail(n: int, k: int) -> float:
    """P(Bin(n, ½) ≥ k): the exact one-sided sign-test p-value of k agreeing signs among n."""
    return sum(math.comb(n, j) for j in range(max(k, 0), n + 1)) / 2.0**n if n else 1.0


def sign_threshold(n: int, alpha: float = ALPHA) -> int | None:
    """The smallest k with P(Bin(n, ½) ≥ k) ≤ ``alpha``; None when even n of n is too likely by chance."""
    return next((k for k in range(n + 1) if n and binomial_tail(n, k) <= alpha), None)


def sign_test(d) -> dict[str, Any]:
    """The exact sign test on per-seed differences ``d`` at :data:`ALPHA` per direction: ``holds`` when
    the count of d > 0 has one-sided p ≤ ALPHA, ``fails`` when the count of d < 0 has, else
    ``undecided``. NaN values are dropped; zeros count on neither side. ``chance``: the exact
    probability of a decided outcome under no effect (0 when n is too small to decide)."""
    d = np.asarray(d, dtype=float).ravel()
    excluded = int(np.isnan(d).sum())
    d = d[~np.isnan(d)]
    n, up, down = int(d.size), int(np.sum(d > 0)), int(np.sum(d < 0))
    p_up, p_down = binomial_tail(n, up), binomial_tail(n, down)
    outcome = "holds" if n and p_up <= ALPHA else ("fails" if n and p_down <= ALPHA else "undecided")
    k = sign_threshold(n)
    return {"outcome": outcome, "rule": "sign", "seeds": n, "excluded": excluded, "left": n, "positive": up, "negative": down,
            "p_up": p_up, "p_down": p_down, "threshold": k,
            "chance": 2.0 * binomial_tail(n, k) if k is not None else 0.0,
            "median": float(np.median(d)) if n else math.nan, "values": [float(x) for x in d]}


def median_or_nan(values: np.ndarray) -> float:
    """The median of the values that are not NaN (a run that dropped out); NaN when none is left."""
    kept = values[~np.isnan(values)]
    return float(np.median(kept)) if kept.size else math.nan


def paired(faster: pd.Series, slower: pd.Series) -> dict[str, Any]:
    """The sign rule on d = faster − slower per common seed (:func:`sign_test`), with the medians."""
    common = faster.index.intersection(slower.index)
    with np.errstate(invalid="ignore"):
        d = faster[common].to_numpy(dtype=float) - slower[common].to_numpy(dtype=float)
    r = sign_test(d)
    n = int(len(d))
    return {**r, "seeds": n, "faster_in": r["positive"], "slower_in": r["negative"],
            "median_rate_with": median_or_nan(faster[common].to_numpy(dtype=float)),
            "median_rate_without": median_or_nan(slower[common].to_numpy(dtype=float)),
            "differences": [float(x) for x in d]}


def holm(p_values: dict[str, float], alpha: float = ALPHA) -> dict[str, bool]:
    """Holm's step-down correction: which hypotheses are rejected, the family-wise error at most ``alpha``."""
    order = sorted(p_values, key=p_values.get)
    rejected, m = {}, len(order)
    going = True
    for i, name in enumerate(order):
        going = going and p_values[name] <= alpha / (m - i)
        rejected[name] = going
    return rejected


def interval_rule(values, what: str) -> dict[str, Any]:
    """The interval rule of the design's 8-seed arms: the exact interval for the median of the
    per-seed ``values`` (:func:`resgd.core.stats.median_interval` at :data:`MIN_COVERAGE`);
    ``holds`` when it lies above 0, ``fails`` below, ``undecided`` otherwise. ``chance``: the
    probability of a decided outcome under no effect, at most 1 − level. ``what`` names the
    comparison in the one-line error raised for fewer than :data:`MIN_INTERVAL_SEEDS` seeds."""
    x = np.asarray(values, dtype=float).ravel()
    if x.size < MIN_INTERVAL_SEEDS:
        raise ValueError(f"claims: {what} uses the interval rule, which needs >= {MIN_INTERVAL_SEEDS} seeds "
                         f"(design.MIN_INTERVAL_SEEDS), got {x.size}; train Settings.interval_seeds")
    lo, hi, level = median_interval(x, MIN_COVERAGE)
    outcome = "undecided" if math.isnan(lo) else ("holds" if lo > 0 else "fails" if hi < 0 else "undecided")
    kept = x[~np.isnan(x)]
    return {"outcome": outcome, "rule": "interval", "seeds": int(x.size), "excluded": int(np.isnan(x).sum()), "left": int(kept.size),
            "lo": lo, "hi": hi, "level": level, "design_level": interval_level(int(x.size), MIN_COVERAGE),
            "need": interval_min_n(MIN_COVERAGE),
            "chance": 1.0 - level if not math.isnan(level) else math.nan,
            "median": median_or_nan(x),
            "positive": int(np.sum(kept > 0)), "negative": int(np.sum(kept < 0)), "values": [float(v) for v in x]}


def spearman_chance(n_values: int, bound: float = SPEARMAN_BOUND) -> float:
    """Probability that |Spearman ρ| ≥ ``bound`` between ``n_values`` distinct points and a random
    order (no effect): exact, by enumerating the n! orders (n ≤ 8)."""
    from itertools import permutations

    if not 2 <= n_values <= 8:
        raise ValueError(f"spearman_chance: expected 2 <= n_values <= 8, got {n_values!r}")
    x = np.arange(n_values, dtype=float)
    hits = [abs(spearman(x, np.array(p, dtype=float))) >= bound - 1e-12 for p in permutations(range(n_values))]
    return float(np.mean(hits))
