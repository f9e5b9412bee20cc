"""Where Theorem 1 is a true and informative description of GD: a map out of the lazy regime.

The grid (target scale, read-out scale, Q/K scale, step factor c) is fixed in
:func:`resgd.pipeline.presets.theory` (``p["regime"]``) and was committed before the first run;
the verdicts below are fixed with it. Per point (one :class:`resgd.theorem1.sweep.SweepConfig` at
one c): do the hypotheses hold along the whole path (``in_regime``), does every step obey the
bound, and is the bound informative (median tightness ≤
:data:`resgd.theorem1.sweep.INFORMATIVE_TIGHTNESS`)?

One way to choose how much runs: :func:`regime_configs` with ``whole=False`` is the book's subset
(``p["regime"]["book_seeds"]``), ``whole=True`` every seed of ``p["regime"]["seeds"]``
(``python -m resgd reproduce --only theorem1``, full mode).
"""

from __future__ import annotations

import itertools
import math

import pandas as pd

from ..words import agree, count_noun
from .sweep import INFORMATIVE_TIGHTNESS, SweepConfig, base_config, rate_sweep

VERDICTS = ("true and informative", "true, loose", "holds outside the regime", "fails outside the regime",
            "fails inside the regime")
"""The pre-registered verdict of a point (the last would be a gap in the path checks: they test iterates only)."""


def regime_configs(p: dict, *, whole: bool = False) -> list[tuple[float, SweepConfig]]:
    """``(c, configuration)`` for every point of the map: the book's subset, or the whole grid."""
    r = p["regime"]
    seeds = r["seeds"] if whole else r["book_seeds"]
    grid = itertools.product(r["lr_factors"], r["out_scales"], r["qk_rels"], r["target_scales"], seeds)
    return [(c, base_config(p, seed, out_scale=out, qk_rel=qk, target_scale=target, **r["base"]))
            for c, out, qk, target, seed in grid]


def verdict(row: pd.Series | dict) -> str:
    """The pre-registered verdict of one map point (see :data:`VERDICTS`)."""
    obeyed = bool(row["fraction_obeyed"] == 1.0) and not bool(row["diverged"])
    if row["in_regime"]:
        if not obeyed:
            return VERDICTS[4]
        return VERDICTS[0] if row["tightness_median"] <= INFORMATIVE_TIGHTNESS else VERDICTS[1]
    return VERDICTS[2] if obeyed else VERDICTS[3]


def regime_map(p: dict, *, whole: bool = False, n_jobs: int = 1, scheduler: str | None = None) -> pd.DataFrame:
    """Every point of the map: the sweep columns, ``rate_over_bound`` (measured / guaranteed rate) and ``verdict``."""
    points = regime_configs(p, whole=whole)
    frames = []
    for c in dict.fromkeys(c for c, _ in points):
        configs = [config for cc, config in points if cc == c]
        frames.append(rate_sweep(configs, iterations=p["iterations"], lr_factor=c, alpha_factor=p["alpha_factor"],
                                 window=p["window"], checkpoints=p["checkpoints"], hess_iterations=p["hess_iterations"],
                                 n_jobs=n_jobs, scheduler=scheduler))
    table = pd.concat(frames, ignore_index=True)
    table["rate_over_bound"] = table["empirical_rate"] / table["bound_rate"]
    table["verdict"] = [verdict(row) for _, row in table.iterrows()]
    return table


def regime_edges(table: pd.DataFrame) -> pd.DataFrame:
    """Per (c, read-out scale, Q/K scale): the smallest target scale out of the regime and the smallest
    at which the bound fails (NaN: none on the grid)."""
    rows = []
    for (c, out, qk), g in table.groupby(["lr_factor", "out_scale", "qk_rel"]):
        failed = g[g["verdict"].isin(VERDICTS[3:])]
        outside = g[~g["in_regime"]]
        rows.append({"lr_factor": c, "out_scale": out, "qk_rel": qk,
                     "first_target_out_of_regime": float(outside["target_scale"].min()) if len(outside) else math.nan,
                     "first_target_bound_fails": float(failed["target_scale"].min()) if len(failed) else math.nan})
    return pd.DataFrame(rows)


def regime_summary(table: pd.DataFrame) -> dict:
    """The numbers the page and the closing note quote: counts per verdict, in the regime, obeying the bound,
    obeying it informatively, and where (smallest target scale, at c ≤ 1) it first fails."""
    obeyed = (table["fraction_obeyed"] == 1.0) & ~table["diverged"]
    theorem_step = table["lr_factor"] <= 1.0
    fails = table[~obeyed & theorem_step]
    out = {"n_points": int(len(table)), "n_in_regime": int(table["in_regime"].sum()), "n_obeyed": int(obeyed.sum()),
           "n_informative": int((obeyed & (table["tightness_median"] <= INFORMATIVE_TIGHTNESS)).sum()),
           "n_true_informative": int((table["verdict"] == VERDICTS[0]).sum()),
           "n_obeyed_c_above_1": int((obeyed & ~theorem_step).sum()),
           "n_c_above_1": int((~theorem_step).sum()),
           "first_fail_target": float(fails["target_scale"].min()) if len(fails) else math.nan,
           "first_out_of_regime_target": float(table.loc[~table["in_regime"] & theorem_step, "target_scale"].min())
           if (~table["in_regime"] & theorem_step).any() else math.nan}
    for v in VERDICTS:
        out["n_" + v.replace(",", "").replace(" ", "_")] = int((table["verdict"] == v).sum())
    return out


def regime_phrases(numbers: dict) -> dict[str, str]:
    """The counts of :func:`regime_summary` with the nouns and verbs that agree with them, for the
    page's sentences (a count of 1 must not read "1 are both in the regime")."""
    return {"points": count_noun(numbers["n_points"], "point"),
            "in-regime-points": count_noun(numbers["n_in_regime"], "point"),
            "in-regime-are": count_noun(numbers["n_in_regime"], "is", "are"),
            "obeyed-obey": count_noun(numbers["n_obeyed"], "obeys", "obey"),
            "informative-obey": count_noun(numbers["n_informative"], "obeys", "obey"),
            "true-and-informative-are": count_noun(numbers["n_true_and_informative"], "is", "are"),
            "c-above-1-points": count_noun(numbers["n_c_above_1"], "point"),
            "c-above-1-obey": agree(numbers["n_obeyed_c_above_1"], "obeys", "obey"),
            "fails-outside": count_noun(numbers["n_fails_outside_the_regime"], "point fails", "points fail")}
