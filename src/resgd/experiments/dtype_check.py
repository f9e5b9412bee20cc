"""Is float32 verdict-neutral? Compare two results folders of the same experiments run in two dtypes.

The Jena and SST-2 sweeps may run in float32 (``Settings.dtype``, ``reproduce(..., dtype=...)``)
for speed; that is acceptable only if nothing the book concludes changes. Given two results
folders (``$RESGD_RESULTS_DIR`` of two runs that differ only in the dtype) this checks that

* every claim's verdict (``claims/*.json``, ``outcome`` per claim and protocol) is identical,
* the step sizes chosen by the probes are identical,
* every run of one folder has its twin in the other (same data set, β, β_ffn, init scales and gains, depth,
  seed, step size, iterations) with the same divergence outcome, and its loss curve stays within
  ``|Φ₃₂(t) − Φ₆₄(t)| ≤ rtol·|Φ₆₄(t)| + atol·Φ₆₄(0)`` at every recorded iteration;
* where both folders hold a robustness map (``robustness/map_<mode>.csv``), every cell's verdict
  (:func:`map_cell_diffs`) is identical.

The tolerances (``rtol`` = 1e-3, ``atol`` = 1e-6) were fixed before any float32 run was looked at.
``python -m resgd.experiments.dtype_check A B`` prints the report.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from ..pipeline.cache import ResultsCache

RUN_KEYS = ["dataset", "n_train", "n_tokens", "beta", "beta_ffn", "v_scale", "ffn_scale", "gains", "n_layers", "d_qk", "m", "seed",
            "lr", "iterations", "reduction"]
RTOL, ATOL = 1e-3, 1e-6


def verdicts(results_dir: str | Path) -> pd.DataFrame:
    """One row per claim and protocol: data set, mode, claim name, ``outcome``, and the step sizes chosen."""
    rows = []
    for path in sorted((Path(results_dir) / "claims").glob("*.json")):
        data = json.loads(path.read_text())
        for v in data["verdicts"]:
            rows.append({"file": path.name, "dataset": data["dataset"], "mode": data["mode"],
                         "name": f"{v['name']} ({v.get('protocol', '')})",
                         "outcome": str(v["outcome"]), "lr": json.dumps(data.get("lr"), sort_keys=True)})
    if not rows:
        raise FileNotFoundError(f"{results_dir}: no claims/*.json (run the experiments into this results folder first)")
    return pd.DataFrame(rows)


def histories(results_dir: str | Path) -> pd.DataFrame:
    """Every cached run history (iteration, loss, diverged and the run's keys) of a results folder."""
    cache = ResultsCache(Path(results_dir) / "cache")
    frames = []
    for path in sorted(cache.directory.glob("*.pkl")):
        frame = cache.read(path.stem)  # verified: key and checksum
        if isinstance(frame, pd.DataFrame) and {"iteration", "loss", *RUN_KEYS} <= set(frame.columns):
            frames.append(frame[[*RUN_KEYS, "iteration", "loss", "diverged"]])
    if not frames:
        raise FileNotFoundError(f"{results_dir}: no cached run histories under cache/")
    return pd.concat(frames, ignore_index=True)


def compare(reference: str | Path, other: str | Path, rtol: float = RTOL, atol: float = ATOL) -> dict:
    """Verdicts, step sizes, run pairing, divergence and loss curves of ``other`` against ``reference``."""
    va, vb = verdicts(reference), verdicts(other)
    both = va.merge(vb, on=["dataset", "mode", "name"], how="outer", suffixes=("_ref", "_other"), indicator=True)
    verdict_diffs = both[(both["_merge"] != "both") | (both["outcome_ref"] != both["outcome_other"])]
    lr_diffs = both[(both["_merge"] == "both") & (both["lr_ref"] != both["lr_other"])]
    ha, hb = histories(reference), histories(other)
    runs = ha.merge(hb, on=[*RUN_KEYS, "iteration"], how="outer", suffixes=("_ref", "_other"), indicator=True)
    unpaired = runs[runs["_merge"] != "both"].drop_duplicates(RUN_KEYS)
    paired = runs[runs["_merge"] == "both"].copy()
    divergence = paired.groupby(RUN_KEYS)[["diverged_ref", "diverged_other"]].first()
    diverged_differently = divergence[divergence["diverged_ref"] != divergence["diverged_other"]]
    finite = paired[~paired["diverged_ref"].astype(bool) & ~paired["diverged_other"].astype(bool)].copy()
    start = finite.groupby(RUN_KEYS)["loss_ref"].transform("first").abs()
    finite["excess"] = (finite["loss_other"] - finite["loss_ref"]).abs() - (rtol * finite["loss_ref"].abs() + atol * start)
    finite["rel"] = (finite["loss_other"] - finite["loss_ref"]).abs() / finite["loss_ref"].abs().clip(lower=1e-300)
    out_of_tolerance = finite[finite["excess"] > 0].drop_duplicates(RUN_KEYS)
    worst = finite.groupby(RUN_KEYS)["rel"].max()
    worst = worst[worst.index.isin(out_of_tolerance.set_index(RUN_KEYS).index)].sort_values(ascending=False)
    map_cells, map_diffs = map_cell_diffs(reference, other)
    return {
        "claims": len(both), "verdict_diffs": verdict_diffs[["dataset", "mode", "name", "outcome_ref", "outcome_other"]],
        "lr_diffs": lr_diffs[["dataset", "mode", "lr_ref", "lr_other"]].drop_duplicates(),
        "runs": int(divergence.shape[0]), "unpaired_runs": int(unpaired.shape[0]),
        "diverged_differently": int(diverged_differently.shape[0]),
        "curves_out_of_tolerance": int(out_of_tolerance.shape[0]),
        "out_of_tolerance": worst.rename("max_rel_loss_diff").reset_index(),
        "max_rel_loss_diff": float(finite["rel"].max()) if len(finite) else float("nan"),
        "rtol": rtol, "atol": atol,
        "map_cells": map_cells, "map_cell_diffs": map_diffs,
    }


MAP_CELL_KEYS = ["dataset", "qk_scale", "fraction", "N", "protocol", "horizon", "claim", "measure"]


def map_cell_diffs(reference: str | Path, other: str | Path) -> tuple[int, pd.DataFrame]:
    """(cells compared, cells whose verdict differs or that only one map has) of the robustness maps
    (``robustness/map_<mode>.csv``) both folders hold; (0, empty) when they share none."""
    compared, diffs = 0, []
    for path in sorted((Path(reference) / "robustness").glob("map_*.csv")):
        twin = Path(other) / "robustness" / path.name
        if path.stem.count("_") != 1 or not twin.is_file():  # map_<mode>.csv only, not ..._runs/_limits
            continue
        a, b = pd.read_csv(path), pd.read_csv(twin)
        both = a.merge(b, on=MAP_CELL_KEYS, how="outer", suffixes=("_ref", "_other"), indicator=True)
        compared += len(both)
        diffs.append(both.loc[(both["_merge"] != "both") | (both["verdict_ref"] != both["verdict_other"]),
                              [*MAP_CELL_KEYS, "verdict_ref", "verdict_other"]].assign(map=path.name))
    return compared, (pd.concat(diffs, ignore_index=True) if diffs else pd.DataFrame())


def neutral(report: dict) -> bool:
    """Every verdict and step size identical, every run paired, same divergence, curves within tolerance."""
    return (report["verdict_diffs"].empty and report["lr_diffs"].empty and report["unpaired_runs"] == 0
            and report["diverged_differently"] == 0 and report["curves_out_of_tolerance"] == 0
            and report["map_cell_diffs"].empty)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m resgd.experiments.dtype_check REFERENCE_RESULTS_DIR OTHER_RESULTS_DIR", file=sys.stderr)
        return 2
    report = compare(*args)
    print(f"claims compared: {report['claims']}; differing verdicts: {len(report['verdict_diffs'])}; "
          f"differing step sizes: {len(report['lr_diffs'])}")
    if not report["verdict_diffs"].empty:
        print(report["verdict_diffs"].to_string(index=False))
    print(f"runs paired: {report['runs']}, unpaired: {report['unpaired_runs']}, diverged differently: "
          f"{report['diverged_differently']}; loss curves out of tolerance (rtol {report['rtol']:g}, atol "
          f"{report['atol']:g}·Φ(0)): {report['curves_out_of_tolerance']}; max relative loss difference "
          f"{report['max_rel_loss_diff']:.2e}")
    if report["curves_out_of_tolerance"]:
        columns = ["dataset", "beta", "n_layers", "seed", "lr", "iterations", "max_rel_loss_diff"]
        print(report["out_of_tolerance"][columns].to_string(index=False))
    if report["map_cells"]:
        print(f"robustness map cells compared: {report['map_cells']}; differing verdicts: {len(report['map_cell_diffs'])}")
        if not report["map_cell_diffs"].empty:
            print(report["map_cell_diffs"].to_string(index=False))
    print("verdict-neutral" if neutral(report) else "NOT verdict-neutral")
    return 0 if neutral(report) else 1


if __name__ == "__main__":
    raise SystemExit(main())
