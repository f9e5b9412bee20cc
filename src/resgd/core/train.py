"""Plain full-batch gradient descent on every weight: its settings, its loss, its per-iteration
record and the autograd reference gradient (the trainer itself is :mod:`resgd.core.stacked`).

The loss is the paper's squared Frobenius error ``Φ(θ) = ½ Σ_p ‖Ŷ_p − Y_p‖_F²`` (``reduction="sum"``;
``"mean"`` divides by N, a companion option). The update is ``θ ← θ − μ ∇Φ(θ)`` on all of
W_Q, W_K, W_V, W_1, W_2 (every layer) and W_U: no momentum, no adaptive steps, no mini-batches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
import torch

from .model import ModelConfig, Params, Trace, forward
from ..validation import ConfigError, check_choice

REDUCTIONS = ("sum", "mean")
HISTORY_COLUMNS = ("iteration", "loss", "grad_norm", "ratio", "sigma_min_Z", "sigma_max_Z")


@dataclass(frozen=True)
class GDConfig:
    """Step size ``lr`` (the paper's μ), number of iterations, and what to record.

    ``record_every``: the spectrum of the stacked first-layer ``Z`` is recorded at t = 0, every
    ``record_every`` iterations and at the end. ``divergence_factor``: training stops with
    :class:`resgd.core.stacked.DivergenceError` when Φ exceeds this multiple of Φ(θ⁽⁰⁾) (companion's choice).
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


def output_shape(cfg: ModelConfig, X: torch.Tensor) -> tuple[int, ...]:
    N, n, _ = X.shape
    return (N, cfg.k) if cfg.pooling == "mean" else (N, n, cfg.k)


def loss_from_output(
    Y_hat: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None, reduction: str
) -> torch.Tensor:
    """½ Σ ‖Ŷ − Y‖² over real entries (padded tokens of per-token outputs do not count)."""
    residual = Y_hat - Y
    if mask is not None and residual.ndim == 3:
        residual = residual * mask[..., None].to(residual.dtype)
    loss = 0.5 * residual.pow(2).sum()
    return loss / Y.shape[0] if reduction == "mean" else loss


def loss_and_grad(
    params: Params,
    cfg: ModelConfig,
    X: torch.Tensor,
    Y: torch.Tensor,
    mask: torch.Tensor | None = None,
    reduction: str = "sum",
) -> tuple[torch.Tensor, Params, Trace]:
    """Φ(θ), ∇Φ(θ) and the forward trace by autograd on :func:`resgd.core.model.forward`: the
    readable reference the trainer's hand-derived pass is tested against, and the one-off
    gradients of the studies (a 0-d loss, one gradient per weight in ``params``' order, a detached trace)."""
    check_choice("reduction", reduction, REDUCTIONS)
    leaves = {name: p.detach().requires_grad_(True) for name, p in params.items()}
    trace = forward(leaves, cfg, X, mask, return_trace=True)
    loss = loss_from_output(trace.Y_hat, Y, mask, reduction)
    grads = torch.autograd.grad(loss, list(leaves.values()))
    layers = [type(lt)(**{key: value.detach() for key, value in vars(lt).items()}) for lt in trace.layers]
    return loss.detach(), dict(zip(leaves, grads)), Trace(layers=layers, Y_hat=trace.Y_hat.detach())
