"""fastgrad's per-thread buffers across calls of different models in one process.

Found when the suite first ran on two xdist workers: a per-token (``pooling="none"``) gradient
followed, in the same thread, by a mean-pooled one of the same sizes failed, because the buffers'
key (``resgd.core.fastgrad.step``: ``WORKSPACE.select``) left the pooling out and the buffer ``R`` is
a (rows, view) pair for one and a tensor for the other. A sweep (or ``python -m resgd reproduce``)
that trains Jena and then SST-2 models in one process could meet it. Fixed: the key holds the
pooling. This test calls both in one test, whatever order the suite runs in; the suite itself
does not empty the buffers between tests (tests/conftest.py), so other order effects still show.
"""

from __future__ import annotations

import torch

from resgd.core.model import ModelConfig, init_params
from resgd.core.train import loss_and_grad


def gradients(pooling: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    Y = torch.randn(*((3, 2) if pooling == "mean" else (3, 4, 2)), generator=g, dtype=torch.float64)
    cfg = ModelConfig(d=5, d_qk=3, m=6, k=2, n_layers=1, beta=0.7, pooling=pooling)
    return {name: grad.clone() for name, grad in loss_and_grad(init_params(cfg, seed=1), cfg, X, Y)[1].items()}


def test_mean_pooling_after_per_token_in_one_thread_gives_the_fresh_gradients():
    from resgd.core.fastgrad.workspace import clear_workspace

    clear_workspace()
    fresh = gradients("mean")
    clear_workspace()
    gradients("none")
    after = gradients("mean")  # the same thread's buffers, last used by the per-token model
    assert after.keys() == fresh.keys()
    for name in fresh:
        torch.testing.assert_close(after[name], fresh[name], rtol=0, atol=0)
