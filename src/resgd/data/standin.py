"""A synthetic stand-in for the Jena climate file, for machines that cannot get the real one.

It has the real file's exact schema (same quoted header, same 14 columns, 10-minute steps from
``01.01.2009 00:10:00``, dates ``dd.mm.yyyy HH:MM:SS``, a few ``-9999`` wind glitches) and is
written as CSV and read back by the same parser as the real file, so the whole pipeline runs.

The numbers are *not* measurements: a yearly and a daily temperature cycle, smooth random
"weather" anomalies and noise, with the other quantities derived from temperature, pressure and
humidity by the usual meteorological formulas (Magnus formula, potential temperature, ideal
gas) so the features are correlated roughly as in the real data. Everything drawn from one
seeded generator: the same ``seed`` and ``days`` give the same file, byte for byte.
"""

from __future__ import annotations

import warnings
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from ..infra.atomic import atomic_path
from .jena_schema import CANONICAL_FIRST, CANONICAL_HEADER, DATE_FORMAT, FEATURE_NAMES, STEP, WIND_ERROR_VALUE

STANDIN_VERSION = 1
"""Bumped whenever the generator changes, so cached stand-ins are rebuilt."""

DEFAULT_STANDIN_DAYS = 730
"""Two years (2009–2010) instead of eight: quick to build and parse (companion's choice)."""

DEFAULT_GLITCHES = 3
"""How many ``-9999`` values to put in each wind column, as in the real file (companion's choice)."""


def _smooth_noise(rng: np.random.Generator, n_rows: int, knot_rows: int) -> np.ndarray:
    """Standard-normal values at every ``knot_rows``-th row, linearly interpolated between."""
    n_knots = n_rows // knot_rows + 2
    knots = rng.standard_normal(n_knots)
    return np.interp(np.arange(n_rows) / knot_rows, np.arange(n_knots), knots)


def standin_frame(days: int = DEFAULT_STANDIN_DAYS, seed: int = 0, glitches: int = DEFAULT_GLITCHES) -> pd.DataFrame:
    """The stand-in as a frame: a ``Date Time`` column of strings and the 14 feature columns."""
    if not isinstance(days, int) or days < 1:
        raise ValueError(f"days: expected an integer >= 1, got {days!r}")
    rng = np.random.default_rng(seed)
    n_rows = days * 144
    times = pd.date_range(CANONICAL_FIRST, periods=n_rows, freq=STEP)
    day_phase = 2 * np.pi * (times.hour * 60 + times.minute).to_numpy(dtype=float) / 1440.0
    year_phase = 2 * np.pi * (times.day_of_year.to_numpy() - 1 + day_phase / (2 * np.pi)) / 365.25
    hourly, daily, weekly = (_smooth_noise(rng, n_rows, k) for k in (36, 144, 720))

    # Temperature: coldest mid-January, warmest 15:00, plus weather anomalies (degC).
    daily_cycle = np.cos(day_phase - 2 * np.pi * 15 / 24)
    T = 9.5 - 9.0 * np.cos(year_phase - 0.25) + 3.5 * daily_cycle + 2.5 * daily + 1.5 * weekly
    T += 0.6 * hourly + 0.05 * rng.standard_normal(n_rows)
    p = 989.0 + 6.0 * weekly + 2.0 * daily + 0.3 * hourly + 0.02 * rng.standard_normal(n_rows)
    rh = 76.0 + 8.0 * np.cos(year_phase) - 12.0 * daily_cycle + 7.0 * daily + 3.0 * hourly
    rh = np.clip(rh + 0.5 * rng.standard_normal(n_rows), 15.0, 100.0)

    vp_max = 6.1078 * np.exp(17.27 * T / (T + 237.3))  # Magnus formula, mbar
    vp_act = rh / 100.0 * vp_max
    log_ratio = np.log(vp_act / 6.1078)
    columns = {
        "p (mbar)": p,
        "T (degC)": T,
        "Tpot (K)": (T + 273.15) * (1000.0 / p) ** 0.2857,
        "Tdew (degC)": 237.3 * log_ratio / (17.27 - log_ratio),
        "rh (%)": rh,
        "VPmax (mbar)": vp_max,
        "VPact (mbar)": vp_act,
        "VPdef (mbar)": vp_max - vp_act,
        "sh (g/kg)": 622.0 * vp_act / (p - 0.378 * vp_act),
        "H2OC (mmol/mol)": 1000.0 * vp_act / p,
        "rho (g/m**3)": 1e5 * p / (287.05 * (T + 273.15)),
    }
    wv = np.clip(1.8 + 1.0 * daily + 0.5 * weekly + 0.5 * daily_cycle + 0.4 * rng.standard_normal(n_rows), 0.0, None)
    max_wv = wv * (1.5 + 0.3 * np.abs(rng.standard_normal(n_rows))) + 0.2
    wd = np.mod(210.0 + 80.0 * weekly + 40.0 * daily + 25.0 * rng.standard_normal(n_rows), 360.0)
    columns.update({"wv (m/s)": wv, "max. wv (m/s)": max_wv, "wd (deg)": wd})

    frame = pd.DataFrame({name: np.round(columns[name], 2) for name in FEATURE_NAMES})
    frame["wd (deg)"] = np.round(wd, 1)
    for column in ("wv (m/s)", "max. wv (m/s)"):
        rows = rng.choice(n_rows, size=min(glitches, n_rows), replace=False)
        frame.loc[rows, column] = WIND_ERROR_VALUE
    frame.insert(0, "Date Time", times.strftime(DATE_FORMAT))
    return frame


def standin_file_name(days: int, seed: int) -> str:
    return f"jena_standin_v{STANDIN_VERSION}_days{days}_seed{seed}.csv"


def write_standin_csv(path: Path, days: int = DEFAULT_STANDIN_DAYS, seed: int = 0) -> Path:
    """Write the stand-in CSV to ``path`` atomically, with the canonical quoted header."""
    frame = standin_frame(days=days, seed=seed)
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(CANONICAL_HEADER + "\n")
            frame.to_csv(handle, header=False, index=False, float_format="%.2f", lineterminator="\n")
    return path


def standin_problems(path: Path, days: int) -> list[str]:
    """What makes ``path`` not the stand-in of ``days`` days, checked like the real file: header,
    row count, first and last dates (and a complete last line). Reads bytes only: no parsing."""
    data = path.read_bytes()
    header, _, body = data.partition(b"\n")
    problems = []
    if header.decode("utf-8", errors="replace") != CANONICAL_HEADER:
        problems.append(f"line 1 (header) is not {CANONICAL_HEADER}")
    if body and not body.endswith(b"\n"):
        problems.append("the last line is cut short")
    lines = body.splitlines()
    expected_rows = days * 144
    if len(lines) != expected_rows:
        problems.append(f"{len(lines):,} data rows, expected {expected_rows:,}")
    expected = (CANONICAL_FIRST, CANONICAL_FIRST + (expected_rows - 1) * STEP)
    got = tuple(_date(line) for line in (lines[:1] + lines[-1:])) if lines else ()
    if got != expected:
        shown = " to ".join(f"{d:%d.%m.%Y %H:%M:%S}" if d is not None else "(no date)" for d in got) or "no dates"
        problems.append(f"dates {shown}, expected {expected[0]:%d.%m.%Y %H:%M:%S} to {expected[1]:%d.%m.%Y %H:%M:%S}")
    return problems


def _date(line: bytes) -> pd.Timestamp | None:
    try:
        return pd.Timestamp(datetime.strptime(line.split(b",", 1)[0].decode("ascii"), DATE_FORMAT))
    except (UnicodeDecodeError, ValueError):
        return None


def ensure_standin(cache_dir: Path, days: int = DEFAULT_STANDIN_DAYS, seed: int = 0) -> Path:
    """The stand-in CSV in ``<cache_dir>/jena/standin/``, written on first use and written again
    (atomically) when the cached copy is not the complete file (:func:`standin_problems`)."""
    path = cache_dir / "jena" / "standin" / standin_file_name(days, seed)
    if path.is_file():
        problems = standin_problems(path, days)
        if not problems:
            return path
        warnings.warn(f"{path}: {'; '.join(problems)}; a damaged copy of the synthetic stand-in, written again", stacklevel=2)
    write_standin_csv(path, days=days, seed=seed)
    return path
