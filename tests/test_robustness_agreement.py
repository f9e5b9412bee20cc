"""The robustness map's verdicts agree between the quick and the full grid where both decide.

Reads the full build's cell table (``results/robustness/map_book.csv``, written by
notebooks/06_robustness.md in full mode, i.e. ``make book``, on the ``book`` grid) and computes the
quick map (its runs are cached in ``results/cache``; a few minutes on two cores when they are
not). The quick grid's cells are book-grid cells with the same seeds but half the iterations, so
a verdict (on the primary measure Φ(T)/Φ(0)) that flips between T/2 and T makes this test fail. Skips without the full map unless ``RESGD_REQUIRE_SITE=1``
(CI), like the site checks.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from resgd.robustness import study as rb

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"


@pytest.mark.site
def test_quick_and_full_maps_agree_where_both_decide(monkeypatch):
    full_path = rb.map_path("book", RESULTS)
    if not full_path.is_file():
        message = f"no full map at {full_path} (run `make book`, or `python -m resgd reproduce --only robustness`)"
        if os.environ.get("RESGD_REQUIRE_SITE") == "1":
            pytest.fail(message + " and RESGD_REQUIRE_SITE=1")
        pytest.skip(message)
    monkeypatch.setenv("RESGD_RESULTS_DIR", str(RESULTS))
    full = rb.load_cells("book", RESULTS)
    quick = rb.build_map(True, n_jobs=2).cells
    cells = ["dataset", "qk_scale", "fraction", "N", "protocol", "claim"]
    shared = quick[cells].drop_duplicates().merge(full[cells].drop_duplicates(), on=cells)
    assert len(shared) == len(quick[cells].drop_duplicates()), "every quick cell is a book-grid cell"
    compared = rb.agreement(quick, full)
    disagree = compared[~compared["agree"]]
    assert disagree.empty, (
        f"{len(disagree)} of {len(compared)} cells decided by both maps disagree:\n"
        + disagree[cells + ["verdict_quick", "effect_quick", "verdict_full", "effect_full"]].to_string()
    )
    assert len(compared) > 0, "no cell is decided by both maps: nothing was compared"
