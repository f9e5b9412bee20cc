"""The one GD trainer: plain full-batch gradient descent, its settings and its per-iteration record.

The loss is Φ of :mod:`resgd.core.loss`; the update is ``θ ← θ − μ ∇Φ(θ)`` on all of W_Q, W_K, W_V,
W_1, W_2 (every layer) and W_U: no momentum, no adaptive steps, no mini-batches.

Every run of the book goes through :func:`train_stacked`: R ≥ 1 runs of one shape, stacked along a
leading run axis (a single run is a stack of one; :func:`train_gd` is that stack's face). Runs of
one shape that differ only in the seed of the initial weights, β, β_ffn and the step size μ train
together: each operation then serves all R runs, and the map's tiny models are dominated by
per-operation overhead, which a stack shares. Each step is :func:`resgd.core.hand_pass.forward_backward`:
the forward pass with a run axis in front and the hand-derived backward pass (no autograd graph),
which gives every run its own gradient.

Per iteration a run records its loss, ‖∇Φ‖ and, every ``record_every`` iterations and at the end,
σ_min/σ_max of its stacked first-layer Z; the divergence rule is the loss not finite or above
``divergence_factor`` × the run's loss at t = 0: that run's history ends there and it leaves the
stack; the others go on untouched.

Equality (tested):

* a run's history does not depend on which other runs share its stack, bit for bit: every
  operation acts on each run's slice with the same kernel whatever R is (the one exception torch
  makes, gemv for a one-column product of a stack of one, the hand pass avoids), so how runs are
  grouped is a speed decision only (``tests/test_stack_identity.py``);
* against :func:`resgd.core.autograd_reference.autograd_loss_and_grad` it agrees to rounding (the
  two sum in other orders; tolerances and why in ``tests/engine_cases.py``).

Where grouping pays (``benchmarks/bench_stacked.py``): few tokens and few weights per run
(:func:`worth_stacking`); at the headline experiments' sizes runs go one at a time.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Callable, Collection, Literal, Sequence

import numpy as np
import pandas as pd
import torch

from .hand_pass import Buffers, Layout, Stack, buffer_store, forward_backward, sigma_extremes
from .loss import REDUCTIONS, output_shape
from .model import ModelConfig, Params, weight_shapes
from ..validation import ConfigError, check_choice, check_inputs

HISTORY_COLUMNS = ("iteration", "loss", "grad_norm", "ratio", "sigma_min_Z", "sigma_max_Z")
"""A run's history's columns (:func:`history_frame`)."""


@dataclass(frozen=True)
class GDConfig:
    """Step size ``lr`` (the paper's μ), number of iterations, and what to record.

    ``record_every``: the spectrum of the stacked first-layer ``Z`` is recorded at t = 0, every
    ``record_every`` iterations and at the end. ``divergence_factor``: training stops with
    :class:`DivergenceError` when Φ exceeds this multiple of Φ(θ⁽⁰⁾) (companion's choice).
    """

    lr: float
    iterations: int
    reduction: Literal["sum", "mean"] = "sum"
    record_every: int = 10
    divergence_factor: float = 1e6

    def __post_init__(self) -> None:
        if not isinstance(self.lr, (int, float)) or not math.isfinite(self.lr) or self.lr <= 0:
            raise ConfigError(f"GDConfig.lr: expected a finite step size > 0, got {self.lr!r}")
        if not isinstance(self.iterations, int) or self.iterations < 0:
            raise ConfigError(f"GDConfig.iterations: expected an integer >= 0, got {self.iterations!r}")
        if not isinstance(self.record_every, int) or self.record_every < 1:
            raise ConfigError(f"GDConfig.record_every: expected an integer >= 1, got {self.record_every!r}")
        if not self.divergence_factor > 1:
            raise ConfigError(f"GDConfig.divergence_factor: expected a number > 1, got {self.divergence_factor!r}")
        check_choice("GDConfig.reduction", self.reduction, REDUCTIONS)


ROW_FIELDS = ("iteration", "loss", "grad_norm", "sigma_min_Z", "sigma_max_Z")
"""What a trainer records per iteration (:func:`history_frame` adds ``ratio``)."""


def history_frame(rows: list[dict] | list[tuple] | np.ndarray) -> pd.DataFrame:
    """A run's per-iteration rows (dicts with the keys :data:`ROW_FIELDS`, tuples in that order,
    or an array with those columns) as its history (columns :data:`HISTORY_COLUMNS`; ``ratio`` =
    Φ(t+1)/Φ(t), NaN at the last row). Built from numpy columns rather than a list of dicts: a
    stack of 16 runs builds 16 frames per call."""
    if not isinstance(rows, np.ndarray):
        rows = [tuple(r[f] for f in ROW_FIELDS) if isinstance(r, dict) else r for r in rows]
    table = np.asarray(rows, dtype=np.float64).reshape(-1, len(ROW_FIELDS))
    loss = table[:, 1]
    return pd.DataFrame({"iteration": table[:, 0].astype(np.int64), "loss": loss, "grad_norm": table[:, 2],
                         "ratio": loss_ratios(loss), "sigma_min_Z": table[:, 3], "sigma_max_Z": table[:, 4]},
                        columns=list(HISTORY_COLUMNS))


def loss_ratios(loss: np.ndarray) -> np.ndarray:
    """Φ(t+1)/Φ(t) for each t, NaN at the last: a history's ``ratio`` column (the results store keeps
    the loss and recomputes this from it, :mod:`resgd.pipeline.frame_codec`)."""
    loss = np.asarray(loss, dtype=np.float64)
    ratio = np.full(len(loss), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio[:-1] = loss[1:] / loss[:-1]
    return ratio


STACK_MAX_TOKENS = 512
"""Stack only runs with at most this many training tokens N·n (:func:`worth_stacking`)."""
STACK_MAX_WEIGHTS = 50_000
"""... and at most this many weights per run (:func:`worth_stacking`)."""


def worth_stacking(cfg: ModelConfig, n_train: int, n_tokens: int) -> bool:
    """Whether runs of this shape train faster in one stack than each in a stack of its own.

    Stacking pays where per-operation overhead dominates: few tokens and few weights per run, so
    that a stack's weights and gradients stay in cache (``benchmarks/bench_stacked.py`` measures
    both ways); at the headline experiments' sizes one run fills the kernels. Speed only: a run's
    numbers do not depend on its stack."""
    weights = sum(a * b for a, b in weight_shapes(cfg).values())
    return n_train * n_tokens <= STACK_MAX_TOKENS and weights <= STACK_MAX_WEIGHTS


@functools.lru_cache(maxsize=1024)
def shape_model(cfg: ModelConfig) -> ModelConfig:
    """What runs of one stack must share: the model without β, β_ffn, the init scales and gains (the
    per-run parts; an explicit β_ffn equal to β is the same model as β_ffn = None). Cached: a
    stack's check calls it once per run and call, and each call would build a fresh validated copy."""
    return cfg.replace(beta=1.0, beta_ffn=None, qk_scale=1.0, v_scale=1.0, ffn_scale=1.0, out_scale=1.0, gains=())


def shape_gd(gd: GDConfig) -> GDConfig:
    """What runs of one stack must share of their GD settings: all but the step size."""
    return replace(gd, lr=1.0)


class DivergenceError(RuntimeError):
    """GD left the region where it makes progress; ``history`` holds the iterations done so far."""

    def __init__(self, message: str, history: pd.DataFrame):
        super().__init__(message)
        self.history = history


@dataclass
class TrainResult:
    params: Params
    history: pd.DataFrame  # one row per iteration t = 0..T, columns HISTORY_COLUMNS


@dataclass
class StackedRun:
    """One run's outcome: its history (columns :data:`HISTORY_COLUMNS`), its final
    weights (``None`` when it diverged) and whether it diverged."""

    history: pd.DataFrame
    params: Params | None
    diverged: bool


Checkpoint = Callable[[int, int, Params], None]
"""``on_checkpoint(run index, iteration t, θ⁽ᵗ⁾)``: what :func:`train_stacked` calls at its checkpoints."""


def train_stacked(
    params: Sequence[Params],
    models: Sequence[ModelConfig],
    X: torch.Tensor,
    Y: torch.Tensor,
    gds: Sequence[GDConfig],
    mask: torch.Tensor | None = None,
    *,
    checkpoints: Collection[int] = (),
    on_checkpoint: Checkpoint | None = None,
) -> list[StackedRun]:
    """Train run r from ``params[r]`` with ``models[r]`` and ``gds[r]``, all on the same data, together.

    The runs must share :func:`shape_model` and :func:`shape_gd` (ConfigError otherwise); they may
    differ in β, β_ffn, the init scales and the step size. Returns one :class:`StackedRun` per run,
    in order. ``params`` are not modified. At every iteration t in ``checkpoints``,
    ``on_checkpoint(r, t, θ_r⁽ᵗ⁾)`` is called for each run r still training there (not for one that
    diverges at t): Theorem 1's studies measure the path at these points without restarting GD.
    """
    R = len(params)
    if R == 0:
        return []
    if not len(models) == len(gds) == R:
        raise ConfigError(f"train_stacked: expected one model and one GDConfig per run, got {len(models)} "
                          f"models and {len(gds)} GDConfigs for {R} runs")
    cfg, gd = models[0], gds[0]
    for r in range(1, R):
        if shape_model(models[r]) != shape_model(cfg) or shape_gd(gds[r]) != shape_gd(gd):
            raise ConfigError(f"train_stacked: run {r} differs from run 0 in more than β, the init scales and "
                              f"the step size ({models[r]} / {gds[r]} vs {cfg} / {gd})")
    if checkpoints and on_checkpoint is None:
        raise ConfigError("train_stacked: checkpoints given without on_checkpoint")
    check_inputs(X, mask=mask, d=cfg.d, Y=Y, Y_shape=output_shape(cfg, X))
    checkpoints = frozenset(checkpoints)
    layout = Layout(cfg)
    dtype = X.dtype
    theta = layout.flatten(params, dtype)  # (R, P): run r's weights, flat
    lr = torch.tensor([g.lr for g in gds], dtype=dtype)
    stack = Stack.of(models, X.expand(R, *X.shape).contiguous(),  # the first layer's input of every run, copied once
                     mask, Y=Y, reduction=gd.reduction, n_weights=layout.n_weights)
    alive = np.arange(R)  # original index of each row still in the stack
    table = np.full((R, gd.iterations + 1, len(ROW_FIELDS)), math.nan)  # run r's row t: ROW_FIELDS
    outcome: list[StackedRun | None] = [None] * R
    loss0 = None
    buf = Buffers(dtype, buffer_store((shape_model(cfg), tuple(X.shape), R, dtype)))
    weights = layout.views(theta)  # θ is updated in place: its views stay valid until runs leave the stack

    for t in range(gd.iterations + 1):
        record = t % gd.record_every == 0 or t == gd.iterations
        loss, grad, grad_norm, Z0 = forward_backward(weights, stack, record=record, buf=buf)
        values = loss.to(torch.float64).numpy()
        smax = smin = None
        if record:
            smax, smin = sigma_extremes(Z0, mask)
        if loss0 is None:
            loss0 = values.copy()
        stop = ~np.isfinite(values) | (values > gd.divergence_factor * loss0)
        table[alive, t, 0], table[alive, t, 1], table[alive, t, 2] = t, values, grad_norm.numpy()
        if record:
            table[alive, t, 3], table[alive, t, 4] = smin, smax
        for r in alive[stop]:
            outcome[r] = StackedRun(history_frame(table[r, :t + 1]), None, True)
        if t in checkpoints:
            for i in np.flatnonzero(~stop):
                on_checkpoint(int(alive[i]), t, layout.unflatten(theta[i]))
        if t == gd.iterations:
            break
        if stop.any():  # diverged runs leave the stack; the others are untouched
            keep = torch.from_numpy(np.flatnonzero(~stop))
            alive, loss0 = alive[~stop], loss0[~stop]
            theta, grad, lr = theta[keep], grad[keep], lr[keep]
            if len(alive) == 0:
                break
            weights, stack = layout.views(theta), stack.select(keep)
        theta.addcmul_(grad, lr.view(-1, 1), value=-1.0)  # θ_r ← θ_r − μ_r ∇Φ_r (in place: no fresh pages)
    for i, r in enumerate(alive):
        if outcome[r] is None:
            outcome[r] = StackedRun(history_frame(table[r, :t + 1]), layout.unflatten(theta[i]), False)  # t: the last step
    return outcome


def train_runs(params: Sequence[Params], models: Sequence[ModelConfig], X: torch.Tensor, Y: torch.Tensor,
               gds: Sequence[GDConfig], mask: torch.Tensor | None = None, *, stacked: bool | None = None) -> list[StackedRun]:
    """Runs of one shape, in one stack or each in a stack of its own: the same numbers either way
    (a run does not depend on its stack), so ``stacked`` only sets the speed; ``None``: :func:`worth_stacking`."""
    if stacked is None:
        stacked = worth_stacking(models[0], X.shape[0], X.shape[1])
    if stacked:
        return train_stacked(params, models, X, Y, gds, mask)
    return [train_stacked([p], [cfg], X, Y, [gd], mask)[0] for p, cfg, gd in zip(params, models, gds)]


def train_gd(
    params: Params,
    cfg: ModelConfig,
    X: torch.Tensor,
    Y: torch.Tensor,
    gd: GDConfig,
    mask: torch.Tensor | None = None,
) -> TrainResult:
    """Run ``gd.iterations`` full-batch GD steps from ``params`` (not modified) and record each one.

    One run is a stack of one of the one trainer, :func:`train_stacked`; this
    face raises :class:`DivergenceError` (with the history so far) where that run diverges."""
    run = train_stacked([params], [cfg], X, Y, [gd], mask)[0]
    if run.diverged:
        t, value = int(run.history["iteration"].iloc[-1]), float(run.history["loss"].iloc[-1])
        raise DivergenceError(
            f"GD diverged at iteration {t}: loss {value:.3g} (initial {run.history['loss'].iloc[0]:.3g}) with "
            f"lr={gd.lr}; try a smaller step size, e.g. lr={gd.lr / 10:g}", run.history)
    return TrainResult(params=run.params, history=run.history)
