"""The 8-seed arms of the experiment pages: which arms use the interval rule, how many
seeds they train, what the design costs, and the rule itself — holds, fails, undecided, its
level, its chance rate on simulated no-effect data, and the one-line error for too few seeds."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from resgd.core.stats import order_statistic_coverage
from resgd.experiments import claims, decisions, design
from resgd.experiments.configuration import settings


def _table(beta_rates: dict[float, list[float]], factorial: dict | None = None) -> pd.DataFrame:
    rows = [("beta", 1, b, b, seed, r) for b, rates in beta_rates.items() for seed, r in enumerate(rates)]
    rows += [("factorial", 1, b, f, seed, r) for (b, f), rates in (factorial or {}).items() for seed, r in enumerate(rates)]
    frame = pd.DataFrame(rows, columns=["experiment", "n_layers", "beta", "beta_ffn", "seed", "rate"])
    return frame.assign(protocol="theory c=0.5", twin_init="matched")


def test_interval_arms_are_the_deciding_single_layer_arms():
    assert design.rule("beta", "theory c=0.5") == design.rule("factorial", "theory c=0.5") == "interval"
    assert design.rule("beta", "common") == "interval"  # design v5
    assert design.rule("depth", "theory c=0.5") == design.rule("depth", "common") == design.rule("beta", "theory c=1") == "sign"
    for quick in (True, False):
        s = settings("jena", quick, seed=3)
        assert s.interval_seeds == tuple(range(3, 11)) and s.interval_seeds[: len(s.seeds)] == s.seeds
        seeds = {(a.experiment, a.label, a.twin_init): a.seeds(s) for a in design.arms(s.betas, s.depths)}
        assert seeds[("beta", "theory c=0.5", "matched")] == seeds[("factorial", "theory c=0.5", "matched")] == s.interval_seeds
        assert seeds[("beta", "common", "matched")] == s.interval_seeds  # v5: the common β sweep decides too
        assert seeds[("beta", "theory c=1", "matched")] == seeds[("depth", "theory c=0.5", "matched")] == s.seeds
        assert seeds[("depth", "common", "scaled")] == seeds[("depth", "common", "living")] == s.seeds[:1]


def test_training_cost_counts_each_distinct_run_once():
    s = settings("jena", False)
    one = s.N * s.iterations  # a single-layer run
    depth = sum(s.depth_N * L * s.depth_iterations for L in s.depths)  # one (model, seed) over every depth
    n, k = len(s.seeds), len(s.interval_seeds)
    # β sweep: common 5 β × k, theory 5 β × k, c = 0.25, 1: 2 β × n each; factorial: its 2 off-diagonal cells × k
    single = one * (5 * k + 5 * k + 4 * n + 2 * k)
    # depth: 2 models × n seeds × 2 protocols, the He-scaled and the dead twins 1 seed each
    assert design.training_cost(s) == single + depth * (4 * n + 2)
    before = design.training_cost(replace(s, interval_seeds=s.seeds))
    assert design.training_cost(s) - before == one * 12 * (k - n)


def test_interval_rule_decides_by_the_exact_interval():
    level = order_statistic_coverage(8, 2)
    up = decisions.interval_rule(np.linspace(0.1, 0.8, 8), "t")
    assert up["outcome"] == "holds" and up["lo"] == pytest.approx(0.2) and up["level"] == pytest.approx(level)
    assert up["chance"] == pytest.approx(1 - level) and round(100 * level, 1) == 93.0
    assert decisions.interval_rule(-np.linspace(0.1, 0.8, 8), "t")["outcome"] == "fails"
    # one seed against out of 8 still holds (x_(2) > 0); two against do not
    assert decisions.interval_rule([-1, 1, 2, 3, 4, 5, 6, 7], "t")["outcome"] == "holds"
    assert decisions.interval_rule([-1, -0.5, 2, 3, 4, 5, 6, 7], "t")["outcome"] == "undecided"
    # a seed whose two runs both diverged (NaN difference) is left out; ±∞ sort
    assert decisions.interval_rule([math.nan, math.inf, 1, 2, 3, 4, 5, 6], "t")["outcome"] == "holds"


@pytest.mark.parametrize("n", [0, 3, 7])
def test_interval_rule_needs_eight_seeds_one_line_error(n):
    with pytest.raises(ValueError) as info:
        decisions.interval_rule(np.ones(n), "claim (a)")
    assert "\n" not in str(info.value) and ">= 8 seeds" in str(info.value) and f"got {n}" in str(info.value)


def test_interval_rule_chance_rate_on_simulated_no_effect():
    """No effect (symmetric noise about 0): "holds" and "fails" each at most (1 − level)/2 = 3.5 %."""
    rng = np.random.default_rng(0)
    draws = 20000
    outcomes = [decisions.interval_rule(rng.standard_t(3, size=8), "t")["outcome"] for _ in range(draws)]
    bound = (1 - order_statistic_coverage(8, 2)) / 2
    se = math.sqrt(bound * (1 - bound) / draws)
    for side in ("holds", "fails"):
        assert abs(outcomes.count(side) / draws - bound) < 4 * se  # exact for a continuous law
    # and with an effect of 2 sd it finds it: P(at most one of 8 draws ≤ 0) = 0.987 at p = Φ(−2)
    found = [decisions.interval_rule(2.0 + rng.standard_normal(8), "t")["outcome"] for _ in range(2000)]
    assert found.count("holds") / 2000 > 0.97


def test_interval_checks_of_a_b_and_the_factorial():
    seeds = 8
    ramp = {b: [0.01 + 0.04 * b + 0.001 * s for s in range(seeds)] for b in (0.0, 0.25, 0.5, 0.75, 1.0)}
    cells = {(0.0, 0.0): [0.01] * seeds, (0.0, 1.0): [0.02 + 0.001 * s for s in range(seeds)],
             (1.0, 0.0): [0.005 - 0.001 * s for s in range(seeds)], (1.0, 1.0): [0.012] * seeds}
    frame = _table(ramp, cells)
    a = claims.check_residual_helps(frame, rule="interval")
    assert a.outcome == "holds" and a.numbers["rule"] == "interval" and a.numbers["seeds"] == seeds
    b = claims.check_beta_monotone(frame, rule="interval")
    assert b.outcome == "holds" and b.numbers["spearman"] == pytest.approx(1.0)
    reversed_b = claims.check_beta_monotone(_table({k: [-r for r in v] for k, v in ramp.items()}), rule="interval")
    assert reversed_b.outcome == "fails"
    f = claims.check_factorial(frame, rule="interval")
    # FFN skip: +0.01 + 0.001 s (at β = 0) and +0.007 + 0.001 s (at β = 1): speeds up; attention: mixed
    assert f.numbers["ffn"]["effect"] == "speeds up" and f.numbers["carried_by"] == "FFN"
    # evaluate picks the rule by the arm: the theorem's L = 1 arms use the interval rule
    verdicts = {v.name: v for v in claims.evaluate(frame, "jena")}
    assert verdicts["residual_helps"].numbers["rule"] == "interval"
    with pytest.raises(ValueError, match=">= 8 seeds"):
        claims.evaluate(frame[frame["seed"] < 3], "jena")
    with pytest.raises(ValueError, match="unknown verdict rule"):
        claims.check_residual_helps(frame, rule="vote")


def test_the_costs_stated_in_our_choices_are_the_design_s():
    """book/choices.md ("Seeds") states what the 8-seed arms add and what an L = 10 run costs, in
    sample·layer·iterations: the numbers there are recomputed here (the page has no code to glue them)."""
    import re
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[1] / "book" / "choices.md").read_text(encoding="utf-8").split())
    stated = re.search(r"by (\d+) % in full mode \((\d+) % in quick mode\)", text)
    run = re.search(r"an \$L = 10\$ run is about ([\d.]+) single-layer runs", text)
    assert stated and run, "the Seeds paragraph of book/choices.md no longer states the costs"
    for quick, percent in ((False, stated.group(1)), (True, stated.group(2))):
        sets = [settings(ds, quick) for ds in ("jena", "sst2")]
        now = sum(design.training_cost(s) for s in sets)
        before = sum(design.training_cost(replace(s, interval_seeds=s.seeds)) for s in sets)
        assert round(100 * (now / before - 1)) == int(percent)
    for ds in ("jena", "sst2"):
        s = settings(ds, False)
        assert s.depth_N * 10 * s.depth_iterations / (s.N * s.iterations) == pytest.approx(float(run.group(1)), abs=0.1)
