"""Where data comes from and where derived files go.

Three places, looked up in this order by every loader:

1. the *data directory* (argument ``data_dir`` or env var ``RESGD_DATA_DIR``), laid out like
   the project's shared data folder: ``sst2/train.tsv(.gz)``, ``sst2/dev.tsv``,
   ``glove/glove6B50d_sst2vocab.npz``, ``jena/jena_climate_2009_2016.csv``; it is only read;
2. the *cache directory* (argument ``cache_dir``, else env var ``RESGD_CACHE_DIR``, else the
   per-user cache folder of ``platformdirs``), which holds downloads, the synthetic stand-in
   and the parsed arrays (``processed/``);
3. a download of the canonical file into the cache directory, unless ``allow_download=False``
   or env var ``RESGD_OFFLINE`` is set to 1/true/yes (for offline CI and book builds).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .. import settings
from ..validation import DataError

DATA_DIR_ENV = "RESGD_DATA_DIR"
CACHE_DIR_ENV = "RESGD_CACHE_DIR"
OFFLINE_ENV = "RESGD_OFFLINE"


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The local data directory: the argument, else ``$RESGD_DATA_DIR``, else None.

    ``$RESGD_DATA_DIR`` naming no folder is a :class:`resgd.settings.SettingError` (a typo would
    otherwise go unnoticed: Jena would run on its synthetic stand-in). The argument may name a
    missing folder (nothing found there).
    """
    return Path(data_dir).expanduser() if data_dir is not None else settings.data_dir()


def download_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The download cache (downloaded and parsed data; not the run cache of
    :mod:`resgd.pipeline.cache`): the argument, else ``$RESGD_CACHE_DIR``, else the per-user cache."""
    return Path(cache_dir).expanduser() if cache_dir is not None else settings.download_cache_dir()


def downloads_allowed(allow_download: bool) -> bool:
    """``allow_download`` unless ``$RESGD_OFFLINE`` says the machine is offline."""
    return bool(allow_download) and not settings.offline()


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def not_regular(path: Path) -> str | None:
    """What ``path`` is when it exists but is not a regular file (links followed), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # missing (or a dangling link): looked for elsewhere
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def check_regular(path: Path, what: str) -> None:
    """:class:`DataError` (one line) when ``path`` exists but is not a regular file: reading a FIFO
    blocks, ``/dev/zero`` never ends, and a folder must not send a loader to a stand-in unnoticed."""
    kind = not_regular(path)
    if kind is not None:
        raise DataError(f"{path}: is {kind}, not a regular file; expected {what}: put the file there or remove {path}")


def first_existing(candidates: list[Path], what: str = "a data file") -> Path | None:
    """The first of ``candidates`` that is a regular file, or None; one that exists but is not a
    regular file is a :class:`DataError` (see :func:`check_regular`)."""
    for path in candidates:
        check_regular(path, what)
        if path.is_file():
            return path
    return None


def how_to_provide(relative: str, url: str) -> str:
    """The standard advice for a missing file: where to put it, where it comes from."""
    return (
        f"Put the file at ${DATA_DIR_ENV}/{relative} (set {DATA_DIR_ENV} to a folder laid out "
        f"like the project's shared data folder), or allow the download of {url} "
        f"(allow_download=True, {OFFLINE_ENV} unset, network available)."
    )


def bad_file_advice(path: Path, relative: str, data_dir: Path | None, allow_download: bool) -> str:
    """What a user can do about a bad data file, from where it is and whether downloads are allowed.

    The data folder is only read (it may be a read-only shared copy): replace the file there or
    point ``$RESGD_DATA_DIR`` elsewhere. A copy in the cache can be deleted, and comes back by
    itself only when downloads are allowed.
    """
    if data_dir is not None and Path(os.path.abspath(path)).is_relative_to(os.path.abspath(data_dir)):  # links not followed
        advice = (
            f"{path} is in the data folder ({DATA_DIR_ENV}={data_dir}), which is only read: replace it "
            f"with a good copy, or set {DATA_DIR_ENV} to a folder holding a good {relative}"
        )
        return advice + (f", or unset {DATA_DIR_ENV} to download it into the data cache." if downloads_allowed(allow_download) else ".")
    if downloads_allowed(allow_download):
        return f"Delete {path} (a copy in the data cache) and run again: it is downloaded again."
    return (
        f"Delete {path} (a copy in the data cache), then put a good copy at ${DATA_DIR_ENV}/{relative}, "
        f"or run again with network access and {OFFLINE_ENV} unset (allow_download=True) to download it again."
    )
