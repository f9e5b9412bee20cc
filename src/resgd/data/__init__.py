"""Data loaders for the companion's experiments: Jena climate (time series) and SST-2 (text).

::

    from resgd.data import load_jena, load_sst2, DataError
    jena = load_jena(n_tokens=24, n_train=256, n_test=256, seed=0)   # X (N, 24, 14), Y (N, 24, 1)
    sst2 = load_sst2(n_train=512, n_tokens=16, seed=0)               # X (N, 16, 50), mask, Y (N, 1)

Files are looked up in ``$RESGD_DATA_DIR`` (or ``data_dir=``), then in the cache
(``$RESGD_CACHE_DIR``, ``cache_dir=`` or the per-user cache), then downloaded unless
``allow_download=False`` or ``RESGD_OFFLINE=1``. Without the real Jena file a synthetic
stand-in is used and flagged (``is_standin``, ``source_label``). See :mod:`.jena`, :mod:`.sst2`,
:mod:`.glove` and :mod:`.locations` for every choice. :mod:`.spec` says which data a training
run of the experiments uses (``DatasetSpec``, loaded once per process and fingerprinted for
the cache keys); :mod:`.toy` holds the tiny synthetic data sets of the tests.
"""

from .dataset import SupervisedData
from ..validation import DataError, DownloadError
from .jena import NOT_CANONICAL_LABEL, load_jena, parse_jena_csv
from .locations import CACHE_DIR_ENV, DATA_DIR_ENV, OFFLINE_ENV, download_cache_dir, resolve_data_dir
from .sst2 import NOT_VERIFIED_LABEL, load_sst2, parse_sst2_tsv
from .standin import standin_frame, write_standin_csv

NOT_CANONICAL_LABELS = (NOT_CANONICAL_LABEL, NOT_VERIFIED_LABEL)
"""The source labels of real-format files that the loaders were told not to check against the
published ones (``check_canonical=False``, ``verify_checksums=False``): figures made from them
carry a banner, as those made from the synthetic stand-in do (:func:`resgd.plots.style.banner_text`)."""

__all__ = [
    "CACHE_DIR_ENV",
    "DATA_DIR_ENV",
    "NOT_CANONICAL_LABELS",
    "OFFLINE_ENV",
    "DataError",
    "DownloadError",
    "SupervisedData",
    "load_jena",
    "load_sst2",
    "parse_jena_csv",
    "parse_sst2_tsv",
    "download_cache_dir",
    "resolve_data_dir",
    "standin_frame",
    "write_standin_csv",
]
