"""The pre-registered decision rules as functions (:mod:`resgd.experiments.design` states them): the
sign test, Holm's correction, the median interval, and design v6's time-to-target ladder with its rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..core.stats import interval_level, interval_min_n, median_interval, spearman
from .design import ALPHA, LADDER, MIN_COVERAGE, MIN_INTERVAL_SEEDS, SPEARMAN_BOUND
from .steps import rise_mask

# ---------------------------------------------------------------------------------------- the rules
# The pre-registered decision rules as functions (:mod:`resgd.experiments.design` states them):
# the exact sign test, Holm's correction, the interval for the median of a per-seed statistic, and
# the exact chance of Spearman's bound.

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



# ------------------------------------------------------------------------ the time-to-target ladder
# Design v6's speed: the iterations each run needs to reach a ladder of loss targets, and the
# paired "who gets there first" rules that decide the claims on it (:mod:`resgd.experiments.design`
# states them; this module applies them, and simulates their false-decision rate as run).
#
# Why this measure: "converges faster" is a speed, and a whole-run rate ranks loss floors as much as
# speeds and can change its verdict with the horizon. The time to a target does not: once one run of a
# pair has reached a target, the pair's order at that target is fixed, whatever the horizon; a pair in
# which neither run reached it by the cap is *censored* and decides nothing.
#
# The target of rung q for a run is Φ* + q (Φ₀ − Φ*), with Φ₀ the run's initial loss and Φ* the
# comparison's floor: 0 where the data are realisable (the theorem's question), else the lowest loss
# any run of the comparison reached by the cap (shown on the pages).

LADDER_VERDICTS = ("holds", "fails", "target-dependent", "undecided", "could not be tested")
"""A claim over the ladder: all testable rungs agree (holds/fails), they differ, none decides, or no
rung had enough decided pairs for the sign rule to be able to decide."""


def rung_name(q: float) -> str:
    """"1/2", "1/4", "1/10", "1/100" (else the number)."""
    inverse = 1.0 / q
    return f"1/{round(inverse):d}" if abs(inverse - round(inverse)) < 1e-9 else f"{q:g}"


def times_to_targets(loss: np.ndarray, floor: float, ladder: Sequence[float] = LADDER) -> np.ndarray:
    """For each q of ``ladder``, the first iteration t with Φ(t) ≤ floor + q (Φ(0) − floor); +∞ when the
    run never got there (censored at its last iteration; a diverged run's non-finite losses never count)."""
    loss = np.asarray(loss, dtype=float)
    out = np.full(len(ladder), math.inf)
    if loss.size == 0 or not math.isfinite(loss[0]):
        return out
    for i, q in enumerate(ladder):
        with np.errstate(invalid="ignore"):
            hits = np.flatnonzero(loss <= floor + q * (loss[0] - floor))
        if hits.size:
            out[i] = float(hits[0])
    return out


def first_to_reach(a: float, b: float) -> float:
    """+1 when a run with time ``a`` reaches the target before one with time ``b``, −1 when after,
    0 at the same iteration, NaN when neither reached it (a censored pair)."""
    if math.isinf(a) and math.isinf(b):
        return math.nan
    return float(np.sign(b - a)) if not (math.isinf(a) or math.isinf(b)) else (1.0 if math.isinf(b) else -1.0)


def rises(loss: np.ndarray) -> int:
    """How many GD steps raised Φ (:func:`resgd.experiments.steps.rise_mask`): each shows that
    step above the descent threshold 2/L on its segment (the descent lemma)."""
    return int(rise_mask(loss).sum())


def ladder_table(runs: pd.DataFrame, keys: Sequence[str], comparison: Sequence[str], *, realisable: bool,
                 ladder: Sequence[float] = LADDER) -> pd.DataFrame:
    """One row per run (``keys``): its times to every rung (``t_1/2`` …, +∞ censored), the floor Φ* of
    its comparison (the runs sharing ``comparison``; 0 when ``realisable``), its cap, its rises."""
    runs = runs.sort_values([*keys, "iteration"])
    groups = list(runs.groupby(list(keys), sort=False))
    lowest = {}
    for k, h in groups:
        comp = tuple(h.iloc[0][c] for c in comparison)
        finite = h["loss"].to_numpy(dtype=float)
        finite = finite[np.isfinite(finite)]
        lowest[comp] = min(lowest.get(comp, math.inf), float(finite.min()) if finite.size else math.inf)
    rows = []
    for k, h in groups:
        first = h.iloc[0]
        comp = tuple(first[c] for c in comparison)
        floor = 0.0 if realisable else lowest[comp]
        loss = h["loss"].to_numpy(dtype=float)
        times = times_to_targets(loss, floor, ladder)
        rows.append({**dict(zip(keys, k if isinstance(k, tuple) else (k,))), "floor": floor,
                     "cap": int(h["iteration"].iloc[-1]), "diverged": bool(first["diverged"]), "rises": rises(loss),
                     "loss_0": float(loss[0]), "loss_cap": float(loss[-1]),
                     **{f"t_{rung_name(q)}": t for q, t in zip(ladder, times)}})
    return pd.DataFrame(rows)


def rung_test(signs: np.ndarray) -> dict[str, Any]:
    """The sign rule on one rung's per-seed signs (+1 the paper's direction, −1 against, 0 tie, NaN
    censored): :func:`resgd.experiments.decisions.sign_test` over the decided seeds, censored ones left
    out; ``testable``: enough decided seeds that the rule could decide at all."""
    signs = np.asarray(signs, dtype=float)
    r = sign_test(signs)
    return {"outcome": r["outcome"], "decided": r["seeds"], "censored": r["excluded"], "for": r["positive"],
            "against": r["negative"], "ties": r["seeds"] - r["positive"] - r["negative"], "p_for": r["p_up"],
            "p_against": r["p_down"], "threshold": r["threshold"], "testable": sign_threshold(r["seeds"]) is not None}


def ladder_outcome(rungs: Sequence[dict[str, Any]]) -> str:
    """The claim over the ladder (:data:`LADDER_VERDICTS`), read on the testable rungs only."""
    testable = [r["outcome"] for r in rungs if r["testable"]]
    if not testable:
        return "could not be tested"
    if all(o == testable[0] for o in testable) and testable[0] in ("holds", "fails"):
        return testable[0]
    return "target-dependent" if any(o in ("holds", "fails") for o in testable) else "undecided"


def pair_signs(times_with: np.ndarray, times_without: np.ndarray) -> np.ndarray:
    """Per seed and rung (arrays seeds × rungs), :func:`first_to_reach` of the first arm against the second."""
    return np.vectorize(first_to_reach, otypes=[float])(times_with, times_without)


def beta_signs(times: np.ndarray, betas: np.ndarray) -> np.ndarray:
    """Claim (b)'s per-seed statistic at each rung: the sign of Spearman(β, −t) over the β of one seed
    (times: seeds × β × rungs; a censored run ranks last, ties share ranks); NaN when every β of the seed
    is censored or all times are equal."""
    seeds, _, n_rungs = times.shape
    out = np.full((seeds, n_rungs), math.nan)
    for s in range(seeds):
        for j in range(n_rungs):
            t = times[s, :, j]
            if np.isinf(t).all():
                continue
            rho = spearman(betas, -np.where(np.isinf(t), 1e300, t))
            out[s, j] = np.sign(rho) if math.isfinite(rho) else math.nan
    return out


def depth_signs(signs_by_depth: np.ndarray) -> np.ndarray:
    """Claim (c)'s per-seed statistic at each rung (signs: seeds × depths × rungs): the majority sign
    over the depths whose pair decided (0 on a tie, NaN when no depth decided). One value per seed: a
    seed's depths share its data and first layers' initial weights, so they are not independent."""
    total = np.nansum(signs_by_depth, axis=1)
    none = np.isnan(signs_by_depth).all(axis=1)
    return np.where(none, math.nan, np.sign(total))


def decide(signs: np.ndarray, ladder: Sequence[float] = LADDER) -> dict[str, Any]:
    """A claim on the ladder from its per-seed signs (seeds × rungs): each rung by :func:`rung_test`,
    the claim by :func:`ladder_outcome`."""
    rungs = [{"rung": rung_name(q), **rung_test(signs[:, j])} for j, q in enumerate(ladder)]
    return {"outcome": ladder_outcome(rungs), "rungs": rungs, "seeds": int(signs.shape[0])}


def simulate_rule(claim: str, *, effect: float = 1.0, seeds: int = 12, reps: int = 2000, cap: int = 2000,
                  n_arms: int | None = None, realisable: bool = False, rng_seed: int = 0,
                  ladder: Sequence[float] = LADDER) -> dict[str, float]:
    """How often the ladder rule decides claim ``claim`` ("a", "b" or "c"), simulated through the
    pipeline as run: every run's curve Φ(t) = f + (1 − f) e^{−rt} with a per-seed shared log-rate (the
    runs of one seed share data and first weights; the median run reaches q = ½ at a quarter of the
    cap, q = 1/100 after it), its own log-rate noise and floor f, sampled at integer t up to ``cap``;
    the comparison's floor Φ* estimated as the pipeline estimates it (0 when ``realisable``); censoring at the cap; no run excluded. ``effect`` = 1: the arms do not differ (the
    false-decision rate); > 1: the paper's arm converges ``effect`` times faster ((b): β = 1 that much
    faster than β = 0, geometric in between), so "holds" is the rule's power. Returns the rates of
    "holds" and "fails"."""
    rng = np.random.default_rng(rng_seed)
    arms = {"a": 2, "b": 5, "c": 6}[claim] if n_arms is None else n_arms
    t = np.arange(cap + 1, dtype=float)
    if claim == "a":
        speedup = np.array([effect, 1.0])
    elif claim == "b":
        speedup = effect ** np.linspace(0.0, 1.0, arms)
    else:
        speedup = np.tile([effect, 1.0], arms // 2)
    # the arms that share a floor Φ*: (c)'s depths each their own comparison, else all arms one
    comparisons = [[2 * d, 2 * d + 1] for d in range(arms // 2)] if claim == "c" else [list(range(arms))]
    counts = {"holds": 0, "fails": 0}
    for _ in range(reps):
        shared = rng.normal(math.log(4 * math.log(2) / cap), 0.7, size=(seeds, 1))  # median: q = 1/2 at cap/4
        rate = np.exp(shared + rng.normal(0.0, 0.5, size=(seeds, arms))) * speedup
        floor = np.zeros((seeds, arms)) if realisable else rng.uniform(0.0, 0.3, size=(seeds, arms))
        curves = floor[..., None] + (1 - floor)[..., None] * np.exp(-rate[..., None] * t)
        floors = {a: 0.0 if realisable else curves[:, group].min() for group in comparisons for a in group}
        times = np.stack([np.stack([times_to_targets(curves[s, a], floors[a], ladder) for a in range(arms)])
                          for s in range(seeds)])  # seeds × arms × rungs
        if claim == "a":
            signs = pair_signs(times[:, 0], times[:, 1])
        elif claim == "b":
            signs = beta_signs(times, np.linspace(0.0, 1.0, arms))
        else:
            signs = depth_signs(np.stack([pair_signs(times[:, 2 * d], times[:, 2 * d + 1]) for d in range(arms // 2)],
                                         axis=1))
        outcome = decide(signs, ladder)["outcome"]
        if outcome in counts:
            counts[outcome] += 1
    return {k: v / reps for k, v in counts.items()} | {"reps": reps, "alpha": ALPHA}
