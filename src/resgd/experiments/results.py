"""One data set's experiments once run (:class:`ExperimentResults`), the tables read from its runs,
and the files they leave in the results folder.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.stats import empirical_rate
from ..pipeline.reproduce import Outputs, publish
from ..validation import check_choice
from .configuration import Settings
from .design import HORIZONS, MEASURES, OUTCOMES, RATE_WINDOW, RELATIVE_TARGET, STALL_RATIO
from .steps import THEORY_PRIMARY, rise_mask

# ------------------------------------------------------------------------ tables read from the runs
# The empirical section's tables: one row per run, one per configuration, curves, numbers for the prose.
#
# Everything here reads the tidy run table of :func:`resgd.experiments.runs.sweep` (one row per recorded
# iteration of every run) and computes without training, so the notebooks, the claims and
# ``reproduce`` summarize the same runs the same way.

RUN_KEYS = ["experiment", "protocol", "twin_init", "dataset", "beta", "beta_ffn", "n_layers", "lr", "seed"]
CONFIG_KEYS = ["experiment", "protocol", "twin_init", "n_layers", "beta", "beta_ffn"]
PATH_COLUMNS = ("engine_engine", "engine_mkl_path", "engine_isa", "engine_torch")
"""The computing path of each run (:data:`resgd.experiments.runs.CONFIG_COLUMNS`), kept in the per-run table."""
SPIKE_FACTOR = 1.5
"""A loss spike: one GD step that multiplies Φ by more than this (counted in ``loss_spikes``)."""


def outcome(diverged: bool, loss_ratio_T: float) -> str:
    """``diverged``, ``stalled`` (Φ(T)/Φ(0) ≥ :data:`~resgd.experiments.design.STALL_RATIO`) or ``learning``."""
    if diverged:
        return "diverged"
    return "stalled" if not loss_ratio_T < STALL_RATIO else "learning"


def left_regime_at(loss: np.ndarray) -> float:
    """The first iteration t whose GD step raised the loss, Φ(t+1) > (1 + :data:`REGIME_TOL`) Φ(t)
    (a non-finite Φ(t+1) counts), or NaN if none: from t on the run is proven to have left the
    theorem's regime. Why this proves it: where Φ is L-smooth along the step, GD with μ < 2/L
    lowers Φ (the descent lemma), so a rise shows μ ≥ 2/L on that segment. The converse does not
    hold: a run never flagged may still have had μ > 2/L somewhere (the count is a lower bound)."""
    hits = np.flatnonzero(rise_mask(loss))
    return float(hits[0]) if hits.size else math.nan


def per_run_table(runs: pd.DataFrame, horizon: float = 1.0) -> pd.DataFrame:
    """One row per run, with the pre-registered measures (:mod:`resgd.experiments.design`): the
    primary rate ``rate`` = −log(Φ(T)/Φ(0))/T (−∞ when diverged), the secondary ``rate_half`` (minus
    the slope of log Φ over the first half of the run), the iterations to Φ ≤ ½ Φ(0) (+∞ when never)
    and their negative ``first_to_target`` (larger is faster: the replayed "who gets there first"),
    the outcome, Φ(T)/Φ(0) and the loss at T, loss spikes, where the run left the theorem's regime
    (:func:`left_regime_at`), the spectrum of Z⁽⁰⁾ and the end-of-run metrics.

    ``horizon`` < 1 reads every run as if it had stopped at h = round(horizon · T) (the
    design's :data:`~resgd.experiments.design.HORIZONS`): the history up to h, diverged only if
    it diverged by h; the end-of-run metrics stay those of T."""
    if not 0 < horizon <= 1:
        raise ValueError(f"per_run_table: horizon is a fraction of T in (0, 1], got {horizon!r}")
    rows = []
    for keys, h in runs.groupby(RUN_KEYS, sort=False):
        h = h.sort_values("iteration")
        first = h.iloc[0]
        T = int(first["iterations"])
        left_at = left_regime_at(h["loss"].to_numpy(dtype=float))
        diverged = bool(first["diverged"])
        if horizon < 1:
            T = int(round(horizon * T))
            diverged = diverged and float(first["diverged_at"]) <= T
            h = h[h["iteration"] <= T]
        loss_0 = float(first["loss"])
        loss_T = math.inf if diverged else float(h["loss"].iloc[-1])
        ratio_T = loss_T / loss_0 if loss_0 > 0 else math.nan
        reached = h.loc[h["loss"] <= RELATIVE_TARGET * loss_0, "iteration"]
        lo, hi = (int(round(f * T)) for f in RATE_WINDOW)
        sigma = h.dropna(subset=["sigma_min_Z"])
        smin0, smax0 = float(sigma["sigma_min_Z"].iloc[0]), float(sigma["sigma_max_Z"].iloc[0])
        rate_half = -math.inf if diverged else empirical_rate(h, start=lo, stop=hi + 1)
        rate = -math.inf if diverged else (-math.log(ratio_T) / T if ratio_T > 0 and T > 0 else math.nan)
        rows.append({
            **dict(zip(RUN_KEYS, keys)),
            "c": float(first["c"]) if "c" in h.columns else math.nan,
            "iterations": T,
            "outcome": outcome(diverged, ratio_T),
            "diverged": diverged,
            "diverged_at": first["diverged_at"],
            "left_regime_at": left_at,
            "left_regime": bool(left_at < T),
            "loss_0": loss_0,
            "loss_T": loss_T,
            "loss_ratio_T": ratio_T,
            "rate": rate,
            "rate_half": rate_half,
            "rate_per_lr": rate / float(first["lr"]) if math.isfinite(rate) else math.nan,
            "iterations_to_target": float(reached.iloc[0]) if len(reached) else math.inf,
            "first_to_target": -float(reached.iloc[0]) if len(reached) else -math.inf,
            "loss_spikes": int((h["ratio"] > SPIKE_FACTOR).sum()),
            "sigma_min_Z0": smin0,
            "sigma_max_Z0": smax0,
            "rate_ratio_Z0": (smin0 / smax0) ** 2 if smax0 > 0 else 0.0,
            "test_loss": float(first["test_loss"]),
            "train_acc": float(first["train_acc"]),
            "test_acc": float(first["test_acc"]),
            "is_standin": bool(first["is_standin"]),
            "source_label": str(first["source_label"]),
            **{c: first[c] for c in PATH_COLUMNS if c in h.columns},
        })
    return pd.DataFrame(rows)


def summary_table(per_run: pd.DataFrame) -> pd.DataFrame:
    """The results table: one row per configuration (arm, L, β, β_ffn), seeds aggregated: median
    rate and iterations to the relative target (the primary and secondary speeds), the outcomes
    counted, the median Φ(T)/Φ(0) and mean loss at T (+∞ when a seed diverged)."""
    rows = []
    for keys, g in per_run.groupby(CONFIG_KEYS, sort=False):
        counts = g["outcome"].value_counts()
        row = {**dict(zip(CONFIG_KEYS, keys)), "lr": float(g["lr"].median()), "seeds": len(g),
               **{o: int(counts.get(o, 0)) for o in OUTCOMES},
               "rate": float(g["rate"].median()),
               "rate_half": float(g["rate_half"].median()),
               "rate_per_lr": float(g["rate_per_lr"].median()),
               "iterations_to_target": float(g["iterations_to_target"].median()),
               "loss_ratio_T": float(g["loss_ratio_T"].median()),
               "loss_0": float(g["loss_0"].mean()),
               "loss_T": float(g["loss_T"].mean()),
               "loss_spikes": int(g["loss_spikes"].sum()),
               "rate_ratio_Z0": float(g["rate_ratio_Z0"].mean()),
               "test_loss": float(g["test_loss"].mean())}
        if g["train_acc"].notna().any() or g["test_acc"].notna().any():
            row["train_acc"] = float(g["train_acc"].mean())
            row["test_acc"] = float(g["test_acc"].mean())
        rows.append(row)
    table = pd.DataFrame(rows)
    return table.sort_values(["experiment", "protocol", "n_layers", "beta", "beta_ffn"],
                             ascending=[True, True, True, False, False], ignore_index=True)


SUMMARY_PARTS = {
    "outcomes": ("lr", "seeds", "learning", "stalled", "diverged", "loss_spikes"),
    "speed": ("rate", "rate_half", "rate_per_lr", "iterations_to_target", "loss_ratio_T"),
    "losses": ("loss_0", "loss_T", "rate_ratio_Z0", "test_loss", "train_acc", "test_acc"),
}
"""The results table's columns in three narrower tables with the same rows: its 17 to 19 measures beside
the six configuration columns did not fit a page's column (on paper they were printed at the smallest size)."""


def summary_parts(summary: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """:func:`summary_table` as the tables of :data:`SUMMARY_PARTS`, each indexed by the configuration
    (:data:`CONFIG_KEYS`), every value as it is; a column in none of them is an error (it would go unshown)."""
    keyed = summary.set_index(CONFIG_KEYS)
    placed = {column for columns in SUMMARY_PARTS.values() for column in columns}
    unplaced = [column for column in keyed.columns if column not in placed]
    if unplaced:
        raise ValueError(f"results table: column(s) {unplaced} are in no part of tables.SUMMARY_PARTS; add them to one")
    return {name: keyed[[c for c in columns if c in keyed.columns]] for name, columns in SUMMARY_PARTS.items()}


def _band(frame: pd.DataFrame, by: list[str], value: str, center: str = "mean") -> pd.DataFrame:
    """Per group: the ``center`` ("mean", or "geomean" for quantities spanning decades) and the
    min–max band over the runs."""
    grouped = frame.groupby(by, sort=True)[value]
    out = grouped.agg(center="mean", lo="min", hi="max", n_runs="count").reset_index()
    if center == "geomean":
        logs = np.log(frame[value].where(frame[value] > 0))
        out["center"] = np.exp(logs.groupby([frame[k] for k in by], sort=True).mean()).to_numpy()
    return out


CURVE_KEYS = ["experiment", "protocol", "twin_init", "beta", "beta_ffn", "n_layers"]


def loss_curves(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy Φ(t)/Φ(0) curves for the loss figures: per configuration (:data:`CURVE_KEYS`) the mean
    over the seeds that did not diverge with a min–max band (``kind="mean"``), plus each diverged
    run's partial curve (``kind="diverged"``, one per seed) so the figure can show it."""
    keys = CURVE_KEYS
    runs = runs.assign(relative=runs["loss"] / runs.groupby(RUN_KEYS, sort=False)["loss"].transform("first"))
    ok = runs[~runs["diverged"]]
    mean = _band(ok, keys + ["iteration"], "relative").assign(kind="mean", seed=-1)
    n_seeds = runs.groupby(keys)["seed"].nunique().rename("n_seeds")
    n_div = runs[runs["diverged"]].groupby(keys)["seed"].nunique().rename("n_diverged")
    bad = runs[runs["diverged"]][keys + ["iteration", "seed", "relative"]].rename(columns={"relative": "center"})
    bad = bad.assign(lo=bad["center"], hi=bad["center"], n_runs=1, kind="diverged")
    curves = pd.concat([mean, bad], ignore_index=True)
    curves = curves.join(n_seeds, on=keys).join(n_div, on=keys)
    curves["n_diverged"] = curves["n_diverged"].fillna(0).astype(int)
    curves["is_standin"] = bool(runs["is_standin"].any()) if len(runs) else False
    curves["source_label"] = runs["source_label"].iloc[0] if len(runs) else ""
    return curves


def conditioning_curves(runs: pd.DataFrame) -> pd.DataFrame:
    """σ_min(Z⁽ᵗ⁾) and σ_min²/σ_max²(Z⁽ᵗ⁾) of the first layer, where recorded: geometric mean and
    min–max band over the seeds that did not diverge (long format: column ``quantity``)."""
    keys = CURVE_KEYS + ["iteration"]
    rec = runs[~runs["diverged"]].dropna(subset=["sigma_min_Z"]).copy()
    rec["rate_ratio_Z"] = (rec["sigma_min_Z"] / rec["sigma_max_Z"]) ** 2
    parts = [_band(rec, keys, q, center="geomean").assign(quantity=q) for q in ("sigma_min_Z", "rate_ratio_Z")]
    curves = pd.concat(parts, ignore_index=True)
    curves["is_standin"] = bool(runs["is_standin"].any()) if len(runs) else False
    curves["source_label"] = runs["source_label"].iloc[0] if len(runs) else ""
    return curves



# --------------------------------------------------------------------------- one data set's results
# One data set's experiments once run: every run of the design and the tables read from them.

PRIMARY = f"theory c={THEORY_PRIMARY:g}"
"""The protocol label of the theorem's primary step (the one Theorem 1 speaks to)."""


@dataclass
class ExperimentResults:
    """Every run of one data set's experiments (all arms of :func:`resgd.experiments.design.arms`),
    and the tables the book shows."""

    settings: Settings
    data: dict[str, Any]
    lr: pd.DataFrame
    probes: pd.DataFrame
    runs: pd.DataFrame
    speed: Any = None
    """Design v6's runs and verdicts (:class:`resgd.experiments.study.SpeedResults`); None where the
    settings have no v6 seeds (the toy data sets)."""
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
        """One row per run (:func:`resgd.experiments.results.per_run_table`), read at ``horizon`` · T."""
        if horizon not in self._per_run_at:
            self._per_run_at[horizon] = per_run_table(self.runs, horizon)
        return self._per_run_at[horizon]

    def summary(self) -> pd.DataFrame:
        return summary_table(self.per_run())

    def readout(self) -> pd.DataFrame:
        """Every distinct run's read-out prediction of Φ(T)/Φ(0) beside the measured one
        (:func:`resgd.experiments.readout_closed_form.page_predictions`)."""
        if self._readout is None:
            from .readout_closed_form import page_predictions

            self._readout = page_predictions(self.per_run(), self.settings)
        return self._readout

    def readout_link(self) -> pd.DataFrame:
        """The read-out link's Spearman ρ, run count, 5 % critical |ρ| and 80 %-power |ρ|: over all
        the page's runs, the single-layer runs and the depth sweep's."""
        from .readout_closed_form import link_summary

        pred = self.readout()
        parts = {"all runs": pred, "single layer (β sweep, factorial)": pred[pred["experiment"] != "depth"],
                 "depth sweep": pred[pred["experiment"] == "depth"]}
        return pd.DataFrame([{"runs of": name, **link_summary(part)} for name, part in parts.items()])

    def verdicts(self, measure: str = "rate", horizons: Sequence[float] = HORIZONS):
        """Every claim's verdict on the pre-registered ``measure`` (``design.MEASURES``: the primary
        ``rate``, or ``rate_half`` or ``first_to_target`` replayed on the same runs to show where the
        measure matters), at every horizon of ``horizons`` and combined by
        :func:`resgd.experiments.claims.horizon_outcome`."""
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



# -------------------------------------------------------------------------------- the results files
# The files one data set's run leaves in the results folder: its tables (CSV) and its claim
# verdicts (JSON), with their names and writers.

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
    if results.speed is not None:
        files["speed_claims"] = (f"claims/{tag}_v6.json", verdicts_writer(
            results.speed.verdicts(), dataset=s.dataset, mode=s.mode,
            meta={"design": "v6", "realisability": results.speed.realisability}))
        files["ladder"] = (f"tables/{tag}_ladder.csv",
                           lambda tmp, table=results.speed.ladder(): table.to_csv(tmp, index=False))
    return files


def write_outputs(results: ExperimentResults, *, results_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Write the results tables (CSV) and the claim verdicts (JSON), published together."""
    return publish(Outputs(result_files=result_files(results)), results_dir=results_dir)
