"""How far the residual keeps ``Z = βX + Attn(X)`` from collapsing: spectra and a lower bound on σ_min(Z).

* :func:`z_lower_bound` — a rigorous lower bound on σ_min(Z) in terms of β and the centred input
  (Weyl's inequality, before and after removing each sample's token mean);
* :func:`column_sigma_min`, :func:`center_tokens` — its ingredients;
* :func:`spectrum_summaries` — σ_min, σ_max, distance to rank 1 and stable rank, vectorised
  over samples (the definitions of :class:`resgd.core.conditioning.Spectrum`).

Used by :mod:`resgd.collapse.study` (the d_QK sweep and its figures).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core.conditioning import singular_values, stack
from ..validation import ConfigError

def column_sigma_min(M: torch.Tensor) -> float:
    """``min_{‖u‖=1} ‖M u‖`` for a 2-D ``M``: its d-th singular value, 0 if it has fewer rows than columns."""
    if M.ndim != 2:
        raise ValueError(f"M: expected a 2-D matrix, got shape {tuple(M.shape)}")
    if M.shape[0] < M.shape[1] or M.numel() == 0:
        return 0.0
    return float(singular_values(M)[-1])


def center_tokens(M: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``P M``: subtract from every token of a sample the mean over that sample's real tokens.

    ``P = I − 1 1ᵀ / n_p`` per sample (block-diagonal over samples); padded tokens are set to 0.
    """
    if M.ndim != 3:
        raise ValueError(f"M: expected shape (N, n, d), got {tuple(M.shape)}")
    if mask is None:
        return M - M.mean(dim=1, keepdim=True)
    w = mask.to(M.dtype)[..., None]
    mean = (M * w).sum(dim=1, keepdim=True) / w.sum(dim=1, keepdim=True)
    return (M - mean) * w


@dataclass(frozen=True)
class ZBound:
    """Lower bounds on σ_min(Z) for ``Z = βX + Attn`` (each may be negative, i.e. vacuous).

    ``weyl``: β σ_min(X) − σ_max(Attn).  ``centered``: β σ_min(PX) − σ_max(P·Attn), with ``P``
    the per-sample token centring of :func:`center_tokens`.  ``bound``: max(weyl, centered, 0).
    """

    weyl: float
    centered: float

    @property
    def bound(self) -> float:
        return max(self.weyl, self.centered, 0.0)

    def as_dict(self) -> dict[str, float]:
        return {"bound_weyl": self.weyl, "bound_centered": self.centered, "bound": self.bound}


def z_lower_bound(X: torch.Tensor, Attn: torch.Tensor, beta: float, mask: torch.Tensor | None = None) -> ZBound:
    """A rigorous lower bound on σ_min of the stacked ``Z = βX + Attn`` (of one sample if N = 1).

    ``X``, ``Attn``: (N, n, d) (or (n, d) for one sample). For every unit ``u ∈ R^d``:

    * Weyl: ``‖Zu‖ ≥ β‖Xu‖ − ‖Attn u‖ ≥ β σ_min(X) − σ_max(Attn)``;
    * centred: ``P`` (per-sample ``I − 11ᵀ/n``) is an orthogonal projector, so
      ``‖Zu‖ ≥ ‖PZu‖ ≥ β‖PXu‖ − ‖P Attn u‖ ≥ β σ_min(PX) − σ_max(P Attn)``.

    When attention is uniform, ``Attn(X_p) = 1 v_pᵀ`` and ``P Attn = 0``: then
    ``σ_min(Z) ≥ β σ_min(PX)`` whatever ``W_V`` is — the residual keeps Z full rank as long as the
    centred input is (which needs more than d real tokens per sample for a single sample).
    """
    if X.ndim == 2:
        X, Attn = X[None], Attn[None]
        mask = None if mask is None else mask[None]
    if X.shape != Attn.shape:
        raise ConfigError(f"z_lower_bound: X and Attn must have the same shape, got {tuple(X.shape)} and {tuple(Attn.shape)}")
    if not 0.0 <= float(beta):
        raise ConfigError(f"z_lower_bound: beta must be >= 0, got {beta!r}")
    X64, A64 = X.detach().to(torch.float64), Attn.detach().to(torch.float64)
    beta = float(beta)
    attn_max = float(singular_values(stack(A64, mask))[0])
    weyl = beta * column_sigma_min(stack(X64, mask)) - attn_max
    centered_attn_max = float(singular_values(stack(center_tokens(A64, mask), mask))[0])
    centered = beta * column_sigma_min(stack(center_tokens(X64, mask), mask)) - centered_attn_max
    return ZBound(weyl=weyl, centered=centered)


def per_sample_bounds(X: torch.Tensor, Attn: torch.Tensor, beta: float) -> dict[str, np.ndarray]:
    """:func:`z_lower_bound` for every sample separately (vectorised; no mask)."""
    N, n, d = X.shape
    beta = float(beta)

    def smin(M):  # column σ_min per sample
        if n < d:
            return np.zeros(N)
        return torch.linalg.svdvals(M).numpy()[:, -1]

    def smax(M):
        return torch.linalg.svdvals(M).numpy()[:, 0]

    weyl = beta * smin(X) - smax(Attn)
    centered = beta * smin(center_tokens(X)) - smax(center_tokens(Attn))
    return {"bound_weyl": weyl, "bound_centered": centered, "bound": np.maximum(np.maximum(weyl, centered), 0.0)}


def spectrum_summaries(sigma: np.ndarray) -> dict[str, np.ndarray]:
    """Spectrum summaries, vectorised over leading axes (same definitions as ``Spectrum``)."""
    energy = (sigma**2).sum(axis=-1)
    top = sigma[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        rank1 = np.where(energy > 0, np.sqrt((sigma[..., 1:] ** 2).sum(axis=-1) / np.where(energy > 0, energy, 1)), 0.0)
        stable = np.where(top > 0, energy / np.where(top > 0, top, 1) ** 2, 0.0)
    return {"sigma_min": sigma[..., -1], "sigma_max": top, "rank1_distance": rank1, "stable_rank": stable}


