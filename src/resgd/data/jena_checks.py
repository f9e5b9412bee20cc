"""Plausibility checks of a Jena climate CSV beyond its format: physical ranges and timestamps.

Why: a file can have the right header and only numbers and still be wrong — two columns swapped
under a correct header, or a day's rows given the wrong year — and then every result silently
changes. The rules (companion's choices, stated here and in ``book/choices.md`` terms):

* every value of a column lies in :data:`PHYSICAL_RANGES` (generous bounds for a weather station
  in central Germany; ``-9999`` is accepted in the two wind columns, the station's error marker);
* rows that repeat an earlier row exactly (same timestamp, same values) are harmless and counted;
* otherwise timestamps strictly increase: a timestamp equal to an earlier one with other values
  (a conflict: which reading is right?) or earlier than the row before (out of order) is an error;
* gaps (missing 10-minute steps) are allowed — the hourly resampling fills them — and counted.

Each error names the file, the line (1 = header) and the field.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..validation import DataError
from .jena_schema import DATE_COLUMN, FEATURE_NAMES, STEP, WIND_COLUMNS, WIND_ERROR_VALUE

PHYSICAL_RANGES: dict[str, tuple[float, float]] = {
    "p (mbar)": (850.0, 1100.0),
    "T (degC)": (-60.0, 60.0),
    "Tpot (K)": (210.0, 340.0),
    "Tdew (degC)": (-70.0, 50.0),
    "rh (%)": (0.0, 105.0),
    "VPmax (mbar)": (0.0, 200.0),
    "VPact (mbar)": (0.0, 100.0),
    "VPdef (mbar)": (0.0, 200.0),
    "sh (g/kg)": (0.0, 60.0),
    "H2OC (mmol/mol)": (0.0, 100.0),
    "rho (g/m**3)": (900.0, 1600.0),
    "wv (m/s)": (0.0, 100.0),
    "max. wv (m/s)": (0.0, 100.0),
    "wd (deg)": (0.0, 360.0),
}
"""Inclusive bounds per column (the Jena station's 2009–2016 values lie well inside them)."""


def check_ranges(values: np.ndarray, path: Path, names: tuple[str, ...] = FEATURE_NAMES) -> None:
    """Every column of ``values`` (rows, columns ``names``) inside its physical range; else the first bad line."""
    for column, name in enumerate(names):
        lo, hi = PHYSICAL_RANGES[name]
        numbers = values[:, column]
        bad = (numbers < lo) | (numbers > hi)
        if name in WIND_COLUMNS:
            bad &= numbers != WIND_ERROR_VALUE
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise DataError(
                f"{path}: line {row + 2}, field {name!r}: got {numbers[row]:g}, expected a value in "
                f"[{lo:g}, {hi:g}] ({int(bad.sum())} such row(s) in this column; swapped columns or wrong units?)"
            )


def check_timestamps(stamps: pd.Series, values: np.ndarray, path: Path) -> dict[str, int]:
    """Order and duplicates of the timestamps (see the module docstring); returns counts:
    ``n_exact_repeats``, ``n_missing_steps`` (10-minute steps absent) and ``longest_gap_minutes``."""
    table = pd.DataFrame(values)
    table.insert(0, "t", stamps.to_numpy())
    repeat = table.duplicated(keep="first").to_numpy()
    keep = np.flatnonzero(~repeat)
    times = stamps.to_numpy()[keep].astype("datetime64[ns]")
    if len(times) > 1:
        step = np.diff(times)
        bad = step <= np.timedelta64(0, "ns")
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            line, before = int(keep[i + 1]) + 2, int(keep[i]) + 2
            what = ("the same timestamp as line {before} with other values (a conflict)" if step[i] == np.timedelta64(0, "ns")
                    else "a timestamp earlier than line {before}'s (out of order)").format(before=before)
            raise DataError(
                f"{path}: line {line}, field {DATE_COLUMN!r}: got {pd.Timestamp(times[i + 1]):%d.%m.%Y %H:%M:%S}, "
                f"{what}; expected timestamps that increase ({int(bad.sum())} such row(s)); a day given the wrong year?"
            )
        step_ns = np.int64(STEP.value)
        missing = np.maximum(step.astype(np.int64) // step_ns - 1, 0)
        longest = int(step.max().astype("timedelta64[m]").astype(np.int64))
    else:
        missing, longest = np.zeros(0, np.int64), 0
    return {"n_exact_repeats": int(repeat.sum()), "n_missing_steps": int(missing.sum()), "longest_gap_minutes": longest}
