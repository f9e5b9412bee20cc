"""Design v6 for one data set: its runs (each configuration at its own stable step, and the theorem's
step kept in its regime on realisable data) and its verdicts on the time to a ladder of targets.

Two questions, kept apart (:mod:`resgd.experiments.design`, "Design v6"):

* *the paper's experiments* (``own``): claims (a), (b), (c) at the paper's sizes, every
  configuration at its own stable step (:mod:`resgd.experiments.own_step`), 12 seeds, runs to the cap;
  the floor Φ* of each comparison estimated as the lowest loss any of its runs reached;
* *Theorem 1 in its regime* (``path``): claims (a), (b) at L = 1 on a small sample with far more
  weights than targets, at the theorem's step kept along the path (:mod:`resgd.experiments.path_step`),
  Φ* = 0; decided only where the realisability check passed, else "could not be tested".

The common step of v5 stays as a sensitivity row (its 8 seeds, its cap T), decided by the same rule.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from .claims import CLAIMS, Verdict
from .design import CAP, LADDER, PATH_C, REALISABLE_RATIO, TUNING_SEED
from .ladder import beta_signs, decide, depth_signs, ladder_table, pair_signs, rung_name
from .own_step import own_steps
from .path_step import path_key, path_stack, path_table
from .runs import runs_table, sweep_frames

OWN, PATH, COMMON = "own step", f"theorem path c={PATH_C:g}", "common step"
"""The v6 protocols' labels: each configuration's own stable step; the theorem's step kept along the
path; v5's one common step (a sensitivity row)."""
RUN_KEYS = ["experiment", "protocol", "twin_init", "beta", "beta_ffn", "n_layers", "seed"]
TIMES = [f"t_{rung_name(q)}" for q in LADDER]


@dataclass
class SpeedResults:
    """One data set's v6 runs and the tables read from them."""

    dataset: str
    steps: pd.DataFrame
    runs: pd.DataFrame
    realisability: dict[str, Any]
    common: pd.DataFrame = field(default_factory=pd.DataFrame)
    _ladder: pd.DataFrame | None = field(default=None, repr=False)

    def ladder(self) -> pd.DataFrame:
        """One row per run: its times to every rung (+∞ censored), floor, cap and rises."""
        if self._ladder is None:
            parts = []
            for (protocol, experiment, L), part in self.all_runs().groupby(["protocol", "experiment", "n_layers"], sort=False):
                parts.append(ladder_table(part, RUN_KEYS, ["protocol", "experiment", "n_layers"],
                                          realisable=protocol == PATH))
            self._ladder = pd.concat(parts, ignore_index=True)
        return self._ladder

    def all_runs(self) -> pd.DataFrame:
        return pd.concat([self.runs, self.common], ignore_index=True) if len(self.common) else self.runs

    def path(self) -> pd.DataFrame:
        """The theorem path's per-run regime check and measured against predicted rate."""
        return path_table(self.runs[self.runs["protocol"] == PATH], RUN_KEYS)

    def verdicts(self) -> list[Verdict]:
        return speed_verdicts(self.ladder(), self.dataset, self.realisability)


def _points(s) -> dict[str, list[tuple[float, float | None, int]]]:
    return {"beta": [(float(b), None, 1) for b in s.betas],
            "depth": [(b, None, int(L)) for L in s.depths for b in (1.0, 0.0)]}


def run_speed(s, *, n_jobs: int = 2, cache_dir: str | os.PathLike | None = None, scheduler: str | None = None,
              progress: bool = False, common: pd.DataFrame | None = None) -> SpeedResults:
    """Every v6 run of one data set (cached like every run), tagged with experiment and protocol.
    ``common``: v5's common-step runs (matched twins), kept as the sensitivity row."""
    engine = {"n_jobs": n_jobs, "cache_dir": cache_dir, "scheduler": scheduler, "progress": progress}
    points = _points(s)
    steps = own_steps(s, points, **engine)
    chosen = steps[steps["chosen"]]
    lr = {(r.experiment, r.beta, r.n_layers): r.lr for r in chosen.itertuples()}
    configs, tags = [], []
    for experiment, pts in points.items():
        size = s.depth() if experiment == "depth" else s
        cap = CAP * size.iterations
        for b, f, L in pts:
            for seed in s.v6_seeds:
                configs.append(size.config(b, L, seed, lr[(experiment, b, L)], iterations=cap, beta_ffn=f))
                tags.append((experiment, OWN))
    frames = sweep_frames(configs, desc=f"{s.dataset}: v6 own-step runs", **engine)
    runs = runs_table(frames, configs)
    by_key = {c: t for c, t in zip([_run_key(c) for c in configs], tags)}
    runs["experiment"] = runs["key"].map(lambda k: by_key[k][0])
    runs["protocol"] = OWN
    regime = replace(s, N=s.regime_N, iterations=s.regime_iterations, test_metrics=False)
    path_configs = [regime.config(float(b), 1, seed, PATH_C) for b in s.betas for seed in (*s.v6_seeds, TUNING_SEED)]
    path = _path_runs(path_configs, **engine)
    check = path[(path["seed"] == TUNING_SEED) & (path["beta"] == 1.0)].sort_values("iteration")
    ratio = float(check["loss"].iloc[-1] / check["loss"].iloc[0])
    realisability = {"N": s.regime_N, "iterations": s.regime_iterations, "loss_ratio": ratio,
                     "bound": REALISABLE_RATIO, "realisable": bool(ratio <= REALISABLE_RATIO),
                     "zero_inputs": _zero_inputs(regime)}
    path = path[path["seed"] != TUNING_SEED].assign(experiment="beta", protocol=PATH)
    out = pd.concat([runs, path], ignore_index=True).assign(twin_init="matched")
    common_runs = pd.DataFrame()
    if common is not None and len(common):
        common_runs = common.assign(protocol=COMMON)
    return SpeedResults(s.dataset, steps, out, realisability, common_runs)


def _run_key(config) -> str:
    from .run_config import config_key

    return config_key(config)


def _path_runs(configs, *, n_jobs, cache_dir, scheduler, progress) -> pd.DataFrame:
    """Path-step runs through the sweep engine (cached, in the results store as :data:`PATH_KIND`)."""
    from ..pipeline.cache import ResultsCache
    from ..pipeline.sweep import Group, Task, cached_sweep, check_n_jobs

    tasks = [Task(path_key(c), None, c) for c in configs]

    def groups(todo):
        workers = max(1, check_n_jobs(n_jobs))
        return [Group(tuple(t.key for t in todo[i::workers]), path_stack, tuple(t.arg for t in todo[i::workers]))
                for i in range(min(workers, len(todo)))]

    frames = cached_sweep(tasks, ResultsCache(cache_dir), n_jobs=n_jobs, scheduler=scheduler, group=groups)
    return pd.concat([frames[path_key(c)].assign(key=path_key(c)) for c in configs], ignore_index=True)


def _zero_inputs(s) -> int:
    """Samples whose every input token is zero (an all-unknown sentence): a target no weight can fit."""
    from ..data.spec import load_dataset

    X = load_dataset(s.spec, s.dtype).X_train
    return int((X.abs().sum(dim=(1, 2)) == 0).sum().item())


# ------------------------------------------------------------------------------------------ verdicts

def _times(ladder: pd.DataFrame, protocol: str, experiment: str, beta: float, L: int) -> pd.DataFrame:
    rows = ladder[(ladder["protocol"] == protocol) & (ladder["experiment"] == experiment)
                  & (ladder["beta"] == beta) & (ladder["n_layers"] == L)]
    return rows.set_index("seed").sort_index()[TIMES]


def speed_verdicts(ladder: pd.DataFrame, dataset: str, realisability: dict[str, Any]) -> list[Verdict]:
    """Claims (a), (b), (c) on the ladder under every v6 protocol the table holds (the theorem path:
    (a) and (b) only, decided only on realisable data)."""
    out = []
    for protocol in (OWN, PATH, COMMON):
        rows = ladder[ladder["protocol"] == protocol]
        if rows.empty:
            continue
        note = ""
        if protocol == PATH and not realisability["realisable"]:
            note = (f"not realisable: the β = 1 run reached Φ/Φ₀ = {realisability['loss_ratio']:.3g} by its cap "
                    f"(realisable at ≤ {realisability['bound']:g})")
        beta = rows[(rows["experiment"] == "beta") & (rows["n_layers"] == 1)]
        if len(beta):
            with_res, without = _times(rows, protocol, "beta", 1.0, 1), _times(rows, protocol, "beta", 0.0, 1)
            seeds = with_res.index.intersection(without.index)
            signs = pair_signs(with_res.loc[seeds].to_numpy(), without.loc[seeds].to_numpy())
            out.append(_verdict("residual_helps", signs, dataset, protocol, note, rows))
            betas = sorted(beta["beta"].unique())
            cube = np.stack([_times(rows, protocol, "beta", b, 1).loc[seeds].to_numpy() for b in betas], axis=1)
            out.append(_verdict("beta_monotone", beta_signs(cube, np.array(betas)), dataset, protocol, note, rows,
                                shape=_median_shape(cube, betas)))
        depth = rows[rows["experiment"] == "depth"]
        if len(depth):
            depths = sorted(int(L) for L in depth["n_layers"].unique())
            parts = []
            for L in depths:
                res, twin = _times(rows, protocol, "depth", 1.0, L), _times(rows, protocol, "depth", 0.0, L)
                seeds = res.index.intersection(twin.index)
                parts.append(pair_signs(res.loc[seeds].to_numpy(), twin.loc[seeds].to_numpy()))
            out.append(_verdict("depth_residual_helps", depth_signs(np.stack(parts, axis=1)), dataset, protocol, note, rows))
    return out


def _median_shape(cube: np.ndarray, betas: list[float]) -> dict[str, Any]:
    """Claim (b)'s shape as the paper states it: the median time to each rung over seeds, per β
    (censored runs as +∞), and whether it falls with β (non-increasing) at each rung."""
    med = np.median(np.where(np.isinf(cube), np.finfo(float).max, cube), axis=0)  # β × rungs; censored: last
    return {rung_name(q): {"median_time_by_beta": {f"{b:g}": _time(med[i, j]) for i, b in enumerate(betas)},
                           "monotone": bool(np.all(np.diff(med[:, j]) <= 0))}
            for j, q in enumerate(LADDER)}


def _time(t: float) -> float:
    return float("inf") if t == np.finfo(float).max else float(t)


def _verdict(name: str, signs: np.ndarray, dataset: str, protocol: str, note: str, rows: pd.DataFrame,
             shape: dict | None = None) -> Verdict:
    r = decide(signs)
    outcome = "could not be tested" if note else r["outcome"]
    rungs = "; ".join(f"{x['rung']}: {x['outcome']} ({x['for']} for, {x['against']} against, "
                      f"{x['censored']} censored of {r['seeds']})" for x in r["rungs"])
    detail = (f"{note}; " if note else "") + rungs
    numbers = {**r, "outcome": outcome, "rises": int(rows["rises"].sum()),
               "runs_with_rises": int((rows["rises"] > 0).sum()), "runs": int(len(rows)),
               "diverged": int(rows["diverged"].sum()), "cap": int(rows["cap"].max())}
    if shape is not None:
        numbers["shape"] = shape
    return Verdict(name, CLAIMS[name], outcome, numbers, detail, dataset, protocol, "")


def verdict_rows(verdicts: list[Verdict]) -> pd.DataFrame:
    """The v6 verdicts as a display table: one row per claim × protocol, one column per rung."""
    rows = []
    for v in verdicts:
        rung = {x["rung"]: f"{x['outcome']} ({x['for']}–{x['against']}, {x['censored']} cens.)"
                for x in v.numbers["rungs"]}
        rows.append({"claim": v.name, "dataset": v.dataset, "protocol": v.protocol, "verdict": v.outcome,
                     "seeds": v.numbers["seeds"], **{f"q = {k}": val for k, val in rung.items()},
                     "runs with a rise": f"{v.numbers['runs_with_rises']} of {v.numbers['runs']}"})
    return pd.DataFrame(rows)


def chance(n_seeds: int = 12) -> dict[str, dict[str, float]]:
    """The false-decision rate of every v6 rule, simulated through the pipeline as run (no effect)."""
    from .ladder import simulate_null

    return {claim: simulate_null(claim, seeds=n_seeds, reps=400) for claim in ("a", "b", "c")}

