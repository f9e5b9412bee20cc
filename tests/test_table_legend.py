"""Every table is shown whole, and every table with NaN or ±∞ says what they mean
(:mod:`resgd.plots.tables`), in the notebooks' own HTML formatter, so no table of the book can be cut
short or show them bare."""

from __future__ import annotations

import math
import re

import pandas as pd

from resgd.plots.tables import LONG_ROWS, SHOW_ALL, legend, table_html, use_tables, values_table


def test_the_legend_names_each_mark_and_its_columns():
    frame = pd.DataFrame({"rate": [-math.inf, 0.1], "iterations_to_target": [math.inf, 3.0], "seed": [0, 1],
                          "left_at": [math.nan, 4.0], "name": ["a", None], "ok": [True, False]})
    text = legend(frame)
    assert text.startswith("NaN (left_at, name): no value")
    assert "∞ (iterations_to_target): never reached" in text and "−∞ (rate): the rate of a run whose loss diverged" in text
    assert legend(pd.DataFrame({"seed": [0, 1], "ok": [True, False]})) is None
    assert table_html(frame).endswith("</p></div>") and 'class="resgd-table-legend"' in table_html(frame)
    assert "resgd-table-legend" not in table_html(pd.DataFrame({"seed": [0]}))


def test_use_tables_shows_every_column_and_installs_the_formatter():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        use_tables()
        assert all(pd.get_option(option) == value for option, value in SHOW_ALL.items())
        data, _ = shell.display_formatter.format(pd.DataFrame({"x": [math.inf]}))
        assert 'class="resgd-table-legend"' in data["text/html"]
    finally:
        shell.display_formatter.formatters["text/html"].pop(pd.DataFrame, None)
        InteractiveShell.clear_instance()
        for option in SHOW_ALL:
            pd.reset_option(option)


LONG_TEXT = "a choice explained in a sentence far longer than pandas' fifty characters"


def test_a_long_table_of_long_text_is_shown_whole():
    """pandas' defaults cut this to 10 rows, "…"-ended cells and a "70 rows × 2 columns" line."""
    frame = pd.DataFrame({"choice": [f"{LONG_TEXT} ({i})" for i in range(70)], "value": range(70)})
    assert "rows × 2 columns" in frame._repr_html_() and "..." in frame._repr_html_()  # what it replaces
    shown = table_html(frame)
    assert "..." not in shown and "…" not in shown and "rows ×" not in shown
    text = re.sub(r"<[^>]+>", "", shown)  # the cells' text (each number is in a span of its own)
    assert all(f"{LONG_TEXT} ({i})" in text for i in range(70))
    assert "resgd-table-long" in shown and "resgd-table-long" not in table_html(frame.head(LONG_ROWS))


def test_the_formatter_shows_a_long_table_whole_whatever_the_options():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        use_tables()
        pd.set_option("display.max_colwidth", 50)  # as a page might leave it: the formatter does not depend on it
        frame = pd.DataFrame({"choice": [LONG_TEXT] * 70})
        data, _ = shell.display_formatter.format(frame)
        assert data["text/html"].count(LONG_TEXT) == 70 and "rows ×" not in data["text/html"]
    finally:
        shell.display_formatter.formatters["text/html"].pop(pd.DataFrame, None)
        InteractiveShell.clear_instance()
        for option in SHOW_ALL:
            pd.reset_option(option)


def test_values_table_keeps_counts_whole():
    table = values_table({"n_configs": 300, "spearman": 0.953125, "last_iteration": 1200})
    shown = table_html(table)
    assert list(table.columns) == ["value"] and "300.000000" not in shown and '<td><span class="resgd-num">300</span></td>' in shown
    assert '<td><span class="resgd-num">0.953125</span></td>' in shown and "dtype" not in shown
