"""The theorem's step kept in its regime along the whole path (design v6's theorem question).

Theorem 1 needs μ ≤ 1/L with L the smoothness of Φ on the region the iterates visit. A constant
μ = c / L̂(θ⁰) meets it only near t = 0: along real runs L̂(θ_t) grows several-fold (progressive
sharpening) until μ·L̂ ≈ 2, the edge of stability, where the theorem says nothing. The rule here keeps
the hypothesis where it is checked, and drops no run:

* every :data:`PATH_EVERY` iterations (a checkpoint) L̂(θ_t) is estimated
  again (:func:`resgd.core.smoothness.smoothness_fast`, as at θ⁰) and μ set to c / L̂(θ_t);
* a segment in which Φ rose at any step is retrained from its checkpoint with μ halved (at most
  :data:`PATH_HALVINGS` times), so Φ never rises on the accepted path;
* L̂ is also taken at θ_T, so μ·L̂ is known at both ends of every segment (the pages show the maxima).

Why faithful: the theorem's per-step contraction Φ(t+1) ≤ (1 − μα) Φ(t) is a statement about one
step at a step size below 1/L on that step's segment; a step size that follows L̂(θ_t) keeps every
step inside that hypothesis as far as L̂ measures it, where a constant step leaves it. The contraction
then reads with μ_t in place of μ, so the per-iteration rate and the rate per unit of step (−log Φ(T)/Φ₀
over Σμ_t) are both shown.

In the results store a path-step run is an entry of kind :data:`PATH_KIND` whose configuration's
``gd.lr`` holds the factor c (its steps are chosen by the rule above).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from ..core.model import init_params
from ..core.smoothness import smoothness_fast
from ..core.trainer import loss_ratios, train_runs
from ..data.spec import DTYPES, load_dataset
from .run_config import RunConfig, entry_key

PATH_EVERY = 100
"""Iterations between the path step's checkpoints (L̂ re-estimated, μ re-set). Pre-registered with
design v6 (:mod:`resgd.experiments.design`); here because the runs' numbers depend on it."""
PATH_HALVINGS = 12
"""A segment whose loss rose anywhere is retrained from its start with μ halved, at most this often."""
REGIME_TOL = 1e-9
"""A step raised Φ when Φ(t+1) > (1 + REGIME_TOL) Φ(t): above float64 rounding of a loss near its floor."""


def rise_mask(loss: np.ndarray) -> np.ndarray:
    """Per GD step t → t+1, whether it raised Φ: Φ(t+1) > (1 + :data:`REGIME_TOL`) Φ(t), a non-finite
    Φ(t+1) counting. Each such step was above the descent threshold 2/L on its segment (the descent
    lemma). The one test of a rise: the path step, the ladder's count and v5's regime rule use it."""
    loss = np.asarray(loss, dtype=float)
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(loss[1:]) | (loss[1:] > (1.0 + REGIME_TOL) * loss[:-1])

PATH_KIND = f"run/path-step/every={PATH_EVERY}"
"""The results-store kind of a run under the path step (its ``gd.lr`` is the factor c)."""


def train_path(config: RunConfig, data) -> tuple[pd.DataFrame, dict]:
    """One run under the path step from its initial weights: its history (the trainer's columns plus
    ``step``, the μ of the step from t, ``L_hat`` at every checkpoint and at T, NaN elsewhere,
    ``halvings`` at every checkpoint) and its final weights."""
    c, T, gd = float(config.gd.lr), int(config.gd.iterations), config.gd
    dtype = DTYPES[config.dtype]
    params = init_params(config.model, config.seed, dtype=dtype)
    X, Y, mask = data.X_train, data.Y_train, data.mask_train
    parts, t = [], 0

    def lhat(p) -> float:
        return smoothness_fast(p, config.model, X, Y, mask, reduction=gd.reduction)

    while t < T:
        L = lhat(params)
        mu, seg = c / L, min(PATH_EVERY, T - t)
        for halvings in range(PATH_HALVINGS + 1):
            step_gd = replace(gd, lr=mu, iterations=seg, record_every=min(gd.record_every, seg))
            out = train_runs([params], [config.model], X, Y, [step_gd], mask=mask)[0]
            if not (out.diverged or rise_mask(out.history["loss"].to_numpy(dtype=float)).any()):
                break
            mu /= 2.0
        else:
            raise RuntimeError(f"path step: Φ still rose after {PATH_HALVINGS} halvings at t = {t} ({config.dataset.name})")
        h = out.history.copy()
        h["iteration"] = h["iteration"] + t
        h["step"] = mu
        h["L_hat"] = math.nan
        h["halvings"] = math.nan
        h.loc[h.index[0], ["L_hat", "halvings"]] = [L, float(halvings)]
        if parts:  # the checkpoint's row ends the previous segment: it takes this segment's checkpoint values
            last = parts[-1].index[-1]
            parts[-1].loc[last, ["step", "L_hat", "halvings"]] = [mu, L, float(halvings)]
            h = h.iloc[1:]
        parts.append(h)
        params, t = out.params, t + seg
    history = pd.concat(parts, ignore_index=True)
    history.loc[history.index[-1], "L_hat"] = lhat(params)
    history.loc[history.index[-1], "step"] = math.nan
    history["ratio"] = loss_ratios(history["loss"].to_numpy(dtype=float))
    return history, params


def _compute_path(config: RunConfig) -> pd.DataFrame:
    """One path-step run's tidy table (as :func:`resgd.experiments.runs._frame` builds a run's)."""
    from .metrics import _metrics
    from .runs import _frame

    data = load_dataset(config.dataset, config.dtype)
    history, final = train_path(config, data)
    return _frame(config, data, history, False, _metrics(config, data, final))


def path_stack(configs: tuple[RunConfig, ...]) -> list[pd.DataFrame]:
    """The sweep's and the store's task for path-step runs: each computed alone, in order."""
    return [_compute_path(c) for c in configs]


def path_key(config: RunConfig) -> str:
    """A path-step run's cache and store key."""
    return entry_key(config, PATH_KIND)


def path_table(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per path-step run: the largest μ·L̂ at a checkpoint (≤ c by the rule) and at the end of a segment
    (the drift within it), the halvings, the steps' sum, and the measured against the predicted rate:
    −log(Φ(T)/Φ₀)/T beside σ_min²(Z⁰)/σ_max²(Z⁰), the quantity Theorem 1's rate is governed by."""
    rows = []
    for k, h in runs.sort_values([*keys, "iteration"]).groupby(keys, sort=False):
        steps = h["step"].to_numpy(dtype=float)
        lhat = h["L_hat"].to_numpy(dtype=float)
        at = np.flatnonzero(np.isfinite(lhat))
        start = [steps[i] * lhat[i] for i in at if np.isfinite(steps[i])]
        end = [steps[j - 1] * lhat[j] for j in at[1:]]
        loss = h["loss"].to_numpy(dtype=float)
        T = len(loss) - 1
        sigma = h.dropna(subset=["sigma_min_Z"])
        smin, smax = float(sigma["sigma_min_Z"].iloc[0]), float(sigma["sigma_max_Z"].iloc[0])
        ratio = loss[-1] / loss[0]
        rows.append({**dict(zip(keys, k)), "max_muL_checkpoint": max(start), "max_muL_segment_end": max(end),
                     "halvings": int(np.nansum(h["halvings"].to_numpy(dtype=float))),
                     "step_sum": float(np.nansum(steps)), "loss_ratio_T": ratio,
                     "rate": -math.log(ratio) / T if ratio > 0 else math.inf,
                     "rate_per_step": -math.log(ratio) / float(np.nansum(steps)) if ratio > 0 else math.inf,
                     "predicted": (smin / smax) ** 2 if smax > 0 else 0.0})
    return pd.DataFrame(rows)
