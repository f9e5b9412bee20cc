"""The local smoothness L̂ of the loss at θ, the denominator of the theorem's step size μ = c / L̂.

``L̂ = max(‖∇²Φ(θ)‖₂, λ_max(J Jᵀ))`` (companion's rule, ``book/theorem1_proof.md``): the
Hessian's spectral norm by power iteration on Hessian-vector products, and the largest eigenvalue
of the tangent kernel (the Gauss-Newton part, which dominates near a fit). Both are for the loss
with the given ``reduction`` (``"mean"`` divides the ``"sum"`` loss, and so L̂, by N). Used by the
theory chapters (:mod:`resgd.theorem1.quantities`) and the experiments' ``theory`` protocol.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from .model import ModelConfig, Params, forward
from .loss import REDUCTIONS, loss_from_output
from ..validation import check_choice


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


FAST_ITERATIONS = 20
"""Power-iteration steps per term of :func:`smoothness_fast_stacked`: the book's L̂ (the quick smoke
build takes fewer, ``Settings.lhat_iterations``)."""


def smoothness_fast(
    params: Params, cfg: ModelConfig, X: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None = None,
    *, reduction: str = "sum", iterations: int = FAST_ITERATIONS, seed: int = 0, rel_eps: float = 1e-5,
) -> float:
    """:func:`smoothness_estimate` without autograd, for the experiments' sizes (where the exact
    Jacobian and autograd's Hessian-vector products cost more than a whole training run): the
    stack of one of :func:`smoothness_fast_stacked`."""
    return smoothness_fast_stacked([params], [cfg], X, Y, mask, reduction=reduction, iterations=iterations,
                                   seed=seed, rel_eps=rel_eps)[0]


def smoothness_fast_stacked(
    params: Sequence[Params], models: Sequence[ModelConfig], X: torch.Tensor, Y: torch.Tensor,
    mask: torch.Tensor | None = None, *, reduction: str = "sum", iterations: int = FAST_ITERATIONS, seed: int = 0,
    rel_eps: float = 1e-5,
) -> list[float]:
    """L̂ of R runs of one shape (:func:`resgd.core.trainer.shape_model`) on the same data, each
    bit for bit its value alone: the runs' gradient evaluations share one stacked call (the
    robustness map's tiny models are dominated by per-call overhead, which a stack shares).

    Per run, both terms by power iteration (``iterations`` steps each) on products built from the
    trainer's hand-derived gradient (:func:`resgd.core.hand_pass.hand_loss_and_grads`): ``Hv`` by a central
    difference of gradients (each run's two evaluated side by side in the stack), ``JᵀJv`` as the
    gradient of ``½‖Ŷ − (Ŷ⁰ − Jv)‖²`` with ``Jv`` a central difference of outputs; step
    ``rel_eps · ‖θ‖``. Agrees with the exact estimate to a few per cent when the top eigenvalues
    are separated (``tests/test_steps.py``).
    """
    from .hand_pass import hand_loss_and_grads

    check_choice("reduction", reduction, REDUCTIONS)
    R = len(params)
    names = list(params[0])
    thetas = [[p[k].detach() for k in names] for p in params]
    eps = [rel_eps * max(_norm(theta), 1e-12) for theta in thetas]

    def shifted(r: int, v: list[torch.Tensor], sign: float) -> Params:
        return {k: t + sign * eps[r] * a for k, t, a in zip(names, thetas[r], v)}

    def grads(runs: list[int], ps: list[Params], targets: list[torch.Tensor], red: str) -> list[list[torch.Tensor]]:
        """Each of ``ps``' gradient, ``ps[i]`` run ``runs[i]``'s model against ``targets[i]``."""
        out = hand_loss_and_grads(ps, [models[r] for r in runs], X, torch.stack(targets), mask, red, per_run_targets=True)[1]
        return [[g[k] for k in names] for g in out]

    def output(r: int, p: Params) -> torch.Tensor:
        with torch.no_grad():
            return forward(p, models[r], X, mask)

    def hess(runs: list[int], vs: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
        ps = [shifted(r, v, sign) for r, v in zip(runs, vs) for sign in (1.0, -1.0)]
        g = grads([r for r in runs for _ in (0, 1)], ps, [Y] * len(ps), reduction)
        return [[(a - b) / (2 * eps[r]) for a, b in zip(g[2 * i], g[2 * i + 1])] for i, r in enumerate(runs)]

    Y0 = [output(r, params[r]) for r in range(R)]
    scale = 1.0 / X.shape[0] if reduction == "mean" else 1.0

    def gauss_newton(runs: list[int], vs: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
        targets = []
        for r, v in zip(runs, vs):
            Jv = (output(r, shifted(r, v, 1.0)) - output(r, shifted(r, v, -1.0))) / (2 * eps[r])
            targets.append(Y0[r] - Jv)
        g = grads(list(runs), [params[r] for r in runs], targets, "sum")
        return [[scale * a for a in run_grads] for run_grads in g]

    values = [[0.0, 0.0] for _ in range(R)]
    for term, product in enumerate((hess, gauss_newton)):
        starts = []
        for theta in thetas:  # every run starts from the same draw, as alone
            g = torch.Generator().manual_seed(seed)
            starts.append([torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype) for t in theta])
        vs, active = starts, list(range(R))
        for _ in range(iterations):
            norms = {r: _norm(vs[r]) for r in active}
            active = [r for r in active if norms[r] != 0]  # a zero vector: that run's value stays
            if not active:
                break
            new = product(active, [[a / norms[r] for a in vs[r]] for r in active])
            for r, v in zip(active, new):
                vs[r] = v
                values[r][term] = _norm(v)
    return [max(pair) for pair in values]
