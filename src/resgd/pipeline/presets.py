"""Every size and setting of the book, quick and full, in one place.

The notebooks and ``python -m resgd reproduce`` read these same functions (through each
study's ``preset``/``settings``), so a figure made from the command line matches the book's.
``quick`` is the smoke build for CI and tests (every code path at tiny sizes, the whole book in
about two and a half minutes of notebooks on 2 cores); full is what the book shows. Every value here that the
paper does not fix is a companion's choice, listed in ``book/choices.md``.
"""

from __future__ import annotations

from typing import Any

from .. import dataset_registry as registry
from ..core.model import LOGIT_SCALES
from ..validation import ConfigError, check_choice

# --------------------------------------------------------------------------- Theorem 1 (01, 02)


def theory(quick: bool) -> dict:
    """Sizes of every computation in ``01_setup`` and ``02_theorem1`` (quick: the smoke build; full: the book).

    Both sweep at least 50 configurations; full adds seeds, d_qk values, β values and iterations
    (quick runs a third of full's iterations: it shows every figure, not the published numbers).
    """
    common = {
        "N": 4, "n": 4, "d": 32, "m": 32,            # N·n = 16 ≤ d = 32: the realizable regime
        "logit_scale": "linear",                      # uniform attention as d_qk grows (collapse)
        "ffn_rel": 0.25, "out_scale": 0.1,            # small FFN and read-out at init (theorem's regime)
        "target_scale": 0.1, "x_kind": "orthogonal", "targets": "gaussian",
        "lr_factor": 0.5, "alpha_factor": 0.25, "window": (0.5, 1.0),
        "base": {"beta": 0.3, "d_qk": 16, "init_scale": 1.0},
        "special": {"N": 8, "n": 6, "d": 8, "d_qk": 8, "m": 16, "beta": 0.3, "iterations": 150},  # tall: N·n = 48 > d
        "n_jobs": 2,
        # the hypotheses along the path (theorem1/path.py): GD stops this many times to test them;
        # power iterations of the Hessian norm at each stop
        "checkpoints": 3, "hess_iterations": 10,
    }
    # The regime map (theorem1/regime_map.py), pre-registered: fixed before its first run. The whole
    # grid is 5 target scales × 2 read-out scales × 2 Q/K scales × 3 step factors × 3 seeds = 180
    # points (full mode, `python -m resgd reproduce --only theorem1`); the book runs seed 0 (60
    # points); quick mode (the smoke build: every figure, fewer iterations) runs 3 target scales × 2 × 2
    # × 2 step factors, seed 0 (24 points).
    regime = {"base": {"beta": 0.3, "d_qk": 16, "init_scale": 1.0}, "out_scales": (0.1, 1.0), "qk_rels": (1.0, 4.0)}
    if quick:
        regime |= {"target_scales": (0.1, 1.0, 10.0), "lr_factors": (0.5, 2.0), "seeds": (0,), "book_seeds": (0,)}
        return {**common, "betas": (0.0, 0.1, 0.3, 1.0), "d_qks": (1, 16, 256), "init_scales": (0.5, 1.0, 2.0),
                "seeds": (0, 1), "iterations": 100, "setup_iterations": 60, "trajectory_iterations": 100,
                "record_every": 5, "regime": regime, "special": {**common["special"], "iterations": 60}}
    regime |= {"target_scales": (0.1, 0.3, 1.0, 3.0, 10.0), "lr_factors": (0.5, 1.0, 2.0), "seeds": (0, 1, 2),
               "book_seeds": (0,)}
    return {**common, "betas": (0.0, 0.1, 0.3, 0.6, 1.0), "d_qks": (1, 4, 16, 64, 256), "init_scales": (0.5, 1.0, 2.0),
            "seeds": (0, 1, 2, 3), "iterations": 600, "setup_iterations": 300, "trajectory_iterations": 600,
            "record_every": 5, "regime": regime}


# --------------------------------------------------------------------------- rank collapse (03)

DQK_GRID = tuple(2**k for k in range(15))  # 1 … 16384
QK_SCALES = (1.0, 4.0)
INPUT_N, INPUT_TOKENS, INPUT_D, INPUT_SEED = 16, 16, 8, 1234
"""The collapse sweep's defaults (companion's choices), shared by :func:`collapse` and :mod:`resgd.collapse.study`."""


def collapse(quick: bool) -> dict:
    """Every size of ``03_rank_collapse``; both modes use the same d_QK grid 1 … 16384 and the same
    input, ``quick`` (the smoke build) uses fewer seeds and fewer GD iterations."""
    common_input = {"N": INPUT_N, "n": INPUT_TOKENS, "d": INPUT_D, "input_seed": INPUT_SEED}
    sweep = {
        "d_qks": DQK_GRID,
        "logit_scales": LOGIT_SCALES,
        "qk_scales": QK_SCALES,
        "betas": (0.0, 0.5, 1.0),
        "seeds": tuple(range(2 if quick else 10)),
        **common_input,
    }
    maps = {"d_qks": (4, 16384), "logit_scales": LOGIT_SCALES, "qk_scales": QK_SCALES, "seed": 0, "sample": 0, **common_input}
    training = {
        "d_qks": (4, 16384),
        "betas": (0.0, 1.0),
        "seeds": tuple(range(2 if quick else 5)),
        "logit_scale": "linear",
        "qk_scale": 1.0,
        "m": 32,
        "lr": 0.01,
        "iterations": 100 if quick else 1500,
        "record_every": 20 if quick else 100,
        "target": "linear",
        # a second comparison on a target the skip path cannot fit (collapse/training.py), pre-registered
        # with its reading rule (speed_verdicts) before its first run
        "interaction_target": "interaction",
        **common_input,
    }
    return {"quick": bool(quick), "sweep": sweep, "maps": maps, "training": training}


# --------------------------------------------------------------------------- Jena / SST-2 (04, 05)


_EXPERIMENT_BASE = dict(
    # the seeds of the arms the theorem's protocol decides at L = 1 with the interval rule
    # (experiments.design.INTERVAL_ARMS): 8 in both modes, the first ones shared with `seeds`
    interval_seeds=tuple(range(8)),
    betas=(0.0, 0.25, 0.5, 0.75, 1.0),
    depths=(2, 6, 10),
    lr_grid=(1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001, 3e-4, 1e-4, 3e-5),
    probe_iterations=30,
    safety=0.5,
    reduction="mean",
    record_every=10,
    target_fraction=0.5,
    qk_scale=1.0,
    out_scale=1.0,
    branch_scale="1/sqrt(L)",
    twin_init="matched",
    start="equal",
    equal_out_scale=0.01,
    activation="relu",
    logit_scale="sqrt",
    dtype="float64",
)

STANDIN_SIZE = {"N": 64, "iterations": 300}
"""The Jena stand-in row's size (:func:`resgd.experiments.sources.standin_settings`), never more than the
page's own: fixed here, apart from the quick preset (which it equalled until quick became a smoke build)."""


def experiments(dataset: str, quick: bool) -> dict[str, Any]:
    """The sizes and settings of one data set's experiments in quick or full mode.

    Keys: ``N`` (training samples), ``n`` (tokens), ``n_test``, ``iterations``, ``seeds``,
    ``betas``, ``depths``, ``widths`` (``d_qk``, ``m``) and the rest of
    :class:`resgd.experiments.configuration.Settings`. The common values are here, each data set's sizes in
    its record (:data:`resgd.dataset_registry.Dataset.sizes`).
    """
    check_choice("dataset", dataset, registry.names())
    if not isinstance(quick, bool):
        raise ConfigError(f"quick: expected True or False, got {quick!r}")
    sizes = registry.dataset(dataset).sizes
    if not sizes:
        raise ConfigError(f"dataset {dataset!r}: its record (resgd.dataset_registry) has no experiment sizes")
    values = {**_EXPERIMENT_BASE, **sizes["quick" if quick else "full"]}
    values["widths"] = dict(values["widths"])
    return {"dataset": dataset, "quick": quick, **values}
