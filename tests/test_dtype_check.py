"""resgd.experiments.dtype_check: pairs the runs of two results folders, and catches a changed verdict or curve."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from resgd.experiments import dtype_check
from resgd.experiments.configuration import settings
from resgd.experiments.results import write_outputs
from resgd.experiments.study import run_experiments
from resgd.pipeline.cache import ResultsCache


@pytest.fixture(scope="module")
def toy_runs(tmp_path_factory):
    """The toy experiments in float64 and float32, each into its own results folder (its cache,
    tables and verdicts: what dtype_check reads; no figures)."""
    base = tmp_path_factory.mktemp("dtype")
    folders = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESGD_FIGURES_DIR", str(base / "figures"))  # a publish keeps its builds there: never the user's
        for dtype in ("float64", "float32"):
            results = base / dtype
            s = settings("toy", True, dtype=dtype)
            write_outputs(run_experiments(s, n_jobs=1, cache_dir=results / "cache"),
                                      results_dir=results)
            folders[dtype] = results
    return folders


def test_same_folder_is_neutral(toy_runs):
    report = dtype_check.compare(toy_runs["float64"], toy_runs["float64"])
    assert dtype_check.neutral(report) and report["runs"] > 0 and report["max_rel_loss_diff"] == 0


def test_float32_toy_runs_pair_with_float64_and_stay_close(toy_runs):
    report = dtype_check.compare(toy_runs["float64"], toy_runs["float32"])
    assert report["unpaired_runs"] == 0 and report["runs"] > 0
    assert 0 < report["max_rel_loss_diff"] < 1e-3  # float32 rounding, not equality


def test_a_changed_verdict_and_a_changed_curve_are_caught(toy_runs, tmp_path):
    changed = tmp_path / "changed"
    shutil.copytree(toy_runs["float64"], changed)
    claims = next((changed / "claims").glob("*.json"))
    data = json.loads(claims.read_text())
    data["verdicts"][0]["outcome"] = "fails" if data["verdicts"][0]["outcome"] != "fails" else "holds"
    claims.write_text(json.dumps(data))
    report = dtype_check.compare(toy_runs["float64"], changed)
    assert len(report["verdict_diffs"]) == 1 and not dtype_check.neutral(report)

    changed_curve = tmp_path / "curve"
    shutil.copytree(toy_runs["float64"], changed_curve)
    cache = ResultsCache(changed_curve / "cache")
    for path in cache.directory.glob("*.pkl"):
        frame = cache.read(path.stem)
        if "loss" in frame.columns and not frame["diverged"].any():
            frame.loc[frame.index[-1], "loss"] *= 1.01
            cache.write(path.stem, frame)  # a valid entry with another curve, as another run would write
            break
    report = dtype_check.compare(toy_runs["float64"], changed_curve)
    assert report["curves_out_of_tolerance"] == 1 and not dtype_check.neutral(report)


def test_a_changed_map_cell_verdict_is_caught(toy_runs, tmp_path):
    cells = pd.DataFrame([dict(dataset="jena", qk_scale=1.0, fraction=0.5, N=16, protocol="common", horizon=50,
                               claim=claim, measure="relative", verdict=verdict)
                          for claim, verdict in (("residual_helps", "holds"), ("beta_monotone", "undecided"))])
    folders = {}
    for name in ("a", "b"):
        folders[name] = tmp_path / name
        shutil.copytree(toy_runs["float64"], folders[name])
        (folders[name] / "robustness").mkdir()
        cells.to_csv(folders[name] / "robustness" / "map_quick.csv", index=False)
    report = dtype_check.compare(folders["a"], folders["b"])
    assert report["map_cells"] == 2 and dtype_check.neutral(report)
    cells.assign(verdict=["holds", "fails"]).to_csv(folders["b"] / "robustness" / "map_quick.csv", index=False)
    report = dtype_check.compare(folders["a"], folders["b"])
    assert not dtype_check.neutral(report)
    assert report["map_cell_diffs"][["claim", "verdict_ref", "verdict_other"]].values.tolist() == [
        ["beta_monotone", "undecided", "fails"]]
