"""How the step size μ is chosen: the protocols ``common``, ``own``, ``best`` and ``theory``
(μ = c / L̂ at θ⁰), and the theorem's step kept in its regime along the whole path.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from ..core.model import init_params
from ..core.smoothness import FAST_ITERATIONS as LHAT_ITERATIONS
from ..core.smoothness import smoothness_fast, smoothness_fast_stacked
from ..core.trainer import loss_ratios, train_runs
from ..data.spec import DTYPES, load_dataset
from ..pipeline.cache import ResultsCache
from ..pipeline.sweep import Task, cached_sweep, check_n_jobs
from ..validation import ConfigError, check_choice
from .configuration import RunConfig, entry_key
from .runs import stack_groups, sweep

# ------------------------------------------------------------------------------------ the protocols
# The step-size protocols of the experiments: how μ is chosen for each configuration.
#
# * ``common`` — one μ per comparison: the largest step on ``Settings.lr_grid`` at which the β = 1
#   model(s) of the comparison still lower their loss in a short probe, times ``Settings.safety``
#   (:func:`choose_lr`); every β and both twins train with it;
# * ``own`` and ``best`` — the robustness map's (:mod:`resgd.robustness`): each configuration at a
#   fraction of its own stability limit, and the best step on the grid;
# * ``theory`` — the theorem's: ``μ = c / L̂(β, L, θ⁰)`` with L̂ the local smoothness at the
#   initial weights (:func:`resgd.core.smoothness.smoothness_fast`), ``c`` ∈ :data:`THEORY_FACTORS`.
#   Theorem 1 speaks to this protocol: its guarantee is μα with μ ≤ 1/L, and L grows with ‖Z‖ and so
#   with β. The theorem's step is a property of each run's own θ⁰, so every seed gets its own μ
#   (L̂ at that seed's initial weights; :func:`theory_lr` needs the seed).
#
# ``s`` below is a :class:`resgd.experiments.configuration.Settings`.

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



# ---------------------------------------------------------------- the theorem's step along the path
# The theorem's step kept in its regime along the whole path (design v6's theorem question).
#
# Theorem 1 needs μ ≤ 1/L with L the smoothness of Φ on the region the iterates visit. A constant
# μ = c / L̂(θ⁰) meets it only near t = 0: along real runs L̂(θ_t) grows several-fold (progressive
# sharpening) until μ·L̂ ≈ 2, the edge of stability, where the theorem says nothing. The rule here keeps
# the hypothesis where it is checked, and drops no run:
#
# * every :data:`PATH_EVERY` iterations (a checkpoint) L̂(θ_t) is estimated
#   again (:func:`resgd.core.smoothness.smoothness_fast`, as at θ⁰) and μ set to c / L̂(θ_t);
# * a segment in which Φ rose at any step is retrained from its checkpoint with μ halved (at most
#   :data:`PATH_HALVINGS` times), so Φ never rises on the accepted path;
# * L̂ is also taken at θ_T, so μ·L̂ is known at both ends of every segment (the pages show the maxima).
#
# Why faithful: the theorem's per-step contraction Φ(t+1) ≤ (1 − μα) Φ(t) is a statement about one
# step at a step size below 1/L on that step's segment; a step size that follows L̂(θ_t) keeps every
# step inside that hypothesis as far as L̂ measures it, where a constant step leaves it. The contraction
# then reads with μ_t in place of μ, so the per-iteration rate and the rate per unit of step (−log Φ(T)/Φ₀
# over Σμ_t) are both shown.
#
# In the results store a path-step run is an entry of kind :data:`PATH_KIND` whose configuration's
# ``gd.lr`` holds the factor c (its steps are chosen by the rule above).

PATH_EVERY = 100
"""Iterations between the path step's checkpoints (L̂ re-estimated, μ re-set). Pre-registered with
design v6 (:mod:`resgd.experiments.design`); here because the runs' numbers depend on it."""
PATH_HALVINGS = 12
"""A segment whose loss rose anywhere is retrained from its start with μ halved, at most this often."""
REGIME_TOL = 1e-9
"""A step raised Φ when Φ(t+1) > (1 + REGIME_TOL) Φ(t): above float64 rounding of a loss near its floor."""


def rise_mask(loss: np.ndarray) -> np.ndarray:
    """Per GD step t → t+1, whether it raised Φ: Φ(t+1) > (1 + :data:`REGIME_TOL`) Φ(t), a non-finite
    Φ(t+1) counting. Each such step was above the descent threshold 2/L on its segment (the descent
    lemma). The one test of a rise: the path step, the ladder's count and v5's regime rule use it."""
    loss = np.asarray(loss, dtype=float)
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(loss[1:]) | (loss[1:] > (1.0 + REGIME_TOL) * loss[:-1])

PATH_KIND = f"run/path-step/every={PATH_EVERY}"
"""The results-store kind of a run under the path step (its ``gd.lr`` is the factor c)."""


def train_path(config: RunConfig, data, *, final_lhat: bool = True) -> tuple[pd.DataFrame, dict]:
    """One run under the path step from its initial weights: its history (the trainer's columns plus
    ``step``, the μ of the step from t, ``L_hat`` at every checkpoint and at T, NaN elsewhere,
    ``halvings`` at every checkpoint) and its final weights. ``final_lhat=False``: no L̂ at T (NaN
    there), which no step depends on (the store's first-segment check, which compares the steps only)."""
    c, T, gd = float(config.gd.lr), int(config.gd.iterations), config.gd
    dtype = DTYPES[config.dtype]
    params = init_params(config.model, config.seed, dtype=dtype)
    X, Y, mask = data.X_train, data.Y_train, data.mask_train
    parts, t = [], 0

    def lhat(p) -> float:
        return smoothness_fast(p, config.model, X, Y, mask, reduction=gd.reduction)

    while t < T:
        L = lhat(params)
        mu, seg = c / L, min(PATH_EVERY, T - t)
        for halvings in range(PATH_HALVINGS + 1):
            step_gd = replace(gd, lr=mu, iterations=seg, record_every=min(gd.record_every, seg))
            out = train_runs([params], [config.model], X, Y, [step_gd], mask=mask)[0]
            if not (out.diverged or rise_mask(out.history["loss"].to_numpy(dtype=float)).any()):
                break
            mu /= 2.0
        else:
            raise RuntimeError(f"path step: Φ still rose after {PATH_HALVINGS} halvings at t = {t} ({config.dataset.name})")
        h = out.history.copy()
        h["iteration"] = h["iteration"] + t
        h["step"] = mu
        h["L_hat"] = math.nan
        h["halvings"] = math.nan
        h.loc[h.index[0], ["L_hat", "halvings"]] = [L, float(halvings)]
        if parts:  # the checkpoint's row ends the previous segment: it takes this segment's checkpoint values
            last = parts[-1].index[-1]
            parts[-1].loc[last, ["step", "L_hat", "halvings"]] = [mu, L, float(halvings)]
            h = h.iloc[1:]
        parts.append(h)
        params, t = out.params, t + seg
    history = pd.concat(parts, ignore_index=True)
    history.loc[history.index[-1], "L_hat"] = lhat(params) if final_lhat else math.nan
    history.loc[history.index[-1], "step"] = math.nan
    history["ratio"] = loss_ratios(history["loss"].to_numpy(dtype=float))
    return history, params


def _compute_path(config: RunConfig) -> pd.DataFrame:
    """One path-step run's tidy table (as :func:`resgd.experiments.runs._frame` builds a run's)."""
    from .runs import _frame, _metrics

    data = load_dataset(config.dataset, config.dtype)
    history, final = train_path(config, data)
    return _frame(config, data, history, False, _metrics(config, data, final))


def path_stack(configs: tuple[RunConfig, ...]) -> list[pd.DataFrame]:
    """The sweep's and the store's task for path-step runs: each computed alone, in order."""
    return [_compute_path(c) for c in configs]


def path_first_segments(configs: tuple[RunConfig, ...]) -> list[pd.DataFrame]:
    """Path-step runs' histories without L̂ at their end (:func:`train_path`), each alone: the task
    of the results store's first-segment check, whose comparison (the trainer's columns) that L̂
    does not enter; it costs a one-segment run as much as its steps."""
    return [train_path(c, load_dataset(c.dataset, c.dtype), final_lhat=False)[0] for c in configs]


def path_key(config: RunConfig) -> str:
    """A path-step run's cache and store key."""
    return entry_key(config, PATH_KIND)


def path_table(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per path-step run: the largest μ·L̂ at a checkpoint (≤ c by the rule) and at the end of a segment
    (the drift within it), the halvings, the steps' sum, and the measured against the predicted rate:
    −log(Φ(T)/Φ₀)/T beside σ_min²(Z⁰)/σ_max²(Z⁰), the quantity Theorem 1's rate is governed by."""
    rows = []
    for k, h in runs.sort_values([*keys, "iteration"]).groupby(keys, sort=False):
        steps = h["step"].to_numpy(dtype=float)
        lhat = h["L_hat"].to_numpy(dtype=float)
        at = np.flatnonzero(np.isfinite(lhat))
        start = [steps[i] * lhat[i] for i in at if np.isfinite(steps[i])]
        end = [steps[j - 1] * lhat[j] for j in at[1:]]
        loss = h["loss"].to_numpy(dtype=float)
        T = len(loss) - 1
        sigma = h.dropna(subset=["sigma_min_Z"])
        smin, smax = float(sigma["sigma_min_Z"].iloc[0]), float(sigma["sigma_max_Z"].iloc[0])
        ratio = loss[-1] / loss[0]
        rows.append({**dict(zip(keys, k)), "max_muL_checkpoint": max(start), "max_muL_segment_end": max(end),
                     "halvings": int(np.nansum(h["halvings"].to_numpy(dtype=float))),
                     "step_sum": float(np.nansum(steps)), "loss_ratio_T": ratio,
                     "rate": -math.log(ratio) / T if ratio > 0 else math.inf,
                     "rate_per_step": -math.log(ratio) / float(np.nansum(steps)) if ratio > 0 else math.inf,
                     "predicted": (smin / smax) ** 2 if smax > 0 else 0.0})
    return pd.DataFrame(rows)
