"""Getting canonical files into the cache: download, verify, then move into place atomically.

:func:`fetch_url` is the only function in :mod:`resgd.data` that touches the network; loaders
call it through this module (``download.fetch_url``), so a test replaces it with
``monkeypatch.setattr(resgd.data.download, "fetch_url", fake)`` and never goes online.

Every download goes to a temporary file in the destination folder and is verified before one
``os.replace`` publishes it: an interrupted or failed download leaves no partial file behind.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..validation import DataError, DownloadError

DEFAULT_TIMEOUT_S = 15.0
"""Seconds to wait for a connection or a read before giving up (companion's choice)."""

CHUNK_BYTES = 1 << 20


def fetch_url(url: str, dest: Path, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    """Stream ``url`` into the (temporary) file ``dest``; raise :class:`DownloadError` on failure."""
    request = urllib.request.Request(url, headers={"User-Agent": "resgd-data-loader"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response, open(dest, "wb") as out:
            shutil.copyfileobj(response, out, CHUNK_BYTES)
    except (urllib.error.URLError, http.client.HTTPException, TimeoutError, OSError) as exc:
        raise DownloadError(f"download of {url} failed: {type(exc).__name__}: {exc}") from exc


@contextmanager
def downloaded(url: str, directory: Path, *, timeout: float = DEFAULT_TIMEOUT_S) -> Iterator[Path]:
    """Download ``url`` to a temporary file in ``directory``; the file is removed on exit."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".download.", suffix=".part", dir=directory)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        fetch_url(url, tmp_path, timeout=timeout)
        yield tmp_path
    finally:
        tmp_path.unlink(missing_ok=True)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_maybe_gzip(path: Path, *, what_to_do: str, limit: int | None = None) -> bytes:
    """The bytes of ``path``, decompressed if its name ends in ``.gz``, read in chunks.

    A truncated or corrupt gzip raises :class:`DataError` naming the file and ``what_to_do``; so
    does content over ``limit`` bytes (checked while reading: a huge file is never held whole).
    """
    chunks, total = [], 0
    try:
        with (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as handle:
            for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
                total += len(chunk)
                if limit is not None and total > limit:
                    raise DataError(
                        f"{path}: over {limit // (1 << 20)} MiB (uncompressed), far more than the file it should be; "
                        f"refused before reading it whole. {what_to_do}"
                    )
                chunks.append(chunk)
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise DataError(
            f"{path}: cannot read the file ({type(exc).__name__}: {exc}); it is truncated or "
            f"corrupt. {what_to_do}"
        ) from exc
    return b"".join(chunks)


def check_sha256(data: bytes, expected: str, *, path: Path | str, what_to_do: str) -> None:
    """Raise :class:`DataError` unless ``sha256(data) == expected``; Windows line ends are named
    (an editor or a checkout that turned LF into CRLF changes the checksum, nothing else)."""
    actual = sha256_bytes(data)
    if actual != expected:
        crlf = (" It has Windows line ends (CRLF) where the official file has LF: convert them back "
                "(e.g. dos2unix) or use a fresh copy." if b"\r\n" in data else "")
        raise DataError(
            f"{path}: sha256 of the (uncompressed) content is {actual}, expected {expected} "
            f"({len(data):,} bytes read); the file is corrupt, truncated or not the canonical "
            f"one.{crlf} {what_to_do}"
        )


def read_zip_member(zip_path: Path, member: str, *, url: str) -> bytes:
    """One member of a downloaded zip archive; a bad archive raises :class:`DataError`."""
    try:
        with zipfile.ZipFile(zip_path) as archive:
            names = archive.namelist()
            if member not in names:
                # Tolerate an archive that nests the file in a folder (macOS resource forks aside).
                same_name = [n for n in names if Path(n).name == Path(member).name and not n.startswith("__MACOSX")]
                member = same_name[0] if len(same_name) == 1 else member
            if member not in names:
                raise DataError(
                    f"archive downloaded from {url} has no member {member!r} "
                    f"(members: {', '.join(names[:10])}); nothing was written"
                )
            return archive.read(member)
    except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as exc:
        raise DataError(
            f"archive downloaded from {url} is corrupt or truncated ({exc}); nothing was "
            f"written: run again to retry the download"
        ) from exc
