"""How well conditioned the attention output is: the quantity Theorem 1's rate depends on.

The object is the stacked matrix ``Z = [Z(X_1); …; Z(X_N)] ∈ R^{Nn×d}`` with
``Z(X) = βX + Attn(X)``, and likewise for ``Attn`` alone and for ``X``. All spectra are computed
in float64: σ_min is the number that matters and it is the first to lose precision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from .model import ModelConfig, Params, forward


def singular_values(M: torch.Tensor) -> np.ndarray:
    """Singular values of a matrix (descending, float64) by SVD: accurate even when σ_min ≪ σ_max."""
    if M.ndim != 2:
        raise ValueError(f"M: expected a 2-D matrix, got shape {tuple(M.shape)}")
    return torch.linalg.svdvals(M.detach().to(torch.float64).cpu()).numpy()


def gram_singular_values(M: torch.Tensor) -> np.ndarray:
    """The min(rows, cols) singular values (descending) from the smaller Gram matrix: cheap for tall ``M``.

    Same values as :func:`singular_values` (``MᵀM`` for tall, ``MMᵀ`` for wide matrices), accurate
    while σ_min/σ_max ≫ 1e-8 (float64 squares the condition number); use
    :func:`singular_values` to study collapse. ``M`` may carry a leading batch axis (B, rows, cols)
    — the stacked trainer's runs — giving (B, min(rows, cols)).
    """
    if M.ndim not in (2, 3):
        raise ValueError(f"M: expected a 2-D matrix or a batch of them, got shape {tuple(M.shape)}")
    M64 = M.detach().to(torch.float64)
    gram = M64.mT @ M64 if M64.shape[-2] >= M64.shape[-1] else M64 @ M64.mT
    eig = torch.linalg.eigvalsh(gram).clamp_min(0).sqrt().flip(-1)
    return eig.cpu().numpy()


@dataclass(frozen=True)
class Spectrum:
    """The singular values of one matrix and the summaries the book uses."""

    sigma: np.ndarray  # descending, float64

    @property
    def sigma_min(self) -> float:
        return float(self.sigma[-1])

    @property
    def sigma_max(self) -> float:
        return float(self.sigma[0])

    @property
    def condition_number(self) -> float:
        return self.sigma_max / self.sigma_min if self.sigma_min > 0 else math.inf

    @property
    def stable_rank(self) -> float:
        """Σσ²/σ_max²: how many directions carry energy (1 for a rank-1 matrix)."""
        return float((self.sigma**2).sum() / self.sigma_max**2) if self.sigma_max > 0 else 0.0

    @property
    def rank1_distance(self) -> float:
        """‖M − M₁‖_F / ‖M‖_F with M₁ the best rank-1 approximation (0 means rank 1)."""
        total = float((self.sigma**2).sum())
        return math.sqrt(float((self.sigma[1:] ** 2).sum()) / total) if total > 0 else 0.0

    @property
    def rate_ratio(self) -> float:
        """σ_min²/σ_max²: the quantity Theorem 1's linear rate is governed by."""
        return (self.sigma_min / self.sigma_max) ** 2 if self.sigma_max > 0 else 0.0

    def summary(self) -> dict[str, float]:
        return {
            "sigma_min": self.sigma_min,
            "sigma_max": self.sigma_max,
            "condition_number": self.condition_number,
            "stable_rank": self.stable_rank,
            "rank1_distance": self.rank1_distance,
            "rate_ratio": self.rate_ratio,
        }


def stack(M: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``[M_1; …; M_N]``: (N, n, d) → (N·n, d), keeping only the real tokens when ``mask`` is given."""
    if M.ndim != 3:
        raise ValueError(f"M: expected shape (N, n, d), got {tuple(M.shape)}")
    return M.reshape(-1, M.shape[-1]) if mask is None else M[mask]


def spectrum(M: torch.Tensor, mask: torch.Tensor | None = None) -> Spectrum:
    """Spectrum of a batch (N, n, d), stacked, or of a matrix (rows, d)."""
    matrix = stack(M, mask) if M.ndim == 3 else M
    return Spectrum(singular_values(matrix))


def attention_spectra(
    params: Params,
    cfg: ModelConfig,
    X: torch.Tensor,
    mask: torch.Tensor | None = None,
    layer: int = 0,
) -> dict[str, Spectrum]:
    """Spectra of the stacked input ``X``, ``Attn(X)`` and ``Z = βX + Attn(X)`` of one layer."""
    if not 0 <= layer < cfg.n_layers:
        raise ValueError(f"layer: expected 0 <= layer < n_layers = {cfg.n_layers}, got {layer}")
    with torch.no_grad():
        trace = forward(params, cfg, X, mask, return_trace=True).layers[layer]
    return {name: spectrum(getattr(trace, name), mask) for name in ("X", "Attn", "Z")}


def spectra_table(spectra: dict[str, Spectrum]) -> pd.DataFrame:
    """One row per matrix with every summary, for tables and plots."""
    return pd.DataFrame([{"matrix": name, **s.summary()} for name, s in spectra.items()])
