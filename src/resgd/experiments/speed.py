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

from ..claim_registry import BETA_MONOTONE, DEPTH_RESIDUAL_HELPS, RESIDUAL_HELPS, SPEED_CLAIMS
from ..dataset_registry import paper_names
from .claims import CLAIMS, Verdict
from .design import CAP, LADDER, PATH_C, REALISABLE_RATIO, TUNING_SEED
from .ladder import beta_signs, decide, depth_signs, ladder_table, pair_signs, rung_name
from .own_step import own_steps
from .path_step import path_key, path_stack, path_table
from .run_config import config_key
from .runs import runs_table, sweep_frames

OWN, PATH, COMMON = "own step", f"theorem path c={PATH_C:g}", "common step"
"""The v6 protocols' labels: each configuration's own stable step; the theorem's step kept along the
path; v5's one common step (a sensitivity row)."""
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

    from ..pipeline.cache import resolve_results_dir

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
    (:func:`resgd.experiments.ladder.simulate_rule`): per claim and question, "holds" and "fails"."""
    from .ladder import simulate_rule

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
    from .rules import median_or_nan, sign_test

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
