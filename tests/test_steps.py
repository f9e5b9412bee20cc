"""How μ is chosen: the step-size protocols and the fast smoothness estimate behind the theorem's
protocol, and design v6's two step rules on the toy data: the theorem's step kept along the path and
each configuration's own stable step."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from resgd.core.model import ModelConfig, init_params
from resgd.core.smoothness import smoothness_estimate, smoothness_fast, smoothness_fast_stacked
from resgd.data.spec import load_dataset
from resgd.experiments import steps
from resgd.experiments.configuration import settings
from resgd.experiments.decisions import rises
from resgd.experiments.design import OWN_GRID
from resgd.experiments.steps import PATH_EVERY, _compute_path, path_table, train_path
from resgd.experiments.study import own_steps
from resgd.validation import ConfigError


@pytest.mark.parametrize("beta", [0.0, 1.0])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_fast_smoothness_agrees_with_the_exact_estimate(beta, reduction):
    cfg = ModelConfig(d=6, d_qk=4, m=8, n_layers=2, beta=beta)
    g = torch.Generator().manual_seed(3)
    X = torch.randn(5, 4, 6, generator=g, dtype=torch.float64)
    Y = torch.randn(5, 4, 1, generator=g, dtype=torch.float64)
    params = init_params(cfg, 1)
    exact = smoothness_estimate(params, cfg, X, Y, reduction=reduction)
    fast = smoothness_fast(params, cfg, X, Y, reduction=reduction, iterations=60)
    assert fast == pytest.approx(exact, rel=0.05)


@pytest.mark.parametrize("pooling", ["none", "mean"])
def test_stacked_smoothness_is_each_runs_own_bit_for_bit(pooling):
    """L̂ of runs stacked (the map's seeds and β of one shape) equals each run's L̂ alone, exactly: the
    stack is a speed decision, never another step size."""
    base = ModelConfig(d=6, d_qk=4, m=8, n_layers=2, beta=1.0, pooling=pooling)
    g = torch.Generator().manual_seed(5)
    X = torch.randn(5, 4, 6, generator=g, dtype=torch.float64)
    Y = torch.randn(*((5, 1) if pooling == "mean" else (5, 4, 1)), generator=g, dtype=torch.float64)
    mask = torch.ones(5, 4, dtype=torch.bool)
    mask[1, 3:] = False
    models = [base.replace(beta=b, v_scale=v) for b, v in ((1.0, 1.0), (0.0, 1.5), (0.5, 0.7))]
    params = [init_params(m, seed) for seed, m in enumerate(models)]
    alone = [smoothness_fast(p, m, X, Y, mask, reduction="mean") for p, m in zip(params, models)]
    stacked = smoothness_fast_stacked(params, models, X, Y, mask, reduction="mean")
    assert stacked == alone and len(set(alone)) == 3
    zero = {k: torch.zeros_like(v) for k, v in params[0].items()}  # a run whose power iteration stops at once
    assert smoothness_fast_stacked([zero, params[1]], models[:2], X, Y, mask, reduction="mean")[1] == alone[1]


def test_warm_smoothness_stacks_a_small_shapes_seeds_into_one_task(tmp_path, monkeypatch):
    """The map's L̂ go through the sweep engine, the seeds of one shape in one stacked call."""
    s = settings("toy", True)
    calls = []
    real = steps.smoothness_fast_stacked
    monkeypatch.setattr(steps, "smoothness_fast_stacked", lambda p, *a, **k: calls.append(len(p)) or real(p, *a, **k))
    points = [(s, beta, 1, None, seed) for beta in (0.0, 1.0) for seed in (0, 1, 2)]
    steps.warm_smoothness(points, n_jobs=1, cache_dir=tmp_path)
    assert calls == [6]  # one stack: β and the twin's gains are per-run, the shape is shared
    alone = [steps.smoothness(s, beta, 1, seed=seed, cache_dir=tmp_path / "alone") for _, beta, _, _, seed in points]
    assert [steps.smoothness(s, beta, 1, seed=seed, cache_dir=tmp_path) for _, beta, _, _, seed in points] == alone


def test_mean_reduction_divides_the_smoothness_by_N():
    cfg = ModelConfig(d=6, d_qk=4, m=8, beta=0.5)
    g = torch.Generator().manual_seed(4)
    X = torch.randn(7, 3, 6, generator=g, dtype=torch.float64)
    Y = torch.randn(7, 3, 1, generator=g, dtype=torch.float64)
    params = init_params(cfg, 0)
    total = smoothness_estimate(params, cfg, X, Y, reduction="sum")
    assert smoothness_estimate(params, cfg, X, Y, reduction="mean") == pytest.approx(total / 7, rel=1e-6)


@pytest.mark.parametrize("protocol, c", [("sharpest", None), ("theory", 0.0), ("theory", -1.0), ("theory", math.inf),
                                         ("theory", None)])
def test_bad_protocols_get_a_one_line_error(protocol, c):
    with pytest.raises(ConfigError) as info:
        steps.check_protocol(protocol, c)
    assert "\n" not in str(info.value)


def test_theory_lr_is_c_over_the_smoothness_and_cached(tmp_path):
    s = settings("toy", True)
    lhat = steps.smoothness(s, 1.0, 2, seed=s.seeds[0], cache_dir=tmp_path)
    assert lhat > 0
    for c in steps.THEORY_FACTORS:
        assert steps.theory_lr(s, 1.0, 2, c, seed=s.seeds[0], cache_dir=tmp_path) == pytest.approx(c / lhat)
    assert len(list(tmp_path.glob("*.pkl"))) == 1
    with pytest.raises(ConfigError, match="c of μ"):
        steps.theory_lr(s, 1.0, 2, 0.0, seed=s.seeds[0], cache_dir=tmp_path)


def test_theory_lr_belongs_to_each_seeds_own_initial_weights(tmp_path):
    """The theorem's step is a property of a run's θ⁰: two seeds get two L̂, so two μ."""
    s = settings("toy", True)
    lrs = [steps.theory_lr(s, 1.0, 2, 0.5, seed=seed, cache_dir=tmp_path) for seed in (0, 1)]
    for seed, lr in zip((0, 1), lrs):
        assert lr == pytest.approx(0.5 / steps.smoothness(s, 1.0, 2, seed=seed, cache_dir=tmp_path))
    assert lrs[0] != lrs[1]
    with pytest.raises(ConfigError, match="seed must be an integer"):
        steps.theory_lr(s, 1.0, 2, 0.5, seed=None, cache_dir=tmp_path)


def test_settings_reject_unknown_twin_init_and_start():
    with pytest.raises(ConfigError, match="twin_init"):
        settings("toy", True, twin_init="dead")
    with pytest.raises(ConfigError, match="start"):
        settings("toy", True, start="random")


def test_warm_smoothness_caches_one_lhat_per_seed(tmp_path, monkeypatch):
    s = settings("toy", True)
    points = [(s, beta, 2, None, seed) for beta in (0.0, 1.0) for seed in (0, 1, 2)]
    steps.warm_smoothness(points, n_jobs=2, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.pkl"))) == 6
    monkeypatch.setattr(steps, "smoothness_fast_stacked", lambda *a, **k: pytest.fail("L̂ recomputed"))
    steps.warm_smoothness(points, n_jobs=2, cache_dir=tmp_path)  # all cached: nothing to do
    assert steps.theory_lr(s, 1.0, 2, 0.5, seed=2, cache_dir=tmp_path) > 0


def test_the_path_step_keeps_mu_times_lhat_at_c_at_every_checkpoint_and_never_raises_the_loss():
    s = settings("toy", True)
    T = 2 * PATH_EVERY + 50
    config = s.config(1.0, 1, 0, 0.5, iterations=T)
    history, _ = train_path(config, load_dataset(config.dataset, config.dtype))
    assert history["iteration"].tolist() == list(range(T + 1))
    at = np.flatnonzero(np.isfinite(history["L_hat"].to_numpy()))
    assert at.tolist() == [0, PATH_EVERY, 2 * PATH_EVERY, T]
    mu_l = history["step"].to_numpy()[at[:-1]] * history["L_hat"].to_numpy()[at[:-1]]
    assert np.all(mu_l <= 0.5 * (1 + 1e-12)) and np.all(mu_l > 0)
    assert rises(history["loss"].to_numpy()) == 0


def test_the_path_table_reads_the_checks_and_the_rates():
    s = settings("toy", True)
    frame = _compute_path(s.config(1.0, 1, 0, 0.5, iterations=PATH_EVERY + 20)).assign(
        experiment="beta", protocol="p", twin_init="matched")
    table = path_table(frame, ["experiment", "protocol", "twin_init", "beta", "beta_ffn", "n_layers", "seed"])
    row = table.iloc[0]
    assert row["max_muL_checkpoint"] <= 0.5 * (1 + 1e-12)
    assert row["max_muL_segment_end"] > 0 and row["rate"] > 0 and row["predicted"] > 0
    assert row["step_sum"] > 0


def test_the_own_step_is_the_largest_grid_step_that_descends_along_the_whole_path(tmp_path):
    s = settings("toy", True)
    points = {"beta": [(1.0, None, 1), (0.0, None, 1)]}
    table = own_steps(s, points, n_jobs=1, cache_dir=tmp_path)
    for beta, g in table.groupby("beta"):
        path = g[g["stage"] == "path"].reset_index(drop=True)
        chosen = path[path["chosen"]]
        assert len(chosen) == 1 and int(chosen["rises"].iloc[0]) == 0
        assert (~path["stable"].iloc[:-1]).all()  # every larger step tried before it rose somewhere
        lrs = path["lr"].tolist()
        assert lrs == sorted(lrs, reverse=True)
        assert [OWN_GRID.index(x) for x in lrs] == list(range(OWN_GRID.index(lrs[0]), OWN_GRID.index(lrs[0]) + len(lrs)))
        probe = g[(g["stage"] == "probe") & g["stable"]]
        assert lrs[0] == probe["lr"].max()


def test_a_path_run_cut_after_its_first_segment_repeats_the_full_runs_first_segment_bit_for_bit():
    """What ``make verify`` relies on: the step rule decides over whole segments, so the first segment
    re-executed alone is the stored run's first segment."""
    from resgd.core.trainer import ROW_FIELDS

    s = settings("toy", True)
    full = _compute_path(s.config(0.0, 1, 1, 0.5, iterations=PATH_EVERY + 30))
    first = _compute_path(s.config(0.0, 1, 1, 0.5, iterations=PATH_EVERY))
    for column in ROW_FIELDS:
        a, b = full[column].to_numpy()[: PATH_EVERY + 1], first[column].to_numpy()
        assert np.array_equal(a, b, equal_nan=True), column
