"""The map's findings as short texts and numbers for the book's glued prose."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd

from ..words import count_noun
from .grid import MapGrid
from .verdicts import CLAIM_LABELS

AXES = (("qk_scale", "Q/K scale"), ("fraction", "step fraction"), ("N", "N"))


def count_sentence(row: pd.Series) -> str:
    """'holds in k of K cells (fails in f, undecided in u; by chance alone ≈ c holds)'."""
    text = f"holds in {row['holds']} of {count_noun(row['K'], 'cell')} (fails in {row['fails']}, undecided in {row['undecided']}"
    if "chance_holds" in row:
        text += f"; by chance alone ≈ {row['chance_holds']:.1f} holds"
    return text + ")"


def verdict_table(tally: pd.DataFrame) -> pd.DataFrame:
    """Claim × data set (rows) × protocol (columns) → 'holds / fails / undecided of K (chance c)'."""
    cell = [f"{h} / {f} / {u} of {k} (chance {c:.1f})" for h, f, u, k, c in
            zip(tally["holds"], tally["fails"], tally["undecided"], tally["K"], tally["chance_holds"])]
    wide = tally.assign(text=cell, claim=tally["claim"].map(CLAIM_LABELS))
    return wide.pivot_table(index=["claim", "dataset"], columns="protocol", values="text", aggfunc="first")


def measure_changes(cells: pd.DataFrame, horizon: int) -> pd.DataFrame:
    """Per claim × protocol: cells whose verdict differs between the primary measure Φ(T)/Φ(0) and
    the loss at T."""
    keys = ["dataset", "qk_scale", "fraction", "N", "protocol", "claim"]
    at = cells[cells["horizon"] == horizon]
    wide = at.pivot_table(index=keys, columns="measure", values="verdict", aggfunc="first").dropna()
    changed = (wide["relative"] != wide["loss"]).groupby(level=["claim", "protocol"]).agg(["sum", "size"])
    return changed.rename(columns={"sum": "changed", "size": "K"}).reset_index()


PREREGISTRATION = "^pre-registered: the robustness map"
"""How the commit that fixed the map's design begins (other studies pre-register their own)."""


def preregistration_commit(root: str | Path | None = None) -> str:
    """The commit that fixed the map's design (:data:`PREREGISTRATION`), as 'hash (date)', or a
    note when git or the history is not available."""
    root = Path(__file__).resolve().parents[3] if root is None else Path(root)
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%h (%cs)", f"--grep={PREREGISTRATION}"], cwd=root,
                             capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out or "not available (no git history in this copy)"


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
    count = count_noun(len(chosen), "cell")
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
    """Per claim × data set: in how many cells the verdict differs between ``common`` and ``own``
    (same fractions; ``theory``'s axis is c, so it has no paired cell)."""
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


def twin_losses(per_run: pd.DataFrame, grid: MapGrid) -> pd.DataFrame:
    """Per data set × protocol × L > 1 × (β, twin init): the median over runs of Φ(0) and Φ(T), and
    the runs of each outcome — whether each twin learns, not only whether it loses."""
    deep = per_run[per_run["n_layers"] > 1]
    T = grid.iterations
    keys = ["dataset", "protocol", "n_layers", "beta", "init"]
    out = deep.groupby(keys).agg(loss_0=("loss_start", "median"), loss_T=(f"loss_{T}", "median"),
                                 relative_T=(f"relative_{T}", "median"), runs=("seed", "size"))
    counts = deep.groupby(keys)["outcome"].value_counts().unstack(fill_value=0)
    return out.join(counts).reset_index()


def seed_agreement(final: pd.DataFrame, grid: MapGrid, protocol: str, power: float = 0.8) -> dict:
    """Why a protocol's cells are (un)decided, in seeds: at the last horizon, how many of the
    (cell, claim) pairs under ``protocol`` there are, how many of the grid's n seeds must lie on one
    side of 0 for the interval to decide (``need``), the most and the median that do (``most``,
    ``median``: the larger of the seeds above and below 0), ``p_power``: the chance p of one seed
    being on a side at which the rule decides with probability ``power`` (P(Bin(n, p) ≥ need)), and
    ``reading``: the finding in words."""
    from math import comb

    from ..core.stats import interval_k

    rows = final[final["protocol"] == protocol]
    n = len(grid.seeds)
    need = n + 1 - interval_k(n, grid.min_coverage)
    agree = rows[["above", "below"]].max(axis=1)

    def decides(p: float) -> float:  # P(Bin(n, p) >= need)
        return sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(need, n + 1))

    lo, hi = 0.0, 1.0  # decides() rises with p: bisection to 1e-9
    while hi - lo > 1e-9:
        lo, hi = ((lo + hi) / 2, hi) if decides((lo + hi) / 2) < power else (lo, (lo + hi) / 2)
    p_power = hi
    decided = int(rows["verdict"].isin(["holds", "fails"]).sum())
    reading = ("the seeds stay split: these cells report the split, not a verdict" if decided == 0 else
               f"the seeds agree in {decided} of {count_noun(len(rows), 'pair')}, split in the rest")
    return {"pairs": int(len(rows)), "decided": decided, "n": n, "need": int(need), "most": int(agree.max()),
            "median": float(agree.median()), "power": power, "p_power": float(p_power), "reading": reading}
