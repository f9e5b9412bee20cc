"""How often each verdict rule of the book decides when there is no effect at all.

Why: a verdict's false-decision rate is a property of the rule as the book applies it (seed counts,
the union of tests inside one verdict, the correction), not of one test inside it. So every check
of :mod:`resgd.experiments.claims` is run, as the pages run it, on per-run tables whose rates are
draws with no effect (no configuration is faster than another), and the fractions of "holds" and
"fails" are counted. The runs of one seed share data and weights, so each simulated seed draws one
effect per configuration shared by its depths: the rates of one configuration at its depths have
correlation ``rho`` (:data:`CORRELATIONS`: 0, 0.5, 1), and so have the seed's differences at its
depths. The rules no longer used (:data:`REPLAYED`) are simulated beside the design's (``replayed``).
The design promises at most :data:`~resgd.experiments.design.ALPHA` in each direction;
``tests/test_null_rates.py`` checks it and the claims page shows the table.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..claim_registry import BETA_MONOTONE, CLAIMS, DEPTH_RESIDUAL_HELPS, FACTORIAL, RESIDUAL_HELPS
from ..pipeline import stored_tables
from .claims import CHECKS, FACTORIAL_RULE, check_depth_pooled
from .design import ALPHA, FACTORIAL_CELLS

RULES = (
    # (check, rule, what the per-run table holds)
    (RESIDUAL_HELPS.null_check, "interval", RESIDUAL_HELPS.experiment),
    (RESIDUAL_HELPS.null_check, "sign", RESIDUAL_HELPS.experiment),
    (BETA_MONOTONE.null_check, "interval", BETA_MONOTONE.experiment),
    (DEPTH_RESIDUAL_HELPS.null_check, "interval", DEPTH_RESIDUAL_HELPS.experiment),
    (DEPTH_RESIDUAL_HELPS.null_check, "sign", DEPTH_RESIDUAL_HELPS.experiment),
    (FACTORIAL.null_check, "interval", FACTORIAL.experiment),
)
POOLED = f"{DEPTH_RESIDUAL_HELPS.label} earlier rule: pooled (L, seed) pairs"
REPLAYED = ((POOLED, "sign", DEPTH_RESIDUAL_HELPS.experiment),
            (f"{BETA_MONOTONE.label} earlier rule: Spearman of the median rates", "sign", BETA_MONOTONE.experiment))
"""Rules no longer used, simulated to show why they were replaced (never checked against the bound):
claim (c)'s pooled sign test (v4 replaced it), and claim (b)'s Spearman bound on the median rates
over 3 seeds (used by no arm since v5: every five-β sweep has 8 seeds and the interval rule)."""
CORRELATIONS = (0.0, 0.5, 1.0)


def _table(rng: np.random.Generator, experiment: str, seeds: int, betas, depths, rho: float = 0.0) -> pd.DataFrame:
    if experiment == "beta":
        points = [(b, b, 1) for b in betas]
    elif experiment == "depth":
        points = [(b, b, L) for L in depths for b in (1.0, 0.0)]
    else:
        points = [(b, f, 1) for b, f in FACTORIAL_CELLS]
    rows = [(experiment, "null", b, f, L, s, "matched") for b, f, L in points for s in range(seeds)]
    table = pd.DataFrame(rows, columns=["experiment", "protocol", "beta", "beta_ffn", "n_layers", "seed", "twin_init"])
    shared = {key: rng.standard_normal() for key in set(zip(table["beta"], table["beta_ffn"], table["seed"]))}
    own = rng.standard_normal(len(table))
    common = np.array([shared[key] for key in zip(table["beta"], table["beta_ffn"], table["seed"])])
    table["rate"] = math.sqrt(rho) * common + math.sqrt(1.0 - rho) * own
    return table


def _check(name: str, rule: str, table: pd.DataFrame):
    """The verdict of the check called ``name`` in :data:`RULES` or :data:`REPLAYED` on ``table``
    (the replayed Spearman bound of (b) is (b)'s own check under the sign rule)."""
    if name == POOLED:
        return check_depth_pooled(table)
    by_label = {c.label: c for c in CLAIMS if c.label}
    claim = next((c for c in CLAIMS if c.null_check == name), None) or by_label[name.split(" ", 1)[0]]
    return CHECKS[claim.name](table, rule=rule)


def null_rates(n_sets: int = 5000, *, seeds: int = 3, interval_seeds: int = 8,
               betas=(0.0, 0.25, 0.5, 0.75, 1.0), depths=(2, 6, 10), correlations=CORRELATIONS, seed: int = 0) -> pd.DataFrame:
    """Per rule (the design's :data:`RULES` and the :data:`REPLAYED` ones) and within-seed
    correlation: the fraction of ``n_sets`` no-effect data sets on which the verdict says "holds" and
    "fails", with the Monte Carlo standard error and the design's bound :data:`ALPHA`."""
    chunks = []
    for replayed, rules in ((False, RULES), (True, REPLAYED)):
        for name, rule, experiment in rules:
            n = interval_seeds if rule == "interval" else seeds
            for rho in (correlations if experiment == "depth" else correlations[:1]):
                chunks.append({"check": name, "rule": rule, "experiment": experiment, "seeds": n, "correlation": rho,
                               "replayed": replayed, "sets": n_sets, "betas": list(betas), "depths": list(depths),
                               "seed": seed, "stream": len(chunks)})
    return pd.concat(stored_tables.chunks("claims/null-rates", chunks), ignore_index=True)


def null_chunk(params: dict) -> pd.DataFrame:
    """One stored chunk of :func:`null_rates` (:mod:`resgd.pipeline.stored_tables`): one rule at one
    correlation, its data sets drawn from their own stream (``seed``, ``stream``), so the table is
    the same whichever chunks come from the store."""
    rng = np.random.default_rng([params["seed"], params["stream"]])
    name, rule, experiment, n_sets = params["check"], params["rule"], params["experiment"], params["sets"]
    counts = {"holds": 0, "fails": 0}
    for _ in range(n_sets):
        table = _table(rng, experiment, params["seeds"], params["betas"], params["depths"], params["correlation"])
        outcome = _check(name, rule, table).outcome
        if outcome in counts:
            counts[outcome] += 1
    rows = []
    for direction, count in counts.items():
        p = count / n_sets
        rows.append({"check": name, "rule": FACTORIAL_RULE if experiment == FACTORIAL.experiment else rule,
                     "seeds": params["seeds"], "correlation": params["correlation"], "direction": direction, "rate": p,
                     "se": math.sqrt(max(p * (1 - p), 1e-12) / n_sets), "bound": ALPHA, "sets": n_sets,
                     "replayed": params["replayed"]})
    return pd.DataFrame(rows)


def book_null_rates(quick: bool) -> pd.DataFrame:
    """The claims page's table: 800 data sets per rule and 3 seeds for the sign rules in full mode
    (100 and 2 in quick mode, the smoke build: every rule simulated, not to the table's precision)."""
    return null_rates(100, seeds=2) if quick else null_rates(800, seeds=3)


def null_rates_path(mode: str, directory: str | os.PathLike | None = None) -> Path:
    """Where the claims page writes its table: ``<results dir>/claims/null_rates_<mode>.csv``."""
    from ..pipeline.cache import resolve_results_dir

    return resolve_results_dir(directory) / "claims" / f"null_rates_{mode}.csv"


def write_null_rates(table: pd.DataFrame, mode: str, directory: str | os.PathLike | None = None) -> Path:
    """Write the claims page's table atomically (``tests/test_null_rates.py`` checks the book's own)."""
    from ..infra.atomic import write_with

    return write_with(null_rates_path(mode, directory), lambda tmp: table.to_csv(tmp, index=False))
