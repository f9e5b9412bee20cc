"""The book's findings in plain sentences, each built from the verdicts it states (never typed by hand).

Why: a reader of the landing page wants the conclusion before the table; a sentence typed by hand
goes stale when a rerun changes a verdict. Each sentence here is a function of the verdicts table of
:func:`resgd.experiments.verdict_files.load_verdicts` and names the protocol it speaks of.
"""

from __future__ import annotations

import pandas as pd

from ..claim_registry import BETA_MONOTONE, DEPTH_RESIDUAL_HELPS, FACTORIAL, HORIZON, RESIDUAL_HELPS
from ..dataset_registry import paper
from ..words import count_noun
from .design import MIN_INTERVAL_SEEDS

NAMES = {d.name: d.short for d in paper()}
"""Data set → its name in the sentences, in the book's order."""
A_WORDS = RESIDUAL_HELPS.words
"""Claim (a)'s words for holds, fails, undecided (the single-layer model with the residual connection is …)."""
B_WORDS = BETA_MONOTONE.words
"""Claim (b)'s words for holds, fails, undecided, horizon-dependent (:data:`resgd.claim_registry.BETA_MONOTONE`)."""
THEORY = "theory c=0.5"


def _outcomes(verdicts: pd.DataFrame, name: str, protocol: str) -> dict[str, str]:
    rows = verdicts[(verdicts["name"] == name) & (verdicts["protocol"] == protocol)]
    return dict(zip(rows["dataset"], rows["verdict"]))


def _per_dataset(outcomes: dict[str, str], holds: str, fails: str, undecided: str,
                 horizon: str = f"faster or not {HORIZON}") -> str:
    """One clause for all data sets when they agree, else one per data set."""
    words = {"holds": holds, "fails": fails, "undecided": undecided, "horizon-dependent": horizon}
    present = [d for d in NAMES if d in outcomes]
    if present and len({outcomes[d] for d in present}) == 1:
        both = "either data set" if outcomes[present[0]] == "undecided" else "both data sets"
        return f"{words[outcomes[present[0]]]} on {both if len(present) > 1 else NAMES[present[0]]}"
    return " and ".join(f"{words[outcomes[d]]} on {NAMES[d]}" for d in present)


def _shapes(verdicts: pd.DataFrame, protocol: str) -> str:
    """'; the median rate over seeds rises with β on Jena and …' (the shape, claim (b)'s rows)."""
    if "shape" not in verdicts.columns:
        return ""
    rows = verdicts[(verdicts["name"] == BETA_MONOTONE.name) & (verdicts["protocol"] == protocol) & (verdicts["shape"] != "")]
    parts = [f"{r.shape} on {NAMES.get(r.dataset, r.dataset)}" for r in rows.itertuples()]
    return "; the median rate over seeds " + " and ".join(parts) if parts else ""


def _descriptive(verdicts: pd.DataFrame, name: str, protocol: str) -> str:
    """' (descriptive: n seeds, fewer than a verdict needs)' when the check's arm cannot decide, else ''."""
    rows = verdicts[(verdicts["name"] == name) & (verdicts["protocol"] == protocol)]
    if "decides" not in rows.columns or rows["decides"].all():
        return ""
    return f" (descriptive: {count_noun(int(rows['seeds_in_arm'].min()), 'seed')}, fewer than the {MIN_INTERVAL_SEEDS} a verdict needs)"


def sentences(verdicts: pd.DataFrame) -> list[str]:
    """Five sentences: claims (a), (b), (c) and the factorial under the theorem's step, then ``common``."""
    out = [
        "Under the step size Theorem 1's guarantee uses (half of one over the loss's measured curvature "
        "at each run's starting weights: μ = c/L̂ with c = 0.5), a single-layer model with "
        "the residual connection is " + _per_dataset(_outcomes(verdicts, RESIDUAL_HELPS.name, THEORY), *A_WORDS) + ".",
        "Under the same step, a larger residual weight β " + _per_dataset(
            _outcomes(verdicts, BETA_MONOTONE.name, THEORY), *B_WORDS) + _shapes(verdicts, THEORY) + ".",
        "With 2, 6 and 10 layers, models with residual connections against the same models without them, "
        "started with signals of the same size (matched twins)"
        + _descriptive(verdicts, DEPTH_RESIDUAL_HELPS.name, THEORY) + ": "
        + _per_dataset(_outcomes(verdicts, DEPTH_RESIDUAL_HELPS.name, THEORY), *DEPTH_RESIDUAL_HELPS.words) + ".",
    ]
    rows = verdicts[(verdicts["name"] == FACTORIAL.name) & (verdicts["protocol"] == THEORY)]
    if len(rows):
        out.append("Which skip carries the effect at one layer: " + "; ".join(
            f"on {NAMES.get(r.dataset, r.dataset)}, {r.skips}" for r in rows.itertuples())
                   + " (each skip tested on its own, corrected for testing two: Holm's method).")
    common_a = _outcomes(verdicts, RESIDUAL_HELPS.name, "common")
    common_b = _outcomes(verdicts, BETA_MONOTONE.name, "common")
    common_c = _outcomes(verdicts, DEPTH_RESIDUAL_HELPS.name, "common")
    out.append("With one step size shared by every model of a comparison (the common protocol: half the largest step "
               "on a grid at which the β = 1 model learns), a single-layer model with the residual connection is "
               + _per_dataset(common_a, *A_WORDS)
               + ", and a larger β " + _per_dataset(common_b, *B_WORDS)
               + _shapes(verdicts, "common") + "; residual models at depth"
               + _descriptive(verdicts, DEPTH_RESIDUAL_HELPS.name, "common") + " are "
               + _per_dataset(common_c, *DEPTH_RESIDUAL_HELPS.words[:2], "not decidedly faster") + ".")
    return out
