"""Where the tests find the workplace's read-only data copies (``../shared/data`` or ``$RESGD_DATA_DIR``)."""

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
