"""Figures of the experiments (the residual comparison, the paper's Figs. 3a and 3b, and the conditioning behind Theorem 1).

One function per figure kind; each takes a tidy table made by :mod:`resgd.experiments.study`
(``loss_curves``, ``conditioning_curves``, ``per_run_table``) and returns a Figure. No
computation happens here: means, bands and divergence flags are already in the table. Figures
made from synthetic stand-in data or from a file not checked against the published one carry a banner
(:func:`.style.banner_text`).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..claim_registry import BETA_MONOTONE, CLAIMS, DEPTH_RESIDUAL_HELPS, FACTORIAL
from ..dataset_registry import title as dataset_title
from ..words import count_noun
from .style import banner_text, beta_styles, label_standin, legend_outside, use_style

MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
TOP_MARGIN = (0, 0, 1, 0.96)  # room above the title for the stand-in banner


def _banner(fig: plt.Figure, table: pd.DataFrame) -> None:
    """The stand-in's banner where it applies, and the data source under every figure."""
    label_standin(fig, banner_text(table))
    label_source(fig, table)


def label_source(fig: plt.Figure, table: pd.DataFrame) -> None:
    """Which data the figure was made from, in small grey type at its foot (every experiment figure)."""
    if len(table) and "source_label" in table:
        labels = list(dict.fromkeys(table["source_label"].astype(str)))
        fig.text(0.01, 0.002, "data: " + "; ".join(labels), ha="left", va="bottom", fontsize=9, color="dimgray")


def _beta_colors(betas) -> dict[float, tuple]:
    """β → its colour of :func:`.style.beta_styles` (where a marker already says something else)."""
    return {b: style["color"] for b, style in beta_styles(betas).items()}


def _depth_colors(depths) -> dict[int, tuple]:
    depths = sorted(set(int(L) for L in depths))
    palette = sns.color_palette("colorblind", n_colors=max(len(depths), 2))
    return {L: palette[i] for i, L in enumerate(depths)}


def _draw_loss(ax: plt.Axes, curves: pd.DataFrame, keys: list[str], color, style, label, marks=None) -> None:
    """Mean curves with bands; diverged runs as dotted partial curves ending in ×. ``marks``: the
    mean curve's marker options per group (:func:`.style.beta_styles`), none by default."""
    mean = curves[curves["kind"] == "mean"]
    bad = curves[curves["kind"] == "diverged"]
    finite = mean["hi"].replace([np.inf, -np.inf], np.nan).dropna()
    top = float(finite.max()) * 3 if len(finite) else None
    groups = curves.groupby(keys, sort=True)
    for group, g in groups:
        group = group if isinstance(group, tuple) else (group,)
        gkey = dict(zip(keys, group))
        m = mean.merge(pd.DataFrame([gkey]), on=keys).sort_values("iteration")
        n_seeds = int(g["n_seeds"].iloc[0])
        n_div = int(g["n_diverged"].iloc[0])
        text = label(gkey) + (f" — diverged {n_div}/{n_seeds}" if n_div else "")
        c, ls = color(gkey), style(gkey)
        if len(m):
            ax.plot(m["iteration"], m["center"], color=c, ls=ls, lw=1.8, label=text, **(marks(gkey) if marks else {}))
            if n_seeds - n_div > 1:
                ax.fill_between(m["iteration"], m["lo"], m["hi"], color=c, alpha=0.2, lw=0)
            text = None
        for _, d in bad.merge(pd.DataFrame([gkey]), on=keys).groupby("seed"):
            d = d.sort_values("iteration")
            ax.plot(d["iteration"], d["center"], color=c, ls=":", lw=1.2, label=text)
            text = None
            last = d.iloc[-1]
            y = float(last["center"])
            if top is not None and (not math.isfinite(y) or y > top):
                y = top
            ax.plot([last["iteration"]], [y], marker="x", ms=9, mew=2, color=c, ls="none")
    ax.set_yscale("log")
    if top is not None:
        lows = mean["lo"].replace(0, np.nan).dropna()
        ax.set_ylim(bottom=float(lows.min()) / 1.5 if len(lows) else None, top=top)
    ax.set_xlabel("iteration t")
    ax.set_ylabel("Φ(θ⁽ᵗ⁾) / Φ(θ⁽⁰⁾)")


def _title(dataset: str, what: str) -> str:
    return f"{dataset_title(dataset)}: {what}"


def _panels(curves: pd.DataFrame, width: float = 4.6, height: float = 3.6):
    """One panel per protocol present in ``curves`` (in the order they appear), two per row."""
    protocols = list(dict.fromkeys(curves["protocol"])) or [""]
    cols = min(2, len(protocols))
    rows = -(-len(protocols) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows + 0.4), squeeze=False, sharey=True)
    for ax in axes.flat[len(protocols):]:
        ax.set_visible(False)
    return fig, list(zip(protocols, axes.flat))


def _finish(fig: plt.Figure, curves: pd.DataFrame, dataset: str, what: str) -> plt.Figure:
    fig.suptitle(_title(dataset, what), fontsize="medium", y=0.95)
    fig.tight_layout(rect=(0, 0, 1, 0.91))
    _banner(fig, curves)
    return fig


def plot_residual(curves: pd.DataFrame, dataset: str = "") -> plt.Figure:
    """Claim (a) read as speed (our figure; the paper's summary states the claim): Φ(t)/Φ(0) with (β = 1) and without (β = 0) the residual
    connection, single layer, one panel per step-size protocol."""
    use_style()
    fig, panels = _panels(curves, height=4.0)  # taller: the legend sits under each panel
    styles = beta_styles(curves["beta"])
    for protocol, ax in panels:
        sub = curves[curves["protocol"] == protocol]
        _draw_loss(ax, sub, ["beta"], lambda k: styles[float(k["beta"])]["color"],
                   lambda k: "-" if k["beta"] == 1.0 else "--",
                   lambda k: "β = 1 (residual)" if k["beta"] == 1.0 else f"β = {k['beta']:g} (no residual)",
                   marks=lambda k: {o: v for o, v in styles[float(k["beta"])].items() if o != "color"})
        ax.set_title(f"step: {protocol}", fontsize="small")
        legend_outside(ax, side="below", fontsize="x-small")
    return _finish(fig, curves, dataset, "single layer, with and without residual")


def plot_beta_sweep(curves: pd.DataFrame, dataset: str = "") -> plt.Figure:
    """Paper's Fig. 3a read as speed: Φ(t)/Φ(0) for each residual weight β (single layer), one
    panel per step-size protocol."""
    use_style()
    fig, panels = _panels(curves, height=4.2)  # taller: the legend sits under each panel
    styles = beta_styles(curves["beta"])
    for protocol, ax in panels:
        sub = curves[curves["protocol"] == protocol]
        _draw_loss(ax, sub, ["beta"], lambda k: styles[float(k["beta"])]["color"], lambda k: "-", lambda k: f"β = {k['beta']:g}",
                   marks=lambda k: {o: v for o, v in styles[float(k["beta"])].items() if o != "color"})
        ax.set_title(f"step: {protocol}", fontsize="small")
        handles, labels = ax.get_legend_handles_labels()
        order = np.argsort([-float(lbl.split("=")[1].split()[0]) for lbl in labels])
        legend_outside(ax, [handles[i] for i in order], [labels[i] for i in order], side="below", fontsize="x-small", ncol=2)
    return _finish(fig, curves, dataset, "residual weight β")


def _twin_label(k) -> str:
    if k["beta"] == 1.0:
        return f"L = {int(k['n_layers'])}, residual"
    return f"L = {int(k['n_layers'])}, no residual" + {"scaled": ", 1/√L init (dead at init when deep)",
                                                        "living": ", He-scaled init (sensitivity)"}.get(k["twin_init"], ", matched init")


def plot_depth(curves: pd.DataFrame, dataset: str = "") -> plt.Figure:
    """Paper's Fig. 3b read as speed: Φ(t)/Φ(0) of L-layer models with residual connections
    (solid), their matched twins without (dashed), the He-scaled twins (dash-dot, sensitivity) and the
    twins with the residual model's 1/√L init (dotted; dead at initialisation at L = 6, 10),
    one panel per step-size protocol."""
    use_style()
    fig, panels = _panels(curves, height=4.0)
    colors = _depth_colors(curves["n_layers"])
    styles = {("matched", 1.0): "-", ("living", 1.0): "-", ("scaled", 1.0): "-", ("matched", 0.0): "--",
              ("living", 0.0): "-.", ("scaled", 0.0): (0, (1, 1))}
    entries = {}
    for protocol, ax in panels:
        sub = curves[curves["protocol"] == protocol]
        _draw_loss(ax, sub, ["n_layers", "beta", "twin_init"], lambda k: colors[int(k["n_layers"])],
                   lambda k: styles[(k["twin_init"], float(k["beta"]))], _twin_label)
        ax.set_title(f"step: {protocol}", fontsize="small")
        entries.update((label, handle) for handle, label in zip(*ax.get_legend_handles_labels()))
    # one legend for every panel, under them (a legend per panel squeezed the axes and covered the x label)
    labels = sorted(entries, key=lambda label: (int(label.split("=")[1].split(",")[0]), "no residual" in label, label))
    rows, foot = -(-len(labels) // 2), 0.25  # foot: the data source's line under the legend (inches)
    height = fig.get_figheight() + 0.2 * rows
    fig.set_figheight(height)
    fig.legend([entries[label] for label in labels], labels, loc="lower center", bbox_to_anchor=(0.5, foot / height),
               ncol=2, fontsize="x-small", frameon=False)
    fig.suptitle(_title(dataset, "depth, with and without residual"), fontsize="medium", y=1 - 0.3 / height)
    fig.tight_layout(rect=(0, (0.19 * rows + foot + 0.1) / height, 1, 1 - 0.5 / height))
    _banner(fig, curves)
    return fig


def plot_factorial(curves: pd.DataFrame, dataset: str = "") -> plt.Figure:
    """The 2 × 2 factorial at L = 1: Φ(t)/Φ(0) for attention skip β × FFN skip β_ffn ∈ {0, 1}."""
    use_style()
    fig, panels = _panels(curves, width=6.0, height=4.0)
    palette = sns.color_palette("colorblind")
    colors = {(0.0, 0.0): palette[3], (1.0, 0.0): palette[1], (0.0, 1.0): palette[2], (1.0, 1.0): palette[0]}
    for protocol, ax in panels:
        sub = curves[curves["protocol"] == protocol]
        _draw_loss(ax, sub, ["beta", "beta_ffn"], lambda k: colors[(float(k["beta"]), float(k["beta_ffn"]))],
                   lambda k: "-" if k["beta_ffn"] == 1.0 else "--",
                   lambda k: f"attention skip β = {k['beta']:g}, FFN skip β_ffn = {k['beta_ffn']:g}")
        ax.set_title(f"step: {protocol}", fontsize="small")
        legend_outside(ax, side="below", fontsize="x-small")
    return _finish(fig, curves, dataset, "which skip carries the effect (L = 1)")


def plot_conditioning(curves: pd.DataFrame, dataset: str = "") -> plt.Figure:
    """σ_min(Z⁽ᵗ⁾) and σ_min²/σ_max²(Z⁽ᵗ⁾) of the first layer during training: top row the β
    sweep (colour = β), bottom row the depth sweep (colour = L; dashed = no residual)."""
    use_style()
    experiments = [e for e in ("beta", "depth") if (curves["experiment"] == e).any()]
    fig, axes = plt.subplots(len(experiments), 2, figsize=(8.0, 3.3 * len(experiments)), squeeze=False)
    ylabels = {"sigma_min_Z": "σ_min(Z⁽ᵗ⁾)", "rate_ratio_Z": "σ_min²/σ_max² (Z⁽ᵗ⁾)"}
    for row, experiment in enumerate(experiments):
        sub = curves[curves["experiment"] == experiment]
        if experiment == "beta":
            styles = beta_styles(sub["beta"])
            color = lambda k: styles[float(k["beta"])]["color"]  # noqa: E731
            style = lambda k: "-"  # noqa: E731
            label = lambda k: f"β = {k['beta']:g}"  # noqa: E731
            marks = lambda k: {o: v for o, v in styles[float(k["beta"])].items() if o != "color"}  # noqa: E731
        else:
            colors = _depth_colors(sub["n_layers"])
            color = lambda k: colors[int(k["n_layers"])]  # noqa: E731
            style = lambda k: "-" if k["beta"] == 1.0 else "--"  # noqa: E731
            label = lambda k: f"L = {int(k['n_layers'])}, " + ("res." if k["beta"] == 1.0 else "no res.")  # noqa: E731
            marks = lambda k: {}  # noqa: E731
        for col, quantity in enumerate(("sigma_min_Z", "rate_ratio_Z")):
            ax = axes[row, col]
            q = sub[sub["quantity"] == quantity]
            for (beta, L), g in q[q["twin_init"] == "matched"].groupby(["beta", "n_layers"], sort=True):
                key = {"beta": float(beta), "n_layers": int(L)}
                g = g.sort_values("iteration")
                ax.plot(g["iteration"], g["center"], color=color(key), ls=style(key), label=label(key), **marks(key))
                if int(g["n_runs"].max()) > 1:
                    ax.fill_between(g["iteration"], g["lo"], g["hi"], color=color(key), alpha=0.2, lw=0)
            ax.set_yscale("symlog", linthresh=1e-6) if (q["center"] <= 0).any() else ax.set_yscale("log")
            ax.set(xlabel="iteration t", ylabel=ylabels[quantity])
            ax.set_title(("single layer, β sweep" if experiment == "beta" else "depth sweep (first layer)"), fontsize="small")
        legend_outside(axes[row, 1], fontsize="x-small")  # inside, it covered the curves (Figs. 4.9, 5.9)
    fig.suptitle(_title(dataset, "conditioning of Z = βX + Attn(X) during training"), fontsize="medium", y=0.955)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    _banner(fig, curves)
    return fig


def plot_rate(per_run: pd.DataFrame, dataset: str = "") -> plt.Figure:
    """Measured linear rate per unit step (the primary rate, divided by μ)
    against Theorem 1's σ_min²(Z⁽⁰⁾)/σ_max²(Z⁽⁰⁾), one point per run that did not diverge.

    A run whose rate is not positive or below 10⁻⁶ of the fastest (a stalled run) is drawn on the
    bottom edge with an open marker and counted in the title.
    """
    use_style()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ok = per_run[~per_run["diverged"]]
    colors = _beta_colors(ok["beta"]) if len(ok) else {}
    depths = sorted(ok["n_layers"].unique())
    markers = {int(L): MARKERS[i % len(MARKERS)] for i, L in enumerate(depths)}
    x_pos = ok["rate_ratio_Z0"][ok["rate_ratio_Z0"] > 0]
    y_pos = ok["rate_per_lr"][ok["rate_per_lr"] > 0]
    x_edge = float(x_pos.min()) / 3 if len(x_pos) else 1e-6
    # rates below 1e-6 of the fastest (stalled runs) or not positive sit on the bottom edge
    y_floor = float(y_pos.max()) * 1e-6 if len(y_pos) else 0.0
    y_ok = y_pos[y_pos >= y_floor]
    y_edge = float(y_ok.min()) / 3 if len(y_ok) else 1e-6
    n_edge = 0
    for (beta, L), g in ok.groupby(["beta", "n_layers"], sort=True):
        x = g["rate_ratio_Z0"].to_numpy(dtype=float)
        y = g["rate_per_lr"].to_numpy(dtype=float)
        edge = ~(x > 0) | ~(y >= y_floor) | ~(y > 0)
        n_edge += int(edge.sum())
        label = f"β = {beta:g}, L = {int(L)}"
        if (~edge).any():
            ax.scatter(x[~edge], y[~edge], color=colors[float(beta)], marker=markers[int(L)], s=40, label=label,
                       edgecolor="black", linewidth=0.4)
        if edge.any():
            ax.scatter(np.where(x[edge] > 0, x[edge], x_edge), np.full(int(edge.sum()), y_edge),
                       facecolor="none", edgecolor=colors[float(beta)], marker=markers[int(L)], s=40,
                       label=None if (~edge).any() else label + " (edge)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel="σ_min²(Z⁽⁰⁾) / σ_max²(Z⁽⁰⁾)  (Theorem 1)", ylabel="measured rate / μ (first half of the run)")
    title = "measured rate vs Theorem 1's conditioning"
    if n_edge:
        title += f"\n(open markers on the bottom edge: {n_edge} run(s) stalled or rising, rate/μ < 1e-6 × max)"
    ax.set_title(_title(dataset, title))
    legend_outside(ax, fontsize="x-small")
    fig.tight_layout(rect=TOP_MARGIN)
    _banner(fig, per_run)
    return fig


VERDICT_COLORS = {"holds": (2, "green"), "fails": (3, "red-orange"), "horizon-dependent": (4, "purple"),
                  "undecided": (7, "grey")}
"""Each verdict of :data:`resgd.experiments.design.VERDICTS`: its colour in the claims page's overview
(index into seaborn's colour-blind palette) and that colour's name, which the figure's caption takes
from here (:func:`verdict_colour_words`), so that the caption names every colour drawn."""


def verdict_colour_words(verdicts) -> str:
    """The caption's key to :func:`plot_verdicts`: each verdict drawn, in the order of
    :data:`VERDICT_COLORS`, with its colour ("green holds, purple horizon-dependent")."""
    drawn = set(verdicts)
    unknown = drawn - set(VERDICT_COLORS)
    if unknown:
        raise ValueError(f"verdicts without a colour in the overview: {sorted(unknown)}; add them to VERDICT_COLORS")
    return ", ".join(f"{name} {verdict}" for verdict, (_, name) in VERDICT_COLORS.items() if verdict in drawn)


def plot_verdicts(verdicts: pd.DataFrame) -> plt.Figure:
    """The claims page's overview: one cell per data set × protocol (rows) and claim (columns),
    coloured by its verdict (:data:`VERDICT_COLORS`; :func:`verdict_colour_words` names them for the
    caption). Rows, not columns, take the many data set × protocol pairs so that the figure stays
    narrow enough to read at the page's width. Input: :func:`resgd.experiments.claims.load_verdicts`."""
    use_style()
    names = list(dict.fromkeys(verdicts["name"]))
    rows = list(dict.fromkeys(zip(verdicts["dataset"], verdicts["protocol"])))
    fig, ax = plt.subplots(figsize=(2.2 + 1.2 * len(names), 0.8 + 0.36 * len(rows)))
    palette = sns.color_palette("colorblind")
    verdict_colour_words(verdicts["verdict"])  # every verdict has its colour, or a clear error
    for _, row in verdicts.iterrows():
        i, j = rows.index((row["dataset"], row["protocol"])), names.index(row["name"])
        ax.add_patch(plt.Rectangle((j, i), 1, 1, facecolor=palette[VERDICT_COLORS[row["verdict"]][0]], alpha=0.75,
                                   edgecolor="white", linewidth=2))
        descriptive = "decides" in row and not bool(row["decides"])
        word = str(row["verdict"]).replace("horizon-dependent", "horizon-\ndependent")
        ax.text(j + 0.5, i + 0.5, word + ("\n(descriptive)" if descriptive else ""), ha="center", va="center",
                color="black", fontsize="small" if descriptive or "\n" in word else None)
    ax.set_xlim(0, len(names))
    ax.set_ylim(len(rows), 0)
    short = {c.name: c.decision_label for c in CLAIMS}
    ax.set_xticks([j + 0.5 for j in range(len(names))], [short.get(n, n) for n in names])
    ax.set_yticks([i + 0.5 for i in range(len(rows))], [f"{dataset_title(d)}, {p}" for d, p in rows])
    ax.tick_params(length=0)
    ax.grid(False)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.xaxis.tick_top()
    fig.tight_layout()
    if "data" in verdicts:  # the claims page's data column (resgd.experiments.claims.load_verdicts)
        parts = [f"{kind} behind the {', '.join(sorted(verdicts.loc[verdicts['data'] == name, 'dataset'].unique()))} verdicts"
                 for name, kind in (("synthetic stand-in", "SYNTHETIC stand-in data"), ("not canonical", "NOT canonical data"))
                 if (verdicts["data"] == name).any()]
        label_standin(fig, "; ".join(parts) or None)
    return fig


DECIDED_BY = {c.name: c.decided_by for c in CLAIMS}
OUTCOME_COLORS = {"holds": "#1a7f37", "fails": "#b42318", "horizon-dependent": "#8250df", "undecided": "#57606a"}


def _rule_text(numbers: dict) -> str:
    """What the rule needed and what it found, in a few words."""
    if numbers.get("rule") == "interval":
        left = numbers["left"]
        if math.isnan(numbers["lo"]):  # too many seeds dropped out (a run left the theorem's regime)
            return (f"{numbers.get('positive', 0)} of the {count_noun(left, 'seed')} left > 0\n"
                    f"no interval: it needs {numbers.get('need', '?')} seeds")
        return (f"{numbers.get('positive', 0)} of {count_noun(left, 'seed')} > 0\n{100 * numbers['level']:.1f} % interval "
                f"of the median [{numbers['lo']:.3g}, {numbers['hi']:.3g}]")
    if "spearman" in numbers and "bound" in numbers:
        return f"ρ of the medians = {numbers['spearman']:.2f}\ndecides at |ρ| ≥ {numbers['bound']:g}"
    k = numbers.get("threshold")
    n = numbers["seeds"]
    need = (f"decides at ≥ {k} of {n} agreeing" if k is not None else
            "no value to decide on" if n == 0 else f"{count_noun(n, 'value')} cannot decide at 5 %")
    return f"{numbers.get('positive', 0)} of {count_noun(n, 'value')} > 0\n{need}"


def _span(x: np.ndarray) -> float:
    """The largest finite |value| of a strip (1 when there is none, or it is 0): its x-axis half-width."""
    finite = x[np.isfinite(x)]
    span = float(np.max(np.abs(finite))) if finite.size else 1.0
    return span if span > 0 else 1.0


def _at_edges(x: np.ndarray, edge: float) -> np.ndarray:
    """Values as drawn on a strip: ±∞ (and anything beyond) at ±``edge``, NaN at 0."""
    return np.clip(np.nan_to_num(x, nan=0.0, posinf=edge, neginf=-edge), -edge, edge)


def _strip(ax: plt.Axes, values, numbers: dict, outcome: str, label: str, colors=None, text: str | None = None) -> None:
    """One verdict's per-seed values as dots (−∞ drawn at the left edge as ◀), its interval, zero, and the outcome."""
    x = np.asarray(values, dtype=float)
    span = _span(x)
    edge = 1.15 * span
    y = np.linspace(-0.25, 0.25, len(x)) if len(x) > 1 else np.zeros(len(x))
    shown = _at_edges(x, edge)
    cols = colors if colors is not None else ["#0969da"] * len(x)
    for xi, yi, c, raw in zip(shown, y, cols, x):
        ax.plot([xi], [yi], marker="<" if raw == -np.inf else ">" if raw == np.inf else "o", color=c, ms=6, ls="none")
    if numbers.get("rule") == "interval" and math.isfinite(numbers.get("lo", math.nan)):
        lo, hi = (float(np.clip(v, -edge, edge)) for v in (numbers["lo"], numbers["hi"]))
        ax.plot([lo, hi], [-0.45, -0.45], color="black", lw=3, solid_capstyle="butt")
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_xlim(-1.3 * span, 1.3 * span)
    ax.xaxis.set_major_locator(plt.MaxNLocator(5, symmetric=True))
    ax.set_ylim(-0.6, 0.4)
    ax.set_yticks([])
    ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize="small")
    ax.text(1.01, 0.5, f"{outcome}\n{text or _rule_text(numbers)}", transform=ax.transAxes, va="center", fontsize="small",
            color=OUTCOME_COLORS.get(outcome, "black"))


def plot_decision(verdicts, claim: str, dataset: str = "", measure: str = "r = −log(Φ(T)/Φ(0))/T") -> plt.Figure:
    """The statistic that decides ``claim`` under each protocol, beside its curve figure: per-seed
    values (dots; for (c) coloured by depth), the rule's interval (black bar) or threshold, 0, and the
    verdict. ``verdicts``: the :class:`resgd.experiments.claims.Verdict` objects of one data set."""
    use_style()
    rows = [v for v in verdicts if v.name == claim]
    fig, axes = plt.subplots(max(len(rows), 1), 1, figsize=(9.0, 1.15 + 1.05 * max(len(rows), 1)), squeeze=False)
    palette = sns.color_palette("colorblind")
    for ax, v in zip(axes[:, 0], rows):
        n = v.numbers
        if claim == DEPTH_RESIDUAL_HELPS.name:
            values, colors = [], []
            for i, (L, part) in enumerate(n["by_depth"].items()):
                values += list(part["differences"])
                colors += [palette[i % len(palette)]] * len(part["differences"])
            _strip(ax, values, n, v.outcome, v.protocol, colors)
            medians = _at_edges(np.asarray(n.get("values", []), dtype=float), 1.15 * _span(np.asarray(values, dtype=float)))
            ax.plot(medians, np.full(len(medians), -0.45), marker="D", color="black", ms=5, ls="none")
            names = ["blue", "orange", "green", "red", "purple"]
            if ax is axes[0, 0]:
                ax.set_title("colour: " + ", ".join(f"L = {L} ({names[i % len(names)]})" for i, L in enumerate(n["by_depth"])),
                             fontsize="x-small")
        elif claim == FACTORIAL.name:
            a, f = n["attention"], n["ffn"]
            _strip(ax, a["values"] + f["values"], {"rule": "sign"}, v.outcome, v.protocol,
                   [palette[0]] * len(a["values"]) + [palette[1]] * len(f["values"]),
                   text=f"attention {a['positive']}/{a['seeds']} > 0, FFN {f['positive']}/{f['seeds']} > 0\n"
                        f"Holm: one skip one-sided p ≤ 2.5 %, then ≤ 5 %")
            ax.set_title(f"attention skip (blue): {a['effect']}; FFN skip (orange): {f['effect']}", fontsize="x-small")
        elif claim == BETA_MONOTONE.name and "values" not in n:
            _strip(ax, [n["spearman"]], n, v.outcome, v.protocol)
            for b in (-n["bound"], n["bound"]):
                ax.axvline(b, color="grey", ls="--", lw=0.8)
            ax.set_xlim(-1.1, 1.1)
        else:
            _strip(ax, n.get("values", n.get("differences", [])), n, v.outcome, v.protocol)
    axes[-1, 0].set_xlabel(f"{DECIDED_BY.get(claim, claim)}   (speed: {measure})", fontsize="small")
    height = fig.get_figheight()
    fig.suptitle(_title(dataset, "what decides the verdict"), fontsize="medium", y=1 - 0.4 / height)
    # bottom: tick labels, the x label, then the data source's line (label_source) under it
    fig.subplots_adjust(left=0.15, right=0.6, top=1 - 0.95 / height, bottom=0.85 / height, hspace=0.9)
    return fig
