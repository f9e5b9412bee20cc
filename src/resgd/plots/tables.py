"""How the book's pandas tables are shown: every column (none hidden behind "…"), and under any table
that holds NaN or ±∞ one line saying what they mean and in which columns they occur.

Why: a reader meets "NaN" and "inf" in the experiment tables (a run that dropped out, a target never
reached, a diverged run's rate) and cannot tell a missing value from a bug. The legend is added by
the notebooks' HTML formatter for DataFrames (:func:`use_tables`), so every table of every page gets
it without a call per table.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

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
    """pandas' own HTML of ``frame`` and, when it holds NaN or ±∞, the :func:`legend` under it."""
    text = legend(frame)
    body = frame._repr_html_() or frame.to_html()
    return body + (f'<p class="resgd-table-legend">{html.escape(text)}</p>' if text else "")


def use_tables() -> None:
    """In a notebook: show every column of every table, with the NaN/±∞ legend under it."""
    pd.set_option("display.max_columns", None)
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(pd.DataFrame, table_html)
