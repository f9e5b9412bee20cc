"""The real January 2009 excerpt of the Jena climate file: known by its checksum, labelled exactly, the
same task as every other source, and refused in one line when its content is not the published one."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from resgd.data import load_jena
from resgd.data import DataError
from resgd.data.jena import EXCERPT_LABEL, STANDIN_ASKED_LABEL, parse_jena_csv
from resgd.data.jena_schema import EXCERPT_FILE_NAME, EXCERPT_ROWS, EXCERPT_SHA256, NONWIND_NAMES

from shared_data import shared_data_dir

SHARED = (shared_data_dir(f"jena/{EXCERPT_FILE_NAME}") or Path(__file__).resolve().parents[2] / "shared" / "data") / "jena"
EXCERPT = SHARED / EXCERPT_FILE_NAME
SAMPLE = SHARED / "jena_first19rows_sample.csv"
needs_excerpt = pytest.mark.skipif(not EXCERPT.is_file(), reason="no Jena excerpt ($RESGD_DATA_DIR or ../shared/data)")


def _data_dir(tmp_path: Path, content: bytes | None = None) -> Path:
    folder = tmp_path / "data" / "jena"
    folder.mkdir(parents=True)
    target = folder / EXCERPT_FILE_NAME
    if content is None:
        shutil.copy(EXCERPT, target)
    else:
        target.write_bytes(content)
    return tmp_path / "data"


@needs_excerpt
def test_the_shared_excerpt_has_the_published_checksum():
    assert hashlib.sha256(EXCERPT.read_bytes()).hexdigest() == EXCERPT_SHA256


@needs_excerpt
def test_its_first_19_rows_equal_the_independent_sample():
    excerpt, sample = parse_jena_csv(EXCERPT), parse_jena_csv(SAMPLE)
    assert len(excerpt) == EXCERPT_ROWS and list(excerpt.columns) == list(NONWIND_NAMES)
    pd.testing.assert_frame_equal(excerpt.iloc[:19], sample[list(NONWIND_NAMES)], check_freq=False)


@needs_excerpt
def test_it_is_found_labelled_and_gives_the_task(tmp_path):
    ds = load_jena(n_train=32, n_test=None, data_dir=_data_dir(tmp_path), cache_dir=tmp_path / "cache", allow_download=False)
    assert not ds.is_standin and ds.source_label == EXCERPT_LABEL
    assert "real measurements: January 2009 excerpt (28 days, 11 variables)" in ds.source_label
    assert ds.X_train.shape == (32, 24, 11) and ds.feature_names == NONWIND_NAMES
    assert ds.info["excerpt"] and ds.info["canonical"] and ds.info["n_hours"] == 667
    assert ds.info["n_test_windows_available"] == 105 and ds.X_test.shape[0] == 105


@needs_excerpt
def test_the_stand_in_gives_the_same_task_and_says_so(tmp_path):
    real = load_jena(n_train=32, n_test=None, data_dir=_data_dir(tmp_path), cache_dir=tmp_path / "cache", allow_download=False)
    fake = load_jena(n_train=32, n_test=None, data_dir=_data_dir(tmp_path / "b"), cache_dir=tmp_path / "cache",
                     allow_download=False, source="standin", standin_days=30)
    assert fake.is_standin and fake.source_label == STANDIN_ASKED_LABEL and fake.source_label.startswith("SYNTHETIC")
    assert fake.X_train.shape == real.X_train.shape and fake.info["n_hours"] == real.info["n_hours"]
    assert not np.allclose(fake.X_train.numpy(), real.X_train.numpy())


@needs_excerpt
def test_another_file_under_its_name_is_refused_in_one_line(tmp_path):
    content = EXCERPT.read_bytes().replace(b"996.52", b"996.53", 1)
    with pytest.raises(DataError) as caught:
        load_jena(n_train=32, n_test=None, data_dir=_data_dir(tmp_path, content), cache_dir=tmp_path / "cache",
                  allow_download=False)
    message = str(caught.value)
    assert "\n" not in message and EXCERPT_FILE_NAME in message and f"expected {EXCERPT_SHA256}" in message
    assert "January 2009 excerpt" in message
