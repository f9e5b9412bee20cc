"""The model: shapes, softmax, residual rank properties, and clear errors on bad input."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from resgd.core.conditioning import spectrum
from resgd.core.model import ModelConfig, attention_logits, attention_probs, forward, init_params, weight_shapes
from resgd.validation import ConfigError

torch.set_default_dtype(torch.float64)


def batch(N=4, n=5, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, n, d, generator=g, dtype=torch.float64)


def test_shapes_per_token_and_pooled():
    X = batch()
    for pooling, expected in (("none", (4, 5, 3)), ("mean", (4, 3))):
        cfg = ModelConfig(d=6, d_qk=4, m=7, k=3, n_layers=2, pooling=pooling)
        trace = forward(init_params(cfg, 0), cfg, X, return_trace=True)
        assert tuple(trace.Y_hat.shape) == expected
        assert len(trace.layers) == 2
        layer = trace.layers[0]
        assert layer.A.shape == (4, 5, 5) and layer.Z.shape == X.shape and layer.H.shape == X.shape


def test_weight_shapes_follow_the_config():
    cfg = ModelConfig(d=6, d_qk=4, m=7, k=3, n_layers=2)
    shapes = weight_shapes(cfg)
    assert shapes["W_Q.1"] == (6, 4) and shapes["W_V.0"] == (6, 6) and shapes["W_1.0"] == (6, 7)
    assert shapes["W_2.1"] == (7, 6) and shapes["W_U"] == (6, 3) and len(shapes) == 11


def test_init_is_seeded_and_scaled():
    cfg = ModelConfig(d=64, d_qk=64, m=64, qk_scale=2.0, out_scale=0.0)
    a, b, c = init_params(cfg, 1), init_params(cfg, 1), init_params(cfg, 2)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["W_Q.0"], c["W_Q.0"])
    assert a["W_Q.0"].std().item() == pytest.approx(2.0 / math.sqrt(64), rel=0.1)
    assert torch.count_nonzero(a["W_U"]) == 0
    assert init_params(cfg, 1, dtype=torch.float32)["W_Q.0"].dtype == torch.float32


def test_softmax_rows_sum_to_one_and_mask_zeroes_padded_keys():
    X = batch()
    cfg = ModelConfig(d=6, d_qk=3, m=4)
    p = init_params(cfg, 0)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1, 3:] = False
    A = attention_probs(attention_logits(X, p["W_Q.0"], p["W_K.0"], cfg.logit_divisor), mask)
    assert torch.allclose(A.sum(-1), torch.ones(4, 5))
    assert torch.all(A[1, :, 3:] == 0)
    assert torch.all(A[0] > 0)


def test_padded_tokens_do_not_change_pooled_output():
    cfg = ModelConfig(d=6, d_qk=3, m=4, pooling="mean")
    p = init_params(cfg, 0)
    X = batch(N=1, n=3)
    padded = torch.cat([X, 100 * torch.randn(1, 2, 6)], dim=1)
    mask = torch.tensor([[True, True, True, False, False]])
    assert torch.allclose(forward(p, cfg, X), forward(p, cfg, padded, mask))


def test_large_d_qk_association_matches_direct_product():
    X = batch(d=4)
    g = torch.Generator().manual_seed(3)
    W_Q, W_K = torch.randn(4, 64, generator=g), torch.randn(4, 64, generator=g)
    direct = (X @ W_Q) @ (X @ W_K).transpose(-1, -2) / 8.0
    assert torch.allclose(attention_logits(X, W_Q, W_K, 8.0), direct)


def test_uniform_attention_gives_rank_one_attn():
    """Zero query/key weights make every row of A uniform, so Attn(X) = 1 (mean token W_V)ᵀ: rank 1 per sample."""
    cfg = ModelConfig(d=6, d_qk=3, m=4, qk_scale=0.0)
    trace = forward(init_params(cfg, 0), cfg, batch(N=1), return_trace=True).layers[0]
    assert torch.allclose(trace.A, torch.full_like(trace.A, 1 / 5))
    assert spectrum(trace.Attn).rank1_distance < 1e-12


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 8),
    d=st.integers(1, 6),
    N=st.integers(1, 4),
    beta=st.floats(0.05, 1.0),
    qk_scale=st.sampled_from([0.0, 1.0, 10.0]),
    seed=st.integers(0, 10_000),
)
def test_residual_keeps_z_full_column_rank(n, d, N, beta, qk_scale, seed):
    if N * n < d:
        d = N * n  # X must be able to have full column rank
    X = batch(N=N, n=n, d=d, seed=seed)
    assert spectrum(X).sigma_min > 1e-8
    cfg = ModelConfig(d=d, d_qk=3, m=4, beta=beta, qk_scale=qk_scale)
    Z = forward(init_params(cfg, seed), cfg, X, return_trace=True).layers[0].Z
    assert spectrum(Z).sigma_min > 1e-10


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("beta", 1.5, "ModelConfig.beta: expected a number in [0, 1]"),
        ("beta", -0.1, "ModelConfig.beta"),
        ("beta_ffn", 2.0, "ModelConfig.beta_ffn"),
        ("d_qk", 0, "ModelConfig.d_qk: expected an integer >= 1"),
        ("n_layers", 0, "ModelConfig.n_layers"),
        ("activation", "tanh", "ModelConfig.activation: expected one of 'relu', 'gelu', 'softplus'"),
        ("logit_scale", "cube", "ModelConfig.logit_scale"),
        ("pooling", "max", "ModelConfig.pooling"),
        ("init", "xavier", "ModelConfig.init"),
        ("qk_scale", float("nan"), "ModelConfig.qk_scale"),
    ],
)
def test_bad_config_names_the_field(field, value, message):
    kwargs = {"d": 4, "d_qk": 4, "m": 4, field: value}
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ModelConfig(**kwargs)


def test_bad_inputs_name_the_argument():
    cfg = ModelConfig(d=6, d_qk=3, m=4)
    p = init_params(cfg, 0)
    X = batch()
    with pytest.raises(ConfigError, match=r"X: expected a 3-D tensor"):
        forward(p, cfg, X[0])
    with pytest.raises(ConfigError, match=r"X: expected d = 6"):
        forward(p, cfg, X[..., :5])
    bad = X.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ConfigError, match=r"X: contains NaN or inf"):
        forward(p, cfg, bad)
    with pytest.raises(ConfigError, match=r"mask: expected dtype torch.bool"):
        forward(p, cfg, X, torch.ones(4, 5))
    with pytest.raises(ConfigError, match=r"mask: expected shape \(4, 5\)"):
        forward(p, cfg, X, torch.ones(4, 4, dtype=torch.bool))
    empty = torch.ones(4, 5, dtype=torch.bool)
    empty[2] = False
    with pytest.raises(ConfigError, match=r"at least one real token"):
        forward(p, cfg, X, empty)
    with pytest.raises(ConfigError, match=r"X: expected a torch.Tensor"):
        forward(p, cfg, X.numpy())
