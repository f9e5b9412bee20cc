"""Each claim check passes and fails on hand-made per-run tables; verdict files round-trip."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from resgd.experiments import claims


def table(beta_losses: dict[float, list[float]], depth_losses: dict[int, tuple[list[float], list[float]]] | None = None,
          diverged: set[tuple[str, int, float, int]] = frozenset()) -> pd.DataFrame:
    """Rows (experiment, n_layers, beta, seed, loss_T, diverged); ``depth_losses[L] = (β=1 losses, β=0 losses)``."""
    rows = []
    for beta, losses in beta_losses.items():
        for seed, loss in enumerate(losses):
            rows.append(("beta", 1, beta, seed, loss))
    for L, (with_res, without) in (depth_losses or {2: ([0.1, 0.1], [0.5, 0.5])}).items():
        for beta, losses in ((1.0, with_res), (0.0, without)):
            for seed, loss in enumerate(losses):
                rows.append(("depth", L, beta, seed, loss))
    frame = pd.DataFrame(rows, columns=["experiment", "n_layers", "beta", "seed", "loss_T"])
    frame["diverged"] = [(e, L, b, s) in diverged for e, L, b, s in
                         zip(frame["experiment"], frame["n_layers"], frame["beta"], frame["seed"])]
    frame.loc[frame["diverged"], "loss_T"] = math.inf
    return frame


MONOTONE = {0.0: [1.0, 1.2], 0.25: [0.8, 0.9], 0.5: [0.6, 0.7], 0.75: [0.4, 0.5], 1.0: [0.2, 0.3]}


def test_residual_helps_passes_and_fails():
    good = claims.check_residual_helps(table(MONOTONE))
    assert good.passed and good.numbers["seeds_won"] == 2
    assert good.numbers["loss_T_beta1"] == pytest.approx(0.25) and good.numbers["loss_T_beta0"] == pytest.approx(1.1)
    bad = claims.check_residual_helps(table({**MONOTONE, 1.0: [1.5, 1.6]}))
    assert not bad.passed and bad.numbers["seeds_won"] == 0
    assert "β = 1" in bad.detail


def test_a_diverged_run_counts_as_infinitely_bad():
    no_res_diverged = table(MONOTONE, diverged={("beta", 1, 0.0, 1)})
    verdict = claims.check_residual_helps(no_res_diverged)
    assert verdict.passed and verdict.numbers["loss_T_beta0"] == math.inf and verdict.numbers["diverged_beta0"] == 1
    res_diverged = table(MONOTONE, diverged={("beta", 1, 1.0, 0)})
    assert not claims.check_residual_helps(res_diverged).passed


def test_beta_monotone_threshold():
    assert claims.check_beta_monotone(table(MONOTONE)).numbers["spearman"] == pytest.approx(-1.0)
    assert claims.check_beta_monotone(table(MONOTONE)).passed
    one_swap = {**MONOTONE, 0.75: [0.15, 0.2]}  # β = 0.75 better than β = 1: ρ = -0.9
    assert claims.check_beta_monotone(table(one_swap)).passed
    reversed_ = {b: v for b, v in zip(MONOTONE, reversed(list(MONOTONE.values())))}
    verdict = claims.check_beta_monotone(table(reversed_))
    assert not verdict.passed and verdict.numbers["spearman"] == pytest.approx(1.0)
    flat_ish = {0.0: [1.0], 0.25: [0.9], 0.5: [0.7], 0.75: [0.8], 1.0: [0.95]}  # ρ = -0.3
    verdict = claims.check_beta_monotone(table(flat_ish))
    assert not verdict.passed and verdict.numbers["spearman"] == pytest.approx(-0.3)
    assert claims.check_beta_monotone(table(flat_ish), threshold=-0.5).passed is False
    assert claims.check_beta_monotone(table(flat_ish), threshold=-0.2).passed


def test_beta_monotone_keeps_diverged_configurations():
    diverged_low_beta = table(MONOTONE, diverged={("beta", 1, 0.0, 0)})
    verdict = claims.check_beta_monotone(diverged_low_beta)
    assert verdict.passed and verdict.numbers["spearman"] == pytest.approx(-1.0)
    diverged_high_beta = table(MONOTONE, diverged={("beta", 1, 1.0, 0), ("beta", 1, 0.75, 0)})
    assert not claims.check_beta_monotone(diverged_high_beta).passed


def test_depth_claim_needs_every_depth():
    depths = {2: ([0.1, 0.2], [0.5, 0.6]), 6: ([0.1, 0.1], [0.5, 0.5]), 10: ([0.3, 0.3], [0.4, 0.5])}
    good = claims.check_depth_residual_helps(table(MONOTONE, depths))
    assert good.passed and set(good.numbers["by_depth"]) == {"2", "6", "10"}
    one_fails = {**depths, 10: ([0.6, 0.6], [0.4, 0.5])}
    bad = claims.check_depth_residual_helps(table(MONOTONE, one_fails))
    assert not bad.passed and bad.numbers["by_depth"]["10"]["residual_lower"] is False
    assert bad.numbers["by_depth"]["2"]["residual_lower"] is True


def test_missing_runs_are_an_error_not_a_verdict():
    no_beta0 = table({b: v for b, v in MONOTONE.items() if b != 0.0})
    with pytest.raises(ValueError, match="β = 1 and β = 0"):
        claims.check_residual_helps(no_beta0)
    with pytest.raises(ValueError, match="at least 3"):
        claims.check_beta_monotone(table({0.0: [1.0], 1.0: [0.5]}))
    with pytest.raises(ValueError, match="lacks column"):
        claims.check_residual_helps(table(MONOTONE).drop(columns=["loss_T"]))


def test_verdicts_round_trip_and_missing_file_is_named(tmp_path):
    verdicts = claims.evaluate(table(MONOTONE, diverged={("beta", 1, 0.0, 0)}), "jena")
    assert [v.figure for v in verdicts] == ["fig-jena-residual", "fig-jena-beta", "fig-jena-depth"]
    claims.write_verdicts(verdicts, tmp_path / "jena_quick.json", dataset="jena", mode="quick", meta={"is_standin": True})
    payload = json.loads((tmp_path / "jena_quick.json").read_text())  # strict JSON: no Infinity
    assert payload["verdicts"][0]["numbers"]["loss_T_beta0"] == "inf"
    with pytest.raises(FileNotFoundError, match="sst2_quick.json.*05_sst2"):
        claims.load_verdicts(tmp_path, mode="quick")
    sst2 = claims.evaluate(table({**MONOTONE, 1.0: [2.0, 2.0]}), "sst2")
    claims.write_verdicts(sst2, tmp_path / "sst2_quick.json", dataset="sst2", mode="quick")
    loaded = claims.load_verdicts(tmp_path, mode="quick")
    assert len(loaded) == 6
    assert list(loaded["name"][:2]) == ["residual_helps", "residual_helps"]
    row = loaded[(loaded["dataset"] == "sst2") & (loaded["name"] == "residual_helps")].iloc[0]
    assert row["verdict"] == "not reproduced" and row["data"] == "real"
    assert set(loaded.loc[loaded["dataset"] == "jena", "data"]) == {"synthetic stand-in"}
    with pytest.raises(FileNotFoundError, match="jena_full.json"):
        claims.load_verdicts(tmp_path, mode="full")


def test_iterations_to_target_is_supplementary_only():
    frame = table(MONOTONE)
    frame["iterations_to_target"] = [float("nan") if b == 0.0 else 100 * (2 - b) for b in frame["beta"]]
    verdict = claims.check_beta_monotone(frame)
    assert verdict.passed  # decided by the loss at T
    assert verdict.numbers["spearman_iterations_to_target"] == pytest.approx(-1.0)
    assert verdict.numbers["iterations_to_target_by_beta"]["0"] == math.inf
    frame["iterations_to_target"] = [100 * (1 + b) for b in frame["beta"]]  # slower with β: reported, not decisive
    verdict = claims.check_beta_monotone(frame)
    assert verdict.passed and verdict.numbers["spearman_iterations_to_target"] == pytest.approx(1.0)


def test_verdict_grid_figure(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from resgd.plots.experiments import plot_verdicts

    for dataset, losses in (("jena", MONOTONE), ("sst2", {**MONOTONE, 1.0: [2.0, 2.0]})):
        claims.write_verdicts(claims.evaluate(table(losses), dataset), tmp_path / f"{dataset}_full.json",
                              dataset=dataset, mode="full", meta={"is_standin": dataset == "jena"})
    fig = plot_verdicts(claims.load_verdicts(tmp_path, mode="full"))
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("not reproduced") == 2 and any("stand-in" in t for t in texts)
    assert any("SYNTHETIC" in t.get_text() for t in fig.texts)
    plt.close(fig)
