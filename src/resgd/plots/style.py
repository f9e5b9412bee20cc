"""The book's one plotting style and the one way figures reach disk (PNG + PDF, atomically)."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt
import seaborn as sns

from ..atomic import write_with

FIGURES_ENV = "RESGD_FIGURES_DIR"
PALETTE = "colorblind"


def use_style() -> None:
    """Seaborn ``whitegrid`` with the colour-blind palette and sizes that read well in the book."""
    sns.set_theme(style="whitegrid", palette=PALETTE, context="notebook")
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "figure.figsize": (6.4, 4.0), "axes.titlesize": "medium"})


def figures_dir(directory: str | os.PathLike | None = None) -> Path:
    """Where figures go: the argument, else ``$RESGD_FIGURES_DIR``, else ``./figures``."""
    return Path(directory or os.environ.get(FIGURES_ENV) or "figures")


def save_figure(fig: plt.Figure, name: str, directory: str | os.PathLike | None = None) -> dict[str, Path]:
    """Write ``name.png`` and ``name.pdf``; returns their paths by extension."""
    out = figures_dir(directory)
    return {ext: write_with(out / f"{name}.{ext}", lambda tmp, ext=ext: fig.savefig(tmp, format=ext, bbox_inches="tight")) for ext in ("png", "pdf")}


def label_standin(fig: plt.Figure, label: str | None) -> None:
    """Stamp a visible banner on figures made from synthetic stand-in data (no-op for real data)."""
    if label:
        fig.text(0.5, 0.995, label, ha="center", va="top", fontsize=8, color="darkred",
                 bbox={"facecolor": "mistyrose", "edgecolor": "darkred", "boxstyle": "round,pad=0.2"})
