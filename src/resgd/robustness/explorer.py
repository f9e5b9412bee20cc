"""The data of the explorable robustness map (:mod:`resgd.plots.robustness_explorer`): per cell,
the seeds behind its verdict.

The cell table (:func:`.verdicts.cell_table`) keeps each cell's median, interval and verdict; the
per-run table (:func:`.map_runs.map_runs`) keeps each seed's Φ(T)/Φ(0) at every horizon. This
module joins them: for each cell × protocol × claim, the per-seed values the verdict was computed
from (a log ratio at the cap of a diverged run labelled as such), the interval, the threshold, for
claim (c) each depth's interval (the verdict's own function), and each seed's Φ(t)/Φ(0) of the arms
the claim compares over the horizons (the map keeps no full loss curves).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..claim_registry import BETA_MONOTONE, MAP_FORMS, RESIDUAL_HELPS

CLAIM_TEXT = {form.name: form.explorer for form in MAP_FORMS}
PROTOCOL_TEXT = {
    "common": "common: every β at one step, a fraction of the β = 1 model's stability limit at the same depth",
    "own": "own: each configuration at a fraction of its own stability limit",
    "theory": "theory: μ = c / L̂(θ⁰), the step of Theorem 1, L̂ at each seed's own initial weights",
    "best": "best: each configuration at the fraction of its own limit (of the grid's) with the lowest seed-mean Φ(T)/Φ(0); no extra runs",
}
"""What each protocol of the selector means (the page defines them too; the widget repeats it)."""
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


def _capped(x: Any) -> Any:
    """A per-seed log ratio for the table: at ±LOG_CAP it is the cap of a diverged run, said so."""
    from .verdicts import LOG_CAP

    value = _num(x)
    if isinstance(value, float) and abs(value) >= LOG_CAP:
        return f"{'≥' if value > 0 else '≤ −'}{LOG_CAP:g} (cap: a run diverged)"
    return value


def _arm(rows: pd.DataFrame, beta: float, L: int, init: str | None, column: str) -> pd.Series:
    at = rows[(rows["n_layers"] == L) & (rows["beta"] == beta)]
    if init is not None:
        at = at[at["init"] == init]
    return at.drop_duplicates("seed").set_index("seed")[column]


def _above(values) -> int:
    return int(sum(1 for v in values if v is not None and not math.isnan(v) and v > THRESHOLD))


def seed_table(rows: pd.DataFrame, grid, claim: str, horizon: int, measure: str) -> tuple[list[str], list[dict], list[dict]]:
    """One cell × protocol's per-seed values for ``claim``: (column names, one dict per seed, the
    verdict's parts). The values are those :func:`resgd.robustness.verdicts.cell_effects` takes the
    median and interval of; for (c) the parts are its per-depth summaries
    (:func:`resgd.robustness.verdicts.depth_summaries`, the same function), each with its count of
    seeds above the threshold from it too; for (a) and (b) one part, the cell's own values."""
    from .verdicts import DEPTH_CLAIMS, depth_summaries, log_ratio, spearman_rows

    column = f"{measure}_{horizon}"
    phi = "Φ(T)/Φ(0)" if measure == "relative" else "Φ(T)"
    seeds = sorted(int(s) for s in rows["seed"].unique())
    if claim == RESIDUAL_HELPS.name:
        w, wo = _arm(rows, 1.0, 1, None, column), _arm(rows, 0.0, 1, grid.twins[0], column)
        names = [f"{phi} with residual", f"{phi} without", "effect"]
        out = [{"seed": s, names[0]: w.get(s), names[1]: wo.get(s),
                "effect": float(log_ratio(wo.get(s, np.nan), w.get(s, np.nan))) if s in w and s in wo else None}
               for s in seeds]
        parts = [{"label": "L = 1", "above": _above([r["effect"] for r in out]), "seeds": sum(r["effect"] is not None for r in out)}]
    elif claim == BETA_MONOTONE.name:
        single = rows[rows["n_layers"] == 1]
        table = single.pivot_table(index="beta", columns="seed", values=column, aggfunc="first", dropna=False).sort_index()
        effects = dict(zip(table.columns, -spearman_rows(table.index.to_numpy(dtype=float), table.to_numpy(dtype=float).T)))
        names = [f"{phi} β={b:g}" for b in table.index] + ["effect"]
        out = [{"seed": s, **{f"{phi} β={b:g}": table.loc[b, s] if s in table.columns else None for b in table.index},
                "effect": effects.get(s)} for s in seeds]
        parts = [{"label": "L = 1", "above": _above([r["effect"] for r in out]),
                  "seeds": sum(r["effect"] is not None and not math.isnan(r["effect"]) for r in out)}]
    else:
        init = grid.twins[DEPTH_CLAIMS.index(claim)] if claim in DEPTH_CLAIMS else grid.twins[0]
        names, per = [], {}
        for L in grid.depths:
            w, wo = _arm(rows, 1.0, L, None, column), _arm(rows, 0.0, L, init, column)
            names.append(f"log ratio L={L}")
            per[L] = {s: float(log_ratio(wo[s], w[s])) for s in seeds if s in w and s in wo}
        out = [{"seed": s, **{f"log ratio L={L}": per[L].get(s) for L in grid.depths}} for s in seeds]
        parts = [{"label": f"L = {d['depth']}", "effect": _num(d["effect"]), "lo": _num(d["lo"]), "hi": _num(d["hi"]),
                  "level": _num(d["level"]), "seeds": int(d["seeds"]), "above": int(d["above"])}
                 for d in depth_summaries(rows, grid, column, init)]
    return names, [{k: (v if k == "seed" else _capped(v)) for k, v in row.items()} for row in out], parts


PALETTE = ("#1d5fa8", "#c0392b", "#2a9d8f", "#8e44ad", "#d68910")


def seed_curves(rows: pd.DataFrame, grid, measure: str, claim: str) -> list[dict]:
    """The curves behind ``claim``, per seed at t = 0 and every horizon (the map keeps no full loss
    curves): (a) the L = 1 pair, (b) every β at L = 1, (c) the pair at each depth. One series per
    arm: its label, colour, dash (the model without residual dashed) and points by seed."""
    from .verdicts import DEPTH_CLAIMS

    if claim == BETA_MONOTONE.name:
        arms = [(f"β = {b:g}", b, 1, grid.twins[0] if b == 0 else None, PALETTE[i % len(PALETTE)], False)
                for i, b in enumerate(grid.betas)]
    elif claim in DEPTH_CLAIMS:
        init = grid.twins[DEPTH_CLAIMS.index(claim)]
        arms = [a for i, L in enumerate(grid.depths)
                for a in ((f"L = {L} with residual", 1.0, L, None, PALETTE[i % len(PALETTE)], False),
                          (f"L = {L} without", 0.0, L, init, PALETTE[i % len(PALETTE)], True))]
    else:
        arms = [("L = 1 with residual", 1.0, 1, None, PALETTE[0], False), ("L = 1 without", 0.0, 1, grid.twins[0], PALETTE[1], True)]
    start = 1.0 if measure == "relative" else None
    seeds = sorted(int(s) for s in rows["seed"].unique())
    series = []
    for label, beta, L, init, colour, dashed in arms:
        at = {T: _arm(rows, beta, L, init, f"{measure}_{T}") for T in grid.horizons}
        points = {str(s): ([[0, start]] if start is not None else []) + [[int(T), _num(at[T].get(s))]
                                                                          for T in grid.horizons if s in at[T]]
                  for s in seeds}
        series.append({"label": label, "colour": colour, "dashed": dashed, "points": points})
    return series


def explorer_data(results=None, *, cells: pd.DataFrame | None = None, per_run: pd.DataFrame | None = None,
                  grid=None, horizon: int | None = None, measure: str | None = None) -> dict:
    """The widget's JSON-ready data: every cell × protocol × claim of the map at ``horizon``
    (default: the last) on ``measure`` (default: the primary), with its seeds. Pass a
    :class:`resgd.robustness.study.MapResults`, or its ``cells``, ``per_run`` and ``grid``."""
    from ..plots.robustness import CLAIM_ROWS, LETTER, XLABEL
    from .map_runs import TAGS
    from .verdicts import LOG_CAP

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
        names, seeds, parts = seed_table(rows, grid, c["claim"], horizon, measure) if rows is not None else ([], [], [])
        items.append(dict(
            dataset=str(c["dataset"]), N=int(c["N"]), qk=_num(c["qk_scale"]), step=_num(c["fraction"]),
            protocol=str(c["protocol"]), claim=str(c["claim"]), verdict=str(c["verdict"]),
            effect=_num(c["effect"]), lo=_num(c["lo"]), hi=_num(c["hi"]), level=_num(c["level"]),
            capped=bool(abs(float(c["effect"])) >= LOG_CAP),  # the median is a diverged run's cap, not a measured ratio
            n_seeds=int(c["seeds"]) if pd.notna(c["seeds"]) else 0, columns=names, seeds=seeds, parts=parts,
            curves=seed_curves(rows, grid, measure, c["claim"]) if rows is not None else [],
        ))
    claims = [k for k in CLAIM_ROWS if k in set(at["claim"])]
    return dict(
        horizon=int(horizon), measure=measure, threshold=THRESHOLD, cap=LOG_CAP,
        protocols=[p for p in grid.protocols if p in set(at["protocol"])],
        protocol_text={p: PROTOCOL_TEXT.get(p, p) for p in grid.protocols},
        claims=claims, claim_text={k: CLAIM_TEXT.get(k, k) for k in claims},
        panels=[[d, int(n)] for d in grid.datasets for n in grid.sizes],
        qk=[_num(q) for q in grid.qk_scales],
        steps={p: [_num(f) for f in grid.steps(p)] for p in grid.protocols},
        xlabel={p: XLABEL.get(p, "step / own stability limit") for p in grid.protocols},
        letter=LETTER, cells=items,
    )
