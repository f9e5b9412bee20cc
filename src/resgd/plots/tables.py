"""How the book's pandas tables are shown: every row, every column and every cell in full (none cut
behind "…" or summarised as "N rows × M columns"; a long table scrolls in a box of its own on screen
and prints whole on paper, long text wraps at spaces, a number never), a table too wide for the text
column split into parts with the same rows, and under any table that holds NaN or ±∞ one line saying
what they mean and in which columns they occur.

Why the parts: a table wider than the column makes the reader scroll sideways and lose the row, and
letting its cells break anywhere to fit broke numbers across lines ("0.96" over "88"). The split is
decided here, from the text of the cells, so the site and the PDF show the same parts.

Why: a reader meets "NaN" and "inf" in the experiment tables (a run that dropped out, a target never
reached, a diverged run's rate) and cannot tell a missing value from a bug. The legend is added by
the notebooks' HTML formatter for DataFrames (:func:`use_tables`), so every table of every page gets
it without a call per table.
"""

from __future__ import annotations

import html
import re

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


TABLE_PX = 640
"""The width (CSS px) every table must fit: the book's text column is 661 px at its narrowest (a
notebook's output in a 1280-px window; 706 px in a 768-px one, whose sidebar folds away), less a margin."""

FONT_PX = 14
"""The tables' font size (``_static/resgd.css``: 0.875 of the 16-px body text)."""

CELL_PX = 12
"""A cell's padding and border, both sides together (px)."""

NUMBER = re.compile(r"[-−+]?(?:\d+[/–]\d+|(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:[eE][-−+]?\d+)?(?:[ \u00a0\u202f]?%)?)")
"""A number as the tables print it (-1.2e-03, 0.9688, 12,345, 3/8, a score 12–0, 95 %): shown on one line."""

LONG_NAME = 12
"""A column name longer than this may wrap after its underscores (iterations_to_target); a shorter
one (d_qk, rms_H) stays whole."""

_TAG = re.compile(r"(<[^>]*>|&#?\w+;)")


def _char_em(char: str) -> float:
    """A character's width in em, on the wide side (DejaVu Sans, the widest of the usual fonts), so
    that a table estimated to fit fits in narrower fonts too."""
    if char.isdigit():
        return 0.64
    if char.isspace():
        return 0.32
    if char.isupper():
        return 0.72
    if char.isalpha():
        return 0.62
    return 0.5 if char in "_-−%/=<>+" else 0.34


def _tokens(text: str, header: bool) -> list[str]:
    """The pieces a cell's text may wrap between: its words, each number whole; a long column name
    also after its underscores (:func:`_show`)."""
    words = NUMBER.sub(lambda m: m[0].replace(" ", "\u00a0"), text).split()
    breaks = header and len(text) > LONG_NAME
    return [part for word in words for part in (re.split(r"(?<=_)", word) if breaks else [word]) if part]


def _min_px(texts, header: bool = False) -> float:
    """The narrowest a column of ``texts`` can be drawn: its longest unbreakable piece, plus padding."""
    scale = FONT_PX * (1.1 if header else 1.0)  # headers are bold
    return CELL_PX + max((sum(map(_char_em, token)) * scale for text in texts for token in _tokens(str(text), header)),
                         default=0.0)


def _cell_texts(frame: pd.DataFrame) -> list[list[str]]:
    """Each column's cells as pandas prints them (read from its HTML: the formatting is pandas')."""
    with pd.option_context(*(item for pair in SHOW_ALL.items() for item in pair)):
        body = frame.to_html()
    rows = [re.findall(r"<td>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", body.split("<tbody>")[-1], re.S)]
    return [[html.unescape(row[i]) for row in rows if i < len(row)] for i in range(frame.shape[1])]


def column_px(frame: pd.DataFrame) -> tuple[float, list[float]]:
    """The narrowest width (px) of ``frame``'s row labels, and of each of its columns, header included."""
    index = frame.index
    levels = [index.get_level_values(i) for i in range(index.nlevels)]
    index_px = sum(_min_px([*map(str, level.unique()), str(level.name or "")], header=True) for level in levels)
    labels = [column if isinstance(column, tuple) else (column,) for column in frame.columns]
    return index_px, [max(_min_px(map(str, label), header=True), _min_px(cells))
                      for label, cells in zip(labels, _cell_texts(frame))]


def _is_key(values: pd.Series) -> bool:
    """A column that names its row (text, a category, a flag, a whole number), not a measurement."""
    return not pd.api.types.is_float_dtype(values) and not pd.api.types.is_complex_dtype(values)


def _split(frame: pd.DataFrame, width_px: float) -> tuple[int, list[list[int]]]:
    """How many leading columns every part repeats, and each part's other columns (positions)."""
    if frame.shape[1] < 2:
        return 0, [list(range(frame.shape[1]))]
    index_px, widths = column_px(frame)
    if index_px + sum(widths) <= width_px:
        return 0, [list(range(frame.shape[1]))]
    keys, used = 0, index_px
    while keys < frame.shape[1] - 1 and _is_key(frame.iloc[:, keys]) and used + widths[keys] <= width_px / 2:
        used += widths[keys]
        keys += 1
    parts: list[list[int]] = []
    for i in range(keys, frame.shape[1]):
        if parts and used + sum(widths[j] for j in parts[-1]) + widths[i] <= width_px:
            parts[-1].append(i)
        else:
            parts.append([i])
    return keys, parts


def column_parts(frame: pd.DataFrame, width_px: float = TABLE_PX) -> list[pd.DataFrame]:
    """``frame`` as tables of the same rows that each fit ``width_px``: one when it fits; else its
    columns in order, each part led by the row labels and by the leading columns that name the row
    (text or whole numbers, at most half the width), so each part's rows can be read on their own."""
    keys, parts = _split(frame, width_px)
    return [frame.iloc[:, list(range(keys)) + part] for part in parts]


def _show(body: str) -> str:
    """pandas' table HTML with each number in a span the style sheet keeps on one line, and a break
    allowed after each underscore of a long header (:data:`LONG_NAME`)."""
    start = body.find("<table")
    out, cell = [], None
    for piece in _TAG.split(body[start:]):
        if piece.startswith("<"):
            name = re.match(r"</?(\w+)", piece)
            cell = (name[1] if not piece.startswith("</") else None) if name and name[1] in ("td", "th") else cell
            out.append(piece)
        elif piece.startswith("&") or cell is None:
            out.append(piece)
        else:
            long_name = cell == "th" and len(html.unescape(piece)) > LONG_NAME
            piece = NUMBER.sub(lambda m: f'<span class="resgd-num">{m[0]}</span>' if len(m[0]) > 1 else m[0], piece)
            out.append(piece.replace("_", "_<wbr>") if long_name else piece)
    return body[:start] + "".join(out)


def table_html(frame: pd.DataFrame, width_px: float = TABLE_PX) -> str:
    """pandas' own HTML of the whole of ``frame`` (:data:`SHOW_ALL`), in parts of the same rows when it
    is too wide for the column (:func:`column_parts`), each in a box that scrolls when it is long; and,
    when it holds NaN or ±∞, the :func:`legend` under it."""
    text = legend(frame)
    keys, parts = _split(frame, width_px)
    box = "resgd-table-box resgd-table-long" if len(frame) > LONG_ROWS else "resgd-table-box"
    repeated = ", ".join(" ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in frame.columns[:keys])
    shown = []
    for number, part in enumerate(parts, start=1):
        with pd.option_context(*(item for pair in SHOW_ALL.items() for item in pair)):
            shown_part = frame.iloc[:, list(range(keys)) + part]
            body = _show(shown_part._repr_html_() or shown_part.to_html())
        if len(parts) > 1:
            first = 1 if number == 1 else part[0] + 1
            what = (f"Part {number} of {len(parts)}, the same rows: columns {first}–{part[-1] + 1} of "
                    f"{frame.shape[1]}" + (f" ({repeated} repeated)" if keys and number > 1 else ""))
            shown.append(f'<p class="resgd-table-part">{html.escape(what)}</p>')
        shown.append(f'<div class="{box}">{body}</div>')
    return ('<div class="resgd-table">' + "".join(shown)
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
