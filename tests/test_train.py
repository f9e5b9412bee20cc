"""Full-batch GD: exact gradients, monotone descent, determinism, divergence, clear errors."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from resgd.core.model import ModelConfig, init_params
from resgd.core.trainer import HISTORY_COLUMNS, ROW_FIELDS, DivergenceError, GDConfig, history_frame, train_gd
from resgd.core.autograd_reference import autograd_loss_and_grad
from resgd.core.loss import loss_from_output
from resgd.validation import ConfigError


def problem(N=3, n=4, d=5, k=2, pooling="none", masked=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, n, d, generator=g, dtype=torch.float64)
    Y = torch.randn(*((N, k) if pooling == "mean" else (N, n, k)), generator=g, dtype=torch.float64)
    mask = None
    if masked:
        mask = torch.ones(N, n, dtype=torch.bool)
        mask[0, -2:] = False
        mask[-1, -1] = False
    return X, Y, mask


def finite_difference(params, cfg, X, Y, mask, name, index, eps=1e-6):
    def loss_at(delta):
        shifted = {k: v.clone() for k, v in params.items()}
        shifted[name][index] += delta
        return float(autograd_loss_and_grad(shifted, cfg, X, Y, mask)[0])

    return (loss_at(eps) - loss_at(-eps)) / (2 * eps)


@pytest.mark.parametrize("n_layers", [1, 2])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("pooling", ["none", "mean"])
def test_gradients_match_central_finite_differences(n_layers, masked, pooling):
    X, Y, mask = problem(pooling=pooling, masked=masked)
    cfg = ModelConfig(d=5, d_qk=3, m=6, k=2, n_layers=n_layers, beta=0.7, pooling=pooling)
    params = init_params(cfg, seed=n_layers)
    _, grads, _ = autograd_loss_and_grad(params, cfg, X, Y, mask)
    g = torch.Generator().manual_seed(0)
    for name, weight in params.items():
        for _ in range(3):
            index = tuple(int(torch.randint(s, (1,), generator=g)) for s in weight.shape)
            numeric = finite_difference(params, cfg, X, Y, mask, name, index)
            assert grads[name][index].item() == pytest.approx(numeric, rel=1e-5, abs=1e-7), (name, index)


def test_masked_tokens_do_not_enter_the_loss():
    X, Y, mask = problem(masked=True)
    Y_hat = torch.zeros_like(Y)
    changed = Y.clone()
    changed[~mask] = 1e3
    assert loss_from_output(Y_hat, Y, mask, "sum") == loss_from_output(Y_hat, changed, mask, "sum")
    assert loss_from_output(Y_hat, Y, None, "mean") == pytest.approx(float(0.5 * Y.pow(2).sum() / 3))


def test_small_step_decreases_loss_monotonically_and_history_is_tidy():
    X, Y, _ = problem()
    cfg = ModelConfig(d=5, d_qk=3, m=6, k=2)
    result = train_gd(init_params(cfg, 0), cfg, X, Y, GDConfig(lr=1e-3, iterations=30, record_every=10))
    h = result.history
    assert list(h.columns) == list(HISTORY_COLUMNS) and len(h) == 31
    assert (h["loss"].diff().dropna() < 0).all()
    assert h["ratio"].iloc[:-1].between(0, 1).all() and math.isnan(h["ratio"].iloc[-1])
    recorded = h.dropna(subset=["sigma_min_Z"])["iteration"].tolist()
    assert recorded == [0, 10, 20, 30]
    assert (h["sigma_min_Z"].dropna() <= h["sigma_max_Z"].dropna()).all()


def test_training_does_not_modify_the_initial_params():
    X, Y, _ = problem()
    cfg = ModelConfig(d=5, d_qk=3, m=6, k=2)
    params = init_params(cfg, 0)
    before = {k: v.clone() for k, v in params.items()}
    after = train_gd(params, cfg, X, Y, GDConfig(lr=1e-2, iterations=3)).params
    assert all(torch.equal(before[k], params[k]) for k in params)
    assert not torch.equal(after["W_U"], params["W_U"])


def test_same_config_and_seed_give_identical_histories():
    X, Y, mask = problem(masked=True)
    cfg = ModelConfig(d=5, d_qk=3, m=6, k=2, n_layers=2)
    gd = GDConfig(lr=1e-3, iterations=20, record_every=5)
    first = train_gd(init_params(cfg, 7), cfg, X, Y, gd, mask).history
    second = train_gd(init_params(cfg, 7), cfg, X, Y, gd, mask).history
    pd.testing.assert_frame_equal(first, second, check_exact=True)
    third = train_gd(init_params(cfg, 8), cfg, X, Y, gd, mask).history
    assert not first["loss"].equals(third["loss"])


def test_float32_runs_and_agrees_with_float64_early_on():
    X, Y, _ = problem()
    cfg = ModelConfig(d=5, d_qk=3, m=6, k=2)
    gd = GDConfig(lr=1e-3, iterations=5)
    h64 = train_gd(init_params(cfg, 0), cfg, X, Y, gd).history
    h32 = train_gd(init_params(cfg, 0, dtype=torch.float32), cfg, X.float(), Y.float(), gd).history
    assert h32["loss"].to_numpy() == pytest.approx(h64["loss"].to_numpy(), rel=1e-4)


def test_a_history_is_the_same_from_tuples_dicts_or_an_array():
    rows = [(0, 2.0, 1.5, 0.25, 3.0), (1, 1.0, 0.5, math.nan, math.nan), (2, 0.0, 0.1, 0.5, 2.0)]
    frame = history_frame(rows)
    assert list(frame.columns) == list(HISTORY_COLUMNS) and frame["iteration"].dtype == np.int64
    assert frame["ratio"].tolist()[:2] == [0.5, 0.0] and math.isnan(frame["ratio"].iloc[-1])
    pd.testing.assert_frame_equal(history_frame([dict(zip(ROW_FIELDS, r)) for r in rows]), frame)
    pd.testing.assert_frame_equal(history_frame(np.array(rows)), frame)


def test_huge_step_raises_divergence_with_partial_history():
    X, Y, _ = problem()
    cfg = ModelConfig(d=5, d_qk=3, m=6, k=2)
    with pytest.raises(DivergenceError, match=r"smaller step size, e\.g\. lr=") as info:
        train_gd(init_params(cfg, 0), cfg, X, Y, GDConfig(lr=50.0, iterations=200))
    history = info.value.history
    assert 1 <= len(history) < 201
    last = history["loss"].iloc[-1]
    assert not math.isfinite(last) or last > 1e6 * history["loss"].iloc[0]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"lr": 0.0, "iterations": 1}, "GDConfig.lr: expected a finite step size > 0"),
        ({"lr": float("inf"), "iterations": 1}, "GDConfig.lr"),
        ({"lr": 0.1, "iterations": -1}, "GDConfig.iterations"),
        ({"lr": 0.1, "iterations": 1, "record_every": 0}, "GDConfig.record_every"),
        ({"lr": 0.1, "iterations": 1, "reduction": "max"}, "GDConfig.reduction: expected one of 'sum', 'mean'"),
        ({"lr": 0.1, "iterations": 1, "divergence_factor": 0.5}, "GDConfig.divergence_factor"),
    ],
)
def test_bad_gd_config_names_the_field(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        GDConfig(**kwargs)


def test_bad_targets_name_the_argument():
    X, Y, _ = problem()
    cfg = ModelConfig(d=5, d_qk=3, m=6, k=2)
    gd = GDConfig(lr=1e-3, iterations=1)
    with pytest.raises(ConfigError, match=r"Y: expected shape \(3, 4, 2\)"):
        train_gd(init_params(cfg, 0), cfg, X, Y[..., :1], gd)
    bad = Y.clone()
    bad[0, 0, 0] = float("inf")
    with pytest.raises(ConfigError, match=r"Y: contains NaN or inf"):
        train_gd(init_params(cfg, 0), cfg, X, bad, gd)
