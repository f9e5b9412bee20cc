"""Each configuration's own stable step (design v6's experiments), the standard of optimizer
comparisons: every arm runs at the step that suits it, not at one step that is too large for the
sharper model and too small for the flatter one.

The rule, pre-registered (:mod:`resgd.experiments.design`): for each configuration (β, β_ffn, L) on
the tuning seed :data:`~resgd.experiments.design.TUNING_SEED` (never an evaluation seed),

1. a probe of ``Settings.probe_iterations`` steps at every step of
   :data:`~resgd.experiments.design.OWN_GRID` (quarter decades): the largest step whose probe is
   stable (:func:`resgd.experiments.step_size.probe_stable`) is the first candidate;
2. the candidate trains for the whole cap (:data:`~resgd.experiments.design.CAP` · T); if Φ rose at any
   step (:func:`resgd.experiments.ladder.rises`: the step was above the descent threshold 2/L somewhere
   on the path) or the run diverged, the next smaller grid step is tried, until one descends at every
   step to the cap. That step is the configuration's own step.

The largest step that descends along the whole path is taken as the best stable one: while GD
descends, a larger step moves further per iteration. The evaluation seeds then train at it; their own
rises are counted and shown, never a reason to drop a run.
"""

from __future__ import annotations

import os

import pandas as pd

from ..validation import ConfigError
from .design import CAP, OWN_GRID, TUNING_SEED
from .ladder import rises
from .run_config import config_key
from .runs import sweep
from .step_size import probe_stable


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
