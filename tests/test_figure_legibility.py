"""Every figure of the book reads at its page width: the theorem-1, rank-collapse, experiment
(Jena, SST-2) and robustness chapters, and the claims page's overview.

A wide figure is scaled down to the book's content column: :data:`resgd.plots.style.COLUMN_PX`
(660 CSS px), the narrowest width Chromium gives a figure in a 1280-px or a 768-px window
(``tests/test_browser.py`` measures it). Each figure is
drawn from small hand-built tables with as many panels as the largest design that reaches the book,
each count read from the design the book runs, not written here (the full presets; the robustness
map's whole design with its banner, its protocols and the best-step protocol its cells add; the
experiment figures from the real pipeline on the toy data at the full design's β, depths and arms,
with the synthetic-data banner), and must save at most :data:`MAX_WIDTH_PX` wide with no text
below :data:`MIN_TEXT_PX` once scaled to the page, each text at its smallest glyph (a log axis'
exponents included), and no legend over the data.
"""

from __future__ import annotations

import functools
import itertools
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from resgd.experiments.configuration import settings  # noqa: E402
from resgd.experiments.pages import FIGURE_KINDS, make_figure  # noqa: E402
from resgd.experiments.study import run_experiments  # noqa: E402
from resgd.plots import collapse as cplots  # noqa: E402
from resgd.plots import experiments as eplots  # noqa: E402
from resgd.plots import robustness as rplots  # noqa: E402
from resgd.plots import theorem1 as tplots  # noqa: E402
from resgd.plots.style import COLUMN_PX, legend_outside, saved_width_px, smallest_text_px, use_style  # noqa: E402
from resgd.robustness.grid import map_grid  # noqa: E402
from resgd.robustness.verdicts import BEST  # noqa: E402

PAGE_PX = COLUMN_PX
MIN_TEXT_PX = 8.0
MAX_WIDTH_PX = 1800  # 12 in at the saved 150 dpi
BANNER = "SYNTHETIC stand-in data for jena; SYNTHETIC stand-in data for sst2"
RNG = np.random.default_rng(0)


# --- theorem 1 (notebooks 01, 02) -------------------------------------------------------------

def _history():
    return pd.DataFrame([{"iteration": t, "loss": 0.9 ** t * (1 + b), "beta": b} for b in (1.0, 0.0) for t in range(60)])


def _special():
    t = np.arange(200)
    return pd.DataFrame({"iteration": t, "excess": 0.98 ** t, "predicted": 0.98 ** t, "asymptote": 0.99 ** t})


def _sweep():
    rows = []
    for beta, init, d_qk, seed in itertools.product((0.0, 0.1, 0.3, 0.6, 1.0), (0.5, 1.0, 2.0), (1, 4, 16, 64, 256), (0, 1)):
        ratio = float(RNG.uniform(1e-3, 0.5))
        rows.append({"beta": beta, "init_scale": init, "d_qk": d_qk, "seed": seed, "rate_ratio": ratio,
                     "empirical_rate": ratio * RNG.uniform(0.5, 2), "bound_rate": ratio / 10,
                     "fraction_obeyed": 1.0 - RNG.choice([0.0, 0.0, 0.01]), "tightness_median": RNG.uniform(1, 50),
                     "vacuous": beta == 0.0 and seed == 0, "rho": RNG.uniform(0.1, 10), "max_distance": RNG.uniform(0.01, 1), "in_regime": bool(RNG.integers(2))})
    return pd.DataFrame(rows)


def _trajectories():
    names = ["theorem regime (c = 0.5)", "large init (scale 4)", "large step (c = 3)", "far targets (×30)",
             "far targets (×100, c = 0.1)"]
    return pd.DataFrame([{"scenario": s, "iteration": t, "sigma_min_rel": 1 - 0.001 * t * k, "sigma_max_rel": 1 + 0.001 * t,
                          "loss_rel": 0.95 ** t} for k, s in enumerate(names) for t in range(100)])


def _regime():
    from resgd.theorem1.regime_map import VERDICTS

    rows = [{"lr_factor": c, "out_scale": o, "qk_rel": q, "target_scale": t, "seed": s,
             "rate_over_bound": float(RNG.uniform(0.5, 40)) if k % 7 else np.nan, "verdict": VERDICTS[k % len(VERDICTS)]}
            for k, (c, o, q, t, s) in enumerate(itertools.product((0.5, 1.0, 2.0), (0.1, 1.0), (1.0, 4.0),
                                                                   (0.1, 0.3, 1.0, 3.0, 10.0), (0, 1, 2)))]
    return pd.DataFrame(rows)


# --- rank collapse (notebook 03) ----------------------------------------------------------------

DQKS = tuple(2 ** k for k in range(15))
PANELS = list(itertools.product(("sqrt", "linear"), (1.0, 4.0)))


def _collapse_sweep():
    rows = []
    for (logit, qk), d_qk, scope, seed in itertools.product(PANELS, DQKS, ("per_sample", "stacked"), (0, 1)):
        for matrix, beta in [("Attn", b) for b in (0.0, 0.5, 1.0)] + [("Z", b) for b in (0.0, 0.5, 1.0)]:
            rows.append({"logit_scale": logit, "qk_scale": qk, "d_qk": d_qk, "scope": scope, "seed": seed, "matrix": matrix,
                         "beta": beta, "sigma_min": RNG.uniform(0.01, 1), "rank1_distance": RNG.uniform(0.01, 1)})
    return pd.DataFrame(rows)


def _collapse_bounds():
    quantities = ("measured σ_min(Z)", "centred bound", "Weyl bound")
    return pd.DataFrame([{"logit_scale": logit, "qk_scale": qk, "d_qk": d_qk, "scope": scope, "seed": seed, "beta": beta,
                          "quantity": q, "value": RNG.uniform(0, 2)}
                         for (logit, qk), d_qk, scope, seed, beta, q in itertools.product(
                             PANELS, DQKS, ("per_sample", "stacked"), (0, 1), (0.5, 1.0), quantities)])


def _collapse_regimes():
    return pd.DataFrame([{"logit_scale": logit, "qk_scale": qk, "d_qk": d_qk, "seed": seed, "logit_std": RNG.uniform(0.01, 10),
                          "entropy": RNG.uniform(0, 1), "max_prob": RNG.uniform(0, 1), "argmax_agreement": RNG.uniform(0, 1)}
                         for (logit, qk), d_qk, seed in itertools.product(PANELS, DQKS, (0, 1))])


def _collapse_maps():
    n = 16
    return pd.DataFrame([{"logit_scale": logit, "qk_scale": qk, "d_qk": d_qk, "query": i, "key": j, "prob": RNG.uniform(0, 2 / n)}
                         for (logit, qk), d_qk, i, j in itertools.product(PANELS, (4, 16384), range(n), range(n))])


def _collapse_training():
    return pd.DataFrame([{"beta": beta, "d_qk": d_qk, "seed": seed, "iteration": t, "loss": 0.99 ** t * (1 + beta),
                          "sigma_min_Z": 0.5 + beta if t % 50 == 0 else np.nan}
                         for beta, d_qk, seed, t in itertools.product((0.0, 1.0), (4, 16384), (0, 1), range(0, 400, 5))])


# --- robustness map (notebook 07) ---------------------------------------------------------------

GRID = map_grid(False, complete=True)  # the whole design: the most panels any of its figures gets
CLAIMS = ("residual_helps", "beta_monotone", "depth_residual_helps", "depth_residual_helps_second")
MAP_PROTOCOLS = (*GRID.protocols, BEST)
"""The protocols of the map's cells, as the book's tallies and theory link have them: the grid's own and
the best step (:func:`resgd.robustness.verdicts.cells` adds it). Drawn with the grid's three, Fig. 6.4
read 7.7 px in the book and passed here."""


def _final(protocols=GRID.protocols):
    rows = []
    for protocol, claim, dataset, N, qk in itertools.product(protocols, CLAIMS, GRID.datasets, GRID.sizes, GRID.qk_scales):
        for k, f in enumerate(GRID.steps(protocol)):
            effect = float(RNG.uniform(-3.5, 3.5)) if claim != "beta_monotone" else float(RNG.uniform(-1, 1))
            rows.append({"protocol": protocol, "claim": claim, "dataset": dataset, "N": N, "qk_scale": qk, "fraction": f,
                         "effect": effect, "verdict": ("holds", "fails", "undecided")[k % 3], "horizon": GRID.iterations,
                         "predicted_gain": float(RNG.uniform(-1, 2))})
    return pd.DataFrame(rows)


def _capped(final: pd.DataFrame) -> pd.DataFrame:
    """Every fifth (a) cell at the ∓20 cap of a diverged run, as the book's map has them."""
    final = final.copy()
    rows = final.index[final["claim"] == "residual_helps"][::5]
    final.loc[rows, "effect"] = np.where(np.arange(len(rows)) % 2, 20.0, -20.0)
    return final


def _tally():
    rows = []
    for dataset, protocol, claim, T in itertools.product(GRID.datasets, MAP_PROTOCOLS, CLAIMS, GRID.horizons):
        holds, fails = (int(x) for x in RNG.integers(0, 6, 2))
        rows.append({"dataset": dataset, "protocol": protocol, "claim": claim, "horizon": T, "holds": holds,
                     "fails": fails, "undecided": 12 - holds - fails, "K": 12})
    return pd.DataFrame(rows)


def _readout():
    """40 runs per data set and protocol; every tenth one whose read-out alone diverges (predicted
    inf or 1e200: drawn at the edge) and one diverged run (measured inf: left out)."""
    rows = [{"dataset": d, "protocol": p, "predicted": RNG.uniform(1e-3, 1) if k % 10 else (math.inf, 1e200)[k % 20 == 0],
             "measured": RNG.uniform(1e-3, 1) if k != 7 else math.inf}
            for d, p, k in itertools.product(GRID.datasets, GRID.protocols, range(40))]
    return pd.DataFrame(rows)


def _verdicts():
    """The claims page's full table: two data sets × four protocols, four claims (a) to factorial."""
    rows = []
    for d, p in itertools.product(("jena", "sst2"), ("common", "theory c=0.25", "theory c=0.5", "theory c=1")):
        names = ["residual_helps"] + (["beta_monotone", "depth_residual_helps"] if p in ("common", "theory c=0.5") else []) \
            + (["factorial"] if p == "theory c=0.5" else [])
        rows += [{"dataset": d, "protocol": p, "name": n, "verdict": str(RNG.choice(["holds", "fails", "horizon-dependent", "undecided"])),
                  "decides": p == "theory c=0.5" and n != "depth_residual_helps",
                  "data": "synthetic stand-in" if d == "jena" else "real"} for n in names]
    return pd.DataFrame(rows)


# --- Jena, SST-2 (notebooks 04, 05) --------------------------------------------------------------

@functools.cache
def _experiments():
    """Every arm of the design on the toy data, with the full presets' β and depths (seconds)."""
    import tempfile

    full = settings("jena", False)
    s = settings("toy", True, seeds=len(full.seeds), iterations=10, depth_iterations=10,
                    betas=full.betas, depths=full.depths, v6_seeds=full.v6_seeds, regime_N=4, regime_iterations=10)
    return run_experiments(s, n_jobs=1, cache_dir=tempfile.mkdtemp(prefix="legibility-"))


FIGURES = {
    **{f"experiments.make_figure:{kind}": (lambda kind=kind: make_figure(_experiments(), kind)) for kind in FIGURE_KINDS},
    "theorem1.loss_curves": lambda: tplots.loss_curves(_history()),
    "theorem1.special_case": lambda: tplots.special_case(_special()),
    "theorem1.rate_vs_prediction": lambda: tplots.rate_vs_prediction(_sweep()),
    "theorem1.bound_check": lambda: tplots.bound_check(_sweep()),
    "theorem1.sigma_trajectories": lambda: tplots.sigma_trajectories(_trajectories()),
    "theorem1.distance_vs_radius": lambda: tplots.distance_vs_radius(_sweep()),
    "theorem1.regime_map": lambda: tplots.regime_map(_regime()),
    "collapse.plot_dqk_sweep:per_sample": lambda: cplots.plot_dqk_sweep(_collapse_sweep(), scope="per_sample"),
    "collapse.plot_dqk_sweep:stacked": lambda: cplots.plot_dqk_sweep(_collapse_sweep(), scope="stacked"),
    "collapse.plot_attention_maps": lambda: cplots.plot_attention_maps(_collapse_maps()),
    "collapse.plot_attention_regimes": lambda: cplots.plot_attention_regimes(_collapse_regimes()),
    "collapse.plot_bound:per_sample": lambda: cplots.plot_bound(_collapse_bounds(), scope="per_sample"),
    "collapse.plot_bound:stacked": lambda: cplots.plot_bound(_collapse_bounds(), scope="stacked"),
    "collapse.plot_training": lambda: cplots.plot_training(_collapse_training(), floor=0.3),
    "collapse.plot_training:interaction": lambda: cplots.plot_training(
        _collapse_training(), floor=0.3, floor_label="best linear fit from [x_i, mean x, 1]"),
    **{f"robustness.plot_phase_diagram:{p}": (lambda p=p: rplots.plot_phase_diagram(_final(), GRID, protocol=p, standin=BANNER))
       for p in GRID.protocols},
    "robustness.plot_horizons": lambda: rplots.plot_horizons(_tally(), standin=BANNER),
    "robustness.plot_theory_link": lambda: rplots.plot_theory_link(_final(MAP_PROTOCOLS), standin=BANNER),
    "robustness.plot_theory_link:capped": lambda: rplots.plot_theory_link(_capped(_final(MAP_PROTOCOLS)),
                                                                          standin=BANNER, cap=20.0),
    "robustness.plot_readout_link": lambda: rplots.plot_readout_link(_readout(), standin=BANNER),
    "experiments.plot_verdicts": lambda: eplots.plot_verdicts(_verdicts()),
}


def test_every_figure_function_is_measured():
    """A new figure function of these chapters must be added to :data:`FIGURES` (an experiment
    page's figure: a new kind of :data:`resgd.experiments.pages.FIGURE_KINDS`, measured here by kind)."""
    import inspect

    measured = {name.split(".")[1].split(":")[0] for name in FIGURES}  # module.function[:variant]
    assert {name.split(":")[1] for name in FIGURES if name.startswith("experiments.make_figure:")} == set(FIGURE_KINDS)
    for module in (tplots, cplots, rplots):
        public = {n for n, f in inspect.getmembers(module, inspect.isfunction)
                  if f.__module__ == module.__name__ and not n.startswith("_")}
        assert public <= measured, sorted(public - measured)


@pytest.fixture(autouse=True)
def _style():
    use_style()
    yield
    plt.close("all")


def _labels(fig):
    """Axis labels and titles of every visible axes (colour bars included), the figure's own and its
    free texts, and every legend (a legend drawn over an axis label hides it)."""
    texts = [fig._suptitle, fig._supxlabel, fig._supylabel]
    for ax in fig.axes:
        if ax.get_visible():
            texts += [ax.xaxis.label, ax.yaxis.label, ax.title, ax._left_title, ax._right_title]
    texts += fig.texts  # the data source at the foot, the stand-in banner (and the suptitle again)
    texts = [t for t in dict.fromkeys(texts) if t is not None and t.get_visible() and t.get_text().strip()]
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_visible())]
    return texts + [legend for legend in legends if legend is not None and legend.get_visible()]


def _name(artist) -> str:
    from matplotlib.legend import Legend

    return "legend" if isinstance(artist, Legend) else artist.get_text()


def _data_points(ax) -> np.ndarray:
    """Display coordinates of the data an axes draws inside its frame: line vertices and scatter points."""
    points = [line.get_transform().transform(line.get_xydata()) for line in ax.get_lines()
              if line.get_visible() and len(line.get_xdata())]
    points += [c.get_offset_transform().transform(c.get_offsets()) for c in ax.collections
               if isinstance(c, PathCollection) and c.get_visible() and len(c.get_offsets())]
    if not points:
        return np.empty((0, 2))
    xy = np.concatenate(points)
    xy = xy[np.isfinite(xy).all(axis=1)]
    return xy[[ax.bbox.contains(x, y) for x, y in xy]]


def _covered(fig, renderer) -> list[str]:
    """Legends that lie over data: for each, how many data points of which axes are under it."""
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes)]
    found = []
    for legend in (lg for lg in legends if lg is not None and lg.get_visible()):
        box = legend.get_window_extent(renderer)
        for ax in (a for a in fig.axes if a.get_visible()):
            under = sum(box.contains(x, y) for x, y in _data_points(ax))
            if under:
                found.append(f"a legend covers {under} data point(s) of the axes titled {ax.get_title()!r}")
    return found


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figure_reads_at_page_width_and_its_labels_do_not_collide(name):
    """Each figure drawn once: saved at most MAX_WIDTH_PX wide, no text under MIN_TEXT_PX at the page
    width, no two axis labels or titles overlapping (the review found colour-bar labels running
    into each other and two x labels overlapping), and no legend over data points (the review found
    legends over the curves of Figs. 4.9, 5.9 and the points of 4.11, 5.11)."""
    fig = FIGURES[name]()
    width, smallest = _width_and_smallest_text(fig)
    assert width <= MAX_WIDTH_PX, f"{name}: {width} px wide"
    assert smallest >= MIN_TEXT_PX, f"{name}: smallest text {smallest:.1f} px at page width ({width} px saved)"
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(_name(t), t.get_window_extent(renderer)) for t in _labels(fig)]
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        assert not box_a.overlaps(box_b), f"{name}: {a!r} overlaps {b!r}"
    assert not _covered(fig, renderer), f"{name}: {_covered(fig, renderer)}"
    assert _beta_lines_apart(fig), f"{name}: β lines told apart by colour alone, or two alike"


def _width_and_smallest_text(fig) -> tuple[int, float]:
    """:func:`saved_width_px` and :func:`smallest_text_px` of ``fig``, the figure saved once: the
    second reads the width the first measured (each save renders the whole figure twice, most of
    this file's time) instead of saving it again unchanged."""
    from unittest import mock

    from resgd.plots import style

    width = saved_width_px(fig)
    with mock.patch.object(style, "saved_width_px", lambda f: width if f is fig else saved_width_px(f)):
        return width, smallest_text_px(fig, page_px=PAGE_PX)


def _beta_lines_apart(fig) -> bool:
    """Every line drawn for one β (labelled "β = …") carries a marker, and no two β of one axes share
    colour and marker (:func:`resgd.plots.style.beta_styles`; Figs. 4.3, 5.3 drew five β in near-identical
    colours, without markers)."""
    for ax in fig.axes:
        lines = [line for line in ax.get_lines() if str(line.get_label()).startswith("β = ")]
        if any(line.get_marker() in (None, "", " ", "None") for line in lines):
            return False
        looks = {(str(line.get_label()).split()[2], tuple(matplotlib.colors.to_rgba(line.get_color())), line.get_marker())
                 for line in lines}
        if len({look[1:] for look in looks}) != len({look[0] for look in looks}):
            return False
    return True


def test_beta_styles_order_the_betas_and_give_each_a_marker():
    """One sequential palette (lightness grows with β, neighbours clearly apart) and a distinct marker
    per β, whatever order the β come in."""
    from resgd.plots.style import beta_styles

    styles = beta_styles([1.0, 0.0, 0.5, 0.25, 0.75, 0.5])
    assert list(styles) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert len({s["marker"] for s in styles.values()}) == 5
    lightness = [np.dot(matplotlib.colors.to_rgb(s["color"]), (0.299, 0.587, 0.114)) for s in styles.values()]
    assert lightness == sorted(lightness) and min(np.diff(lightness)) > 0.05
    assert beta_styles([0.0, 1.0]) == beta_styles([1.0, 0.0])


def test_a_log_axis_exponent_counts_at_the_size_it_is_drawn():
    """10⁻³ on a log axis is mathtext: its exponent is drawn at 0.7 of the tick label's size, and the
    measure reads that size (the font size alone passed nine figures whose exponents read under 8 px)."""
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set_title("t", fontsize=10)
    ax.tick_params(labelsize=10)
    ax.plot([1e-3, 1e-1], [1, 2])
    plain = smallest_text_px(fig)
    ax.set_xscale("log")
    assert smallest_text_px(fig) == pytest.approx(0.7 * plain)


def test_a_legend_over_the_data_is_found():
    """The legend check finds a legend drawn over points, and not one beside the axes."""
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.scatter(np.linspace(0, 1, 50), np.linspace(1, 0, 50), label="points")
    ax.legend(loc="upper right", bbox_to_anchor=(0.6, 0.6))
    fig.canvas.draw()
    assert _covered(fig, fig.canvas.get_renderer())
    legend_outside(ax)
    fig.canvas.draw()
    assert not _covered(fig, fig.canvas.get_renderer())


def test_smallest_text_px_scales_wide_figures_down():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set_title("t", fontsize=10)
    ax.tick_params(labelsize=10)
    narrow = smallest_text_px(fig)
    assert narrow == pytest.approx(10 / 72 * plt.rcParams["figure.dpi"])  # shown at its own size
    fig.set_size_inches(20, 3)
    assert smallest_text_px(fig) < narrow / 2  # squeezed into the column
    ax.set_xlabel("tiny", fontsize=2)
    assert smallest_text_px(fig) < 2 / 72 * plt.rcParams["figure.dpi"]
