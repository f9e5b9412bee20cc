"""Summaries of an attention matrix, and what they should be for random or uniform attention.

Used by :mod:`resgd.collapse.study` to tell apart the regimes of the attention as d_QK grows
(spread out, one-hot, uniform) and to put reference values next to the measured ones.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..core.model import LOGIT_SCALES
from ..pipeline.presets import INPUT_TOKENS
from .residual_bound import spectrum_summaries
from ..validation import check_choice


def attention_statistics(A: torch.Tensor, logits: torch.Tensor | None = None) -> dict[str, float]:
    """Summaries of attention probabilities ``A`` (N, n, n), averaged over samples and queries.

    * ``entropy``: mean row entropy / log n (1 = uniform, 0 = one-hot);
    * ``max_prob``: mean largest weight of a row (1/n uniform, 1 one-hot);
    * ``argmax_agreement``: fraction of queries whose argmax key is the most common argmax key of
      their sample (1 = every query picks the same key; ≈ 1/n·… for spread-out choices). Only
      meaningful when ``max_prob`` is large: for near-uniform rows the argmax is noise;
    * ``rank1_distance_A``: median over samples of A's relative distance to rank 1;
    * ``logit_std``: standard deviation of the logits (when given).
    """
    A = A.detach().to(torch.float64)
    N, n, _ = A.shape
    entropy = -(A * torch.log(A.clamp_min(1e-300))).sum(-1)
    norm_entropy = float(entropy.mean() / math.log(n)) if n > 1 else 0.0
    argmax = A.argmax(dim=-1)
    counts = torch.nn.functional.one_hot(argmax, num_classes=A.shape[-1]).sum(dim=1)  # (N, keys): queries per key
    agreement = float((counts.max(dim=-1).values.to(torch.float64) / n).mean())
    rank1_A = float(np.median(spectrum_summaries(torch.linalg.svdvals(A).numpy())["rank1_distance"]))
    out = {
        "entropy": norm_entropy,
        "max_prob": float(A.max(dim=-1).values.mean()),
        "argmax_agreement": agreement,
        "rank1_distance_A": rank1_A,
    }
    if logits is not None:
        out["logit_std"] = float(logits.detach().to(torch.float64).std())
    return out


def predicted_logit_std(d_qk: int, logit_scale: str, qk_scale: float) -> float:
    """``s² √d_QK / D``: the logits' standard deviation for tokens with ‖x‖² ≈ d (D = √d_QK or d_QK).

    Conditioned on the tokens, Var ℓ_ij = d_QK (s²‖x_i‖²/d)(s²‖x_j‖²/d) / D² for W_Q, W_K with
    i.i.d. N(0, s²/d) entries.
    """
    check_choice("logit_scale", logit_scale, LOGIT_SCALES)
    divisor = math.sqrt(d_qk) if logit_scale == "sqrt" else float(d_qk)
    return float(qk_scale) ** 2 * math.sqrt(d_qk) / divisor


def random_argmax_agreement(n: int = INPUT_TOKENS, trials: int = 2000, seed: int = 0) -> float:
    """Reference value of ``argmax_agreement`` when each of n queries picks one of n keys at random."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(trials, n))
    counts = np.stack([np.bincount(row, minlength=n).max() for row in picks])
    return float(counts.mean() / n)
