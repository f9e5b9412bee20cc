"""What pages 4, 5 and 7 show from one data set's results: their tables, glued numbers and figures, the
twins at init, and the book's findings as sentences built from the verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from ..claim_registry import BETA_MONOTONE, CLAIMS, DEPTH_RESIDUAL_HELPS, FACTORIAL, HORIZON, RESIDUAL_HELPS, claim
from ..core.model import init_params
from ..data.spec import load_dataset
from ..dataset_registry import paper
from ..validation import ConfigError, check_choice
from ..words import agree, count_noun
from .claims import of_seeds
from .configuration import TWIN_NAMES, rms
from .design import MIN_INTERVAL_SEEDS
from .results import PRIMARY, ExperimentResults, conditioning_curves, loss_curves
from .steps import THEORY_FACTORS, THEORY_PRIMARY

# ------------------------------------------------------------------------------------------- tables
# The tables pages 4 and 5 show beside their figures, each read from one data set's
# :class:`~resgd.experiments.results.ExperimentResults`: the twins, the steps, the measure replay,
# the β sweep's init, the horizons and the regime.

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
    from .claims import check_depth_pooled, decides, horizon_name, out_of_regime_removed

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
    (a step raised Φ: :func:`resgd.experiments.results.left_regime_at`) and before T/2, how many of
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



# ------------------------------------------------------------------------------------ glued numbers
# The numbers glued into pages 4 and 5 (``<dataset>-<key>`` in the page's text), read from one
# data set's :class:`~resgd.experiments.results.ExperimentResults`.

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



# ------------------------------------------------------------------------------------------ figures
# Which figure of pages 4 and 5 is drawn from which table: figure kind → drawing function.

DECISIONS = {c.decision_figure: c.name for c in CLAIMS}
"""Figure kind → the claim whose deciding statistic it shows (beside that claim's curve figure)."""


def _without_plain_init(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows the figures draw: every depth-sweep row (its twins are figure rows), and the matched
    runs of the other sweeps (the β sweep's plain-init row is a table:
    :func:`resgd.experiments.pages.beta_init_table`)."""
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
    from .design import OWN

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


# -------------------------------------------------------------------------------- the twins at init
# The matched and He-scaled twins beside the residual model at θ⁰: hidden-state RMS, gradient norms, L̂.
TWIN_MODELS = (("residual", 1.0, "matched"), ("matched twin", 0.0, "matched"), ("He-scaled twin", 0.0, "living"))


def twin_table(s, *, cache_dir=None, smoothness: bool = True, n_jobs: int = 2):
    """At t = 0, per depth and seed of ``s`` (a :class:`resgd.experiments.configuration.Settings`; give its
    ``depth()`` sizes): the RMS of the last hidden state, the gradient norm (whole, the read-out's, the
    rest's) and L̂ of the residual model, its matched twin and the earlier He-scaled twin, with the
    twins' ratios to the residual model. L̂ comes from the run cache; the missing ones (the He-scaled
    twin's, which no arm trains under the theorem's step) are computed first on ``n_jobs`` workers."""
    import math
    from dataclasses import replace

    import pandas as pd

    from ..core.autograd_reference import autograd_loss_and_grad
    from .steps import smoothness as smoothness_of
    from .steps import warm_smoothness

    if smoothness:
        warm_smoothness([(replace(s, twin_init=init), beta, L, None, seed) for L in s.depths for seed in s.seeds
                         for _, beta, init in TWIN_MODELS], n_jobs=n_jobs, cache_dir=cache_dir)
    data = load_dataset(s.spec, "float64")
    rows = []
    for L in s.depths:
        for seed in s.seeds:
            for model, beta, init in TWIN_MODELS:
                ss = replace(s, twin_init=init)
                cfg = ss.model(beta, L, seed=seed)
                _, grads, trace = autograd_loss_and_grad(init_params(cfg, seed), cfg, data.X_train, data.Y_train,
                                                data.mask_train, s.reduction)
                readout = float(grads["W_U"].norm())
                body = math.sqrt(sum(float(g.pow(2).sum()) for k, g in grads.items() if k != "W_U"))
                rows.append({"n_layers": L, "seed": seed, "model": model,
                             "rms_H": rms(trace.layers[-1].H, data.mask_train),
                             "grad": math.hypot(readout, body), "grad_readout": readout, "grad_rest": body,
                             "L_hat": smoothness_of(ss, beta, L, seed=seed, cache_dir=cache_dir) if smoothness else math.nan})
    table = pd.DataFrame(rows)
    ref = table[table["model"] == "residual"].set_index(["n_layers", "seed"])
    for column in ("rms_H", "grad", "grad_rest", "L_hat"):
        table[f"{column}_ratio"] = table[column].to_numpy() / ref.loc[list(zip(table["n_layers"], table["seed"])), column].to_numpy()
    return table


def twin_summary(table) -> dict[str, float]:
    """The ranges a page states about :func:`twin_table`: over every depth and seed, the matched twin's
    RMS deviation, gradient and L̂ ratios, and the He-scaled twin's."""
    out = {}
    for model, slug in (("matched twin", "twin"), ("He-scaled twin", "he")):
        part = table[table["model"] == model]
        out[f"{slug}-rms-dev"] = float((part["rms_H_ratio"] - 1).abs().max())
        out[f"{slug}-rms-max"] = float(part["rms_H_ratio"].max())
        for column in ("grad", "grad_rest", "L_hat"):
            out[f"{slug}-{column.replace('_', '')}-min"] = float(part[f"{column}_ratio"].min())
            out[f"{slug}-{column.replace('_', '')}-max"] = float(part[f"{column}_ratio"].max())
    out["res-lhat-max"] = float(table.loc[table["model"] == "residual", "L_hat"].max())
    out["he-lhat-abs-max"] = float(table.loc[table["model"] == "He-scaled twin", "L_hat"].max())
    return out



# ------------------------------------------------------------------------ the findings as sentences
# The book's findings in plain sentences, each built from the verdicts it states (never typed by hand).
#
# Why: a reader of the landing page wants the conclusion before the table; a sentence typed by hand
# goes stale when a rerun changes a verdict. Each sentence here is a function of the verdicts table of
# :func:`resgd.experiments.claims.load_verdicts` and names the protocol it speaks of.

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
