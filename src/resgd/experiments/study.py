"""The empirical section for one data set: the design's arms (:func:`run_experiments`), design v6's
runs at each configuration's own step and its verdicts (:func:`run_speed`), and :func:`reproduce`.
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

from .. import dataset_registry as registry
from ..claim_registry import BETA_MONOTONE, DEPTH_RESIDUAL_HELPS, RESIDUAL_HELPS, SPEED_CLAIMS
from ..data.spec import load_dataset
from ..dataset_registry import paper_names
from ..pipeline.cache import resolve_results_dir
from ..pipeline.reproduce import Outputs, reproduce_part
from ..validation import ConfigError, check_choice
from .claims import CLAIMS, Verdict
from .configuration import Settings, config_key, settings
from .decisions import beta_signs, decide, depth_signs, ladder_table, pair_signs, rises, rung_name
from .design import CAP, COMMON, LADDER, OWN, OWN_GRID, PATH, PATH_C, REALISABLE_RATIO, TUNING_SEED, arms
from .pages import figure_kinds, figure_name, make_figure
from .results import ExperimentResults, result_files
from .runs import runs_table, sweep, sweep_frames
from .steps import choose_lr, path_key, path_stack, path_table, probe_stable, theory_lr, warm_smoothness

# -------------------------------------------------------------------- each configuration's own step
# Each configuration's own stable step (design v6's experiments), the standard of optimizer
# comparisons: every arm runs at the step that suits it, not at one step that is too large for the
# sharper model and too small for the flatter one.
#
# The rule, pre-registered (:mod:`resgd.experiments.design`): for each configuration (β, β_ffn, L) on
# the tuning seed :data:`~resgd.experiments.design.TUNING_SEED` (never an evaluation seed),
#
# 1. a probe of ``Settings.probe_iterations`` steps at every step of
#    :data:`~resgd.experiments.design.OWN_GRID` (quarter decades): the largest step whose probe is
#    stable (:func:`resgd.experiments.steps.probe_stable`) is the first candidate;
# 2. the candidate trains for the whole cap (:data:`~resgd.experiments.design.CAP` · T); if Φ rose at any
#    step (:func:`resgd.experiments.decisions.rises`: the step was above the descent threshold 2/L somewhere
#    on the path) or the run diverged, the next smaller grid step is tried, until one descends at every
#    step to the cap. That step is the configuration's own step.
#
# The largest step that descends along the whole path is taken as the best stable one: while GD
# descends, a larger step moves further per iteration. The evaluation seeds then train at it; their own
# rises are counted and shown, never a reason to drop a run.

def _cap(s, experiment: str) -> int:
    return CAP * (s.depth_iterations if experiment == "depth" else s.iterations)


def own_grid(s) -> tuple[float, ...]:
    """The steps the search tries: :data:`OWN_GRID` (full mode), or every ``s.own_grid_stride``-th of
    its steps from the largest down (the quick smoke build's coarser grid, so that it stays short)."""
    return OWN_GRID[:: s.own_grid_stride]


def own_steps(s, points: dict[str, list[tuple[float, float | None, int]]], *, n_jobs: int = 2,
              cache_dir: str | os.PathLike | None = None, scheduler: str | None = None,
              progress: bool = False) -> pd.DataFrame:
    """The own step of every point (``points``: experiment → (β, β_ffn, L)), with the table behind it:
    one row per tried step (``probe`` rows and ``path`` rows), ``chosen`` on the step kept."""
    engine = {"n_jobs": n_jobs, "cache_dir": cache_dir, "scheduler": scheduler, "progress": progress}
    sizes = {e: (s.depth() if e == "depth" else s) for e in points}
    flat = [(e, p) for e, ps in points.items() for p in ps]
    grid = own_grid(s)
    probe_configs = [sizes[e].config(b, L, TUNING_SEED, lr, iterations=s.probe_iterations, beta_ffn=f)
                     for e, (b, f, L) in flat for lr in grid]
    probes = dict(tuple(sweep(probe_configs, desc=f"{s.dataset}: own-step probes", **engine).groupby("key")))
    rows, candidates = [], {}
    for i, (e, (b, f, L)) in enumerate(flat):
        stable = []
        for j, lr in enumerate(grid):
            h = probes[config_key(probe_configs[i * len(grid) + j])]
            ok = probe_stable(h, bool(h["diverged"].iloc[0]))
            rows.append({"experiment": e, "beta": b, "beta_ffn": b if f is None else f, "n_layers": L, "lr": lr,
                         "stage": "probe", "stable": ok, "rises": rises(h["loss"].to_numpy(dtype=float)),
                         "chosen": False})
            if ok:
                stable.append(j)
        if not stable:
            raise ConfigError(f"own step: no step of the grid is stable for {e} β={b:g} L={L} on {s.dataset} "
                              f"(probe of {s.probe_iterations} iterations); extend design.OWN_GRID downwards")
        candidates[i] = min(stable)
    done: dict[int, int] = {}
    while len(done) < len(flat):
        todo = {i: j for i, j in candidates.items() if i not in done}
        configs = {i: sizes[flat[i][0]].config(flat[i][1][0], flat[i][1][2], TUNING_SEED, grid[j],
                                               iterations=_cap(s, flat[i][0]), beta_ffn=flat[i][1][1])
                   for i, j in todo.items()}
        runs = dict(tuple(sweep(list(configs.values()), desc=f"{s.dataset}: own-step paths", **engine).groupby("key")))
        for i, config in configs.items():
            h = runs[config_key(config)]
            up = rises(h["loss"].to_numpy(dtype=float))
            good = up == 0 and not bool(h["diverged"].iloc[0])
            e, (b, f, L) = flat[i]
            rows.append({"experiment": e, "beta": b, "beta_ffn": b if f is None else f, "n_layers": L,
                         "lr": grid[todo[i]], "stage": "path", "stable": good, "rises": up, "chosen": good})
            if good:
                done[i] = todo[i]
            elif todo[i] + 1 < len(grid):
                candidates[i] = todo[i] + 1
            else:
                raise ConfigError(f"own step: no step of the grid descends along the whole path for {e} β={b:g} "
                                  f"L={L} on {s.dataset}; extend design.OWN_GRID downwards")
    return pd.DataFrame(rows)



# ---------------------------------------------------------------------------------------- design v6
# Design v6 for one data set: its runs (each configuration at its own stable step, and the theorem's
# step kept in its regime on realisable data) and its verdicts on the time to a ladder of targets.
#
# Two questions, kept apart (:mod:`resgd.experiments.design`, "Design v6"):
#
# * *the paper's experiments* (``own``): claims (a), (b), (c) at the paper's sizes, every
#   configuration at its own stable step (above), 12 seeds, runs to the cap;
#   the floor Φ* of each comparison estimated as the lowest loss any of its runs reached;
# * *Theorem 1 in its regime* (``path``): claims (a), (b) at L = 1 on a small sample with far more
#   weights than targets, at the theorem's step kept along the path (:mod:`resgd.experiments.steps`),
#   Φ* = 0; decided only where the realisability check passed, else "could not be tested".
#
# The common step of v5 stays as a sensitivity row (its 8 seeds, its cap T), decided by the same rule.

RUN_KEYS = ["experiment", "protocol", "twin_init", "beta", "beta_ffn", "n_layers", "seed"]
TIMES = [f"t_{rung_name(q)}" for q in LADDER]
CENSORED = 1e300
"""A censored time where a finite number must stand for it (it ranks after every real time)."""


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
            runs = self.all_runs()
            theorem = runs["protocol"] == PATH  # realisable data: Φ* = 0; elsewhere the comparison's floor
            self._ladder = pd.concat([ladder_table(runs[part], RUN_KEYS, ["protocol", "experiment", "n_layers"],
                                                   realisable=realisable)
                                      for part, realisable in ((~theorem, False), (theorem, True)) if part.any()],
                                     ignore_index=True)
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
    experiment_of = {}
    for experiment, pts in points.items():
        size = s.depth() if experiment == "depth" else s
        for b, f, L in pts:
            for seed in s.v6_seeds:
                config = size.config(b, L, seed, lr[(experiment, b, L)], iterations=CAP * size.iterations, beta_ffn=f)
                experiment_of[config] = experiment
    configs = list(experiment_of)
    runs = runs_table(sweep_frames(configs, desc=f"{s.dataset}: v6 own-step runs", **engine), configs)
    runs["experiment"] = runs["key"].map({config_key(c): e for c, e in experiment_of.items()})
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
            out.append(_verdict(RESIDUAL_HELPS.name, signs, dataset, protocol, note, rows))
            betas = sorted(beta["beta"].unique())
            cube = np.stack([_times(rows, protocol, "beta", b, 1).loc[seeds].to_numpy() for b in betas], axis=1)
            out.append(_verdict(BETA_MONOTONE.name, beta_signs(cube, np.array(betas)), dataset, protocol, note, rows,
                                shape=_median_shape(cube, betas)))
        depth = rows[rows["experiment"] == "depth"]
        if len(depth):
            depths = sorted(int(L) for L in depth["n_layers"].unique())
            parts = []
            for L in depths:
                res, twin = _times(rows, protocol, "depth", 1.0, L), _times(rows, protocol, "depth", 0.0, L)
                seeds = res.index.intersection(twin.index)
                parts.append(pair_signs(res.loc[seeds].to_numpy(), twin.loc[seeds].to_numpy()))
            out.append(_verdict(DEPTH_RESIDUAL_HELPS.name, depth_signs(np.stack(parts, axis=1)), dataset, protocol, note, rows))
    return out


def _median_shape(cube: np.ndarray, betas: list[float]) -> dict[str, Any]:
    """Claim (b)'s shape as the paper states it: the median time to each rung over seeds, per β
    (censored runs as +∞), and whether it falls with β (non-increasing) at each rung."""
    med = np.median(np.where(np.isinf(cube), CENSORED, cube), axis=0)  # β × rungs; censored: last
    return {rung_name(q): {"median_time_by_beta": {f"{b:g}": _time(med[i, j]) for i, b in enumerate(betas)},
                           "monotone": bool(np.all(np.diff(med[:, j]) <= 0))}
            for j, q in enumerate(LADDER)}


def _time(t: float) -> float:
    return float("inf") if t >= CENSORED else float(t)


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


# ------------------------------------------------------------------------------------- page tables

def steps_table(speed: SpeedResults) -> pd.DataFrame:
    """Each configuration's own step: the probe's largest stable step, every step tried on the whole
    path (with its rises), the step kept."""
    steps = speed.steps
    rows = []
    for (e, b, L), g in steps.groupby(["experiment", "beta", "n_layers"], sort=False):
        path = g[g["stage"] == "path"]
        kept = path[path["chosen"]]
        rows.append({"experiment": e, "β": b, "L": int(L),
                     "largest stable probe step": float(g[(g["stage"] == "probe") & g["stable"]]["lr"].max()),
                     "steps tried on the path (rises)": ", ".join(f"{r.lr:.3g} ({r.rises})" for r in path.itertuples()),
                     "own step": float(kept["lr"].iloc[0]) if len(kept) else float("nan")})
    return pd.DataFrame(rows)


def path_summary(speed: SpeedResults) -> dict[str, Any]:
    """The theorem path at a glance: the largest μ·L̂ at a checkpoint and at a segment's end over all
    runs, the halvings, the realisability check, and Spearman(measured rate, σ_min²/σ_max²(Z⁰))."""
    from ..core.stats import spearman

    p = speed.path()
    if p.empty:
        return {}
    rho = spearman(p["predicted"].to_numpy(dtype=float), p["rate"].to_numpy(dtype=float))
    return {"runs": int(len(p)), "max_muL_checkpoint": float(p["max_muL_checkpoint"].max()),
            "max_muL_segment_end": float(p["max_muL_segment_end"].max()),
            "runs_above_2": int((p["max_muL_segment_end"] >= 2).sum()), "halvings": int(p["halvings"].sum()),
            "rho_predicted": float(rho), **{f"realisable_{k}": v for k, v in speed.realisability.items()}}


def speed_numbers(speed: SpeedResults) -> dict[str, Any]:
    """The numbers the pages glue from design v6 (``v6-…`` keys)."""
    out: dict[str, Any] = {}
    for v in speed.verdicts():
        slug = {OWN: "own", PATH: "path", COMMON: "common"}[v.protocol]
        out[f"v6-{slug}-{v.name}"] = v.outcome
        out[f"v6-{slug}-{v.name}-sentence"] = speed_sentence(v)
    ladder = speed.ladder()
    own = ladder[ladder["protocol"] == OWN]
    out["v6-own-runs"] = int(len(own))
    out["v6-own-runs-rising"] = int((own["rises"] > 0).sum())
    out["v6-own-diverged"] = int(own["diverged"].sum())
    out["v6-seeds"] = int(own["seed"].nunique())
    summary = path_summary(speed)
    for key in ("runs", "max_muL_checkpoint", "max_muL_segment_end", "runs_above_2", "halvings", "rho_predicted",
                "realisable_loss_ratio", "realisable_N", "realisable_iterations"):
        if key in summary:
            out[f"v6-path-{key.replace('_', '-')}"] = summary[key]
    out["v6-path-realisable"] = "realisable" if summary.get("realisable_realisable") else "not realisable"
    return out


def load_speed_verdicts(mode: str, directory=None, datasets=None) -> pd.DataFrame:
    """Every data set's v6 verdicts (``<results>/claims/<dataset>_<mode>_v6.json``) as one display table
    (``datasets``: the paper's by default)."""
    import json
    from pathlib import Path


    directory = Path(directory) if directory is not None else resolve_results_dir() / "claims"
    rows = []
    for dataset in paper_names() if datasets is None else datasets:
        path = directory / f"{dataset}_{mode}_v6.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: run the {dataset} page in {mode} mode first")
        payload = json.loads(path.read_text(encoding="utf-8"))
        rows += [Verdict.from_dict(item) for item in payload["verdicts"]]
    return verdict_rows(rows).assign(sentence=[speed_sentence(v) for v in rows])


def null_table(reps: int = 500) -> pd.DataFrame:
    """The v6 rules' false-decision rates under no effect, simulated through the pipeline as run
    (:func:`resgd.experiments.decisions.simulate_rule`): per claim and question, "holds" and "fails"."""
    from .decisions import simulate_rule

    rows = []
    single_layer = tuple(c for c in SPEED_CLAIMS if c.experiment != DEPTH_RESIDUAL_HELPS.experiment)  # the theorem's
    for question, realisable, claims in (("experiments", False, SPEED_CLAIMS), ("theorem", True, single_layer)):
        for claim in claims:
            r = simulate_rule(claim.key, reps=reps, realisable=realisable)
            rows.append({"claim": claim.label, "question": question, "holds by chance": r["holds"],
                         "fails by chance": r["fails"], "draws": reps})
    return pd.DataFrame(rows)


CLAIM_READING = {c.name: c.speed_reading for c in SPEED_CLAIMS}


def speed_sentence(v: Verdict) -> str:
    """One verdict in words: the claim as tested, the outcome, and each rung's counts."""
    rungs = v.numbers["rungs"]

    def counts(x: dict) -> str:
        return f"q = {x['rung']}: {x['for']} for, {x['against']} against, {x['censored']} censored"

    if v.outcome == "could not be tested":
        why = v.detail.split(";")[0] if v.detail.startswith("not realisable") else \
            "no rung had enough seeds in which some run reached the target"
        return f"{CLAIM_READING[v.name]}: could not be tested ({why})."
    decided = [x for x in rungs if x["testable"]]
    shape = _shape_words(v.numbers.get("shape"))
    if v.outcome in ("holds", "fails"):
        where = ", ".join(x["rung"] for x in decided)
        return (f"{CLAIM_READING[v.name]}: {v.outcome} at every testable rung (q = {where}; "
                + "; ".join(counts(x) for x in decided) + ")" + shape + ".")
    return (f"{CLAIM_READING[v.name]}: {v.outcome} ("
            + "; ".join(f"{counts(x)}, {x['outcome'] if x['testable'] else 'not testable'}" for x in rungs) + ")"
            + shape + ".")


def _shape_words(shape: dict | None) -> str:
    """Claim (b)'s shape as the paper states it: at which rungs the median time over seeds falls (does
    not rise) as β grows; '' for the other claims."""
    if not shape:
        return ""
    falls = [q for q, s in shape.items() if s["monotone"]]
    other = [q for q in shape if q not in falls]
    if not other:
        return "; the median time falls as β grows at every rung"
    if not falls:
        return "; the median time does not fall monotonically as β grows at any rung"
    return (f"; the median time falls as β grows at q = {', '.join(falls)}, not at q = {', '.join(other)}")


REPLAY_HORIZONS = (0.25, 0.5, 1.0)
"""Fractions of the cap 2T at which the whole-run rate is replayed: T/2, T and 2T."""


def rate_replay(speed: SpeedResults) -> pd.DataFrame:
    """v5's measure replayed on v6's own-step runs: the whole-run rate −log(Φ(h)/Φ₀)/h at h = T/2, T
    and 2T, and the sign rule on the per-seed differences for claims (a) and (c) (per seed, the
    median over L), so that the horizon-dependence of a rate can be set beside the ladder's verdict."""
    from .decisions import median_or_nan, sign_test

    runs = speed.runs[speed.runs["protocol"] == OWN]
    rows = []
    for frac in REPLAY_HORIZONS:
        rates = {}
        for keys, h in runs.groupby(RUN_KEYS, sort=False):
            loss = h.sort_values("iteration")["loss"].to_numpy(dtype=float)
            t = int(round(frac * (len(loss) - 1)))
            ratio = loss[t] / loss[0] if np.isfinite(loss[t]) else np.inf
            rates[keys] = -np.log(ratio) / t if ratio > 0 else np.inf
        rate = pd.Series(rates)
        rate.index.names = RUN_KEYS
        table = rate.rename("rate").reset_index()
        name = {0.25: "T/2", 0.5: "T", 1.0: "2T"}[frac]
        one = table[(table["experiment"] == "beta") & (table["n_layers"] == 1)]
        w, wo = (one[one["beta"] == b].set_index("seed")["rate"] for b in (1.0, 0.0))
        r = sign_test((w - wo).dropna().to_numpy())
        rows.append({"claim": RESIDUAL_HELPS.name, "horizon": name, "for": r["positive"], "against": r["negative"],
                     "seeds": r["seeds"], "verdict": r["outcome"]})
        depth = table[table["experiment"] == "depth"]
        if len(depth):
            diffs = [depth[(depth["n_layers"] == L) & (depth["beta"] == 1.0)].set_index("seed")["rate"]
                     - depth[(depth["n_layers"] == L) & (depth["beta"] == 0.0)].set_index("seed")["rate"]
                     for L in sorted(depth["n_layers"].unique())]
            per_seed = pd.concat(diffs, axis=1)
            r = sign_test(np.array([median_or_nan(row) for row in per_seed.to_numpy(dtype=float)]))
            rows.append({"claim": DEPTH_RESIDUAL_HELPS.name, "horizon": name, "for": r["positive"],
                         "against": r["negative"], "seeds": r["seeds"], "verdict": r["outcome"]})
    return pd.DataFrame(rows)



# --------------------------------------------------------------------- the design's arms, reproduce
# The paper's empirical section for one data set (its Figs. 3a and 3b, on Jena climate and SST-2):
# every arm of the design (:func:`run_experiments`), and :func:`reproduce`: a page's figures, tables
# and claim verdicts without Jupyter, published together.

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
    runs = pd.concat(frames, ignore_index=True)
    speed = None
    if s.v6_seeds and only is None:

        common = runs[(runs["protocol"] == "common") & (runs["twin_init"] == "matched")]
        speed = run_speed(s, common=common, **engine)
    return ExperimentResults(settings=s, data=summary, lr=pd.DataFrame(steps),
                             probes=pd.concat(probes, ignore_index=True) if probes else pd.DataFrame(),
                             runs=runs, speed=speed)



def outputs(dataset: str, quick: bool, *, n_jobs: int = 2, progress: bool = True, scheduler: str | None = None,
            **overrides: Any) -> Outputs:
    """Everything the data set's notebook makes: its figures, tables and verdicts."""
    results = run_experiments(settings(dataset, quick, **overrides), n_jobs=n_jobs, progress=progress, scheduler=scheduler)
    figures = {figure_name(kind, dataset): make_figure(results, kind) for kind in figure_kinds(results)}
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
    check_choice("dataset", dataset, registry.names())
    return reproduce_part(
        lambda: outputs(dataset, quick, n_jobs=n_jobs, progress=progress, scheduler=scheduler, **overrides),
        figures_dir=directory, writes_results=True,
    )


def reproducer(dataset: str):
    """The study contract's entry point of one data set's page (``python -m resgd reproduce --only
    <dataset>``): ``(quick, figures_dir, *, n_jobs, scheduler) -> {name: path}``."""
    check_choice("dataset", dataset, registry.names())

    def reproduce_page(quick: bool, figures_dir: str | os.PathLike | None = None, *, n_jobs: int = 2,
                       scheduler: str | None = None) -> dict[str, Path]:
        return reproduce(dataset, quick, figures_dir, n_jobs=n_jobs, scheduler=scheduler)

    reproduce_page.__name__ = reproduce_page.__qualname__ = f"reproduce_{dataset}"
    reproduce_page.__doc__ = f"{registry.dataset(dataset).title}: the page's figures, tables and verdicts (the study contract)."
    return reproduce_page
