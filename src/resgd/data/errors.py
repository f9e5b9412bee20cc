"""The one exception the data loaders raise.

A ``DataError`` is a ``ValueError`` whose message names the file, the row or field, what was
expected, and what to do about it (delete a corrupt file, set ``RESGD_DATA_DIR``, ...), so a
reader of a failed notebook cell can act without reading the loader's source.
"""

from __future__ import annotations


class DataError(ValueError):
    """A data file that is missing, corrupt or not in the expected format."""


class DownloadError(DataError):
    """A download that failed (no network, HTTP error, timeout); nothing was written."""
