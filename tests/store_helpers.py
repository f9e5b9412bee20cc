"""Test helper for the results store: a test's own copy of a store made once per module."""

from __future__ import annotations

import shutil
from pathlib import Path


def copied_store(made: Path, tmp_path: Path, monkeypatch) -> Path:
    """``made`` copied under ``tmp_path`` (a test may damage its copy), with the run cache and the
    verification report in the test's own results folder."""
    root = tmp_path / "store"
    shutil.copytree(made, root)
    monkeypatch.setenv("RESGD_RESULTS_DIR", str(tmp_path / "results"))
    return root
