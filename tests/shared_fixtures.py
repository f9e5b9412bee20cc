"""Fixtures that several test files use, registered for the whole suite by ``conftest.py``.

None is autouse: a file asks for one by name (or by ``pytestmark = pytest.mark.usefixtures(...)``).
Not named ``fixtures.py``: pytest registers its own fixture machinery as the plugin ``fixtures``,
so a plugin of that name is silently never loaded.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from shared_data import shared_data_dir


@pytest.fixture
def offline_data(monkeypatch, tmp_path):
    """The data loaders with no network, no user-level data settings and their cache below ``tmp_path``:
    what a test loads comes from the files it wrote or from the stand-in, never from this machine."""
    import resgd.data.download as download_module
    from resgd.data import DownloadError

    def no_network(url, dest, *, timeout=0.0):
        raise DownloadError(f"download of {url} failed: network disabled in tests")

    monkeypatch.setattr(download_module, "fetch_url", no_network)
    for name in ("RESGD_DATA_DIR", "RESGD_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RESGD_CACHE_DIR", str(tmp_path / "env-cache"))


@pytest.fixture
def client_standin(monkeypatch, tmp_path):
    """The client runs Jena on the stand-in of its own cache folder (offline, no data folder)."""
    monkeypatch.delenv("RESGD_DATA_DIR", raising=False)
    monkeypatch.setenv("RESGD_OFFLINE", "1")
    monkeypatch.setenv("RESGD_CACHE_DIR", str(tmp_path / "client-cache"))
    return tmp_path


@pytest.fixture
def sst2_shared() -> Path:
    """The read-only data folder holding the real GLUE SST-2 files and the GloVe subset (the test
    skips without them)."""
    from resgd.data.glove import GLOVE_SUBSET_NAME

    found = shared_data_dir("sst2/dev.tsv")
    if found is None or not (found / "glove" / GLOVE_SUBSET_NAME).is_file():
        pytest.skip("shared data (sst2/, glove/) not found; set RESGD_DATA_DIR")
    return found


@pytest.fixture
def store_copy(made, tmp_path, monkeypatch) -> Path:
    """The test's own copy of the store that its module's ``made`` fixture built once (``made``
    returns ``(store folder, counts)``): a test may damage its copy. The run cache and the
    verification report go to the test's own results folder."""
    root = tmp_path / "store"
    shutil.copytree(made[0], root)
    monkeypatch.setenv("RESGD_RESULTS_DIR", str(tmp_path / "results"))
    return root
