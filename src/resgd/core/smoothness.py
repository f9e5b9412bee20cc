"""The local smoothness L̂ of the loss at θ, the denominator of the theorem's step size μ = c / L̂.

``L̂ = max(‖∇²Φ(θ)‖₂, λ_max(J Jᵀ))`` (companion's rule, ``book/theorem1_proof.md``): the
Hessian's spectral norm by power iteration on Hessian-vector products, and the largest eigenvalue
of the tangent kernel (the Gauss-Newton part, which dominates near a fit). Both are for the loss
with the given ``reduction`` (``"mean"`` divides the ``"sum"`` loss, and so L̂, by N). Used by the
theory chapters (:mod:`resgd.theorem1.quantities`) and the experiments' ``theory`` protocol.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .model import ModelConfig, Params, forward
from .train import loss_from_output
from ..validation import check_choice

REDUCTIONS = ("sum", "mean")


def jacobian(params: Params, cfg: ModelConfig, X: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``J = ∂ vec Ŷ / ∂θ`` (outputs × all weights, in :func:`weight_shapes` order)."""
    names = list(params)

    def outputs(*weights):
        return forward(dict(zip(names, weights)), cfg, X, mask).reshape(-1)

    blocks = torch.autograd.functional.jacobian(outputs, tuple(params[k].detach() for k in names))
    return torch.cat([b.reshape(b.shape[0], -1) for b in blocks], dim=1)


def ntk_eigenvalues(params: Params, cfg: ModelConfig, X: torch.Tensor, mask: torch.Tensor | None = None) -> np.ndarray:
    """Eigenvalues (ascending) of the tangent kernel ``K = J Jᵀ``; ``∇Φ = Jᵀr`` so ``‖∇Φ‖² = rᵀKr``."""
    J = jacobian(params, cfg, X, mask)
    return torch.linalg.eigvalsh(J @ J.T).clamp_min(0).numpy()


def hessian_norm(
    params: Params, cfg: ModelConfig, X: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None = None,
    *, iterations: int = 50, seed: int = 0, reduction: str = "sum",
) -> float:
    """``‖∇²Φ(θ)‖₂`` (largest |eigenvalue|) by power iteration on Hessian-vector products."""
    check_choice("reduction", reduction, REDUCTIONS)
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    loss = loss_from_output(forward(leaves, cfg, X, mask), Y, mask, reduction)
    grads = torch.autograd.grad(loss, list(leaves.values()), create_graph=True)
    g = torch.Generator().manual_seed(seed)
    v = [torch.randn(x.shape, generator=g, dtype=x.dtype) for x in grads]
    value = 0.0
    for _ in range(iterations):
        norm = math.sqrt(sum(float(a.pow(2).sum()) for a in v))
        if norm == 0:
            return 0.0
        v = [a / norm for a in v]
        hv = torch.autograd.grad(grads, list(leaves.values()), grad_outputs=v, retain_graph=True)
        value = math.sqrt(sum(float(a.pow(2).sum()) for a in hv))
        v = [a.detach() for a in hv]
    return value


def smoothness_estimate(
    params: Params, cfg: ModelConfig, X: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None = None,
    *, reduction: str = "sum",
) -> float:
    """``L̂ = max(‖∇²Φ(θ)‖₂, λ_max(JJᵀ))``: the local smoothness at θ, the step-size rule's denominator
    (``reduction="mean"``: both terms of the loss divided by N = ``X.shape[0]``)."""
    check_choice("reduction", reduction, REDUCTIONS)
    lam = float(ntk_eigenvalues(params, cfg, X, mask)[-1])
    if reduction == "mean":
        lam /= X.shape[0]
    return max(hessian_norm(params, cfg, X, Y, mask, reduction=reduction), lam)




def _norm(vs: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float(a.pow(2).sum()) for a in vs))


def smoothness_fast(
    params: Params, cfg: ModelConfig, X: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None = None,
    *, reduction: str = "sum", iterations: int = 20, seed: int = 0, rel_eps: float = 1e-5,
) -> float:
    """:func:`smoothness_estimate` without autograd, for the experiments' sizes (where the exact
    Jacobian and autograd's Hessian-vector products cost more than a whole training run).

    Both terms by power iteration (``iterations`` steps each) on products built from the
    trainer's hand-derived gradient (:func:`resgd.core.stacked.loss_and_grads`): ``Hv`` by a central
    difference of gradients (the two evaluated as one stack of two), ``JᵀJv`` as the gradient of ``½‖Ŷ − (Ŷ⁰ − Jv)‖²`` with ``Jv`` a central
    difference of outputs; step ``rel_eps · ‖θ‖``. Agrees with the exact estimate to a few per
    cent when the top eigenvalues are separated (``tests/test_smoothness.py``).
    """
    from .stacked import loss_and_grads

    check_choice("reduction", reduction, REDUCTIONS)
    names = list(params)
    theta = [params[k].detach() for k in names]
    eps = rel_eps * max(_norm(theta), 1e-12)

    def shifted(v: list[torch.Tensor], sign: float) -> Params:
        return {k: t + sign * eps * a for k, t, a in zip(names, theta, v)}

    def grads(ps: list[Params], target: torch.Tensor, red: str) -> list[list[torch.Tensor]]:
        return [[g[k] for k in names] for g in loss_and_grads(ps, [cfg] * len(ps), X, target, mask, red)[1]]

    def output(p: Params) -> torch.Tensor:
        with torch.no_grad():
            return forward(p, cfg, X, mask)

    def hess(v):
        plus, minus = grads([shifted(v, 1.0), shifted(v, -1.0)], Y, reduction)
        return [(a - b) / (2 * eps) for a, b in zip(plus, minus)]

    Y0 = output(params)
    scale = 1.0 / X.shape[0] if reduction == "mean" else 1.0

    def gauss_newton(v):
        Jv = (output(shifted(v, 1.0)) - output(shifted(v, -1.0))) / (2 * eps)
        return [scale * a for a in grads([params], Y0 - Jv, "sum")[0]]

    g = torch.Generator().manual_seed(seed)
    start = [torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype) for t in theta]
    values = []
    for product in (hess, gauss_newton):
        v, value = start, 0.0
        for _ in range(iterations):
            norm = _norm(v)
            if norm == 0:
                break
            v = [a / norm for a in v]
            v = product(v)
            value = _norm(v)
        values.append(value)
    return max(values)
