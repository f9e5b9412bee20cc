"""The attention's softmax, keys-major, with the max-shift skipped when it cannot change the result.

Kept apart from the step because its two overflow checks are the subtle part of the pass;
``tests/test_fastgrad.py`` checks it against ``torch.softmax`` on rows that overflow, rows that
fully underflow and huge logits on padded keys.
"""

from __future__ import annotations

import math

import torch

# e^±limit: the range of softmax row sums (of unshifted exps) in which the max-shift changes only rounding
EXP_SAFE = {torch.float64: 600.0, torch.float32: 60.0}


def _within(values: torch.Tensor, lo: float, hi: float) -> bool:
    """Every entry strictly inside (lo, hi); False if any is NaN."""
    low, high = torch.aminmax(values)
    return lo < float(low) and float(high) < hi


def attention_probs_(out: torch.Tensor, K: torch.Tensor, QL: torch.Tensor, keymask: torch.Tensor | None,
                      keybias: torch.Tensor | None, expect_large: bool = False) -> bool:
    """Keys-major attention probabilities ``out[p, j, i] = softmax_j(K_p QL_pᵀ)[i, j]``, in ``out``.

    Keys-major, the reductions run over dim 1 with contiguous queries in the inner loop (2-4×
    faster than a row softmax for rows of a few dozen). Softmax is shift-invariant, so the
    max-shift is skipped when it cannot matter (:data:`EXP_SAFE`), checked in one of two ways:

    * by default after the exp, on the (c, 1, n) row sums only: every row sum in
      ``(e^-limit, e^limit)`` means no weight overflowed and a weight that underflowed is below
      ``e^-limit`` of its row's largest, invisible at the dtype's precision; otherwise the logits
      are recomputed (one ``bmm``) and shifted;
    * with ``expect_large`` (the caller saw this layer need the shift last time) before the exp,
      on the logits themselves (``|logit| < limit``), which wastes no exp on a failing chunk.

    The shifted path subtracts the maximum over the real keys. Padded keys (``keymask`` 0,
    ``keybias`` −inf) get weight 0. Returns whether the shifted path was taken.
    """
    torch.bmm(K, QL.transpose(1, 2), out=out)
    limit = EXP_SAFE.get(out.dtype)
    if limit is not None and (not expect_large or _within(out, -limit, limit)):
        E = out.exp_()
        if keymask is not None:
            E.mul_(keymask)  # an overflowed padded key gives inf·0 = NaN: the check below fails
        sums = E.sum(dim=1, keepdim=True)
        if expect_large or _within(sums, math.exp(-limit), math.exp(limit)):
            E.mul_(sums.reciprocal_())
            return False
        torch.bmm(K, QL.transpose(1, 2), out=out)  # recompute the logits for the shifted path
    S_T = out
    if keybias is not None:
        S_T.add_(keybias)  # −inf on padded keys: excluded from the max, exp gives 0
    S_T.sub_(torch.max(S_T, dim=1, keepdim=True).values)  # max: same values as amax, 25 % faster here
    if limit is not None:
        # exp is 30-200x slower where its result underflows (measured); weights below e^-limit
        # relative to the largest (1e-261 in float64, 1e-26 in float32) are kept at e^-limit
        # instead of their true, smaller value: invisible at the dtype's precision
        S_T.clamp_(min=-limit)
        if keybias is not None:
            S_T.add_(keybias)  # padded keys back to −inf (the clamp lifted them)
    E = S_T.exp_()
    E.mul_(E.sum(dim=1, keepdim=True).reciprocal_())
    return True

