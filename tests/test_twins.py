"""The model without residual is alive at initialisation ("living" twin), the "scaled" twin is not.

Stated factor: at t = 0, under the equal start, the living twin's output norm ‖Ŷ⁰‖ and gradient
norm ‖∇Φ(θ⁰)‖ lie within a factor :data:`FACTOR` of the residual model's (same seed, same data),
on both data sets and at L = 2, 6, 10; the dead-by-init ("scaled") twin's gradient is below
1e-4 of the residual model's at L = 6, 10; and the living twin's loss moves under GD.
"""

import math

import pytest
import torch

from resgd.core.model import init_params
from resgd.core.train import loss_and_grad
from resgd.experiments import study as ex

FACTOR = 25.0


def _norms(s, beta, L, seed=0):
    data = ex.load_dataset(s.spec, s.dtype)
    cfg = s.model(beta, L)
    loss, grads, trace = loss_and_grad(init_params(cfg, seed), cfg, data.X_train, data.Y_train, data.mask_train, s.reduction)
    return float(trace.Y_hat.norm()), math.sqrt(sum(float(g.pow(2).sum()) for g in grads.values()))


@pytest.mark.parametrize("dataset", ["jena", "sst2"])
@pytest.mark.parametrize("L", [2, 6, 10])
def test_living_twin_keeps_its_signal(dataset, L):
    s = ex.settings(dataset, True, twin_init="living", start="equal")
    out1, grad1 = _norms(s, 1.0, L)
    out0, grad0 = _norms(s, 0.0, L)
    assert 1 / FACTOR < out0 / out1 < FACTOR
    assert 1 / FACTOR < grad0 / grad1 < FACTOR


@pytest.mark.parametrize("dataset", ["jena", "sst2"])
@pytest.mark.parametrize("L", [6, 10])
def test_scaled_twin_is_dead_at_depth(dataset, L):
    s = ex.settings(dataset, True, twin_init="scaled", start="equal")
    assert _norms(s, 0.0, L)[1] < 1e-4 * _norms(s, 1.0, L)[1]


def test_living_twin_loss_moves(tmp_path):
    s = ex.settings("toy", True, twin_init="living", start="equal")
    lr = ex.theory_lr(s, 0.0, 3, 1.0, seed=0, cache_dir=tmp_path)
    frame = ex.run(s.config(0.0, 3, 0, lr, iterations=20), cache_dir=tmp_path)
    assert frame["loss"].iloc[-1] < 0.99 * frame["loss"].iloc[0]
