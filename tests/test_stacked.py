"""The trainer (:mod:`resgd.core.trainer`) against the autograd reference, and grouped sweep tasks.

Equality contract: a run's history inside a stack is bit-for-bit the history it gets alone (a
stack of one) or in any other stack; against GD by autograd on :func:`resgd.core.model.forward`
(:func:`engine_cases.reference_gd`) it agrees to rounding, not bit for bit (the two sum in other
orders): losses to rtol 1e-10 over these short horizons (12 steps of tiny models, where rounding
grows by far less than 1e-10), ‖∇Φ‖ to 1e-8 (a norm of differences of rounded terms), σ(Z) to 1e-6
(the Gram route squares the condition number), the same length of history and the same divergence
iteration.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from resgd.experiments import runs
from resgd.experiments.configuration import RunConfig, config_key, settings
from resgd.data.spec import DatasetSpec
from resgd.data.spec import load_dataset
from resgd.core.model import ModelConfig, forward, init_params
from resgd.pipeline.cache import ResultsCache
from resgd.pipeline.sweep import Group, Task, cached_sweep, execute
from resgd.core.trainer import GDConfig, train_stacked

from engine_cases import reference_gd
from resgd.validation import ConfigError

LOSS_RTOL = 1e-10
COMPUTE_STACK = runs._compute_stack


def _setup(dataset: str, L: int, **model_changes):
    spec = DatasetSpec(dataset, n_train=6, n_tokens=5, n_test=4, seed=0)
    pooling = "mean" if dataset == "toy_cls" else "none"
    base = ModelConfig(**{"d": 6, "d_qk": 4, "m": 7, "n_layers": L, "pooling": pooling, **model_changes})
    gd = GDConfig(lr=0.05, iterations=12, reduction="mean", record_every=5)
    runs_ = [(0.0, 0.05, 0), (1.0, 0.05, 1), (0.5, 0.2, 2), (1.0, 1e4, 3), (0.0, 0.02, 4)]  # (β, μ, seed); μ = 1e4 diverges
    models = [base.replace(beta=b, qk_scale=1.0 + 0.5 * s) for b, _, s in runs_]
    gds = [replace(gd, lr=lr) for _, lr, _ in runs_]
    params = [init_params(m, s) for m, (_, _, s) in zip(models, runs_)]
    return load_dataset(spec), models, gds, params


def _one_at_a_time(data, model, gd, params):
    return reference_gd(params, model, data.X_train, data.Y_train, gd, data.mask_train)


CASES = [("toy_cls", 1, {}), ("toy_cls", 2, {}), ("toy", 1, {}), ("toy", 2, {}),
         ("toy", 2, {"activation": "gelu", "logit_scale": "linear", "beta_ffn": 0.3}),
         ("toy_cls", 1, {"activation": "softplus", "d_qk": 8})]  # d_qk > d: the logits through W_Q W_Kᵀ


@pytest.mark.parametrize("dataset,L,changes", CASES)
def test_each_run_of_a_stack_equals_autograd_gd(dataset, L, changes):
    data, models, gds, params = _setup(dataset, L, **changes)
    out = train_stacked(params, models, data.X_train, data.Y_train, gds, mask=data.mask_train)
    assert len(out) == len(models)
    for r, (model, gd, p) in enumerate(zip(models, gds, params)):
        ref, diverged = _one_at_a_time(data, model, gd, p)
        got = out[r].history
        assert out[r].diverged == diverged and (out[r].params is None) == diverged
        assert list(got.columns) == list(ref.columns)
        assert got["iteration"].tolist() == ref["iteration"].tolist()  # same length: same divergence iteration
        finite = np.isfinite(ref["loss"].to_numpy())
        np.testing.assert_allclose(got["loss"].to_numpy()[finite], ref["loss"].to_numpy()[finite], rtol=LOSS_RTOL)
        np.testing.assert_allclose(got["grad_norm"].to_numpy()[finite], ref["grad_norm"].to_numpy()[finite], rtol=1e-8)
        recorded = ref["sigma_min_Z"].notna().to_numpy()
        assert (got["sigma_min_Z"].notna().to_numpy() == recorded).all()
        for column in ("sigma_min_Z", "sigma_max_Z"):
            np.testing.assert_allclose(got[column].to_numpy()[recorded & finite], ref[column].to_numpy()[recorded & finite],
                                       rtol=1e-6)
    assert any(o.diverged for o in out) and not all(o.diverged for o in out)


@pytest.mark.parametrize("dataset,L", [("toy_cls", 2), ("toy", 1)])
def test_a_run_does_not_depend_on_its_stack(dataset, L):
    data, models, gds, params = _setup(dataset, L)
    args = (data.X_train, data.Y_train)
    whole = train_stacked(params, models, *args, gds, mask=data.mask_train)
    order = [4, 2, 0]
    other = train_stacked([params[i] for i in order], [models[i] for i in order], *args, [gds[i] for i in order],
                          mask=data.mask_train)
    for r in range(len(models)):
        alone = train_stacked([params[r]], [models[r]], *args, [gds[r]], mask=data.mask_train)[0]
        pd.testing.assert_frame_equal(alone.history, whole[r].history, check_exact=True)
        if r in order:
            pd.testing.assert_frame_equal(other[order.index(r)].history, whole[r].history, check_exact=True)
        if not alone.diverged:
            for name, w in alone.params.items():
                assert bool((w == whole[r].params[name]).all()), name


def test_beta_zero_is_exact_attention():
    """β = 0 multiplies X by an exact 0: every layer's Z is its Attn bit for bit (with β = 1 it is
    not), and a β = 0 run trained beside a β = 1 run has the history it has alone, bit for bit."""
    data, models, gds, params = _setup("toy", 2)
    assert (models[0].beta, models[1].beta) == (0.0, 1.0)
    for model, weights, exact in ((models[0], params[0], True), (models[1], params[1], False)):
        trace = forward(weights, model, data.X_train, data.mask_train, return_trace=True)
        assert [torch.equal(layer.Z, layer.Attn) for layer in trace.layers] == [exact] * model.n_layers
    args = (data.X_train, data.Y_train)
    alone = train_stacked(params[:1], models[:1], *args, gds[:1], mask=data.mask_train)[0]
    beside = train_stacked(params[:2], models[:2], *args, gds[:2], mask=data.mask_train)[0]
    assert not alone.diverged and len(alone.history) > 1
    pd.testing.assert_frame_equal(beside.history, alone.history, check_exact=True)


def test_mismatched_runs_are_rejected():
    data, models, gds, params = _setup("toy", 1)
    with pytest.raises(ConfigError, match="run 1 differs"):
        train_stacked(params[:2], [models[0], models[1].replace(m=8)], data.X_train, data.Y_train, gds[:2])
    with pytest.raises(ConfigError, match="run 1 differs"):
        train_stacked(params[:2], models[:2], data.X_train, data.Y_train, [gds[0], replace(gds[1], iterations=3)])


# --------------------------------------------------------------------------- one way: run == sweep

def toy_config(seed=0, beta=1.0, lr=0.05, iterations=8):
    spec = DatasetSpec("toy_cls", n_train=6, n_tokens=4, n_test=4, seed=0)
    return RunConfig(spec, ModelConfig(d=6, d_qk=3, m=5, beta=beta, pooling="mean"),
                        GDConfig(lr=lr, iterations=iterations, reduction="mean", record_every=4), seed=seed)


def test_a_single_run_equals_the_same_run_in_a_sweep(tmp_path):
    configs = [toy_config(s, b, lr) for s in range(2) for b in (0.0, 1.0) for lr in (0.05, 1e4)]
    table = runs.sweep(configs, n_jobs=1, cache_dir=tmp_path / "sweep")
    for config in configs:
        alone = runs.run(config, tmp_path / "single")
        inside = table[table["key"] == config_key(config)].reset_index(drop=True)
        pd.testing.assert_frame_equal(alone, inside, check_exact=True)
    assert table.groupby("key")["diverged"].first().sum() == 4


def test_headline_sizes_train_one_at_a_time():
    small, large = toy_config(), settings("sst2", False).config(1.0, 1, 0, 0.01)
    assert runs.stackable(small) and not runs.stackable(large)
    assert runs.stack_key(toy_config(1, 0.0, 0.3)) == runs.stack_key(small)
    assert runs.stack_key(toy_config(iterations=9)) != runs.stack_key(small)


# --------------------------------------------------------------------------- grouped tasks in the pipeline

class Recorder:
    """Wraps runs._compute_stack: the stacks computed, and a failure for a chosen seed."""

    def __init__(self, fail_seed=None):
        self.stacks, self.fail_seed, self.original = [], fail_seed, COMPUTE_STACK

    def __call__(self, configs):
        if any(c.seed == self.fail_seed for c in configs):
            raise RuntimeError("simulated failure of a stack")
        self.stacks.append([c.seed for c in configs])
        return self.original(configs)


def test_grouping_comes_after_the_cache_filter(tmp_path, monkeypatch):
    configs = [toy_config(s) for s in range(6)]
    runs.sweep(configs[:2], n_jobs=1, cache_dir=tmp_path)  # a partly filled cache
    recorder = Recorder()
    monkeypatch.setattr(runs, "_compute_stack", recorder)
    writes = []
    original_write = ResultsCache.write
    monkeypatch.setattr(ResultsCache, "write", lambda self, key, value, **kw: (writes.append(key), original_write(self, key, value, **kw)))
    table = runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
    assert recorder.stacks == [[2, 3, 4, 5]]  # one stack of the missing runs only
    assert sorted(writes) == sorted(config_key(c) for c in configs[2:])  # each key written once
    assert sorted(table["seed"].unique()) == list(range(6))


def test_a_failing_group_writes_nothing_and_releases_its_locks(tmp_path, monkeypatch):
    good = [toy_config(s, iterations=9) for s in range(2)]  # costlier stack: computed first
    bad = [toy_config(s) for s in range(2, 4)]
    monkeypatch.setattr(runs, "_compute_stack", Recorder(fail_seed=3))
    with pytest.raises(RuntimeError, match="simulated failure"):
        runs.sweep(good + bad, n_jobs=1, cache_dir=tmp_path)
    cache = ResultsCache(tmp_path)
    assert {p.stem for p in tmp_path.glob("*.pkl")} == {config_key(c) for c in good}
    for config in bad:  # not left locked
        handle = cache.try_lock(config_key(config))
        assert handle is not None
        handle.close()
    recorder = Recorder()
    monkeypatch.setattr(runs, "_compute_stack", recorder)
    runs.sweep(good + bad, n_jobs=1, cache_dir=tmp_path)  # resumes: only the failed stack
    assert recorder.stacks == [[2, 3]]


def test_groups_are_split_for_the_workers_and_capped():
    tasks = [Task(str(i), runs._compute, toy_config(i)) for i in range(40)]
    groups = runs.stack_groups(tasks, n_jobs=2, max_stack=16)
    assert sorted(k for g in groups for k in g.keys) == sorted(t.key for t in tasks)
    assert len(groups) == 3 and max(len(g.keys) for g in groups) <= 16
    assert len(runs.stack_groups(tasks[:5], n_jobs=2)) == 2  # both workers get work


def test_execute_yields_each_key_of_a_group():
    items = [Group(("a", "b"), lambda xs: [x * 2 for x in xs], (1, 2)), Task("c", abs, -3)]
    assert dict(execute(items, n_jobs=1)) == {"a": 2, "b": 4, "c": 3}
    with pytest.raises(RuntimeError, match="returned 1 results"):
        list(execute([Group(("a", "b"), lambda xs: [0], (1, 2))], n_jobs=1))


def test_cached_sweep_rejects_groups_that_do_not_cover_the_tasks(tmp_path):
    tasks = [Task("a", abs, -1), Task("b", abs, -2)]
    with pytest.raises(RuntimeError, match="cover each task"):
        cached_sweep(tasks, ResultsCache(tmp_path), n_jobs=1, group=lambda todo: [Group(("a",), list, (1,))])


def test_grouped_sweep_in_parallel_equals_sequential(tmp_path):
    configs = [toy_config(s, b) for s in range(3) for b in (0.0, 1.0)]
    parallel = runs.sweep(configs, n_jobs=2, cache_dir=tmp_path / "a")
    sequential = runs.sweep(configs, n_jobs=1, cache_dir=tmp_path / "b")
    pd.testing.assert_frame_equal(parallel, sequential, check_exact=True)
    assert not math.isnan(parallel["test_loss"].iloc[0])


@pytest.mark.parametrize("dataset", ["toy_cls", "toy"])
def test_end_of_run_metrics_of_a_stack_equal_one_forward_per_run(dataset):
    """The stack's end-of-run metrics (one stacked forward) against :func:`resgd.core.model.forward` per run."""
    s = settings(dataset, True)
    configs = [s.config(beta, 2, seed, 0.05, iterations=5) for beta, seed in ((0.0, 0), (1.0, 1), (0.5, 2))]
    configs.append(s.config(1.0, 2, 3, 1e4, iterations=5))  # diverges: NaN metrics
    data = load_dataset(configs[0].dataset)
    trained = runs._train(configs, data)
    assert [t[2] for t in trained] == [False, False, False, True]
    for config, (_, final, diverged, metrics) in zip(configs, trained):
        expected = runs._metrics(config, data, final)
        assert metrics.keys() == expected.keys()
        for name, value in metrics.items():
            if diverged or (name != "test_loss" and dataset == "toy"):
                assert math.isnan(value) and math.isnan(expected[name])
            elif name == "test_loss":
                assert value == pytest.approx(expected[name], rel=LOSS_RTOL)
            else:
                assert value == expected[name]  # accuracies


def test_runs_without_test_metrics_train_the_same_and_leave_them_nan():
    s = settings("toy_cls", True)
    with_metrics = s.config(0.5, 1, 0, 0.05, iterations=5)
    without = replace(with_metrics, test_metrics=False)
    assert runs.config_key(without) != runs.config_key(with_metrics)
    a, b = runs._compute(with_metrics), runs._compute(without)
    pd.testing.assert_frame_equal(a.drop(columns=["test_loss", "train_acc", "test_acc"]),
                                  b.drop(columns=["test_loss", "train_acc", "test_acc"]), check_exact=True)
    assert a[["test_loss", "train_acc", "test_acc"]].notna().all().all()
    assert b[["test_loss", "train_acc", "test_acc"]].isna().all().all()
    with pytest.raises(ConfigError, match="RunConfig.test_metrics: expected True or False, got 'no'"):
        replace(with_metrics, test_metrics="no")


def test_the_map_asks_for_no_test_metrics():
    from resgd.robustness.grid import map_grid

    grid = map_grid(True)
    assert not grid.settings("jena", 1.0, 16).config(1.0, 1, 0, 0.1).test_metrics


def test_worth_stacking_small_runs_only():
    from resgd.core.trainer import worth_stacking

    def model(d, d_qk, L):
        return ModelConfig(d=d, d_qk=d_qk, m=64, n_layers=L)

    assert worth_stacking(model(14, 16, 10), 32, 8)  # the map's Jena L = 10: 24k weights, 256 tokens
    assert not worth_stacking(model(50, 16, 10), 32, 8)  # the map's SST-2 L = 10: 105k weights
    assert not worth_stacking(model(14, 16, 1), 128, 24)  # a headline experiment: 3072 tokens
    assert not worth_stacking(ModelConfig(d=8, d_qk=16384, m=32), 16, 16)  # the collapse study's largest d_QK
    assert worth_stacking(ModelConfig(d=8, d_qk=4, m=32), 16, 16)


def test_train_runs_takes_the_callers_decision():
    from resgd.core.trainer import train_runs

    data, models, gds, params = _setup("toy", 1)
    args = (params, models, data.X_train, data.Y_train, gds)
    stacked = train_runs(*args, mask=data.mask_train, stacked=True)
    single = train_runs(*args, mask=data.mask_train, stacked=False)
    default = train_runs(*args, mask=data.mask_train)  # worth_stacking: tiny, so stacked
    for a, b, c in zip(stacked, single, default):
        assert a.diverged == b.diverged and len(a.history) == len(b.history)
        np.testing.assert_allclose(a.history["loss"], b.history["loss"], rtol=LOSS_RTOL)
        pd.testing.assert_frame_equal(a.history, c.history, check_exact=True)
    assert any(r.diverged for r in single)


def test_checkpoints_see_the_iterates_of_an_uninterrupted_run():
    """The hook gets θ⁽ᵗ⁾ of every run still training at t (not of one that diverged), and the
    run is the one trained without a hook: the same history and weights, bit for bit."""
    data, models, gds, params = _setup("toy", 2)
    args = (data.X_train, data.Y_train)
    seen = {}
    hooked = train_stacked(params, models, *args, gds, mask=data.mask_train, checkpoints=(0, 4, 12),
                           on_checkpoint=lambda r, t, theta: seen.setdefault((r, t), theta))
    plain = train_stacked(params, models, *args, gds, mask=data.mask_train)
    for r, (a, b) in enumerate(zip(hooked, plain)):
        pd.testing.assert_frame_equal(a.history, b.history, check_exact=True)
        at = {t for (run, t) in seen if run == r}
        assert at == (set() if b.diverged and len(b.history) == 1 else {t for t in (0, 4, 12) if t < len(b.history) - b.diverged})
        for t in at:  # θ⁽ᵗ⁾: the run restarted from it for 12 - t steps ends where the uninterrupted run ends
            if not b.diverged:
                rest = train_stacked([seen[(r, t)]], [models[r]], *args, [replace(gds[r], iterations=12 - t)],
                                     mask=data.mask_train)[0]
                for name, w in rest.params.items():
                    assert bool((w == b.params[name]).all()), (r, t, name)
    assert any(b.diverged for b in plain) and seen


def test_checkpoints_need_a_hook():
    data, models, gds, params = _setup("toy", 1)
    with pytest.raises(ConfigError, match="checkpoints given without on_checkpoint"):
        train_stacked(params, models, data.X_train, data.Y_train, gds, checkpoints=(3,))
