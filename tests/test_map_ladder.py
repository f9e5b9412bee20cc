"""The robustness map's cells under design v6's measure and rule (resgd.robustness.verdicts.ladder_cells)."""

from __future__ import annotations

import math

import pandas as pd

from resgd.robustness.grid import map_grid
from resgd.robustness.verdicts import ladder_cells, ladder_power, ladder_tally

TIMES = ["t_1/2", "t_1/4", "t_1/10", "t_1/100"]


def _cell(grid, faster_with: bool):
    rows = []
    tags = {"dataset": "jena", "qk_scale": 1.0, "fraction": 0.5, "N": 16, "protocol": "own"}
    fast, slow = [1, 2, 3, math.inf], [2, 3, 4, math.inf]
    for seed in grid.seeds:
        for beta in grid.betas:
            t = fast if (beta == 1.0) == faster_with else slow
            if 0 < beta < 1:
                t = [x + 0.5 for x in slow]
            rows.append({**tags, "beta": beta, "n_layers": 1, "init": grid.twins[0], "seed": seed, **dict(zip(TIMES, t))})
        for L in grid.depths:
            for beta in (1.0, 0.0):
                t = fast if (beta == 1.0) == faster_with else slow
                rows.append({**tags, "beta": beta, "n_layers": L, "init": grid.twins[0], "seed": seed,
                             **dict(zip(TIMES, t))})
    return pd.DataFrame(rows)


def test_a_cell_where_the_residual_is_always_first_holds_and_the_reverse_fails():
    grid = map_grid(True)
    holds = ladder_cells(_cell(grid, True), grid).set_index("claim")["outcome"]
    assert holds["residual_helps"] == "holds" and holds["depth_residual_helps"] == "holds"
    fails = ladder_cells(_cell(grid, False), grid).set_index("claim")["outcome"]
    assert fails["residual_helps"] == "fails" and fails["depth_residual_helps"] == "fails"
    tally = ladder_tally(ladder_cells(_cell(grid, True), grid))
    assert tally["cells"].sum() == 3


def test_the_map_rules_power_grows_with_the_effect_and_stays_small_without_one():
    power = ladder_power(map_grid(True), reps=60)
    assert (power["no effect: decided"] <= 0.15).all()
    a = power.set_index("claim").loc["residual_helps"]
    assert a["holds at 4×"] >= a["holds at 1.5×"]
