"""The numbers glued into pages 4 and 5 (``<dataset>-<key>`` in the page's text), read from one
data set's :class:`~resgd.experiments.results.ExperimentResults`.

Why a module of its own: every number a page's prose states comes from this one function, so a
sentence and its number cannot drift apart, and the glue keys (:data:`SLUGS` per protocol) are
defined in one place.
"""

from __future__ import annotations

import math
from typing import Any

from ..claim_registry import BETA_MONOTONE, DEPTH_RESIDUAL_HELPS, FACTORIAL, RESIDUAL_HELPS, claim
from ..words import agree
from .claims import of_seeds
from .experiment_settings import TWIN_NAMES
from .page_tables import horizon_table, replay_table, twins_table
from .results import PRIMARY, ExperimentResults
from .step_size import THEORY_FACTORS, THEORY_PRIMARY

SLUGS = {"common": "common", f"theory c={THEORY_PRIMARY:g}": "theory",
         **{f"theory c={c:g}": f"theory-{'low' if c < THEORY_PRIMARY else 'high'}" for c in THEORY_FACTORS if c != THEORY_PRIMARY}}
"""Protocol label → the short name in glue keys (``<dataset>-<slug>-...``)."""


def page_numbers(results: ExperimentResults, elapsed: float = math.nan) -> dict[str, Any]:
    """Every number the data set's page glues, under keys without the data-set prefix (the page
    glues ``<dataset>-<key>``): settings, step sizes, and per protocol (:data:`SLUGS`) each
    claim's verdict and the numbers behind it, the factorial and the twins' losses."""
    s = results.settings
    out: dict[str, Any] = {"source": results.source_label, "N": s.N, "n": s.n, "T": s.iterations,
                           "depth-N": s.depth_N, "depth-T": s.depth_iterations, "seeds": len(s.seeds),
                           "interval-seeds": len(s.interval_seeds),
                           "mode": s.mode, "elapsed": float(elapsed)}
    lr = results.lr
    for experiment in ("beta", "depth"):
        out[f"lr-common-{experiment}"] = float(lr.loc[(lr["protocol"] == "common") & (lr["experiment"] == experiment), "lr"].iloc[0])
    theory = lr[(lr["protocol"] == PRIMARY) & (lr["experiment"] == "beta")].set_index("beta")["lr"]
    out["lr-theory-range"] = f"{theory.min():.3g} to {theory.max():.3g}"
    for v in results.verdicts():
        slug = SLUGS[v.protocol]
        key = claim(v.name).key
        out[f"{slug}-{key}"] = v.outcome
        out[f"{slug}-{key}-detail"] = v.detail
        if v.numbers.get("rule") == "interval" or (key == FACTORIAL.key and v.numbers["attention"].get("rule") == "interval"):
            part = v.numbers["attention"] if key == FACTORIAL.key else v.numbers
            out[f"{slug}-{key}-level"] = 100 * float(part["design_level"])  # the arm's level, known before any run
        if key == RESIDUAL_HELPS.key:
            out[f"{slug}-{key}-won"] = of_seeds(v.numbers["faster_in"], v.numbers["left"])
            out[f"{slug}-{key}-chance"] = float(v.numbers["chance"])
        if key == BETA_MONOTONE.key:
            out[f"{slug}-{key}-rho"] = float(v.numbers["spearman"])
            out[f"{slug}-{key}-shape"] = str(v.numbers["shape"])
        if key == FACTORIAL.key:
            out[f"{slug}-{key}-carried"] = v.numbers["carried_by"]
        if key == DEPTH_RESIDUAL_HELPS.key:
            out[f"{slug}-{key}-positive"] = of_seeds(v.numbers["positive"], v.numbers["left"])
            out[f"{slug}-{key}-threshold"] = "—" if v.numbers["threshold"] is None else int(v.numbers["threshold"])
    replay = replay_table(results)
    out["replay-changed"], out["replay-K"] = int(replay["changed"].sum()), int(len(replay))
    out["replay-first-differs"] = int((replay["first to ½Φ(0) by T (replayed)"] != replay["rate (deciding)"]).sum())
    horizons = horizon_table(results)
    out["horizon-dependent"] = int((horizons["verdict"] == "horizon-dependent").sum())
    out["horizon-K"] = int(len(horizons))
    out["descriptive"] = int((~horizons["decides"]).sum())
    out["horizon-dependent-are"] = agree(out["horizon-dependent"], "is", "are")  # "1 is horizon-dependent"
    out["descriptive-are"] = agree(out["descriptive"], "is", "are")
    theory_runs = results.per_run()
    theory_runs = theory_runs[(theory_runs["twin_init"] == "matched") & theory_runs["protocol"].str.startswith("theory")]
    out["theory-runs"] = int(len(theory_runs))
    out["theory-left"] = int(theory_runs["left_regime"].sum())
    out["theory-left-diverged"] = int((theory_runs["left_regime"] & theory_runs["diverged"]).sum())
    twins = twins_table(results)
    for _, row in twins.iterrows():
        model = {"residual": "res", **{name: slug for slug, name in zip(("twin", "living", "dead"), TWIN_NAMES.values())}}[row["model"]]
        stem = f"{SLUGS[row['protocol']]}-L{int(row['n_layers'])}-{model}"
        out[f"{stem}-loss0"], out[f"{stem}-lossT"] = float(row["loss_0"]), float(row["loss_T"])
    per_run = results.per_run()
    decided = per_run[per_run["twin_init"] == "matched"]
    out["stalled"] = int((decided["outcome"] == "stalled").sum())
    out["diverged"] = int((decided["outcome"] == "diverged").sum())
    out["runs"] = int(len(per_run))
    link = results.readout_link().iloc[0]  # all the page's runs
    out["readout-runs"] = int(link["runs"])
    for key in ("spearman", "critical", "detectable"):
        out[f"readout-{key}"] = float(link[key])
    return out
