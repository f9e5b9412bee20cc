"""Figures of the theory notebooks (01_setup, 02_theorem1): each takes a tidy table, returns a Figure.

No computation happens here beyond selecting columns: the tables come from :mod:`resgd.theorem1.study`, :mod:`resgd.theorem1.sweep` and :mod:`resgd.theorem1.regime_map`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .style import beta_styles, legend_outside


def loss_curves(history: pd.DataFrame) -> plt.Figure:
    """Φ(θ⁽ᵗ⁾) against t on a log scale, one line per β (columns ``iteration``, ``loss``, ``beta``)."""
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    styles = beta_styles(history["beta"])
    for beta, g in history.groupby("beta", sort=False):
        ax.semilogy(g["iteration"], g["loss"], label=f"β = {beta:g}", **styles[float(beta)])
    ax.set(xlabel="GD iteration t", ylabel=r"training loss $\Phi(\theta^{(t)})$", title="Full-batch GD on all weights (synthetic task)")
    ax.legend(title="attention residual")
    fig.tight_layout()
    return fig


def special_case(frame: pd.DataFrame) -> plt.Figure:
    """Measured Φ − Φ* of the linear read-out against the closed form and the slowest-mode line.

    Columns ``iteration``, ``excess``, ``predicted``, ``asymptote`` (:func:`resgd.theorem1.quantities.readout_gd`).
    """
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    pal = sns.color_palette()
    ax.semilogy(frame["iteration"], frame["asymptote"], color="0.55", ls="--", lw=1.5,
                label=r"slowest mode alone: $\propto(1-\sigma_{\min}^2/\sigma_{\max}^2)^{2t}$")
    ax.semilogy(frame["iteration"], frame["predicted"], color=pal[1], lw=4, alpha=0.45, label="closed form (all modes)")
    step = max(len(frame) // 40, 1)
    ax.semilogy(frame["iteration"][::step], frame["excess"][::step], "o", ms=3.5, color=pal[0], label="measured GD")
    ax.set(xlabel="GD iteration t", ylabel=r"$\Phi(W_t) - \Phi^*$", title="Read-out on fixed features Z: exact linear rate")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def rate_vs_prediction(sweep: pd.DataFrame) -> plt.Figure:
    """Empirical linear rate against σ_min²(Z⁽⁰⁾)/σ_max²(Z⁽⁰⁾), log–log, with the theorem's guaranteed rate.

    Columns ``rate_ratio``, ``empirical_rate``, ``bound_rate``, ``beta``, ``init_scale``. Rows with a
    non-positive rate or ratio cannot be drawn on log axes; their number is given in the title.
    """
    ok = (sweep["rate_ratio"] > 0) & (sweep["empirical_rate"] > 0)
    data = sweep[ok].assign(β=lambda f: f["beta"].map("{:g}".format), init=lambda f: f["init_scale"].map("{:g}".format))
    fig, ax = plt.subplots(figsize=(6.6, 4.4))
    sns.scatterplot(data=data, x="rate_ratio", y="empirical_rate", hue="β", style="init", s=36, ax=ax)
    bounded = data[data["bound_rate"] > 0]
    ax.scatter(bounded["rate_ratio"], bounded["bound_rate"], marker="_", s=40, color="0.4", lw=1,
               label="guaranteed −log(1−μα)")
    ax.set(xscale="log", yscale="log", xlabel=r"predicted  $\sigma_{\min}^2(Z^{(0)})/\sigma_{\max}^2(Z^{(0)})$",
           ylabel="empirical rate  −d log Φ / dt")
    dropped = int((~ok).sum())
    ax.set_title(f"{len(data)} configurations" + (f" ({dropped} with rate ≤ 0 not drawn)" if dropped else ""))
    legend_outside(ax, fontsize="x-small")
    fig.tight_layout()
    return fig


def bound_check(sweep: pd.DataFrame) -> plt.Figure:
    """Left: per (β, init scale), how many configurations obeyed Φ(t+1) ≤ (1 − μα)Φ(t) at every
    step, and how many of those guarantees are vacuous; right: tightness.

    Columns ``beta``, ``init_scale``, ``fraction_obeyed``, ``tightness_median``, ``rate_ratio``
    (``vacuous`` optional). Counts, not the mean fraction of steps: that read 1.000 in every cell.
    """
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9.4, 3.9), gridspec_kw={"width_ratios": [1, 1.3]})
    counted = sweep.assign(all_obeyed=sweep["fraction_obeyed"] == 1.0,
                           vac=sweep["vacuous"].astype(bool) if "vacuous" in sweep else False)
    cells = counted.groupby(["beta", "init_scale"]).agg(n=("fraction_obeyed", "count"), k=("all_obeyed", "sum"), v=("vac", "sum"))
    share = (cells["k"] / cells["n"]).unstack("init_scale")
    text = cells.apply(lambda r: f"{r['k']:.0f}/{r['n']:.0f}" + (f"\n{r['v']:.0f} vacuous" if r["v"] else ""), axis=1)
    sns.heatmap(share, annot=text.unstack("init_scale").reindex_like(share).to_numpy(), fmt="", vmin=0.0, vmax=1.0,
                cmap="rocket", annot_kws={"fontsize": 9}, cbar_kws={"label": "share obeying at every step"}, ax=ax0)
    ax0.set(xlabel="init scale", ylabel="β", title="Configurations obeying\nthe bound at every step")
    data = sweep[sweep["tightness_median"] > 0].assign(β=lambda f: f["beta"].map("{:g}".format))
    sns.scatterplot(data=data, x="rate_ratio", y="tightness_median", hue="β", s=30, ax=ax1)
    ax1.axhline(1.0, color="0.3", ls="--", lw=1)
    ax1.set(xscale="log", yscale="log", xlabel=r"$\sigma_{\min}^2(Z^{(0)})/\sigma_{\max}^2(Z^{(0)})$",
            ylabel="median (1 − ratio) / (μα)", title="Tightness (1 = bound attained)")
    legend_outside(ax1, fontsize="x-small", title="β", title_fontsize="x-small")
    fig.tight_layout()
    return fig


def sigma_trajectories(traj: pd.DataFrame) -> plt.Figure:
    """σ_min and σ_max of Z⁽ᵗ⁾ relative to t = 0, and the loss, per scenario (long table from
    :func:`resgd.theorem1.study.sigma_trajectories`: ``scenario``, ``iteration``, ``sigma_min_rel``, ``sigma_max_rel``, ``loss_rel``)."""
    fig, axes = plt.subplots(1, 3, figsize=(9.6, 3.4), sharex=True)
    for name, g in traj.groupby("scenario", sort=False):
        line, = axes[0].plot(g["iteration"], g["sigma_min_rel"], label=name)
        axes[1].plot(g["iteration"], g["sigma_max_rel"], color=line.get_color())
        axes[2].semilogy(g["iteration"], g["loss_rel"], color=line.get_color())
    axes[0].set(ylabel=r"$\sigma_{\min}(Z^{(t)})/\sigma_{\min}(Z^{(0)})$", title=r"$\sigma_{\min}$ of Z")
    axes[1].set(ylabel=r"$\sigma_{\max}(Z^{(t)})/\sigma_{\max}(Z^{(0)})$", title=r"$\sigma_{\max}$ of Z")
    axes[2].set(ylabel=r"$\Phi(\theta^{(t)})/\Phi(\theta^{(0)})$", title="loss")
    for ax in axes:
        ax.set_xlabel("GD iteration t")
    for ax in axes[:2]:
        ax.axhline(1.0, color="0.3", lw=0.8, ls=":")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize="small", frameon=False)
    fig.tight_layout(rect=(0, 0.14, 1, 1))  # room for the legend below: inside a panel it hid the curves
    return fig


def distance_vs_radius(sweep: pd.DataFrame) -> plt.Figure:
    """Largest distance ‖θ_t − θ⁰‖ travelled against the radius ρ the proof needs, one point per configuration.

    Columns ``rho``, ``max_distance``, ``beta``, ``in_regime``; points above the diagonal left the ball.
    Configurations with an infinite ρ (α = 0) cannot be drawn; their number is in the title.
    """
    finite = np.isfinite(sweep["rho"]) & (sweep["rho"] > 0) & (sweep["max_distance"] > 0)
    data = sweep[finite].assign(β=lambda f: f["beta"].map("{:g}".format),
                                regime=lambda f: f["in_regime"].map({True: "in regime", False: "out of regime"}))
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    sns.scatterplot(data=data, x="rho", y="max_distance", hue="β", style="regime", style_order=["in regime", "out of regime"],
                    s=34, ax=ax)
    lo = float(min(data["rho"].min(), data["max_distance"].min())) if len(data) else 1e-3
    hi = float(max(data["rho"].max(), data["max_distance"].max())) if len(data) else 1.0
    ax.plot([lo, hi], [lo, hi], color="0.3", ls="--", lw=1, label="distance = ρ")
    ax.set(xscale="log", yscale="log", xlabel=r"radius $\rho = 2\bar J\sqrt{2\Phi(\theta^0)}/\alpha$",
           ylabel=r"$\max_t \|\theta_t - \theta^0\|$ (checkpoints)")
    dropped = int((~finite).sum())
    ax.set_title("Distance travelled vs the proof's radius" + (f" ({dropped} with ρ = ∞ not drawn)" if dropped else ""))
    legend_outside(ax, fontsize="x-small")
    fig.tight_layout()
    return fig


VERDICT_COLOURS = {"true and informative": "#1b9e77", "true, loose": "#7570b3", "holds outside the regime": "#e6ab02",
                   "fails outside the regime": "#d95f02", "fails inside the regime": "#000000"}


def regime_map(table: pd.DataFrame) -> plt.Figure:
    """The regime map: measured rate / guaranteed rate against the target scale, one panel per
    (step factor c, read-out scale), marker per Q/K scale, colour per verdict.

    Columns ``lr_factor``, ``out_scale``, ``qk_rel``, ``target_scale``, ``rate_over_bound``, ``verdict``.
    Points whose ratio is not a positive finite number (a diverged run, a rate ≤ 0) are crosses on the bottom edge.
    """
    cs, outs = sorted(table["lr_factor"].unique()), sorted(table["out_scale"].unique())
    fig, axes = plt.subplots(len(outs), len(cs), figsize=(2.8 * len(cs) + 0.8, 2.6 * len(outs) + 1.2), sharex=True,
                             sharey=True, squeeze=False)
    ratio = table["rate_over_bound"].where(np.isfinite(table["rate_over_bound"]) & (table["rate_over_bound"] > 0))
    floor = min(float(ratio.min()), 1.0) / 5 if ratio.notna().any() else 0.1
    markers = dict(zip(sorted(table["qk_rel"].unique()), "os^D"))
    for i, out in enumerate(outs):
        for j, c in enumerate(cs):
            ax = axes[i, j]
            sub = table[(table["out_scale"] == out) & (table["lr_factor"] == c)]
            for (verdict, qk), g in sub.groupby(["verdict", "qk_rel"]):
                y = ratio.loc[g.index]
                colour = VERDICT_COLOURS.get(verdict, "0.5")
                ax.scatter(g["target_scale"][y.notna()], y[y.notna()], color=colour, marker=markers[qk], s=30,
                           alpha=0.85, edgecolor="white", lw=0.4)
                ax.scatter(g["target_scale"][y.isna()], np.full(int(y.isna().sum()), floor), color=colour, marker="x",
                           s=34, lw=1.4)
            ax.axhline(1.0, color="0.3", lw=0.8, ls="--")
            ax.axhline(10.0, color="0.3", lw=0.8, ls=":")
            ax.set(xscale="log", yscale="log")
            ax.set_title(f"c = {c:g}, read-out scale {out:g}", fontsize="small")
            if i == len(outs) - 1:
                ax.set_xlabel("target scale")
    handles = [plt.Line2D([], [], color=col, marker="o", ls="", label=v) for v, col in VERDICT_COLOURS.items()
               if v in set(table["verdict"])]
    handles += [plt.Line2D([], [], color="0.4", marker=m, ls="", label=f"Q/K scale ×{q:g}") for q, m in markers.items()]
    handles += [plt.Line2D([], [], color="0.4", marker="x", ls="", label="diverged or rate ≤ 0 (bottom)"),
                plt.Line2D([], [], color="0.3", ls="--", label="bound attained (1)"),
                plt.Line2D([], [], color="0.3", ls=":", label="informative limit (10)")]
    fig.supylabel("measured / guaranteed rate", fontsize="medium")  # once: per row the labels overlapped
    # below the panels, not beside them: beside it made the figure 12 in wide
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize="small", frameon=False)
    fig.tight_layout(rect=(0, 1.1 / fig.get_figheight(), 1, 1))
    return fig
