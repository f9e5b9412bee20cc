"""Theorem 1′'s hypotheses checked along the GD path, not only at θ⁽⁰⁾.

The proof (``book/theorem1_proof.md``) needs (A3)–(A6) on a ball B(θ⁰, ρ) and shows the iterates
never leave it. Its sketch leaves J̄ and ρ free; the **companion's formulation** fixes them so that
they can be computed (the constants are ours, not the paper's):

* ``J̄ = jac_slack · ‖J(θ⁰)‖₂`` (``jac_slack = 2``: the Jacobian may double on the ball);
* ``L = 1/μ`` (so (A6) holds with equality), i.e. the smoothness on the ball must stay below
  ``L̂(θ⁰)/c`` for the step ``μ = c/L̂(θ⁰)``;
* ``ρ = 2 J̄ √(2Φ(θ⁰)) / α``: the smallest radius (A5) allows, the bound of the induction on the
  distance travelled.

At every checkpoint t of a run we test (A3) ``σ_M(H_t) ≥ ½ β_f σ_M(Z⁰)``, (A4) ``‖J(θ_t)‖₂ ≤ J̄``
and ``L̂(θ_t) ≤ 1/μ`` (L̂ as at θ⁰: the larger of the Hessian norm by power iteration and
λ_max(JJᵀ)), and (A5)'s consequence ``‖θ_t − θ⁰‖ ≤ ρ``; between checkpoints the path length
``Σ μ‖∇Φ_s‖`` (every step, from the trainer's gradient norms) bounds the distance. A run is "in
the theorem's regime" only if every check holds at every checkpoint and (A2) holds at θ⁰. These
are necessary conditions for the ball hypotheses (they are tested on the path, not on all of B).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from ..core.conditioning import stack
from ..core.model import ModelConfig, Params, forward
from ..core.smoothness import hessian_norm, ntk_eigenvalues
from .quantities import row_sigma_min

PATH_COLUMNS = ["rho", "J_bar", "inv_mu", "max_distance", "max_path_length", "A3_min_margin", "A4_max_jacobian_ratio",
                "A4_max_smoothness_ratio", "A2", "A3_path", "A4_path", "A5_path", "A6", "in_regime",
                "n_checkpoints"]
"""The per-run columns :func:`path_summary` adds to a sweep row (ratios: > 1 means the check failed)."""


def flat_distance(params: Params, params0: Params) -> float:
    """‖θ − θ⁰‖ over all weights (Frobenius, the norm of the proof's ball)."""
    return math.sqrt(sum(float((params[k] - params0[k]).pow(2).sum()) for k in params0))


def checkpoint(params: Params, params0: Params, cfg: ModelConfig, X: torch.Tensor, Y: torch.Tensor, *,
               hess_iterations: int = 10) -> dict:
    """The path quantities at one iterate: distance to θ⁰, σ_M(H_t), ‖J(θ_t)‖₂ and L̂(θ_t)."""
    with torch.no_grad():
        H = forward(params, cfg, X, return_trace=True).layers[0].H
    lam_max = float(ntk_eigenvalues(params, cfg, X)[-1])
    hess = hessian_norm(params, cfg, X, Y, iterations=hess_iterations) if hess_iterations > 0 else 0.0
    return {"distance": flat_distance(params, params0), "sigma_M_H": row_sigma_min(stack(H)),
            "jacobian_norm": math.sqrt(max(lam_max, 0.0)), "smoothness": max(hess, lam_max)}


def path_summary(points: list[dict], history: pd.DataFrame, *, mu: float, alpha: float, beta_ffn: float,
                 sigma_M_Z0: float, realizable: bool, jac_slack: float = 2.0, diverged: bool = False) -> dict:
    """The verdicts of one run from its checkpoints (``points[0]`` at θ⁰) and its per-step history.

    ``realizable``: N·n ≤ d (the first half of (A2)). A diverged run is never in the regime.
    """
    first = points[0]
    J_bar = jac_slack * first["jacobian_norm"]
    phi0 = float(history["loss"].iloc[0])
    rho = 2.0 * J_bar * math.sqrt(2.0 * phi0) / alpha if alpha > 0 else math.inf
    inv_mu = 1.0 / mu
    steps = history["grad_norm"].to_numpy()[:-1] if "grad_norm" in history else np.zeros(0)
    path_length = float(mu * np.sum(steps[np.isfinite(steps)]))
    half = 0.5 * beta_ffn * sigma_M_Z0
    margin = min(p["sigma_M_H"] for p in points) / half if half > 0 else 0.0
    jac_ratio = max(p["jacobian_norm"] for p in points) / J_bar if J_bar > 0 else math.inf
    smooth_ratio = max(p["smoothness"] for p in points) / inv_mu
    max_distance = max(p["distance"] for p in points)
    a2 = bool(realizable and sigma_M_Z0 > 0)
    a3 = bool(margin >= 1.0)
    a4 = bool(jac_ratio <= 1.0 and smooth_ratio <= 1.0)
    a5 = bool(max_distance <= rho and (path_length <= rho or not np.isfinite(path_length)) and not diverged)
    a6 = bool(points[0]["smoothness"] <= inv_mu * (1 + 1e-12))
    return {"rho": rho, "J_bar": J_bar, "inv_mu": inv_mu, "max_distance": max_distance,
            "max_path_length": path_length, "A3_min_margin": margin, "A4_max_jacobian_ratio": jac_ratio,
            "A4_max_smoothness_ratio": smooth_ratio, "A2": a2, "A3_path": a3, "A4_path": a4, "A5_path": a5,
            "A6": a6, "in_regime": bool(a2 and a3 and a4 and a5 and a6 and not diverged),
            "n_checkpoints": len(points)}
