"""What code this process runs: the package version and a hash of the installed package's sources.

Why: a Dask worker (or a cache entry) computed by other ``resgd`` code gives other results under
the same key; comparing :func:`code_identity` before a task runs catches that. The hash covers
every ``.py`` and ``.cpp`` file under the installed ``resgd`` package (path and content), so an
edited step changes it even when the version string does not. Computed once per process.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

SUFFIXES = (".py", ".cpp")
CHUNK_BYTES = 1 << 20


def package_root() -> Path:
    """The folder of the ``resgd`` package this process imported."""
    import resgd

    return Path(resgd.__file__).resolve().parent


def package_version() -> str:
    import resgd

    return str(resgd.__version__)


@functools.lru_cache(maxsize=None)
def _hash_of(root: str) -> str:
    digest = hashlib.sha256()
    base = Path(root)
    files = sorted(p for p in base.rglob("*") if p.suffix in SUFFIXES and p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        digest.update(path.relative_to(base).as_posix().encode() + b"\0")
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()


def source_hash(root: str | Path | None = None) -> str:
    """SHA-256 (hex) over the ``.py`` and ``.cpp`` files of the package at ``root`` (default: the
    imported ``resgd``), each as its relative path then its bytes, in sorted order; cached per root."""
    return _hash_of(str(Path(root).resolve() if root is not None else package_root()))


def code_identity() -> dict[str, str]:
    """``{"version": ..., "source": ...}`` of the code this process runs."""
    return {"version": package_version(), "source": source_hash()}


COMPUTE_SOURCES = ("core", "data", "experiments/runs.py", "experiments/run_config.py", "experiments/twin.py",
                   "experiments/step_size.py", "robustness/map_runs.py", "robustness/limits.py", "settings.py",
                   "threads.py", "mkl_path.py", "__init__.py")
"""The sources a cached result's numbers come from (the model, the trainers, the data, the step
sizes, the run tables): what :func:`compute_hash` covers. Verdicts, tables, figures and pages read
cached results without changing them, so editing them keeps the cache."""


@functools.lru_cache(maxsize=None)
def _compute_hash(root: str) -> str:
    digest = hashlib.sha256()
    base = Path(root)
    files = []
    for part in COMPUTE_SOURCES:
        target = base / part
        files += [target] if target.is_file() else sorted(
            p for p in target.rglob("*") if p.suffix in SUFFIXES and p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        digest.update(path.relative_to(base).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def compute_hash(root: str | Path | None = None) -> str:
    """SHA-256 (hex) over :data:`COMPUTE_SOURCES` of the package at ``root`` (default: the imported
    ``resgd``): part of every cache key (:func:`resgd.experiments.run_config.entry_key`)."""
    return _compute_hash(str(Path(root).resolve() if root is not None else package_root()))
