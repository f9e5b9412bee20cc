"""The robustness map: grid design, statistics and verdict rule, summaries, figure, and one
tiny end-to-end map on the synthetic ``toy`` data."""

from __future__ import annotations

import math
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")  # tests only; never in a notebook

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from resgd.robustness import study as rb  # noqa: E402
from resgd.plots.robustness import plot_horizons, plot_phase_diagram, plot_theory_link  # noqa: E402
from resgd.robustness import verdicts as stats, summary  # noqa: E402
from resgd.validation import ConfigError  # noqa: E402

GRID = rb.map_grid(True, datasets=("toy",), iterations=50, horizons=(25, 50))
CELL = dict(dataset="toy", qk_scale=1.0, fraction=0.5, N=16, protocol="common")
SEEDS = tuple(range(8))


def per_run(loss, *, seeds=SEEDS, betas=(0.0, 0.25, 0.5, 0.75, 1.0), depths=(2, 6, 10), start=None) -> pd.DataFrame:
    """A synthetic per-run table: ``loss(beta, L, seed)`` at both horizons, Φ(0) = ``start(beta)``
    (default 1, so relative loss = loss)."""
    rows = []
    points = [(b, 1, "matched") for b in betas] + [p for L in depths for p in ((1.0, L, "matched"), (0.0, L, "matched"))]
    for beta, L, init in points:
        for s in seeds:
            value = loss(beta, L, s)
            phi0 = 1.0 if start is None else start(beta)
            rows.append({**CELL, "beta": beta, "n_layers": L, "init": init, "seed": s, "lr": 0.1,
                         "diverged": value == math.inf, "outcome": "diverged" if value == math.inf else "learns",
                         "loss_start": phi0, "loss_25": value, "loss_50": value, "relative_25": value / phi0,
                         "relative_50": value / phi0, "iterations_to_target": 10.0 if beta else 20.0,
                         "rate_ratio_Z0": 0.1 if beta else 1e-6})
    return pd.DataFrame(rows)


def verdicts(table: pd.DataFrame, measure: str = "relative") -> dict[str, str]:
    cells = stats.cell_table(table, GRID)
    final = cells[(cells["horizon"] == 50) & (cells["measure"] == measure)]
    return dict(zip(final["claim"], final["verdict"]))


def test_clear_effects_hold():
    table = per_run(lambda b, L, s: 1.0 - 0.5 * b + 0.01 * s)
    assert verdicts(table) == {c: "holds" for c in stats.CLAIM_NAMES}


def test_reversed_effects_fail():
    table = per_run(lambda b, L, s: 0.5 + 0.5 * b + 0.01 * s)
    assert verdicts(table) == {c: "fails" for c in stats.CLAIM_NAMES}


def test_seeds_that_disagree_are_undecided():
    # two of eight seeds reverse the ordering: with 8 seeds the interval is [x_(2), x_(7)], it contains zero
    table = per_run(lambda b, L, s: 1.0 + (0.5 * b if s in (2, 5) else -0.2 * b))
    assert set(verdicts(table).values()) == {"undecided"}
    # one seed of eight reversed: 7 of 8 agree, the exact 93 % interval lies above zero
    table = per_run(lambda b, L, s: 1.0 + (0.5 * b if s == 2 else -0.2 * b))
    assert set(verdicts(table).values()) == {"holds"}


def test_speed_is_judged_free_of_the_starting_loss():
    # β = 1 starts 4x higher and ends 2x higher: on the loss at T the residual "loses", on
    # Φ(T)/Φ(0) (the primary measure) it converges faster
    table = per_run(lambda b, L, s: (0.2 + 0.01 * s) * (1 + b), start=lambda b: 1 + 3 * b)
    assert verdicts(table, "relative")["residual_helps"] == "holds"
    assert verdicts(table, "loss")["residual_helps"] == "fails"


def test_stall_rule_and_probe_limits():
    from resgd.robustness.outcomes import outcome

    assert outcome([13.0, 12.99, 12.99], False, 0.01) == "stalled"  # lost < 1 %: not "stable", not "diverged"
    assert outcome([13.0, 14.0], False, 0.01) == "stalled"
    assert outcome([13.0, 12.0], False, 0.01) == "learns"
    assert outcome([13.0, math.inf], False, 0.01) == "diverged"
    assert outcome([13.0, 1.0], True, 0.01) == "diverged"


def test_claim_c_treats_depths_alike():
    """(c) holds when every depth holds and fails only when every depth fails: one depth failing
    leaves it undecided (the earlier "fails at some depth" was a union of three tests)."""
    one_fails = verdicts(per_run(lambda b, L, s: 1.0 - (0.5 * b if L != 6 else -0.5 * b) + 0.01 * s))
    assert one_fails["depth_residual_helps"] == "undecided" and one_fails["residual_helps"] == "holds"
    all_fail = verdicts(per_run(lambda b, L, s: 1.0 - (0.5 * b if L == 1 else -0.5 * b) + 0.01 * s))
    assert all_fail["depth_residual_helps"] == "fails"


def test_divergence_counts_as_infinite_loss():
    table = per_run(lambda b, L, s: math.inf if b == 0.0 else 1.0 + 0.01 * s)
    cells = stats.cell_table(table, GRID)
    a = cells[(cells["claim"] == "residual_helps") & (cells["horizon"] == 50) & (cells["measure"] == "relative")].iloc[0]
    assert a["verdict"] == "holds" and a["effect"] == stats.LOG_CAP and a["diverged"] == len(SEEDS)
    assert math.isnan(stats.log_ratio(np.array([math.inf]), np.array([math.inf]))[0])


def test_vectorised_spearman_matches_the_reference():
    from resgd.theorem1.study import spearman

    rng = np.random.default_rng(0)
    x = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    rows = rng.normal(size=(50, 5))
    rows[3, 1:3] = rows[3, 0]  # ties
    rows[4, [0, 2]] = math.inf  # two diverged: tied, ranked last
    expected = [spearman(x, np.where(np.isinf(r), np.finfo(float).max, r)) for r in rows]
    np.testing.assert_allclose(stats.spearman_rows(x, rows), expected, rtol=1e-12)
    assert math.isnan(stats.spearman_rows(x, np.ones((1, 5)))[0])


def test_verdict_rule():
    assert stats.verdict(0.1, 0.3) == "holds"
    assert stats.verdict(-0.3, -0.1) == "fails"
    assert stats.verdict(-0.1, 0.3) == "undecided"
    assert stats.verdict(math.nan, 1.0) == "undecided"
    assert stats.verdict(math.inf, math.inf) == "holds"


def test_the_chance_expectation_next_to_the_counts():
    assert stats.chance_verdicts(24, 1 - 2 * 9 / 256)["holds"] == pytest.approx(24 * 9 / 256)
    assert stats.chance_verdicts(24, 0.93, "depth_residual_helps")["fails"] == pytest.approx(24 * 0.035)  # every depth must fail
    cells = stats.cell_table(per_run(lambda b, L, s: 1.0 - 0.5 * b + 0.01 * s), GRID)
    t = stats.tally(cells, 50)
    assert t["level"].tolist() == pytest.approx([1 - 2 * 9 / 256] * 3) and (t["chance_holds"] > 0).all()


def test_best_protocol_picks_each_configurations_best_fraction():
    fast = per_run(lambda b, L, s: 1.0 - 0.5 * b + 0.01 * s).assign(protocol="own", fraction=0.9)
    slow = per_run(lambda b, L, s: 2.0 - 0.1 * b + 0.01 * s).assign(protocol="own", fraction=0.5)
    # β = 0 is better at 0.5 only: the best rows mix fractions per configuration
    slow.loc[slow["beta"] == 0.0, ["loss_25", "loss_50", "relative_25", "relative_50"]] = 0.1
    best = stats.best_step_rows(pd.concat([fast, slow]), 50)
    assert len(best) == len(fast)
    assert set(best.loc[best["beta"] == 0.0, "fraction"]) == {0.5}
    assert set(best.loc[best["beta"] == 1.0, "fraction"]) == {0.9}
    cells = stats.cell_table(pd.concat([fast, slow]), GRID)
    b = cells[(cells["protocol"] == stats.BEST) & (cells["horizon"] == 50) & (cells["measure"] == "relative")]
    assert b["fraction"].isna().all()
    assert dict(zip(b["claim"], b["verdict"]))["residual_helps"] == "fails"  # β = 0 at its best step wins


def test_quick_grid_is_a_subset_of_the_book_and_the_full_grid():
    quick, book, full = rb.map_grid(True), rb.map_grid(False), rb.map_grid(False, complete=True)
    assert quick.is_subset_of(book) and book.is_subset_of(full) and not full.is_subset_of(book)
    assert len(quick.seeds) >= 8 and quick.seeds == book.seeds and len(full.seeds) == 12
    assert quick.headline[0] in full.qk_scales and quick.headline[1] in full.fractions
    assert {tuple(c.values()) for c in quick.cells()} <= {tuple(c.values()) for c in book.cells()}
    assert {tuple(c.values()) for c in book.cells()} <= {tuple(c.values()) for c in full.cells()}
    assert set(full.protocols) == {"common", "own", "theory"} and full.twins == ("matched", "scaled")


def test_grid_rejects_bad_designs():
    with pytest.raises(ConfigError, match="MapGrid.seeds: the interval needs >= 8 distinct seeds"):
        rb.map_grid(True, seeds=(0, 1, 2))
    with pytest.raises(ConfigError, match="MapGrid.protocols"):
        rb.map_grid(True, protocols=("common", "tuned"))
    with pytest.raises(ConfigError, match="MapGrid.theory_c: expected constants c > 0"):
        rb.map_grid(True, theory_c=(0.5, 0.0))
    with pytest.raises(ConfigError, match="MapGrid.twins"):
        rb.map_grid(True, twins=("zombie",))
    with pytest.raises(ConfigError, match="horizons"):
        rb.map_grid(True, horizons=(10, 20))
    with pytest.raises(ConfigError, match="unknown field"):
        rb.map_grid(True, colour="red")
    with pytest.raises(ConfigError, match="MapGrid.dtype"):
        rb.map_grid(True, dtype="float16")
    with pytest.raises(ConfigError, match=r"MapGrid.power_reps: expected a count >= 1 of simulated cells, got 0"):
        rb.map_grid(True, power_reps=0)


def test_the_grid_precision_reaches_every_run():
    grid = rb.map_grid(True, dtype="float32")
    assert grid.settings("jena", 1.0, 16).config(1.0, 1, 0, 0.1).dtype == "float32"
    assert not grid.is_subset_of(rb.map_grid(False, complete=True))  # a float32 map is not part of the float64 one


def test_the_grid_s_mode_reaches_its_settings_and_moves_no_run(monkeypatch):
    """The map's settings start from the experiments' preset of the grid's mode (quick for the quick
    grid, full for the book's and the full one), and starting from the other mode's preset would move
    no run: the two differ only in fields no map run reads, and every run's configuration is the same."""
    from dataclasses import fields

    from resgd.robustness import grid as grid_module

    grids = [rb.map_grid(True), rb.map_grid(False), rb.map_grid(False, complete=True)]
    points = [(grid, dataset, qk, N) for grid in grids for dataset in grid.datasets for qk in grid.qk_scales
              for N in grid.sizes]
    mine = [grid.settings(dataset, qk, N) for grid, dataset, qk, N in points]
    assert [s.quick for s in mine] == [grid.mode == "quick" for grid, *_ in points]
    real = grid_module.settings
    monkeypatch.setattr(grid_module, "settings", lambda dataset, quick, **kw: real(dataset, not quick, **kw))
    other = [grid.settings(dataset, qk, N) for grid, dataset, qk, N in points]
    differ = {f.name for s, t in zip(mine, other) for f in fields(s) if getattr(s, f.name) != getattr(t, f.name)}
    assert "quick" in differ and differ <= {"quick", "depth_N", "depth_iterations", "v6_seeds", "regime_N",
                                            "regime_iterations", "own_grid_stride"}
    for s, t in zip(mine, other):
        for L in (1, *s.depths):
            assert s.config(1.0, L, s.seeds[-1], 0.1) == t.config(1.0, L, t.seeds[-1], 0.1)


def test_summaries():
    cells = pd.DataFrame([{**CELL, "qk_scale": q, "fraction": f, "claim": "residual_helps",
                           "verdict": "holds" if q == 4.0 else "undecided"}
                          for q in (1.0, 4.0) for f in (0.5, 0.9)])
    assert summary.region(cells, "holds") == "2 cells, all with Q/K scale ∈ {4}"
    assert summary.region(cells, "fails") == "nowhere"
    row = pd.Series({"holds": 2, "fails": 0, "undecided": 2, "K": 4})
    assert summary.count_sentence(row) == "holds in 2 of 4 cells (fails in 0, undecided in 2)"
    assert summary.region(cells.assign(verdict=["holds", "x", "x", "x"]), "holds").startswith("1 cell, ")
    assert summary.count_sentence(pd.Series({"holds": 1, "fails": 0, "undecided": 0, "K": 1})).startswith("holds in 1 of 1 cell (")
    both = pd.concat([cells, cells.assign(protocol="own", verdict="fails")])
    changed = summary.protocol_changes(both)
    assert changed[["changed", "K"]].values.tolist() == [[4, 4]]


def test_agreement_flags_a_contradiction_only_where_both_decide():
    base = pd.DataFrame([{**CELL, "claim": c, "horizon": 50, "verdict": v, "effect": 0.0, "measure": "relative"}
                         for c, v in zip(stats.CLAIM_NAMES, ("holds", "undecided", "fails"))])
    full = base.assign(horizon=100, verdict=["fails", "holds", "fails"])
    result = rb.agreement(base, full)
    assert list(result["claim"]) == ["residual_helps", "depth_residual_helps"]
    assert list(result["agree"]) == [False, True]


def test_theory_link_and_tally():
    cells = pd.DataFrame([{**CELL, "qk_scale": q, "claim": "residual_helps", "horizon": 50, "effect": q,
                           "predicted_gain": q * 2, "verdict": "holds", "measure": "relative", "level": 0.93}
                          for q in (0.25, 1.0, 4.0)])
    link = stats.theory_link(cells, 50)
    assert link.loc[link["dataset"] == "toy", "spearman"].iloc[0] == pytest.approx(1.0)
    t = stats.tally(cells, 50)
    assert t[["holds", "fails", "undecided", "K"]].values.tolist() == [[3, 0, 0, 3]]
    assert t["chance_holds"].iloc[0] == pytest.approx(3 * 0.035)


def test_end_to_end_on_toy_data(tmp_path):
    results = rb.build_map(True, datasets=("toy",), qk_scales=(1.0,), fractions=(0.5,), sizes=(6,), n_tokens=4,
                           iterations=10, horizons=(5, 10), depths=(2,), lr_grid=(0.3, 0.1, 0.03),
                           probe_iterations=5, n_jobs=1, cache_dir=tmp_path / "cache", theory_c=(0.5,),
                           twins=("matched", "scaled"))
    assert set(results.cells["claim"]) == {*stats.CLAIM_NAMES, "depth_residual_helps_second"}
    assert set(results.cells["protocol"]) == {"common", "own", "theory", "best"}
    assert set(results.cells["verdict"]) <= set(stats.VERDICTS)
    assert len(results.cells) == 4 * 2 * 2 * 4  # protocols × horizons × measures × claims
    theory = results.per_run[results.per_run["protocol"] == "theory"]
    # the theorem's step per run: each seed its own μ = c / L̂(θ⁰ of that seed)
    assert theory["lr"].notna().all() and theory.groupby(["beta", "n_layers", "init"])["lr"].nunique().gt(1).all()
    assert set(results.per_run.loc[(results.per_run["beta"] == 0) & (results.per_run["n_layers"] == 2), "init"]) == {
        "matched", "scaled"}
    assert set(results.limits["status"]) <= {"learns", "stalled", "diverged"}
    assert set(results.per_run["outcome"]) <= {"learns", "stalled", "diverged"}
    trained = results.per_run[results.per_run["trained"]]
    assert (trained["relative_10"] == trained["loss_10"] / trained["loss_start"]).all()
    single = results.per_run[(results.per_run["n_layers"] == 1) & (results.per_run["protocol"] == "own")]
    assert single["lr"].notna().all()
    assert results.standin_label() == "SYNTHETIC stand-in data for toy"
    from resgd.data import NOT_CANONICAL_LABEL  # a real-format file not checked against the published one
    unchecked = replace(results, per_run=results.per_run.assign(is_standin=False, source_label=NOT_CANONICAL_LABEL))
    assert unchecked.standin_label() == NOT_CANONICAL_LABEL
    assert replace(results, per_run=results.per_run.assign(is_standin=False)).standin_label() is None
    fig = plot_phase_diagram(results.final(), results.grid, protocol="own", standin=results.standin_label())
    assert len(fig.axes) >= 3
    assert any("SYNTHETIC" in text.get_text() for text in fig.texts)
    plt.close(fig)
    fig = plot_horizons(pd.concat([results.tally(T).assign(horizon=T) for T in (5, 10)]))
    plt.close(fig)
    fig = plot_theory_link(results.final())
    assert len(fig.axes) == 4  # one panel per protocol
    plt.close(fig)
    fig = plot_phase_diagram(results.final(), results.grid, protocol="theory")
    plt.close(fig)
    with pytest.raises(ValueError, match="no cells for protocol"):
        plot_phase_diagram(results.final(), results.grid, protocol="tuned")
    figures = rb.figures(results)  # what reproduce publishes: every kind, one name each
    assert set(figures) == {rb.figure_name(kind, "quick") for kind in rb.FIGURE_KINDS}
    for fig in figures.values():
        plt.close(fig)
    assert set(results.readout["protocol"]) == {"common", "own", "theory"} and results.readout["predicted"].notna().all()


def test_verdict_and_measure_tables():
    cells = stats.cell_table(per_run(lambda b, L, s: (0.2 + 0.01 * s) * (1 + b), start=lambda b: 1 + 3 * b), GRID)
    table = summary.verdict_table(stats.tally(cells, 50))
    assert table.loc[("(a) residual vs none", "toy"), "common"].startswith("1 / 0 / 0 of 1 (chance 0.0")
    changed = summary.measure_changes(cells, 50)
    a = changed[(changed["claim"] == "residual_helps") & (changed["protocol"] == "common")].iloc[0]
    assert (a["changed"], a["K"]) == (1, 1)  # holds on Φ(T)/Φ(0), fails on the loss at T


def test_figure_names_are_one_per_kind_and_the_preregistration_is_found():
    names = {rb.figure_name(kind, "quick") for kind in rb.FIGURE_KINDS}
    assert len(names) == len(rb.FIGURE_KINDS) and "robustness_phase_theory_quick" in names
    with pytest.raises(ConfigError, match="figure kind"):
        rb.figure_name("phase_tuned", "quick")
    commit = summary.preregistration_commit()
    if not commit.startswith("not available"):  # a copy with its git history: the map's own commit
        import subprocess

        subject = subprocess.run(["git", "show", "-s", "--format=%s", commit.split()[0]], capture_output=True,
                                 text=True, check=True).stdout
        assert subject.startswith("pre-registered: the robustness map")


def test_a_missing_map_names_what_to_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="make book"):
        rb.load_cells("book", tmp_path)


def test_twin_losses_show_both_ends_and_outcomes():
    table = per_run(lambda b, L, s: 0.5 if b else 0.9, start=lambda b: 1.0)
    t = summary.twin_losses(table, GRID)
    row = t[(t["n_layers"] == 6) & (t["beta"] == 0.0)].iloc[0]
    assert (row["loss_0"], row["loss_T"], row["runs"], row["learns"]) == (1.0, 0.9, len(SEEDS), len(SEEDS))


def test_seed_agreement_counts_the_split_and_the_power_of_the_rule():
    from math import comb

    from resgd.robustness.grid import map_grid
    from resgd.robustness.summary import seed_agreement

    grid = map_grid(False)
    final = pd.DataFrame({"protocol": ["theory"] * 3 + ["common"], "above": [5, 1, 6, 8], "below": [3, 7, 2, 0],
                          "verdict": ["undecided", "fails", "undecided", "holds"]})
    got = seed_agreement(final, grid, "theory")
    assert (got["pairs"], got["decided"], got["n"], got["need"], got["most"], got["median"]) == (3, 1, 8, 7, 7, 6.0)
    assert got["reading"] == "the seeds agree in 1 of 3 pairs, split in the rest"
    p = got["p_power"]
    assert sum(comb(8, j) * p**j * (1 - p) ** (8 - j) for j in (7, 8)) == pytest.approx(0.8, abs=1e-6)


def test_theory_link_draws_capped_cells_at_the_edge_and_keeps_the_range_of_the_others():
    """A cell at the ±20 cap of a diverged run squeezed every other cell into one stripe; now it is
    drawn at the axis' edge as ▼/▲ and the legend says so."""
    import matplotlib

    matplotlib.use("Agg")
    cells = pd.DataFrame({"claim": "residual_helps", "protocol": "common", "dataset": ["jena"] * 3 + ["sst2"],
                          "verdict": ["undecided", "fails", "holds", "undecided"],
                          "effect": [0.2, -20.0, 1.5, 20.0], "predicted_gain": [1.0, 2.0, 3.0, 4.0]})
    fig = plot_theory_link(cells, cap=20.0)
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert -3 < lo < -1.5 and 1.5 < hi < 3  # 1.3 × the largest free |effect| (1.5), not ±20
    drawn = sorted(float(y) for c in ax.collections for _, y in c.get_offsets())
    assert drawn[0] == pytest.approx(-1.95) and drawn[-1] == pytest.approx(1.95)  # the capped ones at the edge
    assert "±20 cap of a diverged run" in fig.legends[0].get_title().get_text()
    plain = plot_theory_link(cells)  # no cap given: drawn as they are
    assert plain.axes[0].get_ylim()[0] < -20
