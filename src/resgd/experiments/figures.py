"""Which figure of pages 4 and 5 is drawn from which table: figure kind → drawing function.

Why a module of its own: each figure kind picks its rows of an :class:`~resgd.experiments.results.ExperimentResults`
(which sweep, which protocol, which twins) and hands a table to one function of
:mod:`resgd.plots.experiments`; :data:`DRAWERS` names every pair explicitly, so a plotting
function's callers are found by searching for its name. The study's figure convention
(``FIGURE_KINDS``, ``figure_name``, ``make_figure``) is re-exported by :mod:`resgd.experiments.study`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pandas as pd

from ..claim_registry import BETA_MONOTONE, CLAIMS, DEPTH_RESIDUAL_HELPS, FACTORIAL, RESIDUAL_HELPS
from ..validation import ConfigError, check_choice
from .results import PRIMARY, ExperimentResults
from .tables import conditioning_curves, loss_curves

DECISIONS = {c.decision_figure: c.name for c in CLAIMS}
"""Figure kind → the claim whose deciding statistic it shows (beside that claim's curve figure)."""


def _without_plain_init(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows the figures draw: every depth-sweep row (its twins are figure rows), and the matched
    runs of the other sweeps (the β sweep's plain-init row is a table:
    :func:`resgd.experiments.page_tables.beta_init_table`)."""
    return frame[(frame["experiment"] == "depth") | (frame["twin_init"] == "matched")]


def _primary(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the theorem's primary step, factorial left out."""
    return frame[(frame["protocol"] == PRIMARY) & (frame["experiment"] != "factorial")]


# The plotting module (matplotlib, seaborn) is imported when a figure is drawn, not with the study.

def _residual(results: ExperimentResults):
    from ..plots.experiments import plot_residual

    runs = _without_plain_init(results.runs)
    part = runs[(runs["experiment"] == "beta") & runs["beta"].isin([0.0, 1.0])]
    return plot_residual(loss_curves(part), dataset=results.settings.dataset)


def _beta(results: ExperimentResults):
    from ..plots.experiments import plot_beta_sweep

    runs = _without_plain_init(results.runs)
    part = runs[(runs["experiment"] == "beta") & runs["protocol"].isin(["common", PRIMARY])]
    return plot_beta_sweep(loss_curves(part), dataset=results.settings.dataset)


def _depth(results: ExperimentResults):
    from ..plots.experiments import plot_depth

    runs = _without_plain_init(results.runs)
    return plot_depth(loss_curves(runs[runs["experiment"] == "depth"]), dataset=results.settings.dataset)


def _factorial(results: ExperimentResults):
    from ..plots.experiments import plot_factorial

    runs = _without_plain_init(results.runs)
    return plot_factorial(loss_curves(runs[runs["experiment"] == "factorial"]), dataset=results.settings.dataset)


def _conditioning(results: ExperimentResults):
    from ..plots.experiments import plot_conditioning

    primary = _primary(_without_plain_init(results.runs))
    return plot_conditioning(conditioning_curves(primary), dataset=results.settings.dataset)


def _rate(results: ExperimentResults):
    from ..plots.experiments import plot_rate

    return plot_rate(_primary(_without_plain_init(results.per_run())), dataset=results.settings.dataset)


def _readout(results: ExperimentResults):
    from ..plots.robustness import plot_readout_link
    from ..plots.style import banner_text

    pred = results.readout()
    pred = pred.assign(dataset=results.settings.dataset, protocol=pred["experiment"].map(
        {"beta": "L = 1, β sweep", "factorial": "L = 1, factorial", "depth": "depth sweep"}) + ", " + pred["protocol"])
    return plot_readout_link(pred, standin=banner_text(_without_plain_init(results.runs)))


def _decision(results: ExperimentResults, claim: str):
    from ..plots.experiments import label_source, plot_decision
    from ..plots.style import banner_text, label_standin

    runs = results.runs
    fig = plot_decision(results.verdicts(), claim, dataset=results.settings.dataset)
    label_standin(fig, banner_text(runs))
    label_source(fig, runs)
    return fig


def _speed(results: ExperimentResults, kind: str):
    from ..plots.experiments import label_source
    from ..plots.speed import ladder_pairs, path_check
    from ..plots.style import banner_text, label_standin
    from .speed import OWN

    speed = results.speed
    if speed is None:
        raise ConfigError(f"figure {kind!r}: design v6 was not run for {results.settings.dataset!r} (no v6 seeds)")
    dataset = results.settings.dataset
    fig = ladder_pairs(speed.ladder(), OWN, dataset) if kind == "v6-pairs" else path_check(speed.path(), dataset)
    label_standin(fig, banner_text(speed.runs))
    label_source(fig, speed.runs)
    return fig


SPEED_KINDS = ("v6-pairs", "v6-path")
"""Design v6's figures: who reaches each target first (own step), and the theorem's path step."""

DRAWERS: dict[str, Callable[[ExperimentResults], object]] = {
    RESIDUAL_HELPS.figure: _residual,
    BETA_MONOTONE.figure: _beta,
    DEPTH_RESIDUAL_HELPS.figure: _depth,
    FACTORIAL.figure: _factorial,
    "conditioning": _conditioning,
    "rate": _rate,
    "readout": _readout,
    **{kind: partial(_decision, claim=claim) for kind, claim in DECISIONS.items()},
    **{kind: partial(_speed, kind=kind) for kind in SPEED_KINDS},
}
"""Figure kind → the function that draws it from an :class:`~resgd.experiments.results.ExperimentResults`."""
FIGURE_KINDS = tuple(DRAWERS)


def figure_name(kind: str, dataset: str) -> str:
    """File name (without extension) of a figure: ``<dataset>_<kind>``."""
    check_choice("figure kind", kind, FIGURE_KINDS)
    return f"{dataset}_{kind}"


def figure_kinds(results: ExperimentResults) -> tuple[str, ...]:
    """The kinds ``results`` can draw: every kind, design v6's only where it was run."""
    return tuple(k for k in FIGURE_KINDS if results.speed is not None or k not in SPEED_KINDS)


def make_figure(results: ExperimentResults, kind: str):
    """The figure ``kind`` ∈ FIGURE_KINDS of ``results``, drawn by :mod:`resgd.plots.experiments`:
    Φ(t)/Φ(0) curves per protocol (residual, beta, depth, factorial), the conditioning of Z⁽ᵗ⁾
    and the rate against σ_min²/σ_max²(Z⁰) under the theorem's protocol."""
    check_choice("kind", kind, FIGURE_KINDS)
    return DRAWERS[kind](results)
