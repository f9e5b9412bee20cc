"""The paper's empirical claims as checks decided by the pre-registered rules, their verdicts as files
and as the claims page's table, and how often each check decides when there is no effect.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import claim_registry as registry
from .. import dataset_registry
from ..claim_registry import BETA_MONOTONE, DEPTH_RESIDUAL_HELPS, FACTORIAL, RESIDUAL_HELPS
from ..core.stats import interval_level, spearman
from ..dataset_registry import paper_names
from ..infra.atomic import json_text, write_json
from ..pipeline import stored_tables
from ..pipeline.cache import resolve_results_dir
from ..validation import check_choice
from ..words import agree, count_noun
from .decisions import binomial_tail, holm, interval_rule, median_or_nan, paired, sign_test, spearman_chance
from .design import ALPHA, FACTORIAL_CELLS, MIN_COVERAGE, MIN_INTERVAL_SEEDS, RULES, SPEARMAN_BOUND, VERDICTS
from .design import rule as arm_rule

# --------------------------------------------------------------------------------------- the checks
# The paper's empirical claims as explicit, checkable statements, decided by the pre-registered
# rules of :mod:`resgd.experiments.design` (read them there; this module applies them).
#
# Each check reads the per-run table of :func:`resgd.experiments.results.per_run_table` for one
# protocol (columns ``experiment``, ``protocol``, ``beta``, ``beta_ffn``, ``n_layers``, ``seed``,
# ``rate``: the primary speed, −∞ for a diverged run) and returns a :class:`Verdict` whose
# ``outcome`` is ``holds``, ``fails`` or ``undecided``. The three claims ((b) is the paper's Fig. 3a, (c) its Fig. 3b; (a) is its summary's statement),
# all read as speed (the paper says "converges faster"):
#
# (a) ``residual_helps`` — the single-layer model with the residual (β = 1) trains faster than
#     without (β = 0);
# (b) ``beta_monotone`` — a larger β trains faster (single layer);
# (c) ``depth_residual_helps`` — at every depth L the model with residuals trains faster than its
#     living twin without.
#
# Plus the factorial (``factorial``): which skip, attention or FFN, carries the effect at L = 1.
# The rules that decide are :mod:`resgd.experiments.decisions`; the verdicts of each notebook are written to
# ``results/claims/<dataset>_<mode>.json`` and read back for the claims page (below).

CLAIMS = {c.name: c.text for c in registry.CLAIMS}
"""Claim name → its text (:mod:`resgd.claim_registry` holds the records)."""
FIGURE_KIND = {c.name: c.figure for c in registry.CLAIMS}
NOTEBOOK = {d.name: d.notebook for d in dataset_registry.paper()}
"""Data set → its page (the notebook that writes its verdicts)."""
REQUIRED = ("experiment", "protocol", "beta", "beta_ffn", "n_layers", "seed", "rate")


@dataclass(frozen=True)
class Verdict:
    """One claim checked on one data set under one protocol: its outcome and the numbers behind it."""

    name: str
    claim: str
    outcome: str
    numbers: dict[str, Any]
    detail: str
    dataset: str = ""
    protocol: str = ""
    figure: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "numbers": _jsonable(self.numbers)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Verdict":
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


def _jsonable(value: Any) -> Any:
    """Plain JSON: non-finite floats become the strings "inf", "-inf", "nan"."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
    return value


def _check_table(table: pd.DataFrame) -> None:
    missing = [c for c in REQUIRED if c not in table.columns]
    if missing:
        raise ValueError(f"claims: the per-run table lacks column(s) {missing}; expected at least {list(REQUIRED)}")
    if table["protocol"].nunique() > 1:
        raise ValueError(f"claims: give the runs of one protocol, got {sorted(table['protocol'].unique())}")
    # A rate is NaN only where the design's regime rule set it (out_of_regime_removed, `theory` runs):
    # elsewhere the check would count the run as "left the theorem's regime", which it did not.
    if len(table) and not str(table["protocol"].iloc[0]).startswith("theory"):
        lost = table[np.isnan(table["rate"].to_numpy(dtype=float))]
        if len(lost):
            runs = ", ".join(f"{e} β={b:g} L={L} seed {s}" for e, b, L, s in
                             lost[["experiment", "beta", "n_layers", "seed"]].head(5).itertuples(index=False))
            raise ValueError(f"claims: {len(lost)} run(s) under protocol {table['protocol'].iloc[0]!r} have no rate "
                             f"(NaN), e.g. {runs}; only a `theory` run that left the theorem's regime may drop "
                             "out, and a diverged run's rate is −∞")


def _rates(table: pd.DataFrame, experiment: str, beta: float, L: int, beta_ffn: float | None = None,
           twin_init: str = "matched") -> pd.Series:
    """The primary rate per seed of one configuration (empty if absent)."""
    col = lambda name: table[name].to_numpy()  # noqa: E731 - numpy masks: the null simulation calls this ~10⁵ times
    keep = ((col("experiment") == experiment) & (col("beta") == beta) & (col("n_layers") == L)
            & (col("beta_ffn") == (beta if beta_ffn is None else beta_ffn)))
    if "twin_init" in table.columns and beta == 0:
        keep &= col("twin_init") == twin_init
    return pd.Series(col("rate").astype(float)[keep], index=col("seed")[keep])


def of_seeds(k: int, n: int) -> str:
    """"k of n seeds", singular for one."""
    return f"{k} of {count_noun(n, 'seed')}"


def _dropped_text(excluded: int, seeds: int) -> str:
    """How many seeds a check lost to the regime rule (:func:`out_of_regime_removed`); '' when none."""
    return f"{excluded} of {count_noun(seeds, 'seed')} dropped out, a run having left the theorem's regime" if excluded else ""


def _above_zero(positive: int, left: int) -> str:
    """How many of the seeds' values lie above 0, in words ("7 of them above 0"; it read "(7 > 0)")."""
    if left <= 1:
        return "no value left" if left == 0 else "it is above 0" if positive else "it is not above 0"
    return f"{positive} of them above 0"


def _cannot_decide(seeds: int) -> str:
    """Why a sign test with too few seeds says nothing ("3 seeds cannot decide at 5 %"; no seed: none to decide on)."""
    return "no seed to decide on" if seeds == 0 else f"{count_noun(seeds, 'seed')} cannot decide at 5 %"


def _interval_text(r: dict[str, Any]) -> str:
    """The interval's reading; when too few seeds are left for one, how many are left and how many it needs."""
    if math.isnan(r["lo"]):
        left = r["left"]
        return (f"median {_fmt(r['median'])} over the {count_noun(left, 'seed')} left ({_above_zero(r['positive'], left)}); no interval: "
                f"{_dropped_text(r['excluded'], r['seeds']) or 'too few seeds'}, and the interval needs {r['need']}")
    return (f"median {_fmt(r['median'])}, {100 * r['level']:.1f} % interval [{_fmt(r['lo'])}, {_fmt(r['hi'])}] "
            f"over {count_noun(r['left'], 'seed')} ({_above_zero(r['positive'], r['left'])})"
            + (f"; {_dropped_text(r['excluded'], r['seeds'])}" if r["excluded"] else ""))


def _check_rule(rule: str) -> None:
    check_choice("claims: unknown verdict rule", rule, RULES)


def _need(series: pd.Series, what: str) -> pd.Series:
    if series.empty:
        raise ValueError(f"claims: {what} has no runs in the table")
    return series


def _fmt(x: float) -> str:
    """A rate or bound as the pages print it: −∞ is a diverged run, NaN a value whose runs all left the regime."""
    if x == -math.inf:
        return "−∞ (diverged)"
    return "none (every run left the regime)" if math.isnan(x) else f"{x:.3g}"


def check_residual_helps(per_run: pd.DataFrame, *, dataset: str = "", figure: str = "", rule: str = "sign") -> Verdict:
    """Claim (a): β = 1 vs β = 0 at L = 1 (β sweep), paired by seed on the primary rate: the sign
    rule (:func:`paired`) or the interval rule on d = rate(β = 1) − rate(β = 0) (:func:`interval_rule`)."""
    _check_table(per_run)
    _check_rule(rule)
    r = paired(_need(_rates(per_run, "beta", 1.0, 1), "claim (a), β = 1"), _need(_rates(per_run, "beta", 0.0, 1), "claim (a), β = 0"))
    if rule == "interval":
        with_res, without = _rates(per_run, "beta", 1.0, 1), _rates(per_run, "beta", 0.0, 1)
        common = with_res.index.intersection(without.index)
        with np.errstate(invalid="ignore"):
            d = with_res[common].to_numpy(dtype=float) - without[common].to_numpy(dtype=float)
        r = {**r, **interval_rule(d, "claim (a)")}
    detail = (f"median rate β = 1: {_fmt(r['median_rate_with'])}, β = 0: {_fmt(r['median_rate_without'])}; "
              f"β = 1 faster in {of_seeds(r['faster_in'], r['left'])}"
              + (f"; {_dropped_text(r['excluded'], r['seeds'])}" if r["excluded"] and rule != "interval" else ""))
    if rule == "interval":
        detail += f"; difference: {_interval_text(r)}"
    return Verdict(RESIDUAL_HELPS.name, RESIDUAL_HELPS.text, r["outcome"], r, detail, dataset,
                   str(per_run["protocol"].iloc[0]), figure)


def check_beta_monotone(per_run: pd.DataFrame, *, dataset: str = "", figure: str = "", rule: str = "sign") -> Verdict:
    """Claim (b). Sign rule: Spearman(β, median rate over seeds) ≥ SPEARMAN_BOUND holds, ≤
    −SPEARMAN_BOUND fails. Interval rule: ρ_s = Spearman(β, rate) per seed, then
    :func:`interval_rule` on the ρ_s (holds when the median's interval lies above 0).

    A diverged run's rate is −∞; it ranks last (the largest negative float), so that
    :func:`resgd.core.stats.spearman` (which drops non-finite pairs) keeps it."""
    _check_table(per_run)
    _check_rule(rule)
    rows = per_run[(per_run["experiment"] == "beta") & (per_run["n_layers"] == 1)]
    medians = rows.groupby("beta")["rate"].median().sort_index()
    if len(medians) < 3:
        raise ValueError(f"claims: claim (b) needs at least 3 values of β at L = 1, got {list(medians.index)}")
    by_beta = {f"{b:g}": float(v) for b, v in medians.items()}
    if rule == "interval":
        table = (rows.pivot_table(index="seed", columns="beta", values="rate", aggfunc="first", dropna=False)
                 .reindex(index=sorted(set(rows["seed"]))).sort_index(axis=1))  # a seed with a dropped run stays, as NaN
        table = table.replace(-math.inf, -np.finfo(float).max)
        betas = table.columns.to_numpy(dtype=float)
        rhos = [spearman(betas, row) if np.isfinite(row).all() else math.nan for row in table.to_numpy(dtype=float)]
        r = interval_rule(rhos, "claim (b)")
        numbers = {**r, "spearman": r["median"], "rate_by_beta": by_beta, "shape": rate_shape(by_beta)}
        detail = (f"per-seed Spearman(β, rate): {_interval_text(r)}; median rates "
                  + ", ".join(f"β={b:g}: {_fmt(v)}" for b, v in medians.items()))
        return Verdict(BETA_MONOTONE.name, BETA_MONOTONE.text, r["outcome"], numbers, detail, dataset,
                       str(per_run["protocol"].iloc[0]), figure)
    ranked = medians.replace(-math.inf, -np.finfo(float).max)
    rho = float(spearman(ranked.index.to_numpy(dtype=float), ranked.to_numpy(dtype=float)))
    outcome = ("holds" if rho >= SPEARMAN_BOUND else "fails" if rho <= -SPEARMAN_BOUND else "undecided") \
        if math.isfinite(rho) else "undecided"
    numbers = {"outcome": outcome, "spearman": rho, "bound": SPEARMAN_BOUND, "chance": spearman_chance(len(medians)),
               "rate_by_beta": by_beta, "shape": rate_shape(by_beta)}
    detail = (f"Spearman(β, median rate) = {rho:.3g} (holds ≥ {SPEARMAN_BOUND:g}, fails ≤ −{SPEARMAN_BOUND:g}); "
              + ", ".join(f"β={b:g}: {_fmt(v)}" for b, v in medians.items()))
    return Verdict(BETA_MONOTONE.name, BETA_MONOTONE.text, outcome, numbers, detail, dataset,
                   str(per_run["protocol"].iloc[0]), figure)


def _depth_pairs(per_run: pd.DataFrame) -> tuple[dict[str, dict[str, Any]], pd.DataFrame]:
    """Per depth of the depth sweep, the paired sign rule of r(β = 1) − r(matched twin), and the
    differences as a table (rows: seeds, columns: depths; NaN where a seed lacks a run)."""
    _check_table(per_run)
    rows = per_run[per_run["experiment"] == "depth"]
    depths = sorted(int(L) for L in rows["n_layers"].unique())
    if not depths:
        raise ValueError("claims: claim (c) needs the depth sweep's runs; the table has none")
    by_depth, diffs = {}, {}
    for L in depths:
        res = _need(_rates(rows, "depth", 1.0, L), f"claim (c), L = {L}, β = 1")
        twin = _need(_rates(rows, "depth", 0.0, L, twin_init="matched"), f"claim (c), L = {L}, twin")
        by_depth[str(L)], diffs[L] = paired(res, twin), res - twin
    return by_depth, pd.DataFrame(diffs).sort_index()


def rate_shape(rate_by_beta: dict[str, float], tolerance: float = 0.02) -> str:
    """The shape of the median rate over β as a verb phrase: "rises with β", "falls with β", "is an
    inverted U in β (peak at β = b)", "is a U in β (lowest at β = b)", "is flat in β" or "has no
    single shape in β". A step smaller than ``tolerance`` times the largest finite |rate| is level; a
    diverged median (−∞) is the lowest. Why: "a larger β trains slower" misreads an inverted U; a
    sentence must name the shape it describes."""
    items = sorted(((float(b), float(v)) for b, v in rate_by_beta.items()), key=lambda bv: bv[0])
    betas, rates = [b for b, _ in items], np.array([v for _, v in items])
    finite = rates[np.isfinite(rates)]
    if len(items) < 3 or finite.size == 0 or np.isnan(rates).any():
        return "has no single shape in β"
    top = float(np.max(np.abs(finite)))
    rates = np.where(rates == -math.inf, float(finite.min()) - 1.0 - top, rates)
    diffs = np.diff(rates)
    moves = np.sign(diffs[np.abs(diffs) > tolerance * top])
    if moves.size == 0:
        return "is flat in β"
    if (moves > 0).all():
        return "rises with β"
    if (moves < 0).all():
        return "falls with β"
    if np.count_nonzero(np.diff(moves)) == 1:
        if moves[0] > 0:
            return f"is an inverted U in β (peak at β = {betas[int(np.argmax(rates))]:g})"
        return f"is a U in β (lowest at β = {betas[int(np.argmin(rates))]:g})"
    return "has no single shape in β"


def check_depth_residual_helps(per_run: pd.DataFrame, *, dataset: str = "", figure: str = "", rule: str = "sign") -> Verdict:
    """Claim (c), one statistic per seed (the runs of a seed share data and first-layer weights):
    D_s = the median over L of d_L = r(β = 1) − r(matched twin), then the arm's rule on the D_s
    (:func:`sign_test` or :func:`interval_rule`); the per-depth counts are shown, not decisive."""
    _check_rule(rule)
    by_depth, d = _depth_pairs(per_run)
    per_seed = np.array([median_or_nan(row) for row in d.to_numpy(dtype=float)])
    r = sign_test(per_seed) if rule == "sign" else {**sign_test(per_seed), **interval_rule(per_seed, "claim (c)")}
    k = r.get("threshold")
    total = int(per_seed.size)
    detail = (f"per-seed median over L of the difference > 0 in {r['positive']} of {count_noun(r['left'], 'seed')}"
              + (f"; {_interval_text(r)}" if rule == "interval" else
                 (f" (decides at ≥ {k})" if k is not None else f" ({_cannot_decide(r['seeds'])})")
                 + (f"; {_dropped_text(r['excluded'], total)}" if r["excluded"] else ""))
              + "; per depth: " + "; ".join(f"L={L}: faster in {v['faster_in']}/{v['left']} (median rate "
                                            f"{_fmt(v['median_rate_with'])} vs {_fmt(v['median_rate_without'])})"
                                            for L, v in by_depth.items()))
    return Verdict(DEPTH_RESIDUAL_HELPS.name, DEPTH_RESIDUAL_HELPS.text, r["outcome"],
                   {**r, "statistic": "per-seed median over L", "by_depth": by_depth}, detail, dataset,
                   str(per_run["protocol"].iloc[0]), figure)


def check_depth_pooled(per_run: pd.DataFrame, *, dataset: str = "", figure: str = "") -> Verdict:
    """The earlier rule for claim (c), replayed beside the design's (never deciding): one sign test
    over every (L, seed) pair as if they were independent. Under no effect it decides more often than
    5 % when a seed's pairs are correlated (``null_rates`` measures how often)."""
    by_depth, _ = _depth_pairs(per_run)
    pooled = sign_test(np.concatenate([v["differences"] for v in by_depth.values()]))
    detail = f"all (L, seed) pairs: residual faster in {pooled['positive']} of {pooled['seeds']}"
    return Verdict(DEPTH_RESIDUAL_HELPS.name, DEPTH_RESIDUAL_HELPS.text, pooled["outcome"],
                   {**pooled, "statistic": "pooled (L, seed) pairs", "by_depth": by_depth}, detail, dataset,
                   str(per_run["protocol"].iloc[0]), figure)


def check_factorial(per_run: pd.DataFrame, *, dataset: str = "", figure: str = "", rule: str = "sign") -> Verdict:
    """The 2 × 2 factorial at L = 1: each skip's per-seed statistic is the mean of its two
    differences (at both levels of the other skip); a one-sided exact sign test per skip and
    direction, with Holm's correction over the two skips (:func:`holm`): ``speeds up``, ``slows`` or
    ``undecided``. The verdict ``holds`` when some skip speeds up (named in ``carried_by``), else
    ``undecided``; under the interval rule the intervals are added for display."""
    _check_table(per_run)
    _check_rule(rule)
    rows = per_run[per_run["experiment"] == "factorial"]
    rate = {(b, f): _need(_rates(rows, "factorial", b, 1, f), f"factorial cell β = {b:g}, β_ffn = {f:g}")
            for b in (0.0, 1.0) for f in (0.0, 1.0)}

    def per_seed(pairs) -> np.ndarray:
        return (sum((rate[hi] - rate[lo]) for hi, lo in pairs) / len(pairs)).to_numpy(dtype=float)  # aligned on seed

    pairs = {"attention": [((1.0, 0.0), (0.0, 0.0)), ((1.0, 1.0), (0.0, 1.0))],
             "ffn": [((0.0, 1.0), (0.0, 0.0)), ((1.0, 1.0), (1.0, 0.0))]}
    tests = {name: sign_test(per_seed(p)) for name, p in pairs.items()}
    if rule == "interval":
        tests = {name: {**t, "rule": "interval", **{k: v for k, v in interval_rule(per_seed(pairs[name]), "the factorial").items()
                                                    if k in ("lo", "hi", "level", "design_level")}} for name, t in tests.items()}
    up = holm({name: t["p_up"] for name, t in tests.items()})
    down = holm({name: t["p_down"] for name, t in tests.items()})
    effects = {}
    for name, t in tests.items():
        verdict = "speeds up" if up[name] else ("slows" if down[name] else "undecided")
        effects[name] = {**t, "effect": verdict, "differences": t["seeds"], "median_difference": t["median"]}
    attention, ffn = effects["attention"], effects["ffn"]
    carried = [name for name, e in (("attention", attention), ("FFN", ffn)) if e["effect"] == "speeds up"]
    outcome = "holds" if carried else "undecided"
    medians = {f"β={b:g}, β_ffn={f:g}": float(rate[(b, f)].median()) for b, f in rate}
    n = attention["seeds"]
    k = next((k for k in range(n + 1) if n and binomial_tail(n, k) <= ALPHA / 2), None)
    chance = 2 * binomial_tail(n, k) if k is not None else 0.0  # Holm's first step: some skip "speeds up" by chance (at most)
    numbers = {"outcome": outcome, "chance": chance, "correction": "Holm over the two skips, per direction",
               "attention": attention, "ffn": ffn, "carried_by": " and ".join(carried) or "neither", "median_rate": medians}
    def counts(e: dict) -> str:
        dropped = _dropped_text(e["excluded"], e["seeds"] + e["excluded"])
        return f"{e['positive']}/{count_noun(e['differences'], 'seed')}, mean difference > 0" + (f"; {dropped}" if dropped else "")

    detail = (f"attention skip: {attention['effect']} ({counts(attention)}); "
              f"FFN skip: {ffn['effect']} ({counts(ffn)}); Holm-corrected; median rates "
              + ", ".join(f"{k}: {_fmt(v)}" for k, v in medians.items()))
    return Verdict(FACTORIAL.name, FACTORIAL.text, outcome, numbers, detail, dataset, str(per_run["protocol"].iloc[0]), figure)


CHECKS = {RESIDUAL_HELPS.name: check_residual_helps, BETA_MONOTONE.name: check_beta_monotone,
          DEPTH_RESIDUAL_HELPS.name: check_depth_residual_helps, FACTORIAL.name: check_factorial}
"""Claim name → its check (``check(per_run, *, dataset, figure, rule) -> Verdict``): a new claim's
record goes into :mod:`resgd.claim_registry`, its check here."""


def figure_label(dataset: str, name: str) -> str:
    """The ``:name:`` of the glued figure that tests claim ``name`` on ``dataset``."""
    return f"fig-{dataset}-{FIGURE_KIND[name]}"


def out_of_regime_removed(per_run: pd.DataFrame) -> pd.DataFrame:
    """Under a ``theory`` protocol, the rate of every run that left the theorem's regime
    (``left_regime``, :func:`resgd.experiments.results.left_regime_at`) set to NaN: its pair drops out
    of a check instead of counting as a win for the other arm (the design's rule). ``common`` runs
    and tables without the column are returned as they are."""
    if "left_regime" not in per_run.columns:
        return per_run
    out = per_run.copy()
    theory = out["protocol"].astype(str).str.startswith("theory") & out["left_regime"].astype(bool)
    out.loc[theory, "rate"] = math.nan
    return out


def evaluate(per_run: pd.DataFrame, dataset: str) -> list[Verdict]:
    """Every claim on one data set, under every protocol whose runs the table holds (claims (a)
    and (b) need the protocol's β sweep, (c) its depth sweep, the factorial its four cells), each
    by its arm's rule (:func:`resgd.experiments.design.rule`), after :func:`out_of_regime_removed`.
    ``numbers["arm_seeds"]``: the seeds the check's arm trained (fewer than 8: descriptive)."""
    out = []
    per_run = out_of_regime_removed(per_run)
    for protocol, rows in per_run.groupby("protocol", sort=False):
        for claim in registry.CLAIMS:
            part = rows[rows["experiment"] == claim.experiment]
            if part["beta"].nunique() < claim.min_betas:
                continue  # a sensitivity arm with β ∈ {0, 1} only: (a) is checked, (b) is not
            if not part.empty:
                v = CHECKS[claim.name](rows, dataset=dataset, figure=figure_label(dataset, claim.name),
                                       rule=arm_rule(claim.experiment, str(protocol)))
                left = int(part["left_regime"].astype(bool).sum()) if "left_regime" in part.columns else 0
                out.append(replace(v, numbers={**v.numbers, "arm_seeds": int(part["seed"].nunique()),
                                               "runs_out_of_regime": left}))
    return out


def horizon_outcome(outcomes: Sequence[str]) -> str:
    """The design's reading of one check at every horizon: ``holds`` (``fails``) when all agree,
    ``horizon-dependent`` when some horizon decided and not all agree, else ``undecided``."""
    outcomes = list(outcomes)
    if outcomes and all(o == outcomes[0] for o in outcomes) and outcomes[0] in ("holds", "fails"):
        return outcomes[0]
    return "horizon-dependent" if any(o in ("holds", "fails") for o in outcomes) else "undecided"


def evaluate_horizons(tables: dict[float, pd.DataFrame], dataset: str) -> list[Verdict]:
    """:func:`evaluate` at every horizon of ``tables`` (fraction of T → per-run table read there,
    :data:`resgd.experiments.design.HORIZONS`), combined by :func:`horizon_outcome`. Each verdict
    keeps the numbers of the full horizon T, plus ``horizons`` (fraction → outcome) and
    ``outcome_at_T``."""
    if 1.0 not in tables:
        raise ValueError(f"claims.evaluate_horizons: the full horizon 1.0 is needed, got {sorted(tables)}")
    at = {h: {(v.name, v.protocol): v for v in evaluate(t, dataset)} for h, t in sorted(tables.items())}
    out = []
    for key, v in at[1.0].items():
        outcomes = {f"{h:g}": at[h][key].outcome for h in at if key in at[h]}
        combined = horizon_outcome(list(outcomes.values()))
        words = ", ".join(f"{horizon_name(float(h))}: {o}" for h, o in outcomes.items())
        out.append(replace(v, outcome=combined, detail=f"{v.detail}; at {words}",
                           numbers={**v.numbers, "outcome": combined, "outcome_at_T": v.outcome, "horizons": outcomes}))
    return out


def horizon_name(fraction: float) -> str:
    """A horizon's name from its fraction of T: "T", "T/2", "T/4" (else "0.3T")."""
    return "T" if fraction == 1 else f"T/{round(1 / fraction):d}" if abs(1 / fraction - round(1 / fraction)) < 1e-9 else f"{fraction:g}T"


def verdicts_table(verdicts: Iterable[Verdict]) -> pd.DataFrame:
    """A display table: claim, data set, protocol, figure, verdict, numbers."""
    rows = [{"claim": v.claim, "dataset": v.dataset, "protocol": v.protocol, "figure": v.figure,
             "verdict": v.outcome, "numbers": v.detail} for v in verdicts]
    return pd.DataFrame(rows, columns=["claim", "dataset", "protocol", "figure", "verdict", "numbers"])


FACTORIAL_RULE = "Holm sign test"
"""What decides the factorial in every arm: each skip's exact sign test, Holm-corrected over the two
skips (in an interval arm each skip's interval is shown beside it and decides nothing)."""



# -------------------------------------------------------------------------------- the verdict files
# The verdicts as files and as the claims page's table: one data set's verdicts written as
# ``results/claims/<dataset>_<mode>.json`` and every data set's read back as one table, with the rule
# that decided each, whether it decides (≥ 8 seeds) and the counts per protocol.

def verdicts_payload(verdicts: Sequence[Verdict], *, dataset: str, mode: str,
                     meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """One data set's verdicts as the JSON object of ``<dataset>_<mode>.json``."""
    import resgd

    return {"dataset": dataset, "mode": mode, "version": resgd.__version__, **_jsonable(meta or {}),
            "verdicts": [v.to_dict() for v in verdicts]}


def verdicts_writer(verdicts: Sequence[Verdict], **kwargs: Any) -> Callable[[Path], object]:
    """A writer of :func:`verdicts_payload` for a given (temporary) path, for publishing with other outputs."""
    text = json_text(verdicts_payload(verdicts, **kwargs))
    return lambda path: Path(path).write_text(text, encoding="utf-8")


def write_verdicts(verdicts: Sequence[Verdict], path: str | os.PathLike, *, dataset: str, mode: str,
                   meta: dict[str, Any] | None = None) -> Path:
    """Write one data set's verdicts to ``path`` as JSON, atomically."""
    return write_json(path, verdicts_payload(verdicts, dataset=dataset, mode=mode, meta=meta))


def rule_name(name: str, numbers: dict) -> str:
    """The rule that decided a verdict, as the tables name it: the factorial's :data:`FACTORIAL_RULE`,
    else ``interval`` or ``sign``."""
    if name == FACTORIAL.name:
        return FACTORIAL_RULE
    return "interval" if _interval_parts(numbers) else "sign"


def _interval_parts(numbers: dict) -> list[dict]:
    """The interval-rule results inside a verdict's numbers: the verdict's own, or its parts' (the
    factorial's per-skip intervals, shown beside its Holm sign test)."""
    parts = [numbers] + [v for v in numbers.values() if isinstance(v, dict)]
    return [p for p in parts if p.get("rule") == "interval"]


def interval_summary(verdicts: pd.DataFrame) -> dict[str, Any]:
    """The seeds and level of the checks decided by the interval rule (:data:`design.INTERVAL_ARMS`),
    and their chance of a decided outcome under no effect (1 − level), for the claims page's prose.
    An error when no check in ``verdicts`` used the interval (the page would have nothing to say)."""
    used = verdicts[verdicts["rule"] == "interval"]
    if used.empty:
        raise ValueError("claims.interval_summary: no verdict was decided by the interval rule")
    seeds = int(used["seeds"].min())
    level = interval_level(seeds, MIN_COVERAGE)  # the design's level: a check whose seeds dropped out has no interval
    return {"seeds": seeds, "level": level, "chance": 1.0 - level, "checks": int(len(used))}


def _skip_effects(numbers: dict) -> str:
    """The factorial's per-skip effects ('attention skip slows, FFN skip undecided'); '' for other checks.
    The verdict itself only says whether some skip speeds training up; this says what each one does."""
    if not isinstance(numbers.get("attention"), dict):
        return ""
    return ", ".join(f"{name} skip {numbers[key].get('effect', 'undecided')}"
                     for name, key in (("attention", "attention"), ("FFN", "ffn")) if isinstance(numbers.get(key), dict))


def _data_kind(payload: dict) -> str:
    """What a verdicts file was computed on: the synthetic stand-in, a real-format file the loaders
    were told not to check against the published one (:data:`resgd.data.NOT_CANONICAL_LABELS`), or
    verified real data."""
    from ..data import NOT_CANONICAL_LABELS

    if payload.get("is_standin"):
        return "synthetic stand-in"
    return "not canonical" if payload.get("source_label") in NOT_CANONICAL_LABELS else "real"


def _chance(numbers: dict) -> float:
    """The verdict's chance of a decided outcome under no effect (JSON writes non-finite floats as strings)."""
    return float(numbers.get("chance", "nan"))


def decides(numbers: dict) -> bool:
    """Whether a check enters the verdict table: its arm trained at least
    :data:`~resgd.experiments.design.MIN_INTERVAL_SEEDS` seeds (else it is descriptive)."""
    return int(numbers.get("arm_seeds", 0)) >= MIN_INTERVAL_SEEDS


def verdict_counts(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Per protocol, over the deciding checks (``decides``): how many claims hold, fail, are
    horizon-dependent or undecided (of K checks), how many decided outcomes no effect at all would
    give in expectation (the sum of each check's chance); and how many checks are descriptive."""
    deciding = verdicts["decides"] if "decides" in verdicts.columns else pd.Series(True, index=verdicts.index)
    rows = []
    for protocol, g in verdicts.groupby("protocol", sort=False):
        counted = g[deciding[g.index]]
        rows.append({"protocol": protocol, "K": int(len(counted)),
                     **{v.replace("-", "_"): int((counted["verdict"] == v).sum()) for v in VERDICTS},
                     "decided_by_chance": float(counted["chance"].sum()), "descriptive": int(len(g) - len(counted))})
    return pd.DataFrame(rows)


COUNT_VERBS = {"holds": ("holds", "hold"), "fails": ("fails", "fail"), "horizon_dependent": ("is", "are"),
               "undecided": ("is", "are"), "descriptive": ("is", "are")}
"""The verb each count of :func:`verdict_counts` takes in the pages' sentences ("1 fails", "2 are undecided")."""


def count_words(row) -> dict[str, str]:
    """The words that agree with one protocol's counts (a row of :func:`verdict_counts`), for the pages
    to glue beside the counts: ``<column>-verb`` for each count (``holds-verb`` "holds" or "hold",
    ``undecided-verb`` "is" or "are"), ``K-checks`` ("check" or "checks"), ``K-decide`` and
    ``descriptive-checks`` ("check is" or "checks are").

    Why: the pages glued the counts next to fixed plural verbs, and a count of 1 read "1 are
    horizon-dependent"."""
    words = {f"{column}-verb": agree(row[column], *forms) for column, forms in COUNT_VERBS.items()}
    return {**words, "K-checks": agree(row["K"], "check"), "K-decide": agree(row["K"], "decides", "decide"),
            "descriptive-checks": agree(row["descriptive"], "check is", "checks are")}


def load_verdicts(directory: str | os.PathLike | None = None, mode: str = "quick",
                  datasets: Sequence[str] | None = None) -> pd.DataFrame:
    """Every data set's verdicts as one table (rows: claim × data set × protocol), from
    ``<directory>/<dataset>_<mode>.json`` (default directory: ``<results dir>/claims``; default data
    sets: the paper's).

    A missing file is an error that names it and the notebook that writes it.
    """
    folder = Path(directory) if directory is not None else resolve_results_dir() / "claims"
    rows = []
    for dataset in paper_names() if datasets is None else datasets:
        path = folder / f"{dataset}_{mode}.json"
        if not path.is_file():
            notebook = NOTEBOOK.get(dataset, dataset)
            raise FileNotFoundError(
                f"{path} is missing: run notebooks/{notebook}.md in {mode} mode first "
                f"(or `python -m resgd reproduce{' --quick' if mode == 'quick' else ''} --only {dataset}`)"
            )
        payload = json.loads(path.read_text(encoding="utf-8"))
        for item in payload["verdicts"]:
            v = Verdict.from_dict(item)
            rows.append({
                "claim": v.claim, "name": v.name, "dataset": payload.get("dataset", dataset),
                "data": _data_kind(payload), "source": str(payload.get("source_label", "")),
                "protocol": v.protocol, "figure": v.figure, "notebook": NOTEBOOK.get(dataset, dataset),
                "verdict": v.outcome, "chance": _chance(v.numbers), "decides": decides(v.numbers),
                "seeds_in_arm": int(v.numbers.get("arm_seeds", 0)),
                "horizons": ", ".join(f"{horizon_name(float(h))} {o}" for h, o in v.numbers.get("horizons", {}).items()),
                "out_of_regime": int(v.numbers.get("runs_out_of_regime", 0)),
                "shape": str(v.numbers.get("shape", "")),
                "rule": rule_name(v.name, v.numbers),
                "skips": _skip_effects(v.numbers),
                "seeds": min((int(q["seeds"]) for q in _interval_parts(v.numbers)), default=None),
                "level": min((float(q["level"]) for q in _interval_parts(v.numbers)), default=None),
                "numbers": v.detail, "mode": payload.get("mode", mode),
            })
    order = {name: i for i, name in enumerate(CLAIMS)}
    table = pd.DataFrame(rows)
    return table.sort_values(by=["name", "dataset", "protocol"], key=lambda col: col.map(order) if col.name == "name" else col,
                             ignore_index=True)



# ----------------------------------------------------------------------------- false-decision rates
# How often each verdict rule of the book decides when there is no effect at all.
#
# Why: a verdict's false-decision rate is a property of the rule as the book applies it (seed counts,
# the union of tests inside one verdict, the correction), not of one test inside it. So every check
# above is run, as the pages run it, on per-run tables whose rates are
# draws with no effect (no configuration is faster than another), and the fractions of "holds" and
# "fails" are counted. The runs of one seed share data and weights, so each simulated seed draws one
# effect per configuration shared by its depths: the rates of one configuration at its depths have
# correlation ``rho`` (:data:`CORRELATIONS`: 0, 0.5, 1), and so have the seed's differences at its
# depths. The rules no longer used (:data:`REPLAYED`) are simulated beside the design's (``replayed``).
# The design promises at most :data:`~resgd.experiments.design.ALPHA` in each direction;
# ``tests/test_claims.py`` checks it and the claims page shows the table.

NULL_RULES = (
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
    """The verdict of the check called ``name`` in :data:`NULL_RULES` or :data:`REPLAYED` on ``table``
    (the replayed Spearman bound of (b) is (b)'s own check under the sign rule)."""
    if name == POOLED:
        return check_depth_pooled(table)
    by_label = {c.label: c for c in registry.CLAIMS if c.label}
    claim = next((c for c in registry.CLAIMS if c.null_check == name), None) or by_label[name.split(" ", 1)[0]]
    return CHECKS[claim.name](table, rule=rule)


def null_rates(n_sets: int = 5000, *, seeds: int = 3, interval_seeds: int = 8,
               betas=(0.0, 0.25, 0.5, 0.75, 1.0), depths=(2, 6, 10), correlations=CORRELATIONS, seed: int = 0) -> pd.DataFrame:
    """Per rule (the design's :data:`NULL_RULES` and the :data:`REPLAYED` ones) and within-seed
    correlation: the fraction of ``n_sets`` no-effect data sets on which the verdict says "holds" and
    "fails", with the Monte Carlo standard error and the design's bound :data:`ALPHA`."""
    chunks = []
    for replayed, rules in ((False, NULL_RULES), (True, REPLAYED)):
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
    """Write the claims page's table atomically (``tests/test_claims.py`` checks the book's own)."""
    from ..infra.atomic import write_with

    return write_with(null_rates_path(mode, directory), lambda tmp: table.to_csv(tmp, index=False))
