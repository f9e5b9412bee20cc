"""The benchmark's JAX peer computes our loss and gradients (float64, same weights); skipped without jax.

jax is an optional extra (``.[jax]``), not installed by ``make install`` or CI.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import jax_peer  # noqa: E402

if jax_peer.import_jax() is None:
    pytest.skip("jax is not installed (optional extra [jax])", allow_module_level=True)

from bench_gd import make_case  # noqa: E402

from resgd.core.autograd_reference import autograd_loss_and_grad  # noqa: E402


@pytest.mark.parametrize("size, L", [("jena", 1), ("jena", 2), ("sst2", 2)])
def test_jax_peer_matches_our_loss_and_gradients(size, L):
    cfg, X, Y, mask, params = make_case(size, 16, L, torch.float64, seed=2)
    loss, grads, _ = autograd_loss_and_grad(params, cfg, X, Y, mask)
    value, jax_grads = jax_peer.value_and_grad(cfg, X, Y, mask, params)
    assert value == pytest.approx(float(loss), rel=1e-12)
    assert jax_peer.max_rel_diff(jax_grads, grads) < 1e-12
    # the comparison can fail: one perturbed weight gradient is caught
    jax_grads["W_V.0"] = jax_grads["W_V.0"] * (1 + 1e-6)
    assert jax_peer.max_rel_diff(jax_grads, grads) > 1e-8


def test_jitted_step_is_one_gd_step():
    cfg, X, Y, mask, params = make_case("sst2", 8, 1, torch.float64, seed=3)
    lr = 1e-3
    step, compile_s = jax_peer.make_jax_step(cfg, X, Y, mask, params, lr)
    assert compile_s > 0
    value = float(step())  # the loss at the initial weights, then the update
    loss, grads, _ = autograd_loss_and_grad(params, cfg, X, Y, mask)
    assert value == pytest.approx(float(loss), rel=1e-12)
    updated = {k: params[k] - lr * grads[k] for k in params}
    assert float(step()) == pytest.approx(float(autograd_loss_and_grad(updated, cfg, X, Y, mask)[0]), rel=1e-10)
