"""Where do the paper's claims hold? The robustness map.

Each claim — (a) residual vs none, (b) β ordering, (c) residual vs none at L = 2, 6, 10 — is
evaluated on Jena and SST-2 over a designed grid (:mod:`.grid`): attention sharpness
(``qk_scale``) × step (a fraction of a stability limit, :mod:`.limits`, or the theorem's c) ×
training-set size N, 8–12 seeds per cell, three step-size protocols (:mod:`.map_runs`), several
horizons T. Each cell gets a per-seed effect, a distribution-free interval with its exact level
and a verdict holds / fails / undecided (:mod:`.verdicts`); runs are learns / stalled / diverged
(:mod:`.outcomes`).

    from resgd.robustness import study as rb
    results = rb.build_map(quick=True)                 # cached runs
    rb.reproduce(False, "figures", n_jobs=2)           # the whole design (mode "full")

The book's full mode runs the ``book`` grid (``build_map(False)``); ``reproduce(False)`` runs the
whole design (``complete=True``). Results go to ``<results dir>/robustness/map_<mode>.csv`` (the
cell table), ``..._runs.csv`` (per run), ``..._limits.csv`` and ``..._readout.csv`` (the read-out
link), written atomically.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..infra.atomic import write_with
from ..pipeline.cache import resolve_results_dir
from ..validation import check_choice
from .grid import PROTOCOLS, MapGrid, map_grid
from .limits import stability_limits
from .map_runs import map_runs
from .outcomes import OUTCOMES
from .readout_link import readout_link, readout_predictions
from .verdicts import (CLAIM_LABELS, CLAIM_NAMES, LOG_CAP, VERDICTS, add_ladder, agreement, cell_table, tally,
                       theory_link)

__all__ = ["CLAIM_LABELS", "CLAIM_NAMES", "FIGURE_KINDS", "PROTOCOLS", "VERDICTS", "MapGrid", "MapResults",
           "agreement", "build_map", "figure_name", "figures", "load_cells", "make_figure", "map_grid", "map_path",
           "reproduce", "tally", "theory_link"]


@dataclass
class MapResults:
    """The map: its grid, the stability limits, the per-run table and the cell table."""

    grid: MapGrid
    limits: pd.DataFrame
    per_run: pd.DataFrame
    cells: pd.DataFrame
    readout: pd.DataFrame
    """Single-layer runs: the read-out closed form's Φ_pred(T)/Φ(0) beside the measured one (:mod:`.readout_link`)."""
    seconds: float

    def final(self, measure: str | None = None) -> pd.DataFrame:
        """The cells at the last horizon T, judged on ``measure`` (default: the primary one)."""
        measure = self.grid.primary if measure is None else measure
        return self.cells[(self.cells["horizon"] == self.grid.iterations) & (self.cells["measure"] == measure)]

    def standin_label(self) -> str | None:
        """The banner of the map's figures: the data sets trained on the synthetic stand-in, and the
        label of any file the loaders were told not to check against the published one
        (:data:`resgd.data.NOT_CANONICAL_LABELS`); None when every data set is verified real data."""
        from ..data import NOT_CANONICAL_LABELS

        if "is_standin" not in self.per_run:
            return None
        standin = sorted(self.per_run.loc[self.per_run["is_standin"].fillna(False).astype(bool), "dataset"].unique())
        parts = [f"SYNTHETIC stand-in data for {', '.join(standin)}"] if standin else []
        if "source_label" in self.per_run:
            labels = self.per_run["source_label"]
            parts += sorted(set(labels[labels.isin(NOT_CANONICAL_LABELS)]))
        return "; ".join(parts) or None

    def tally(self, horizon: int | None = None, measure: str | None = None) -> pd.DataFrame:
        return tally(self.cells, self.grid.iterations if horizon is None else horizon,
                     self.grid.primary if measure is None else measure)

    def theory_link(self, horizon: int | None = None) -> pd.DataFrame:
        return theory_link(self.cells, self.grid.iterations if horizon is None else horizon, self.grid.primary)

    def readout_link(self) -> pd.DataFrame:
        """Spearman(predicted, measured log Φ(T)/Φ(0)) per data set × protocol, with its power."""
        return readout_link(self.readout)

    def outcomes(self) -> pd.DataFrame:
        """Runs per outcome (learns / stalled / diverged) for every data set × protocol × (β, L)."""
        counts = self.per_run.groupby(["dataset", "protocol", "n_layers", "beta", "init"])["outcome"].value_counts()
        return counts.unstack(fill_value=0).reindex(columns=list(OUTCOMES), fill_value=0).reset_index()


def build_map(quick: bool = True, *, complete: bool = False, n_jobs: int = 2, cache_dir: str | os.PathLike | None = None,
              progress: bool = False, scheduler: str | None = None, **grid_overrides: Any) -> MapResults:
    """Probe the stability limits, train every run (cached) and evaluate every cell (grid:
    :func:`map_grid`; ``complete=True`` with ``quick=False`` is the whole design)."""
    grid = map_grid(quick, complete=complete, **grid_overrides)
    start = time.perf_counter()
    sweep_options = dict(n_jobs=n_jobs, cache_dir=cache_dir, progress=progress, scheduler=scheduler)
    limits = stability_limits(grid, **sweep_options)
    per_run = map_runs(grid, limits, reader=add_ladder, **sweep_options)
    cells = cell_table(per_run, grid)
    readout = readout_predictions(per_run, grid)
    return MapResults(grid, limits, per_run, cells, readout, time.perf_counter() - start)


def map_path(mode: str, directory: str | os.PathLike | None = None, kind: str = "cells") -> Path:
    """``<results dir>/robustness/map_<mode>.csv`` (``kind="cells"``), ``..._runs.csv``, ``..._limits.csv``,
    ``..._readout.csv``."""
    suffix = "" if kind == "cells" else f"_{kind}"
    return resolve_results_dir(directory) / "robustness" / f"map_{mode}{suffix}.csv"


def map_files(results: MapResults) -> dict[str, tuple[str, Any]]:
    """The map's tables as ``label → (path relative to the results folder, writer)``."""
    return {kind: (str(Path("robustness") / map_path(results.grid.mode, ".", kind).name),
                   lambda tmp, table=table: table.to_csv(tmp, index=False))
            for kind, table in (("cells", results.cells), ("runs", results.per_run), ("limits", results.limits),
                                ("readout", results.readout))}


def write_map(results: MapResults, directory: str | os.PathLike | None = None) -> dict[str, Path]:
    """Write the map's tables now (the notebook's path; ``reproduce`` publishes them with the figures)."""
    root = resolve_results_dir(directory)
    return {kind: write_with(root / relative, writer) for kind, (relative, writer) in map_files(results).items()}


def load_cells(mode: str, directory: str | os.PathLike | None = None) -> pd.DataFrame:
    """The cell table a build wrote; a clear error naming what to run when it is missing."""
    path = map_path(mode, directory)
    if not path.is_file():
        how = {"quick": "notebooks/06_robustness.md in quick mode (or `python -m resgd reproduce --quick --only robustness`)",
               "book": "notebooks/06_robustness.md in full mode (`make book`)",
               "full": "`python -m resgd reproduce --only robustness`"}.get(mode, f"a map in mode {mode!r}")
        raise FileNotFoundError(f"{path} is missing: run {how}")
    return pd.read_csv(path)


FIGURE_KINDS = (*(f"phase_{p}" for p in PROTOCOLS), "horizons", "theory_link", "readout_link")
"""The map's figures: one phase diagram per protocol, the verdicts by horizon, the Z⁰ theory link
and the read-out link."""


def figure_name(kind: str, mode: str) -> str:
    """The file name (no suffix) of one of the map's figures."""
    check_choice("figure kind", kind, FIGURE_KINDS)
    return f"robustness_{kind}_{mode}"


def make_figure(results: MapResults, kind: str):
    """One of the map's figures (:data:`FIGURE_KINDS`), drawn from the results; the notebook and
    :func:`reproduce` both call this."""
    from ..plots.robustness import plot_horizons, plot_phase_diagram, plot_readout_link, plot_theory_link

    check_choice("figure kind", kind, FIGURE_KINDS)
    standin, grid = results.standin_label(), results.grid
    if kind.startswith("phase_"):
        return plot_phase_diagram(results.final(), grid, protocol=kind.removeprefix("phase_"), standin=standin)
    if kind == "horizons":
        by_horizon = pd.concat([results.tally(T).assign(horizon=T) for T in grid.horizons], ignore_index=True)
        return plot_horizons(by_horizon, standin=standin)
    if kind == "readout_link":
        return plot_readout_link(results.readout, standin=standin)
    return plot_theory_link(results.final(), standin=standin, cap=LOG_CAP)


def figures(results: MapResults) -> dict[str, Any]:
    """Every figure of the map whose protocol it ran, by file name."""
    kinds = [k for k in FIGURE_KINDS if not k.startswith("phase_") or k.removeprefix("phase_") in results.grid.protocols]
    return {figure_name(kind, results.grid.mode): make_figure(results, kind) for kind in kinds}


def reproduce(quick: bool, figures_dir: str | os.PathLike | None = None, *, n_jobs: int = 2,
              scheduler: str | None = None, progress: bool = True, **grid_overrides: Any) -> dict[str, Path]:
    """The map without Jupyter — the whole design in full mode (``complete=True``; the book runs a
    subset) — tables into the results folder, figures into ``figures_dir`` (else
    ``$RESGD_FIGURES_DIR``, else ``./figures``), published together once every output folder was
    found writable."""
    from ..pipeline.reproduce import Outputs, reproduce_part

    def outputs() -> Outputs:
        results = build_map(quick, complete=not quick, n_jobs=n_jobs, progress=progress, scheduler=scheduler,
                            **grid_overrides)
        return Outputs(figures=figures(results), result_files=map_files(results))

    return reproduce_part(outputs, figures_dir=figures_dir, writes_results=True)
