"""Which data a training run uses: :class:`DatasetSpec`, loaded once per process and fingerprinted.

The data sets, their loaders, shapes and tasks are the records of :mod:`resgd.dataset_registry`;
a spec names one. :func:`data_fingerprint` enters every cache key, so results computed on one
version of the data are never served for another.

Data identity across processes: a sweep's worker loads its own copy of the
data, which may not be the client's (no Jena file there: the stand-in; another file). The sweep
engine (:mod:`resgd.pipeline.sweep`) runs each task inside :func:`expecting` with the client's
:func:`known_fingerprints`: :func:`load_dataset` then raises :class:`DataMismatchError` (naming
the worker and both digests) *before* anything trains on data whose digest is not the client's,
and records the digests it served, which the client checks again and stores in the cache entry.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import torch

from .. import dataset_registry as registry
from .. import settings
from ..validation import ConfigError, check_choice
from ..validation import DataError

DTYPES = {"float64": torch.float64, "float32": torch.float32}


@dataclass(frozen=True)
class DatasetSpec:
    """Which data and how much: ``n_train`` samples of ``n_tokens`` tokens, ``n_test`` held out.

    ``seed`` draws the samples (Jena windows, SST-2 sentences); ``n_test=None`` means every
    held-out sample the loader has (for SST-2, the 872 dev sentences).
    """

    name: str
    n_train: int
    n_tokens: int
    n_test: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        check_choice("DatasetSpec.name", self.name, registry.names())
        for attr in ("n_train", "n_tokens"):
            value = getattr(self, attr)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"DatasetSpec.{attr}: expected an integer >= 1, got {value!r}")
        if self.n_test is not None and (not isinstance(self.n_test, int) or self.n_test < 1):
            raise ConfigError(f"DatasetSpec.n_test: expected None or an integer >= 1, got {self.n_test!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ConfigError(f"DatasetSpec.seed: expected an integer, got {self.seed!r}")

    @property
    def record(self) -> registry.Dataset:
        """Its data set's record (:mod:`resgd.dataset_registry`): loader, features, pooling, task."""
        return registry.dataset(self.name)

    @property
    def d(self) -> int:
        return self.record.features

    @property
    def pooling(self) -> str:
        return self.record.pooling

    @property
    def is_classification(self) -> bool:
        return self.record.is_classification


class DataMismatchError(DataError):
    """A worker's data are not the data the client's cache key names."""


_KNOWN: dict[tuple[DatasetSpec, str], str] = {}
"""Every fingerprint computed in this process (the client's: its cache keys use them)."""
_EXPECTED: dict[tuple[DatasetSpec, str], str] = {}
_USED: dict[tuple[DatasetSpec, str], str] = {}


def known_fingerprints() -> dict[tuple[DatasetSpec, str], str]:
    """A copy of the fingerprints this process has computed: what a sweep's tasks must see too."""
    return dict(_KNOWN)


def where_am_i() -> str:
    """This process as a worker name: the Dask worker's address, else host and pid. A Dask worker
    has ``distributed`` imported already; any other process (a local worker, whose start-up this
    is part of) is not asked to import it (seconds of CPU per process)."""
    if "distributed" not in sys.modules:
        return f"process {os.getpid()} on {socket.gethostname()}"
    try:
        from distributed import get_worker

        return f"Dask worker {get_worker().address}"
    except (ImportError, ValueError):
        return f"process {os.getpid()} on {socket.gethostname()}"


@contextmanager
def expecting(expected: dict[tuple[DatasetSpec, str], str]) -> Iterator[dict[tuple[DatasetSpec, str], str]]:
    """While the block runs, :func:`load_dataset` refuses data whose fingerprint is not ``expected``'s
    (for the data sets ``expected`` names); yields the fingerprints of the data it served."""
    _EXPECTED.clear()
    _EXPECTED.update(expected)
    _USED.clear()
    try:
        yield _USED
    finally:
        _EXPECTED.clear()


def describe_spec(spec: DatasetSpec, dtype: str) -> str:
    return f"{spec.name} (n_train={spec.n_train}, n_tokens={spec.n_tokens}, n_test={spec.n_test}, seed={spec.seed}, {dtype})"


def load_dataset(spec: DatasetSpec, dtype: str = "float64"):
    """The data of ``spec`` (a :class:`resgd.data.SupervisedData`), loaded once per process and
    checked against the fingerprint the caller expects (:func:`expecting`)."""
    sources = _sources()  # read once: the data and their digest come from the same folder
    data = _load(spec, dtype, sources)
    digest = _recorded_fingerprint(spec, dtype, sources)
    expected = _EXPECTED.get((spec, dtype))
    if expected is not None and digest != expected:
        raise DataMismatchError(
            f"{where_am_i()}: its data {describe_spec(spec, dtype)} have digest {digest} ({data.source_label}), "
            f"the client's have {expected}: give every worker the client's data files (RESGD_DATA_DIR) "
            f"or run without --scheduler; nothing was computed or cached"
        )
    _USED[(spec, dtype)] = digest
    return data


def _sources() -> tuple:
    """What decides which files a load reads besides the spec: the data folder, the download cache and
    whether downloads are allowed (:mod:`resgd.settings`, read at each call). Part of the in-process
    memo's key, so a process whose settings change loads again instead of serving the old folder's data."""
    return settings.data_dir(), settings.download_cache_dir(), settings.offline()


@lru_cache(maxsize=8)
def _load(spec: DatasetSpec, dtype: str, sources: tuple):
    """The data of ``spec``, loaded once per process and setting of the data's sources by its
    record's loader (:mod:`resgd.dataset_registry`)."""
    check_choice("dtype", dtype, DTYPES)
    return spec.record.load(spec, DTYPES[dtype])


def data_fingerprint(spec: DatasetSpec, dtype: str = "float64") -> str:
    """A hash of the loaded tensors and their source: part of every cache key, so results on the
    stand-in are never served once the real data are there (or the other way round)."""
    return _recorded_fingerprint(spec, dtype, _sources())


def _recorded_fingerprint(spec: DatasetSpec, dtype: str, sources: tuple) -> str:
    """:func:`_fingerprint`, recorded in :data:`_KNOWN` (the fingerprint of the sources read now)."""
    _KNOWN[(spec, dtype)] = digest = _fingerprint(spec, dtype, sources)
    return digest


@lru_cache(maxsize=8)
def _fingerprint(spec: DatasetSpec, dtype: str, sources: tuple) -> str:
    data = _load(spec, dtype, sources)
    digest = hashlib.sha256(f"{data.name}|{data.source_label}|{data.is_standin}".encode())
    for tensor in (data.X_train, data.Y_train, data.mask_train, data.X_test, data.Y_test, data.mask_test):
        digest.update(b"|" if tensor is None else tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]

