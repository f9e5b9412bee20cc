"""Jena climate: find the source, turn it into the task's hourly arrays (cached), cut supervised windows.
Parsing and cleaning the CSV are :mod:`.jena_parse`'s (re-exported here).

The task (companion's reading of the paper's time-series experiment): each sample
``X_p`` is ``n`` consecutive hours of the 11 standardized non-wind weather variables
(:data:`~.jena_schema.NONWIND_NAMES`; ``n`` tokens of dimension ``d = 11``), and ``Y_p`` is the
standardized temperature ``T (degC)`` of the ``n`` hours that follow, shape ``(n, 1)`` — a
per-token regression target for squared loss.

Sources, in the order they are looked for (:func:`locate_jena`): the full 2009–2016 file in
``$RESGD_DATA_DIR``, the January 2009 excerpt there (real measurements, 4,000 rows, 11 variables,
known by its sha256), the full file in the download cache, a download. Every source gives the
same task: the book reads January 2009 (``period="january2009"``: 01.01.2009 00:10 to 28.01.2009
18:40, the excerpt's rows) and the 11 variables the excerpt has, so CI on the excerpt and a user
with the full file compute the same numbers (companion's choice; ``book/choices.md`` says what it costs).

Preprocessing, each step a field of :class:`Preprocessing` (all companion's choices; :data:`BOOK` the book's):

* ``-9999`` in ``wv``/``max. wv`` (failed wind measurements, full file only) become ``wind_fill``
  (default 0.0); the wind columns are not task inputs, so this only matters with ``"all"`` columns kept;
* hourly resampling: the bin ``(h-1:00, h:00]`` is labelled ``h:00`` and takes its last
  reading (``hourly="last"``, i.e. the on-the-hour reading as in the Keras tutorials) or its
  mean (``"mean"``); hours with no reading are filled by linear interpolation in time (their
  number is reported in ``info``);
* time split: the first ``train_fraction`` of the hours are the training range, then a gap of
  ``gap_hours`` (default ``2 n``, one whole window), then the held-out range; a window (its
  ``n`` input hours and ``n`` target hours) lies entirely inside one range, so no hour is in
  both splits;
* standardization of every feature with the mean and standard deviation of the training
  range only (``ddof=0``); the held-out range uses the same statistics;
* ``n_train``/``n_test`` windows drawn without replacement, seeded, from all windows starting
  every ``stride`` hours in each range, then put in time order.

If the real file cannot be found or downloaded, a synthetic stand-in with the same schema is
used (``allow_standin=True``): the result has ``is_standin=True`` and a ``source_label`` that
starts with ``"SYNTHETIC"``, which every plot must show.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from ..infra.atomic import atomic_path
from . import download
from .dataset import SupervisedData
from ..validation import check_choice
from ..validation import DataError, DownloadError
from .jena_schema import (
    EXCERPT_FILE_NAME,
    EXCERPT_RELATIVE_PATH,
    EXCERPT_SHA256,
    NONWIND_NAMES,
    TASK_LAST,
    JENA_FILE_NAME,
    JENA_RELATIVE_PATH,
    JENA_URL,
    TARGET_NAME,
)
from .locations import (
    DATA_DIR_ENV,
    bad_file_advice,
    downloads_allowed,
    first_existing,
    how_to_provide,
    download_cache_dir,
    resolve_data_dir,
)
from .jena_parse import (  # noqa: F401 - parse_jena_csv, check_canonical, clean_wind, to_hourly: the data API's
    OTHER_FILE_ADVICE, Hourly, WindFill, canonical_problems, check_canonical, check_line_lengths, clean_wind, parse_jena_csv,
    to_hourly,
)
from .npzcache import cache_writable, entry_path, file_fingerprint, load_entry, save_entry, source_digest
from .standin import DEFAULT_STANDIN_DAYS, ensure_standin

def parser_version() -> str:
    """The parsing and cleaning code's own digest (this module, :mod:`.jena_parse`, its checks and schema): an edit
    to any of them rebuilds the cached hourly arrays, with no number to bump by hand."""
    from . import jena_checks, jena_parse, jena_schema

    return source_digest(__file__, jena_parse, jena_checks, jena_schema)

EXCERPT_LABEL = "Jena climate, real measurements: January 2009 excerpt (28 days, 11 variables)"
REAL_LABEL = "Jena climate, real measurements: January 2009 of the full 2009–2016 file (28 days, 11 variables)"
REAL_ALL_LABEL = "Jena climate, real measurements: the full 2009–2016 file (11 variables)"
SOURCES = ("auto", "standin")
Source = Literal["auto", "standin"]
STANDIN_LABEL = (
    "SYNTHETIC stand-in data (real Jena file not found; see resgd.data.jena: set RESGD_DATA_DIR "
    "or allow the download)"
)

STANDIN_ASKED_LABEL = "SYNTHETIC stand-in data (asked for: the sensitivity row beside the real measurements)"

NOT_CANONICAL_LABEL = (
    "NOT the canonical Jena climate file (its row count or date range differ; loaded with check_canonical=False)"
)



def source_label(is_standin: bool, verified: bool, excerpt: bool, period: str) -> str:
    """The label on every figure, table and verdict made from these data: which source, exactly."""
    if is_standin:
        return STANDIN_LABEL
    if not verified:
        return NOT_CANONICAL_LABEL
    if excerpt:
        return EXCERPT_LABEL
    return REAL_LABEL if period == "january2009" else REAL_ALL_LABEL

# --------------------------------------------------------------------------- sources


def _download_jena(cache_dir: Path, *, check: bool, timeout: float) -> Path:
    """Download the canonical zip, validate the CSV, then publish it in the cache."""
    target = cache_dir / JENA_RELATIVE_PATH
    with download.downloaded(JENA_URL, target.parent, timeout=timeout) as zipped:
        content = download.read_zip_member(zipped, JENA_FILE_NAME, url=JENA_URL)
        with atomic_path(target) as tmp:
            tmp.write_bytes(content)
            frame = parse_jena_csv(tmp)
            if check:
                check_canonical(
                    frame, Path(f"{target} (downloaded from {JENA_URL})"),
                    f"Nothing was written: run again to retry the download, or put the canonical file at "
                    f"${DATA_DIR_ENV}/{JENA_RELATIVE_PATH}.",
                )
    return target


def locate_jena(
    data_dir: Path | None, cache_dir: Path, *, allow_download: bool, check: bool, timeout: float
) -> tuple[Path | None, list[Path], str]:
    """The real file (data dir: the full file, then the January 2009 excerpt; then the cache's full
    file; then a download), the places looked, and why not found. The task reads January 2009 from
    any of them (:data:`PERIODS`), so they give the same numbers; the data dir's files need no download."""
    candidates = ([data_dir / JENA_RELATIVE_PATH, data_dir / EXCERPT_RELATIVE_PATH] if data_dir is not None else []) \
        + [cache_dir / JENA_RELATIVE_PATH]
    found = first_existing(candidates, "a Jena climate CSV")
    if found is not None:
        check_line_lengths(found)  # before anything reads (or hashes) a huge file whole
        return found, candidates, ""
    if not downloads_allowed(allow_download):
        return None, candidates, "downloads are disabled (allow_download=False or RESGD_OFFLINE set)"
    try:
        return _download_jena(cache_dir, check=check, timeout=timeout), candidates, ""
    except DownloadError as exc:
        return None, candidates, str(exc)


def is_excerpt(path: Path) -> bool:
    """Whether ``path`` is named as the January 2009 excerpt (its content is checked by :func:`check_excerpt`)."""
    return Path(path).name == EXCERPT_FILE_NAME


def check_excerpt(path: Path) -> None:
    """The excerpt is known by its sha256 (streamed): any other content is refused in one line."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != EXCERPT_SHA256:
        raise DataError(
            f"{path}: sha256 {digest.hexdigest()}, expected {EXCERPT_SHA256} (the January 2009 excerpt of the Jena "
            f"climate file, 4,000 rows, 12 columns); replace it with the published excerpt or remove it"
        )


def jena_source(
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    allow_download: bool = True,
    timeout: float = download.DEFAULT_TIMEOUT_S,
) -> tuple[Path | None, str]:
    """The real file :func:`load_jena` reads (downloading it when allowed), or None and why not:
    then it runs on the synthetic stand-in. For saying so before the work starts."""
    path, looked, reason = locate_jena(
        resolve_data_dir(data_dir), download_cache_dir(cache_dir), allow_download=allow_download, check=True, timeout=timeout
    )
    return (path, "") if path is not None else (None, _not_found(looked, reason))


def _not_found(looked: list[Path], reason: str) -> str:
    return (
        f"Jena climate file {JENA_FILE_NAME} not found (looked at: {', '.join(map(str, looked))}; "
        f"{reason}). {how_to_provide(JENA_RELATIVE_PATH, JENA_URL)}"
    )


def hourly_arrays(
    path: Path,
    *,
    cache_dir: Path,
    wind_fill: WindFill = 0.0,
    hourly: Hourly = "last",
    check: bool = False,
    advice: str = "",
    period: Period = "january2009",
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Hourly times (``datetime64[s]``), values ``(T, 11)`` (:data:`NONWIND_NAMES`) of ``period``, and
    facts; cached in ``cache_dir``.

    ``check``: the full file must have the canonical row count and dates, the excerpt its sha256.
    ``advice``: what to do when ``check`` finds that ``path`` is not the canonical file."""
    check_choice("period", period, PERIODS)
    key = {
        "source": file_fingerprint(path),
        "wind_fill": wind_fill,
        "hourly": hourly,
        "check": check,
        "period": period,
        "version": parser_version(),
    }
    entry = entry_path(cache_dir, "jena_hourly", key)
    stored = load_entry(entry, key)
    if stored is not None and stored["counts"].shape == (len(FACTS),):
        facts = dict(zip(FACTS, map(int, stored["counts"])))
        return stored["times"].astype("datetime64[s]"), stored["values"], facts
    excerpt = is_excerpt(path)
    if check and excerpt:
        check_excerpt(path)
    frame = parse_jena_csv(path)
    if check and not excerpt:
        check_canonical(frame, path, advice)
    cleaned, n_replaced = clean_wind(frame, wind_fill)
    cleaned = cleaned[list(NONWIND_NAMES)]
    if period == "january2009":
        cleaned = cleaned[cleaned.index <= TASK_LAST]
    hours, n_filled = to_hourly(cleaned, hourly)
    times = hours.index.to_numpy().astype("datetime64[s]")
    values = hours.to_numpy(dtype=np.float64)
    verified = (check and excerpt) or not canonical_problems(frame)
    facts = {"n_rows": len(frame), "n_rows_used": len(cleaned), "n_wind_replaced": n_replaced, "n_hours_filled": n_filled,
             **frame.attrs["checks"], "canonical": int(verified), "excerpt": int(excerpt)}
    counts = np.array([facts[name] for name in FACTS], dtype=np.int64)
    if cache_writable(entry.parent):
        save_entry(entry, {"times": times.astype(np.int64), "values": values, "counts": counts}, key)
    return times, values, facts


FACTS = ("n_rows", "n_rows_used", "n_wind_replaced", "n_hours_filled", "n_exact_repeats", "n_missing_steps", "longest_gap_minutes",
         "canonical", "excerpt")
"""What :func:`hourly_arrays` reports about the file (``canonical``: 1 when verified: the full file's row count
and date range, or the excerpt's sha256; ``excerpt``: 1 for the January 2009 excerpt)."""

PERIODS = ("january2009", "all")
"""The task's period: ``"january2009"`` (the book's: 01.01.2009 00:10 to 28.01.2009 18:40, the rows every
source has, so the full file, the excerpt and the stand-in give the same task) or ``"all"`` (every row of
the file; Python only)."""
Period = Literal["january2009", "all"]


# --------------------------------------------------------------------------- windows


def split_ranges(n_hours: int, n_tokens: int, train_fraction: float, gap_hours: int | None) -> tuple[int, int]:
    """``(train_end, test_start)``: training hours are ``[0, train_end)``, held-out ``[test_start, T)``."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction: expected a number in (0, 1), got {train_fraction!r}")
    gap = 2 * n_tokens if gap_hours is None else int(gap_hours)
    if gap < 0:
        raise ValueError(f"gap_hours: expected an integer >= 0, got {gap_hours!r}")
    train_end = int(round(train_fraction * n_hours))
    return train_end, train_end + gap


def window_starts(lo: int, hi: int, window_hours: int, stride: int) -> np.ndarray:
    """First hours of all windows of ``window_hours`` inside ``[lo, hi)``, every ``stride`` hours."""
    return np.arange(lo, hi - window_hours + 1, stride, dtype=np.int64)


def cut_windows(values: np.ndarray, starts: np.ndarray, n_tokens: int, target: int) -> tuple[np.ndarray, np.ndarray]:
    """``X (N, n, d)``: hours ``s .. s+n-1``; ``Y (N, n, 1)``: column ``target`` at ``s+n .. s+2n-1``."""
    offsets = starts[:, None] + np.arange(n_tokens)[None, :]
    return values[offsets], values[offsets + n_tokens, target][..., None]


def _pick(rng: np.random.Generator, starts: np.ndarray, count: int | None, split: str, where: str) -> np.ndarray:
    if count is None:
        return starts
    if not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"n_{split}: expected an integer >= 1 or None, got {count!r}")
    if count > len(starts):
        raise DataError(
            f"n_{split}={count} windows requested, but the {split} range ({where}) holds only "
            f"{len(starts)}; lower n_{split}, the stride or n_tokens, or use a longer file"
        )
    return np.sort(starts[rng.choice(len(starts), size=count, replace=False)])


def check_sources_agree(full: Path, times: np.ndarray, values: np.ndarray, excerpt: Path, cache_dir: Path, *,
                        wind_fill: WindFill = 0.0, hourly: Hourly = "last") -> None:
    """The task period read from a full file must be the checksummed excerpt's, value for value: where
    both are present the full file wins (it is found first), so a full file whose January 2009 differs
    would silently replace the published data. A disagreement is one line naming both files."""
    ex_times, ex_values, _ = hourly_arrays(excerpt, cache_dir=cache_dir, wind_fill=wind_fill, hourly=hourly, check=True,
                                           period="january2009")
    if times.shape == ex_times.shape and (times == ex_times).all() and np.array_equal(values, ex_values):
        return
    if times.shape != ex_times.shape or not (times == ex_times).all():
        what = f"{len(times)} hours ({times[0]} to {times[-1]}) against the excerpt's {len(ex_times)} ({ex_times[0]} to {ex_times[-1]})"
    else:
        differ = ~np.isclose(values, ex_values, rtol=0.0, atol=0.0)
        row = int(np.argwhere(differ)[0][0])
        what = f"{int(differ.sum())} of {differ.size} hourly values differ, the first at {times[row]}"
    raise DataError(
        f"{full}: its task period (January 2009 to {TASK_LAST}) is not the checksummed excerpt {excerpt}: {what}; "
        f"replace {full.name} with the canonical file or remove it (the excerpt alone gives the task)")


def load_spec(spec, dtype: torch.dtype, **options: Any) -> SupervisedData:
    """The windows a :class:`~resgd.data.spec.DatasetSpec` names (the registry's loader of the Jena task)."""
    return load_jena(n_tokens=spec.n_tokens, n_train=spec.n_train, n_test=spec.n_test, seed=spec.seed, dtype=dtype,
                     **options)


@dataclass(frozen=True)
class Preprocessing:
    """The task's preprocessing, each a companion's choice (the module docstring says each): windows
    every ``stride`` hours; the first ``train_fraction`` of the hours for training, ``gap_hours``
    before the held-out range (None: one window, ``2 n``); failed wind readings set to ``wind_fill``;
    each hour's ``hourly`` reading; the task's ``period`` (:data:`PERIODS`)."""

    stride: int = 1
    train_fraction: float = 0.7
    gap_hours: int | None = None
    wind_fill: WindFill = 0.0
    hourly: Hourly = "last"
    period: Period = "january2009"

    def __post_init__(self) -> None:
        if not isinstance(self.stride, int) or self.stride < 1:
            raise ValueError(f"stride: expected an integer >= 1, got {self.stride!r}")


BOOK = Preprocessing()
"""The book's preprocessing (every source gives the same task: January 2009, the 11 non-wind variables)."""


def load_jena(
    n_tokens: int = 24,
    n_train: int | None = 256,
    n_test: int | None = 256,
    seed: int = 0,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    allow_download: bool = True,
    allow_standin: bool = True,
    dtype: torch.dtype = torch.float64,
    *,
    preprocessing: Preprocessing = BOOK,
    check_canonical: bool = True,
    standin_days: int = DEFAULT_STANDIN_DAYS,
    standin_seed: int = 0,
    timeout: float = download.DEFAULT_TIMEOUT_S,
    source: Source = "auto",
) -> SupervisedData:
    """Supervised windows of the Jena climate series: ``X (N, n, 11)``, ``Y (N, n, 1)``.

    ``preprocessing``: :class:`Preprocessing` (the book's by default: January 2009, the same task from
    every source). ``source``: ``"auto"`` (the real file where found: :func:`locate_jena`, else the
    stand-in) or ``"standin"`` (the synthetic stand-in even where real data exist: the book's
    sensitivity row). ``n_train``/``n_test``: how many windows to draw (None = all windows of the range).
    ``seed`` draws the windows; ``standin_seed`` and ``standin_days`` shape the synthetic
    stand-in, used only when the real file is neither found nor downloadable and
    ``allow_standin`` is True. See the module docstring for every preprocessing choice.
    """
    if not isinstance(n_tokens, int) or n_tokens < 1:
        raise ValueError(f"n_tokens: expected an integer >= 1, got {n_tokens!r}")
    check_choice("source", source, SOURCES)
    p = preprocessing
    data_root, cache_root = resolve_data_dir(data_dir), download_cache_dir(cache_dir)
    path, is_standin, reason = _source_file(
        data_root, cache_root, source, allow_download=allow_download, allow_standin=allow_standin,
        check=check_canonical, timeout=timeout, standin_days=standin_days, standin_seed=standin_seed,
    )
    times, raw_values, facts = hourly_arrays(
        path, cache_dir=cache_root, wind_fill=p.wind_fill, hourly=p.hourly, check=check_canonical and not is_standin,
        advice=bad_file_advice(path, JENA_RELATIVE_PATH, data_root, allow_download), period=p.period,
    )
    excerpt_path = data_root / EXCERPT_RELATIVE_PATH if data_root is not None else None
    if not is_standin and p.period == "january2009" and not is_excerpt(path) and excerpt_path is not None \
            and excerpt_path.is_file():
        check_sources_agree(path, times, raw_values, excerpt_path, cache_root, wind_fill=p.wind_fill, hourly=p.hourly)
    (X_train, Y_train, first_train), (X_test, Y_test, first_test), window_facts = _windows(
        times, raw_values, n_tokens, n_train, n_test, seed, p)
    info = {
        "source_file": str(path),
        "n_rows_10min": facts["n_rows"],
        "n_rows_used": facts["n_rows_used"],
        "period": p.period,
        "excerpt": bool(facts["excerpt"]) and not is_standin,
        "n_hours": len(times),
        **{name: facts[name] for name in ("n_wind_replaced", "n_hours_filled", "n_exact_repeats", "n_missing_steps",
                                          "longest_gap_minutes")},
        "canonical": bool(facts["canonical"]) and not is_standin,
        "standin_reason": reason if is_standin else None,
        **window_facts,
        "params": {
            "seed": seed, "stride": p.stride, "train_fraction": p.train_fraction, "wind_fill": p.wind_fill,
            "hourly": p.hourly, "standin_days": standin_days if is_standin else None,
            "standin_seed": standin_seed if is_standin else None,
        },
    }
    as_tensor = lambda array: torch.as_tensor(np.ascontiguousarray(array), dtype=dtype)  # noqa: E731
    return SupervisedData(
        name="jena", X_train=as_tensor(X_train), Y_train=as_tensor(Y_train), X_test=as_tensor(X_test),
        Y_test=as_tensor(Y_test), feature_names=NONWIND_NAMES,
        source_label=STANDIN_ASKED_LABEL if source == "standin" else
        source_label(is_standin, bool(facts["canonical"]), bool(facts["excerpt"]), p.period),
        is_standin=is_standin, index_train=first_train.astype("datetime64[h]"),
        index_test=first_test.astype("datetime64[h]"), info=info,
    )


def _source_file(data_root: Path | None, cache_root: Path, source: Source, *, allow_download: bool, allow_standin: bool,
                 check: bool, timeout: float, standin_days: int, standin_seed: int) -> tuple[Path, bool, str]:
    """The file :func:`load_jena` reads, whether it is the synthetic stand-in, and why the stand-in: the
    real file where found (:func:`locate_jena`) unless ``source`` asks for the stand-in."""
    if source == "standin":
        path, looked, reason = None, [], "the stand-in was asked for (source='standin')"
    else:
        path, looked, reason = locate_jena(data_root, cache_root, allow_download=allow_download, check=check, timeout=timeout)
    if path is not None:
        return path, False, reason
    if not allow_standin:
        raise DataError(f"{_not_found(looked, reason)} Or pass allow_standin=True to run on a synthetic stand-in.")
    return ensure_standin(cache_root, days=standin_days, seed=standin_seed), True, reason


def _windows(times: np.ndarray, raw_values: np.ndarray, n_tokens: int, n_train: int | None, n_test: int | None, seed: int,
             p: Preprocessing) -> tuple[tuple, tuple, dict[str, Any]]:
    """``(X, Y, first hours)`` of the drawn training and held-out windows, standardized with the
    training range's statistics, and the facts of the split."""
    train_end, test_start = split_ranges(len(times), n_tokens, p.train_fraction, p.gap_hours)
    train_starts = window_starts(0, train_end, 2 * n_tokens, p.stride)
    test_starts = window_starts(test_start, len(times), 2 * n_tokens, p.stride)
    mean = raw_values[:train_end].mean(axis=0)
    std = raw_values[:train_end].std(axis=0)
    std = np.where(std > 0, std, 1.0)
    values = (raw_values - mean) / std

    rng = np.random.default_rng(seed)
    span = lambda lo, hi: f"hours {lo}..{hi - 1}, window {2 * n_tokens} h, stride {p.stride}"  # noqa: E731
    picked_train = _pick(rng, train_starts, n_train, "train", span(0, train_end))
    picked_test = _pick(rng, test_starts, n_test, "test", span(test_start, len(times)))
    target = NONWIND_NAMES.index(TARGET_NAME)
    stamp = lambda i: str(times[min(i, len(times) - 1)])  # noqa: E731
    facts = {
        "train_hours": [stamp(0), stamp(train_end - 1)],
        "test_hours": [stamp(test_start), stamp(len(times) - 1)],
        "gap_hours": test_start - train_end,
        "n_train_windows_available": len(train_starts),
        "n_test_windows_available": len(test_starts),
        "target": TARGET_NAME,
        "train_mean": dict(zip(NONWIND_NAMES, mean.tolist())),
        "train_std": dict(zip(NONWIND_NAMES, std.tolist())),
    }
    return ((*cut_windows(values, picked_train, n_tokens, target), times[picked_train]),
            (*cut_windows(values, picked_test, n_tokens, target), times[picked_test]), facts)
