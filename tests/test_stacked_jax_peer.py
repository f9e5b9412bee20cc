"""The map benchmark's JAX peer trains a stack as :func:`resgd.core.trainer.train_stacked` does
(float64, same weights, β and step sizes): loss and ‖∇Φ‖ histories to 1e-12; skipped without jax.

jax is an optional extra (``.[jax]``), not installed by ``make install`` or CI.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import jax_peer  # noqa: E402

if jax_peer.import_jax() is None:
    pytest.skip("jax is not installed (optional extra [jax])", allow_module_level=True)

from resgd.core.model import ModelConfig, init_params  # noqa: E402
from resgd.core.trainer import GDConfig, train_stacked  # noqa: E402


def _stack(kind: str, L: int, R: int = 3, N: int = 6, n: int = 5, iterations: int = 12):
    g = torch.Generator().manual_seed(4)
    d = 6 if kind == "jena" else 20  # d_QK = 8: folded logits for d = 6, Q Kᵀ for d = 20
    X = torch.randn(N, n, d, generator=g, dtype=torch.float64)
    mask = None
    if kind == "jena":
        Y = torch.randn(N, n, 1, generator=g, dtype=torch.float64)
    else:
        mask = torch.arange(n).view(1, n) < torch.tensor([2, 5, 3, 5, 4, 2]).view(N, 1)
        X, Y = X * mask.unsqueeze(-1), torch.tensor([[1.0], [-1.0]] * 3, dtype=torch.float64)
    models = [ModelConfig(d=d, d_qk=8, m=12, k=1, n_layers=L, beta=(0.0, 0.5, 1.0)[r % 3],
                          pooling="none" if kind == "jena" else "mean") for r in range(R)]
    gds = [GDConfig(lr=lr, iterations=iterations, reduction="mean", record_every=5) for lr in (1e-3, 3e-3, 1e-2)[:R]]
    return [init_params(m, r) for r, m in enumerate(models)], models, X, Y, gds, mask


@pytest.mark.parametrize("kind, L", [("jena", 1), ("sst2", 2)])
def test_jax_peer_trains_the_stack_as_train_stacked(kind, L):
    params, models, X, Y, gds, mask = _stack(kind, L)
    run, compile_s = jax_peer.make_stacked_train(models[0], gds[0], X, Y, mask, params, [g.lr for g in gds],
                                                 [m.beta for m in models], [m.residual_ffn for m in models])
    assert compile_s > 0
    losses, norms, smin, smax = run()
    ours = train_stacked(params, models, X, Y, gds, mask)
    for column, peer in (("loss", losses), ("grad_norm", norms)):
        mine = np.stack([o.history[column].to_numpy() for o in ours], axis=1)
        assert peer.shape == mine.shape == (13, 3)
        np.testing.assert_allclose(peer, mine, rtol=1e-12, atol=0)
    assert losses[-1].max() < losses[0].min() * 1.5 and not np.allclose(losses[-1], losses[0])  # it trained
    # σ(Z) at the same steps (0, 5, 10 and the last), NaN elsewhere; the Gram route agrees to rounding
    mine = np.stack([o.history["sigma_max_Z"].to_numpy() for o in ours], axis=1)
    assert (np.isnan(smax) == np.isnan(mine)).all() and np.isfinite(smax[[0, 5, 10, 12]]).all()
    np.testing.assert_allclose(smax[[0, 5, 10, 12]], mine[[0, 5, 10, 12]], rtol=1e-10)
