"""The empirical section's tables: one row per run, one per configuration, curves, numbers for the prose.

Everything here reads the tidy run table of :func:`resgd.experiments.runs.sweep` (one row per recorded
iteration of every run) and computes without training, so the notebooks, the claims and
``reproduce`` summarize the same runs the same way.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..core.stats import empirical_rate, spearman

RUN_KEYS = ["experiment", "dataset", "beta", "n_layers", "lr", "seed"]
SPIKE_FACTOR = 1.5
"""A loss spike: one GD step that multiplies Φ by more than this (counted in ``loss_spikes``)."""


def per_run_table(runs: pd.DataFrame, *, target_fraction: float = 0.5, rate_window: float = 0.25) -> pd.DataFrame:
    """One row per run: loss at T (+∞ when diverged), iterations to the target loss, the number
    of loss spikes (steps with Φ(t+1) > 1.5 Φ(t)), the measured rate over the last window, the
    spectrum of Z⁽⁰⁾ and the end-of-run metrics."""
    rows = []
    for keys, h in runs.groupby(RUN_KEYS, sort=False):
        h = h.sort_values("iteration")
        first = h.iloc[0]
        T = int(first["iterations"])
        diverged = bool(first["diverged"])
        target = target_fraction * float(first["loss_zero"])
        reached = h.loc[h["loss"] <= target, "iteration"]
        window = max(2, int(round(rate_window * T)))
        sigma = h.dropna(subset=["sigma_min_Z"])
        smin0, smax0 = float(sigma["sigma_min_Z"].iloc[0]), float(sigma["sigma_max_Z"].iloc[0])
        rate = math.nan if diverged else empirical_rate(h, start=T - window + 1, stop=T + 1)
        rows.append({
            **dict(zip(RUN_KEYS, keys)),
            "iterations": T,
            "diverged": diverged,
            "diverged_at": first["diverged_at"],
            "loss_0": float(first["loss"]),
            "loss_T": math.inf if diverged else float(h["loss"].iloc[-1]),
            "target_loss": target,
            "iterations_to_target": float(reached.iloc[0]) if len(reached) else math.nan,
            "loss_spikes": int((h["ratio"] > SPIKE_FACTOR).sum()),
            "rate": rate,
            "rate_per_lr": rate / float(first["lr"]) if math.isfinite(rate) else math.nan,
            "sigma_min_Z0": smin0,
            "sigma_max_Z0": smax0,
            "rate_ratio_Z0": (smin0 / smax0) ** 2 if smax0 > 0 else 0.0,
            "sigma_min_ZT": float(sigma["sigma_min_Z"].iloc[-1]),
            "test_loss": float(first["test_loss"]),
            "train_acc": float(first["train_acc"]),
            "test_acc": float(first["test_acc"]),
            "is_standin": bool(first["is_standin"]),
            "source_label": str(first["source_label"]),
        })
    return pd.DataFrame(rows)


def summary_table(per_run: pd.DataFrame) -> pd.DataFrame:
    """The results table: one row per configuration, seeds aggregated (mean; the loss at T is
    +∞ when any seed diverged, and ``diverged`` counts them)."""
    rows = []
    for (experiment, L, beta, lr), g in per_run.groupby(["experiment", "n_layers", "beta", "lr"], sort=False):
        reached = g["iterations_to_target"].dropna()
        row = {
            "experiment": experiment, "n_layers": int(L), "beta": float(beta), "lr": float(lr),
            "seeds": len(g),
            "diverged": int(g["diverged"].sum()),
            "loss_T": float(g["loss_T"].mean()),
            "loss_T_min": float(g["loss_T"].min()),
            "loss_T_max": float(g["loss_T"].max()),
            "iterations_to_target": float(reached.median()) if len(reached) else math.nan,
            "reached_target": f"{len(reached)}/{len(g)}",
            "loss_spikes": int(g["loss_spikes"].sum()),
            "rate": float(g["rate"].mean()),
            "sigma_min_Z0": float(g["sigma_min_Z0"].mean()),
            "rate_ratio_Z0": float(g["rate_ratio_Z0"].mean()),
            "test_loss": float(g["test_loss"].mean()),
        }
        if g["train_acc"].notna().any() or g["test_acc"].notna().any():
            row["train_acc"] = float(g["train_acc"].mean())
            row["test_acc"] = float(g["test_acc"].mean())
        rows.append(row)
    table = pd.DataFrame(rows)
    return table.sort_values(["experiment", "n_layers", "beta"], ascending=[True, True, False], ignore_index=True)


def _band(frame: pd.DataFrame, by: list[str], value: str, center: str = "mean") -> pd.DataFrame:
    """Per group: the ``center`` ("mean", or "geomean" for quantities spanning decades) and the
    min–max band over the runs."""
    grouped = frame.groupby(by, sort=True)[value]
    out = grouped.agg(center="mean", lo="min", hi="max", n_runs="count").reset_index()
    if center == "geomean":
        logs = np.log(frame[value].where(frame[value] > 0))
        out["center"] = np.exp(logs.groupby([frame[k] for k in by], sort=True).mean()).to_numpy()
    return out


def loss_curves(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy curves for the loss figures: per (experiment, β, L) the mean over the seeds that did
    not diverge with a min–max band (``kind="mean"``), plus each diverged run's partial history
    (``kind="diverged"``, one per seed) so the figure can show it."""
    keys = ["experiment", "beta", "n_layers", "lr"]
    ok = runs[~runs["diverged"]]
    mean = _band(ok, keys + ["iteration"], "loss").assign(kind="mean", seed=-1)
    n_seeds = runs.groupby(keys)["seed"].nunique().rename("n_seeds")
    n_div = runs[runs["diverged"]].groupby(keys)["seed"].nunique().rename("n_diverged")
    bad = runs[runs["diverged"]][keys + ["iteration", "seed", "loss"]].rename(columns={"loss": "center"})
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
    keys = ["experiment", "beta", "n_layers", "lr", "iteration"]
    rec = runs[~runs["diverged"]].dropna(subset=["sigma_min_Z"]).copy()
    rec["rate_ratio_Z"] = (rec["sigma_min_Z"] / rec["sigma_max_Z"]) ** 2
    parts = [_band(rec, keys, q, center="geomean").assign(quantity=q) for q in ("sigma_min_Z", "rate_ratio_Z")]
    curves = pd.concat(parts, ignore_index=True)
    curves["is_standin"] = bool(runs["is_standin"].any()) if len(runs) else False
    curves["source_label"] = runs["source_label"].iloc[0] if len(runs) else ""
    return curves


def beta_findings(per_run: pd.DataFrame) -> dict[str, float]:
    """What the β sweep's losses at T say, as numbers for the prose (single layer, seeds averaged).

    ``best_beta``/``worst_beta``: the β with the lowest/highest mean loss at T;
    ``spread_pct``: (max − min)/mean of the mean losses over β > 0, in percent;
    ``seed_spread_pct``: the largest (max − min)/mean over the seeds of one β, in percent;
    ``gap0_pct``: the mean loss of β = 0 relative to the mean over β > 0, in percent (positive:
    β = 0 is worse); ``sigma_ratio``: mean σ_min(Z⁽⁰⁾) of β = 1 over that of β = 0;
    ``loss_ratio``: mean loss at T of β = 0 over that of β = 1. Diverged runs count as +∞.
    """
    rows = per_run[(per_run["experiment"] == "beta") & (per_run["n_layers"] == 1)]
    loss = rows["loss_T"].where(~rows["diverged"], math.inf)
    by_beta = loss.groupby(rows["beta"])
    means = by_beta.mean().sort_index()
    positive = means[means.index > 0]
    seed_spread = ((by_beta.max() - by_beta.min()) / by_beta.mean()).replace([np.inf, -np.inf], np.nan)
    sigma = rows.groupby("beta")["sigma_min_Z0"].mean()
    out = {
        "best_beta": float(means.idxmin()),
        "worst_beta": float(means.idxmax()),
        "spread_pct": float(100 * (positive.max() - positive.min()) / positive.mean()) if len(positive) else math.nan,
        "seed_spread_pct": float(100 * seed_spread.max()) if seed_spread.notna().any() else math.nan,
        "gap0_pct": math.nan, "sigma_ratio": math.nan, "loss_ratio": math.nan,
    }
    if 0.0 in means.index and len(positive):
        out["gap0_pct"] = float(100 * (means[0.0] / positive.mean() - 1))
    if 0.0 in means.index and 1.0 in means.index:
        out["sigma_ratio"] = float(sigma[1.0] / sigma[0.0]) if sigma[0.0] > 0 else math.inf
        out["loss_ratio"] = float(means[0.0] / means[1.0])
    return out


def rate_agreement(per_run: pd.DataFrame) -> dict[str, float]:
    """How well σ_min²/σ_max²(Z⁽⁰⁾) orders the measured rate per unit step (Spearman over runs
    that did not diverge), overall and within the single-layer β sweep."""
    ok = per_run[~per_run["diverged"]]
    single = ok[ok["experiment"] == "beta"]
    return {
        "spearman_all": spearman(ok["rate_ratio_Z0"], ok["rate_per_lr"]),
        "n_all": int(len(ok)),
        "spearman_beta": spearman(single["rate_ratio_Z0"], single["rate_per_lr"]),
        "n_beta": int(len(single)),
    }
