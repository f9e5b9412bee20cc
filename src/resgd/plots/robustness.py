"""Phase diagrams of the robustness map: grid axes, colour = effect size, hatched = undecided."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import Normalize, TwoSlopeNorm
from matplotlib.patches import Rectangle

from ..claim_registry import BETA_MONOTONE, MAP_FORMS, RESIDUAL_HELPS
from .style import label_standin, legend_outside

CLAIM_ROWS = tuple(form.name for form in MAP_FORMS)
"""Rows in this order; (c) against the second twin only where the map has it."""
ROW_LABELS = {form.name: form.row_label for form in MAP_FORMS}
SHORT = {form.name: form.short for form in MAP_FORMS}
LETTER = {"holds": "✓", "fails": "✗", "undecided": "?"}


def _norm(claim: str, values: np.ndarray) -> Normalize:
    if claim == BETA_MONOTONE.name:
        return TwoSlopeNorm(vcenter=0.0, vmin=-1.0, vmax=1.0)
    finite = np.abs(values[np.isfinite(values)])
    top = float(min(max(finite.max(), 0.1), 3.0)) if finite.size else 1.0
    return TwoSlopeNorm(vcenter=0.0, vmin=-top, vmax=top)


XLABEL = {"common": "step / β = 1 model's stability limit", "theory": "c in μ = c / L̂(θ⁰)"}
"""The x axis of a protocol's panels: ``common`` scales every configuration's step by the residual
model's limit, the others by each configuration's own (see :data:`resgd.robustness.grid.PROTOCOLS`)."""


def plot_phase_diagram(cells: pd.DataFrame, grid, *, protocol: str, standin: str | None = None) -> plt.Figure:
    """One protocol's map at one horizon: rows = claims, columns = data set × N; in each panel
    x = the protocol's step axis (:meth:`MapGrid.steps`), y = Q/K init scale. Colour: the effect
    (positive = the paper's direction, clipped at ±3 for log ratios); hatched: undecided; ✓/✗/?
    the verdict; the star marks the headline experiments' (Q/K scale, fraction). ``standin``: the
    banner text when stand-in data are involved."""
    cells = cells[cells["protocol"] == protocol]
    if cells.empty:
        raise ValueError(f"plot_phase_diagram: no cells for protocol {protocol!r}")
    columns = [(d, n) for d in grid.datasets for n in grid.sizes]
    fractions, scales = list(grid.steps(protocol)), list(grid.qk_scales)
    claims = [c for c in CLAIM_ROWS if c in set(cells["claim"])]
    # 1.6 in per panel keeps the whole design (4 columns) under 9 in: every text at least 8 px in the
    # 660-px content column
    fig, axes = plt.subplots(len(claims), len(columns), figsize=(1.6 * len(columns) + 2.4, 2.4 * len(claims)),
                             squeeze=False, constrained_layout=True)
    cmap = plt.get_cmap("RdBu")
    horizon = int(cells["horizon"].iloc[0])
    for r, claim in enumerate(claims):
        rows = cells[cells["claim"] == claim]
        norm = _norm(claim, rows["effect"].to_numpy(dtype=float))
        for c, (dataset, N) in enumerate(columns):
            ax = axes[r, c]
            panel = rows[(rows["dataset"] == dataset) & (rows["N"] == N)].set_index(["qk_scale", "fraction"])
            for i, q in enumerate(scales):
                for j, f in enumerate(fractions):
                    if (q, f) not in panel.index:
                        continue
                    item = panel.loc[(q, f)]
                    effect = float(item["effect"])
                    colour = cmap(norm(np.clip(effect, norm.vmin, norm.vmax))) if math.isfinite(effect) else "lightgrey"
                    ax.add_patch(Rectangle((j, i), 1, 1, facecolor=colour, edgecolor="white", linewidth=1.5,
                                           hatch="///" if item["verdict"] == "undecided" else None))
                    dark = math.isfinite(effect) and abs(norm(np.clip(effect, norm.vmin, norm.vmax)) - 0.5) > 0.3
                    ax.text(j + 0.5, i + 0.5, f"{LETTER[item['verdict']]}\n{effect:+.2g}", ha="center",
                            va="center", fontsize=9, color="white" if dark else "black")
            hq, hf = grid.headline
            if protocol != "theory" and hq in scales and hf in fractions and N == max(grid.sizes):
                ax.plot(fractions.index(hf) + 0.92, scales.index(hq) + 0.88, marker="*", color="gold",
                        markeredgecolor="black", markersize=11, clip_on=False)
            ax.set_xlim(0, len(fractions))
            ax.set_ylim(0, len(scales))
            ax.set_xticks(np.arange(len(fractions)) + 0.5, [f"{f:g}" for f in fractions])
            ax.set_yticks(np.arange(len(scales)) + 0.5, [f"{q:g}" for q in scales])
            ax.grid(False)
            if r == 0:
                ax.set_title(f"{dataset}, N = {N}")
            if c == 0:
                ax.set_ylabel(f"{ROW_LABELS[claim]}\n\nQ/K init scale")
        # a short label: one per row, a long one ran into the next row's
        fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=axes[r, :].tolist(), shrink=0.85,
                     label=f"{SHORT[claim]} effect")
    fig.supxlabel(XLABEL.get(protocol, "step / own stability limit"))  # once: per panel they overlapped
    title = (f"Protocol '{protocol}', horizon T = {horizon}: ✓ holds, ✗ fails, ? undecided (hatched);\n"
             "colour: effect, > 0 as claimed")
    # under the banner when there is one: the layout keeps the banner's strip free (a blank first line
    # of the title did that before, but the title's box then ran into the banner's)
    if standin:  # banner strip 0.3 in, then the title's two lines (0.4 in): the panels start below both
        height = fig.get_figheight()
        fig.get_layout_engine().set(rect=(0, 0, 1, 1 - 0.75 / height))
        fig.suptitle(title, fontsize=10, y=1 - 0.3 / height)
    else:
        fig.suptitle(title, fontsize=10)
    label_standin(fig, standin)
    return fig


def plot_horizons(tally: pd.DataFrame, standin: str | None = None) -> plt.Figure:
    """Fraction of cells that hold / fail / are undecided, per claim × data set × protocol, at
    each horizon (``tally`` with a ``horizon`` column)."""
    palette = {"holds": "#2a9d8f", "fails": "#e76f51", "undecided": "#bbbbbb"}
    datasets, protocols = sorted(tally["dataset"].unique()), sorted(tally["protocol"].unique())
    bars = int(tally.groupby(["dataset", "protocol"]).size().max())
    # one row per data set: six panels in one row made the figure 20 in wide
    # 1.9 in per panel: the map's four protocols (its three and the best step) stay under 9 in wide, every
    # label 8 px or more in the book's column (2.6 in made it 11.6 in wide, its labels 7 px)
    fig, axes = plt.subplots(len(datasets), len(protocols), figsize=(1.9 * len(protocols) + 1.2, (0.2 * bars + 1.0) * len(datasets)),
                             sharex=True, sharey=True, squeeze=False, constrained_layout=True)
    for ax in axes.flat:
        ax.set_visible(False)
    for (dataset, protocol), g in tally.groupby(["dataset", "protocol"], sort=True):
        ax = axes[datasets.index(dataset), protocols.index(protocol)]
        ax.set_visible(True)
        g = g.assign(order=g["claim"].map(CLAIM_ROWS.index)).sort_values(["order", "horizon"])
        labels = [f"{SHORT[c]} T={T}" for c, T in zip(g["claim"], g["horizon"])]
        bottoms = np.zeros(len(g))
        for verdict, colour in palette.items():
            share = (g[verdict] / g["K"]).to_numpy()
            ax.barh(labels, share, left=bottoms, color=colour, label=verdict)
            bottoms += share
        ax.set_title(f"{dataset}, {protocol}")
        ax.tick_params(axis="y", labelsize=9)
        if not ax.yaxis_inverted():
            ax.invert_yaxis()
    for ax in axes[-1]:
        ax.set_xlabel("share of cells")
    handles, labels = next(ax for ax in axes.flat if ax.get_visible()).get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=9, frameon=False)
    return _stamped(fig, standin)


def plot_theory_link(cells: pd.DataFrame, standin: str | None = None, cap: float | None = None) -> plt.Figure:
    """Claim (a)'s measured effect against the predicted gain log(σ²-ratio(Z⁰) with / without
    residual), one point per cell, one panel per protocol, colour = data set. ``cap``: the log
    ratio's cap for diverged runs (``resgd.robustness.verdicts.LOG_CAP``); a cell whose effect sits
    at it is drawn at the axis' edge as ▼/▲, so the axis keeps the range of the other cells."""
    cells = cells[cells["claim"] == RESIDUAL_HELPS.name]
    at_cap = cells["effect"].abs() >= cap if cap is not None else pd.Series(False, index=cells.index)
    free = cells.loc[~at_cap, "effect"].abs()
    edge = max(1.0, 1.3 * float(free.max())) if at_cap.any() and len(free) and np.isfinite(free.max()) else None
    order = ("common", "own", "best", "theory")
    protocols = sorted(cells["protocol"].unique(), key=lambda p: order.index(p) if p in order else len(order))
    ncols = len(protocols) if len(protocols) <= 3 else math.ceil(len(protocols) / 2)  # 4 in a row: 14 in wide
    nrows = math.ceil(len(protocols) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.9 * ncols + 1.0, 3.0 * nrows + 0.6), sharey=True, squeeze=False,
                             constrained_layout=True)
    for ax in axes.flat[len(protocols):]:
        ax.set_visible(False)
    markers = {"holds": "o", "fails": "X", "undecided": "s"}
    for ax, protocol in zip(axes.flat, protocols):
        at = cells[cells["protocol"] == protocol]
        for i, (dataset, g) in enumerate(at.groupby("dataset")):
            for verdict, h in g.groupby("verdict"):
                inside = h[~at_cap.loc[h.index]] if edge is not None else h
                ax.scatter(inside["predicted_gain"], inside["effect"], color=f"C{i}", marker=markers[verdict], s=28,
                           label=f"{dataset}, {verdict}", alpha=0.85)
                if edge is None:
                    continue
                for sign, marker in ((-1.0, "v"), (1.0, "^")):
                    out = h[at_cap.loc[h.index] & (np.sign(h["effect"]) == sign)]
                    if len(out):
                        ax.scatter(out["predicted_gain"], np.full(len(out), sign * edge), color=f"C{i}", marker=marker,
                                   s=40, alpha=0.85,
                                   label=f"{dataset}, {verdict}, capped")
        if edge is not None:
            ax.set_ylim(-1.08 * edge, 1.08 * edge)
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_title(f"protocol '{protocol}'")
        ax.set_xlabel("predicted gain\nlog σ²-ratio(Z⁰) with / without")
    for row in axes:
        row[0].set_ylabel(f"{RESIDUAL_HELPS.label} measured effect:\nmedian log ratio of Φ(T)/Φ(0)")
    legend = {}  # one legend for all panels, below them
    for ax in axes.flat:
        legend.update(zip(*reversed(ax.get_legend_handles_labels())))
    title = (f"capped (▼ ▲): the effect sits at the ±{cap:g} cap of a diverged run; drawn at the axis' edge"
             if edge is not None else None)
    fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncol=3, fontsize=9, frameon=False,
               title=title, title_fontsize=9)
    return _stamped(fig, standin)


PREDICTED_EDGE = 1e3
"""A predicted Φ(T)/Φ(0) above this (the read-out alone diverges at the run's step) is drawn at this
edge as ▷, so the axis keeps the range of the runs it is about."""


def plot_readout_link(predictions: pd.DataFrame, standin: str | None = None) -> plt.Figure:
    """Measured against predicted Φ(T)/Φ(0) (read-out closed form on frozen H or H̄ at θ⁰), one
    point per single-layer run, one panel per data set, colour = protocol, log axes."""
    datasets = sorted(predictions["dataset"].unique())
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.8 * len(datasets), 3.5), squeeze=False,
                             constrained_layout=True)
    for ax, dataset in zip(axes[0], datasets):
        at = predictions[predictions["dataset"] == dataset]
        edge = 0
        for i, (protocol, g) in enumerate(at.groupby("protocol")):
            measured = (g["measured"] > 0) & np.isfinite(g["measured"])
            keep = measured & (g["predicted"] > 0) & (g["predicted"] <= PREDICTED_EDGE)
            beyond = measured & (g["predicted"] > PREDICTED_EDGE)  # inf included: the read-out alone diverges
            ax.scatter(g.loc[keep, "predicted"], g.loc[keep, "measured"], s=10, alpha=0.6, color=f"C{i}", label=protocol)
            ax.scatter(np.full(int(beyond.sum()), PREDICTED_EDGE), g.loc[beyond, "measured"], s=18, marker=">",
                       facecolors="none", color=f"C{i}")
            edge += int(beyond.sum())
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(dataset + (f"\n(▷ at the right edge: {edge} run(s) predicted > {PREDICTED_EDGE:g})" if edge else ""),
                     fontsize="small" if edge else None)
        ax.set_xlabel("predicted Φ(T)/Φ(0)\n(read-out only, features frozen at θ⁰)")
    axes[0, 0].set_ylabel("measured Φ(T)/Φ(0)")
    entries = {}  # one legend for every panel, under them: inside a panel it covered its points (Figs. 4.11, 5.11)
    for ax in axes.flat:
        entries.update((label, handle) for handle, label in zip(*ax.get_legend_handles_labels()))
    legend_outside(fig, list(entries.values()), list(entries), side="below", ncol=2 if len(entries) > 3 else len(entries),
                   fontsize=9)
    return _stamped(fig, standin)


def _stamped(fig: plt.Figure, standin: str | None) -> plt.Figure:
    """The stand-in banner, with an empty title reserving its room above the panel titles."""
    if standin:
        fig.suptitle(" ", fontsize=10)
    label_standin(fig, standin)
    return fig
