"""Captions and labels that say what the figures draw: the claims page's overview names
every colour it draws, and the map's (c) rows name the statistic the cells hold."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import seaborn as sns  # noqa: E402

from resgd.experiments.design import VERDICTS  # noqa: E402
from resgd.plots.experiments import VERDICT_COLORS, plot_verdicts, verdict_colour_words  # noqa: E402


def _overview(verdicts):
    return pd.DataFrame([{"dataset": "sst2", "protocol": f"p{i}", "name": "residual_helps", "verdict": v}
                         for i, v in enumerate(verdicts)])


def test_the_overview_caption_names_each_colour_drawn_and_only_those():
    """Every verdict the design can give has a colour and a name; the caption's key lists each verdict
    drawn with the name of the colour its cell is filled with."""
    assert set(VERDICTS) <= set(VERDICT_COLORS)
    table = _overview(["holds", "horizon-dependent", "holds"])
    assert verdict_colour_words(table["verdict"]) == "green holds, purple horizon-dependent"
    fig = plot_verdicts(table)
    fills = {tuple(np.round(p.get_facecolor()[:3], 3)) for p in fig.axes[0].patches}
    palette = sns.color_palette("colorblind")
    assert fills == {tuple(np.round(palette[VERDICT_COLORS[v][0]], 3)) for v in ("holds", "horizon-dependent")}
    plt.close(fig)
    assert verdict_colour_words(VERDICTS).count(",") == len(VERDICTS) - 1


def test_a_verdict_without_a_colour_is_a_clear_error():
    with pytest.raises(ValueError, match="target-dependent"):
        plot_verdicts(_overview(["holds", "target-dependent"]))


def test_the_maps_c_rows_name_the_median_over_depths_they_plot():
    """The map's (c) cell is the median over L of each depth's median (verdicts.cell_effects), and its
    row label says so (it said "min over L")."""
    from resgd.plots.robustness import ROW_LABELS
    from resgd.robustness import study as rb
    from resgd.robustness import verdicts as stats

    grid = rb.map_grid(True, datasets=("toy",), iterations=50, horizons=(50,))
    rows = []
    for L, shift in zip(grid.depths, (0.2, 1.0, 3.0)):  # each depth's log ratio: shift (+ a little per seed)
        for s in grid.seeds:
            for beta, value in ((1.0, np.exp(-shift - 0.01 * s)), (0.0, 1.0)):
                rows.append({"n_layers": L, "beta": beta, "init": "matched", "seed": s, "relative_50": value})
    rows += [{"n_layers": 1, "beta": b, "init": "matched", "seed": s, "relative_50": 1.0 - 0.1 * b}
             for b in grid.betas for s in grid.seeds]
    frame = pd.DataFrame(rows).assign(outcome="learns")
    depth = next(e for e in stats.cell_effects(frame, grid, 50, "relative") if e["claim"] == "depth_residual_helps")
    per_depth = [shift + 0.01 * float(np.median(grid.seeds)) for shift in (0.2, 1.0, 3.0)[:len(grid.depths)]]
    assert len(per_depth) > 1 and depth["effect"] == pytest.approx(float(np.median(per_depth)))
    assert depth["effect"] > min(per_depth) + 0.1  # not the minimum over L
    assert "median over L" in ROW_LABELS["depth_residual_helps"] and "min" not in ROW_LABELS["depth_residual_helps"]
    assert "median over L" in ROW_LABELS["depth_residual_helps_second"]
