"""The paper's empirical section (its Figs. 3a and 3b, on Jena climate and SST-2, and the single-layer
comparison with and without the residual) as library code.

What the paper reports: single-layer models with the residual connection (β = 1) train faster
than without (β = 0); a larger residual weight β converges faster; deeper models (L = 2, 6, 10)
with residuals reach a lower training loss faster than without. This module holds the science
of that study and the definition of its sweeps:

* :class:`Settings` / :func:`settings` — one data set's settings, from
  :func:`resgd.pipeline.presets.experiments` (``preset`` here; the one place the notebooks and
  ``python -m resgd reproduce`` read them from), with overrides;
* :func:`choose_lr` — the step-size rule; :func:`beta_configs`, :func:`depth_configs` — the sweeps;
* :func:`run_experiments` — the whole section for one data set; :func:`reproduce` — its figures,
  tables and claim verdicts without Jupyter, published together.

Runs, their cache and the sweep engine are in :mod:`resgd.experiments.runs` and :mod:`resgd.pipeline`; the
data in :mod:`resgd.data.spec`; the tables in :mod:`resgd.experiments.tables`. Their names are
re-exported here (``RunConfig``, ``run``, ``sweep``, ``DatasetSpec``, ``load_dataset``, …).
Companion's choices (the paper's text was not available to us) are listed, with the parameter
that holds each, by :func:`choices_table`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..data.spec import (  # noqa: F401 - re-exported: the experiments' public names
    CLASSIFICATION, DATASETS, DTYPES, FEATURES, PAPER_DATASETS, POOLING, DatasetSpec, data_fingerprint, load_dataset,
)
from .tables import (  # noqa: F401
    RUN_KEYS, SPIKE_FACTOR, conditioning_curves, loss_curves, per_run_table, summary_table,
)
from ..pipeline.cache import RESULTS_ENV, resolve_cache_dir, resolve_results_dir  # noqa: F401
from ..pipeline.presets import experiments as preset  # noqa: F401 - re-exported: the pages name study.preset
from ..pipeline.reproduce import Outputs, publish, reproduce_part
from .run_config import RunConfig, config_key  # noqa: F401 - re-exported: the map builds runs through the study
from .runs import CONFIG_COLUMNS, run, runs_table, sweep, sweep_frames  # noqa: F401
from .design import ALPHA, HORIZONS, MEASURES, MIN_COVERAGE, RATE_WINDOW, RELATIVE_TARGET, SPEARMAN_BOUND, STALL_RATIO, arms
from .step_size import (  # noqa: F401
    PROTOCOLS, THEORY_FACTORS, THEORY_PRIMARY, check_protocol, choose_lr, probe_stable, theory_lr, warm_smoothness,
)
from ..validation import ConfigError, check_choice  # noqa: F401 - re-exported
from .experiment_settings import (  # noqa: F401 - re-exported: the study's public names
    LIVING_SCALES, STARTS, TWIN_INITS, TWIN_NAMES, Settings, branch_scales, settings,
)

DECISIONS = {"decide-a": "residual_helps", "decide-b": "beta_monotone", "decide-c": "depth_residual_helps",
             "decide-f": "factorial"}
"""Figure kind → the claim whose deciding statistic it shows (beside that claim's curve figure)."""
FIGURE_KINDS = ("residual", "beta", "depth", "factorial", "conditioning", "rate", "readout", *DECISIONS)
PRIMARY = f"theory c={THEORY_PRIMARY:g}"
"""The protocol label of the theorem's primary step (the one Theorem 1 speaks to)."""
SLUGS = {"common": "common", f"theory c={THEORY_PRIMARY:g}": "theory",
         **{f"theory c={c:g}": f"theory-{'low' if c < THEORY_PRIMARY else 'high'}" for c in THEORY_FACTORS if c != THEORY_PRIMARY}}
"""Protocol label → the short name in glue keys (``<dataset>-<slug>-...``)."""


def choices_table(s: Settings) -> pd.DataFrame:
    """The companion's choices behind these experiments, one row each, with the parameter that holds it."""
    rows = [
        ("loss normalisation", f"reduction={s.reduction!r}: Φ = ½ Σ‖Ŷ−Y‖² / N (mean over samples); GD with step μ on it is GD on the paper's sum with step μ/N", "Settings.reduction"),
        ("widths", f"d_qk = {s.d_qk}, FFN width m = {s.m}", "preset()['widths']"),
        ("initialisation", f"every weight N(0, scale²/fan_in); qk_scale = {s.qk_scale}", "Settings.qk_scale"),
        ("start", f"read-out scale {s.equal_out_scale}: Ŷ⁰ ≈ 0, every model starts near Φ(Ŷ = 0)" if s.start == "equal" else f"read-out scale {s.out_scale}", "Settings.start, equal_out_scale, out_scale"),
        ("depth scaling of the init", "W_V, W_1, W_2 scaled by 1/√L in every sublayer with its skip" if s.branch_scale == "1/sqrt(L)" else "no depth scaling", "Settings.branch_scale"),
        ("twin without residual", f"'{s.twin_init}': " + {"matched": "a sublayer without skip gets a gain on W_V / W_2 so that every hidden state has the residual model's RMS at t = 0 (same seed, same data; experiments.twin)", "living": "a sublayer without skip gets W_V scale 1 and W_1, W_2 scale √2", "scaled": "the same depth scaling as the residual model (dead at L = 6, 10)"}[s.twin_init] + "; the depth figure also shows the He-scaled ('living') and the 1/√L-init twins, labelled, one seed, never in a verdict", "Settings.twin_init"),
        ("residual placement", "β multiplies the skip path of both sublayers (β_ffn = β) except in the factorial, which sets β_ffn apart", "ModelConfig.beta, beta_ffn"),
        ("activation, logit scale", f"{s.activation}, logits / √d_qk" if s.logit_scale == "sqrt" else f"{s.activation}, logits / d_qk", "Settings.activation, Settings.logit_scale"),
        ("step size: common", f"largest μ on the grid {list(s.lr_grid)} for which every β = 1 model of the comparison has a finite loss, lower after {s.probe_iterations} GD steps than at the start (seed {s.seeds[0]}), times safety {s.safety}; one μ per comparison", "Settings.lr_grid, probe_iterations, safety"),
        ("step size: theory", f"μ = c / L̂(β, L, θ⁰), L̂ = max(‖∇²Φ‖, λ_max(JJᵀ)/N) at each seed's own θ⁰, so each run its own μ (power iteration, 20 steps); c ∈ {list(THEORY_FACTORS)}, c = {THEORY_PRIMARY} primary", "step_size.THEORY_FACTORS"),
        ("sizes", f"β sweep and factorial: N = {s.N}, T = {s.iterations}; depth sweep: N = {s.depth_N}, T = {s.depth_iterations}", "Settings.N, iterations, depth_N, depth_iterations"),
        ("seeds", f"{len(s.interval_seeds)} initialisation seeds {list(s.interval_seeds)} in the L = 1 arms of the theorem's protocol (β sweep and factorial, c = {THEORY_PRIMARY:g}), {len(s.seeds)} seeds {list(s.seeds)} in every other arm; the data sample is fixed (data seed {s.data_seed}); curves: mean, band = min–max over seeds", "Settings.interval_seeds, seeds, data_seed; design.INTERVAL_ARMS"),
        ("divergence", "a run stops when Φ exceeds 10⁶ Φ(θ⁽⁰⁾) or is not finite; it is kept (partial history, outcome 'diverged', rate −∞)", "GDConfig.divergence_factor"),
        ("stalled", f"Φ(T)/Φ(0) ≥ {STALL_RATIO}: outcome 'stalled' (never 'diverged', never 'stable')", "design.STALL_RATIO"),
        ("primary speed", "rate = −log(Φ(T)/Φ(0)) / T, the mean per-iteration log contraction (what Theorem 1 bounds by μα); the robustness map decides on the same Φ(T)/Φ(0)", "design (Measures)"),
        ("secondary speeds", f"rate_half = minus the least-squares slope of log Φ(t) over t ∈ [{RATE_WINDOW[0]:g}·T, {RATE_WINDOW[1]:g}·T] (replayed beside the verdicts); iterations to Φ(t) ≤ {RELATIVE_TARGET} Φ(0); loss at T; shown, never deciding", "design.RATE_WINDOW, RELATIVE_TARGET"),
        ("verdict rules: 8-seed arms", f"L = 1 under theory c = {THEORY_PRIMARY:g}: the exact interval for the median of a per-seed statistic ((a) rate difference, (b) Spearman(β, rate), factorial: a skip's mean difference), level ≥ {MIN_COVERAGE:g} (93.0 % at 8 seeds); holds above 0, fails below, else undecided", "design.INTERVAL_ARMS, MIN_COVERAGE; claims.interval_rule"),
        ("verdict rules: other arms", f"(a): the exact sign test at {ALPHA:.0%} per direction (3 seeds can never decide: undecided by design); (c): one sign test over every (L, seed) pair; (b): Spearman(β, median rate) ≥ {SPEARMAN_BOUND} holds, ≤ −{SPEARMAN_BOUND} fails (4.2 % each way)", "design, claims"),
        ("factorial", f"each skip: the sign test of its per-seed mean difference, Holm-corrected over the two skips per direction (family-wise ≤ {ALPHA:.0%})", "claims.check_factorial, claims.holm"),
        ("precision", f"{s.dtype} throughout", "Settings.dtype"),
    ]
    return pd.DataFrame(rows, columns=["choice", "value", "parameter"])


# --------------------------------------------------------------------------- the section

@dataclass
class ExperimentResults:
    """Every run of one data set's experiments (all arms of :func:`resgd.experiments.design.arms`),
    and the tables the book shows."""

    settings: Settings
    data: dict[str, Any]
    lr: pd.DataFrame
    probes: pd.DataFrame
    runs: pd.DataFrame
    _per_run_at: dict[float, pd.DataFrame] = field(default_factory=dict, repr=False)
    _verdicts_at: dict[tuple, list] = field(default_factory=dict, repr=False)
    _readout: pd.DataFrame | None = field(default=None, repr=False)

    @property
    def is_standin(self) -> bool:
        return bool(self.data.get("is_standin", False))

    @property
    def source_label(self) -> str:
        return str(self.data.get("source_label", ""))

    def per_run(self, horizon: float = 1.0) -> pd.DataFrame:
        """One row per run (:func:`resgd.experiments.tables.per_run_table`), read at ``horizon`` · T."""
        if horizon not in self._per_run_at:
            self._per_run_at[horizon] = per_run_table(self.runs, horizon)
        return self._per_run_at[horizon]

    def summary(self) -> pd.DataFrame:
        return summary_table(self.per_run())

    def readout(self) -> pd.DataFrame:
        """Every distinct run's read-out prediction of Φ(T)/Φ(0) beside the measured one
        (:func:`resgd.experiments.readout_link.page_predictions`)."""
        if self._readout is None:
            from .readout_link import page_predictions

            self._readout = page_predictions(self.per_run(), self.settings)
        return self._readout

    def readout_link(self) -> pd.DataFrame:
        """The read-out link's Spearman ρ, run count, 5 % critical |ρ| and 80 %-power |ρ|: over all
        the page's runs, the single-layer runs and the depth sweep's."""
        from .readout_link import link_summary

        pred = self.readout()
        parts = {"all runs": pred, "single layer (β sweep, factorial)": pred[pred["experiment"] != "depth"],
                 "depth sweep": pred[pred["experiment"] == "depth"]}
        return pd.DataFrame([{"runs of": name, **link_summary(part)} for name, part in parts.items()])

    def verdicts(self, measure: str = "rate", horizons: Sequence[float] = HORIZONS):
        """Every claim's verdict on the pre-registered ``measure`` (``design.MEASURES``: the primary
        ``rate``, or ``rate_half`` replayed on the same runs to show where the measure matters), at
        every horizon of ``horizons`` and combined by :func:`resgd.experiments.claims.horizon_outcome`."""
        from .claims import evaluate_horizons

        check_choice("measure", measure, MEASURES)
        key = (measure, tuple(horizons))
        if key not in self._verdicts_at:
            self._verdicts_at[key] = evaluate_horizons({h: self._decided(h, measure) for h in horizons}, self.settings.dataset)
        return self._verdicts_at[key]

    def _decided(self, horizon: float, measure: str = "rate") -> pd.DataFrame:
        """The runs that enter verdicts (matched twins), with ``rate`` the chosen measure."""
        runs = self.per_run(horizon)
        return runs[runs["twin_init"] == "matched"].assign(rate=lambda t: t[measure])


def run_experiments(
    s: Settings,
    *,
    n_jobs: int = 2,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = False,
    scheduler: str | None = None,
    only: Sequence[tuple[str, str]] | None = None,
) -> ExperimentResults:
    """Every arm of the pre-registered design (:func:`resgd.experiments.design.arms`) for one data
    set: the step sizes of each protocol, then the runs, all cached. Tags each run with its
    arm (``experiment``, ``protocol``, ``c``, ``twin_init``, ``beta_ffn``). ``only``: the matched arms to run,
    as (experiment, protocol label) pairs (the Jena stand-in's sensitivity row runs the L = 1 arms of
    the theorem's protocol only)."""
    data = load_dataset(s.spec, s.dtype)
    engine = {"n_jobs": n_jobs, "cache_dir": cache_dir, "progress": progress, "scheduler": scheduler}
    sizes = {"beta": s, "factorial": s, "depth": s.depth()}
    chosen = [arm for arm in arms(s.betas, s.depths)
              if only is None or ((arm.experiment, arm.label) in set(only) and arm.twin_init == "matched")]
    common = {}
    probes = []
    for experiment, depths in (("beta", [1]), ("depth", list(s.depths))):
        if any(arm.protocol == "common" and (arm.experiment == "depth") == (experiment == "depth") for arm in chosen):
            common[experiment], table = choose_lr(sizes[experiment], depths, **engine)
            probes.append(table.assign(comparison=experiment))
    frames, steps = [], []
    warm_smoothness([(replace(sizes[arm.experiment], twin_init=arm.twin_init), beta, L, beta_ffn, seed)
                     for arm in chosen if arm.protocol == "theory"
                     for beta, beta_ffn, L in arm.points for seed in arm.seeds(sizes[arm.experiment])],
                    n_jobs=n_jobs, cache_dir=cache_dir, scheduler=scheduler)
    planned = []
    for arm in chosen:
        arm_s = replace(sizes[arm.experiment], twin_init=arm.twin_init)
        seeds = arm.seeds(arm_s)
        configs = []
        for beta, beta_ffn, L in arm.points:
            for seed in seeds:
                lr = (common["depth" if arm.experiment == "depth" else "beta"] if arm.protocol == "common"
                      else theory_lr(arm_s, beta, L, arm.c, seed=seed, beta_ffn=beta_ffn, cache_dir=cache_dir))
                steps.append({"experiment": arm.experiment, "protocol": arm.label, "twin_init": arm.twin_init,
                              "beta": beta, "beta_ffn": beta if beta_ffn is None else beta_ffn, "n_layers": L,
                              "seed": seed, "lr": lr})
                configs.append(arm_s.config(beta, L, seed, lr, beta_ffn=beta_ffn))
        planned.append((arm, configs))
    # every arm's runs in one sweep: one worker pool, the longest runs first, no idle tail per arm
    frames_by_key = sweep_frames([c for _, configs in planned for c in configs],
                                 desc=f"{s.dataset}: {len(planned)} arms", **engine)
    for arm, configs in planned:
        runs = runs_table(frames_by_key, configs)
        frames.append(runs.assign(experiment=arm.experiment, protocol=arm.label,
                                  c=math.nan if arm.c is None else arm.c, twin_init=arm.twin_init,
                                  beta_ffn=runs["key"].map({config_key(c): c.model.residual_ffn for c in configs})))
    description = data.describe()
    summary = {k: description[k] for k in ("name", "source_label", "is_standin", "n_train", "n_test", "n_tokens", "d")}
    return ExperimentResults(settings=s, data=summary, lr=pd.DataFrame(steps),
                             probes=pd.concat(probes, ignore_index=True) if probes else pd.DataFrame(),
                             runs=pd.concat(frames, ignore_index=True))


# --------------------------------------------------------------------------- figures and outputs

def figure_name(kind: str, dataset: str) -> str:
    """File name (without extension) of a figure: ``<dataset>_<kind>``."""
    check_choice("figure kind", kind, FIGURE_KINDS)
    return f"{dataset}_{kind}"


def _without_plain_init(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows the figures draw: every depth-sweep row (its twins are figure rows), and the matched
    runs of the other sweeps (the β sweep's plain-init row is a table: :func:`beta_init_table`)."""
    return frame[(frame["experiment"] == "depth") | (frame["twin_init"] == "matched")]


def make_figure(results: ExperimentResults, kind: str):
    """The figure ``kind`` ∈ FIGURE_KINDS of ``results``, drawn by :mod:`resgd.plots.experiments`:
    Φ(t)/Φ(0) curves per protocol (residual, beta, depth, factorial), the conditioning of Z⁽ᵗ⁾
    and the rate against σ_min²/σ_max²(Z⁰) under the theorem's protocol."""
    from ..plots import experiments as plots

    check_choice("kind", kind, FIGURE_KINDS)
    name, runs = results.settings.dataset, results.runs
    if kind in DECISIONS:
        from ..plots.style import label_standin, banner_text

        fig = plots.plot_decision(results.verdicts(), DECISIONS[kind], dataset=name)
        label_standin(fig, banner_text(runs))
        plots.label_source(fig, runs)
        return fig
    runs = _without_plain_init(runs)
    if kind == "residual":
        part = runs[(runs["experiment"] == "beta") & runs["beta"].isin([0.0, 1.0])]
        return plots.plot_residual(loss_curves(part), dataset=name)
    if kind == "beta":
        part = runs[(runs["experiment"] == "beta") & runs["protocol"].isin(["common", PRIMARY])]
        return plots.plot_beta_sweep(loss_curves(part), dataset=name)
    if kind in ("depth", "factorial"):
        return getattr(plots, f"plot_{kind}")(loss_curves(runs[runs["experiment"] == kind]), dataset=name)
    if kind == "readout":
        from ..plots.robustness import plot_readout_link
        from ..plots.style import banner_text

        pred = results.readout()
        pred = pred.assign(dataset=name, protocol=pred["experiment"].map(
            {"beta": "L = 1, β sweep", "factorial": "L = 1, factorial", "depth": "depth sweep"}) + ", " + pred["protocol"])
        return plot_readout_link(pred, standin=banner_text(runs))
    primary = runs[(runs["protocol"] == PRIMARY) & (runs["experiment"] != "factorial")]
    if kind == "conditioning":
        return plots.plot_conditioning(conditioning_curves(primary), dataset=name)
    per_run = _without_plain_init(results.per_run())
    return plots.plot_rate(per_run[(per_run["protocol"] == PRIMARY) & (per_run["experiment"] != "factorial")], dataset=name)


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
    """Each verdict on the primary speed (``rate``) beside the same rule on the earlier one
    (``rate_half``, the half-run slope), on the same runs: where the measure matters."""
    primary = {(v.name, v.protocol): v.outcome for v in results.verdicts("rate")}
    replay = {(v.name, v.protocol): v.outcome for v in results.verdicts("rate_half")}
    rows = [{"claim": name, "protocol": protocol, "rate (deciding)": outcome, "rate_half (replayed)": replay.get((name, protocol), "—"),
             "changed": replay.get((name, protocol)) != outcome} for (name, protocol), outcome in primary.items()]
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
    from .claims import check_depth_pooled, horizon_name, decides, out_of_regime_removed

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
               "earlier rule at T": pooled.get(v.protocol, "") if v.name == "depth_residual_helps" else v.numbers["outcome_at_T"]}
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
        key = {"residual_helps": "a", "beta_monotone": "b", "depth_residual_helps": "c", "factorial": "f"}[v.name]
        out[f"{slug}-{key}"] = v.outcome
        out[f"{slug}-{key}-detail"] = v.detail
        if v.numbers.get("rule") == "interval" or (key == "f" and v.numbers["attention"].get("rule") == "interval"):
            level = v.numbers["attention"]["level"] if key == "f" else v.numbers["level"]
            out[f"{slug}-{key}-level"] = 100 * float(level)
        if key == "a":
            out[f"{slug}-a-won"] = f"{v.numbers['faster_in']} of {v.numbers['seeds']}"
            out[f"{slug}-a-chance"] = float(v.numbers["chance"])
        if key == "b":
            out[f"{slug}-b-rho"] = float(v.numbers["spearman"])
            out[f"{slug}-b-shape"] = str(v.numbers["shape"])
        if key == "f":
            out[f"{slug}-f-carried"] = v.numbers["carried_by"]
        if key == "c":
            out[f"{slug}-c-positive"] = f"{v.numbers['positive']} of {v.numbers['seeds']}"
            out[f"{slug}-c-threshold"] = "—" if v.numbers["threshold"] is None else int(v.numbers["threshold"])
    replay = replay_table(results)
    out["replay-changed"], out["replay-K"] = int(replay["changed"].sum()), int(len(replay))
    horizons = horizon_table(results)
    out["horizon-dependent"] = int((horizons["verdict"] == "horizon-dependent").sum())
    out["horizon-K"] = int(len(horizons))
    out["descriptive"] = int((~horizons["decides"]).sum())
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


def result_files(results: ExperimentResults) -> dict[str, tuple[str, Any]]:
    """The results tables (CSV) and the claim verdicts (JSON): label → (path in the results folder, writer)."""
    from .claims import verdicts_writer

    s = results.settings
    tag = f"{s.dataset}_{s.mode}"
    files = {
        name: (f"tables/{tag}_{suffix}.csv", lambda tmp, table=table: table.to_csv(tmp, index=False))
        for name, suffix, table in (("summary", "summary", results.summary()), ("per_run", "runs", results.per_run()),
                                    ("probes", "probes", results.probes), ("steps", "steps", results.lr))
    }
    files["claims"] = (f"claims/{tag}.json", verdicts_writer(
        results.verdicts(), dataset=s.dataset, mode=s.mode,
        meta={"source_label": results.source_label, "is_standin": results.is_standin,
              "lr": {f"{r.experiment}/{r.protocol}/{r.twin_init}/L={r.n_layers}/β={r.beta:g}/β_ffn={r.beta_ffn:g}/seed={r.seed}": r.lr
                     for r in results.lr.itertuples()},
              "iterations": s.iterations, "depth_iterations": s.depth_iterations, "seeds": list(s.seeds), "N": s.N},
    ))
    return files


def write_outputs(results: ExperimentResults, *, results_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Write the results tables (CSV) and the claim verdicts (JSON), published together."""
    return publish(Outputs(result_files=result_files(results)), results_dir=results_dir)


def outputs(dataset: str, quick: bool, *, n_jobs: int = 2, progress: bool = True, scheduler: str | None = None,
            **overrides: Any) -> Outputs:
    """Everything the data set's notebook makes: its figures, tables and verdicts."""
    results = run_experiments(settings(dataset, quick, **overrides), n_jobs=n_jobs, progress=progress, scheduler=scheduler)
    figures = {figure_name(kind, dataset): make_figure(results, kind) for kind in FIGURE_KINDS}
    return Outputs(figures=figures, result_files=result_files(results))


def reproduce(
    dataset: str,
    quick: bool,
    directory: str | os.PathLike | None = None,
    *,
    n_jobs: int = 2,
    progress: bool = True,
    scheduler: str | None = None,
    **overrides: Any,
) -> dict[str, Path]:
    """Everything the data set's notebook makes, without Jupyter: figures (into ``directory``,
    else ``$RESGD_FIGURES_DIR``, else ``./figures``), tables and verdicts (into the results
    folder), all published together once every output folder was found writable."""
    check_choice("dataset", dataset, DATASETS)
    return reproduce_part(
        lambda: outputs(dataset, quick, n_jobs=n_jobs, progress=progress, scheduler=scheduler, **overrides),
        figures_dir=directory, writes_results=True,
    )


def reproduce_jena(quick: bool, figures_dir: str | os.PathLike | None = None, *, n_jobs: int = 2,
                   scheduler: str | None = None) -> dict[str, Path]:
    """The Jena page's figures, tables and verdicts (the study contract)."""
    return reproduce("jena", quick, figures_dir, n_jobs=n_jobs, scheduler=scheduler)


def reproduce_sst2(quick: bool, figures_dir: str | os.PathLike | None = None, *, n_jobs: int = 2,
                   scheduler: str | None = None) -> dict[str, Path]:
    """The SST-2 page's figures, tables and verdicts (the study contract)."""
    return reproduce("sst2", quick, figures_dir, n_jobs=n_jobs, scheduler=scheduler)
