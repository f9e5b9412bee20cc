"""The files one data set's run leaves in the results folder: its tables (CSV) and its claim
verdicts (JSON), with their names and writers.

Why a module of its own: the file names are a contract with what reads them (the claims page,
:mod:`resgd.experiments.dtype_check`, a reader's own scripts); they are written together through
:func:`resgd.pipeline.reproduce.publish`, whether a notebook or ``python -m resgd reproduce`` asks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..pipeline.reproduce import Outputs, publish
from .results import ExperimentResults


def result_files(results: ExperimentResults) -> dict[str, tuple[str, Any]]:
    """The results tables (CSV) and the claim verdicts (JSON): label → (path in the results folder, writer)."""
    from .verdict_files import verdicts_writer

    s = results.settings
    tag = f"{s.dataset}_{s.mode}"
    files = {
        name: (f"tables/{tag}_{suffix}.csv", lambda tmp, table=table: table.to_csv(tmp, index=False))
        for name, suffix, table in (("summary", "summary", results.summary()), ("per_run", "runs", results.per_run()),
                                    ("probes", "probes", results.probes), ("steps", "steps", results.lr))
    }
    files["claims"] = (f"claims/{tag}.json", verdicts_writer(
        results.verdicts(), dataset=s.dataset, mode=s.mode,
        meta={"source_label": results.source_label, "is_standin": results.is_standin,
              "lr": {f"{r.experiment}/{r.protocol}/{r.twin_init}/L={r.n_layers}/β={r.beta:g}/β_ffn={r.beta_ffn:g}/seed={r.seed}": r.lr
                     for r in results.lr.itertuples()},
              "iterations": s.iterations, "depth_iterations": s.depth_iterations, "seeds": list(s.seeds), "N": s.N},
    ))
    if results.speed is not None:
        files["speed_claims"] = (f"claims/{tag}_v6.json", verdicts_writer(
            results.speed.verdicts(), dataset=s.dataset, mode=s.mode,
            meta={"design": "v6", "realisability": results.speed.realisability}))
        files["ladder"] = (f"tables/{tag}_ladder.csv",
                           lambda tmp, table=results.speed.ladder(): table.to_csv(tmp, index=False))
    return files


def write_outputs(results: ExperimentResults, *, results_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Write the results tables (CSV) and the claim verdicts (JSON), published together."""
    return publish(Outputs(result_files=result_files(results)), results_dir=results_dir)
