"""Jena climate loader: parser errors, cleaning, stand-in, downloads, windows, caching; a malformed,
oversized or odd file (a FIFO, a device, a folder) is one line naming the file, the line and the
field (exit 1 from the command line), never replaced by the stand-in.

Never touches the network (``fetch_url`` is replaced for every test) and writes only below
``tmp_path``. Tests that need the real 19-row sample skip when the shared data is absent.
"""

from __future__ import annotations

import io
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import resgd.data.download as download_module
import resgd.data.jena as jena_module
from resgd.data import DataError, load_jena, parse_jena_csv, standin_frame
from resgd.data.jena import Preprocessing, clean_wind, to_hourly
from resgd.data.jena_schema import CANONICAL_HEADER, FEATURE_NAMES, JENA_FILE_NAME, JENA_URL, NONWIND_NAMES

from shared_data import serve
from shared_data import shared_data_dir as find_shared_data
from fault_helpers import one_line, re_file, reproduce_part_on_data, sparse_file
SAMPLE_NAME = "jena_first19rows_sample.csv"


def shared_data_dir() -> Path | None:
    return find_shared_data("jena/" + SAMPLE_NAME)


@pytest.fixture
def jena_sample() -> Path:
    shared = shared_data_dir()
    if shared is None:
        pytest.skip("shared data (jena/jena_first19rows_sample.csv) not found; set RESGD_DATA_DIR")
    return shared / "jena" / SAMPLE_NAME


pytestmark = pytest.mark.usefixtures("offline_data")


def write_frame(frame: pd.DataFrame, path: Path, header: str = CANONICAL_HEADER) -> Path:
    """A Jena-format CSV from a frame with a ``Date Time`` string column (as the stand-in)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = frame.to_csv(header=False, index=False, float_format="%.2f", lineterminator="\n")
    path.write_text(header + "\n" + body, encoding="utf-8")
    return path


def small_csv(tmp_path: Path, days: int = 2, name: str = "small.csv") -> Path:
    return write_frame(standin_frame(days=days, seed=1), tmp_path / name)


def replace_line(path: Path, line_number: int, new_line: str) -> Path:
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[line_number - 1] = new_line
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def files_below(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


# --------------------------------------------------------------------------- parser


def test_parses_the_real_sample(jena_sample):
    frame = parse_jena_csv(jena_sample)
    assert frame.shape == (19, 14)
    assert list(frame.columns) == list(FEATURE_NAMES)
    assert frame.index[0] == pd.Timestamp("2009-01-01 00:10:00")
    assert frame.index[-1] == pd.Timestamp("2009-01-01 03:10:00")
    assert frame.iloc[0]["T (degC)"] == -8.02 and frame.iloc[0]["wd (deg)"] == 152.3
    assert frame.dtypes.eq(np.float64).all()


def test_quoted_and_unquoted_headers_parse_the_same(tmp_path):
    frame = standin_frame(days=1, seed=3)
    quoted = parse_jena_csv(write_frame(frame, tmp_path / "quoted.csv"))
    plain = parse_jena_csv(write_frame(frame, tmp_path / "plain.csv", header=CANONICAL_HEADER.replace('"', "")))
    pd.testing.assert_frame_equal(quoted, plain)


def test_wrong_header_names_file_and_column(tmp_path):
    path = replace_line(small_csv(tmp_path), 1, CANONICAL_HEADER.replace('"T (degC)"', '"Temp"'))
    with pytest.raises(DataError, match=r"small\.csv: line 1 \(header\), column 3: got 'Temp', expected 'T \(degC\)'"):
        parse_jena_csv(path)


def test_missing_header_column_is_reported(tmp_path):
    path = replace_line(small_csv(tmp_path), 1, CANONICAL_HEADER.rsplit(",", 1)[0])
    with pytest.raises(DataError, match=r"small\.csv: line 1 \(header\) has 14 columns, expected 15"):
        parse_jena_csv(path)


def test_non_numeric_value_names_line_and_field(tmp_path):
    path = replace_line(small_csv(tmp_path), 5, "01.01.2009 00:40:00,996.51,-8.31,265.12,-9.07,abc,3.26,3.07,0.19,1.92,3.08,1309.19,0.34,0.5,198")
    with pytest.raises(DataError, match=r"small\.csv: line 5, field 'rh \(%\)': got 'abc', expected a number"):
        parse_jena_csv(path)


def test_short_row_names_the_empty_field(tmp_path):
    path = replace_line(small_csv(tmp_path), 7, "01.01.2009 01:00:00,996.51,-8.31,265.12,-9.07,94.2,3.26,3.07,0.19,1.92,3.08,1309.19,0.34,0.5")
    with pytest.raises(DataError, match=r"line 7, field 'wd \(deg\)': got an empty field, expected a number"):
        parse_jena_csv(path)


def test_long_row_is_reported_with_its_line(tmp_path):
    path = replace_line(small_csv(tmp_path), 9, "01.01.2009 01:20:00" + ",1" * 15)
    with pytest.raises(DataError, match=r"small\.csv: malformed CSV .*line 9"):
        parse_jena_csv(path)


def test_bad_date_names_line_field_and_format(tmp_path):
    path = replace_line(small_csv(tmp_path), 4, "32.01.2009 00:30:00" + ",1" * 14)
    with pytest.raises(DataError, match=r"line 4, field 'Date Time': got '32\.01\.2009 00:30:00', expected a date dd\.mm\.yyyy HH:MM:SS"):
        parse_jena_csv(path)


def test_empty_and_header_only_files_are_rejected(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match=r"empty\.csv: the file is empty"):
        parse_jena_csv(empty)
    header_only = tmp_path / "header.csv"
    header_only.write_text(CANONICAL_HEADER + "\n")
    with pytest.raises(DataError, match=r"header\.csv: no data rows"):
        parse_jena_csv(header_only)


def test_canonical_check_names_row_count_and_dates(tmp_path, jena_sample):
    data_dir = tmp_path / "data"
    (data_dir / "jena").mkdir(parents=True)
    (data_dir / "jena" / JENA_FILE_NAME).symlink_to(jena_sample)
    with pytest.raises(DataError, match=r"19 data rows, expected 420,551; dates from 01\.01\.2009 00:10:00 to 01\.01\.2009 03:10:00"):
        load_jena(data_dir=data_dir, cache_dir=tmp_path / "cache", allow_download=False)
    assert not [p for p in files_below(tmp_path / "cache") if p.suffix in {".npz", ".part"}]


# --------------------------------------------------------------------------- cleaning and resampling


def test_wind_error_values_are_replaced():
    frame = standin_frame(days=3, seed=0)
    parsed = frame.drop(columns="Date Time").set_index(pd.to_datetime(frame["Date Time"], format="%d.%m.%Y %H:%M:%S"))
    assert (parsed[["wv (m/s)", "max. wv (m/s)"]] == -9999.0).sum().tolist() == [3, 3]
    zeroed, replaced = clean_wind(parsed, 0.0)
    assert replaced == 6 and not (zeroed.to_numpy() == -9999.0).any()
    interpolated, _ = clean_wind(parsed, "interpolate")
    assert interpolated["wv (m/s)"].between(0.0, 20.0).all()
    untouched = [c for c in FEATURE_NAMES if c not in ("wv (m/s)", "max. wv (m/s)")]
    pd.testing.assert_frame_equal(zeroed[untouched], parsed[untouched])


def test_hourly_rows_on_the_real_sample(jena_sample):
    frame = parse_jena_csv(jena_sample)
    last, filled = to_hourly(frame, "last")
    assert filled == 0
    assert list(last.index[:3]) == [pd.Timestamp(f"2009-01-01 0{h}:00") for h in (1, 2, 3)]
    on_the_hour = pd.Timestamp("2009-01-01 01:00")
    np.testing.assert_array_equal(last.loc[on_the_hour].to_numpy(), frame.loc[on_the_hour].to_numpy())
    mean, _ = to_hourly(frame, "mean")
    np.testing.assert_allclose(mean.iloc[0].to_numpy(), frame.iloc[0:6].mean().to_numpy())


def test_missing_hours_are_interpolated():
    index = pd.date_range("2009-01-01 00:10", periods=6 * 5, freq="10min")
    frame = pd.DataFrame({"a": np.arange(30.0)}, index=index)
    gappy = frame.drop(index[(index > "2009-01-01 02:00") & (index <= "2009-01-01 03:00")])
    hours, filled = to_hourly(gappy, "last")
    assert filled == 1
    assert hours.loc["2009-01-01 03:00", "a"] == pytest.approx((hours.loc["2009-01-01 02:00", "a"] + hours.loc["2009-01-01 04:00", "a"]) / 2)


# --------------------------------------------------------------------------- stand-in


def test_standin_has_the_exact_schema_and_glitches(tmp_path):
    path = small_csv(tmp_path, days=3)
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[0] == CANONICAL_HEADER
    assert lines[1].startswith("01.01.2009 00:10:00,") and len(lines[1].split(",")) == 15
    frame = parse_jena_csv(path)
    assert frame.shape == (3 * 144, 14)
    assert frame.index[0] == pd.Timestamp("2009-01-01 00:10") and frame.index[-1] == pd.Timestamp("2009-01-04 00:00")
    assert (np.diff(frame.index.to_numpy()) == np.timedelta64(10, "m")).all()
    assert (frame["wv (m/s)"] == -9999.0).sum() == 3 and (frame["max. wv (m/s)"] == -9999.0).sum() == 3
    clean = frame[frame["wv (m/s)"] > -9999]
    assert clean["T (degC)"].between(-40, 45).all() and clean["p (mbar)"].between(900, 1100).all()
    assert clean["rh (%)"].between(0, 100).all() and frame["wd (deg)"].between(0, 360).all()


def test_standin_is_seeded():
    a, b, c = standin_frame(days=2, seed=5), standin_frame(days=2, seed=5), standin_frame(days=2, seed=6)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


def test_missing_file_falls_back_to_a_flagged_standin(tmp_path):
    cache = tmp_path / "cache"
    ds = load_jena(n_tokens=8, n_train=16, n_test=8, data_dir=tmp_path / "empty", cache_dir=cache, allow_download=False, standin_days=20)
    assert ds.is_standin and ds.source_label.startswith("SYNTHETIC stand-in data (real Jena file not found")
    assert ds.describe()["is_standin"] is True and "disabled" in ds.info["standin_reason"]
    standins = list((cache / "jena" / "standin").glob("*.csv"))
    assert len(standins) == 1 and standins[0].read_text().split("\n", 1)[0] == CANONICAL_HEADER
    assert not (cache / "jena" / JENA_FILE_NAME).exists()


def test_env_cache_dir_is_used(tmp_path):
    ds = load_jena(n_tokens=4, n_train=4, n_test=4, allow_download=False, standin_days=10)
    assert ds.is_standin and Path(ds.info["source_file"]).is_relative_to(tmp_path / "env-cache")


def test_missing_file_without_standin_names_file_url_and_variable(tmp_path):
    with pytest.raises(DataError) as caught:
        load_jena(data_dir=tmp_path / "empty", cache_dir=tmp_path / "cache", allow_download=False, allow_standin=False)
    message = str(caught.value)
    for needle in (JENA_FILE_NAME, JENA_URL, "RESGD_DATA_DIR", str(tmp_path / "empty" / "jena" / JENA_FILE_NAME)):
        assert needle in message


def test_offline_variable_blocks_downloads(tmp_path, monkeypatch):
    monkeypatch.setenv("RESGD_OFFLINE", "1")
    monkeypatch.setattr(download_module, "fetch_url", lambda *a, **k: pytest.fail("fetch_url called while offline"))
    with pytest.raises(DataError, match="RESGD_OFFLINE"):
        load_jena(cache_dir=tmp_path / "cache", allow_standin=False)


# --------------------------------------------------------------------------- downloads


def zipped_csv(source: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.write(source, JENA_FILE_NAME)
    return buffer.getvalue()


def test_interrupted_download_leaves_no_partial_file(tmp_path, monkeypatch):
    calls = serve(monkeypatch, b"PK\x03\x04 half an archive", fail_after="connection reset")
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match="connection reset") as caught:
        load_jena(cache_dir=cache, allow_standin=False)
    assert JENA_URL in str(caught.value) and calls == [JENA_URL]
    assert files_below(cache) == []


def test_corrupt_download_is_reported_and_not_kept(tmp_path, monkeypatch):
    serve(monkeypatch, b"this is not a zip archive")
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=r"corrupt or truncated.*nothing was written"):
        load_jena(cache_dir=cache)
    assert files_below(cache) == []


def test_truncated_download_fails_the_canonical_check(tmp_path, monkeypatch):
    serve(monkeypatch, zipped_csv(small_csv(tmp_path, days=2)))
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=r"downloaded from .*not the canonical Jena climate file: 288 data rows"):
        load_jena(cache_dir=cache)
    assert files_below(cache) == []


def test_good_download_is_published_and_used(tmp_path, monkeypatch):
    calls = serve(monkeypatch, zipped_csv(small_csv(tmp_path, days=12)))
    cache = tmp_path / "cache"
    ds = load_jena(n_tokens=6, n_train=8, n_test=8, cache_dir=cache, check_canonical=False)
    assert not ds.is_standin and ds.source_label.startswith("NOT the canonical Jena climate file")  # labelled
    assert ds.info["canonical"] is False
    assert (cache / "jena" / JENA_FILE_NAME).is_file() and calls == [JENA_URL]
    assert not [p for p in files_below(cache) if p.suffix == ".part" or p.name.startswith(".download")]
    load_jena(n_tokens=6, n_train=8, n_test=8, cache_dir=cache, check_canonical=False)
    assert calls == [JENA_URL], "a cached file must not be downloaded again"


# --------------------------------------------------------------------------- windows


@pytest.fixture
def small_real(tmp_path) -> dict:
    """A 20-day Jena-format file placed as the real file in a data directory."""
    data_dir = tmp_path / "data"
    frame = standin_frame(days=20, seed=2)
    write_frame(frame, data_dir / "jena" / JENA_FILE_NAME)
    return {"data_dir": data_dir, "cache_dir": tmp_path / "cache", "check_canonical": False, "allow_download": False, "frame": frame}


def load_small(small_real, **kwargs):
    options = {k: v for k, v in small_real.items() if k != "frame"}
    return load_jena(**{**options, **kwargs})


def covered_hours(starts: np.ndarray, n_tokens: int) -> set:
    return {start + np.timedelta64(k, "h") for start in starts for k in range(2 * n_tokens)}


def test_window_shapes_and_dtype(small_real):
    ds = load_small(small_real, n_tokens=6, n_train=40, n_test=20, dtype=torch.float32)
    assert ds.X_train.shape == (40, 6, 11) and ds.Y_train.shape == (40, 6, 1)  # the 11 non-wind variables
    assert ds.X_test.shape == (20, 6, 11) and ds.Y_test.shape == (20, 6, 1)
    assert ds.X_train.dtype == torch.float32 and ds.mask_train is None and not ds.is_standin
    assert ds.describe()["X_train"] == [40, 6, 11] and ds.feature_names == NONWIND_NAMES


def test_splits_share_no_hour_and_keep_the_gap(small_real):
    n = 6
    ds = load_small(small_real, n_tokens=n, n_train=None, n_test=None)
    train, test = covered_hours(ds.index_train, n), covered_hours(ds.index_test, n)
    assert train and test and not train & test
    assert (min(test) - max(train)) / np.timedelta64(1, "h") > 2 * n


def test_targets_are_the_following_hours_temperature(small_real):
    n = 5
    ds = load_small(small_real, n_tokens=n, n_train=None, n_test=None)
    t = NONWIND_NAMES.index("T (degC)")
    assert (np.diff(ds.index_train) == np.timedelta64(1, "h")).all()
    torch.testing.assert_close(ds.X_train[n:, :, t], ds.Y_train[:-n, :, 0])
    torch.testing.assert_close(ds.X_test[n:, :, t], ds.Y_test[:-n, :, 0])


def test_standardization_uses_training_statistics_only(small_real, tmp_path):
    n = 6
    base = load_small(small_real, n_tokens=n, n_train=None, n_test=None)
    hours, _ = to_hourly(clean_wind(parse_jena_csv(small_real["data_dir"] / "jena" / JENA_FILE_NAME), 0.0)[0][list(NONWIND_NAMES)])
    train_hours = hours.loc[: pd.Timestamp(base.info["train_hours"][1])]
    np.testing.assert_allclose(list(base.info["train_mean"].values()), train_hours.mean().to_numpy())
    np.testing.assert_allclose(list(base.info["train_std"].values()), train_hours.std(ddof=0).to_numpy())

    shifted = small_real["frame"].copy()
    late = pd.to_datetime(shifted["Date Time"], format="%d.%m.%Y %H:%M:%S") > pd.Timestamp(base.info["train_hours"][1])
    shifted.loc[late, "T (degC)"] += 40.0
    other = tmp_path / "shifted"
    write_frame(shifted, other / "jena" / JENA_FILE_NAME)
    moved = load_small(small_real, n_tokens=n, n_train=None, n_test=None, data_dir=other)
    torch.testing.assert_close(moved.X_train, base.X_train)
    assert moved.info["train_mean"] == base.info["train_mean"]
    assert not torch.allclose(moved.X_test, base.X_test)


def test_subsampling_is_seeded(small_real):
    a = load_small(small_real, n_tokens=6, n_train=30, n_test=20, seed=1)
    b = load_small(small_real, n_tokens=6, n_train=30, n_test=20, seed=1)
    c = load_small(small_real, n_tokens=6, n_train=30, n_test=20, seed=2)
    assert torch.equal(a.X_train, b.X_train) and torch.equal(a.Y_test, b.Y_test)
    assert (a.index_train == b.index_train).all()
    assert not (a.index_train == c.index_train).all() and not torch.equal(a.X_train, c.X_train)
    assert (np.diff(a.index_train) > np.timedelta64(0, "h")).all(), "windows come in time order"


def test_stride_spaces_the_window_starts(small_real):
    ds = load_small(small_real, n_tokens=4, n_train=None, n_test=None, preprocessing=Preprocessing(stride=5))
    assert (np.diff(ds.index_train) == np.timedelta64(5, "h")).all()


def test_too_many_windows_requested_is_a_clear_error(small_real):
    with pytest.raises(DataError, match=r"n_train=100000 windows requested, but the train range .* holds only \d+"):
        load_small(small_real, n_tokens=6, n_train=100_000)


def test_second_call_reads_the_cache(small_real, monkeypatch):
    first = load_small(small_real, n_tokens=6, n_train=20, n_test=10)
    assert list((small_real["cache_dir"] / "processed").glob("jena_hourly_*.npz"))
    monkeypatch.setattr(jena_module, "parse_jena_csv", lambda path: pytest.fail("parsed again"))
    second = load_small(small_real, n_tokens=6, n_train=20, n_test=10)
    assert torch.equal(first.X_train, second.X_train) and first.info == second.info


def test_unreadable_cache_entry_is_rebuilt(small_real):
    first = load_small(small_real, n_tokens=6, n_train=20, n_test=10)
    (entry,) = (small_real["cache_dir"] / "processed").glob("jena_hourly_*.npz")
    entry.write_bytes(entry.read_bytes()[:100])
    second = load_small(small_real, n_tokens=6, n_train=20, n_test=10)
    assert torch.equal(first.X_train, second.X_train)


def test_an_entry_of_another_parse_under_the_default_name_is_not_served(small_real):
    """An entry holds its key: the hourly mean's arrays copied over the hourly last's entry are parsed again."""
    last = load_small(small_real, n_tokens=6, n_train=20, n_test=10)
    (entry,) = (small_real["cache_dir"] / "processed").glob("jena_hourly_*.npz")
    load_small(small_real, n_tokens=6, n_train=20, n_test=10, preprocessing=Preprocessing(hourly="mean"))
    (other,) = set((small_real["cache_dir"] / "processed").glob("jena_hourly_*.npz")) - {entry}
    entry.write_bytes(other.read_bytes())
    again = load_small(small_real, n_tokens=6, n_train=20, n_test=10)
    assert torch.equal(last.X_train, again.X_train)


def test_an_edited_parser_parses_again(small_real, monkeypatch):
    """The parser's version is its source's digest: no number to forget to bump."""
    load_small(small_real, n_tokens=6, n_train=20, n_test=10)
    monkeypatch.setattr(jena_module, "parser_version", lambda: "an edited parser")
    parsed = []
    real = jena_module.parse_jena_csv
    monkeypatch.setattr(jena_module, "parse_jena_csv", lambda path: parsed.append(path) or real(path))
    load_small(small_real, n_tokens=6, n_train=20, n_test=10)
    assert parsed


@pytest.mark.parametrize("damage", ["cut at a line end", "cut inside a line", "first rows lost", "header changed", "empty"])
def test_a_damaged_standin_copy_is_written_again(tmp_path, damage):
    """A cached stand-in cut short (e.g. a full disk while copying the cache) was used as it was."""
    from resgd.data.standin import standin_problems

    kwargs = dict(n_tokens=4, n_train=8, n_test=8, cache_dir=tmp_path / "cache", allow_download=False, standin_days=20)
    first = load_jena(**kwargs)
    path = Path(first.info["source_file"])
    good = path.read_bytes()
    assert first.info["n_rows_10min"] == 20 * 144 and standin_problems(path, 20) == []
    lines = good.splitlines(keepends=True)
    damaged = {
        "cut at a line end": b"".join(lines[: len(lines) // 2]),
        "cut inside a line": good[: len(good) // 2],
        "first rows lost": lines[0] + b"".join(lines[100:]),
        "header changed": good.replace(b'"p (mbar)"', b'"p"', 1),
        "empty": b"",
    }[damage]
    path.write_bytes(damaged)
    assert standin_problems(path, 20)
    with pytest.warns(UserWarning, match="damaged copy of the synthetic stand-in, written again"):
        again = load_jena(**kwargs)
    assert path.read_bytes() == good  # the same file, byte for byte
    assert again.info["n_rows_10min"] == 20 * 144
    assert torch.equal(again.X_train, first.X_train) and torch.equal(again.Y_test, first.Y_test)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # written atomically: no temporary left


# --------------------------------------------------------------------------- advice that can be followed


def _not_canonical_message(tmp_path, where: str, offline: bool, monkeypatch) -> str:
    from resgd.data.standin import write_standin_csv

    if offline:
        monkeypatch.setenv("RESGD_OFFLINE", "1")
    data_dir, cache = tmp_path / "data", tmp_path / "cache"
    data_dir.mkdir()
    write_standin_csv((data_dir if where == "data folder" else cache) / "jena" / JENA_FILE_NAME, days=2)
    with pytest.raises(DataError, match="not the canonical Jena climate file: 288 data rows") as caught:
        load_jena(data_dir=data_dir, cache_dir=cache)
    message = str(caught.value)
    # check_canonical=False cannot be passed from the command line: say where it can
    assert "call resgd.data.load_jena(check_canonical=False) from Python; `python -m resgd` and the book use the canonical file only" in message
    assert "pass check_canonical=False" not in message
    return message


@pytest.mark.parametrize("offline", [False, True])
def test_a_bad_file_in_the_data_folder_is_not_to_be_deleted(tmp_path, monkeypatch, offline):
    """The data folder may be a read-only shared copy: the advice is to replace it or point elsewhere."""
    message = _not_canonical_message(tmp_path, "data folder", offline, monkeypatch)
    assert "delete" not in message.lower()
    assert f"is in the data folder (RESGD_DATA_DIR={tmp_path / 'data'}), which is only read: replace it with a good copy" in message
    assert ("unset RESGD_DATA_DIR to download it into the data cache" in message) is not offline


@pytest.mark.parametrize("offline", [False, True])
def test_a_bad_file_in_the_cache_is_to_be_deleted(tmp_path, monkeypatch, offline):
    message = _not_canonical_message(tmp_path, "cache", offline, monkeypatch)
    cached = tmp_path / "cache" / "jena" / JENA_FILE_NAME
    if offline:  # deleting alone would not bring it back
        assert f"Delete {cached} (a copy in the data cache), then put a good copy at $RESGD_DATA_DIR/jena/{JENA_FILE_NAME}" in message
        assert "RESGD_OFFLINE unset" in message
    else:
        assert f"Delete {cached} (a copy in the data cache) and run again: it is downloaded again." in message


# --------------------------------------------------------------------------- plausibility


def test_nan_text_is_reported_as_written_not_as_an_empty_field(tmp_path):
    path = replace_line(small_csv(tmp_path), 5, "01.01.2009 00:40:00,996.51,-8.31,265.12,-9.07,nan,3.26,3.07,0.19,1.92,3.08,1309.19,0.34,0.5,198")
    with pytest.raises(DataError, match=r"line 5, field 'rh \(%\)': got 'nan', expected a number"):
        parse_jena_csv(path)


def test_pressure_and_temperature_swapped_under_a_correct_header_are_rejected(tmp_path):
    """Columns swapped under a correct header are rejected at the first implausible line and field
    (they would parse and move the results)."""
    frame = standin_frame(days=2, seed=1)
    frame[["p (mbar)", "T (degC)"]] = frame[["T (degC)", "p (mbar)"]].to_numpy()
    path = write_frame(frame, tmp_path / "swapped.csv")
    with pytest.raises(DataError, match=r"swapped\.csv: line 2, field 'p \(mbar\)': got -?[0-9.]+, expected a value in \[850, 1100\]"):
        parse_jena_csv(path)


def test_wind_error_marker_is_accepted_but_other_negative_wind_is_not(tmp_path):
    frame = standin_frame(days=2, seed=1)
    frame.loc[3, "wv (m/s)"] = -9999.0
    assert parse_jena_csv(write_frame(frame, tmp_path / "ok.csv")).iloc[3]["wv (m/s)"] == -9999.0
    frame.loc[4, "wv (m/s)"] = -3.0
    with pytest.raises(DataError, match=r"line 6, field 'wv \(m/s\)': got -3"):
        parse_jena_csv(write_frame(frame, tmp_path / "bad.csv"))


def test_a_day_given_the_wrong_year_is_rejected_with_its_line(tmp_path):
    """A day labelled with the wrong year is rejected at the line that goes back in time, not read as
    duplicates and a gap to fill."""
    frame = standin_frame(days=3, seed=1)
    day = frame.index[144:288]  # the second day's rows, now labelled a year later, then the third day's
    frame.loc[day, "Date Time"] = frame.loc[day, "Date Time"].str.replace(".2009", ".2010", regex=False)
    path = write_frame(frame, tmp_path / "year.csv")
    with pytest.raises(DataError, match=r"year\.csv: line 290, field 'Date Time': got 03\.01\.2009 00:10:00, a timestamp earlier than line 289's \(out of order\)"):
        parse_jena_csv(path)


def test_conflicting_duplicate_is_rejected_exact_repeat_is_counted(tmp_path):
    frame = standin_frame(days=2, seed=1)
    repeated = pd.concat([frame.iloc[:11], frame.iloc[10:11], frame.iloc[11:]], ignore_index=True)
    parsed = parse_jena_csv(write_frame(repeated, tmp_path / "repeat.csv"))
    assert parsed.attrs["checks"]["n_exact_repeats"] == 1 and parsed.attrs["checks"]["n_missing_steps"] == 0
    conflicting = repeated.copy()
    conflicting.loc[11, "T (degC)"] += 1.0
    with pytest.raises(DataError, match=r"line 13, field 'Date Time': .*the same timestamp as line 12 with other values \(a conflict\)"):
        parse_jena_csv(write_frame(conflicting, tmp_path / "conflict.csv"))


def test_gaps_are_counted(tmp_path):
    frame = standin_frame(days=2, seed=1).drop(index=range(20, 26)).reset_index(drop=True)
    checks = parse_jena_csv(write_frame(frame, tmp_path / "gap.csv")).attrs["checks"]
    assert checks["n_missing_steps"] == 6 and checks["longest_gap_minutes"] == 70


def _full_format_copy(excerpt: Path, target: Path, change_row: int | None = None) -> None:
    """The excerpt's rows in the full file's 15-column format (wind columns added), one value changed."""
    from resgd.data.jena_schema import CANONICAL_HEADER

    lines = excerpt.read_text().splitlines()[1:]
    out = [CANONICAL_HEADER]
    for i, line in enumerate(lines):
        fields = line.split(",")
        if i == change_row:
            fields[2] = f"{float(fields[2]) + 1.0:.2f}"  # T (degC) one degree off
        out.append(",".join(fields + ["1.0", "2.0", "180.0"]))
    target.write_text("\n".join(out) + "\n")


@pytest.mark.parametrize("agree", [True, False])
def test_a_full_file_beside_the_excerpt_must_agree_with_it_over_the_task_period(tmp_path, agree):
    """A full file beside the checksummed excerpt is used only if it agrees with it over the task
    period; a disagreement is one line naming both files."""
    from resgd.data.jena_schema import EXCERPT_RELATIVE_PATH, JENA_RELATIVE_PATH

    from shared_data import shared_data_dir

    shared = shared_data_dir(EXCERPT_RELATIVE_PATH)
    if shared is None:
        pytest.skip(f"no {EXCERPT_RELATIVE_PATH} in the workplace's data")
    excerpt = shared / EXCERPT_RELATIVE_PATH
    (tmp_path / "jena").mkdir()
    shutil.copy(excerpt, tmp_path / EXCERPT_RELATIVE_PATH)
    _full_format_copy(excerpt, tmp_path / JENA_RELATIVE_PATH, change_row=None if agree else 1001)  # a row on the hour (hourly: the last reading)
    kwargs = dict(n_tokens=4, n_train=8, n_test=8, data_dir=tmp_path, cache_dir=tmp_path / "cache",
                  allow_download=False, allow_standin=False, check_canonical=False)
    if agree:
        assert load_jena(**kwargs).info["source_file"] == str(tmp_path / JENA_RELATIVE_PATH)
        return
    with pytest.raises(DataError) as caught:
        load_jena(**kwargs)
    message = str(caught.value)
    assert "\n" not in message and JENA_RELATIVE_PATH.split("/")[-1] in message and "jena_climate_2009_excerpt.csv" in message
    assert "hourly values differ, the first at 2009-01-" in message


def jena_text(days: int = 2) -> str:
    frame = standin_frame(days=days, seed=1)
    return CANONICAL_HEADER + "\n" + frame.to_csv(header=False, index=False, float_format="%.2f", lineterminator="\n")


def with_line(text: str, number: int, edit) -> str:
    lines = text.split("\n")
    lines[number - 1] = edit(lines[number - 1])
    return "\n".join(lines)


def decimal_commas(text: str) -> str:
    header, *rows = text.split("\n")
    def german(row: str) -> str:  # a spreadsheet's export with decimal commas: '996,52' for 996.52
        date, _, numbers = row.partition(",")
        return f"{date},{numbers.replace('.', ',')}" if row else row

    return "\n".join([header, *map(german, rows)])


JENA_FAULTS = {
    "byte-order mark": (lambda t: "\ufeff" + t, r"line 1 \(header\), column 1: got '\\ufeff\"Date Time\"', expected 'Date Time'"),
    "UTF-16": (None, r"line 1 \(header\) is not UTF-8 text"),
    "semicolons": (lambda t: t.replace(",", ";"), r"line 1 \(header\), column 1: got 'Date Time;"),
    "decimal commas": (decimal_commas, r"line 2 has 29 comma-separated fields, expected 15 \(written with decimal commas"),
    "two rows swapped": (lambda t: with_line(with_line(t, 4, lambda _: t.split("\n")[4]), 5, lambda _: t.split("\n")[3]),
                         r"line 5, field 'Date Time': got 01\.01\.2009 00:30:00, a timestamp earlier than line 4's \(out of order\)"),
    "ISO dates": (lambda t: with_line(t, 4, lambda line: line.replace("01.01.2009", "2009-01-01")),
                  r"line 4, field 'Date Time': got '2009-01-01 00:30:00', expected a date dd\.mm\.yyyy HH:MM:SS"),
    "two-digit year": (lambda t: with_line(t, 4, lambda line: line.replace(".2009", ".09")),
                       r"line 4, field 'Date Time': got '01\.01\.09 00:30:00', expected a date"),
    "month 13": (lambda t: with_line(t, 4, lambda line: line.replace("01.01.2009", "01.13.2009")),
                 r"line 4, field 'Date Time': got '01\.13\.2009 00:30:00', expected a date"),
    "cut mid-line": (lambda t: t[: t.index("\n", len(t) // 2) + 30], r"line 146, field '[^']+': got an empty field, expected a number"),
    "infinite pressure": (lambda t: with_line(t, 7, lambda line: line.split(",", 1)[0] + ",inf," + line.split(",", 2)[2]),
                          r"line 7, field 'p \(mbar\)': got inf, expected a number"),
}


@pytest.mark.parametrize("fault", list(JENA_FAULTS))
def test_a_malformed_jena_file_names_file_line_and_field(tmp_path, fault):
    edit, pattern = JENA_FAULTS[fault]
    path = tmp_path / "jena.csv"
    text = jena_text()
    if edit is None:  # UTF-16
        path.write_bytes(text.encode("utf-16"))
    else:
        path.write_text(edit(text), encoding="utf-8")
    with pytest.raises(DataError, match=re_file(path) + pattern) as caught:
        parse_jena_csv(path)
    one_line(caught)


def test_windows_line_ends_parse_as_the_same_rows(tmp_path):
    """Not a fault: a file saved with CRLF line ends gives the same rows as with LF."""
    text = jena_text()
    (tmp_path / "lf.csv").write_text(text, encoding="utf-8")
    (tmp_path / "crlf.csv").write_bytes(text.replace("\n", "\r\n").encode())
    assert parse_jena_csv(tmp_path / "crlf.csv").equals(parse_jena_csv(tmp_path / "lf.csv"))


def test_a_corrupt_jena_file_from_the_command_line_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    (data / "jena").mkdir(parents=True)
    (data / "jena" / "jena_climate_2009_2016.csv").write_text(decimal_commas(jena_text()), encoding="utf-8")
    status, err = reproduce_part_on_data("jena", data, tmp_path, monkeypatch, capsys)
    assert status == 1 and "Traceback" not in err
    errors = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and "jena_climate_2009_2016.csv: line 2 has 29 comma-separated fields" in errors[0]
    assert not list((tmp_path / "results").rglob("*.pkl"))
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)


def test_a_jena_file_edited_with_its_mtime_restored_is_parsed_again(tmp_path):
    """The parsed-data cache is keyed by the file's content: an edit with size and mtime restored is
    parsed again (and the data's digest follows)."""
    from resgd.data.jena import load_jena
    from resgd.data.jena_schema import JENA_FILE_NAME
    from resgd.data.standin import write_standin_csv

    path = tmp_path / "data" / "jena" / JENA_FILE_NAME
    write_standin_csv(path, days=20, seed=2)
    options = dict(n_tokens=4, n_train=8, n_test=8, data_dir=tmp_path / "data", cache_dir=tmp_path / "cache",
                   allow_download=False, check_canonical=False)
    first = load_jena(**options)
    stat = path.stat()
    lines = path.read_text().splitlines(keepends=True)
    fields = lines[6].split(",")  # 01:00, an hour's reading
    fields[2] = fields[2].replace(fields[2].strip()[-1], "0" if fields[2].strip()[-1] != "0" else "1")  # T (degC), same length
    lines[6] = ",".join(fields)
    path.write_text("".join(lines))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    second = load_jena(**options)
    assert len(list((tmp_path / "cache" / "processed").glob("jena_hourly_*.npz"))) == 2
    assert second.info["train_mean"] != first.info["train_mean"]


def _jena_options(tmp_path: Path) -> dict:
    return dict(n_tokens=4, n_train=8, n_test=8, data_dir=tmp_path / "data", cache_dir=tmp_path / "cache",
                allow_download=False, check_canonical=False)


def test_a_5_gb_jena_file_without_line_ends_is_refused_in_one_line_before_it_is_read(tmp_path):
    """A huge Jena file without line ends is refused in one line, naming the header's length, before it
    is read into memory."""
    from resgd.data import DataError, load_jena
    from resgd.data.jena_schema import JENA_FILE_NAME

    sparse_file(tmp_path / "data" / "jena" / JENA_FILE_NAME, 5 << 30)
    with pytest.raises(DataError) as caught:
        load_jena(**_jena_options(tmp_path))
    assert "\n" not in str(caught.value) and "line 1 (header) is longer than 64 KiB" in str(caught.value)


@pytest.mark.parametrize("kind", ["FIFO", "/dev/zero", "folder"])
def test_a_jena_path_that_is_not_a_regular_file_is_refused_not_replaced_by_the_standin(tmp_path, kind):
    """A FIFO, ``/dev/zero`` or a folder given as the Jena file is refused in one line naming it; the run
    does not fall back to the synthetic stand-in."""
    from resgd.data import DataError, load_jena
    from resgd.data.jena_schema import JENA_FILE_NAME

    path = tmp_path / "data" / "jena" / JENA_FILE_NAME
    path.parent.mkdir(parents=True)
    {"FIFO": os.mkfifo, "/dev/zero": lambda p: os.symlink("/dev/zero", p), "folder": os.mkdir}[kind](path)
    with pytest.raises(DataError) as caught:
        load_jena(**_jena_options(tmp_path))
    what = {"FIFO": "a FIFO (named pipe)", "/dev/zero": "a character device", "folder": "a folder"}[kind]
    assert str(caught.value) == (f"{path}: is {what}, not a regular file; expected a Jena climate CSV: "
                                 f"put the file there or remove {path}")
