"""The tables pages 4 and 5 show beside their figures, each read from one data set's
:class:`~resgd.experiments.results.ExperimentResults`: the twins, the steps, the measure replay,
the β sweep's init, the horizons and the regime.

Why a module of its own: these tables are what a reader checks a verdict against; they only read
the runs (no training, no plotting), and :mod:`resgd.experiments.page_numbers` glues numbers from
some of them into the page's text.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..claim_registry import DEPTH_RESIDUAL_HELPS
from .experiment_settings import TWIN_NAMES
from .results import PRIMARY, ExperimentResults


def twins_table(results: ExperimentResults) -> pd.DataFrame:
    """The depth sweep's models without residual next to the residual ones: loss at 0 and T
    (mean over seeds), Φ(T)/Φ(0) and the outcomes, per protocol, L and twin init."""
    rows = results.per_run()
    rows = rows[rows["experiment"] == "depth"].assign(
        model=lambda t: np.where(t["beta"] == 1.0, "residual", t["twin_init"].map(TWIN_NAMES)))
    return (rows.groupby(["protocol", "n_layers", "model"], sort=True)
            .agg(seeds=("seed", "size"), loss_0=("loss_0", "mean"), loss_T=("loss_T", "mean"),
                 loss_ratio_T=("loss_ratio_T", "median"), rate=("rate", "median"),
                 outcomes=("outcome", lambda o: ", ".join(f"{k} {v}" for k, v in o.value_counts().items())))
            .reset_index())


def step_table(results: ExperimentResults) -> pd.DataFrame:
    """Every configuration's step: the smallest and largest μ over its seeds (equal under ``common``),
    one row per configuration that was run (no empty cells)."""
    keys = ["experiment", "protocol", "twin_init", "n_layers", "beta", "beta_ffn"]
    return (results.lr.groupby(keys, sort=True)["lr"].agg(seeds="size", mu_min="min", mu_max="max").reset_index())


def replay_table(results: ExperimentResults) -> pd.DataFrame:
    """Each verdict on the primary speed (``rate``) beside the same rule on the replayed measures, on
    the same runs: the earlier one (``rate_half``, the half-run slope, at the three horizons) and who
    first reaches Φ ≤ ½ Φ(0) (``first_to_target``, read at T: a run that has not reached it by T is
    the slower one). ``changed``: the earlier measure's verdict differs (where the measure matters)."""
    primary = {(v.name, v.protocol): v.outcome for v in results.verdicts("rate")}
    replay = {(v.name, v.protocol): v.outcome for v in results.verdicts("rate_half")}
    first = {(v.name, v.protocol): v.outcome for v in results.verdicts("first_to_target", horizons=(1.0,))}
    rows = [{"claim": name, "protocol": protocol, "rate (deciding)": outcome, "rate_half (replayed)": replay.get((name, protocol), "—"),
             "changed": replay.get((name, protocol)) != outcome,
             "first to ½Φ(0) by T (replayed)": first.get((name, protocol), "—")}
            for (name, protocol), outcome in primary.items()]
    return pd.DataFrame(rows)


def beta_init_table(results: ExperimentResults) -> pd.DataFrame:
    """The β sweep under the theorem's step (c = 0.5) with every β matched to β = 1's signal at t = 0
    (the design) beside the plain init of 0 < β < 1 (the earlier design, a sensitivity row), on the
    seeds both have: per β and init, the median step μ, rate r and speed per unit step r/μ."""
    runs = results.per_run()
    runs = runs[(runs["experiment"] == "beta") & (runs["protocol"] == PRIMARY)]
    plain = runs[runs["twin_init"] == "living"]
    seeds = sorted(set(plain["seed"])) or sorted(set(runs["seed"]))
    runs = runs[runs["seed"].isin(seeds)]
    rows = []
    for (init, beta), g in runs.groupby(["twin_init", "beta"], sort=True):
        rows.append({"init": "matched (design)" if init == "matched" else "plain (sensitivity)", "beta": beta,
                     "seeds": len(g), "mu": float(g["lr"].median()), "rate": float(g["rate"].median()),
                     "rate_per_mu": float(g["rate_per_lr"].median())})
    return pd.DataFrame(rows).sort_values(["init", "beta"], ignore_index=True)


def horizon_table(results: ExperimentResults) -> pd.DataFrame:
    """Each check (claim × protocol) at every horizon of :data:`~resgd.experiments.design.HORIZONS`,
    the design's combined verdict, whether its arm decides (≥ 8 seeds) and, for claim (c), the
    earlier pooled rule replayed at T (:func:`resgd.experiments.claims.check_depth_pooled`)."""
    from .claims import check_depth_pooled, horizon_name, out_of_regime_removed
    from .verdict_files import decides

    pooled = {}
    decided = out_of_regime_removed(results._decided(1.0))
    for protocol, rows in decided.groupby("protocol", sort=False):
        if (rows["experiment"] == "depth").any():
            pooled[protocol] = check_depth_pooled(rows).outcome
    rows = []
    for v in results.verdicts():
        row = {"claim": v.name, "protocol": v.protocol, "seeds": v.numbers.get("arm_seeds"),
               **{horizon_name(float(h)): o for h, o in v.numbers["horizons"].items()},
               "verdict": v.outcome, "decides": decides(v.numbers),
               "theory runs out of regime": v.numbers.get("runs_out_of_regime", 0) if v.protocol.startswith("theory") else "",
               "earlier rule at T": pooled.get(v.protocol, "") if v.name == DEPTH_RESIDUAL_HELPS.name else v.numbers["outcome_at_T"]}
        rows.append(row)
    return pd.DataFrame(rows)


def regime_table(results: ExperimentResults) -> pd.DataFrame:
    """Per protocol and experiment: the runs, how many left the theorem's regime before T
    (a step raised Φ: :func:`resgd.experiments.tables.left_regime_at`) and before T/2, how many of
    those diverged, and the median iteration at which they left."""
    runs = results.per_run()
    runs = runs[runs["twin_init"] == "matched"]
    frac = runs["left_regime_at"] / runs["iterations"]
    out = (runs.assign(before_half=frac < 0.5)
           .groupby(["protocol", "experiment"], sort=False)
           .agg(runs=("left_regime", "size"), left=("left_regime", "sum"), left_before_half=("before_half", "sum"),
                diverged=("diverged", "sum"), median_left_at=("left_regime_at", "median"))
           .reset_index())
    return out.astype({"left": int, "left_before_half": int, "diverged": int})
