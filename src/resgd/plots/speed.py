"""Figures of design v6 (:mod:`resgd.experiments.study`): who reaches each target first, and the
theorem's step along the path. Censored runs are drawn as such (open markers beyond the cap), never
at a value they did not reach."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..claim_registry import DEPTH_RESIDUAL_HELPS, RESIDUAL_HELPS
from ..dataset_registry import title as dataset_title
from .style import beta_styles, point_style, use_style


def _pairs(ladder: pd.DataFrame, protocol: str) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """(title, runs with, runs without) of every residual-or-not comparison under ``protocol``."""
    rows = ladder[ladder["protocol"] == protocol]
    out = []
    one = rows[(rows["experiment"] == "beta") & (rows["n_layers"] == 1)]
    if len(one):
        out.append((f"{RESIDUAL_HELPS.label} L = 1", one[one["beta"] == 1.0], one[one["beta"] == 0.0]))
    depth = rows[rows["experiment"] == "depth"]
    for L in sorted(int(x) for x in depth["n_layers"].unique()):
        at = depth[depth["n_layers"] == L]
        out.append((f"{DEPTH_RESIDUAL_HELPS.label} L = {L}", at[at["beta"] == 1.0], at[at["beta"] == 0.0]))
    return out


def ladder_pairs(ladder: pd.DataFrame, protocol: str, dataset: str) -> plt.Figure:
    """Rows: the comparisons (a) and (c) per depth; columns: the rungs. Each seed is a point (x: the
    iterations without the residual, y: with it); below the diagonal the residual got there first.
    A run that never got there by its cap is drawn beyond the cap (open marker, grey band)."""
    use_style()
    pairs = _pairs(ladder, protocol)
    rungs = [c[2:] for c in ladder.columns if c.startswith("t_")]  # the ladder's q, as named in its columns
    height = 2.2 * len(pairs) + 1.2
    fig, axes = plt.subplots(len(pairs), len(rungs), figsize=(8.6, height), squeeze=False)
    for i, (title, with_res, without) in enumerate(pairs):
        seeds = sorted(set(with_res["seed"]) & set(without["seed"]))
        a, b = with_res.set_index("seed").loc[seeds], without.set_index("seed").loc[seeds]
        cap = float(max(a["cap"].max(), b["cap"].max()))
        beyond = cap * 1.15
        for j, q in enumerate(rungs):
            ax = axes[i, j]
            col = f"t_{q}"
            x, y = b[col].to_numpy(dtype=float), a[col].to_numpy(dtype=float)
            censored = np.isinf(x) | np.isinf(y)
            xs, ys = np.where(np.isinf(x), beyond, x), np.where(np.isinf(y), beyond, y)
            ax.axvspan(cap, beyond * 1.1, color="0.92", lw=0)
            ax.axhspan(cap, beyond * 1.1, color="0.92", lw=0)
            ax.plot([0.5, beyond * 1.1], [0.5, beyond * 1.1], color="0.5", lw=1, ls="--")
            ax.scatter(xs[~censored], ys[~censored], s=28, color="C0", label="both reached")
            ax.scatter(xs[censored], ys[censored], s=28, facecolors="none", edgecolors="C3",
                       label="censored (beyond the cap)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(0.8, beyond * 1.1)
            ax.set_ylim(0.8, beyond * 1.1)
            ax.set_title(f"{title}, q = {q}", fontsize=10)
            if j == 0:
                ax.set_ylabel("with residual")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=2, frameon=False, bbox_to_anchor=(0.5, 1 - 0.55 / height),
               fontsize=10)
    fig.suptitle(f"{dataset_title(dataset)}: who reaches each target first ({protocol})",
                 fontsize="medium", y=1 - 0.3 / height)
    fig.supxlabel("iterations to the target without the residual (y axes: with it)", fontsize=10,
                  y=0.45 / height)
    fig.tight_layout(rect=(0, 0.65 / height, 1, 1 - 0.85 / height))
    return fig


def path_check(path: pd.DataFrame, dataset: str) -> plt.Figure:
    """Left: per run, the largest μ·L̂ at a checkpoint and at a segment's end (the descent threshold 2
    drawn). Right: the measured rate −log(Φ(T)/Φ₀)/T against σ_min²/σ_max²(Z⁰), coloured by β."""
    use_style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.2, 4.6))  # 10 in: its exponents read 7.8 px in the book
    styles = beta_styles(path["beta"])
    for k, column in enumerate(("max_muL_checkpoint", "max_muL_segment_end")):
        for b, g in path.groupby("beta"):
            jitter = (np.arange(len(g)) - len(g) / 2) * 0.01
            left.scatter(k + jitter + 0.06 * (b - 0.5), g[column], s=18, **point_style(styles[float(b)]),
                         label=f"β = {b:g}" if k == 0 else None)
    left.axhline(2.0, color="C3", lw=1.2, ls="--", label="μ·L̂ = 2 (descent threshold)")
    left.set_xticks([0, 1], ["at a checkpoint", "at a segment's end"])
    left.set_ylabel("largest μ·L̂ on the path")
    top = max(2.3, 1.08 * float(path[["max_muL_checkpoint", "max_muL_segment_end"]].to_numpy().max()))
    left.set_ylim(0, top)
    left.set_xlim(-0.5, 1.5)
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize=9, ncol=3, frameon=False)
    for b, g in path.groupby("beta"):
        right.scatter(g["predicted"], g["rate"], s=18, **point_style(styles[float(b)]))
    right.set_xscale("log")
    right.set_xlabel("σ_min²(Z⁰) / σ_max²(Z⁰)")
    right.set_ylabel("measured rate −log(Φ(T)/Φ₀)/T")
    fig.suptitle(f"{dataset_title(dataset)}: the theorem's step kept along the path",
                 fontsize="medium", y=0.94)
    fig.tight_layout(rect=(0, 0.03, 1, 0.92))
    return fig
