"""Tests of resgd.theorem1.study: the exact special case, the rate and bound helpers, the sweep."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from resgd.theorem1 import study as theory
from resgd.core.conditioning import spectrum
from resgd.core.model import ModelConfig, forward, init_params


def geometric_history(rate: float, T: int = 50, phi0: float = 3.0) -> pd.DataFrame:
    t = np.arange(T + 1)
    return pd.DataFrame({"iteration": t, "loss": phi0 * np.exp(-rate * t)})


def features(singular, rows=12, seed=0):
    """A rows×d matrix with the given singular values (d = len(singular))."""
    g = torch.Generator().manual_seed(seed)
    U, _ = torch.linalg.qr(torch.randn(rows, len(singular), generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(len(singular), len(singular), generator=g, dtype=torch.float64))
    return U @ torch.diag(torch.tensor(singular, dtype=torch.float64)) @ V.T, U


# --- empirical_rate ------------------------------------------------------------------------


def test_empirical_rate_recovers_geometric_rate():
    h = geometric_history(0.0731)
    assert theory.empirical_rate(h) == pytest.approx(0.0731, rel=1e-12)
    assert theory.empirical_rate(h, 10, 20) == pytest.approx(0.0731, rel=1e-12)


def test_empirical_rate_window_and_nan():
    h = geometric_history(0.1)
    h.loc[h.iteration >= 25, "loss"] = h.loss.iloc[24] * np.exp(-0.5 * (h.iteration[h.iteration >= 25] - 24))
    assert theory.empirical_rate(h, 0, 25) == pytest.approx(0.1, rel=1e-10)
    assert theory.empirical_rate(h, 25, None) == pytest.approx(0.5, rel=1e-10)
    assert math.isnan(theory.empirical_rate(h, 3, 4))  # one point
    h.loc[:, "loss"] = 0.0
    assert math.isnan(theory.empirical_rate(h))  # log of zero is not finite
    assert theory.empirical_rate(geometric_history(-0.02)) == pytest.approx(-0.02)  # growing loss: negative


# --- spearman ------------------------------------------------------------------------------


def test_spearman_known_values():
    assert theory.spearman([1, 2, 3, 4, 5], [10, 20, 30, 40, 50]) == pytest.approx(1.0)
    assert theory.spearman([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    assert theory.spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    # ties get average ranks: ranks (1, 2.5, 2.5, 4) vs (1, 2, 3, 4): sqrt(0.9)
    assert theory.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(math.sqrt(0.9))
    # monotone transforms do not change it; non-finite pairs are dropped
    x = np.array([0.3, 1e-9, 5.0, 2.0, 0.7])
    y = np.array([1.0, 0.1, 9.0, 3.0, np.nan])
    assert theory.spearman(np.log(x), y) == pytest.approx(theory.spearman(x, y)) == pytest.approx(1.0)
    assert math.isnan(theory.spearman([1, 1, 1], [1, 2, 3]))


# --- bound_check ---------------------------------------------------------------------------


def test_bound_check_accepts_and_detects_violation():
    mu, alpha = 0.1, 0.5  # bound 0.95
    good = geometric_history(-math.log(0.9))
    res = theory.bound_check(good, mu, alpha)
    assert res["fraction_obeyed"] == 1.0 and res["max_violation"] < 0
    assert res["tightness_median"] == pytest.approx(0.1 / 0.05)
    bad = good.copy()
    bad.loc[10, "loss"] = bad.loss[9] * 0.99  # 0.99 > 0.95 at step 9→10
    res = theory.bound_check(bad, mu, alpha)
    assert res["fraction_obeyed"] < 1.0
    assert res["max_violation"] == pytest.approx(0.99 - 0.95)
    assert res["tightness_min"] == pytest.approx(0.01 / 0.05)
    diverging = good.copy()
    diverging.loc[5:, "loss"] = np.nan
    assert theory.bound_check(diverging, mu, alpha)["fraction_obeyed"] < 1.0


# --- the exact special case ----------------------------------------------------------------


def test_readout_gd_matches_closed_form_and_predicted_factor():
    F, _ = features([3.0, 2.0, 1.0], rows=12)
    g = torch.Generator().manual_seed(1)
    Y = torch.randn(12, 2, generator=g, dtype=torch.float64)
    frame = theory.readout_gd(F, Y, iterations=120)
    predicted = (1 - 1 / 9) ** 2
    assert frame.attrs["rho"] == pytest.approx(predicted, rel=1e-14)
    assert frame.attrs["rate_ratio"] == pytest.approx(1 / 9, rel=1e-12)
    # the excess follows the closed form and Φ* is the least-squares residual
    ok = frame["excess"] > 1e-20
    assert np.allclose(frame.loc[ok, "excess"], frame.loc[ok, "predicted"], rtol=1e-9, atol=0)
    W = torch.linalg.lstsq(F, Y).solution
    assert frame["phi_star"].iloc[0] == pytest.approx(0.5 * float((F @ W - Y).pow(2).sum()), rel=1e-10)
    # late contraction of Φ − Φ* equals (1 − σ_min²/σ_max²)² to 1e-8 (second mode ratio (0.5/0.89)^2t)
    s = theory.readout_summary(frame)
    assert abs(s["measured_factor"] - predicted) < 1e-8
    assert abs(s["fitted_factor"] - predicted) < 1e-8


def test_readout_gd_error_on_slowest_mode_contracts_exactly():
    F, U = features([2.0, 1.5, 0.5], rows=9, seed=3)
    Y = -U[:, 2:3] * 0.7  # E₀ = −Y lies on the slowest left singular vector
    frame = theory.readout_gd(F, Y, iterations=40)
    ratio = (frame["excess"].shift(-1) / frame["excess"]).dropna()
    assert np.max(np.abs(ratio.to_numpy() - (1 - 0.25 / 4.0) ** 2)) < 1e-8
    assert frame["phi_star"].iloc[0] < 1e-28  # Y in the column space: realizable


# --- model-level quantities ----------------------------------------------------------------


def test_predicted_ratio_increases_with_beta_on_collapsed_attention():
    # qk_scale = 0: every logit is 0, attention is uniform (rank-1 rows per sample): collapsed.
    X, _ = theory.make_task(3, 4, 16, seed=0)
    ratios = []
    for beta in (0.0, 0.1, 0.25, 0.5, 0.75, 1.0):
        cfg = ModelConfig(d=16, d_qk=4, m=8, beta=beta, qk_scale=0.0)
        layers = forward(init_params(cfg, 0), cfg, X, return_trace=True).layers[0]
        assert spectrum(layers.Attn).stable_rank < 3.5  # Attn rank <= N = 3
        ratios.append(spectrum(layers.Z).rate_ratio)
    assert ratios[0] < 1e-20
    assert all(b > a for a, b in zip(ratios, ratios[1:]))


def test_theorem_alpha_and_row_sigma_min():
    p = theory.preset(True)
    c = theory.base_config(p)
    cfg, (X, _) = c.model_config(), c.task()
    params = init_params(cfg, 0)
    Z = forward(params, cfg, X, return_trace=True).layers[0].Z.reshape(-1, cfg.d)
    alpha = theory.theorem_alpha(params, cfg, X)
    assert alpha == pytest.approx(0.25 * cfg.residual_ffn**2 * float(torch.linalg.svdvals(Z)[-1]) ** 2)
    assert theory.row_sigma_min(Z.T) == 0.0  # tall: some vector escapes Mᵀ


def test_make_task_orthogonal_and_realizability_guard():
    X, Y = theory.make_task(4, 4, 32, seed=2)
    s = torch.linalg.svdvals(X.reshape(16, 32))
    assert torch.allclose(s, torch.full_like(s, math.sqrt(32)))
    assert Y.shape == (4, 4, 1)
    with pytest.raises(ValueError):
        theory.make_task(8, 6, 8, seed=0)  # N·n > d cannot be orthogonal


def test_shapes_table_lists_every_symbol():
    table = theory.shapes_table(ModelConfig(d=8, d_qk=3, m=5), N=2, n=4)
    assert list(table["symbol"]) == ["X", "W_Q", "W_K", "W_V", "A", "Z", "W_1", "W_2", "H", "W_U", "Ŷ"]
    shapes = dict(zip(table["symbol"], table["shape"]))
    assert shapes["W_Q"] == "(8, 3)" and shapes["W_2"] == "(5, 8)" and shapes["Ŷ"] == "(2, 4, 1)"


# --- the sweep -----------------------------------------------------------------------------


def tiny_configs():
    shared = dict(N=2, n=3, d=8, m=8)
    return [theory.SweepConfig(beta=b, d_qk=4, init_scale=1.0, seed=s, **shared) for b in (0.0, 1.0) for s in (0, 1)]


def test_rate_sweep_columns_and_determinism():
    configs = tiny_configs()
    a = theory.rate_sweep(configs, iterations=30)
    b = theory.rate_sweep(configs[::-1], iterations=30)[::-1].reset_index(drop=True)
    assert list(a.columns) == theory.SWEEP_COLUMNS
    assert len(a) == 4 and not a["diverged"].any()
    pd.testing.assert_frame_equal(a, b)
    assert (a["lr"] > 0).all() and (a["alpha"] >= 0).all()
    assert a["empirical_rate"].notna().all()
    # with the residual, the rate and the predicted ratio are larger than without
    assert a.loc[a.beta == 1.0, "rate_ratio"].min() > a.loc[a.beta == 0.0, "rate_ratio"].max()
    summary = theory.sweep_summary(a)
    assert summary["n_configs"] == 4


def test_sweep_configs_quick_has_at_least_50():
    assert len(theory.sweep_configs(theory.preset(True))) >= 50
    assert len(theory.sweep_configs(theory.preset(False))) >= len(theory.sweep_configs(theory.preset(True)))


def test_sigma_trajectory_chunks_match_one_run():
    c = tiny_configs()[3]
    traj = theory.sigma_trajectory(c, 12, record_every=4)
    history, info = theory.train_config(c, 12, record_every=4)
    merged = traj.merge(history, on="iteration", suffixes=("", "_h"))
    assert list(merged["iteration"]) == [0, 4, 8, 12]
    assert np.allclose(merged["loss"], merged["loss_h"], rtol=1e-12)
    assert traj["lr"].iloc[0] == pytest.approx(info["lr"])


def test_reproduce_writes_every_figure(tmp_path, monkeypatch):
    tiny = theory.preset(True)
    tiny.update(N=2, n=3, d=8, m=8, betas=(0.0, 1.0), d_qks=(4,), init_scales=(1.0,), seeds=(0,), iterations=20,
                setup_iterations=10, trajectory_iterations=10, n_jobs=1,
                special={**tiny["special"], "iterations": 20})
    monkeypatch.setattr(theory, "preset", lambda quick: tiny)
    paths = theory.reproduce(quick=True, directory=tmp_path)
    for name in theory.FIGURE_NAMES.values():
        assert paths[name] == tmp_path / f"{name}.png" and paths[name].stat().st_size > 0
        assert (tmp_path / f"{name}.pdf").stat().st_size > 0
    sweep = pd.read_csv(paths["02_theorem1_sweep.csv"])
    assert len(sweep) == 2 and set(theory.SWEEP_COLUMNS) <= set(sweep.columns)


def test_reproduce_parts_split_the_figures(tmp_path, monkeypatch):
    tiny = theory.preset(True)
    tiny.update(setup_iterations=5)
    monkeypatch.setattr(theory, "preset", lambda quick: tiny)
    paths = theory.reproduce_setup(quick=True, directory=tmp_path)
    assert set(paths) == {"01_setup_loss", "01_setup_loss.pdf"}
