"""Where do the paper's claims hold? The robustness map.

Each claim — (a) residual vs none, (b) β ordering, (c) residual vs none at L = 2, 6, 10 — is
evaluated on Jena and SST-2 over a designed grid (:mod:`.grid`): attention sharpness
(``qk_scale``) × step size as a fraction of each configuration's own stability limit
(:mod:`.limits`) × training-set size N, three seeds per cell, two step-size protocols
(:mod:`.runs`), several horizons T. Each cell gets an effect size, a seed-bootstrap interval and
a verdict holds / fails / undecided (:mod:`.stats`).

    from resgd import robustness
    results = robustness.build_map(quick=True)           # cached runs
    robustness.reproduce(quick=False, directory="figures", n_jobs=2)

Results go to ``<results dir>/robustness/map_<mode>.csv`` (the cell table) and
``..._runs.csv`` (per run), written atomically.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..atomic import write_with
from ..pipeline.cache import resolve_results_dir
from .grid import PROTOCOLS, MapGrid, map_grid
from .limits import stability_limits
from .map_runs import map_runs
from .verdicts import CLAIM_LABELS, CLAIM_NAMES, VERDICTS, agreement, cell_table, tally, theory_link

__all__ = ["CLAIM_LABELS", "CLAIM_NAMES", "PROTOCOLS", "VERDICTS", "MapGrid", "MapResults", "agreement",
           "build_map", "load_cells", "map_grid", "map_path", "reproduce", "tally", "theory_link"]


@dataclass
class MapResults:
    """The map: its grid, the stability limits, the per-run table and the cell table."""

    grid: MapGrid
    limits: pd.DataFrame
    per_run: pd.DataFrame
    cells: pd.DataFrame
    seconds: float

    def final(self) -> pd.DataFrame:
        """The cells at the last horizon T."""
        return self.cells[self.cells["horizon"] == self.grid.iterations]

    def standin_label(self) -> str | None:
        """A banner text when any data set of the map is the synthetic stand-in, else None."""
        if "is_standin" not in self.per_run:
            return None
        standin = sorted(self.per_run.loc[self.per_run["is_standin"].fillna(False).astype(bool), "dataset"].unique())
        return f"SYNTHETIC stand-in data for {', '.join(standin)}" if standin else None

    def tally(self, horizon: int | None = None) -> pd.DataFrame:
        return tally(self.cells, self.grid.iterations if horizon is None else horizon)

    def theory_link(self, horizon: int | None = None) -> pd.DataFrame:
        return theory_link(self.cells, self.grid.iterations if horizon is None else horizon)


def build_map(quick: bool = True, *, n_jobs: int = 2, cache_dir: str | os.PathLike | None = None,
              progress: bool = False, scheduler: str | None = None, **grid_overrides: Any) -> MapResults:
    """Probe the stability limits, train every run (cached) and evaluate every cell."""
    grid = map_grid(quick, **grid_overrides)
    start = time.perf_counter()
    sweep_options = dict(n_jobs=n_jobs, cache_dir=cache_dir, progress=progress, scheduler=scheduler)
    limits = stability_limits(grid, **sweep_options)
    per_run = map_runs(grid, limits, **sweep_options)
    cells = cell_table(per_run, grid)
    return MapResults(grid, limits, per_run, cells, time.perf_counter() - start)


def map_path(mode: str, directory: str | os.PathLike | None = None, kind: str = "cells") -> Path:
    """``<results dir>/robustness/map_<mode>.csv`` (``kind="cells"``), ``..._runs.csv``, ``..._limits.csv``."""
    suffix = "" if kind == "cells" else f"_{kind}"
    return resolve_results_dir(directory) / "robustness" / f"map_{mode}{suffix}.csv"


def map_files(results: MapResults) -> dict[str, tuple[str, Any]]:
    """The map's tables as ``label → (path relative to the results folder, writer)``."""
    return {kind: (str(Path("robustness") / map_path(results.grid.mode, ".", kind).name),
                   lambda tmp, table=table: table.to_csv(tmp, index=False))
            for kind, table in (("cells", results.cells), ("runs", results.per_run), ("limits", results.limits))}


def write_map(results: MapResults, directory: str | os.PathLike | None = None) -> dict[str, Path]:
    """Write the map's tables now (the notebook's path; ``reproduce`` publishes them with the figures)."""
    root = resolve_results_dir(directory)
    return {kind: write_with(root / relative, writer) for kind, (relative, writer) in map_files(results).items()}


def load_cells(mode: str, directory: str | os.PathLike | None = None) -> pd.DataFrame:
    """The cell table a build wrote; a clear error naming what to run when it is missing."""
    path = map_path(mode, directory)
    if not path.is_file():
        flag = " --quick" if mode == "quick" else ""
        raise FileNotFoundError(f"{path} is missing: run notebooks/07_robustness.md in {mode} mode "
                                f"(or `python -m resgd reproduce{flag} --only robustness`)")
    return pd.read_csv(path)


def reproduce(quick: bool, directory: str | os.PathLike | None = None, *, n_jobs: int = 2,
              progress: bool = True, scheduler: str | None = None, **grid_overrides: Any) -> dict[str, Path]:
    """The map without Jupyter: tables into the results folder, phase diagrams into ``directory``
    (else ``$RESGD_FIGURES_DIR``, else ``./figures``), published together once every output
    folder was found writable."""
    from ..pipeline.reproduce import Outputs, reproduce_part
    from ..plots.robustness import plot_phase_diagram

    def outputs() -> Outputs:
        results = build_map(quick, n_jobs=n_jobs, progress=progress, scheduler=scheduler, **grid_overrides)
        figures = {f"robustness_{protocol}_{results.grid.mode}":
                   plot_phase_diagram(results.final(), results.grid, protocol=protocol, standin=results.standin_label())
                   for protocol in PROTOCOLS}
        return Outputs(figures=figures, result_files=map_files(results))

    return reproduce_part(outputs, figures_dir=directory, writes_results=True)
