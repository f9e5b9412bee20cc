"""Test helpers for the data loaders: the workplace's read-only data copies, and a fake download."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_ENV = os.environ.get("RESGD_DATA_DIR", "")  # as set when the tests started


def shared_data_dir(marker: str) -> Path | None:
    """The first data folder holding the file ``marker`` (a path relative to the folder), or None."""
    for candidate in (Path(SHARED_ENV) if SHARED_ENV else None, REPO.parent / "shared" / "data"):
        if candidate is not None and (candidate / marker).is_file():
            return candidate
    return None


def serve(monkeypatch, payload: bytes, fail_after: str | None = None) -> list[str]:
    """Replace ``fetch_url`` by one that writes ``payload`` and, if ``fail_after`` is a reason, then fails.

    Returns the list of URLs asked for, so a test can count downloads. Never touches the network.
    """
    import resgd.data.download as download_module
    from resgd.data import DownloadError

    calls: list[str] = []

    def fake(url, dest, *, timeout=0.0):
        calls.append(url)
        Path(dest).write_bytes(payload)
        if fail_after:
            raise DownloadError(f"download of {url} failed: {fail_after}")

    monkeypatch.setattr(download_module, "fetch_url", fake)
    return calls
