"""A table too wide for the book's text column is shown in parts of the same rows, and every number in
a table is marked to stay on one line (:mod:`resgd.plots.tables`); the browser check of the built
site is in ``tests/test_browser.py``."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from resgd.plots.tables import TABLE_PX, column_parts, column_px, table_html


def wide_frame(rows: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(rows, 12)) * 1e-7, columns=[f"bound_number_{i}" for i in range(12)])
    frame.insert(0, "scope", ["per_sample"] * rows)
    frame.insert(0, "seed", range(rows))
    return frame


def test_a_table_that_fits_is_one_part():
    frame = pd.DataFrame({"seed": [0, 1], "rate": [0.25, 0.5]})
    assert [list(part.columns) for part in column_parts(frame)] == [["seed", "rate"]]
    assert table_html(frame).count("<table") == 1 and "resgd-table-part" not in table_html(frame)


def test_a_wide_table_is_split_into_parts_of_the_same_rows_that_each_fit():
    frame = wide_frame()
    index_px, widths = column_px(frame)
    assert index_px + sum(widths) > TABLE_PX  # the case this is about
    parts = column_parts(frame)
    assert len(parts) > 1
    for part in parts:
        assert list(part.columns[:2]) == ["seed", "scope"]  # the columns that name the row lead every part
        assert part.index.equals(frame.index)
        part_index, part_widths = column_px(part)
        assert part_index + sum(part_widths) <= TABLE_PX
    shown = [column for part in parts for column in part.columns[2:]]
    assert shown == list(frame.columns[2:])  # every other column once, in order
    html = table_html(frame)
    assert html.count("<table") == len(parts) and html.count('class="resgd-table-part"') == len(parts)
    assert f"Part 2 of {len(parts)}, the same rows" in html and "(seed, scope repeated)" in html


def test_a_narrower_column_gets_more_parts():
    frame = wide_frame()
    assert len(column_parts(frame, 400)) > len(column_parts(frame, 900)) >= 1


def test_every_number_is_one_unbreakable_span_and_long_headers_break_after_underscores():
    frame = pd.DataFrame({"iterations_to_target": [12345, 3], "note": ["95 % of 3/8 runs, 1e-3 apart", "a &amp; b"],
                          "rate": [-1.2e-3, 0.9688], "rms_H": ["holds (12–0)", "fails"]})
    html = table_html(frame)
    numbers = re.findall(r'<span class="resgd-num">(.*?)</span>', html)
    assert {"12345", "95 %", "3/8", "1e-3", "-0.0012", "0.9688", "12–0"} <= set(numbers), numbers
    assert "<th>iterations_<wbr>to_<wbr>target</th>" in html and "<th>rms_H</th>" in html
    assert "&amp;amp;" in html and "<style" in html and 'resgd-num">1</span>' not in html  # entities, style and single digits untouched
