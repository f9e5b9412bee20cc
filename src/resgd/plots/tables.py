"""How the book's pandas tables are shown: every row, every column and every cell in full (none cut
behind "…" or summarised as "N rows × M columns"; a long table scrolls in a box of its own on screen
and prints whole on paper, long text wraps), and under any table that holds NaN or ±∞ one line saying
what they mean and in which columns they occur.

Why: a reader meets "NaN" and "inf" in the experiment tables (a run that dropped out, a target never
reached, a diverged run's rate) and cannot tell a missing value from a bug. The legend is added by
the notebooks' HTML formatter for DataFrames (:func:`use_tables`), so every table of every page gets
it without a call per table.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

SHOW_ALL = {"display.max_rows": None, "display.max_columns": None, "display.max_colwidth": None,
            "display.show_dimensions": False}
"""pandas' display options under which no row, column or cell is cut (its defaults cut cells at 50
characters and a table of over 60 rows to 10)."""

LONG_ROWS = 20
"""Tables with more rows than this scroll in a box of limited height (``_static/resgd.css``)."""

MEANINGS = {
    "NaN": "no value: the quantity is not defined for that row (a run that dropped out of a check, a "
           "configuration without that kind of run, a statistic with too few values)",
    "∞": "never reached (iterations to a target) or a loss that diverged",
    "−∞": "the rate of a run whose loss diverged, or first_to_target of a run that never reached its target",
}


def _marks(frame: pd.DataFrame) -> dict[str, list[str]]:
    """Which of NaN, ∞, −∞ occur in ``frame``, and in which columns."""
    found: dict[str, list[str]] = {}
    for column in frame.columns:
        values = frame[column]
        if values.isna().any():
            found.setdefault("NaN", []).append(str(column))
        if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
            array = values.to_numpy(dtype=float, na_value=np.nan)
            if np.isposinf(array).any():
                found.setdefault("∞", []).append(str(column))
            if np.isneginf(array).any():
                found.setdefault("−∞", []).append(str(column))
    return found


def legend(frame: pd.DataFrame) -> str | None:
    """One line on the NaN and ±∞ of ``frame`` (None when it has none)."""
    marks = _marks(frame)
    if not marks:
        return None
    return "; ".join(f"{mark} ({', '.join(marks[mark])}): {MEANINGS[mark]}" for mark in MEANINGS if mark in marks) + "."


def table_html(frame: pd.DataFrame) -> str:
    """pandas' own HTML of the whole of ``frame`` (:data:`SHOW_ALL`) in a box that scrolls when it is
    long, and, when it holds NaN or ±∞, the :func:`legend` under it."""
    text = legend(frame)
    with pd.option_context(*(item for pair in SHOW_ALL.items() for item in pair)):
        body = frame._repr_html_() or frame.to_html()
    box = "resgd-table-box resgd-table-long" if len(frame) > LONG_ROWS else "resgd-table-box"
    return (f'<div class="resgd-table"><div class="{box}">{body}</div>'
            + (f'<p class="resgd-table-legend">{html.escape(text)}</p>' if text else "") + "</div>")


def values_table(values: dict, name: str = "value") -> pd.DataFrame:
    """A page's named numbers as a one-column table, each value as it is: a printed Series ends in
    "dtype: float64", and a float column shows a count as "300.000000"."""
    return pd.Series(values, dtype=object, name=name).to_frame()

def use_tables() -> None:
    """In a notebook: show every row, column and cell of every table (:data:`SHOW_ALL`), with the
    NaN/±∞ legend under it."""
    for option, value in SHOW_ALL.items():
        pd.set_option(option, value)
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(pd.DataFrame, table_html)
