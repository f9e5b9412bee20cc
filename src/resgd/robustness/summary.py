"""The map's findings as short texts and numbers for the book's glued prose."""

from __future__ import annotations

import pandas as pd

from .grid import MapGrid

AXES = (("qk_scale", "Q/K scale"), ("fraction", "step fraction"), ("N", "N"))


def count_sentence(row: pd.Series) -> str:
    """'holds in k of K cells (fails in f, undecided in u)'."""
    return f"holds in {row['holds']} of {row['K']} cells (fails in {row['fails']}, undecided in {row['undecided']})"


def region(cells: pd.DataFrame, verdict: str = "holds") -> str:
    """Where the verdict occurs: the axis values of its cells, or 'nowhere'."""
    chosen = cells[cells["verdict"] == verdict]
    if chosen.empty:
        return "nowhere"
    if len(chosen) == len(cells):
        return "everywhere on the grid"
    parts = []
    for column, label in AXES:
        values = sorted(chosen[column].unique())
        if len(values) < cells[column].nunique():
            parts.append(f"{label} ∈ {{{', '.join(f'{v:g}' for v in values)}}}")
    count = f"{len(chosen)} cell{'s' if len(chosen) > 1 else ''}"
    if not parts:
        return f"{count}, on every value of every axis (not every combination)"
    if _box(chosen, cells):
        return f"{count}, all with " + " and ".join(parts)
    return f"{count}, with " + " and ".join(parts) + " (not every combination)"


def _box(chosen: pd.DataFrame, cells: pd.DataFrame) -> bool:
    """True when the chosen cells are exactly the product of their axis values."""
    box = cells
    for column, _ in AXES:
        box = box[box[column].isin(chosen[column].unique())]
    return len(box) == len(chosen)


def protocol_changes(final: pd.DataFrame) -> pd.DataFrame:
    """Per claim × data set: in how many cells the verdict differs between ``common`` and ``own``."""
    keys = ["dataset", "qk_scale", "fraction", "N", "claim"]
    wide = final.pivot_table(index=keys, columns="protocol", values="verdict", aggfunc="first")
    wide = wide[["common", "own"]].dropna()
    changed = (wide["common"] != wide["own"]).groupby(level=["claim", "dataset"]).agg(["sum", "size"])
    return changed.rename(columns={"sum": "changed", "size": "K"}).reset_index()


def horizon_changes(cells: pd.DataFrame, grid: MapGrid) -> pd.DataFrame:
    """Per claim × data set × protocol: cells whose verdict at the first horizon differs from the last."""
    keys = ["dataset", "qk_scale", "fraction", "N", "protocol", "claim"]
    first, last = min(grid.horizons), max(grid.horizons)
    a = cells[cells["horizon"] == first].set_index(keys)["verdict"]
    b = cells[cells["horizon"] == last].set_index(keys)["verdict"]
    changed = (a != b.reindex(a.index)).groupby(level=["claim", "dataset", "protocol"]).agg(["sum", "size"])
    return changed.rename(columns={"sum": "changed", "size": "K"}).reset_index()


def headline(final: pd.DataFrame, grid: MapGrid) -> pd.DataFrame:
    """The verdicts at the cell nearest the headline experiments (preset Q/K scale, fraction 0.5,
    largest N), protocol ``common``."""
    qk, fraction = grid.headline
    at = final[(final["qk_scale"] == qk) & (final["fraction"] == fraction) & (final["N"] == max(grid.sizes))
               & (final["protocol"] == "common")]
    return at[["claim", "dataset", "effect", "lo", "hi", "verdict"]].reset_index(drop=True)
