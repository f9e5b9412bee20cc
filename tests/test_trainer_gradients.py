"""The trainer's hand-derived gradients (resgd.core.hand_pass) against autograd and central finite differences.

Every test here can fail: the comparison helpers are themselves checked to reject a gradient with
one perturbed entry, and the finite-difference reference is computed from the model's own
definition (resgd.core.model.forward + resgd.core.loss.loss_from_output), not from either gradient code.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from resgd.core.model import ModelConfig, fold_logits, forward, init_params
from resgd.core.hand_pass import hand_loss_and_grads
from resgd.core.autograd_reference import autograd_loss_and_grad
from resgd.core.loss import loss_from_output

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from flops import step_flops  # noqa: E402

F64 = torch.float64


def make_problem(cfg: ModelConfig, N: int = 3, n: int = 4, masked: bool = False, seed: int = 0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, n, cfg.d, generator=g, dtype=F64).to(dtype)
    mask = None
    if masked:
        lengths = torch.tensor([n, 1, n - 1] + [n] * (N - 3))[:N]  # a full row, a single token, one padded
        mask = torch.arange(n)[None, :] < lengths[:, None]
    shape = (N, cfg.k) if cfg.pooling == "mean" else (N, n, cfg.k)
    Y = torch.randn(shape, generator=g, dtype=F64).to(dtype)
    params = init_params(cfg, seed + 1, dtype=dtype)
    # spread the weights a little so the softmax and activations are not in a trivial regime
    params = {k: v * 1.5 for k, v in params.items()}
    return params, X, Y, mask


def reference_loss(params, cfg, X, Y, mask, reduction="sum") -> float:
    """Φ straight from the model's definition (no gradient code involved)."""
    with torch.no_grad():
        return float(loss_from_output(forward(params, cfg, X, mask), Y, mask, reduction))


def max_rel_error(grads, reference) -> float:
    """max over weights of max|g − ref| / max|ref| (the weights' own scale)."""
    assert list(grads) == list(reference), "gradients must have the keys of params, in order"
    worst = 0.0
    for name, ref in reference.items():
        got = grads[name]
        assert got.shape == ref.shape, name
        worst = max(worst, float((got - ref).abs().max()) / max(float(ref.abs().max()), 1e-300))
    return worst


def assert_grads_close(grads, reference, rtol: float) -> None:
    error = max_rel_error(grads, reference)
    assert error < rtol, f"gradient mismatch: max relative error {error:.3e} >= {rtol:.1e}"


def directional_fd(params, cfg, X, Y, mask, reduction, direction: dict, eps: float = 1e-6) -> float:
    """(Φ(θ + εV) − Φ(θ − εV)) / 2ε."""
    plus = {k: p + eps * direction.get(k, 0.0) for k, p in params.items()}
    minus = {k: p - eps * direction.get(k, 0.0) for k, p in params.items()}
    return (reference_loss(plus, cfg, X, Y, mask, reduction) - reference_loss(minus, cfg, X, Y, mask, reduction)) / (2 * eps)


def entrywise_fd(params, cfg, X, Y, mask, reduction, eps: float = 1e-6) -> dict:
    """Central finite differences for every entry of every weight."""
    out = {}
    for name, p in params.items():
        g = torch.zeros_like(p)
        for idx in itertools.product(*(range(s) for s in p.shape)):
            e = torch.zeros_like(p)
            e[idx] = 1.0
            g[idx] = directional_fd(params, cfg, X, Y, mask, reduction, {name: e}, eps)
        out[name] = g
    return out


# The grid: L = 1, 2; mask or not; per-token and mean pooling; the three activations; β = 0 and
# β > 0; with d = 5, d_qk = 2 and 4 (< d: X W_Q and X W_K) and 7 (> d: through M = W_Q W_Kᵀ).
GRID = list(itertools.product([1, 2], [False, True], ["none", "mean"], ["relu", "gelu", "softplus"], [0.0, 0.7], [2, 4, 7]))


def grid_cfg(L, pooling, activation, beta, d_qk):
    return ModelConfig(d=5, d_qk=d_qk, m=6, k=2, n_layers=L, beta=beta, pooling=pooling, activation=activation)




def trainer(params, cfg, X, Y, mask, reduction="sum"):
    """The trainer's loss and gradient of one run (a stack of one)."""
    loss, grads = hand_loss_and_grads([params], [cfg], X, Y, mask, reduction)
    return loss[0], grads[0]


@pytest.mark.parametrize("L,masked,pooling,activation,beta,d_qk", GRID)
def test_the_trainer_matches_autograd_and_finite_differences(L, masked, pooling, activation, beta, d_qk):
    """Tolerances: 1e-12 on the loss and 1e-10 on the gradients against autograd (both exact up to
    float64 rounding of a few dozen sums); 1e-6 against central differences (their truncation error)."""
    cfg = grid_cfg(L, pooling, activation, beta, d_qk)
    params, X, Y, mask = make_problem(cfg, masked=masked, seed=L * 7 + d_qk)
    for reduction in ("sum", "mean"):
        loss, grads = trainer(params, cfg, X, Y, mask, reduction)
        ref_loss, ref_grads, _ = autograd_loss_and_grad(params, cfg, X, Y, mask, reduction)
        assert float(loss) == pytest.approx(float(ref_loss), rel=1e-12)
        assert float(loss) == pytest.approx(reference_loss(params, cfg, X, Y, mask, reduction), rel=1e-12)
        assert_grads_close(grads, ref_grads, 1e-10)
        g = torch.Generator().manual_seed(123)
        for name, grad in grads.items():
            for _ in range(2):
                direction = torch.randn(grad.shape, generator=g, dtype=F64)
                fd = directional_fd(params, cfg, X, Y, mask, reduction, {name: direction})
                analytic = float((grad * direction).sum())
                assert analytic == pytest.approx(fd, rel=1e-6, abs=1e-8 * max(1.0, abs(float(loss)))), name


@pytest.mark.parametrize("beta, beta_ffn", [(0.7, 0.0), (0.0, 0.5), (1.0, 0.3)])
def test_separate_attention_and_ffn_residuals(beta, beta_ffn):
    """β and β_ffn enter different products (the attention's residual, the FFN's): vary them apart,
    and in one stack with other residual weights (each run's gradient is its own)."""
    cfg = ModelConfig(d=5, d_qk=4, m=6, k=2, n_layers=2, beta=beta, beta_ffn=beta_ffn)
    other = cfg.replace(beta=1.0 - beta, beta_ffn=0.9)
    params, X, Y, mask = make_problem(cfg, N=4, n=5, masked=True, seed=5)
    losses, grads = hand_loss_and_grads([params, params], [cfg, other], X, Y, mask)
    for loss, got, model in zip(losses, grads, (cfg, other)):
        ref_loss, ref, _ = autograd_loss_and_grad(params, model, X, Y, mask)
        assert float(loss) == pytest.approx(float(ref_loss), rel=1e-12)
        assert_grads_close(got, ref, 1e-9)


@pytest.mark.parametrize(
    "cfg,masked",
    [
        (ModelConfig(d=5, d_qk=2, m=4, k=1, n_layers=2, beta=0.5, activation="gelu"), True),
        (ModelConfig(d=3, d_qk=5, m=4, k=2, n_layers=1, beta=0.0, pooling="mean", activation="softplus"), True),
        (ModelConfig(d=3, d_qk=3, m=4, k=1, n_layers=2, beta=1.0, logit_scale="linear"), False),
    ],
)
def test_every_entry_against_central_finite_differences(cfg, masked):
    params, X, Y, mask = make_problem(cfg, N=3, n=3, masked=masked, seed=5)
    _, grads = trainer(params, cfg, X, Y, mask)
    assert_grads_close(grads, entrywise_fd(params, cfg, X, Y, mask, "sum"), 1e-6)


def test_the_grid_covers_both_logit_paths():
    assert {fold_logits(5, q) for q in (2, 4, 7)} == {False, True}


def test_a_perturbed_gradient_is_detected():
    cfg = grid_cfg(2, "none", "relu", 0.7, 2)
    params, X, Y, mask = make_problem(cfg, masked=True)
    _, grads = trainer(params, cfg, X, Y, mask)
    _, ref, _ = autograd_loss_and_grad(params, cfg, X, Y, mask)
    for name in grads:  # one wrong entry in any weight, by 1e-6 of that weight's scale, is caught
        bad = {k: v.clone() for k, v in grads.items()}
        bad[name].view(-1)[0] += 1e-6 * float(bad[name].abs().max())
        with pytest.raises(AssertionError):
            assert_grads_close(bad, ref, 1e-10)
    name = "W_K.1"  # and the finite-difference reference rejects a gradient that is off by 1e-3
    direction = torch.zeros_like(grads[name])
    direction[0, 0] = 1.0
    fd = directional_fd(params, cfg, X, Y, mask, "sum", {name: direction})
    wrong = float(grads[name][0, 0]) + 1e-3 * max(1.0, abs(fd))
    assert wrong != pytest.approx(fd, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize(
    "cfg,masked",
    [
        (ModelConfig(d=6, d_qk=2, m=7, k=2, n_layers=2), False),  # d_qk ≤ d: unfolded
        (ModelConfig(d=4, d_qk=6, m=5, k=1, n_layers=3, pooling="mean"), True),  # d_qk > d: folded
    ],
)
def test_flop_formula_matches_autograds_matmuls(cfg, masked):
    """The benchmarks' step_flops counts exactly the matmuls autograd runs, less the weight-only products."""
    N, n = 5, 7
    params, X, Y, mask = make_problem(cfg, N=N, n=n, masked=masked)
    counter = FlopCounterMode(display=False)
    with counter:
        autograd_loss_and_grad(params, cfg, X, Y, mask)
    weight_only = cfg.n_layers * 3 * 2 * cfg.d * cfg.d * cfg.d_qk if fold_logits(cfg.d, cfg.d_qk) else 0
    flops = step_flops(cfg, N, n)
    assert flops["total"] == counter.get_total_flops() - weight_only
    assert flops["total"] == flops["forward"] + flops["backward"]
    assert 1.5 * flops["forward"] < flops["backward"] < 2 * flops["forward"]
