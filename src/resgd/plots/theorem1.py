"""Figures of the theory notebooks (01_setup, 02_theorem1): each takes a tidy table, returns a Figure.

No computation happens here beyond selecting columns: the tables come from :mod:`resgd.theorem1.study`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns


def loss_curves(history: pd.DataFrame) -> plt.Figure:
    """Φ(θ⁽ᵗ⁾) against t on a log scale, one line per β (columns ``iteration``, ``loss``, ``beta``)."""
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    for beta, g in history.groupby("beta", sort=False):
        ax.semilogy(g["iteration"], g["loss"], label=f"β = {beta:g}")
    ax.set(xlabel="GD iteration t", ylabel=r"training loss $\Phi(\theta^{(t)})$", title="Full-batch GD on all weights (synthetic task)")
    ax.legend(title="attention residual")
    fig.tight_layout()
    return fig


def special_case(frame: pd.DataFrame) -> plt.Figure:
    """Measured Φ − Φ* of the linear read-out against the closed form and the slowest-mode line.

    Columns ``iteration``, ``excess``, ``predicted``, ``asymptote`` (:func:`resgd.theorem1.study.readout_gd`).
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
    ax.legend(fontsize="x-small", ncol=2, loc="lower right")
    fig.tight_layout()
    return fig


def bound_check(sweep: pd.DataFrame) -> plt.Figure:
    """Left: fraction of GD steps obeying Φ(t+1) ≤ (1 − μα)Φ(t) per (β, init scale); right: tightness.

    Columns ``beta``, ``init_scale``, ``fraction_obeyed``, ``tightness_median``, ``rate_ratio``.
    """
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9.6, 3.8), gridspec_kw={"width_ratios": [1, 1.3]})
    grid = sweep.pivot_table(index="beta", columns="init_scale", values="fraction_obeyed", aggfunc="mean")
    sns.heatmap(grid, annot=True, fmt=".3f", vmin=0.9, vmax=1.0, cmap="rocket", cbar_kws={"label": "mean fraction of steps obeying"}, ax=ax0)
    ax0.set(xlabel="init scale", ylabel="β", title="Bound obeyed (fraction of steps)")
    data = sweep[sweep["tightness_median"] > 0].assign(β=lambda f: f["beta"].map("{:g}".format))
    sns.scatterplot(data=data, x="rate_ratio", y="tightness_median", hue="β", s=30, ax=ax1)
    ax1.axhline(1.0, color="0.3", ls="--", lw=1)
    ax1.set(xscale="log", yscale="log", xlabel=r"$\sigma_{\min}^2(Z^{(0)})/\sigma_{\max}^2(Z^{(0)})$",
            ylabel="median (1 − ratio) / (μα)", title="Tightness (1 = bound attained)")
    ax1.legend(fontsize="x-small", title="β")
    fig.tight_layout()
    return fig


def sigma_trajectories(traj: pd.DataFrame) -> plt.Figure:
    """σ_min and σ_max of Z⁽ᵗ⁾ relative to t = 0, and the loss, per scenario (long table from
    :func:`resgd.theorem1.study.sigma_trajectories`: ``scenario``, ``iteration``, ``sigma_min_rel``, ``sigma_max_rel``, ``loss_rel``)."""
    fig, axes = plt.subplots(1, 3, figsize=(11.5, 3.6), sharex=True)
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
    axes[0].legend(fontsize="x-small")
    fig.tight_layout()
    return fig
