"""The gradient by autograd on the readable model (:func:`resgd.core.model.forward`): the reference
the trainer's hand-derived pass (:mod:`resgd.core.hand_pass`) is tested against, and the one-off
gradients of the studies.
"""

from __future__ import annotations

import torch

from .loss import REDUCTIONS, loss_from_output
from .model import ModelConfig, Params, Trace, forward
from ..validation import check_choice


def autograd_loss_and_grad(
    params: Params,
    cfg: ModelConfig,
    X: torch.Tensor,
    Y: torch.Tensor,
    mask: torch.Tensor | None = None,
    reduction: str = "sum",
) -> tuple[torch.Tensor, Params, Trace]:
    """Φ(θ), ∇Φ(θ) and the forward trace by autograd: a 0-d loss, one gradient per weight in
    ``params``' order, a detached trace."""
    check_choice("reduction", reduction, REDUCTIONS)
    leaves = {name: p.detach().requires_grad_(True) for name, p in params.items()}
    trace = forward(leaves, cfg, X, mask, return_trace=True)
    loss = loss_from_output(trace.Y_hat, Y, mask, reduction)
    grads = torch.autograd.grad(loss, list(leaves.values()))
    layers = [type(lt)(**{key: value.detach() for key, value in vars(lt).items()}) for lt in trace.layers]
    return loss.detach(), dict(zip(leaves, grads)), Trace(layers=layers, Y_hat=trace.Y_hat.detach())
