"""Figures of the rank-collapse notebook: one function per figure kind, tidy table in, Figure out.

Lines are medians over seeds and bands span the seeds (min to max). No computation happens here
beyond selecting rows and labelling; the tables come from :mod:`resgd.collapse.study`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .style import beta_styles

SEED_BAND = ("pi", 100)  # band = range over seeds
METRIC_LABELS = {
    "sigma_min": "σ_min",
    "rank1_distance": "distance to rank 1",
    "stable_rank": "stable rank",
    "sigma_max": "σ_max",
}
SCALING_LABELS = {"sqrt": "1/√d_QK", "linear": "1/d_QK"}


def _series_label(matrix: str, beta: float) -> str:
    return "Attn(X)" if matrix == "Attn" else f"Z, β={beta:g}"


def _panel_title(logit_scale: str, qk_scale: float) -> str:
    return f"logits × {SCALING_LABELS.get(logit_scale, logit_scale)}, qk_scale={qk_scale:g}"


def _log2_x(ax) -> None:
    ax.set_xscale("log", base=2)


def _panel_grid(panels: list, groups: list, height: float):
    """Axes for ``groups`` (metrics or β) × ``panels`` (logit scaling × init scale), two panels per
    row: one row per (group, logit scaling), one column per init scale. Four panels side by side
    made these figures 13 in wide, a third of their size at page width. Returns the figure, the
    axes and ``(group index, panel index) -> axes`` (y shared within a group)."""
    logits = list(dict.fromkeys(p[0] for p in panels))
    qks = sorted({p[1] for p in panels})
    fig, axes = plt.subplots(len(groups) * len(logits), len(qks), figsize=(3.3 * len(qks) + 1.9, height * len(groups) * len(logits)),
                             sharex=True, squeeze=False)
    where = {}
    for g in range(len(groups)):
        for k, (logit, qk) in enumerate(panels):
            where[g, k] = axes[g * len(logits) + logits.index(logit), qks.index(qk)]
        first = where[g, 0]
        for k in range(1, len(panels)):
            where[g, k].sharey(first)
    used = set(map(id, where.values()))
    for ax in axes.flat:
        if id(ax) not in used:
            ax.set_visible(False)
    return fig, axes, where


def plot_dqk_sweep(sweep: pd.DataFrame, scope: str = "per_sample", metrics=("sigma_min", "rank1_distance")) -> plt.Figure:
    """σ_min and distance to rank 1 of Attn(X) and Z = βX + Attn(X) against d_QK.

    Rows: metrics; columns: logit scaling × W_Q/W_K init scale; hue: Attn or Z at each β.
    ``Attn`` rows are taken once (at the smallest β: they do not depend on β).
    """
    data = sweep[sweep["scope"] == scope]
    data = data[(data["matrix"] == "Z") | (data["beta"] == data["beta"].min())].copy()
    data["series"] = [_series_label(m, b) for m, b in zip(data["matrix"], data["beta"])]
    order = ["Attn(X)"] + [f"Z, β={b:g}" for b in sorted(data.loc[data["matrix"] == "Z", "beta"].unique())]
    panels = data[["logit_scale", "qk_scale"]].drop_duplicates().sort_values(["logit_scale", "qk_scale"], ascending=[False, True])
    panels = list(panels.itertuples(index=False))
    fig, axes, where = _panel_grid(panels, list(metrics), 2.4)
    styles = beta_styles(data.loc[data["matrix"] == "Z", "beta"])  # the book's β colours and markers
    palette = {"Attn(X)": sns.color_palette("colorblind")[0], **{_series_label("Z", b): style["color"] for b, style in styles.items()}}
    markers = {"Attn(X)": "h", **{_series_label("Z", b): style["marker"] for b, style in styles.items()}}
    dashes = {label: (4, 2) if label == "Z, β=0" else "" for label in order}
    for col, (logit_scale, qk_scale) in enumerate(panels):
        sub = data[(data["logit_scale"] == logit_scale) & (data["qk_scale"] == qk_scale)]
        for row, metric in enumerate(metrics):
            ax = where[row, col]
            sns.lineplot(data=sub, x="d_qk", y=metric, hue="series", hue_order=order, style="series", style_order=order,
                         dashes=dashes, palette=palette, estimator="median", errorbar=SEED_BAND, markers=markers, markersize=4,
                         ax=ax, legend=(ax is axes[0, -1]))
            _log2_x(ax)
            ax.set_yscale("log")
            ax.set_xlabel("d_QK" if ax in axes[-1] else "")
            ax.set_ylabel(METRIC_LABELS.get(metric, metric) if ax in axes[:, 0] else "")
            ax.set_title(_panel_title(logit_scale, qk_scale), fontsize="small")
    legend_ax = axes[0, -1]
    if legend_ax.get_legend() is not None:
        sns.move_legend(legend_ax, "upper left", bbox_to_anchor=(1.02, 1.0), title=None, frameon=False)
    scope_text = "each sample's n×d matrix (median over samples)" if scope == "per_sample" else "the stacked (N·n)×d matrix"
    fig.suptitle(f"Conditioning against d_QK — {scope_text}", y=1.01)
    fig.tight_layout()
    return fig


def plot_attention_maps(maps: pd.DataFrame) -> plt.Figure:
    """Heatmaps of one sample's attention matrix A (query × key).

    Rows: logit scaling × init scale; columns: d_QK. Shared colour scale 0 … 1.
    """
    rows = maps[["logit_scale", "qk_scale"]].drop_duplicates().sort_values(["logit_scale", "qk_scale"], ascending=[False, True])
    rows = list(rows.itertuples(index=False))
    d_qks = sorted(maps["d_qk"].unique())
    fig, axes = plt.subplots(len(rows), len(d_qks), figsize=(2.6 * len(d_qks) + 1.0, 2.4 * len(rows)), squeeze=False)
    image = None
    for r, (logit_scale, qk_scale) in enumerate(rows):
        for c, d_qk in enumerate(d_qks):
            sub = maps[(maps["logit_scale"] == logit_scale) & (maps["qk_scale"] == qk_scale) & (maps["d_qk"] == d_qk)]
            grid = sub.pivot(index="query", columns="key", values="prob").to_numpy()
            ax = axes[r, c]
            image = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="viridis", interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
            ax.set_title(f"{SCALING_LABELS.get(logit_scale, logit_scale)}, s={qk_scale:g}, d_QK={d_qk}", fontsize=8)
            if c == 0:
                ax.set_ylabel("query")
            if r == len(rows) - 1:
                ax.set_xlabel("key")
    fig.tight_layout()
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    return fig


def plot_attention_regimes(regimes: pd.DataFrame, stats=("logit_std", "entropy", "max_prob", "argmax_agreement")) -> plt.Figure:
    """Logit spread, row entropy (normalised), largest weight and argmax agreement of A against d_QK.

    Rows: statistic; columns: init scale; hue: logit scaling.
    """
    labels = {"logit_std": "std of the logits", "entropy": "row entropy / log n", "max_prob": "largest weight per row", "argmax_agreement": "queries on the\ncommon argmax key"}
    qk_scales = sorted(regimes["qk_scale"].unique())
    fig, axes = plt.subplots(len(stats), len(qk_scales), figsize=(3.6 * len(qk_scales), 2.3 * len(stats)), sharex=True, sharey="row", squeeze=False)
    data = regimes.assign(scaling=regimes["logit_scale"].map(lambda s: SCALING_LABELS.get(s, s)))
    order = [SCALING_LABELS[s] for s in ("sqrt", "linear") if SCALING_LABELS[s] in set(data["scaling"])]
    for c, qk_scale in enumerate(qk_scales):
        sub = data[data["qk_scale"] == qk_scale]
        for r, stat in enumerate(stats):
            ax = axes[r, c]
            sns.lineplot(data=sub, x="d_qk", y=stat, hue="scaling", hue_order=order, estimator="median", errorbar=SEED_BAND,
                         marker="o", markersize=3, ax=ax, legend=(r == 0 and c == len(qk_scales) - 1))
            _log2_x(ax)
            if stat == "logit_std":
                ax.set_yscale("log")
            ax.set_ylabel(labels.get(stat, stat) if c == 0 else "")
            ax.set_xlabel("d_QK" if r == len(stats) - 1 else "")
            if r == 0:
                ax.set_title(f"qk_scale={qk_scale:g}")
    if axes[0, -1].get_legend() is not None:
        sns.move_legend(axes[0, -1], "upper left", bbox_to_anchor=(1.02, 1.0), title="logit scaling", frameon=False)
    fig.tight_layout()
    return fig


def plot_bound(bounds: pd.DataFrame, scope: str = "per_sample") -> plt.Figure:
    """Measured σ_min(Z) with the Weyl and the centred lower bound against d_QK.

    Rows: β; columns: logit scaling × init scale. Bounds below 0 are drawn at 0 (vacuous).
    """
    data = bounds[bounds["scope"] == scope]
    betas = sorted(data["beta"].unique())
    panels = data[["logit_scale", "qk_scale"]].drop_duplicates().sort_values(["logit_scale", "qk_scale"], ascending=[False, True])
    panels = list(panels.itertuples(index=False))
    order = ["measured σ_min(Z)", "centred bound", "Weyl bound"]
    order = [q for q in order if q in set(data["quantity"])]
    dashes = {"measured σ_min(Z)": "", "centred bound": (4, 2), "Weyl bound": (1, 2)}
    fig, axes, where = _panel_grid(panels, betas, 2.3)
    for c, (logit_scale, qk_scale) in enumerate(panels):
        for r, beta in enumerate(betas):
            sub = data[(data["logit_scale"] == logit_scale) & (data["qk_scale"] == qk_scale) & (data["beta"] == beta)]
            ax = where[r, c]
            sns.lineplot(data=sub, x="d_qk", y="value", hue="quantity", hue_order=order, style="quantity", style_order=order,
                         dashes=dashes, estimator="median", errorbar=SEED_BAND, ax=ax, legend=(ax is axes[0, -1]))
            _log2_x(ax)
            ax.set_ylim(bottom=0.0)
            ax.set_ylabel(f"β={beta:g}" if ax in axes[:, 0] else "")
            ax.set_xlabel("d_QK" if ax in axes[-1] else "")
            ax.set_title(_panel_title(logit_scale, qk_scale), fontsize="small")
    if axes[0, -1].get_legend() is not None:
        sns.move_legend(axes[0, -1], "upper left", bbox_to_anchor=(1.02, 1.0), title=None, frameon=False)
    scope_text = "per sample (medians over samples)" if scope == "per_sample" else "stacked"
    fig.suptitle(f"σ_min(Z) and its lower bounds — {scope_text}", y=1.01)
    fig.tight_layout()
    return fig


def plot_training(training: pd.DataFrame, floor: float | None = None,
                  floor_label: str = "per-sample-constant floor") -> plt.Figure:
    """GD loss and σ_min of the stacked first-layer Z against the iteration.

    Hue: β (with / without residual); line style: d_QK. ``floor``: a loss level named by
    ``floor_label`` (by default the loss no per-sample-constant predictor can beat), a grey line.
    """
    data = training.assign(residual=training["beta"].map(lambda b: f"β={b:g}"), dqk=training["d_qk"].map(lambda d: f"d_QK={d}"))
    hue_order = sorted(data["residual"].unique())
    style_order = [f"d_QK={d}" for d in sorted(data["d_qk"].unique())]
    fig, axes = plt.subplots(1, 2, figsize=(8.8, 3.4))  # with the legend beside it: under 10 in
    sns.lineplot(data=data, x="iteration", y="loss", hue="residual", hue_order=hue_order, style="dqk", style_order=style_order,
                 estimator="median", errorbar=SEED_BAND, ax=axes[0], legend=False)
    if floor is not None and np.isfinite(floor):
        axes[0].axhline(floor, color="0.4", lw=1, ls=":", label=floor_label)
        axes[0].annotate(floor_label, (0.98, floor), xycoords=("axes fraction", "data"), ha="right", va="bottom", fontsize=9, color="0.3")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("training loss Φ")
    recorded = data.dropna(subset=["sigma_min_Z"])
    sns.lineplot(data=recorded, x="iteration", y="sigma_min_Z", hue="residual", hue_order=hue_order, style="dqk", style_order=style_order,
                 estimator="median", errorbar=SEED_BAND, marker="o", markersize=3, ax=axes[1])
    axes[1].set_yscale("log")
    axes[1].set_ylabel("σ_min of stacked Z (layer 1)")
    sns.move_legend(axes[1], "upper left", bbox_to_anchor=(1.02, 1.0), title=None, frameon=False)
    fig.tight_layout()
    return fig
