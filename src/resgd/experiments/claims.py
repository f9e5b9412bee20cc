"""The paper's empirical claims as explicit, checkable statements.

Each check reads the per-run table of :func:`resgd.experiments.tables.per_run_table` (columns
``experiment``, ``beta``, ``n_layers``, ``seed``, ``loss_T``, ``diverged``; a diverged run has
``loss_T = +inf``) and returns a :class:`Verdict`. The three claims (paper's Figs. 1, 3a, 3b):

(a) ``residual_helps`` — with the residual (β = 1) the training loss after T iterations is lower
    than without (β = 0), same initialization, same step size, single layer;
(b) ``beta_monotone`` — the loss after T iterations decreases as β grows: Spearman's rank
    correlation between β and the seed-averaged loss at T is at most ``threshold``
    (companion's choice: −0.8; with five values of β that allows one adjacent swap);
(c) ``depth_residual_helps`` — at every depth L the residual model's loss at T is below that of
    its twin without residual.

"Lower" compares seed-averaged losses at T (a diverged seed makes the average +∞). The
verdicts of each notebook are written to ``results/claims/<dataset>_<mode>.json``;
:func:`load_verdicts` reads them back for the claims page.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..atomic import json_text, write_json
from ..pipeline.cache import resolve_results_dir
from ..core.stats import spearman

DEFAULT_THRESHOLD = -0.8
CLAIMS = {
    "residual_helps": (
        "(a) With the residual connection (β = 1) the training loss after T iterations is lower than "
        "without (β = 0), from the same initialization with the same step size (paper's Fig. 1)."
    ),
    "beta_monotone": "(b) The training loss after T iterations decreases as the residual weight β grows (paper's Fig. 3a).",
    "depth_residual_helps": (
        "(c) At every depth L the model with residual connections reaches a lower training loss after "
        "T iterations than its twin without (paper's Fig. 3b)."
    ),
}
FIGURE_KIND = {"residual_helps": "residual", "beta_monotone": "beta", "depth_residual_helps": "depth"}
NOTEBOOK = {"jena": "04_jena", "sst2": "05_sst2"}
REQUIRED = ("beta", "n_layers", "seed", "loss_T", "diverged")


@dataclass(frozen=True)
class Verdict:
    """One claim checked on one data set: ``passed`` and the numbers that decided it."""

    name: str
    claim: str
    passed: bool
    numbers: dict[str, Any]
    detail: str
    dataset: str = ""
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


def _subset(table: pd.DataFrame, experiment: str) -> pd.DataFrame:
    return table[table["experiment"] == experiment] if "experiment" in table.columns else table


def _loss_at_T(rows: pd.DataFrame) -> pd.Series:
    """Per-run loss at T, with +∞ for a diverged run."""
    return rows["loss_T"].astype(float).where(~rows["diverged"].astype(bool), math.inf)


def _mean_loss(rows: pd.DataFrame) -> float:
    return float(_loss_at_T(rows).mean()) if len(rows) else math.nan


def _fmt(x: float) -> str:
    return "diverged (+∞)" if x == math.inf else f"{x:.4g}"


def _pair(table: pd.DataFrame, n_layers: int, what: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = table[table["n_layers"] == n_layers]
    with_res, without = rows[rows["beta"] == 1.0], rows[rows["beta"] == 0.0]
    if with_res.empty or without.empty:
        raise ValueError(f"claims: {what} needs runs with β = 1 and β = 0 at L = {n_layers}; "
                         f"the table has β ∈ {sorted(rows['beta'].unique())} there")
    return with_res, without


def _seeds_won(with_res: pd.DataFrame, without: pd.DataFrame) -> tuple[int, int]:
    a = pd.Series(_loss_at_T(with_res).to_numpy(), index=with_res["seed"].to_numpy())
    b = pd.Series(_loss_at_T(without).to_numpy(), index=without["seed"].to_numpy())
    common = a.index.intersection(b.index)
    return int((a[common] < b[common]).sum()), int(len(common))


def check_residual_helps(per_run: pd.DataFrame, *, dataset: str = "", figure: str = "") -> Verdict:
    """Claim (a): seed-averaged loss at T of β = 1 below that of β = 0 (single layer, β sweep runs)."""
    _check_table(per_run)
    with_res, without = _pair(_subset(per_run, "beta"), 1, "claim (a)")
    loss1, loss0 = _mean_loss(with_res), _mean_loss(without)
    won, n = _seeds_won(with_res, without)
    passed = bool(loss1 < loss0)
    numbers = {"loss_T_beta1": loss1, "loss_T_beta0": loss0, "seeds_won": won, "seeds": n,
               "diverged_beta1": int(with_res["diverged"].sum()), "diverged_beta0": int(without["diverged"].sum())}
    detail = (f"loss at T: β = 1 {_fmt(loss1)} vs β = 0 {_fmt(loss0)} (mean over seeds); "
              f"β = 1 lower for {won} of {n} seeds")
    return Verdict("residual_helps", CLAIMS["residual_helps"], passed, numbers, detail, dataset, figure)


def check_beta_monotone(per_run: pd.DataFrame, *, threshold: float = DEFAULT_THRESHOLD, dataset: str = "",
                        figure: str = "") -> Verdict:
    """Claim (b): Spearman(β, seed-averaged loss at T) ≤ ``threshold`` (single layer, β sweep runs).

    A diverged configuration (+∞) ranks as the worst: it is given the largest float so that
    :func:`resgd.core.stats.spearman` (which drops non-finite pairs) keeps it.
    """
    _check_table(per_run)
    rows = _subset(per_run, "beta")
    rows = rows[rows["n_layers"] == 1]
    means = rows.assign(loss_T=_loss_at_T(rows)).groupby("beta")["loss_T"].mean().sort_index()
    if len(means) < 3:
        raise ValueError(f"claims: claim (b) needs at least 3 values of β at L = 1, got {list(means.index)}")
    ranked = means.replace(math.inf, np.finfo(float).max)
    rho = float(spearman(ranked.index.to_numpy(dtype=float), ranked.to_numpy(dtype=float)))
    passed = bool(math.isfinite(rho) and rho <= threshold)
    numbers = {"spearman": rho, "threshold": float(threshold),
               "loss_T_by_beta": {f"{b:g}": float(v) for b, v in means.items()}}
    detail = (f"Spearman(β, loss at T) = {rho:.3g} (passes when ≤ {threshold:g}); loss at T by β: "
              + ", ".join(f"β={b:g}: {_fmt(v)}" for b, v in means.items()))
    if "iterations_to_target" in rows.columns:
        # Supplementary, not part of the verdict: how fast each β reaches the target loss
        # (median over seeds; a seed that never reaches it, or diverged, counts as +∞).
        steps = rows["iterations_to_target"].astype(float).fillna(math.inf)
        steps = steps.where(~rows["diverged"].astype(bool), math.inf)
        medians = steps.groupby(rows["beta"]).median().sort_index()
        rho_steps = float(spearman(medians.index.to_numpy(dtype=float),
                                   medians.replace(math.inf, np.finfo(float).max).to_numpy(dtype=float)))
        numbers["spearman_iterations_to_target"] = rho_steps
        numbers["iterations_to_target_by_beta"] = {f"{b:g}": float(v) for b, v in medians.items()}
        detail += f"; supplementary: Spearman(β, iterations to the target loss) = {rho_steps:.3g}"
    return Verdict("beta_monotone", CLAIMS["beta_monotone"], passed, numbers, detail, dataset, figure)


def check_depth_residual_helps(per_run: pd.DataFrame, *, dataset: str = "", figure: str = "") -> Verdict:
    """Claim (c): at every depth of the depth sweep, seed-averaged loss at T of β = 1 below β = 0."""
    _check_table(per_run)
    rows = _subset(per_run, "depth")
    depths = sorted(int(L) for L in rows["n_layers"].unique())
    if not depths:
        raise ValueError("claims: claim (c) needs the depth sweep's runs; the table has none")
    by_depth, parts = {}, []
    for L in depths:
        with_res, without = _pair(rows, L, "claim (c)")
        loss1, loss0 = _mean_loss(with_res), _mean_loss(without)
        won, n = _seeds_won(with_res, without)
        by_depth[str(L)] = {"loss_T_beta1": loss1, "loss_T_beta0": loss0, "seeds_won": won, "seeds": n,
                            "residual_lower": bool(loss1 < loss0)}
        parts.append(f"L={L}: {_fmt(loss1)} vs {_fmt(loss0)}")
    passed = all(v["residual_lower"] for v in by_depth.values())
    detail = "loss at T with vs without residual (mean over seeds): " + "; ".join(parts)
    return Verdict("depth_residual_helps", CLAIMS["depth_residual_helps"], passed, {"by_depth": by_depth},
                   detail, dataset, figure)


def figure_label(dataset: str, name: str) -> str:
    """The ``:name:`` of the glued figure that tests claim ``name`` on ``dataset``."""
    return f"fig-{dataset}-{FIGURE_KIND[name]}"


def evaluate(per_run: pd.DataFrame, dataset: str, *, threshold: float = DEFAULT_THRESHOLD) -> list[Verdict]:
    """All three claims on one data set's per-run table."""
    return [
        check_residual_helps(per_run, dataset=dataset, figure=figure_label(dataset, "residual_helps")),
        check_beta_monotone(per_run, threshold=threshold, dataset=dataset, figure=figure_label(dataset, "beta_monotone")),
        check_depth_residual_helps(per_run, dataset=dataset, figure=figure_label(dataset, "depth_residual_helps")),
    ]


def verdicts_table(verdicts: Iterable[Verdict]) -> pd.DataFrame:
    """A display table: claim, data set, figure, verdict, numbers."""
    rows = [{"claim": v.claim, "dataset": v.dataset, "figure": v.figure,
             "verdict": "reproduced" if v.passed else "not reproduced", "numbers": v.detail} for v in verdicts]
    return pd.DataFrame(rows, columns=["claim", "dataset", "figure", "verdict", "numbers"])


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


def load_verdicts(directory: str | os.PathLike | None = None, mode: str = "quick",
                  datasets: Sequence[str] = ("jena", "sst2")) -> pd.DataFrame:
    """Every data set's verdicts as one table (rows: claim × data set), from
    ``<directory>/<dataset>_<mode>.json`` (default directory: ``<results dir>/claims``).

    A missing file is an error that names it and the notebook that writes it.
    """
    folder = Path(directory) if directory is not None else resolve_results_dir() / "claims"
    rows = []
    for dataset in datasets:
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
                "data": "synthetic stand-in" if payload.get("is_standin") else "real",
                "figure": v.figure, "notebook": NOTEBOOK.get(dataset, dataset),
                "verdict": "reproduced" if v.passed else "not reproduced", "passed": v.passed,
                "numbers": v.detail, "mode": payload.get("mode", mode),
            })
    order = {name: i for i, name in enumerate(CLAIMS)}
    table = pd.DataFrame(rows)
    return table.sort_values(by=["name", "dataset"], key=lambda col: col.map(order) if col.name == "name" else col,
                             ignore_index=True)
