"""Design v6's verdicts (resgd.experiments.study) on hand-made ladders, and end to end on the toy data."""

from __future__ import annotations

import math

import pandas as pd

from resgd.experiments import study as v6
from resgd.experiments.configuration import settings
from resgd.experiments.results import write_outputs
from resgd.experiments.study import run_experiments
from resgd.experiments.design import LADDER
from resgd.experiments.decisions import rung_name

TIMES = [f"t_{rung_name(q)}" for q in LADDER]


def _ladder(times_with, times_without, protocol=v6.OWN, betas=(1.0, 0.0)):
    rows = []
    for beta, times in zip(betas, (times_with, times_without)):
        for seed, t in enumerate(times):
            rows.append({"experiment": "beta", "protocol": protocol, "twin_init": "matched", "beta": beta,
                         "beta_ffn": beta, "n_layers": 1, "seed": seed, "floor": 0.0, "cap": 100, "diverged": False,
                         "rises": 0, "loss_0": 1.0, "loss_cap": 0.1, **dict(zip(TIMES, t))})
    return pd.DataFrame(rows)


REALISABLE = {"realisable": True, "loss_ratio": 1e-5, "bound": 1e-3}


def _by_name(verdicts):
    return {v.name: v for v in verdicts}


def test_the_residual_first_in_every_seed_holds_and_the_sentence_says_so():
    fast, slow = [[1, 2, 3, 4]] * 12, [[2, 3, 4, 5]] * 12
    v = _by_name(v6.speed_verdicts(_ladder(fast, slow), "toy", REALISABLE))["residual_helps"]
    assert v.outcome == "holds"
    assert "holds at every testable rung" in v6.speed_sentence(v) and "12 for, 0 against" in v6.speed_sentence(v)


def test_censored_pairs_count_on_neither_side_and_an_untestable_rung_does_not_decide():
    inf = math.inf
    fast, slow = [[1, 2, 3, inf]] * 12, [[2, 3, 4, inf]] * 12
    v = _by_name(v6.speed_verdicts(_ladder(fast, slow), "toy", REALISABLE))["residual_helps"]
    assert v.outcome == "holds"
    last = v.numbers["rungs"][-1]
    assert last["censored"] == 12 and not last["testable"]


def test_the_other_arm_first_fails_and_mixed_rungs_are_target_dependent():
    fast, slow = [[1, 2, 3, 4]] * 12, [[2, 3, 4, 5]] * 12
    assert _by_name(v6.speed_verdicts(_ladder(slow, fast), "toy", REALISABLE))["residual_helps"].outcome == "fails"
    mixed_with = [[1, 2, 5, 6]] * 12
    mixed_without = [[2, 3, 4, 5]] * 12
    assert _by_name(v6.speed_verdicts(_ladder(mixed_with, mixed_without), "toy", REALISABLE))[
        "residual_helps"].outcome == "target-dependent"


def test_the_theorem_question_on_data_that_cannot_be_fitted_could_not_be_tested():
    fast, slow = [[1, 2, 3, 4]] * 12, [[2, 3, 4, 5]] * 12
    not_fitted = {"realisable": False, "loss_ratio": 0.06, "bound": 1e-3}
    v = _by_name(v6.speed_verdicts(_ladder(fast, slow, protocol=v6.PATH), "toy", not_fitted))["residual_helps"]
    assert v.outcome == "could not be tested"
    assert "not realisable" in v6.speed_sentence(v)


def test_the_toy_study_runs_design_v6_end_to_end_and_writes_its_verdicts(tmp_path, monkeypatch):
    monkeypatch.setenv("RESGD_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("RESGD_FIGURES_DIR", str(tmp_path / "figures"))  # a publish keeps its builds there: never the user's
    monkeypatch.setenv("RESGD_STORE", "off")
    s = settings("toy", True, v6_seeds=(0, 1, 2), regime_N=4, regime_iterations=20)
    results = run_experiments(s, n_jobs=1, cache_dir=tmp_path / "cache")
    speed = results.speed
    assert set(speed.runs["protocol"]) == {v6.OWN, v6.PATH}
    assert len(speed.ladder()) == len(speed.runs.groupby(v6.RUN_KEYS)) + len(speed.common.groupby(v6.RUN_KEYS))
    chosen = speed.steps[speed.steps["chosen"]]
    assert len(chosen) == len(s.betas) + 2 * len(s.depths)
    path = speed.path()
    assert (path["max_muL_checkpoint"] <= 0.5 * (1 + 1e-12)).all()
    names = {(v.name, v.protocol) for v in speed.verdicts()}
    assert ("depth_residual_helps", v6.OWN) in names and ("residual_helps", v6.PATH) in names
    assert all(v.outcome == "could not be tested" for v in speed.verdicts() if v.protocol != v6.COMMON)  # 3 seeds
    paths = write_outputs(results)
    assert paths["speed_claims"].name == "toy_quick_v6.json"
    table = v6.load_speed_verdicts("quick", tmp_path / "results" / "claims", datasets=("toy",))
    assert len(table) == len(speed.verdicts()) and table["sentence"].str.len().gt(0).all()
    replay = v6.rate_replay(speed)
    assert list(replay["horizon"].unique()) == ["T/2", "T", "2T"] and set(replay["claim"]) == {
        "residual_helps", "depth_residual_helps"}
    numbers = v6.speed_numbers(speed)
    assert numbers["v6-seeds"] == 3 and numbers["v6-own-runs"] == 3 * (len(s.betas) + 2 * len(s.depths))


def test_claim_b_names_its_shape_as_the_paper_states_it():
    times = {0.0: [[9, 9, 9, 9]] * 12, 0.5: [[5, 9, 9, 9]] * 12, 1.0: [[1, 2, 12, 9]] * 12}
    rows = []
    for beta, per_seed in times.items():
        for seed, t in enumerate(per_seed):
            rows.append({"experiment": "beta", "protocol": v6.OWN, "twin_init": "matched", "beta": beta,
                         "beta_ffn": beta, "n_layers": 1, "seed": seed, "floor": 0.0, "cap": 100, "diverged": False,
                         "rises": 0, "loss_0": 1.0, "loss_cap": 0.1, **dict(zip(TIMES, t))})
    v = _by_name(v6.speed_verdicts(pd.DataFrame(rows), "toy", REALISABLE))["beta_monotone"]
    assert v6.speed_sentence(v).endswith("the median time falls as β grows at q = 1/2, 1/4, 1/100, not at q = 1/10.")


def test_the_own_step_grid_is_the_pre_registered_one_in_full_mode_and_coarser_only_in_quick():
    """Quick mode (the smoke build) searches every other step of design.OWN_GRID; full mode the whole
    pre-registered grid, so that the smoke build's shortcut moves no full-mode number."""
    import pytest

    from resgd.experiments.design import OWN_GRID
    from resgd.experiments.study import own_grid
    from resgd.validation import ConfigError

    for dataset in ("jena", "sst2"):
        assert own_grid(settings(dataset, False)) == OWN_GRID
        quick = own_grid(settings(dataset, True))
        assert set(quick) < set(OWN_GRID) and (quick[0], quick[-1]) == (OWN_GRID[0], OWN_GRID[-1])
    with pytest.raises(ConfigError, match="own_grid_stride"):
        settings("jena", True, own_grid_stride=0)
