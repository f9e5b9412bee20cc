"""Tiny synthetic data sets for tests: ``toy`` (per-token regression) and ``toy_cls`` (pooled ±1 labels).

Seconds to train, same shapes and pooling as the paper's data sets, so every code path of the
experiments runs in the test suite without any download.
"""

from __future__ import annotations

import math

import torch

from .dataset import SupervisedData


def toy_data(spec, dtype: torch.dtype):
    """Tiny synthetic data for tests: per-token regression, or pooled ±1 labels for a classification
    data set (its record's task: ``toy_cls``), ``d`` features as its record says."""
    gen = torch.Generator().manual_seed(1000 + spec.seed)
    d, n = spec.d, spec.n_tokens
    n_test = spec.n_test or spec.n_train
    X = torch.randn(spec.n_train + n_test, n, d, generator=gen, dtype=torch.float64)
    w = torch.randn(d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    if not spec.is_classification:
        Y = (0.5 * X @ w + 0.5 * X.mean(dim=1, keepdim=True) @ w)[..., None]
        mask = None
    else:
        lengths = torch.randint(max(1, n // 2), n + 1, (X.shape[0],), generator=gen)
        mask = torch.arange(n)[None, :] < lengths[:, None]
        X = X * mask[..., None]
        Y = torch.where((X.sum(dim=1) / lengths[:, None]) @ w >= 0, 1.0, -1.0)[:, None].to(torch.float64)
    cut = spec.n_train
    split = lambda t: (None, None) if t is None else (t[:cut], t[cut:])  # noqa: E731
    (X_tr, X_te), (Y_tr, Y_te), (m_tr, m_te) = split(X), split(Y), split(mask)
    return SupervisedData(
        name=spec.name, X_train=X_tr.to(dtype), Y_train=Y_tr.to(dtype), X_test=X_te.to(dtype),
        Y_test=Y_te.to(dtype), feature_names=tuple(f"x{i}" for i in range(d)),
        source_label="SYNTHETIC toy data (tests only)", is_standin=True, mask_train=m_tr, mask_test=m_te,
    )
