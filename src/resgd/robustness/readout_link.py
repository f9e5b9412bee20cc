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
The closed form lives in :mod:`resgd.experiments.readout_closed_form` (the experiment pages use it too).
Its correlation with the measured Φ(T)/Φ(0) is over every single-layer run of the map (hundreds
of distinct configurations: β × Q/K scale × step × N × seed × protocol), and
:func:`critical_spearman` states the smallest |ρ| that is significant at that count.
"""

from __future__ import annotations

import pandas as pd

from ..experiments.readout_closed_form import critical_spearman, link_summary, readout_relative_loss  # noqa: F401 - the maths, shared with the pages
from ..words import count_noun
from .grid import MapGrid
from .limits import point_config


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


def readout_link(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per data set × protocol (and all protocols): Spearman(predicted, measured) of log Φ(T)/Φ(0)
    over the runs, their count (distinct runs) and the |ρ| needed for significance."""
    groups = list(predictions.groupby(["dataset", "protocol"])) + [
        ((d, "all"), g.drop_duplicates(["qk_scale", "N", "beta", "init", "seed", "lr"]))
        for d, g in predictions.groupby("dataset")]
    rows = [{"dataset": dataset, "protocol": protocol, **link_summary(g)} for (dataset, protocol), g in groups]
    return pd.DataFrame(rows, columns=["dataset", "protocol", "runs", "spearman", "critical"])


def link_sentence(row) -> str:
    """One row of :func:`link_summary` in words, saying whether the correlation is significant at 5 %
    and of the predicted sign (a larger predicted Φ(T)/Φ(0) with a larger measured one: ρ > 0); a
    correlation that is neither is never called a prediction."""
    rho, crit = float(row["spearman"]), float(row["critical"])
    head = f"Spearman ρ = {rho:.2f} over {count_noun(int(row['runs']), 'run')}"
    if abs(rho) < crit:
        return f"{head}: not significant (|ρ| < {crit:.2f} at 5 %), so it predicts nothing there"
    if rho < 0:
        return f"{head}: significant, but of the opposite sign to a prediction"
    return f"{head}: significant (beyond {crit:.2f}), in the predicted direction"
