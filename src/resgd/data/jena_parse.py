"""Jena climate: parse the CSV (the checks of its header, rows and values) and clean it (wind
glitches, hourly resampling). :mod:`.jena` finds the sources and cuts the windows from these rows;
:func:`.jena.parser_version` is the digest of this module, its checks and its schema.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from ..validation import DataError
from .jena_checks import check_ranges, check_timestamps
from .jena_schema import (
    CANONICAL_FIRST,
    CANONICAL_HEADER,
    CANONICAL_LAST,
    CANONICAL_ROWS,
    COLUMNS,
    DATE_COLUMN,
    DATE_FORMAT,
    DATE_FORMAT_DOC,
    NONWIND_NAMES,
    WIND_COLUMNS,
    WIND_ERROR_VALUE,
)
from .locations import check_regular

WindFill = float | Literal["interpolate"]
Hourly = Literal["last", "mean"]


# --------------------------------------------------------------------------- parsing


LINE_MAX_CHARS = 64 * 1024
"""The longest header or first row read (the canonical lines are under 300 characters): a huge file
without line ends is refused at once, not read whole."""


def check_line_lengths(path: Path) -> None:
    """One line, not a MemoryError: a first line over :data:`LINE_MAX_CHARS` bytes is refused."""
    with open(path, "rb") as handle:
        first = handle.readline(LINE_MAX_CHARS + 1)
    if len(first) > LINE_MAX_CHARS:
        raise DataError(f"{path}: line 1 (header) is longer than {LINE_MAX_CHARS // 1024} KiB (no line end); "
                        f"not a Jena climate CSV, expected the header {CANONICAL_HEADER}")


def _check_header(path: Path) -> tuple[str, ...]:
    """The file's columns: the canonical 15, or the January 2009 excerpt's first 12 (no wind columns)."""
    check_regular(path, "a Jena climate CSV")
    check_line_lengths(path)
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            first_line = handle.readline(LINE_MAX_CHARS + 1)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: line 1 (header) is not UTF-8 text ({exc}); expected {CANONICAL_HEADER}") from exc
    if not first_line.strip():
        raise DataError(f"{path}: the file is empty; expected the header {CANONICAL_HEADER} and data rows")
    header = next(csv.reader([first_line]))
    for position, (got, expected) in enumerate(zip(header, COLUMNS), start=1):
        if got.strip() != expected:
            raise DataError(
                f"{path}: line 1 (header), column {position}: got {got!r}, expected {expected!r}; "
                f"the expected header is {CANONICAL_HEADER}"
            )
    if len(header) not in (len(COLUMNS), 1 + len(NONWIND_NAMES)):
        raise DataError(
            f"{path}: line 1 (header) has {len(header)} columns, expected {len(COLUMNS)} (the canonical file: "
            f"{CANONICAL_HEADER}) or {1 + len(NONWIND_NAMES)} (the January 2009 excerpt, without the wind columns)"
        )
    columns = COLUMNS[: len(header)]
    _check_first_row(path, len(columns))
    return columns


def _check_first_row(path: Path, n_columns: int = len(COLUMNS)) -> None:
    """A first data row longer than the header: pandas would take its leading fields as an index and
    report a wrong field (a file saved with decimal commas: 'line 2, field 'Date Time': got '86''), so
    it is counted here. Later long rows are pandas' own parser error, which names their line."""
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            handle.readline(LINE_MAX_CHARS + 1)
            second = handle.readline(LINE_MAX_CHARS + 1)
    except UnicodeDecodeError:
        return  # reported with its line by the parser
    if len(second) > LINE_MAX_CHARS:
        raise DataError(f"{path}: line 2 is longer than {LINE_MAX_CHARS // 1024} KiB (no line end); "
                        f"expected rows of {len(COLUMNS)} comma-separated fields")
    fields = next(csv.reader([second]), [])
    if len(fields) > n_columns:
        raise DataError(
            f"{path}: line 2 has {len(fields)} comma-separated fields, expected {n_columns} "
            f"(written with decimal commas or another separator?): {second.strip()[:80]!r}"
        )


def _first_bad_row(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def parse_jena_csv(path: str | os.PathLike) -> pd.DataFrame:
    """The rows of a Jena climate CSV: a ``DatetimeIndex`` and its features as float64 (the 14 of the
    canonical file, or the 11 non-wind ones of the January 2009 excerpt).

    Accepts the header with or without quotes. Any problem raises :class:`DataError` naming
    the file, the line (1 = header) and the field, and what was expected; the physical ranges and
    timestamps are checked too (:mod:`.jena_checks`; their counts are in ``frame.attrs["checks"]``). Values are returned
    as written (``-9999`` glitches included); see :func:`clean_wind`.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found; expected a Jena climate CSV")
    columns = _check_header(path)
    names = columns[1:]
    try:
        raw = pd.read_csv(path, header=0, names=list(columns), dtype={DATE_COLUMN: str}, encoding="utf-8",
                          keep_default_na=False, na_values=[""])  # text such as 'nan' is reported as written
    except pd.errors.ParserError as exc:
        raise DataError(f"{path}: malformed CSV ({exc}); every row needs {len(columns)} comma-separated fields") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{path}: cannot parse the CSV ({exc})") from exc
    if raw.empty:
        raise DataError(f"{path}: no data rows after the header")

    values = np.empty((len(raw), len(names)), dtype=np.float64)
    for column, name in enumerate(names):
        numbers = pd.to_numeric(raw[name], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(numbers)
        if bad.any():
            row = _first_bad_row(bad)
            got = raw[name].iloc[row]
            what = "an empty field" if pd.isna(got) else repr(got) if isinstance(got, str) else f"{got:g}"
            raise DataError(
                f"{path}: line {row + 2}, field {name!r}: got {what}, expected a number "
                f"({int(bad.sum())} such row(s) in this column)"
            )
        values[:, column] = numbers

    stamps = pd.to_datetime(raw[DATE_COLUMN], format=DATE_FORMAT, errors="coerce")
    bad = stamps.isna().to_numpy()
    if bad.any():
        row = _first_bad_row(bad)
        raise DataError(
            f"{path}: line {row + 2}, field {DATE_COLUMN!r}: got {raw[DATE_COLUMN].iloc[row]!r}, "
            f"expected a date {DATE_FORMAT_DOC}"
        )
    check_ranges(values, path, names)
    facts = check_timestamps(stamps, values, path)
    index = pd.DatetimeIndex(stamps, name=DATE_COLUMN)
    frame = pd.DataFrame(values, index=index, columns=list(names))
    frame.attrs["checks"] = facts
    return frame


OTHER_FILE_ADVICE = (
    "To use another Jena-format file on purpose, call resgd.data.load_jena(check_canonical=False) from "
    "Python; `python -m resgd` and the book use the canonical file only."
)


def check_canonical(frame: pd.DataFrame, path: Path, advice: str = "") -> None:
    """Row count and date range of the canonical 2009–2016 file (no checksum is published).

    ``advice``: what to do about this copy (see :func:`.locations.bad_file_advice`).
    """
    problems = canonical_problems(frame)
    if problems:
        raise DataError(
            f"{path}: not the canonical Jena climate file: {'; '.join(problems)}. "
            + (f"{advice} " if advice else "") + OTHER_FILE_ADVICE
        )


def canonical_problems(frame: pd.DataFrame) -> list[str]:
    """How ``frame`` differs from the canonical file (row count, date range); empty when it does not."""
    problems = []
    if len(frame) != CANONICAL_ROWS:
        problems.append(f"{len(frame):,} data rows, expected {CANONICAL_ROWS:,}")
    first, last = frame.index.min(), frame.index.max()
    if first != CANONICAL_FIRST or last != CANONICAL_LAST:
        problems.append(
            f"dates from {first:%d.%m.%Y %H:%M:%S} to {last:%d.%m.%Y %H:%M:%S}, expected "
            f"{CANONICAL_FIRST:%d.%m.%Y %H:%M:%S} to {CANONICAL_LAST:%d.%m.%Y %H:%M:%S}"
        )
    return problems


# --------------------------------------------------------------------------- cleaning


def clean_wind(frame: pd.DataFrame, wind_fill: WindFill = 0.0) -> tuple[pd.DataFrame, int]:
    """Replace the ``-9999`` wind error values; return the new frame and how many were replaced.

    ``wind_fill``: a number (default 0.0, companion's choice) or ``"interpolate"`` (linear in
    time between the neighbouring valid readings).
    """
    frame = frame.copy()
    replaced = 0
    for name in WIND_COLUMNS:
        if name not in frame.columns:
            continue  # the excerpt has no wind columns
        bad = frame[name].to_numpy() == WIND_ERROR_VALUE
        replaced += int(bad.sum())
        if not bad.any():
            continue
        if wind_fill == "interpolate":
            column = frame[name].mask(bad)
            frame[name] = column.interpolate(method="time", limit_direction="both").fillna(0.0)
        else:
            frame.loc[bad, name] = float(wind_fill)
    return frame, replaced


def to_hourly(frame: pd.DataFrame, hourly: Hourly = "last") -> tuple[pd.DataFrame, int]:
    """Hourly rows labelled by the hour that ends their bin; return them and the number filled.

    Duplicate timestamps are allowed (they fall into the same bin); empty hours are filled by
    linear interpolation in time.
    """
    if hourly not in ("last", "mean"):
        raise ValueError(f"hourly: expected 'last' or 'mean', got {hourly!r}")
    bins = frame.sort_index(kind="stable").resample("1h", closed="right", label="right")
    hours = bins.last() if hourly == "last" else bins.mean()
    empty = hours.isna().any(axis=1)
    n_filled = int(empty.sum())
    if n_filled:
        hours = hours.interpolate(method="time", limit_direction="both")
    return hours, n_filled
