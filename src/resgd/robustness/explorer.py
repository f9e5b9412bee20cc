"""The data of the explorable robustness map (:mod:`resgd.plots.robustness_explorer`): per cell,
the seeds behind its verdict.

The cell table (:func:`.verdicts.cell_table`) keeps each cell's median, interval and verdict; the
per-run table (:func:`.map_runs.map_runs`) keeps each seed's Φ(T)/Φ(0) at every horizon. This
module joins them: for each cell × protocol × claim, the per-seed values the verdict was computed
from, the interval, the threshold, and each seed's Φ(t)/Φ(0) of the L = 1 pair over the horizons
(the map keeps no full loss curves).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

CLAIM_TEXT = {
    "residual_helps": "(a) residual vs none, L = 1: per seed log(Φ(T)/Φ(0) without / with)",
    "beta_monotone": "(b) β ordering, L = 1: per seed −Spearman(β, Φ(T)/Φ(0))",
    "depth_residual_helps": "(c) residual vs none at every depth: per seed log ratio at each L (verdict: worst depth)",
    "depth_residual_helps_second": "(c) against the second twin: per seed log ratio at each L",
}
MIN_OVER_L = "min over L"
THRESHOLD = 0.0
"""A claim holds when its interval lies above this, fails when below (:func:`resgd.robustness.verdicts.verdict`)."""


def _num(x: Any) -> Any:
    """JSON has no NaN or ∞: NaN → None, ±∞ → "inf"/"-inf" (the widget prints them)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    if math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return round(x, 6)


def _arm(rows: pd.DataFrame, beta: float, L: int, init: str | None, column: str) -> pd.Series:
    at = rows[(rows["n_layers"] == L) & (rows["beta"] == beta)]
    if init is not None:
        at = at[at["init"] == init]
    return at.drop_duplicates("seed").set_index("seed")[column]


def seed_table(rows: pd.DataFrame, grid, claim: str, horizon: int, measure: str) -> tuple[list[str], list[dict]]:
    """One cell × protocol's per-seed values for ``claim``: (column names, one dict per seed), the
    same numbers :func:`resgd.robustness.verdicts.cell_effects` takes the median and interval of."""
    from .verdicts import DEPTH_CLAIMS, log_ratio, spearman_rows

    column = f"{measure}_{horizon}"
    phi = "Φ(T)/Φ(0)" if measure == "relative" else "Φ(T)"
    seeds = sorted(int(s) for s in rows["seed"].unique())
    if claim == "residual_helps":
        w, wo = _arm(rows, 1.0, 1, None, column), _arm(rows, 0.0, 1, grid.twins[0], column)
        names = [f"{phi} with residual", f"{phi} without", "effect"]
        out = [{"seed": s, names[0]: w.get(s), names[1]: wo.get(s),
                "effect": float(log_ratio(wo.get(s, np.nan), w.get(s, np.nan))) if s in w and s in wo else None}
               for s in seeds]
    elif claim == "beta_monotone":
        single = rows[rows["n_layers"] == 1]
        table = single.pivot_table(index="beta", columns="seed", values=column, aggfunc="first", dropna=False).sort_index()
        effects = dict(zip(table.columns, -spearman_rows(table.index.to_numpy(dtype=float), table.to_numpy(dtype=float).T)))
        names = [f"{phi} β={b:g}" for b in table.index] + ["effect"]
        out = [{"seed": s, **{f"{phi} β={b:g}": table.loc[b, s] if s in table.columns else None for b in table.index},
                "effect": effects.get(s)} for s in seeds]
    else:
        init = grid.twins[DEPTH_CLAIMS.index(claim)] if claim in DEPTH_CLAIMS else grid.twins[0]
        names, per = [], {}
        for L in grid.depths:
            w, wo = _arm(rows, 1.0, L, None, column), _arm(rows, 0.0, L, init, column)
            names.append(f"log ratio L={L}")
            per[L] = {s: float(log_ratio(wo[s], w[s])) for s in seeds if s in w and s in wo}
        names.append(MIN_OVER_L)  # the verdict itself takes each depth's interval, then the worst (verdicts.py)
        out = []
        for s in seeds:
            values = [per[L].get(s) for L in grid.depths]
            row = {"seed": s, **dict(zip(names, values))}
            row[MIN_OVER_L] = min(values) if all(v is not None and not math.isnan(v) for v in values) else None
            out.append(row)
    return names, [{k: (v if k == "seed" else _num(v)) for k, v in row.items()} for row in out]


def seed_curves(rows: pd.DataFrame, grid, measure: str) -> dict[str, list]:
    """Per seed, Φ(t)/Φ(0) of the L = 1 pair (with residual, without) at t = 0 and every horizon."""
    out = {}
    for label, beta, init in (("with", 1.0, None), ("without", 0.0, grid.twins[0])):
        arms = {T: _arm(rows, beta, 1, init, f"{measure}_{T}") for T in grid.horizons}
        start = 1.0 if measure == "relative" else None
        for s in sorted(int(s) for s in rows["seed"].unique()):
            points = [[0, start]] if start is not None else []
            points += [[int(T), _num(arms[T].get(s))] for T in grid.horizons if s in arms[T]]
            out.setdefault(str(s), {})[label] = points
    return out


def explorer_data(results=None, *, cells: pd.DataFrame | None = None, per_run: pd.DataFrame | None = None,
                  grid=None, horizon: int | None = None, measure: str | None = None) -> dict:
    """The widget's JSON-ready data: every cell × protocol × claim of the map at ``horizon``
    (default: the last) on ``measure`` (default: the primary), with its seeds. Pass a
    :class:`resgd.robustness.study.MapResults`, or its ``cells``, ``per_run`` and ``grid``."""
    from ..plots.robustness import CLAIM_ROWS, LETTER, XLABEL
    from .map_runs import TAGS

    if results is not None:
        cells, per_run, grid = results.cells, results.per_run, results.grid
    horizon = grid.iterations if horizon is None else horizon
    measure = grid.primary if measure is None else measure
    at = cells[(cells["horizon"] == horizon) & (cells["measure"] == measure) & cells["protocol"].isin(grid.protocols)]
    runs = {keys: g for keys, g in per_run.groupby(TAGS, sort=False)}
    items = []
    for _, c in at.iterrows():
        key = tuple(c[t] for t in TAGS)
        rows = runs.get(key)
        names, seeds = seed_table(rows, grid, c["claim"], horizon, measure) if rows is not None else ([], [])
        items.append(dict(
            dataset=str(c["dataset"]), N=int(c["N"]), qk=_num(c["qk_scale"]), step=_num(c["fraction"]),
            protocol=str(c["protocol"]), claim=str(c["claim"]), verdict=str(c["verdict"]),
            effect=_num(c["effect"]), lo=_num(c["lo"]), hi=_num(c["hi"]), level=_num(c["level"]),
            n_seeds=int(c["seeds"]) if pd.notna(c["seeds"]) else 0, columns=names, seeds=seeds,
            curves=seed_curves(rows, grid, measure) if rows is not None else {},
        ))
    claims = [k for k in CLAIM_ROWS if k in set(at["claim"])]
    return dict(
        horizon=int(horizon), measure=measure, threshold=THRESHOLD,
        protocols=[p for p in grid.protocols if p in set(at["protocol"])],
        claims=claims, claim_text={k: CLAIM_TEXT.get(k, k) for k in claims},
        panels=[[d, int(n)] for d in grid.datasets for n in grid.sizes],
        qk=[_num(q) for q in grid.qk_scales],
        steps={p: [_num(f) for f in grid.steps(p)] for p in grid.protocols},
        xlabel={p: XLABEL.get(p, "step / own stability limit") for p in grid.protocols},
        letter=LETTER, cells=items,
    )
