"""A results table as bytes that hold no code: an uncompressed ``.npz`` of one ``.npy`` per column.

Why not pickle: the results store is in git, and a reader who clones the repository and builds the
book must not execute code from a data file (``numpy.load(..., allow_pickle=False)`` reads these).
Why uncompressed, with fixed zip dates: equal tables give equal bytes on every host and numpy/zlib
version, so the store can be addressed by the bytes' SHA-256 (git compresses them itself).

A column whose values are all equal (a run's configuration, repeated on every history row) is
stored once, as its value in the JSON header (floats written by ``repr``, which reads back exactly);
an integer column 0, 1, 2, … (a history's ``iteration``) as its start; a column that a function of
another gives bit for bit (:data:`DERIVED`: a history's ``ratio``, from its ``loss``) as that rule.
Only numbers that carry information take space: a full numeric refresh of the store is small in git.
:func:`decode` gives back a table equal to the one encoded, values, dtypes, column
order and index included (``tests/test_store.py``).
"""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pandas as pd

FORMAT = "resgd-frame/2"
_DATE = (1980, 1, 1, 0, 0, 0)
_STRING_DTYPES = ("str", "object", "string")


def _ratios(loss: np.ndarray) -> np.ndarray:
    from ..core.trainer import loss_ratios

    return loss_ratios(loss)


DERIVED = {"ratio": ("loss", _ratios)}
"""Column → (the column it is computed from, the function of that column's values): stored as the
rule when it gives the column's values bit for bit."""


class FrameFormatError(ValueError):
    """A table that cannot be stored this way, or bytes that are not such a table."""


def _column(series: pd.Series) -> tuple[np.ndarray, str]:
    """The column's values as a numpy array that needs no pickle, and its dtype's name."""
    dtype = str(series.dtype)
    if dtype in _STRING_DTYPES:
        values = series.to_list()
        if not all(isinstance(v, str) for v in values):
            kinds = sorted({type(v).__name__ for v in values if not isinstance(v, str)})
            raise FrameFormatError(f"column {series.name!r}: text columns must hold only strings, found {', '.join(kinds)}")
        return np.array(values, dtype=str) if values else np.array([], dtype="<U1"), dtype
    values = series.to_numpy()
    if values.dtype.kind not in "biuf":
        raise FrameFormatError(f"column {series.name!r}: dtype {dtype} is not stored (numbers, booleans and text only)")
    return values, dtype


def encode(frame: pd.DataFrame) -> bytes:
    """``frame`` (a RangeIndex from 0, string column names) as deterministic ``.npz`` bytes."""
    index = frame.index
    if not (isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1):
        raise FrameFormatError("only tables indexed 0..n-1 are stored (reset_index first)")
    if not all(isinstance(c, str) for c in frame.columns) or frame.columns.has_duplicates:
        raise FrameFormatError("column names must be distinct strings")
    header = {"format": FORMAT, "rows": len(frame), "columns": []}
    members = []
    for i, name in enumerate(frame.columns):
        values, dtype = _column(frame[name])
        column = {"name": name, "dtype": dtype}
        if name in DERIVED and DERIVED[name][0] in frame.columns and dtype == "float64" and len(values) > 1 and \
                np.array_equal(DERIVED[name][1](frame[DERIVED[name][0]].to_numpy()).view(np.int64), np.ascontiguousarray(values).view(np.int64)):
            column["derived"] = DERIVED[name][0]
        elif values.dtype.kind in "iu" and len(values) > 1 and np.array_equal(values, np.arange(values[0], values[0] + len(values))):
            column["range"] = int(values[0])
        elif len(values) and bool((values == values[0]).all()) and not (values.dtype.kind == "f" and np.isnan(values[0])):
            column["value"] = values[0].item()
        elif len(values) and values.dtype.kind == "f" and bool(np.isnan(values).all()):
            column["value"] = None  # all NaN
        else:
            members.append((f"c{i}.npy", values))
        header["columns"].append(column)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        _add(archive, "header.npy", np.frombuffer(json.dumps(header, sort_keys=True).encode(), dtype=np.uint8))
        for name, values in members:
            _add(archive, name, np.ascontiguousarray(values))
    return buffer.getvalue()


def _add(archive: zipfile.ZipFile, name: str, array: np.ndarray) -> None:
    data = io.BytesIO()
    np.lib.format.write_array(data, array, allow_pickle=False)
    info = zipfile.ZipInfo(name, date_time=_DATE)
    info.external_attr = 0o644 << 16
    archive.writestr(info, data.getvalue())


def decode(data: bytes) -> pd.DataFrame:
    """The table :func:`encode` made ``data`` from (never executes code: no pickle)."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            header = json.loads(archive["header"].tobytes().decode())
            if header.get("format") != FORMAT:
                raise FrameFormatError(f"not a {FORMAT} table (format {header.get('format')!r})")
            rows = int(header["rows"])
            columns = {}
            derived = []
            for i, column in enumerate(header["columns"]):
                if "derived" in column:
                    derived.append(column)
                    columns[column["name"]] = None  # its place; computed once the others are read
                    continue
                dtype = column["dtype"]
                if "range" in column:
                    values = np.arange(column["range"], column["range"] + rows)
                elif "value" in column:
                    value = np.nan if column["value"] is None else column["value"]
                    values = [value] * rows if dtype in _STRING_DTYPES else np.full(rows, value)
                else:
                    values = archive[f"c{i}"]
                if len(values) != rows:
                    raise FrameFormatError(f"column {column['name']!r} has {len(values)} rows, the table {rows}")
                # arrays, text too (as an array of its pandas dtype): a Series per column and the
                # frame's alignment of them cost a store's read more than its I/O
                columns[column["name"]] = (pd.array(list(values), dtype=dtype) if dtype in _STRING_DTYPES
                                           else np.asarray(values, dtype=dtype))
            for column in derived:
                if column["name"] not in DERIVED or DERIVED[column["name"]][0] != column["derived"]:
                    raise FrameFormatError(f"column {column['name']!r}: no rule derives it from {column['derived']!r}")
                source = DERIVED[column["name"]][0]
                if columns.get(source) is None:
                    raise FrameFormatError(f"column {column['name']!r}: derived from {source!r}, which is not stored")
                columns[column["name"]] = np.asarray(DERIVED[column["name"]][1](columns[source]), dtype=column["dtype"])
    except FrameFormatError:
        raise
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as exc:
        raise FrameFormatError(f"not a readable table ({type(exc).__name__}: {exc})") from None
    return pd.DataFrame(columns, index=pd.RangeIndex(rows))
