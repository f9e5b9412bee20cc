"""The loss, once: the paper's squared Frobenius error ``Φ(θ) = ½ Σ_p ‖Ŷ_p − Y_p‖_F²`` over the real
entries (``reduction="sum"``; ``"mean"`` divides by N, a companion option).

Of one run (a 0-d tensor: the autograd reference, L̂, the metrics of a run alone) or of every run
of a stack (shape (R,), ``per_run=True``: the trainer and the metrics of a stack). The two sum the
same squares in two orders (all of them at once; each run's row), and stored numbers were computed
each way, so both stay; the residual and its mask are written once, here.
"""

from __future__ import annotations

import torch

from .model import ModelConfig

REDUCTIONS = ("sum", "mean")


def output_shape(cfg: ModelConfig, X: torch.Tensor) -> tuple[int, ...]:
    """The shape of one run's ``Ŷ`` (and of its targets ``Y``) on inputs ``X`` (N, n, d)."""
    N, n, _ = X.shape
    return (N, cfg.k) if cfg.pooling == "mean" else (N, n, cfg.k)


def output_residual(Y_hat: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None, *,
                    per_run: bool = False) -> torch.Tensor:
    """``Ŷ − Y``, zero at the padded tokens of per-token outputs. ``per_run``: ``Ŷ`` has a leading
    run axis; ``Y`` has one too (one target per run) or is shared by every run."""
    residual = Y_hat - Y
    if mask is not None and residual.ndim == 3 + per_run:
        residual = residual * mask[..., None].to(residual.dtype)
    return residual


def loss_from_residual(residual: torch.Tensor, reduction: str, per_run: bool) -> torch.Tensor:
    """Φ = ½ Σ residual² (per run: over each run's row, (R,)), ÷ N for ``"mean"``."""
    if per_run:
        loss = 0.5 * residual.pow(2).flatten(1).sum(dim=1)
        return loss / residual.shape[1] if reduction == "mean" else loss
    loss = 0.5 * residual.pow(2).sum()
    return loss / residual.shape[0] if reduction == "mean" else loss


def loss_from_output(Y_hat: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None, reduction: str, *,
                     per_run: bool = False) -> torch.Tensor:
    """Φ of one run (0-d), or of every run of a stack, (R,), when ``per_run`` (``Ŷ`` (R, N, …))."""
    return loss_from_residual(output_residual(Y_hat, Y, mask, per_run=per_run), reduction, per_run)


def per_run_loss_and_output_grad(Y_hat: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None,
                                 reduction: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Every run's Φ (R,) and ∂Φ_r/∂Ŷ_r = Ŷ_r − Y (÷ N for ``"mean"``; the shape of Ŷ): the start of
    the hand-derived backward pass."""
    residual = output_residual(Y_hat, Y, mask, per_run=True)
    loss = loss_from_residual(residual, reduction, True)
    return loss, (residual / Y_hat.shape[1] if reduction == "mean" else residual)
