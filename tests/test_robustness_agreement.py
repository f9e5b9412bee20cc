"""The robustness map's verdicts agree between the quick and the full grid where both decide.

The quick grid's cells are book-grid cells with the same seeds, the same stability limits and L̂,
and a quarter of the iterations; a run's first steps do not depend on T (checked below on toy data, bit
for bit), so the quick map's cells are the book map's cells read at T/4. The test reads the full
build's cell table (``results/robustness/map_book.csv``, written by notebooks/06_robustness.md in
full mode, i.e. ``make book``) and compares, on the quick cells, the verdicts at T/4 with those at
T: a verdict (on the primary measure Φ(T)/Φ(0)) that flips between T/4 and T makes it fail. It
checks the book that was built, on the engine that built it, and recomputes nothing. Skips without
the full map unless ``RESGD_REQUIRE_SITE=1`` (CI), like the site checks.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from resgd.core.model import ModelConfig, init_params
from resgd.core.trainer import GDConfig, train_stacked
from resgd.robustness import study as rb
from resgd.robustness.grid import map_grid
from resgd.robustness.map_runs import TAGS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"


def quick_cells_of(full, quick_grid):
    """The quick grid's cells, read from the book map's cell table at the quick grid's horizons."""
    steps = {p: set(quick_grid.steps(p)) for p in quick_grid.protocols}
    keep = (full["dataset"].isin(quick_grid.datasets) & full["qk_scale"].isin(quick_grid.qk_scales)
            & full["N"].isin(quick_grid.sizes) & full["horizon"].isin(quick_grid.horizons)
            & full["protocol"].isin(quick_grid.protocols)
            & np.array([f in steps.get(p, ()) for p, f in zip(full["protocol"], full["fraction"])], dtype=bool))
    return full[keep]


@pytest.mark.site
def test_quick_and_full_maps_agree_where_both_decide():
    full_path = rb.map_path("book", RESULTS)
    if not full_path.is_file():
        message = f"no full map at {full_path} (run `make book`, or `python -m resgd reproduce --only robustness`)"
        if os.environ.get("RESGD_REQUIRE_SITE") == "1":
            pytest.fail(message + " and RESGD_REQUIRE_SITE=1")
        pytest.skip(message)
    full = rb.load_cells("book", RESULTS)
    quick_grid, book_grid = map_grid(True), map_grid(False)
    assert quick_grid.is_subset_of(book_grid) and set(quick_grid.horizons) <= set(book_grid.horizons)
    quick = quick_cells_of(full, quick_grid)
    expected = {(p, f) for p in quick_grid.protocols for f in quick_grid.steps(p)}
    assert set(zip(quick["protocol"], quick["fraction"])) == expected, "every quick cell is in the book's map"
    assert quick["horizon"].max() == quick_grid.iterations < full["horizon"].max() == book_grid.iterations
    compared = rb.agreement(quick, full)
    disagree = compared[~compared["agree"]]
    assert disagree.empty, (
        f"{len(disagree)} of {len(compared)} cells decided by both maps disagree:\n"
        + disagree[TAGS + ["claim", "verdict_quick", "effect_quick", "verdict_full", "effect_full"]].to_string()
    )
    assert len(compared) > 0, "no cell is decided by both maps: nothing was compared"


def test_a_runs_first_steps_do_not_depend_on_its_horizon():
    """Why the quick map is the book map read at T/4: GD at T and at 2T agree bit for bit up to T,
    in stacks of different sizes (the quick and the book grids stack their runs differently)."""
    cfg = ModelConfig(d=6, d_qk=3, m=5, n_layers=2, beta=1.0)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(8, 4, 6, generator=g, dtype=torch.float64)
    Y = torch.randn(8, 4, 1, generator=g, dtype=torch.float64)
    models = [cfg.replace(beta=b) for b in (1.0, 0.5, 0.0)]
    params = [init_params(m, seed) for seed, m in enumerate(models)]
    short = train_stacked(params[:1], models[:1], X, Y, [GDConfig(lr=0.05, iterations=10, record_every=5)])[0]
    long = train_stacked(params, models, X, Y, [GDConfig(lr=lr, iterations=20, record_every=5) for lr in (0.05, 0.04, 0.03)])[0]
    assert short.history.equals(long.history.iloc[:11].reset_index(drop=True))
