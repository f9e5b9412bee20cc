"""The map's theory link through the matrix the read-out sees: H (per token) or the pooled H̄.

Why: the old link paired σ_min²/σ_max²(Z⁰) with the loss ratio at T across a handful of distinct
values per data set (no power), while the read-out of the model is fitted on H (β also weights
the FFN skip) and, on SST-2, on the mean-pooled H̄. Here each single-layer run gets a prediction
from the spectrum of that matrix at initialisation, at the run's own μ and horizon T: the closed
form of GD on the read-out alone with the features frozen,

    r_T = (I − μ/ν · F Fᵀ)^T r_0,   Φ_pred(T)/Φ(0) = ‖r_T‖² / ‖r_0‖²,

with F the read-out's input rows (H̄ for pooling, the real tokens of H otherwise), r_0 = F W_U⁰ − Y
and ν = N for the mean loss (1 for the sum). The prediction ignores that GD also moves the
attention and FFN weights; how much of the measured behaviour it still orders is the result.
Its correlation with the measured Φ(T)/Φ(0) is over every single-layer run of the map (hundreds
of distinct configurations: β × Q/K scale × step × N × seed × protocol), and
:func:`critical_spearman` states the smallest |ρ| that is significant at that count.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from ..core.model import forward, init_params, pool
from ..core.stats import spearman
from ..data.spec import DTYPES, load_dataset
from .grid import MapGrid
from .limits import point_config


def readout_relative_loss(config, horizon: int) -> float:
    """Φ_pred(T)/Φ(0) of GD on the read-out alone (features frozen at θ⁰), at ``config``'s μ."""
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
    eigenvalues, vectors = torch.linalg.eigh(F @ F.T)
    weights = (vectors.T @ residual).pow(2).sum(dim=1)  # ‖projection of r_0 on each eigenvector‖²
    factors = (1.0 - config.gd.lr * eigenvalues.clamp_min(0) / nu) ** (2 * horizon)
    total = float(weights.sum())
    return float((factors * weights).sum()) / total if total > 0 else math.nan


def readout_predictions(per_run: pd.DataFrame, grid: MapGrid) -> pd.DataFrame:
    """Every trained single-layer run with ``predicted`` = Φ_pred(T)/Φ(0) at the last horizon
    beside the ``measured`` Φ(T)/Φ(0)."""
    runs = per_run[(per_run["n_layers"] == 1) & per_run["trained"].astype(bool)]
    T = grid.iterations
    rows = []
    for _, run in runs.iterrows():
        s = grid.settings(run["dataset"], run["qk_scale"], int(run["N"]))
        config = point_config(s, float(run["beta"]), 1, run["init"], int(run["seed"]), float(run["lr"]))
        rows.append({**run[["dataset", "qk_scale", "fraction", "N", "protocol", "beta", "init", "seed", "lr"]],
                     "predicted": readout_relative_loss(config, T), "measured": float(run[f"relative_{T}"])})
    return pd.DataFrame(rows)


def critical_spearman(n: int, z: float = 1.96) -> float:
    """Smallest |ρ| significant at two-sided 5 % with ``n`` pairs (normal approximation z/√(n−1))."""
    return z / math.sqrt(n - 1) if n > 1 else math.nan


def readout_link(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per data set × protocol (and all protocols): Spearman(predicted, measured) of log Φ(T)/Φ(0)
    over the runs, their count (distinct runs) and the |ρ| needed for significance."""
    groups = list(predictions.groupby(["dataset", "protocol"])) + [
        ((d, "all"), g.drop_duplicates(["qk_scale", "N", "beta", "init", "seed", "lr"]))
        for d, g in predictions.groupby("dataset")]
    rows = []
    for (dataset, protocol), g in groups:
        with np.errstate(divide="ignore"):
            x, y = np.log(g["predicted"].to_numpy(float)), np.log(g["measured"].to_numpy(float))
        keep = np.isfinite(x) & np.isfinite(y)
        n = int(keep.sum())
        rows.append(dict(dataset=dataset, protocol=protocol, runs=n, spearman=spearman(x[keep], y[keep]),
                         critical=critical_spearman(n)))
    return pd.DataFrame(rows)
