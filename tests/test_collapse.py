"""Tests of resgd.collapse.study: rank collapse, the σ_min(Z) lower bound, the sweep and the figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resgd.collapse import inputs, training
from resgd.collapse import study as collapse
from resgd.core.conditioning import singular_values, spectrum
from resgd.core.model import ModelConfig, forward, init_params
from resgd.validation import ConfigError


def _uniform_trace(N: int, n: int, d: int, beta: float, seed: int, v_scale: float = 1.0):
    """A forward pass with W_Q = W_K = 0 (qk_scale=0): every logit is 0, attention exactly uniform."""
    X = inputs.make_input(N, n, d, input_seed=seed)
    cfg = ModelConfig(d=d, d_qk=3, m=4, beta=beta, qk_scale=0.0, v_scale=v_scale)
    with torch.no_grad():
        return X, forward(init_params(cfg, seed), cfg, X, return_trace=True).layers[0]


# ------------------------------------------------------------------ uniform attention ⇒ rank 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    N=st.integers(1, 4),
    d=st.integers(1, 6),
    extra=st.integers(1, 6),
    beta=st.floats(0.05, 1.0),
    v_scale=st.floats(0.1, 10.0),
    seed=st.integers(0, 10_000),
)
def test_uniform_attention_collapses_attn_but_not_z(N, d, extra, beta, v_scale, seed):
    n = d + extra  # more tokens than features: the centred input can be full column rank
    X, trace = _uniform_trace(N, n, d, beta, seed, v_scale)
    assert torch.allclose(trace.A, torch.full_like(trace.A, 1.0 / n))
    for p in range(N):
        attn_p = spectrum(trace.Attn[p])
        assert attn_p.rank1_distance < 1e-7  # exactly rank 1 up to rounding
        z_sigma = singular_values(trace.Z[p])
        px_sigma = singular_values(collapse.center_tokens(X[p : p + 1])[0])
        # full rank, and at least beta * sigma_min(PX_p) (the centred bound, P·Attn = 0 here)
        assert z_sigma[-1] >= beta * px_sigma[-1] * (1 - 1e-9) - 1e-12
        assert z_sigma[-1] > 1e-8
    bound = collapse.z_lower_bound(X, trace.Attn, beta)
    assert abs(bound.centered - beta * collapse.column_sigma_min(collapse.center_tokens(X).reshape(-1, d))) < 1e-8
    assert spectrum(trace.Z).sigma_min >= bound.bound - 1e-9


def test_beta_zero_z_equals_attn_and_is_rank_one():
    X, trace = _uniform_trace(3, 10, 4, beta=0.0, seed=1)
    assert torch.equal(trace.Z, trace.Attn)
    for p in range(3):
        assert spectrum(trace.Z[p]).rank1_distance < 1e-7
        assert spectrum(trace.Z[p]).sigma_min < 1e-10


def test_stacked_attn_under_uniform_attention_has_rank_min_n_samples_d():
    """Each sample collapses onto its own direction: the stacked matrix is not rank 1 when N > 1."""
    X, trace = _uniform_trace(N=3, n=10, d=6, beta=0.0, seed=2)
    sigma = spectrum(trace.Attn).sigma
    rank = int((sigma > 1e-10 * sigma[0]).sum())
    assert rank == 3  # = min(N, d)


# ------------------------------------------------------------------ the lower bound


def _random_instance(rng: np.random.Generator):
    N, d = int(rng.integers(1, 4)), int(rng.integers(1, 6))
    n = d + int(rng.integers(1, 5))
    X = torch.from_numpy(rng.standard_normal((N, n, d)))
    logits = torch.from_numpy(rng.standard_normal((N, n, n)) * rng.uniform(0, 5))
    A = torch.softmax(logits, dim=-1)
    W_V = torch.from_numpy(rng.standard_normal((d, d)) * rng.uniform(0.1, 3))
    return X, A @ X @ W_V, float(rng.uniform(0, 1))


def test_lower_bound_holds_on_random_instances():
    rng = np.random.default_rng(0)
    for _ in range(200):
        X, attn, beta = _random_instance(rng)
        measured = spectrum(beta * X + attn).sigma_min
        bound = collapse.z_lower_bound(X, attn, beta)
        assert measured >= bound.weyl - 1e-9
        assert measured >= bound.centered - 1e-9
        assert measured >= bound.bound - 1e-9
        for p in range(X.shape[0]):  # and per sample
            per = collapse.z_lower_bound(X[p], attn[p], beta)
            assert spectrum(beta * X[p] + attn[p]).sigma_min >= per.bound - 1e-9


def test_a_wrong_bound_is_caught():
    """β σ_min(X) (dropping the attention term) is not a bound: uniform attention with v_p = −β·mean
    gives Z = β·PX, whose σ_min is below β σ_min(X) — and equals the centred bound (it is tight)."""
    rng = np.random.default_rng(1)
    X = torch.from_numpy(rng.standard_normal((2, 9, 4)))
    beta = 0.7
    attn = -beta * X.mean(dim=1, keepdim=True).expand_as(X)  # = A X W_V with A uniform, W_V = −β I
    Z = beta * X + attn
    measured = spectrum(Z).sigma_min
    wrong = beta * spectrum(X).sigma_min
    assert measured < wrong  # the wrong bound is violated
    assert measured == pytest.approx(collapse.z_lower_bound(X, attn, beta).centered, rel=1e-10)
    violations = 0
    for _ in range(200):
        Xr, attn_r, beta_r = _random_instance(rng)
        violations += spectrum(beta_r * Xr + attn_r).sigma_min < beta_r * spectrum(Xr).sigma_min - 1e-9
    assert violations > 0


def test_column_sigma_min_and_centering():
    assert collapse.column_sigma_min(torch.ones(2, 3, dtype=torch.float64)) == 0.0  # fewer rows than columns
    X = inputs.make_input(2, 5, 3, input_seed=0)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    centred = collapse.center_tokens(X, mask)
    assert torch.allclose(centred[0].sum(0), torch.zeros(3, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(centred[1, :3].sum(0), torch.zeros(3, dtype=torch.float64), atol=1e-12)
    assert torch.all(centred[1, 3:] == 0)
    with pytest.raises(ConfigError):
        collapse.z_lower_bound(X, X[:, :4], 1.0)


# ------------------------------------------------------------------ the sweep


def test_sweep_shape_columns_and_determinism():
    kwargs = dict(d_qks=(1, 64), logit_scales=("sqrt", "linear"), qk_scales=(1.0, 4.0), betas=(0.0, 1.0), seeds=(0, 1), N=4, n=10, d=4)
    table = collapse.dqk_sweep(**kwargs)
    assert list(table.columns) == list(collapse.SWEEP_COLUMNS)
    assert len(table) == 2 * 2 * 2 * 2 * 2 * 2 * 2  # d_qk × scaling × qk_scale × β × seed × matrix × scope
    assert set(table["matrix"]) == {"Attn", "Z"} and set(table["scope"]) == set(collapse.SCOPES)
    assert table[table["matrix"] == "Z"]["bound"].notna().all()
    assert table[table["matrix"] == "Attn"]["bound"].isna().all()
    pd.testing.assert_frame_equal(table, collapse.dqk_sweep(**kwargs))
    # Attn does not depend on β; Z at β = 0 is Attn
    attn = table[table["matrix"] == "Attn"].set_index(["d_qk", "logit_scale", "qk_scale", "seed", "scope", "beta"])["sigma_min"].unstack()
    assert np.allclose(attn[0.0], attn[1.0])
    z0 = table[(table["matrix"] == "Z") & (table["beta"] == 0.0)]["sigma_min"].to_numpy()
    a0 = table[(table["matrix"] == "Attn") & (table["beta"] == 0.0)]["sigma_min"].to_numpy()
    assert np.allclose(z0, a0)
    # the bound is below the measured σ_min (per-sample medians preserve the order)
    z = table[table["matrix"] == "Z"]
    assert (z["sigma_min"] >= z["bound"] - 1e-9).all()


def test_linear_scaling_collapses_attention_at_large_dqk():
    table = collapse.dqk_sweep(d_qks=(1, 16384), logit_scales=("linear",), qk_scales=(1.0,), betas=(1.0,), seeds=(0, 1, 2))
    per = table[(table["matrix"] == "Attn") & (table["scope"] == "per_sample")].groupby("d_qk")["rank1_distance"].median()
    assert per[16384] < 0.1 * per[1]
    assert per[16384] < 0.05
    z = table[(table["matrix"] == "Z") & (table["scope"] == "per_sample")].groupby("d_qk")["sigma_min"].median()
    assert z[16384] > 0.5  # the residual keeps Z well conditioned


def test_sqrt_scaling_does_not_collapse():
    regimes = collapse.attention_regimes(d_qks=(64, 16384), logit_scales=("sqrt", "linear"), qk_scales=(1.0,), seeds=(0, 1, 2))
    stats = regimes.groupby(["logit_scale", "d_qk"])[["logit_std", "entropy"]].median()
    # sqrt: the logits' spread does not vanish; linear: it shrinks like 1/sqrt(d_qk) and A → uniform
    assert stats.loc[("sqrt", 16384), "logit_std"] > 0.3 * stats.loc[("sqrt", 64), "logit_std"]
    assert stats.loc[("linear", 16384), "logit_std"] < 0.2 * stats.loc[("linear", 64), "logit_std"]
    assert stats.loc[("linear", 16384), "entropy"] > 0.999
    assert stats.loc[("sqrt", 16384), "entropy"] < 0.97


def test_attention_statistics_extremes():
    n = 6
    uniform = torch.full((2, n, n), 1.0 / n, dtype=torch.float64)
    s = collapse.attention_statistics(uniform)
    assert s["entropy"] == pytest.approx(1.0) and s["max_prob"] == pytest.approx(1.0 / n)
    same_key = torch.zeros(2, n, n, dtype=torch.float64)
    same_key[..., 2] = 1.0
    s = collapse.attention_statistics(same_key)
    assert s["entropy"] == pytest.approx(0.0, abs=1e-12) and s["argmax_agreement"] == 1.0 and s["rank1_distance_A"] < 1e-12
    permutation = torch.eye(n, dtype=torch.float64).expand(2, n, n)
    s = collapse.attention_statistics(permutation)
    assert s["argmax_agreement"] == pytest.approx(1.0 / n) and s["rank1_distance_A"] > 0.5


def test_attention_maps_are_probabilities():
    maps = collapse.attention_maps(d_qks=(4, 1024), logit_scales=("sqrt",), qk_scales=(1.0,), N=2, n=5, d=3)
    sums = maps.groupby(["d_qk", "query"])["prob"].sum()
    assert np.allclose(sums, 1.0) and len(maps) == 2 * 5 * 5
    with pytest.raises(ConfigError):
        collapse.attention_maps(sample=7, N=2, n=5, d=3)


def test_bad_arguments_are_rejected():
    with pytest.raises(ConfigError):
        collapse.dqk_sweep(d_qks=(), N=2, n=3, d=2)
    with pytest.raises(ConfigError):
        collapse.dqk_sweep(d_qks=(2,), logit_scales=("cubic",), N=2, n=3, d=2)
    with pytest.raises(ConfigError):
        inputs.make_input(0, 3, 2)


# ------------------------------------------------------------------ training, presets, figures


def test_training_comparison_collapsed_without_residual_stalls_at_the_floor():
    X = inputs.make_input(6, 10, 4, input_seed=3)
    Y = training.make_target(X, "linear")
    kwargs = dict(d_qks=(4, 16384), betas=(0.0, 1.0), seeds=(0,), m=16, lr=0.01, iterations=120, record_every=40, X=X, Y=Y)
    history = training.training_comparison(**kwargs)
    assert {"d_qk", "beta", "seed", "logit_scale", "diverged", "loss", "iteration"} <= set(history.columns)
    assert len(history) == 4 * 121 and not history["diverged"].any()
    final = history[history["iteration"] == 120].set_index(["d_qk", "beta"])["loss"]
    floor = training.collapse_floor(Y, "mean")
    assert final[(16384, 0.0)] > 0.95 * floor  # collapsed and no residual: stuck near the floor
    assert final[(16384, 1.0)] < 0.2 * floor  # with the residual: trains
    first = history[history["iteration"] == 0].set_index(["d_qk", "beta"])["loss"]
    assert first[(16384, 0.0)] != first[(16384, 1.0)]  # same weights, different forward pass


def test_collapse_floor_is_a_lower_bound_for_constant_predictors():
    Y = torch.randn(3, 5, 1, dtype=torch.float64)
    floor = training.collapse_floor(Y, "sum")
    best = 0.5 * float((Y - Y.mean(dim=1, keepdim=True)).pow(2).sum())
    assert floor == pytest.approx(best)
    other = 0.5 * float((Y - Y.mean(dim=1, keepdim=True) - 0.1).pow(2).sum())
    assert other > floor
    assert training.collapse_floor(Y, "mean") == pytest.approx(floor / 3)


def test_preset_sizes():
    quick, full = collapse.preset(True), collapse.preset(False)
    for p in (quick, full):
        assert max(p["sweep"]["d_qks"]) >= 16384 and min(p["sweep"]["d_qks"]) == 1
        assert set(p["sweep"]["logit_scales"]) == {"sqrt", "linear"}
        assert len(p["sweep"]["qk_scales"]) >= 2 and set(p["sweep"]["betas"]) == {0.0, 0.5, 1.0}
        assert "betas" not in collapse.regime_kwargs(p)
    assert len(quick["sweep"]["seeds"]) <= len(full["sweep"]["seeds"])
    assert quick["training"]["iterations"] < full["training"]["iterations"]


def test_summary_numbers_keys():
    sweep = collapse.dqk_sweep(d_qks=(4, 256), qk_scales=(1.0,), seeds=(0,), N=3, n=10, d=4)
    regimes = collapse.attention_regimes(d_qks=(4, 256), qk_scales=(1.0,), seeds=(0,), N=3, n=10, d=4)
    numbers = collapse.summary_numbers(sweep, regimes)
    for key in ("smin-stacked-linear-attn", "smin-stacked-sqrt-z-b05", "smin-persample-linear-z-b1", "r1-linear-max", "entropy-sqrt-q1-max"):
        assert key in numbers and math.isfinite(numbers[key])


def test_figures_from_small_tables(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setattr(collapse, "preset", lambda quick: _tiny_preset())
    paths = collapse.reproduce(True, tmp_path)
    names = {
        "collapse_sweep_per_sample", "collapse_sweep_stacked", "collapse_attention_maps", "collapse_attention_regimes",
        "collapse_bound_per_sample", "collapse_bound_stacked", "collapse_training", "collapse_training_interaction",
    }
    assert set(map(collapse.figure_name, collapse.FIGURE_KINDS)) == names
    assert set(paths) == names | {f"{name}.pdf" for name in names}
    for name in names:
        assert paths[name] == tmp_path / f"{name}.png" and paths[f"{name}.pdf"] == tmp_path / f"{name}.pdf"
    for path in paths.values():
        assert path.exists() and path.stat().st_size > 1000
    plt.close("all")


def _tiny_preset() -> dict:
    common = {"N": 3, "n": 6, "d": 3, "input_seed": 0}
    return {
        "quick": True,
        "sweep": {"d_qks": (1, 16), "logit_scales": ("sqrt", "linear"), "qk_scales": (1.0, 4.0), "betas": (0.0, 0.5, 1.0), "seeds": (0, 1), **common},
        "maps": {"d_qks": (4, 16), "logit_scales": ("sqrt", "linear"), "qk_scales": (1.0, 4.0), "seed": 0, "sample": 0, **common},
        "training": {"d_qks": (4, 16), "betas": (0.0, 1.0), "seeds": (0,), "logit_scale": "linear", "qk_scale": 1.0, "m": 4,
                     "lr": 0.01, "iterations": 10, "record_every": 5, "target": "linear",
                     "interaction_target": "interaction", **common},
    }


def test_one_list_of_figure_names_and_no_literal_name_in_the_notebook():
    """The notebook names its figures through collapse.figure_name, never by typing them."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "notebooks" / "03_rank_collapse.md").read_text()
    for name in map(collapse.figure_name, collapse.FIGURE_KINDS):
        assert name not in text, f"{name!r} typed in the notebook"
    with pytest.raises(ConfigError, match="figure kind"):
        collapse.make_figure({}, "nope")


def test_interaction_target_is_out_of_reach_of_the_skip_path():
    X = inputs.make_input(6, 10, 4, 0)
    Y = training.make_target(X, "interaction")
    assert Y.shape == (6, 10, 1) and float(Y.pow(2).mean()) == pytest.approx(1.0)
    # orthogonal to every [x_i, mean x, 1] feature: the best linear fit from them is 0, its loss ½‖Y‖²
    F = training.skip_features(X)
    assert torch.allclose(F.T @ Y.reshape(-1, 1), torch.zeros(F.shape[1], 1, dtype=F.dtype), atol=1e-9)
    assert training.skip_floor(X, Y, "sum") == pytest.approx(0.5 * float(Y.pow(2).sum()))
    # the linear target is in that span: its skip floor is 0
    assert training.skip_floor(X, training.make_target(X, "linear"), "sum") == pytest.approx(0.0, abs=1e-18)
    assert torch.allclose(Y, training.make_target(X, "interaction"), rtol=1e-10, atol=1e-12)  # seeded


def test_speed_verdicts_paired_rule():
    def runs(ratios):  # ratios[(d_qk, beta)] = per-seed Φ(T)/Φ(0)
        rows = []
        for (d_qk, beta), values in ratios.items():
            for seed, r in enumerate(values):
                rows += [{"d_qk": d_qk, "beta": beta, "seed": seed, "iteration": 0, "loss": 2.0},
                         {"d_qk": d_qk, "beta": beta, "seed": seed, "iteration": 10, "loss": 2.0 * r}]
        return pd.DataFrame(rows)

    table = training.speed_verdicts(runs({(4, 0.0): [0.5, 0.6], (4, 1.0): [0.1, 0.2],
                                          (8, 0.0): [0.5, 0.1], (8, 1.0): [0.2, 0.2],
                                          (16, 0.0): [0.1, 0.1], (16, 1.0): [0.3, 0.2]})).set_index("d_qk")
    assert list(table["verdict"]) == ["residual faster", "undecided", "residual slower"]
    assert table.loc[4, "ratio_residual"] == pytest.approx(0.15) and table.loc[4, "ratio_no_residual"] == pytest.approx(0.55)


def test_the_interaction_target_and_its_skip_floor_are_the_same_bytes_in_every_process():
    """The page's interaction-target numbers are computed in a fresh kernel each build: two fresh
    processes must give the same target and skip floor to the last bit (LAPACK's default driver of
    torch's lstsq, gelsy, gave different last digits in every process tried: 7 of 7)."""
    import subprocess
    import sys

    code = ("import hashlib, torch\n"
            "from resgd.collapse import training as t\n"
            "X = t.make_input(16, 16, 8, 1234)\n"
            "Y = t.make_target(X, 'interaction')\n"
            "print(hashlib.sha256(Y.numpy().tobytes()).hexdigest(), repr(t.skip_floor(X, Y)))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout for _ in range(2)}
    assert len(outs) == 1, outs
