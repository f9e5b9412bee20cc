"""Tests of resgd.theorem1: the exact special case, the rate and bound helpers, the sweep, the path checks, the regime map."""

from __future__ import annotations

import dataclasses

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from resgd.core import stats
from resgd.theorem1 import path, quantities, regime_map, study as theory
from resgd.theorem1 import sweep as certificate
from resgd.core.conditioning import spectrum
from resgd.core.model import ModelConfig, forward, init_params
from resgd.validation import ConfigError


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
    assert stats.empirical_rate(h) == pytest.approx(0.0731, rel=1e-12)
    assert stats.empirical_rate(h, 10, 20) == pytest.approx(0.0731, rel=1e-12)


def test_empirical_rate_window_and_nan():
    h = geometric_history(0.1)
    h.loc[h.iteration >= 25, "loss"] = h.loss.iloc[24] * np.exp(-0.5 * (h.iteration[h.iteration >= 25] - 24))
    assert stats.empirical_rate(h, 0, 25) == pytest.approx(0.1, rel=1e-10)
    assert stats.empirical_rate(h, 25, None) == pytest.approx(0.5, rel=1e-10)
    assert math.isnan(stats.empirical_rate(h, 3, 4))  # one point
    h.loc[:, "loss"] = 0.0
    assert math.isnan(stats.empirical_rate(h))  # log of zero is not finite
    assert stats.empirical_rate(geometric_history(-0.02)) == pytest.approx(-0.02)  # growing loss: negative


# --- spearman ------------------------------------------------------------------------------


def test_spearman_known_values():
    assert stats.spearman([1, 2, 3, 4, 5], [10, 20, 30, 40, 50]) == pytest.approx(1.0)
    assert stats.spearman([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    assert stats.spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    # ties get average ranks: ranks (1, 2.5, 2.5, 4) vs (1, 2, 3, 4): sqrt(0.9)
    assert stats.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(math.sqrt(0.9))
    # monotone transforms do not change it; non-finite pairs are dropped
    x = np.array([0.3, 1e-9, 5.0, 2.0, 0.7])
    y = np.array([1.0, 0.1, 9.0, 3.0, np.nan])
    assert stats.spearman(np.log(x), y) == pytest.approx(stats.spearman(x, y)) == pytest.approx(1.0)
    assert math.isnan(stats.spearman([1, 1, 1], [1, 2, 3]))


# --- bound_check ---------------------------------------------------------------------------


def test_bound_check_accepts_and_detects_violation():
    mu, alpha = 0.1, 0.5  # bound 0.95
    good = geometric_history(-math.log(0.9))
    res = quantities.bound_check(good, mu, alpha)
    assert res["fraction_obeyed"] == 1.0 and res["max_violation"] < 0
    assert res["tightness_median"] == pytest.approx(0.1 / 0.05)
    bad = good.copy()
    bad.loc[10, "loss"] = bad.loss[9] * 0.99  # 0.99 > 0.95 at step 9→10
    res = quantities.bound_check(bad, mu, alpha)
    assert res["fraction_obeyed"] < 1.0
    assert res["max_violation"] == pytest.approx(0.99 - 0.95)
    assert res["tightness_min"] == pytest.approx(0.01 / 0.05)
    diverging = good.copy()
    diverging.loc[5:, "loss"] = np.nan
    assert quantities.bound_check(diverging, mu, alpha)["fraction_obeyed"] < 1.0


# --- the exact special case ----------------------------------------------------------------


def test_readout_gd_matches_closed_form_and_predicted_factor():
    F, _ = features([3.0, 2.0, 1.0], rows=12)
    g = torch.Generator().manual_seed(1)
    Y = torch.randn(12, 2, generator=g, dtype=torch.float64)
    frame = quantities.readout_gd(F, Y, iterations=120)
    predicted = (1 - 1 / 9) ** 2
    assert frame.attrs["rho"] == pytest.approx(predicted, rel=1e-14)
    assert frame.attrs["rate_ratio"] == pytest.approx(1 / 9, rel=1e-12)
    # the excess follows the closed form and Φ* is the least-squares residual
    ok = frame["excess"] > 1e-20
    assert np.allclose(frame.loc[ok, "excess"], frame.loc[ok, "predicted"], rtol=1e-9, atol=0)
    W = torch.linalg.lstsq(F, Y).solution
    assert frame["phi_star"].iloc[0] == pytest.approx(0.5 * float((F @ W - Y).pow(2).sum()), rel=1e-10)
    # late contraction of Φ − Φ* equals (1 − σ_min²/σ_max²)² to 1e-8 (second mode ratio (0.5/0.89)^2t)
    s = quantities.readout_summary(frame)
    assert abs(s["measured_factor"] - predicted) < 1e-8
    assert abs(s["fitted_factor"] - predicted) < 1e-8


def test_readout_gd_error_on_slowest_mode_contracts_exactly():
    F, U = features([2.0, 1.5, 0.5], rows=9, seed=3)
    Y = -U[:, 2:3] * 0.7  # E₀ = −Y lies on the slowest left singular vector
    frame = quantities.readout_gd(F, Y, iterations=40)
    ratio = (frame["excess"].shift(-1) / frame["excess"]).dropna()
    assert np.max(np.abs(ratio.to_numpy() - (1 - 0.25 / 4.0) ** 2)) < 1e-8
    assert frame["phi_star"].iloc[0] < 1e-28  # Y in the column space: realizable


# --- model-level quantities ----------------------------------------------------------------


def test_predicted_ratio_increases_with_beta_on_collapsed_attention():
    # qk_scale = 0: every logit is 0, attention is uniform (rank-1 rows per sample): collapsed.
    X, _ = quantities.make_task(3, 4, 16, seed=0)
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
    c = certificate.base_config(p)
    cfg, (X, _) = c.model_config(), c.task()
    params = init_params(cfg, 0)
    Z = forward(params, cfg, X, return_trace=True).layers[0].Z.reshape(-1, cfg.d)
    alpha = quantities.theorem_alpha(params, cfg, X)
    assert alpha == pytest.approx(0.25 * cfg.residual_ffn**2 * float(torch.linalg.svdvals(Z)[-1]) ** 2)
    assert quantities.row_sigma_min(Z.T) == 0.0  # tall: some vector escapes Mᵀ


def test_make_task_orthogonal_and_realizability_guard():
    X, Y = quantities.make_task(4, 4, 32, seed=2)
    s = torch.linalg.svdvals(X.reshape(16, 32))
    assert torch.allclose(s, torch.full_like(s, math.sqrt(32)))
    assert Y.shape == (4, 4, 1)
    with pytest.raises(ValueError):
        quantities.make_task(8, 6, 8, seed=0)  # N·n > d cannot be orthogonal


def test_shapes_table_lists_every_symbol():
    table = quantities.shapes_table(ModelConfig(d=8, d_qk=3, m=5), N=2, n=4)
    assert list(table["symbol"]) == ["X", "W_Q", "W_K", "W_V", "A", "Z", "W_1", "W_2", "H", "W_U", "Ŷ"]
    shapes = dict(zip(table["symbol"], table["shape"]))
    assert shapes["W_Q"] == "(8, 3)" and shapes["W_2"] == "(5, 8)" and shapes["Ŷ"] == "(2, 4, 1)"


def test_settings_table_says_every_setting_in_words():
    cfg = ModelConfig(d=8, d_qk=3, m=5)
    table = quantities.settings_table(cfg)
    assert list(table.index) == [f.name for f in dataclasses.fields(cfg)] and table["meaning"].str.len().gt(0).all()
    assert table.loc["gains", "value"] == "none" and table.loc["beta_ffn", "value"] == "1.0 (follows beta)"
    assert "()" not in set(table["value"]) and "None" not in set(table["value"])
    twin = quantities.settings_table(ModelConfig(d=8, d_qk=3, m=5, beta_ffn=0.5, gains=((2.0, 1.0),)))
    assert twin.loc["gains", "value"] == "((2.0, 1.0),)" and twin.loc["beta_ffn", "value"] == "0.5"


# --- the sweep -----------------------------------------------------------------------------


def tiny_configs():
    shared = dict(N=2, n=3, d=8, m=8)
    return [certificate.SweepConfig(beta=b, d_qk=4, init_scale=1.0, seed=s, **shared) for b in (0.0, 1.0) for s in (0, 1)]


def test_rate_sweep_columns_and_determinism():
    configs = tiny_configs()
    a = certificate.rate_sweep(configs, iterations=30)
    b = certificate.rate_sweep(configs[::-1], iterations=30)[::-1].reset_index(drop=True)
    assert list(a.columns) == certificate.SWEEP_COLUMNS
    assert len(a) == 4 and not a["diverged"].any()
    pd.testing.assert_frame_equal(a, b)
    assert (a["lr"] > 0).all() and (a["alpha"] >= 0).all()
    assert a["empirical_rate"].notna().all()
    # with the residual, the rate and the predicted ratio are larger than without
    assert a.loc[a.beta == 1.0, "rate_ratio"].min() > a.loc[a.beta == 0.0, "rate_ratio"].max()
    summary = certificate.sweep_summary(a)
    assert summary["n_configs"] == 4


def test_sweep_configs_quick_has_at_least_50():
    assert len(certificate.sweep_configs(theory.preset(True))) >= 50
    assert len(certificate.sweep_configs(theory.preset(False))) >= len(certificate.sweep_configs(theory.preset(True)))


def test_sigma_trajectory_chunks_match_one_run():
    c = tiny_configs()[3]
    traj = theory.sigma_trajectory(c, 12, record_every=4)
    history, info = certificate.train_config(c, 12, record_every=4)
    merged = traj.merge(history, on="iteration", suffixes=("", "_h"))
    assert list(merged["iteration"]) == [0, 4, 8, 12]
    assert np.allclose(merged["loss"], merged["loss_h"], rtol=1e-12)
    assert traj["lr"].iloc[0] == pytest.approx(info["lr"])


def tiny_preset() -> dict:
    tiny = theory.preset(True)
    tiny.update(N=2, n=3, d=8, m=8, betas=(0.0, 1.0), d_qks=(4,), init_scales=(1.0,), seeds=(0,), iterations=20,
                setup_iterations=10, trajectory_iterations=10, n_jobs=1, checkpoints=2, hess_iterations=3,
                special={**tiny["special"], "iterations": 20},
                regime={**tiny["regime"], "target_scales": (0.1, 10.0), "lr_factors": (0.5,), "out_scales": (0.1,),
                        "qk_rels": (1.0,), "seeds": (0, 1), "book_seeds": (0,)})
    return tiny


def test_reproduce_writes_every_figure(tmp_path, monkeypatch):
    tiny = tiny_preset()
    monkeypatch.setattr(theory, "preset", lambda quick: tiny)
    paths = theory.reproduce_theorem1(True, tmp_path, n_jobs=1)
    paths |= theory.reproduce_setup(True, tmp_path, n_jobs=1)
    for name in map(theory.figure_name, theory.FIGURE_KINDS):
        assert paths[name] == tmp_path / f"{name}.png" and paths[name].stat().st_size > 0
        assert (tmp_path / f"{name}.pdf").stat().st_size > 0
    sweep = pd.read_csv(paths["02_theorem1_sweep.csv"])
    assert len(sweep) == 2 and set(certificate.SWEEP_COLUMNS) <= set(sweep.columns)
    regime = pd.read_csv(paths["02_theorem1_regime_map.csv"])
    assert len(regime) == 4  # the command line runs the whole grid: both seeds
    assert set(regime["verdict"]) <= set(regime_map.VERDICTS)


def test_make_figure_knows_every_kind_and_rejects_others():
    assert set(theory.FIGURE_TABLES) == set(theory.FIGURE_KINDS)
    with pytest.raises(ConfigError, match="figure kind"):
        theory.make_figure(pd.DataFrame(), "nope")
    with pytest.raises(ConfigError, match="figure kind"):
        theory.figure_name("nope")


# --- the hypotheses along the path ----------------------------------------------------------


def test_path_checks_in_the_lazy_regime_and_out_of_it():
    lazy = certificate.SweepConfig(beta=1.0, d_qk=4, init_scale=1.0, seed=0, N=2, n=3, d=8, m=8)
    far = replace(lazy, target_scale=30.0)
    rows = certificate.run_configs([lazy], 60, checkpoints=3, hess_iterations=5)
    row = rows[0]
    assert row["n_checkpoints"] == 4 and row["A2"] and row["A6"]
    assert row["in_regime"] and row["fraction_obeyed"] == 1.0
    # the distance at the checkpoints never exceeds the path length, which the induction bounds by rho
    assert row["max_distance"] <= row["max_path_length"] * (1 + 1e-9) <= row["rho"]
    # c = 2 > 1 breaks (A6) at theta0 whatever happens next; far targets leave the regime
    assert not certificate.run_configs([lazy], 20, lr_factor=2.0, checkpoints=2, hess_iterations=3)[0]["A6"]
    assert not certificate.run_configs([far], 60, lr_factor=0.5, checkpoints=3, hess_iterations=5)[0]["in_regime"]


def test_path_summary_verdicts_on_hand_made_points():
    history = pd.DataFrame({"iteration": [0, 1, 2], "loss": [2.0, 1.0, 0.5], "grad_norm": [1.0, 1.0, 1.0]})
    base = {"distance": 0.0, "sigma_M_H": 1.0, "jacobian_norm": 1.0, "smoothness": 1.0}
    ok = path.path_summary([base, base | {"distance": 0.1}], history, mu=0.5, alpha=0.25, beta_ffn=1.0,
                           sigma_M_Z0=1.0, realizable=True)
    # rho = 2 * (2 * 1) * sqrt(2 * 2) / 0.25 = 32; path length = 0.5 * (1 + 1) = 1
    assert ok["rho"] == pytest.approx(32.0) and ok["max_path_length"] == pytest.approx(1.0)
    assert ok["in_regime"]
    assert not path.path_summary([base, base | {"sigma_M_H": 0.49}], history, mu=0.5, alpha=0.25, beta_ffn=1.0,
                                 sigma_M_Z0=1.0, realizable=True)["A3_path"]
    assert not path.path_summary([base, base | {"jacobian_norm": 2.01}], history, mu=0.5, alpha=0.25, beta_ffn=1.0,
                                 sigma_M_Z0=1.0, realizable=True)["A4_path"]
    assert not path.path_summary([base, base | {"distance": 33.0}], history, mu=0.5, alpha=0.25, beta_ffn=1.0,
                                 sigma_M_Z0=1.0, realizable=True)["A5_path"]
    assert not path.path_summary([base, base], history, mu=0.5, alpha=0.25, beta_ffn=1.0, sigma_M_Z0=1.0,
                                 realizable=False)["in_regime"]


def test_regime_verdicts_and_summary():
    rows = pd.DataFrame([
        {"in_regime": True, "fraction_obeyed": 1.0, "diverged": False, "tightness_median": 8.0},
        {"in_regime": True, "fraction_obeyed": 1.0, "diverged": False, "tightness_median": 12.0},
        {"in_regime": False, "fraction_obeyed": 1.0, "diverged": False, "tightness_median": 3.0},
        {"in_regime": False, "fraction_obeyed": 0.9, "diverged": False, "tightness_median": 3.0},
        {"in_regime": True, "fraction_obeyed": 0.9, "diverged": False, "tightness_median": 3.0},
    ])
    assert [regime_map.verdict(r) for _, r in rows.iterrows()] == list(regime_map.VERDICTS)
    rows["verdict"] = list(regime_map.VERDICTS)
    rows["lr_factor"] = [0.5, 0.5, 0.5, 0.5, 2.0]
    rows["target_scale"] = [0.1, 0.1, 1.0, 3.0, 0.1]
    summary = regime_map.regime_summary(rows)
    assert (summary["n_in_regime"], summary["n_obeyed"], summary["n_informative"]) == (3, 3, 2)
    assert summary["first_fail_target"] == 3.0 and summary["first_out_of_regime_target"] == 1.0
    words = regime_map.regime_phrases(summary)
    assert (words["points"], words["in-regime-are"], words["true-and-informative-are"]) == ("5 points", "3 are", "1 is")
    assert (words["c-above-1-points"], words["c-above-1-obey"], words["fails-outside"]) == ("1 point", "obey", "1 point fails")


def test_sweep_phrases_agree_with_their_counts():
    words = certificate.sweep_phrases({"n_configs": 1, "n_all_obeyed": 0, "n_vacuous": 1, "n_in_regime": 2})
    assert words == {"configs": "1 configuration", "runs": "1 run", "all-obeyed": "0 configurations",
                     "vacuous-are": "1 configuration is", "in-regime-are": "are"}


def test_regime_configs_book_subset_and_whole_grid():
    p = theory.preset(False)
    r = p["regime"]
    whole, book = regime_map.regime_configs(p, whole=True), regime_map.regime_configs(p, whole=False)
    per_seed = len(r["target_scales"]) * len(r["out_scales"]) * len(r["qk_rels"]) * len(r["lr_factors"])
    assert len(whole) == per_seed * len(r["seeds"]) and len(book) == per_seed * len(r["book_seeds"])
    assert max(c for c, _ in whole) == 2.0 and {cfg.target_scale for _, cfg in whole} == set(r["target_scales"])


def test_reproduce_parts_split_the_figures(tmp_path, monkeypatch):
    tiny = theory.preset(True)
    tiny.update(setup_iterations=5)
    monkeypatch.setattr(theory, "preset", lambda quick: tiny)
    paths = theory.reproduce_setup(True, tmp_path)
    assert set(paths) == {"01_setup_loss", "01_setup_loss.pdf"}


def test_no_literal_figure_name_in_the_theory_notebooks():
    """The notebooks name their figures through theory.figure_name, never by typing them."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "notebooks"
    text = (root / "01_setup.md").read_text() + (root / "02_theorem1.md").read_text()
    for name in map(theory.figure_name, theory.FIGURE_KINDS):
        assert name not in text, f"{name!r} typed in a notebook"
