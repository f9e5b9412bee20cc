"""The step-size protocols of the experiments: how μ is chosen for each configuration.

* ``common`` — one μ per comparison: the largest step on ``Settings.lr_grid`` at which the β = 1
  model(s) of the comparison still lower their loss in a short probe, times ``Settings.safety``
  (:func:`choose_lr`); every β and both twins train with it;
* ``own`` and ``best`` — the robustness map's (:mod:`resgd.robustness`): each configuration at a
  fraction of its own stability limit, and the best step on the grid;
* ``theory`` — the theorem's: ``μ = c / L̂(β, L, θ⁰)`` with L̂ the local smoothness at the
  initial weights (:func:`resgd.core.smoothness.smoothness_fast`), ``c`` ∈ :data:`THEORY_FACTORS`.
  Theorem 1 speaks to this protocol: its guarantee is μα with μ ≤ 1/L, and L grows with ‖Z‖ and so
  with β. The theorem's step is a property of each run's own θ⁰, so every seed gets its own μ
  (L̂ at that seed's initial weights; :func:`theory_lr` needs the seed).

``s`` below is a :class:`resgd.experiments.study.Settings` (not imported: the study imports this module).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import numpy as np
import pandas as pd


from ..core.model import init_params
from ..core.smoothness import FAST_ITERATIONS as LHAT_ITERATIONS, smoothness_fast_stacked
from ..data.spec import load_dataset
from ..pipeline.cache import ResultsCache
from .run_config import entry_key
from ..validation import ConfigError, check_choice
from ..pipeline.sweep import Task, cached_sweep, check_n_jobs
from .runs import stack_groups, sweep

PROTOCOLS = ("common", "own", "best", "theory")
THEORY_FACTORS = (0.25, 0.5, 1.0)
"""The values of c in the theorem's protocol μ = c / L̂ (pre-registered; 0.5 is the primary one)."""
THEORY_PRIMARY = 0.5


def check_protocol(protocol: str, c: float | None = None) -> None:
    """A one-line :class:`ConfigError` for an unknown protocol or a bad factor c (theory only)."""
    check_choice("protocol", protocol, PROTOCOLS)
    if protocol == "theory":
        if not isinstance(c, (int, float)) or isinstance(c, bool) or not np.isfinite(c) or c <= 0:
            raise ConfigError(f"protocol 'theory': the factor c of μ = c / L̂ must be a finite number > 0, got {c!r}")


def probe_stable(history: pd.DataFrame, diverged: bool) -> bool:
    """A probe is stable when it did not diverge, every loss is finite and the last is below the first."""
    loss = history["loss"].to_numpy(dtype=float)
    return (not diverged) and len(loss) > 1 and bool(np.isfinite(loss).all()) and loss[-1] < loss[0]


def choose_lr(
    s,
    n_layers: Sequence[int],
    *,
    n_jobs: int = 2,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = False,
    scheduler: str | None = None,
) -> tuple[float, pd.DataFrame]:
    """The ``common`` protocol: the step size of one comparison and the probe table behind it.

    For each depth in ``n_layers``, the β = 1 model (seed ``s.seeds[0]``) is trained for
    ``s.probe_iterations`` steps at every step size of ``s.lr_grid``; the largest step size that
    is stable (:func:`probe_stable`) at every depth, times ``s.safety``, is the comparison's μ.
    """
    configs = [s.config(1.0, L, s.seeds[0], lr, iterations=s.probe_iterations) for L in n_layers for lr in s.lr_grid]
    runs = sweep(configs, n_jobs=n_jobs, cache_dir=cache_dir, scheduler=scheduler, progress=progress,
                 desc=f"{s.dataset}: step-size probe")
    rows = []
    for (L, lr), h in runs.groupby(["n_layers", "lr"], sort=False):
        diverged = bool(h["diverged"].iloc[0])
        rows.append({"n_layers": int(L), "lr": float(lr), "loss_start": float(h["loss"].iloc[0]),
                     "loss_end": float(h["loss"].iloc[-1]), "diverged": diverged, "stable": probe_stable(h, diverged)})
    table = pd.DataFrame(rows).sort_values(["n_layers", "lr"], ascending=[True, False], ignore_index=True)
    stable = table[table["stable"]].groupby("lr")["n_layers"].nunique()
    common = [lr for lr, count in stable.items() if count == len(set(n_layers))]
    if not common:
        raise ConfigError(
            f"choose_lr: no step size in {list(s.lr_grid)} is stable for the β = 1 model at depth(s) "
            f"{list(n_layers)} on {s.dataset}; extend Settings.lr_grid downwards"
        )
    largest = max(common)
    table["chosen"] = False
    table.loc[table["lr"] == largest, "chosen"] = True
    return largest * s.safety, table


def smoothness(s, beta: float, n_layers: int, *, beta_ffn: float | None = None,
               seed: int | None = None, cache_dir: str | os.PathLike | None = None) -> float:
    """L̂(β, L, θ⁰) of the loss the runs minimise (``s.reduction``), at the initial weights of
    ``seed`` (default: the first seed); cached like a run. Computed in float64 whatever the runs'
    dtype, so a float32 rerun trains with the same steps (``resgd.experiments.dtype_check``)."""
    seed = s.seeds[0] if seed is None else seed
    config = _config(s, beta, n_layers, beta_ffn, seed)
    key = _key(config, s.lhat_iterations)
    frame = ResultsCache(cache_dir).read_or_compute(key, lambda: _lhat_one(config, s.lhat_iterations))
    return float(frame["L_hat"].iloc[0])


def _lhat_stack(configs: tuple, iterations: int = LHAT_ITERATIONS) -> list[pd.DataFrame]:
    """L̂ at θ⁰ of runs of one stack key (:func:`resgd.experiments.runs.stack_key`), one table each: a
    sweep's grouped task (no file access), each value bit for bit the one it gets alone; ``iterations``
    power-iteration steps per term."""
    config = configs[0]
    data = load_dataset(config.dataset, "float64")
    values = smoothness_fast_stacked([init_params(c.model, c.seed) for c in configs], [c.model for c in configs],
                                     data.X_train, data.Y_train, data.mask_train, reduction=config.gd.reduction,
                                     iterations=iterations)
    return [pd.DataFrame({"L_hat": [value]}) for value in values]


def _lhat_one(config, iterations: int = LHAT_ITERATIONS) -> pd.DataFrame:
    """L̂ at θ⁰ of one run (a stack of one): the sweep's per-task function."""
    return _lhat_stack((config,), iterations)[0]


def warm_smoothness(points, *, n_jobs: int = 2, cache_dir: str | os.PathLike | None = None,
                    scheduler: str | None = None) -> None:
    """Compute and cache L̂ for every ``(s, β, L, β_ffn, seed)`` of ``points`` that is not cached yet,
    so that :func:`theory_lr` only reads them: through the sweep engine (the training runs' worker
    pool or scheduler, their code, data and engine checks), the runs of one small shape stacked as
    the training runs are (:func:`resgd.experiments.runs.stack_groups`). One L̂ per seed costs about
    a tenth of a single-layer run of the pages (an eighth of a depth run)."""
    by_iterations: dict[int, list] = {}
    for p in points:
        by_iterations.setdefault(p[0].lhat_iterations, []).append(_config(*p))
    for iterations, configs in sorted(by_iterations.items()):
        tasks = [Task(_key(c, iterations), functools.partial(_lhat_one, iterations=iterations), c) for c in configs]
        cached_sweep(tasks, ResultsCache(cache_dir), n_jobs=check_n_jobs(n_jobs), scheduler=scheduler,
                     group=functools.partial(stack_groups, n_jobs=n_jobs,
                                             fn=functools.partial(_lhat_stack, iterations=iterations)))


def _config(s, beta: float, n_layers: int, beta_ffn: float | None, seed: int):
    """The run whose θ⁰ L̂ is taken at (its step and length do not enter L̂)."""
    return s.config(beta, n_layers, seed, 1.0, iterations=1, beta_ffn=beta_ffn)


def lhat_kind(iterations: int = LHAT_ITERATIONS) -> str:
    """The cache/store kind of an L̂ entry: the estimator and its power-iteration steps."""
    return f"smoothness/fast/{iterations}"


def _key(config, iterations: int = LHAT_ITERATIONS) -> str:
    """L̂'s cache key: the run's, in float64, of its own kind (so keyed by the data too)."""
    return entry_key(config, lhat_kind(iterations), dtype="float64")


def theory_lr(s, beta: float, n_layers: int, c: float = THEORY_PRIMARY, *, seed: int, beta_ffn: float | None = None,
              cache_dir: str | os.PathLike | None = None) -> float:
    """The ``theory`` protocol's step of the run with initialisation ``seed``: μ = c / L̂(β, L, θ⁰ of
    that seed) (each seed its own μ: the theorem's step belongs to the run's own θ⁰)."""
    check_protocol("theory", c)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ConfigError(f"theory_lr: seed must be an integer (the run's initialisation seed), got {seed!r}")
    return float(c) / smoothness(s, beta, n_layers, beta_ffn=beta_ffn, seed=seed, cache_dir=cache_dir)
