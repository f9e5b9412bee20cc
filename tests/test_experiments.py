"""Configurations, the run cache, sweeps (resume, divergence), presets and the step-size rule.

Everything runs on the tiny synthetic ``toy`` data sets so the whole file takes seconds.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # tests only; never in a notebook

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import resgd  # noqa: E402
from resgd.experiments import runs  # noqa: E402
from resgd.experiments.configuration import RunConfig, config_key, settings  # noqa: E402
from resgd.experiments.pages import FIGURE_KINDS, beta_init_table, figure_kinds, horizon_table, make_figure, page_numbers, regime_table  # noqa: E402
from resgd.experiments.results import loss_curves, per_run_table, summary_parts, write_outputs  # noqa: E402
from resgd.experiments.steps import choose_lr  # noqa: E402
from resgd.experiments.study import run_experiments  # noqa: E402
from resgd.data.spec import DatasetSpec  # noqa: E402
from resgd.pipeline.cache import RESULTS_ENV, resolve_cache_dir  # noqa: E402
from resgd.pipeline.presets import experiments as preset  # noqa: E402
from resgd.pipeline.cache import CacheEntryRejected  # noqa: E402
from resgd.core.model import ModelConfig  # noqa: E402
from resgd.core.trainer import GDConfig  # noqa: E402
from resgd.validation import ConfigError  # noqa: E402


def toy_config(**changes) -> RunConfig:
    spec = DatasetSpec("toy", n_train=6, n_tokens=4, n_test=4, seed=0)
    model = ModelConfig(d=6, d_qk=3, m=5, beta=1.0)
    gd = GDConfig(lr=0.05, iterations=8, reduction="mean", record_every=4)
    base = dict(dataset=spec, model=model, gd=gd, seed=0, dtype="float64")
    return RunConfig(**{**base, **changes})


COMPUTE = runs._compute_stack


class Interrupted(Exception):
    """Stands in for Ctrl-C or a killed process in the middle of a sweep."""


class Counter:
    """Wraps runs._compute_stack (every run is computed there, alone or stacked) and counts the runs
    actually computed; a group holding the failing seed fails as a whole."""

    def __init__(self, fail_on_seed: int | None = None):
        self.calls: list[RunConfig] = []
        self.original = COMPUTE
        self.fail_on_seed = fail_on_seed

    def __call__(self, configs):
        if any(config.seed == self.fail_on_seed for config in configs):
            raise Interrupted("simulated interruption")
        self.calls.extend(configs)
        return self.original(configs)


# --------------------------------------------------------------------------- keys

def test_equal_configs_have_equal_keys():
    assert config_key(toy_config()) == config_key(toy_config())
    assert toy_config() == toy_config() and hash(toy_config()) == hash(toy_config())


def _variants() -> list[RunConfig]:
    base = toy_config()
    out = []
    for f, value in {"n_train": 7, "n_tokens": 5, "n_test": 3, "seed": 1}.items():
        out.append(dataclasses.replace(base, dataset=dataclasses.replace(base.dataset, **{f: value})))
    model_changes = {"d_qk": 4, "m": 6, "n_layers": 2, "beta": 0.5, "beta_ffn": 0.25, "logit_scale": "linear",
                     "activation": "gelu", "qk_scale": 0.5, "v_scale": 0.5, "ffn_scale": 0.5, "out_scale": 0.5}
    for f, value in model_changes.items():
        out.append(dataclasses.replace(base, model=base.model.replace(**{f: value})))
    gd_changes = {"lr": 0.01, "iterations": 9, "reduction": "sum", "record_every": 2, "divergence_factor": 1e3}
    for f, value in gd_changes.items():
        out.append(dataclasses.replace(base, gd=dataclasses.replace(base.gd, **{f: value})))
    out.append(dataclasses.replace(base, seed=3))
    out.append(dataclasses.replace(base, dtype="float32"))
    return out


def test_every_field_change_changes_the_key():
    fields_covered = (len(dataclasses.fields(ModelConfig)) - 4) + len(dataclasses.fields(GDConfig)) + 4 + 2
    variants = _variants()
    assert len(variants) >= fields_covered - 3  # k, pooling, init, d are tied to the data set / single-valued
    keys = {config_key(v) for v in variants} | {config_key(toy_config())}
    assert len(keys) == len(variants) + 1


def test_data_and_arithmetic_change_the_key_and_the_version_does_not(monkeypatch):
    """The key holds what the numbers depend on besides the code (the store proves the code by
    re-executing it): the data and the arithmetic, not the package's version."""
    from resgd.infra import arithmetic

    config = toy_config()
    key = config_key(config)
    monkeypatch.setattr(resgd, "__version__", "999.0")
    assert config_key(config) == key
    assert config_key(config, fingerprint="0" * 16) != key
    monkeypatch.setattr(arithmetic, "describe", lambda: {"torch": "2.13.0", "isa": "AVX512"})
    assert config_key(config) != key


def test_run_config_rejects_a_mismatched_model():
    with pytest.raises(ConfigError, match="d = 6"):
        toy_config(model=ModelConfig(d=5, d_qk=3, m=5))
    with pytest.raises(ConfigError, match="pooling"):
        toy_config(model=ModelConfig(d=6, d_qk=3, m=5, pooling="mean"))
    with pytest.raises(ConfigError, match="dtype"):
        toy_config(dtype="float16")


# --------------------------------------------------------------------------- cache

def test_cache_hit_does_not_recompute(tmp_path, monkeypatch):
    counter = Counter()
    monkeypatch.setattr(runs, "_compute_stack", counter)
    config = toy_config()
    first = runs.run(config, tmp_path)
    assert len(counter.calls) == 1
    second = runs.run(config, tmp_path)
    assert len(counter.calls) == 1
    pd.testing.assert_frame_equal(first, second)
    swept = runs.sweep([config, config], n_jobs=1, cache_dir=tmp_path)
    assert len(counter.calls) == 1
    assert len(swept) == len(first)  # a duplicate config is one run
    assert {"dataset", "beta", "n_layers", "seed", "lr", "diverged", "loss", "iteration", "key"} <= set(first.columns)
    assert list(tmp_path.glob("*.pkl")) == [tmp_path / f"{config_key(config)}.pkl"]


def test_results_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path / "elsewhere"))
    assert resolve_cache_dir() == tmp_path / "elsewhere" / "cache"
    assert resolve_cache_dir(tmp_path / "given") == tmp_path / "given"
    runs.run(toy_config())
    assert len(list((tmp_path / "elsewhere" / "cache").glob("*.pkl"))) == 1
    monkeypatch.delenv(RESULTS_ENV)
    assert resolve_cache_dir() == Path("results") / "cache"


def test_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    def broken_write_bytes(self, data):
        with open(self, "wb") as fh:
            fh.write(data[:10])
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(Path, "write_bytes", broken_write_bytes)
    with pytest.raises(OSError, match="disk full"):
        runs.run(toy_config(), tmp_path)
    assert [p for p in tmp_path.rglob("*") if p.is_file() and p.parent.name != "locks"] == []


def test_damaged_entry_is_recomputed(tmp_path, monkeypatch):
    config = toy_config()
    (tmp_path / f"{config_key(config)}.pkl").write_bytes(b"not a pickle")
    counter = Counter()
    monkeypatch.setattr(runs, "_compute_stack", counter)
    with pytest.warns(CacheEntryRejected, match="unreadable"):
        frame = runs.run(config, tmp_path)
    assert len(counter.calls) == 1 and len(frame) == config.gd.iterations + 1


def test_sweep_resumes_after_an_interruption(tmp_path, monkeypatch):
    longer = GDConfig(lr=0.05, iterations=9, reduction="mean", record_every=4)
    configs = [toy_config(seed=0, gd=longer), toy_config(seed=1, gd=longer), toy_config(seed=2), toy_config(seed=3)]
    monkeypatch.setattr(runs, "_compute_stack", Counter(fail_on_seed=2))  # two stacks; the costlier runs first
    with pytest.raises(Interrupted):
        runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
    done = {p.stem for p in tmp_path.glob("*.pkl")}
    assert done == {config_key(c) for c in configs[:2]}  # the first stack is kept, the failed one wrote nothing
    assert not list(tmp_path.glob("*.part"))
    counter = Counter()
    monkeypatch.setattr(runs, "_compute_stack", counter)
    table = runs.sweep(configs, n_jobs=1, cache_dir=tmp_path)
    assert sorted(c.seed for c in counter.calls) == sorted(c.seed for c in configs if config_key(c) not in done)
    assert sorted(table["seed"].unique()) == [0, 1, 2, 3]


def test_parallel_sweep_matches_sequential(tmp_path):
    configs = [toy_config(seed=s) for s in range(3)]
    parallel = runs.sweep(configs, n_jobs=2, cache_dir=tmp_path / "a")
    sequential = runs.sweep(configs, n_jobs=1, cache_dir=tmp_path / "b")
    pd.testing.assert_frame_equal(parallel, sequential)
    assert list(parallel.groupby("seed", sort=False).ngroup().unique()) == [0, 1, 2]  # the order given


def test_divergence_is_recorded_not_dropped(tmp_path):
    good = toy_config()
    bad = toy_config(gd=GDConfig(lr=1e4, iterations=8, reduction="mean", record_every=4))
    table = runs.sweep([good, bad], n_jobs=1, cache_dir=tmp_path)
    diverged = table[table["lr"] == 1e4]
    assert len(diverged) >= 1 and diverged["diverged"].all()
    assert len(diverged) < bad.gd.iterations + 1  # partial history kept
    assert math.isfinite(diverged["diverged_at"].iloc[0])
    assert not table[table["lr"] == good.gd.lr]["diverged"].any()
    tagged = table.assign(experiment="beta", protocol=table["lr"].map(str), twin_init="living", beta_ffn=1.0)
    per_run = per_run_table(tagged)
    bad_row = per_run.loc[per_run["lr"] == 1e4].iloc[0]
    assert bad_row["loss_T"] == math.inf and bad_row["rate"] == -math.inf and bad_row["outcome"] == "diverged"
    curves = loss_curves(tagged)
    assert (curves["kind"] == "diverged").any()
    assert int(curves.loc[curves["protocol"] == str(1e4), "n_diverged"].iloc[0]) == 1


def test_sweep_rejects_bad_n_jobs(tmp_path):
    with pytest.raises(ConfigError, match="n_jobs"):
        runs.sweep([toy_config()], n_jobs=0, cache_dir=tmp_path)


# --------------------------------------------------------------------------- presets and the rule

@pytest.mark.parametrize("dataset", ["jena", "sst2"])
def test_preset_has_the_documented_keys(dataset):
    quick, full = preset(dataset, True), preset(dataset, False)
    for key in ("N", "n", "iterations", "seeds", "betas", "depths", "widths"):
        assert key in quick and key in full
    assert quick["N"] * quick["iterations"] * len(quick["seeds"]) < full["N"] * full["iterations"] * len(full["seeds"])
    assert len(quick["seeds"]) >= 2
    assert tuple(quick["betas"]) == (0.0, 0.25, 0.5, 0.75, 1.0) and tuple(quick["depths"]) == (2, 6, 10)
    s = settings(dataset, True, seed=5, iterations=7, n_train=3)
    assert s.seeds == (5, 6) and s.iterations == 7 and s.N == 3 and s.data_seed == 5
    assert settings(dataset, True, seeds=3).seeds == (0, 1, 2)
    assert s.config(0.5, 2, 5, 0.1).model.v_scale == pytest.approx(2**-0.5)
    assert s.config(0.0, 2, 5, 0.1).model.v_scale == 1.0  # the living twin
    assert settings(dataset, True, twin_init="scaled").config(0.0, 2, 5, 0.1).model.v_scale == pytest.approx(2**-0.5)
    assert s.config(1.0, 1, 0, 0.1).model.out_scale == s.equal_out_scale  # equal start
    assert s.depth().N == quick["depth_N"] and s.depth().iterations == quick["depth_iterations"]


def test_settings_errors_are_clear():
    with pytest.raises(ConfigError, match="unknown setting"):
        settings("toy", True, bogus=1)
    with pytest.raises(ConfigError, match="dataset"):
        preset("mnist", True)
    with pytest.raises(ConfigError, match="quick"):
        preset("toy", "yes")


def test_choose_lr_is_the_largest_stable_step_times_safety(tmp_path):
    s = settings("toy", True, lr_grid=(1e4, 0.1, 0.03), safety=0.5)
    lr, table = choose_lr(s, [1, 2], n_jobs=1, cache_dir=tmp_path)
    assert lr == pytest.approx(0.05)
    assert not table.loc[table["lr"] == 1e4, "stable"].any()
    assert table.loc[table["chosen"], "lr"].unique().tolist() == [0.1]
    with pytest.raises(ConfigError, match="no step size"):
        choose_lr(settings("toy", True, lr_grid=(1e4,)), [1], n_jobs=1, cache_dir=tmp_path)


def test_summary_parts_name_a_column_that_no_part_shows():
    frame = pd.DataFrame([{**dict.fromkeys(["experiment", "protocol", "twin_init", "n_layers", "beta", "beta_ffn"], 1),
                           "rate": 0.1, "new_measure": 2.0}])
    with pytest.raises(ValueError, match=r"\['new_measure'\] are in no part of tables.SUMMARY_PARTS"):
        summary_parts(frame)


@pytest.mark.parametrize("dataset", ["toy", "toy_cls"])
def test_whole_section_on_toy_data(tmp_path, monkeypatch, dataset):
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path / "results"))
    monkeypatch.setenv("RESGD_FIGURES_DIR", str(tmp_path / "figures"))  # a publish keeps its builds there: never the user's
    s = settings(dataset, True, betas=(0.0, 0.5, 1.0), iterations=10, depth_iterations=10)
    results = run_experiments(s, n_jobs=1)
    assert set(results.runs["experiment"]) == {"beta", "depth", "factorial"}
    per_run = results.per_run()
    # β sweep: 3 β × (8 interval seeds common + 8 theory 0.5; design v5) + 2 β × 2 seeds × (c = 0.25, 1);
    # factorial 4 × 8 interval seeds; depth: 2 L × 2 seeds × 2 models × 2 protocols + 2 L × 1 seed for each of the
    # He-scaled and the dead twin (sensitivity rows); the plain init of β = 0.5 under theory c = 0.5, 2 seeds
    assert len(s.interval_seeds) == 8 and s.interval_seeds[:2] == s.seeds
    assert len(per_run) == 24 + 24 + 8 + 32 + 16 + 2 + 2 + 2
    plain = per_run[(per_run["experiment"] == "beta") & (per_run["twin_init"] == "living")]
    assert set(plain["beta"]) == {0.5} and set(plain["protocol"]) == {"theory c=0.5"}
    init = beta_init_table(results)
    assert set(init["init"]) == {"matched (design)", "plain (sensitivity)"} and (init["seeds"] == 2).all()
    assert {"mu", "rate", "rate_per_mu"} <= set(init.columns)
    horizons = horizon_table(results)
    assert {"T/4", "T/2", "T", "verdict", "decides", "earlier rule at T"} <= set(horizons.columns)
    assert set(horizons["verdict"]) <= {"holds", "fails", "horizon-dependent", "undecided"}
    common = horizons[horizons["protocol"] == "common"].set_index("claim")["decides"]
    assert common["residual_helps"] and common["beta_monotone"]  # the common β sweep's 8 seeds decide (v5)
    assert not common["depth_residual_helps"]  # 2 seeds: descriptive
    regime = regime_table(results)
    assert (regime["left"] <= regime["runs"]).all() and (regime["diverged"] <= regime["left"]).all()
    assert {"engine_engine", "engine_mkl_path", "engine_isa", "engine_torch"} <= set(per_run.columns)  # the path of every run
    assert set(per_run["protocol"]) == {"common", "theory c=0.25", "theory c=0.5", "theory c=1"}
    assert set(per_run["outcome"]) <= {"learning", "stalled", "diverged"}
    theory = results.lr[results.lr["protocol"] == "theory c=0.5"]
    assert theory["lr"].nunique() > 1  # the theorem's step differs per configuration
    # … and per seed: each run's μ is c / L̂ at its own θ⁰
    assert theory.groupby(["experiment", "beta", "beta_ffn", "n_layers"])["lr"].nunique().gt(1).all()
    rules = {(v.protocol, v.name): v.numbers.get("rule", v.numbers.get("attention", {}).get("rule", "sign"))
             for v in results.verdicts()}
    assert rules[("theory c=0.5", "residual_helps")] == rules[("theory c=0.5", "beta_monotone")] == "interval"
    assert rules[("theory c=0.5", "factorial")] == rules[("common", "residual_helps")] == rules[("common", "beta_monotone")] == "interval"
    assert rules[("theory c=1", "residual_helps")] == rules[("common", "depth_residual_helps")] == "sign"
    summary = results.summary()
    assert {"loss_T", "iterations_to_target", "rate", "stalled", "diverged", "loss_ratio_T"} <= set(summary.columns)
    assert ("train_acc" in summary.columns) == (dataset == "toy_cls")
    parts = summary_parts(summary)  # the page's three narrower tables: every value of the results table, once
    assert max(len(part.columns) for part in parts.values()) <= 6
    joined = pd.concat(parts.values(), axis=1).reset_index()
    pd.testing.assert_frame_equal(joined[list(summary.columns)], summary, check_exact=True)
    assert len(joined.columns) == len(summary.columns)
    names = [(v.protocol, v.name) for v in results.verdicts()]
    assert ("theory c=0.5", "factorial") in names and ("common", "depth_residual_helps") in names
    numbers = page_numbers(results)
    assert {"theory-a", "common-b", "theory-f-carried", "common-L3-dead-lossT", "common-L3-living-lossT", "theory-a-level",
            "common-a-level", "common-a-won", "common-b-detail", "replay-first-differs",
            "theory-c-positive", "replay-changed", "horizon-dependent", "descriptive", "theory-left"} <= set(numbers)
    assert numbers["horizon-dependent-are"] == ("is" if numbers["horizon-dependent"] == 1 else "are")
    assert numbers["descriptive-are"] == ("is" if numbers["descriptive"] == 1 else "are")
    predictions = results.readout()  # one row per distinct run (the factorial's corners are β-sweep runs)
    assert len(predictions) == len(per_run.drop_duplicates(["twin_init", "beta", "beta_ffn", "n_layers", "seed", "lr"]))
    assert (predictions["predicted"] > 0).all() and set(predictions["experiment"]) == {"beta", "factorial", "depth"}
    assert numbers["readout-runs"] <= len(predictions) and -1 <= numbers["readout-spearman"] <= 1
    paths = write_outputs(results)
    assert paths["claims"] == tmp_path / "results" / "claims" / f"{dataset}_quick.json"
    assert set(FIGURE_KINDS) - set(figure_kinds(results)) == {"v6-pairs", "v6-path"}  # no v6 seeds here
    for kind in figure_kinds(results):
        fig = make_figure(results, kind)
        assert fig.axes and any(t.get_text().startswith("SYNTHETIC") for t in fig.texts)  # stand-in banner
        plt.close(fig)


def test_per_run_measures_on_hand_made_histories():
    """The pre-registered measures: rate on the first half, iterations to ½Φ(0), stalled vs learning."""
    rows = []
    for seed, decay in ((0, 0.1), (1, 0.0)):
        for t in range(11):
            rows.append({"experiment": "beta", "protocol": "common", "twin_init": "living", "dataset": "toy",
                         "beta": 1.0, "beta_ffn": 1.0, "n_layers": 1, "lr": 0.1, "seed": seed, "iteration": t,
                         "loss": 2.0 * math.exp(-decay * t), "ratio": math.exp(-decay), "iterations": 10,
                         "diverged": False, "diverged_at": math.nan, "sigma_min_Z": 1.0, "sigma_max_Z": 2.0,
                         "test_loss": math.nan, "train_acc": math.nan, "test_acc": math.nan, "is_standin": True,
                         "source_label": "toy"})
    per_run = per_run_table(pd.DataFrame(rows)).set_index("seed")
    assert per_run.loc[0, "rate"] == pytest.approx(0.1) and per_run.loc[0, "outcome"] == "learning"
    assert per_run.loc[0, "iterations_to_target"] == 7  # first t with exp(-0.1 t) <= 1/2
    assert per_run.loc[1, "outcome"] == "stalled" and per_run.loc[1, "iterations_to_target"] == math.inf
    assert per_run.loc[0, "first_to_target"] == -7 and per_run.loc[1, "first_to_target"] == -math.inf
    assert per_run.loc[0, "loss_ratio_T"] == pytest.approx(math.exp(-1.0))


def test_who_gets_there_first_is_not_the_rate_when_one_run_meets_a_floor():
    """The replayed measure reads the curves at ½Φ(0): a run that falls fast to a floor just under
    it gets there first yet has the lower rate over T; the rules, applied to first_to_target, say so."""
    from resgd.experiments import claims

    T = 40
    fast_floor = [max(2.0 * math.exp(-0.5 * t), 0.9) for t in range(T + 1)]  # ½Φ(0) = 1 at t = 2, then a floor at 0.9
    steady = [2.0 * math.exp(-0.05 * t) for t in range(T + 1)]  # ½Φ(0) at t = 14, Φ(T) = 0.27
    rows = []
    for seed in range(8):
        for beta, losses in ((1.0, fast_floor), (0.0, steady)):
            rows += [{**r, "experiment": "beta", "beta": beta, "beta_ffn": beta, "protocol": "common"}
                     for r in _history([x * (1 + seed / 100) for x in losses], seed=seed)]
    per_run = per_run_table(pd.DataFrame(rows))
    by_rate = {v.name: v.outcome for v in claims.evaluate(per_run, "toy")}
    by_first = {v.name: v.outcome for v in claims.evaluate(per_run.assign(rate=per_run["first_to_target"]), "toy")}
    assert by_rate["residual_helps"] == "fails" and by_first["residual_helps"] == "holds"


def _history(losses, *, diverged_at=math.nan, seed=0):
    T = len(losses) - 1 if math.isnan(diverged_at) else 20
    return [{"experiment": "beta", "protocol": "theory c=0.5", "twin_init": "matched", "dataset": "toy", "beta": 1.0,
             "beta_ffn": 1.0, "n_layers": 1, "lr": 0.1, "seed": seed, "iteration": t, "loss": loss, "ratio": math.nan,
             "iterations": T, "diverged": not math.isnan(diverged_at), "diverged_at": diverged_at,
             "sigma_min_Z": 1.0, "sigma_max_Z": 2.0, "test_loss": math.nan, "train_acc": math.nan, "test_acc": math.nan,
             "is_standin": True, "source_label": "toy"} for t, loss in enumerate(losses)]


def test_a_run_read_at_a_shorter_horizon_and_where_it_left_the_regime():
    from resgd.experiments.results import left_regime_at

    falling = [2.0 * math.exp(-0.1 * t) for t in range(21)]
    bumped = falling[:12] + [falling[11] * 1.01] + falling[13:]  # the step 11 -> 12 raised Φ
    blown = falling[:15] + [1e6]  # diverged at t = 15
    table = pd.DataFrame(_history(falling) + _history(bumped, seed=1) + _history(blown, diverged_at=15, seed=2))
    full = per_run_table(table).set_index("seed")
    assert math.isnan(full.loc[0, "left_regime_at"]) and not full.loc[0, "left_regime"]
    assert full.loc[1, "left_regime_at"] == 11 and full.loc[1, "left_regime"]
    assert full.loc[2, "left_regime_at"] == 14 and full.loc[2, "diverged"] and full.loc[2, "rate"] == -math.inf
    half = per_run_table(table, horizon=0.5).set_index("seed")
    assert (half["iterations"] == 10).all() and half.loc[0, "rate"] == pytest.approx(0.1)
    assert not half.loc[1, "left_regime"] and not half.loc[2, "diverged"]  # both happen after t = 10
    assert half.loc[2, "rate"] == pytest.approx(0.1)
    assert math.isnan(left_regime_at([1.0, 1.0 + 1e-12, 0.5]))  # rounding at a floor is not a rise
    with pytest.raises(ValueError, match="horizon"):
        per_run_table(table, horizon=1.5)


def test_the_standins_sensitivity_row_runs_at_its_own_small_size_with_the_same_seeds_and_rules():
    """The full page's stand-in row keeps N = 64, T = 300 (the quick preset's until quick became a
    smoke build): a smaller quick preset must not move a full-mode number."""
    from resgd.experiments.sources import standin_settings

    full = settings("jena", False)
    row = standin_settings(full)
    assert row.dataset == "jena_standin" and (row.N, row.iterations) == (64, 300)
    assert (row.N, row.iterations) < (full.N, full.iterations)
    assert (row.interval_seeds, row.seeds, row.safety, row.lr_grid) == (full.interval_seeds, full.seeds, full.safety, full.lr_grid)
    small = settings("jena", True, n_train=16, iterations=20)
    assert (standin_settings(small).N, standin_settings(small).iterations) == (16, 20)  # never larger than asked
