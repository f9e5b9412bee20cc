"""Effect sizes, distribution-free intervals and verdicts of the map's cells.

Every effect is a per-seed statistic, oriented so that a **positive** value is the direction the
paper claims; ``m`` is the measure (``relative`` = Φ(T)/Φ(0), the primary one: free of the
starting loss, so "faster" is a speed; ``loss`` = Φ(T), secondary):

* (a) ``residual_helps`` — log(m without / m with residual) at L = 1, paired by seed;
* (b) ``beta_monotone`` — minus Spearman(β, m) over the five β at L = 1, per seed;
* (c) ``depth_residual_helps`` — the (a) statistic at each L = 2, 6, 10 (the claim is "at every
  depth"), against the grid's first twin (the matched one); ``depth_residual_helps_second`` the same
  against the second twin (the dead-by-init one) where the grid has both.

Interval: the order-statistic interval for the median of the per-seed values
(:func:`resgd.core.stats.median_interval`; exact level ``level``: 93.0 % with 8 seeds, 96.1 % with
12, measured on simulated data in ``tests/test_median_interval.py``). Verdict: **holds** when the
interval lies above 0, **fails** when below, **undecided** otherwise. Under no effect a cell
"holds" by chance with probability at most (1 − level)/2 (:func:`chance_verdicts`). For (c), which
treats L = 2, 6, 10 alike, the reported interval is [min over L of lo_L, max over L of hi_L]: it
holds only when every depth holds and fails only when every depth fails (intersection-union tests,
no larger error than one depth's in either direction). A diverged run's measure is +∞ (log ratios capped
at ±``LOG_CAP``); a seed whose arms both diverged is left out.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..claim_registry import BETA_MONOTONE, DEPTH_RESIDUAL_HELPS, MAP_CLAIMS, MAP_FORMS, RESIDUAL_HELPS
from ..core.stats import median_interval, spearman
from .grid import MapGrid
from .map_runs import TAGS

CLAIM_NAMES = tuple(c.map_forms[0].name for c in MAP_CLAIMS)
CLAIM_LABELS = {form.name: form.label for form in MAP_FORMS}
DEPTH_CLAIMS = tuple(form.name for form in DEPTH_RESIDUAL_HELPS.map_forms)
"""Claim (c) against ``grid.twins[0]`` (the verdict), and against ``grid.twins[1]`` when the grid has it."""
VERDICTS = ("holds", "fails", "undecided")
MEASURES = ("relative", "loss")
LOG_CAP = 20.0
_BIG = np.finfo(float).max


def log_ratio(without: np.ndarray, with_res: np.ndarray) -> np.ndarray:
    """log(without / with), +∞ losses handled: capped at ±LOG_CAP; NaN when both are +∞."""
    without, with_res = np.asarray(without, float), np.asarray(with_res, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(without) - np.log(with_res)
    return np.clip(out, -LOG_CAP, LOG_CAP)


def verdict(lo: float, hi: float) -> str:
    if math.isnan(lo) or math.isnan(hi):
        return "undecided"
    return "holds" if lo > 0 else "fails" if hi < 0 else "undecided"


def chance_verdicts(K: int, level: float, claim: str = RESIDUAL_HELPS.name) -> dict[str, float]:
    """Expected number of cells, of ``K``, that hold (and that fail) by chance alone if the claim
    had no effect in any cell: at most K·(1 − level)/2 each ((c) needs every depth to agree)."""
    one_side = K * (1.0 - level) / 2.0
    return {"holds": one_side, "fails": one_side}


def _pairs(rows: pd.DataFrame, column: str, L: int, twin: str) -> np.ndarray:
    """Per-seed log ratio without (the ``twin`` init) / with residual at depth ``L`` (seeds both
    arms have)."""
    at = rows[rows["n_layers"] == L]
    with_res = at[at["beta"] == 1.0].drop_duplicates("seed").set_index("seed")[column]
    without = at[(at["beta"] == 0.0) & (at["init"] == twin)].set_index("seed")[column]
    seeds = sorted(set(with_res.index) & set(without.index))
    return log_ratio(without[seeds].to_numpy(), with_res[seeds].to_numpy())


def spearman_rows(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Spearman(x, row) for every row of ``rows`` (average ranks for ties; +∞ ranks last; NaN for
    a constant row or one with a NaN)."""
    rows = np.where(np.isinf(rows), _BIG, np.asarray(rows, dtype=float))
    ranks = pd.DataFrame(rows).rank(axis=1).to_numpy()
    rx = pd.Series(np.asarray(x, dtype=float)).rank().to_numpy()
    rc, xc = ranks - ranks.mean(axis=1, keepdims=True), rx - rx.mean()
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rc @ xc) / (np.sqrt((rc**2).sum(axis=1)) * np.sqrt((xc**2).sum()))


def _summary(values: np.ndarray, grid: MapGrid) -> dict:
    """Median, interval, level and seeds of per-seed values; ``above``/``below``: how many seeds
    are on each side of 0 (the interval of 8 seeds decides only when 7 of them agree)."""
    values = np.asarray(values, dtype=float)
    kept = values[~np.isnan(values)]
    lo, hi, level = median_interval(kept, grid.min_coverage)
    return dict(effect=float(np.median(kept)) if kept.size else math.nan, lo=lo, hi=hi, level=level,
                seeds=int(kept.size), above=int((kept > 0).sum()), below=int((kept < 0).sum()))


def _outcomes(rows: pd.DataFrame) -> dict:
    return dict(stalled=int((rows["outcome"] == "stalled").sum()), diverged=int((rows["outcome"] == "diverged").sum()))


def depth_summaries(rows: pd.DataFrame, grid: MapGrid, column: str, twin: str) -> list[dict]:
    """Claim (c)'s parts: per depth L, the median, interval, level and seeds of the per-seed log
    ratios against ``twin`` (what :func:`cell_effects` combines, and what the explorer shows)."""
    return [{"depth": int(L), **_summary(_pairs(rows, column, L, twin), grid)} for L in grid.depths]


def cell_effects(rows: pd.DataFrame, grid: MapGrid, horizon: int, measure: str) -> list[dict]:
    """The three claims' effects, intervals and verdicts in one cell × protocol at ``horizon``."""
    column = f"{measure}_{horizon}"
    single = rows[rows["n_layers"] == 1]
    single_pair = single[single["beta"].isin([0.0, 1.0])]
    out = [dict(claim=RESIDUAL_HELPS.name, **_summary(_pairs(single, column, 1, grid.twins[0]), grid), **_outcomes(single_pair))]
    table = single.pivot_table(index="beta", columns="seed", values=column, aggfunc="first", dropna=False).sort_index()
    per_seed = -spearman_rows(table.index.to_numpy(dtype=float), table.to_numpy(dtype=float).T)
    out.append(dict(claim=BETA_MONOTONE.name, **_summary(per_seed, grid), **_outcomes(single)))
    for claim, init in zip(DEPTH_CLAIMS, grid.twins):
        depths = pd.DataFrame(depth_summaries(rows, grid, column, init))
        deep = rows[(rows["n_layers"] > 1) & ((rows["beta"] == 1.0) | (rows["init"] == init))]
        # L = 2, 6, 10 alike: holds when every depth's interval lies above 0, fails when every one lies
        # below ([min lo, max hi]); a depth without an interval leaves (c) without one (NaN propagates)
        out.append(dict(claim=claim, effect=float(depths["effect"].median(skipna=False)),
                        lo=float(depths["lo"].min(skipna=False)), hi=float(depths["hi"].max(skipna=False)),
                        level=float(depths["level"].min(skipna=False)), seeds=int(depths["seeds"].min()),
                        above=int(depths["above"].min()), below=int(depths["below"].min()), **_outcomes(deep)))
    for item in out:
        item["verdict"] = verdict(item["lo"], item["hi"])
        item["measure"] = measure
    return out


BEST = "best"
"""The derived protocol: each (β, L) at the step fraction (of its own limit) with the lowest
seed-mean primary measure at the horizon, chosen from the grid's fractions (no extra runs;
``fraction`` is NaN in its rows)."""


def cell_table(per_run: pd.DataFrame, grid: MapGrid) -> pd.DataFrame:
    """One row per cell × protocol × horizon × measure × claim: effect, lo, hi, level, seeds, the
    seeds above and below 0, verdict, stalled/diverged run counts (+ the cell's predicted gain log(σ²-ratio(Z⁰) with /
    without residual), for the theory link). Protocols: those of the runs, plus :data:`BEST`."""
    rows = []
    for keys, g in per_run.groupby(TAGS, sort=True):
        gain = predicted_gain(g)
        for T in grid.horizons:
            for measure in MEASURES:
                for item in cell_effects(g, grid, T, measure):
                    rows.append({**dict(zip(TAGS, keys)), "horizon": T, **item, "predicted_gain": gain})
    own = per_run[per_run["protocol"] == "own"]
    for (dataset, qk, N), g in own.groupby(["dataset", "qk_scale", "N"], sort=True):
        gain = predicted_gain(g)
        for T in grid.horizons:
            chosen = best_step_rows(g, T, grid.primary)
            for measure in MEASURES:
                for item in cell_effects(chosen, grid, T, measure):
                    rows.append(dict(dataset=dataset, qk_scale=qk, fraction=math.nan, N=N, protocol=BEST, horizon=T,
                                     **item, predicted_gain=gain))
    return pd.DataFrame(rows)


def best_step_rows(own: pd.DataFrame, horizon: int, measure: str = "relative") -> pd.DataFrame:
    """Of one (data set, Q/K scale, N)'s ``own`` runs, those at each (β, L)'s best fraction."""
    column = f"{measure}_{horizon}"
    points = ["beta", "n_layers", "init"]
    means = own.groupby([*points, "fraction"])[column].mean().reset_index()
    best = means.sort_values([column, "fraction"], ascending=[True, False]).drop_duplicates(points)
    return own.merge(best[[*points, "fraction"]], on=[*points, "fraction"])


def predicted_gain(rows: pd.DataFrame) -> float:
    """Mean over seeds of log(σ_min²/σ_max²(Z⁰) with residual / without), single layer."""
    single = rows[rows["n_layers"] == 1]
    with_res = single[single["beta"] == 1.0].set_index("seed")["rate_ratio_Z0"]
    without = single[single["beta"] == 0.0].set_index("seed")["rate_ratio_Z0"]
    seeds = sorted(set(with_res.dropna().index) & set(without.dropna().index))
    if not seeds:
        return math.nan
    with np.errstate(divide="ignore"):
        ratio = np.log(with_res[seeds].to_numpy()) - np.log(without[seeds].to_numpy())
    ratio = ratio[np.isfinite(ratio)]
    return float(ratio.mean()) if ratio.size else math.nan


def tally(cells: pd.DataFrame, horizon: int, measure: str = "relative") -> pd.DataFrame:
    """Claim × data set × protocol → cells that hold / fail / are undecided, K, the interval's
    smallest level and the number of holds (and fails) expected by chance (:func:`chance_verdicts`)."""
    at = cells[(cells["horizon"] == horizon) & (cells["measure"] == measure)]
    counts = at.groupby(["claim", "dataset", "protocol"])["verdict"].value_counts().unstack(fill_value=0)
    counts = counts.reindex(columns=list(VERDICTS), fill_value=0)
    counts["K"] = counts.sum(axis=1)
    counts["level"] = at.groupby(["claim", "dataset", "protocol"])["level"].min()
    out = counts.reset_index()
    chance = [chance_verdicts(int(k), float(lv), c) for k, lv, c in zip(out["K"], out["level"], out["claim"])]
    out["chance_holds"] = [c["holds"] for c in chance]
    out["chance_fails"] = [c["fails"] for c in chance]
    return out


def theory_link(cells: pd.DataFrame, horizon: int, measure: str = "relative") -> pd.DataFrame:
    """Per data set × protocol (and pooled): Spearman across cells between the predicted gain
    and claim (a)'s measured effect at ``horizon``."""
    at = cells[(cells["horizon"] == horizon) & (cells["claim"] == RESIDUAL_HELPS.name) & (cells["measure"] == measure)]
    rows = []
    groups = list(at.groupby(["dataset", "protocol"])) + [(("all", p), g) for p, g in at.groupby("protocol")]
    for (dataset, protocol), g in groups:
        rows.append(dict(dataset=dataset, protocol=protocol, cells=len(g),
                         spearman=float(spearman(g["predicted_gain"], g["effect"]))))
    return pd.DataFrame(rows)


def agreement(quick: pd.DataFrame, full: pd.DataFrame, measure: str = "relative") -> pd.DataFrame:
    """Cells decided by both maps (at each map's last horizon, one measure), with ``agree``; the
    ``best`` protocol is left out (it picks from each grid's own fractions, so its cells differ)."""
    keys = TAGS + ["claim"]
    quick = quick[(quick["protocol"] != BEST) & (quick["measure"] == measure)]
    full = full[(full["protocol"] != BEST) & (full["measure"] == measure)]
    q = quick[quick["horizon"] == quick["horizon"].max()][keys + ["verdict", "effect"]]
    f = full[full["horizon"] == full["horizon"].max()][keys + ["verdict", "effect"]]
    both = q.merge(f, on=keys, suffixes=("_quick", "_full"))
    decided = both[(both["verdict_quick"] != "undecided") & (both["verdict_full"] != "undecided")]
    return decided.assign(agree=decided["verdict_quick"] == decided["verdict_full"])


LADDER_OUTCOMES = ("holds", "fails", "target-dependent", "undecided", "could not be tested")
LADDER_GROUP = ["dataset", "qk_scale", "fraction", "N", "protocol", "n_layers"]
"""A comparison of the map under design v6's measure: the runs whose floor Φ* is shared (one cell,
one protocol, one depth)."""


def add_ladder(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Design v6's measure on the map's runs (:mod:`resgd.experiments.decisions`; the ``reader`` of
    :func:`resgd.robustness.map_runs.map_runs`): each run's iterations to Φ* + q (Φ₀ − Φ*) for every
    rung q (``t_1/2`` …), +∞ when not reached by T and for a configuration never trained; Φ* the
    lowest loss any run of its comparison (:data:`LADDER_GROUP`) reached, as on the pages."""
    from ..experiments.design import LADDER
    from ..experiments.decisions import rung_name, times_to_targets
    from .map_runs import RUN_KEYS

    histories = {keys: h.sort_values("iteration")["loss"].to_numpy(dtype=float)
                 for keys, h in runs.groupby(RUN_KEYS, sort=False)} if len(runs) else {}
    keys = [tuple(r) for r in table[RUN_KEYS].itertuples(index=False)]
    lowest = pd.Series([float(np.nanmin(np.where(np.isfinite(histories[k]), histories[k], np.nan)))
                        if k in histories else np.nan for k in keys], index=table.index)
    floors = lowest.groupby([table[c] for c in LADDER_GROUP]).transform("min")
    names = [f"t_{rung_name(q)}" for q in LADDER]
    times = np.array([times_to_targets(histories[k], float(f), LADDER) if k in histories else np.full(len(LADDER), np.inf)
                      for k, f in zip(keys, floors)]).reshape(len(table), len(LADDER))
    return table.assign(**{name: times[:, j] for j, name in enumerate(names)})


def ladder_cells(per_run: pd.DataFrame, grid: MapGrid) -> pd.DataFrame:
    """Every cell of the map decided as the pages decide under design v6
    (:mod:`resgd.experiments.decisions`): the time to each rung of the ladder (``t_…`` columns of the
    per-run table, :func:`resgd.robustness.map_runs.add_ladder`), who gets there first per seed, the
    sign rule per rung over the cell's seeds, and the claim over the rungs. (a) β = 1 against β = 0 at
    L = 1; (b) the sign of Spearman(β, −t) over the β of a seed; (c) the majority sign over the depths
    against the first twin. One row per cell and claim."""
    from ..experiments.decisions import beta_signs, decide, depth_signs, pair_signs

    times = [c for c in per_run.columns if c.startswith("t_")]
    twin = grid.twins[0]
    rows = []
    for cell, g in per_run.groupby(TAGS, sort=True):
        def at(beta, L, init=twin):
            part = g[(g["beta"] == beta) & (g["n_layers"] == L) & (g["init"] == init)]
            return part.set_index("seed").sort_index()[times]

        tags = dict(zip(TAGS, cell))
        one = g[g["n_layers"] == 1]
        if len(one):
            w, wo = at(1.0, 1), at(0.0, 1)
            seeds = w.index.intersection(wo.index)
            rows.append({**tags, "claim": RESIDUAL_HELPS.name, **_ladder_row(decide(pair_signs(
                w.loc[seeds].to_numpy(), wo.loc[seeds].to_numpy())))})
            betas = sorted(one["beta"].unique())
            cube = np.stack([at(b, 1).loc[seeds].to_numpy() for b in betas], axis=1)
            rows.append({**tags, "claim": BETA_MONOTONE.name, **_ladder_row(decide(beta_signs(cube, np.array(betas))))})
        depths = sorted(int(L) for L in g["n_layers"].unique() if L > 1)
        if depths:
            parts = []
            for L in depths:
                w, wo = at(1.0, L), at(0.0, L)
                seeds = w.index.intersection(wo.index)
                parts.append(pair_signs(w.loc[seeds].to_numpy(), wo.loc[seeds].to_numpy()))
            rows.append({**tags, "claim": DEPTH_RESIDUAL_HELPS.name,
                         **_ladder_row(decide(depth_signs(np.stack(parts, axis=1))))})
    return pd.DataFrame(rows)


def _ladder_row(result: dict) -> dict:
    return {"outcome": result["outcome"], "seeds": result["seeds"],
            "rungs": "; ".join(f"{r['rung']}: {r['outcome'] if r['testable'] else 'not testable'} "
                               f"({r['for']}–{r['against']}, {r['censored']} cens.)" for r in result["rungs"])}


def ladder_tally(cells: pd.DataFrame) -> pd.DataFrame:
    """How many cells of each claim, data set and protocol end in each v6 outcome."""
    counts = (cells.groupby(["claim", "dataset", "protocol"])["outcome"].value_counts().unstack(fill_value=0)
              .reindex(columns=list(LADDER_OUTCOMES), fill_value=0))
    counts["cells"] = counts.sum(axis=1)
    return counts.reset_index()


POWER_EFFECTS = (1.5, 2.0, 4.0)
"""Speed-ups at which the map's v6 rule's power is simulated (the paper's arm that many times faster)."""


def ladder_power(grid: MapGrid, reps: int | None = None) -> pd.DataFrame:
    """How often the v6 rule decides "holds" in one cell of this grid (its seeds, its horizon as the
    cap) when the paper's arm converges ``effect`` times faster, and how often it decides under no
    effect (:func:`resgd.experiments.decisions.simulate_rule`). The same for every protocol: a protocol
    changes the runs, not the rule; the share of censored pairs per protocol (:func:`ladder_tally`'s
    cells) says how far its cells fall short of it. ``reps``: simulated cells per point, the grid's
    ``power_reps`` unless given."""
    from ..experiments.decisions import simulate_rule

    reps = grid.power_reps if reps is None else reps
    rows = []
    for claim, name in ((c.key, c.name) for c in MAP_CLAIMS):
        row = {"claim": name, "seeds": len(grid.seeds), "cap": grid.iterations}
        row["no effect: decided"] = sum(v for k, v in simulate_rule(
            claim, seeds=len(grid.seeds), reps=reps, cap=grid.iterations).items() if k in ("holds", "fails"))
        for effect in POWER_EFFECTS:
            row[f"holds at {effect:g}×"] = simulate_rule(claim, effect=effect, seeds=len(grid.seeds), reps=reps,
                                                         cap=grid.iterations)["holds"]
        rows.append(row)
    return pd.DataFrame(rows)
