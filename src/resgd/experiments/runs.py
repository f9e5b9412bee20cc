"""Training runs of the empirical section, computed and cached, sweeps of many, and their end-of-run
metrics (test loss, training and test accuracy).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable

import pandas as pd
import torch
from tqdm.std import tqdm

from ..core.engine import FIELDS as ENGINE_FIELDS
from ..core.engine import engine_path
from ..core.hand_pass import predict_stacked
from ..core.loss import loss_from_output
from ..core.model import forward, init_params
from ..core.trainer import shape_gd, shape_model, train_runs, worth_stacking
from ..data.spec import DTYPES, load_dataset
from ..pipeline.cache import ResultsCache
from ..pipeline.sweep import Group, Task, cached_sweep, check_n_jobs
from ..validation import ConfigError
from .configuration import RunConfig, config_key

# ------------------------------------------------------------------------------- end-of-run metrics
# End-of-run metrics of a trained run: test loss, training and test accuracy.
#
# One run at a time (:func:`_metrics`) or every run of a stack in one stacked pass
# (:func:`_stacked_metrics`, bit for bit the same whichever runs share the stack).

def _accuracy(Y_hat: torch.Tensor, Y: torch.Tensor) -> float:
    """Fraction of samples whose output sign matches the ±1 label (output 0 counts as −1)."""
    predicted = torch.where(Y_hat > 0, 1.0, -1.0).to(Y.dtype)
    return float((predicted == Y).to(torch.float64).mean())


_NO_METRICS = {"test_loss": math.nan, "train_acc": math.nan, "test_acc": math.nan}


def _metrics(config: RunConfig, data, final: dict | None) -> dict:
    """Test loss, train and test accuracy (classification) of one run's final weights; NaN if it diverged."""
    if final is None or not config.test_metrics:
        return dict(_NO_METRICS)
    cfg, reduction = config.model, config.gd.reduction
    with torch.no_grad():
        Y_hat_test = forward(final, cfg, data.X_test, data.mask_test)
        out = dict(_NO_METRICS, test_loss=float(loss_from_output(Y_hat_test, data.Y_test, data.mask_test, reduction)))
        if config.dataset.is_classification:
            out["train_acc"] = _accuracy(forward(final, cfg, data.X_train, data.mask_train), data.Y_train)
            out["test_acc"] = _accuracy(Y_hat_test, data.Y_test)
    return out


def _stacked_metrics(configs: list[RunConfig], data, finals: list[dict | None]) -> list[dict]:
    """:func:`_metrics` of every run of a stack, the surviving runs in one stacked pass each on the
    test and training sets (bit for bit the same whichever runs share the stack)."""
    out = [dict(_NO_METRICS) for _ in configs]
    done = [i for i, final in enumerate(finals) if final is not None]
    if not done or not configs[0].test_metrics:
        return out
    models = [configs[i].model for i in done]
    weights = [finals[i] for i in done]
    test = predict_stacked(weights, models, data.X_test, data.mask_test)
    losses = loss_from_output(test, data.Y_test, data.mask_test, configs[0].gd.reduction, per_run=True).to(torch.float64).numpy()
    train = predict_stacked(weights, models, data.X_train, data.mask_train) if configs[0].dataset.is_classification else None
    for j, i in enumerate(done):
        out[i]["test_loss"] = float(losses[j])
        if train is not None:
            out[i]["train_acc"] = _accuracy(train[j], data.Y_train)
            out[i]["test_acc"] = _accuracy(test[j], data.Y_test)
    return out



# ---------------------------------------------------------------------------------- runs and sweeps
# Training runs of the empirical section, computed and cached, and sweeps of many.
#
# * :func:`run` — one run as a tidy table (the trainer's history plus configuration columns),
#   cached under a key that hashes the complete configuration, ``resgd.__version__`` and a
#   fingerprint of the loaded data (:func:`config_key`).
# * :func:`sweep` — many runs through the pipeline's sweep engine
#   (:func:`resgd.pipeline.sweep.cached_sweep`): only the runs missing from the cache are computed
#   (an interrupted sweep resumes), in parallel, on local processes or a scheduler.
#
# One way to compute a run: :func:`_compute_stack`, through the one trainer
# (:func:`resgd.core.trainer.train_stacked`). Small configurations (:func:`stackable`: the
# robustness map's N·n ≤ 512 tokens) are grouped: :func:`sweep` puts the missing runs that share a
# :func:`stack_key` into stacks (:func:`stack_groups`); larger ones (the headline experiments) train
# each in a stack of its own, where grouping does not pay. A run's numbers inside a stack are bit for
# bit those it gets alone, so a configuration has one cached answer whichever way it was grouped.

ENGINE_COLUMNS = tuple(f"engine_{name}" for name in ENGINE_FIELDS)
CONFIG_COLUMNS = (
    "experiment", "dataset", "is_standin", "source_label", "n_train", "n_tokens", "beta", "beta_ffn", "v_scale",
    "ffn_scale", "n_layers",
    "d_qk", "m", "seed", "lr", "iterations", "reduction", "diverged", "diverged_at", "loss_zero",
    "test_loss", "train_acc", "test_acc", "gains", *ENGINE_COLUMNS, "key",
)
"""Columns :func:`run` adds to the trainer's history (constant within one run): the configuration,
the end-of-run metrics and the path that computed it (``engine_*``: :func:`resgd.core.engine.engine_path`)."""

MAX_STACK = 16
"""At most this many runs per stack (:func:`stack_groups`)."""

def stackable(config: RunConfig) -> bool:
    """Whether ``config`` trains grouped with others of its shape (speed only:
    :func:`resgd.core.trainer.worth_stacking`; small problems, most of the robustness map)."""
    return worth_stacking(config.model, config.dataset.n_train, config.dataset.n_tokens)


def stack_key(config: RunConfig) -> tuple:
    """Runs with equal stack keys can be trained in one stack: same data, dtype, shapes, choices
    and GD settings; they may differ in seed, β, the init scales and the step size. A
    configuration that is not :func:`stackable` gets a key of its own."""
    if not stackable(config):
        return ("single", config)
    return ("stack", config.dataset, config.dtype, config.test_metrics, shape_model(config.model), shape_gd(config.gd))


def _train(configs: list[RunConfig], data, *, metrics: bool = True) -> list[tuple[pd.DataFrame, dict | None, bool, dict | None]]:
    """(history, final weights or None, diverged, end-of-run metrics) of each run: one stack, or a
    run alone (:func:`resgd.core.trainer.train_runs`; a configuration that is not stackable comes alone).
    ``metrics=False``: no end-of-run metrics (None), for a caller that reads the histories alone."""
    dtype = DTYPES[configs[0].dtype]
    params = [init_params(c.model, c.seed, dtype=dtype) for c in configs]
    out = train_runs(params, [c.model for c in configs], data.X_train, data.Y_train, [c.gd for c in configs],
                     mask=data.mask_train)
    finals = [o.params for o in out]
    if not metrics:
        return [(o.history, o.params, o.diverged, None) for o in out]
    ends = (_stacked_metrics(configs, data, finals) if stackable(configs[0])
            else [_metrics(c, data, final) for c, final in zip(configs, finals)])
    return [(o.history, o.params, o.diverged, m) for o, m in zip(out, ends)]


def _stack_data(configs: list[RunConfig], caller: str):
    """The data of runs of one stack key, loaded once for all of them (runs of several keys: refused)."""
    if len({stack_key(c) for c in configs}) != 1:
        raise ConfigError(f"{caller}: the runs of one stack must share their stack key (see runs.stack_key)")
    return load_dataset(configs[0].dataset, configs[0].dtype)


def _history_stack(configs: tuple[RunConfig, ...]) -> list[pd.DataFrame]:
    """The histories alone (the trainer's columns) of runs of one stack key, trained as
    :func:`_compute_stack` trains them: the results store's first-iteration check compares only
    these, and a run of ten iterations costs less than its end-of-run metrics and its tidy table."""
    configs = list(configs)
    if not configs:
        return []
    data = _stack_data(configs, "_history_stack")
    return [history for history, *_ in _train(configs, data, metrics=False)]


def _compute_stack(configs: list[RunConfig]) -> list[pd.DataFrame]:
    """Train runs of one stack key together (no cache): each run's history plus configuration and
    end-of-run columns, in order.

    A run that diverges keeps its partial history and gets ``diverged=True`` and ``diverged_at``
    (the last iteration recorded); its end-of-run metrics are NaN.
    """
    configs = list(configs)
    if not configs:
        return []
    data = _stack_data(configs, "_compute_stack")
    return [_frame(config, data, history, diverged, metrics)
            for config, (history, _, diverged, metrics) in zip(configs, _train(configs, data))]


def _compute(config: RunConfig) -> pd.DataFrame:
    """One run (no cache): a stack of one, so the same numbers as inside any stack. Also the
    sweep's per-task function (no file access, so any backend can run it)."""
    return _compute_stack([config])[0]


def _frame(config: RunConfig, data, history: pd.DataFrame, diverged: bool, metrics: dict) -> pd.DataFrame:
    """The run's tidy table: its history plus the configuration and end-of-run columns."""
    cfg, gd = config.model, config.gd
    with torch.no_grad():
        loss_zero = float(loss_from_output(torch.zeros_like(data.Y_train), data.Y_train, data.mask_train, gd.reduction))
    test_loss, train_acc, test_acc = metrics["test_loss"], metrics["train_acc"], metrics["test_acc"]
    columns = {
        "experiment": "",
        "dataset": config.dataset.name,
        "is_standin": bool(data.is_standin),
        "source_label": data.source_label,
        "n_train": config.dataset.n_train,
        "n_tokens": config.dataset.n_tokens,
        "beta": float(cfg.beta),
        "beta_ffn": float(cfg.residual_ffn),
        "v_scale": float(cfg.v_scale),
        "ffn_scale": float(cfg.ffn_scale),
        "n_layers": cfg.n_layers,
        "d_qk": cfg.d_qk,
        "m": cfg.m,
        "seed": config.seed,
        "lr": float(gd.lr),
        "iterations": gd.iterations,
        "reduction": gd.reduction,
        "diverged": diverged,
        "diverged_at": float(history["iteration"].iloc[-1]) if diverged and len(history) else math.nan,
        "loss_zero": loss_zero,
        "test_loss": test_loss,
        "train_acc": train_acc,
        "test_acc": test_acc,
        "gains": ";".join(f"{a:g},{b:g}" for a, b in cfg.gains),
        **{f"engine_{k}": v for k, v in engine_path().items()},
    }
    # one constructor call (20 column insertions cost more than the end-of-run metrics)
    return pd.DataFrame({**{c: history[c] for c in history.columns}, **columns}, index=history.index)


def run(config: RunConfig, cache_dir: str | os.PathLike | None = None, *, refresh: bool = False) -> pd.DataFrame:
    """One run as a tidy table, from the cache when there (computed and cached otherwise)."""
    cache = ResultsCache(cache_dir)
    key = config_key(config)
    return cache.read_or_compute(key, lambda: _compute(config), refresh=refresh).assign(key=key)


def _cost(config: RunConfig) -> int:
    return config.model.n_layers * config.gd.iterations * config.dataset.n_train


def _run_stack(configs: tuple[RunConfig, ...]) -> list[pd.DataFrame]:
    """A grouped sweep task: the runs of one stack, computed together (no file access)."""
    return _compute_stack(list(configs))


def stack_groups(tasks: list[Task], n_jobs: int = 2, max_stack: int | None = None, fn=_run_stack) -> list[Group]:
    """The grouping policy of :func:`sweep` (and of the L̂ warm-up, ``fn``): the tasks (one run
    configuration each) as groups of runs with one :func:`stack_key`, each at most ``max_stack``
    (default :data:`MAX_STACK`) runs, split further while there are fewer groups than workers; the
    costliest groups first. ``fn(configs)`` computes a group: one result per configuration."""
    max_stack = MAX_STACK if max_stack is None else max_stack
    buckets: dict[tuple, list[Task]] = {}
    for task in tasks:
        buckets.setdefault(stack_key(task.arg), []).append(task)
    chunks: list[list[Task]] = []
    for members in buckets.values():
        parts = -(-len(members) // max_stack)
        chunks += [members[i::parts] for i in range(parts)]
    workers = max(1, n_jobs if n_jobs > 0 else (os.cpu_count() or 1))
    while len(chunks) < workers and max(len(c) for c in chunks) > 1:
        chunks.sort(key=len)
        big = chunks.pop()
        chunks += [big[0::2], big[1::2]]
    chunks.sort(key=lambda c: -sum(_cost(t.arg) for t in c))
    return [Group(tuple(t.key for t in c), fn, tuple(t.arg for t in c)) for c in chunks]


def sweep(configs: Iterable[RunConfig], n_jobs: int = 2, cache_dir: str | os.PathLike | None = None,
          **options) -> pd.DataFrame:
    """Every run of ``configs`` as one tidy table (in the order given; a repeated config appears once).

    Runs already in the cache are read, the others computed — so an interrupted sweep resumes
    where it stopped, and a second process on the same cache waits for the runs the first is
    computing instead of computing them again. With ``n_jobs > 1`` (or a ``scheduler``) the
    missing runs go to workers, each with one torch thread; this process writes each result to
    the cache atomically as soon as it arrives. The longest runs start first. ``options``:
    ``scheduler``, ``progress``, ``desc`` of :func:`sweep_frames`.
    """
    configs = list(configs)
    return runs_table(sweep_frames(configs, n_jobs, cache_dir, **options), configs)


def sweep_frames(
    configs: Iterable[RunConfig],
    n_jobs: int = 2,
    cache_dir: str | os.PathLike | None = None,
    *,
    scheduler: str | None = None,
    progress: bool = False,
    desc: str = "runs",
) -> dict[str, pd.DataFrame]:
    """Every run of ``configs`` by its key (:func:`config_key`), as :func:`sweep` computes them: one
    sweep for runs that several tables share (:func:`runs_table` cuts each table out)."""
    configs = list(configs)
    todo = {config_key(c): c for c in configs}
    tasks = [Task(k, _compute, todo[k]) for k in sorted(todo, key=lambda k: -_cost(todo[k]))]
    group = functools.partial(stack_groups, n_jobs=check_n_jobs(n_jobs))
    cache = ResultsCache(cache_dir)
    missing = sum(not cache.path(k).is_file() for k in todo)
    bar = tqdm(total=missing, desc=desc, disable=not progress or not missing, leave=False)
    try:
        return cached_sweep(tasks, cache, n_jobs=n_jobs, scheduler=scheduler, on_result=lambda key: bar.update(), group=group)
    finally:
        bar.close()


def runs_table(frames: dict[str, pd.DataFrame], configs: Iterable[RunConfig]) -> pd.DataFrame:
    """The tidy table of ``configs`` (in order; a repeated config once) from :func:`sweep_frames`' result."""
    keys = list(dict.fromkeys(config_key(c) for c in configs))
    if not keys:
        return pd.DataFrame()
    return pd.concat([frames[k].assign(key=k) for k in keys], ignore_index=True)
