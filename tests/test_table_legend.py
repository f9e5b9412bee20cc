"""Every table with NaN or ±∞ says what they mean (:mod:`resgd.plots.tables`), in the notebooks' own
HTML formatter, so no table of the book can show them bare."""

from __future__ import annotations

import math

import pandas as pd

from resgd.plots.tables import legend, table_html, use_tables


def test_the_legend_names_each_mark_and_its_columns():
    frame = pd.DataFrame({"rate": [-math.inf, 0.1], "iterations_to_target": [math.inf, 3.0], "seed": [0, 1],
                          "left_at": [math.nan, 4.0], "name": ["a", None], "ok": [True, False]})
    text = legend(frame)
    assert text.startswith("NaN (left_at, name): no value")
    assert "∞ (iterations_to_target): never reached" in text and "−∞ (rate): the rate of a run whose loss diverged" in text
    assert legend(pd.DataFrame({"seed": [0, 1], "ok": [True, False]})) is None
    assert table_html(frame).endswith("</p>") and 'class="resgd-table-legend"' in table_html(frame)
    assert "resgd-table-legend" not in table_html(pd.DataFrame({"seed": [0]}))


def test_use_tables_shows_every_column_and_installs_the_formatter():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        use_tables()
        assert pd.get_option("display.max_columns") is None
        data, _ = shell.display_formatter.format(pd.DataFrame({"x": [math.inf]}))
        assert 'class="resgd-table-legend"' in data["text/html"]
    finally:
        shell.display_formatter.formatters["text/html"].pop(pd.DataFrame, None)
        InteractiveShell.clear_instance()
        pd.reset_option("display.max_columns")
