"""The theory link through the matrix the read-out sees: the closed form of GD on the read-out
alone, with the features frozen at θ⁰ (H per token, or the pooled H̄), at a run's own μ and T.

Why: Theorem 1's rate is a property of the read-out's input (σ_min of Z, through H); the cheapest
prediction that uses exactly that matrix is GD on the output layer with everything else fixed,

    r_T = (I − μ/ν · F Fᵀ)^T r_0,   Φ_pred(T)/Φ(0) = ‖r_T‖² / ‖r_0‖²,

with F the read-out's input rows (H̄ for pooling, the real tokens of H otherwise), r_0 = F W_U⁰ − Y
and ν = N for the mean loss (1 for the sum). It ignores that GD also moves the attention and FFN
weights; how much of the measured behaviour it still orders is the result. Computed from the thin
SVD of F (its row count N·n is the pages' 3072 tokens; F Fᵀ would be that square). Used by the
experiment pages (:func:`page_predictions`, every run of a page) and by the robustness map
(:mod:`resgd.robustness.readout_link`, its single-layer runs).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from ..core.model import forward, init_params, pool
from ..core.stats import spearman
from ..data.spec import DTYPES, load_dataset


def readout_relative_loss(config, horizon: int) -> float:
    """Φ_pred(T)/Φ(0) of GD on the read-out alone (features frozen at θ⁰), at ``config``'s μ
    (``config``: a :class:`resgd.experiments.configuration.RunConfig`; ``horizon``: T)."""
    data = load_dataset(config.dataset, config.dtype)
    params = init_params(config.model, config.seed, dtype=DTYPES[config.dtype])
    with torch.no_grad():
        trace = forward(params, config.model, data.X_train, data.mask_train, return_trace=True)
        F = pool(trace.layers[-1].H, data.mask_train, config.model.pooling)
        residual = trace.Y_hat - data.Y_train
        if F.ndim == 3:  # per-token read-out: the real tokens are the rows
            keep = data.mask_train if data.mask_train is not None else torch.ones(F.shape[:2], dtype=torch.bool)
            F, residual = F[keep], residual[keep]
    F, residual = F.to(torch.float64), residual.to(torch.float64)
    nu = data.Y_train.shape[0] if config.gd.reduction == "mean" else 1
    U, S, _ = torch.linalg.svd(F, full_matrices=False)
    weights = (U.T @ residual).pow(2).sum(dim=1)  # ‖projection of r_0 on each left singular vector‖²
    total = float(residual.pow(2).sum())
    outside = max(total - float(weights.sum()), 0.0)  # the part of r_0 the read-out cannot reach: factor 1
    factors = (1.0 - config.gd.lr * S.pow(2) / nu) ** (2 * horizon)
    return (float((factors * weights).sum()) + outside) / total if total > 0 else math.nan


def critical_spearman(n: int, z: float = 1.96) -> float:
    """Smallest |ρ| significant at two-sided 5 % with ``n`` pairs (normal approximation z/√(n−1))."""
    return z / math.sqrt(n - 1) if n > 1 else math.nan


def detectable_spearman(n: int, z_alpha: float = 1.96, z_power: float = 0.8416) -> float:
    """The |ρ| that ``n`` pairs detect (two-sided 5 %) with 80 % power: Fisher's z with the
    Spearman variance 1.06/(n − 3) (Fieller, Hartley & Pearson 1957), tanh((z_α + z_β)·√(1.06/(n−3)))."""
    return math.tanh((z_alpha + z_power) * math.sqrt(1.06 / (n - 3))) if n > 3 else math.nan


def page_predictions(per_run: pd.DataFrame, s) -> pd.DataFrame:
    """Every distinct run of an experiment page (``per_run``: :func:`resgd.experiments.results.per_run_table`
    of the page's runs; ``s``: its :class:`resgd.experiments.configuration.Settings`) with ``predicted`` =
    Φ_pred(T)/Φ(0) at the run's μ and T beside the ``measured`` Φ(T)/Φ(0)."""
    keys = ["experiment", "protocol", "twin_init", "beta", "beta_ffn", "n_layers", "seed", "lr"]
    runs = per_run.drop_duplicates(["twin_init", "beta", "beta_ffn", "n_layers", "seed", "lr"])
    rows = []
    for _, run in runs.iterrows():
        sizes = s.depth() if run["experiment"] == "depth" else s
        beta, beta_ffn = float(run["beta"]), float(run["beta_ffn"])
        config = replace(sizes, twin_init=run["twin_init"]).config(
            beta, int(run["n_layers"]), int(run["seed"]), float(run["lr"]), beta_ffn=None if beta_ffn == beta else beta_ffn)
        rows.append({**run[keys], "predicted": readout_relative_loss(config, config.gd.iterations),
                     "measured": float(run["loss_ratio_T"])})
    return pd.DataFrame(rows, columns=keys + ["predicted", "measured"])


def link_summary(predictions: pd.DataFrame) -> dict[str, float]:
    """Spearman ρ of log predicted and log measured Φ(T)/Φ(0) over the runs where both are finite
    and > 0, their count, the |ρ| significant at 5 % (:func:`critical_spearman`) and the |ρ|
    detected with 80 % power (:func:`detectable_spearman`) at that count."""
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.log(predictions["predicted"].to_numpy(float))
        y = np.log(predictions["measured"].to_numpy(float))
    keep = np.isfinite(x) & np.isfinite(y)
    n = int(keep.sum())
    return {"runs": n, "spearman": spearman(x[keep], y[keep]) if n >= 3 else math.nan,
            "critical": critical_spearman(n), "detectable": detectable_spearman(n)}
