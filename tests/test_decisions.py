"""Design v6's measure and rules (resgd.experiments.decisions): times to targets, censoring, the paired
signs, the claim over the ladder, and its false-decision rate simulated through the pipeline as run."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from resgd.experiments import decisions as lad
from resgd.experiments.design import ALPHA, LADDER


def test_times_to_targets_reads_the_first_crossing_and_censors_the_rest():
    loss = np.array([10.0, 6.0, 4.0, 3.0, 2.5, 2.2])
    t = lad.times_to_targets(loss, floor=2.0, ladder=(0.5, 0.25, 0.1, 0.01))
    # targets 2 + q·8: 6, 4, 2.8, 2.08
    assert t.tolist() == [1.0, 2.0, 4.0, math.inf]


def test_a_diverged_run_never_reaches_a_target_after_its_losses_stop_being_finite():
    t = lad.times_to_targets(np.array([1.0, 0.9, np.nan, np.inf]), floor=0.0, ladder=(0.5,))
    assert t.tolist() == [math.inf]


def test_first_to_reach_and_censored_pairs():
    assert lad.first_to_reach(3, 5) == 1.0
    assert lad.first_to_reach(5, 3) == -1.0
    assert lad.first_to_reach(4, 4) == 0.0
    assert lad.first_to_reach(4, math.inf) == 1.0
    assert lad.first_to_reach(math.inf, 4) == -1.0
    assert math.isnan(lad.first_to_reach(math.inf, math.inf))


def test_a_decided_pair_cannot_flip_by_training_longer():
    """Truncating two runs at a shorter cap leaves every decided sign as it was (or censored)."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        a, b = (np.exp(-rng.uniform(1e-3, 2e-2) * np.arange(400)) for _ in range(2))
        long = lad.pair_signs(lad.times_to_targets(a, 0.0)[None], lad.times_to_targets(b, 0.0)[None])[0]
        short = lad.pair_signs(lad.times_to_targets(a[:150], 0.0)[None], lad.times_to_targets(b[:150], 0.0)[None])[0]
        decided = ~np.isnan(short)
        assert np.array_equal(short[decided], long[decided])


def test_rises_count_steps_that_raised_the_loss():
    assert lad.rises(np.array([3.0, 2.0, 2.5, 1.0, np.inf])) == 2
    assert lad.rises(np.array([3.0, 2.0, 1.0])) == 0


def test_ladder_outcome_reads_testable_rungs_only():
    holds = {"outcome": "holds", "testable": True}
    fails = {"outcome": "fails", "testable": True}
    undecided = {"outcome": "undecided", "testable": True}
    untestable = {"outcome": "undecided", "testable": False}
    assert lad.ladder_outcome([holds, holds, untestable]) == "holds"
    assert lad.ladder_outcome([fails, fails]) == "fails"
    assert lad.ladder_outcome([holds, undecided]) == "target-dependent"
    assert lad.ladder_outcome([holds, fails]) == "target-dependent"
    assert lad.ladder_outcome([undecided, untestable]) == "undecided"
    assert lad.ladder_outcome([untestable, untestable]) == "could not be tested"


def test_decide_needs_ten_of_twelve_seeds():
    signs = np.ones((12, len(LADDER)))
    signs[:2] = -1
    assert lad.decide(signs)["outcome"] == "holds"
    signs[:3] = -1
    assert lad.decide(signs)["outcome"] == "undecided"
    censored = np.full((12, len(LADDER)), np.nan)
    assert lad.decide(censored)["outcome"] == "could not be tested"


def test_beta_and_depth_signs():
    betas = np.array([0.0, 0.5, 1.0])
    times = np.array([[[30.0], [20.0], [10.0]], [[10.0], [20.0], [math.inf]], [[math.inf], [math.inf], [math.inf]]])
    signs = lad.beta_signs(times, betas)
    assert signs[0, 0] == 1.0 and signs[1, 0] == -1.0 and math.isnan(signs[2, 0])
    by_depth = np.array([[[1.0], [1.0], [-1.0]], [[np.nan], [np.nan], [np.nan]], [[1.0], [-1.0], [np.nan]]])
    assert lad.depth_signs(by_depth)[:, 0].tolist()[0] == 1.0
    assert math.isnan(lad.depth_signs(by_depth)[1, 0]) and lad.depth_signs(by_depth)[2, 0] == 0.0


def test_ladder_table_estimates_the_floor_per_comparison():
    rows = []
    for seed, final in ((0, 1.0), (1, 2.0)):
        loss = np.linspace(10.0, final, 11)
        rows += [{"protocol": "p", "experiment": "beta", "n_layers": 1, "beta": 1.0, "seed": seed, "iteration": t,
                  "loss": v, "diverged": False} for t, v in enumerate(loss)]
    table = lad.ladder_table(pd.DataFrame(rows), ["beta", "seed"], ["protocol", "experiment", "n_layers"],
                             realisable=False)
    assert table["floor"].tolist() == [1.0, 1.0]
    assert math.isinf(table.loc[table["seed"] == 1, "t_1/100"].iloc[0])
    realisable = lad.ladder_table(pd.DataFrame(rows), ["beta", "seed"], ["protocol"], realisable=True)
    assert realisable["floor"].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("claim", ["a", "b", "c"])
def test_the_rules_false_decision_rate_as_run_is_at_most_alpha(claim):
    """No effect (the arms are exchangeable): each direction decides at most ALPHA of the time, through
    the pipeline as run (estimated floor, censoring at the cap, a seed's runs dependent)."""
    rates = lad.simulate_rule(claim, reps=300, cap=600, rng_seed=11)
    # 300 draws: a true rate of 5 % exceeds 9 % with probability < 0.2 %
    assert rates["holds"] <= 0.09 and rates["fails"] <= 0.09
    assert rates["alpha"] == ALPHA


def test_the_simulation_can_detect_a_real_effect():
    """The same simulation with one arm twice as fast decides 'holds' (the test is not vacuous)."""
    rng = np.random.default_rng(0)
    t = np.arange(601.0)
    signs = []
    for _ in range(12):
        r = math.exp(rng.normal(math.log(5e-3), 0.3))
        fast, slow = np.exp(-2 * r * t), np.exp(-r * t)
        signs.append(lad.pair_signs(lad.times_to_targets(fast, 0.0)[None], lad.times_to_targets(slow, 0.0)[None])[0])
    assert lad.decide(np.array(signs))["outcome"] == "holds"
