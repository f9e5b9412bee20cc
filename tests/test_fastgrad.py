"""The hand-derived gradients of resgd.core.fastgrad against autograd and central finite differences.

Every test here can fail: the comparison helpers are themselves checked to reject a gradient with
one perturbed entry, and the finite-difference reference is computed from the model's own
definition (resgd.core.model.forward + resgd.core.train.loss_from_output), not from either gradient code.
"""

from __future__ import annotations

import itertools
import math
import threading

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from resgd.core import fastgrad
from resgd.core.model import ModelConfig, fold_logits, forward, init_params
from resgd.core.train import GDConfig, loss_and_grad, loss_from_output, train_gd
from resgd.validation import ConfigError

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


# The grid the issue asks for: L = 1, 2; mask or not; per-token and mean pooling; the three
# activations; β = 0 and β > 0; d_qk < d and d_qk > d. With d = 5 the three d_qk cover both code
# paths of the logits: 2 (< d/2, X W_Q and X W_K), 4 (d/2 ≤ d_qk < d) and 7 (> d), through M = W_Q W_Kᵀ.
GRID = list(itertools.product([1, 2], [False, True], ["none", "mean"], ["relu", "gelu", "softplus"], [0.0, 0.7], [2, 4, 7]))


def grid_cfg(L, pooling, activation, beta, d_qk):
    return ModelConfig(d=5, d_qk=d_qk, m=6, k=2, n_layers=L, beta=beta, pooling=pooling, activation=activation)


@pytest.mark.parametrize("L,masked,pooling,activation,beta,d_qk", GRID)
def test_manual_matches_autograd_and_finite_differences(L, masked, pooling, activation, beta, d_qk):
    cfg = grid_cfg(L, pooling, activation, beta, d_qk)
    params, X, Y, mask = make_problem(cfg, masked=masked, seed=L * 7 + d_qk)
    for reduction in ("sum", "mean"):
        loss, grads, trace = fastgrad.loss_and_grad_manual(params, cfg, X, Y, mask, reduction)
        ref_loss, ref_grads, ref_trace = loss_and_grad(params, cfg, X, Y, mask, reduction, backend="autograd")
        assert float(loss) == pytest.approx(float(ref_loss), rel=1e-12)
        assert float(loss) == pytest.approx(reference_loss(params, cfg, X, Y, mask, reduction), rel=1e-12)
        assert_grads_close(grads, ref_grads, 1e-10)
        # every weight: directional derivatives along random directions, from the model's definition
        g = torch.Generator().manual_seed(123)
        for name, grad in grads.items():
            for _ in range(2):
                direction = torch.randn(grad.shape, generator=g, dtype=F64)
                fd = directional_fd(params, cfg, X, Y, mask, reduction, {name: direction})
                analytic = float((grad * direction).sum())
                assert analytic == pytest.approx(fd, rel=1e-6, abs=1e-8 * max(1.0, abs(float(loss)))), name
    for mine, ref in zip(trace.layers, ref_trace.layers):
        for field in ("X", "A", "Attn", "Z", "H"):
            assert getattr(mine, field).shape == getattr(ref, field).shape
            torch.testing.assert_close(getattr(mine, field), getattr(ref, field), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(trace.Y_hat, ref_trace.Y_hat, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("beta, beta_ffn", [(0.7, 0.0), (0.0, 0.5), (1.0, 0.3)])
def test_separate_attention_and_ffn_residuals(beta, beta_ffn):
    # β and β_ffn enter different products (the attention's residual, the FFN's): vary them apart
    cfg = ModelConfig(d=5, d_qk=4, m=6, k=2, n_layers=2, beta=beta, beta_ffn=beta_ffn)
    params, X, Y, mask = make_problem(cfg, N=4, n=5, masked=True, seed=5)
    loss, grads, trace = fastgrad.loss_and_grad_manual(params, cfg, X, Y, mask)
    ref_loss, ref, ref_trace = loss_and_grad(params, cfg, X, Y, mask, backend="autograd")
    assert float(loss) == pytest.approx(float(ref_loss), rel=1e-12)
    assert_grads_close(grads, ref, 1e-9)
    torch.testing.assert_close(trace.layers[1].H, ref_trace.layers[1].H)


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
    _, grads, _ = fastgrad.loss_and_grad_manual(params, cfg, X, Y, mask)
    assert_grads_close(grads, entrywise_fd(params, cfg, X, Y, mask, "sum"), 1e-6)


def test_the_grid_covers_both_logit_paths():
    assert {fold_logits(5, q) for q in (2, 4, 7)} == {False, True}


def test_a_perturbed_gradient_is_detected():
    cfg = grid_cfg(2, "none", "relu", 0.7, 2)
    params, X, Y, mask = make_problem(cfg, masked=True)
    _, grads, _ = fastgrad.loss_and_grad_manual(params, cfg, X, Y, mask)
    _, ref, _ = loss_and_grad(params, cfg, X, Y, mask, backend="autograd")
    for name in grads:  # one wrong entry in any weight, by 1e-6 of that weight's scale, is caught
        bad = {k: v.clone() for k, v in grads.items()}
        bad[name].view(-1)[0] += 1e-6 * float(bad[name].abs().max())
        with pytest.raises(AssertionError):
            assert_grads_close(bad, ref, 1e-10)
    # and the finite-difference reference rejects a gradient that is off by 1e-3
    name = "W_K.1"
    direction = torch.zeros_like(grads[name])
    direction[0, 0] = 1.0
    fd = directional_fd(params, cfg, X, Y, mask, "sum", {name: direction})
    wrong = float(grads[name][0, 0]) + 1e-3 * max(1.0, abs(fd))
    assert wrong != pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_chunking_gives_the_same_result():
    cfg = ModelConfig(d=5, d_qk=3, m=6, k=1, n_layers=2, pooling="mean", activation="gelu")
    params, X, Y, mask = make_problem(cfg, N=7, n=5, masked=True)
    loss, grads, trace = fastgrad.loss_and_grad_manual(params, cfg, X, Y, mask, "mean")
    for chunk_bytes in (1, 700, 10**9):  # one sample per chunk, a ragged last chunk, one chunk
        loss_c, grads_c, trace_c = fastgrad.loss_and_grad_manual(params, cfg, X, Y, mask, "mean", chunk_bytes=chunk_bytes)
        assert float(loss_c) == pytest.approx(float(loss), rel=1e-13)
        assert_grads_close(grads_c, grads, 1e-12)
        torch.testing.assert_close(trace_c.layers[1].Z, trace.layers[1].Z)
    assert fastgrad.chunk_samples(cfg, 5, F64, chunk_bytes=1) == 1
    assert fastgrad.chunk_samples(cfg, 5, F64, chunk_bytes=700) == 700 // (5 * 6 * 8)


def test_large_logits_take_the_shifted_softmax_and_stay_exact():
    # logits far beyond exp's range: the max-shift path must be taken and agree with autograd
    cfg = ModelConfig(d=4, d_qk=3, m=5, k=1, qk_scale=60.0)
    params, X, Y, mask = make_problem(cfg, N=4, n=5, masked=True)
    _, grads, trace = fastgrad.loss_and_grad_manual(params, cfg, X, Y, mask)
    _, ref, ref_trace = loss_and_grad(params, cfg, X, Y, mask, backend="autograd")
    assert torch.isfinite(trace.layers[0].A).all()
    torch.testing.assert_close(trace.layers[0].A, ref_trace.layers[0].A, rtol=1e-10, atol=1e-12)
    assert_grads_close(grads, ref, 1e-8)
    # float32 with moderate logits (fast path) and with large ones (shifted path)
    for qk_scale in (1.0, 30.0):
        cfg32 = cfg.replace(qk_scale=qk_scale)
        p32, X32, Y32, m32 = make_problem(cfg32, N=4, n=5, masked=True, dtype=torch.float32)
        _, g32, _ = fastgrad.loss_and_grad_manual(p32, cfg32, X32, Y32, m32)
        _, r32, _ = loss_and_grad(p32, cfg32, X32, Y32, m32, backend="autograd")
        assert all(torch.isfinite(v).all() for v in g32.values())
        assert_grads_close(g32, r32, 1e-3)


@pytest.mark.parametrize("expect_large", [False, True])
@pytest.mark.parametrize("dtype, big", [(F64, 1000.0), (F64, 650.0), (torch.float32, 70.0), (torch.float32, 1.0)])
def test_attention_probabilities_match_softmax_in_and_beyond_the_unshifted_range(dtype, big, expect_large):
    # sample 0 moderate; sample 1 has a row whose logits overflow exp; sample 2 a row whose logits
    # all underflow; sample 3 padded keys with huge logits: each must take the shifted path, with
    # either check (after the exp on the row sums, or before it on the logits)
    g = torch.Generator().manual_seed(3)
    c, n, w = 4, 5, 3
    K = torch.randn(c, n, w, generator=g, dtype=F64)
    QL = torch.randn(c, n, w, generator=g, dtype=F64)
    QL[1, 2] *= big
    QL[2, 0] = -big * K[2].mean(dim=0) / K[2].mean(dim=0).norm() ** 2  # all logits of row 0 ≈ −big
    K[3, 3:] *= big
    K, QL = K.to(dtype), QL.to(dtype)
    mask = torch.ones(c, n, dtype=torch.bool)
    mask[3, 3:] = False
    keymask = mask.to(dtype).view(c, n, 1)
    keybias = torch.zeros_like(keymask).masked_fill_(keymask == 0, -math.inf)
    out = torch.empty(c, n, n, dtype=dtype)
    shifted = fastgrad.softmax.attention_probs_(out, K, QL, keymask, keybias, expect_large)
    assert shifted == (big > 1.0)
    A = out.transpose(1, 2)  # (c, queries, keys)
    logits = (QL.double() @ K.double().transpose(1, 2)).masked_fill(~mask[:, None, :], -math.inf)
    expected = torch.softmax(logits, dim=-1)
    assert torch.isfinite(A).all()
    tol = 1e-12 if dtype == F64 else 1e-5
    torch.testing.assert_close(A.double(), expected, rtol=tol, atol=tol)


def test_softmax_path_memory_follows_the_regime_from_call_to_call():
    # each layer remembers whether its softmax needed the shift; a change of regime between calls
    # (large logits, then moderate, then large again) must still give autograd's gradients
    cfg = ModelConfig(d=4, d_qk=3, m=5, k=1, n_layers=2)
    params, X, Y, mask = make_problem(cfg, N=4, n=5, masked=True)
    fastgrad.clear_workspace()
    for scale, shifted in ((60.0, True), (1.0, False), (60.0, True)):
        p = {**params, "W_Q.0": params["W_Q.0"] * scale, "W_K.0": params["W_K.0"] * scale}
        _, grads, _ = fastgrad.loss_and_grad_manual(p, cfg, X, Y, mask)
        _, ref, _ = loss_and_grad(p, cfg, X, Y, mask, backend="autograd")
        assert_grads_close(grads, ref, 1e-8)
        assert fastgrad.workspace.WORKSPACE.shifted[0] is shifted


def test_attention_rows_are_distributions_over_real_keys():
    cfg = ModelConfig(d=4, d_qk=2, m=3, k=1)
    params, X, Y, mask = make_problem(cfg, N=3, n=4, masked=True)
    _, _, trace = fastgrad.loss_and_grad_manual(params, cfg, X, Y, mask)
    A = trace.layers[0].A  # (N, queries, keys)
    torch.testing.assert_close(A.sum(dim=-1), torch.ones(3, 4, dtype=F64))
    assert (A.masked_select(~mask[:, None, :].expand_as(A)) == 0).all()


def test_held_traces_survive_later_calls():
    """Output buffers are recycled only after the caller lets go of them."""
    cfg = ModelConfig(d=4, d_qk=3, m=5, k=1, n_layers=2)
    params, X, Y, mask = make_problem(cfg, N=5, n=4)
    _, grads1, trace1 = fastgrad.loss_and_grad_manual(params, cfg, X, Y, mask)
    keep = {f: getattr(trace1.layers[1], f).clone() for f in ("A", "Attn", "Z", "H")}
    keep_grads = {k: v.clone() for k, v in grads1.items()}
    Z_only = trace1.layers[0].Z.detach()  # a view alone must also keep its buffer alive
    Z_copy = Z_only.clone()
    del trace1
    for scale in (0.5, 2.0, 3.0, 4.0, 5.0):  # more calls than there are recycled buffers
        other = {k: v * scale for k, v in params.items()}
        fastgrad.loss_and_grad_manual(other, cfg, X, Y, mask)
    _, _, trace2 = fastgrad.loss_and_grad_manual(params, cfg, X, Y, mask)
    assert torch.equal(Z_only, Z_copy)
    for name, value in keep_grads.items():
        assert torch.equal(grads1[name], value)
    torch.testing.assert_close(trace2.layers[1].Z, keep["Z"])


def test_threads_do_not_share_buffers():
    cfg = ModelConfig(d=6, d_qk=4, m=8, k=1, n_layers=2)
    problems = [make_problem(cfg, N=40, n=6, seed=s) for s in range(2)]
    expected = [fastgrad.loss_and_grad_manual(p, cfg, X, Y, m)[1] for p, X, Y, m in problems]
    errors = []

    def work(i):
        p, X, Y, m = problems[i]
        for _ in range(30):
            _, grads, _ = fastgrad.loss_and_grad_manual(p, cfg, X, Y, m, chunk_bytes=2000)
            if max_rel_error(grads, expected[i]) > 1e-12:
                errors.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_backend_dispatch(monkeypatch):
    cfg = ModelConfig(d=4, d_qk=2, m=3, k=1)
    params, X, Y, mask = make_problem(cfg)
    _, _, trace = loss_and_grad(params, cfg, X, Y)
    assert trace.layers[0].A.stride() != trace.layers[0].A.contiguous().stride()  # the manual (keys-major) path
    monkeypatch.setenv(fastgrad.BACKEND_ENV, "autograd")
    assert fastgrad.default_backend() == "autograd"
    _, _, trace = loss_and_grad(params, cfg, X, Y)
    assert trace.layers[0].A.is_contiguous() and not trace.layers[0].Z.requires_grad
    monkeypatch.setenv(fastgrad.BACKEND_ENV, "magic")
    with pytest.raises(ConfigError):
        loss_and_grad(params, cfg, X, Y)
    monkeypatch.delenv(fastgrad.BACKEND_ENV)
    with pytest.raises(ConfigError):
        loss_and_grad(params, cfg, X, Y, backend="magic")
    with pytest.raises(ConfigError):
        fastgrad.loss_and_grad_manual(params, cfg, X, Y[..., :0])
    with pytest.raises(ConfigError):
        fastgrad.loss_and_grad_manual(params, cfg, X, Y, reduction="max")


def test_training_histories_agree_between_backends(monkeypatch):
    cfg = ModelConfig(d=4, d_qk=3, m=6, k=1, n_layers=2, pooling="mean")
    params, X, Y, mask = make_problem(cfg, N=6, n=5, masked=True)
    gd = GDConfig(lr=0.01, iterations=25, reduction="mean", record_every=5)
    fast = train_gd(params, cfg, X, Y, gd, mask).history
    monkeypatch.setenv(fastgrad.BACKEND_ENV, "autograd")
    slow = train_gd(params, cfg, X, Y, gd, mask).history
    for column in ("loss", "grad_norm", "sigma_min_Z", "sigma_max_Z"):
        torch.testing.assert_close(torch.tensor(fast[column].to_numpy()), torch.tensor(slow[column].to_numpy()),
                                   rtol=1e-9, atol=0.0, equal_nan=True)


@pytest.mark.parametrize(
    "cfg,masked",
    [
        (ModelConfig(d=6, d_qk=2, m=7, k=2, n_layers=2), False),  # d_qk ≤ d/2: unfolded in both
        (ModelConfig(d=4, d_qk=6, m=5, k=1, n_layers=3, pooling="mean"), True),  # d_qk > d: folded in both
    ],
)
def test_flop_formula_matches_autograds_matmuls(cfg, masked):
    """step_flops counts exactly the matmuls autograd runs, less the weight-only products."""
    N, n = 5, 7
    params, X, Y, mask = make_problem(cfg, N=N, n=n, masked=masked)
    counter = FlopCounterMode(display=False)
    with counter:
        loss_and_grad(params, cfg, X, Y, mask, backend="autograd")
    weight_only = 0
    if cfg.d_qk > cfg.d:  # W_Q W_Kᵀ forward and its two backward products
        weight_only = cfg.n_layers * 3 * 2 * cfg.d * cfg.d * cfg.d_qk
    assert fastgrad.step_flops(cfg, N, n)["total"] == counter.get_total_flops() - weight_only
    flops = fastgrad.step_flops(cfg, N, n)
    assert flops["total"] == flops["forward"] + flops["backward"]
    assert 1.5 * flops["forward"] < flops["backward"] < 2 * flops["forward"]


def test_every_trace_tensor_of_a_deep_model_is_recycled():
    """All layers' trace tensors come from the reused pool (not only the first two of each shape),
    so a GD loop on an L-layer model does not page-fault fresh memory for its trace every step."""
    cfg = ModelConfig(d=4, d_qk=3, m=5, k=1, n_layers=4)
    params, X, Y, mask = make_problem(cfg, N=5, n=4)
    fastgrad.clear_workspace()
    fastgrad.loss_and_grad_manual(params, cfg, X, Y, mask)  # results dropped: recyclable
    _, _, trace = fastgrad.loss_and_grad_manual(params, cfg, X, Y, mask)
    pooled = {t.untyped_storage().data_ptr() for pool in fastgrad.workspace.WORKSPACE.outputs.values() for t in pool}
    for layer in trace.layers:
        for name in ("A", "Attn", "Z", "H"):
            assert getattr(layer, name).untyped_storage().data_ptr() in pooled, name
