"""The paper's empirical section as library code: configurations, cached runs, sweeps, presets.

What the paper reports (its Figs. 1, 3a and 3b, on Jena climate and SST-2): single-layer models
with the residual connection (β = 1) train faster than without (β = 0); a larger residual
weight β converges faster; deeper models (L = 2, 6, 10) with residuals reach a lower training
loss faster than without. This module reproduces those experiments; every size and every
choice we had to make lives in :func:`preset` / :class:`Settings` (the one place the notebooks
and the command line ``python -m resgd reproduce`` read them from).

The building blocks:

* :class:`RunConfig` — one training run, complete (data set, :class:`~resgd.model.ModelConfig`,
  :class:`~resgd.train.GDConfig`, seed, dtype); frozen and hashable.
* :func:`run` — one run as a tidy table (the trainer's history plus configuration columns),
  cached on disk under a key that hashes the complete configuration, ``resgd.__version__`` and
  a fingerprint of the loaded data (:func:`config_key`).
* :func:`sweep` — many runs; computes only the ones missing from the cache (an interrupted
  sweep resumes), in parallel with joblib (loky by default; a Dask or Ray backend set with
  ``joblib.parallel_config`` runs it unchanged, because workers only compute and the calling
  process writes the cache).
* :func:`choose_lr` — the step-size rule; :func:`run_experiments` — the whole section for one
  data set; :func:`reproduce` — figures, tables and claim verdicts without Jupyter.

Companion's choices (the paper's text was not available to us) are listed, with the parameter
that holds each, by :func:`choices_table`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.std import tqdm  # plain text bar: no ipywidgets warning in notebooks

from .atomic import write_with
from .model import ModelConfig, forward, init_params
from .threads import torch_threads
from .train import DivergenceError, GDConfig, loss_from_output, train_gd
from .validation import ConfigError, check_choice

DATASETS = ("jena", "sst2", "toy", "toy_cls")
"""``jena`` and ``sst2`` are the paper's; ``toy``/``toy_cls`` are tiny synthetic sets for tests."""
PAPER_DATASETS = ("jena", "sst2")
RESULTS_ENV = "RESGD_RESULTS_DIR"
DTYPES = {"float64": torch.float64, "float32": torch.float32}
FEATURES = {"jena": 14, "sst2": 50, "toy": 6, "toy_cls": 6}
POOLING = {"jena": "none", "sst2": "mean", "toy": "none", "toy_cls": "mean"}
CLASSIFICATION = frozenset({"sst2", "toy_cls"})
EXPERIMENTS = ("beta", "depth")
FIGURE_KINDS = ("residual", "beta", "depth", "conditioning", "rate")

CONFIG_COLUMNS = (
    "experiment", "dataset", "is_standin", "source_label", "n_train", "n_tokens", "beta", "n_layers",
    "d_qk", "m", "seed", "lr", "iterations", "reduction", "diverged", "diverged_at", "loss_zero",
    "test_loss", "train_acc", "test_acc", "key",
)
"""Columns :func:`run` adds to the trainer's history (constant within one run)."""


# --------------------------------------------------------------------------- data sets

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
        check_choice("DatasetSpec.name", self.name, DATASETS)
        for attr in ("n_train", "n_tokens"):
            value = getattr(self, attr)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"DatasetSpec.{attr}: expected an integer >= 1, got {value!r}")
        if self.n_test is not None and (not isinstance(self.n_test, int) or self.n_test < 1):
            raise ConfigError(f"DatasetSpec.n_test: expected None or an integer >= 1, got {self.n_test!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ConfigError(f"DatasetSpec.seed: expected an integer, got {self.seed!r}")

    @property
    def d(self) -> int:
        return FEATURES[self.name]

    @property
    def pooling(self) -> str:
        return POOLING[self.name]

    @property
    def is_classification(self) -> bool:
        return self.name in CLASSIFICATION


def _toy(spec: DatasetSpec, dtype: torch.dtype):
    """Tiny synthetic data for tests: per-token regression (``toy``) or pooled ±1 labels (``toy_cls``)."""
    from .data.dataset import SupervisedData

    gen = torch.Generator().manual_seed(1000 + spec.seed)
    d, n = spec.d, spec.n_tokens
    n_test = spec.n_test or spec.n_train
    X = torch.randn(spec.n_train + n_test, n, d, generator=gen, dtype=torch.float64)
    w = torch.randn(d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    if spec.name == "toy":
        Y = (0.5 * X @ w + 0.5 * X.mean(dim=1, keepdim=True) @ w)[..., None]
        mask = None
    else:
        lengths = torch.randint(max(1, n // 2), n + 1, (X.shape[0],), generator=gen)
        mask = torch.arange(n)[None, :] < lengths[:, None]
        X = X * mask[..., None]
        Y = torch.where((X.sum(dim=1) / lengths[:, None]) @ w >= 0, 1.0, -1.0)[:, None].to(torch.float64)
    cut = spec.n_train
    split = lambda t: (None, None) if t is None else (t[:cut], t[cut:])  # noqa: E731
    (X_tr, X_te), (Y_tr, Y_te), (m_tr, m_te) = split(X), split(Y), split(mask)
    return SupervisedData(
        name=spec.name, X_train=X_tr.to(dtype), Y_train=Y_tr.to(dtype), X_test=X_te.to(dtype),
        Y_test=Y_te.to(dtype), feature_names=tuple(f"x{i}" for i in range(d)),
        source_label="SYNTHETIC toy data (tests only)", is_standin=True, mask_train=m_tr, mask_test=m_te,
    )


@lru_cache(maxsize=8)
def load_dataset(spec: DatasetSpec, dtype: str = "float64"):
    """The data of ``spec`` (a :class:`resgd.data.SupervisedData`), loaded once per process.

    ``jena``/``sst2`` go through :func:`resgd.data.load_jena` / :func:`resgd.data.load_sst2`
    (so ``$RESGD_DATA_DIR`` and the data cache apply); the Jena loader falls back to its
    labelled synthetic stand-in when the real file is absent.
    """
    check_choice("dtype", dtype, DTYPES)
    torch_dtype = DTYPES[dtype]
    if spec.name == "jena":
        from .data import load_jena

        return load_jena(n_tokens=spec.n_tokens, n_train=spec.n_train, n_test=spec.n_test, seed=spec.seed, dtype=torch_dtype)
    if spec.name == "sst2":
        from .data import load_sst2

        return load_sst2(n_train=spec.n_train, n_tokens=spec.n_tokens, seed=spec.seed, n_dev=spec.n_test, dtype=torch_dtype)
    return _toy(spec, torch_dtype)


@lru_cache(maxsize=8)
def data_fingerprint(spec: DatasetSpec, dtype: str = "float64") -> str:
    """A hash of the loaded tensors and their source: part of every cache key, so results on the
    stand-in are never served once the real data are there (or the other way round)."""
    data = load_dataset(spec, dtype)
    digest = hashlib.sha256(f"{data.name}|{data.source_label}|{data.is_standin}".encode())
    for tensor in (data.X_train, data.Y_train, data.mask_train, data.X_test, data.Y_test, data.mask_test):
        digest.update(b"|" if tensor is None else tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


# --------------------------------------------------------------------------- one run

@dataclass(frozen=True)
class RunConfig:
    """Everything that determines one training run (frozen and hashable).

    ``seed`` seeds the initial weights (the data sample is fixed by ``dataset.seed``).
    """

    dataset: DatasetSpec
    model: ModelConfig
    gd: GDConfig
    seed: int = 0
    dtype: str = "float64"

    def __post_init__(self) -> None:
        if not isinstance(self.dataset, DatasetSpec):
            raise ConfigError(f"RunConfig.dataset: expected a DatasetSpec, got {type(self.dataset).__name__}")
        if not isinstance(self.model, ModelConfig):
            raise ConfigError(f"RunConfig.model: expected a ModelConfig, got {type(self.model).__name__}")
        if not isinstance(self.gd, GDConfig):
            raise ConfigError(f"RunConfig.gd: expected a GDConfig, got {type(self.gd).__name__}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ConfigError(f"RunConfig.seed: expected an integer, got {self.seed!r}")
        check_choice("RunConfig.dtype", self.dtype, DTYPES)
        if self.model.d != self.dataset.d:
            raise ConfigError(f"RunConfig: model.d = {self.model.d} but data set {self.dataset.name!r} has d = {self.dataset.d}")
        if self.model.pooling != self.dataset.pooling:
            raise ConfigError(
                f"RunConfig: model.pooling = {self.model.pooling!r} but data set {self.dataset.name!r} "
                f"needs pooling = {self.dataset.pooling!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {"dataset": asdict(self.dataset), "model": asdict(self.model), "gd": asdict(self.gd),
                "seed": self.seed, "dtype": self.dtype}


def config_key(config: RunConfig, *, version: str | None = None, fingerprint: str | None = None) -> str:
    """The cache key: SHA-256 of the complete configuration, the library version and the data.

    ``version`` defaults to ``resgd.__version__`` (read at call time); ``fingerprint`` to
    :func:`data_fingerprint` of the configuration's data set.
    """
    import resgd

    payload = {
        "config": config.to_dict(),
        "version": resgd.__version__ if version is None else version,
        "data": data_fingerprint(config.dataset, config.dtype) if fingerprint is None else fingerprint,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:24]


def resolve_results_dir(directory: str | os.PathLike | None = None) -> Path:
    """Where results go: the argument, else ``$RESGD_RESULTS_DIR``, else ``./results``."""
    return Path(directory or os.environ.get(RESULTS_ENV) or "results")


def resolve_cache_dir(directory: str | os.PathLike | None = None) -> Path:
    """The run cache: the argument, else ``<results_dir()>/cache``."""
    return Path(directory) if directory else resolve_results_dir() / "cache"


def _entry(directory: Path, key: str) -> Path:
    return directory / f"{key}.pkl"


def _read_entry(path: Path) -> pd.DataFrame | None:
    """A cached run, or None if absent or unreadable (then it is simply recomputed)."""
    if not path.is_file():
        return None
    try:
        frame = pd.read_pickle(path, compression=None)
    except Exception:  # noqa: BLE001 - a damaged entry is a cache miss
        return None
    return frame if isinstance(frame, pd.DataFrame) else None


def _write_entry(path: Path, frame: pd.DataFrame) -> None:
    write_with(path, lambda tmp: frame.to_pickle(tmp, compression=None, protocol=pickle.HIGHEST_PROTOCOL))


def _accuracy(Y_hat: torch.Tensor, Y: torch.Tensor) -> float:
    """Fraction of samples whose output sign matches the ±1 label (output 0 counts as −1)."""
    predicted = torch.where(Y_hat > 0, 1.0, -1.0).to(Y.dtype)
    return float((predicted == Y).to(torch.float64).mean())


def _compute(config: RunConfig) -> pd.DataFrame:
    """Train once (no cache): the trainer's history plus configuration and end-of-run columns.

    A run that diverges keeps its partial history and gets ``diverged=True`` and
    ``diverged_at`` (the last iteration recorded); its end-of-run metrics are NaN.
    """
    data = load_dataset(config.dataset, config.dtype)
    dtype = DTYPES[config.dtype]
    cfg, gd = config.model, config.gd
    params = init_params(cfg, config.seed, dtype=dtype)
    try:
        result = train_gd(params, cfg, data.X_train, data.Y_train, gd, mask=data.mask_train)
        history, final, diverged = result.history, result.params, False
    except DivergenceError as err:
        history, final, diverged = err.history, None, True
    with torch.no_grad():
        zeros = torch.zeros_like(data.Y_train)
        loss_zero = float(loss_from_output(zeros, data.Y_train, data.mask_train, gd.reduction))
        test_loss = train_acc = test_acc = math.nan
        if final is not None:
            Y_hat_test = forward(final, cfg, data.X_test, data.mask_test)
            test_loss = float(loss_from_output(Y_hat_test, data.Y_test, data.mask_test, gd.reduction))
            if config.dataset.is_classification:
                train_acc = _accuracy(forward(final, cfg, data.X_train, data.mask_train), data.Y_train)
                test_acc = _accuracy(Y_hat_test, data.Y_test)
    frame = history.copy()
    columns = {
        "experiment": "",
        "dataset": config.dataset.name,
        "is_standin": bool(data.is_standin),
        "source_label": data.source_label,
        "n_train": config.dataset.n_train,
        "n_tokens": config.dataset.n_tokens,
        "beta": float(cfg.beta),
        "n_layers": cfg.n_layers,
        "d_qk": cfg.d_qk,
        "m": cfg.m,
        "seed": config.seed,
        "lr": float(gd.lr),
        "iterations": gd.iterations,
        "reduction": gd.reduction,
        "diverged": diverged,
        "diverged_at": float(history["iteration"].iloc[-1]) if diverged and len(history) else math.nan,
        "loss_zero": loss_zero,
        "test_loss": test_loss,
        "train_acc": train_acc,
        "test_acc": test_acc,
    }
    for name, value in columns.items():
        frame[name] = value
    return frame


def run(config: RunConfig, cache_dir: str | os.PathLike | None = None, *, refresh: bool = False) -> pd.DataFrame:
    """One run as a tidy table, from the cache when there (computed and cached otherwise)."""
    path = _entry(resolve_cache_dir(cache_dir), config_key(config))
    frame = None if refresh else _read_entry(path)
    if frame is None:
        frame = _compute(config).assign(key=path.stem)
        _write_entry(path, frame)
    return frame


def _worker(key: str, config: RunConfig) -> tuple[str, pd.DataFrame]:
    """What a joblib worker runs: pure computation, no file access (so any backend can run it)."""
    torch.set_num_threads(1)
    return key, _compute(config).assign(key=key)


def _cost(config: RunConfig) -> int:
    return config.model.n_layers * config.gd.iterations * config.dataset.n_train


def sweep(
    configs: Iterable[RunConfig],
    n_jobs: int = 2,
    cache_dir: str | os.PathLike | None = None,
    *,
    backend: str | None = None,
    progress: bool = False,
    desc: str = "runs",
) -> pd.DataFrame:
    """Every run of ``configs`` as one tidy table (in the order given; a repeated config appears once).

    Runs already in the cache are read, the others computed — so a sweep that was interrupted
    resumes where it stopped. With ``n_jobs > 1`` the missing runs go to joblib workers
    (``backend=None``: joblib's active backend, loky unless a ``joblib.parallel_config``
    context says otherwise); each worker uses one torch thread and returns its table, and this
    process writes it to the cache atomically as soon as it arrives.
    """
    configs = list(configs)
    if not isinstance(n_jobs, int) or n_jobs == 0 or n_jobs < -1:
        raise ConfigError(f"n_jobs: expected an integer >= 1 (or -1 for all cores), got {n_jobs!r}")
    directory = resolve_cache_dir(cache_dir)
    keys = [config_key(c) for c in configs]
    frames: dict[str, pd.DataFrame] = {}
    todo: dict[str, RunConfig] = {}
    for config, key in zip(configs, keys):
        if key in frames or key in todo:
            continue
        cached = _read_entry(_entry(directory, key))
        if cached is None:
            todo[key] = config
        else:
            frames[key] = cached
    order = sorted(todo, key=lambda k: -_cost(todo[k]))  # longest first: better load balance
    bar = tqdm(total=len(order), desc=desc, disable=not progress or not order, leave=False)
    try:
        for key, frame in _execute([(k, todo[k]) for k in order], n_jobs, backend):
            _write_entry(_entry(directory, key), frame)
            frames[key] = frame
            bar.update()
    finally:
        bar.close()
    if not configs:
        return pd.DataFrame()
    return pd.concat([frames[k] for k in dict.fromkeys(keys)], ignore_index=True)


def _execute(jobs: list[tuple[str, RunConfig]], n_jobs: int, backend: str | None) -> Iterator[tuple[str, pd.DataFrame]]:
    if not jobs:
        return
    if n_jobs == 1 or len(jobs) == 1:
        with torch_threads(1):
            for key, config in jobs:
                yield key, _compute(config).assign(key=key)
        return
    from joblib import Parallel, delayed

    tasks = [delayed(_worker)(key, config) for key, config in jobs]
    try:  # each result as soon as it is ready, so it is cached at once
        results = Parallel(n_jobs=n_jobs, backend=backend, return_as="generator_unordered")(tasks)
    except ValueError as err:  # a backend without result streaming (e.g. Ray's): all at the end
        if "does not support return_as" not in str(err):
            raise
        results = Parallel(n_jobs=n_jobs, backend=backend, return_as="list")(tasks)
    yield from results


# --------------------------------------------------------------------------- presets

_BASE = dict(
    betas=(0.0, 0.25, 0.5, 0.75, 1.0),
    depths=(2, 6, 10),
    lr_grid=(1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001, 3e-4, 1e-4, 3e-5),
    probe_iterations=30,
    safety=0.5,
    reduction="mean",
    record_every=10,
    rate_window=0.25,
    target_fraction=0.5,
    spearman_threshold=-0.8,
    qk_scale=1.0,
    out_scale=1.0,
    branch_scale="1/sqrt(L)",
    activation="relu",
    logit_scale="sqrt",
    dtype="float64",
)

_PRESETS = {
    ("jena", True): dict(N=64, n=24, n_test=256, iterations=300, seeds=(0, 1), widths={"d_qk": 16, "m": 64},
                         target_fraction=0.1),
    ("jena", False): dict(N=128, n=24, n_test=256, iterations=1000, seeds=(0, 1, 2), widths={"d_qk": 16, "m": 64},
                          target_fraction=0.1),
    ("sst2", True): dict(N=64, n=16, n_test=None, iterations=200, seeds=(0, 1), widths={"d_qk": 16, "m": 64},
                         target_fraction=0.5),
    ("sst2", False): dict(N=128, n=16, n_test=None, iterations=800, seeds=(0, 1, 2), widths={"d_qk": 16, "m": 64},
                          target_fraction=0.5),
    ("toy", True): dict(N=8, n=4, n_test=8, iterations=20, seeds=(0, 1), widths={"d_qk": 4, "m": 8},
                        depths=(2, 3), lr_grid=(0.3, 0.1, 0.03), probe_iterations=5),
    ("toy", False): dict(N=16, n=4, n_test=8, iterations=40, seeds=(0, 1), widths={"d_qk": 4, "m": 8},
                         depths=(2, 3), lr_grid=(0.3, 0.1, 0.03), probe_iterations=5),
}
_PRESETS[("toy_cls", True)] = _PRESETS[("toy", True)]
_PRESETS[("toy_cls", False)] = _PRESETS[("toy", False)]


def preset(dataset: str, quick: bool) -> dict[str, Any]:
    """The sizes and settings of one data set in quick or full mode — the single place for them.

    Keys: ``N`` (training samples), ``n`` (tokens), ``n_test``, ``iterations``, ``seeds``,
    ``betas``, ``depths``, ``widths`` (``d_qk``, ``m``) and the rest of :class:`Settings`.
    """
    check_choice("dataset", dataset, DATASETS)
    if not isinstance(quick, bool):
        raise ConfigError(f"quick: expected True or False, got {quick!r}")
    values = {**_BASE, **_PRESETS[(dataset, quick)]}
    values["widths"] = dict(values["widths"])
    return {"dataset": dataset, "quick": quick, **values}


@dataclass(frozen=True)
class Settings:
    """One data set's experiment settings (from :func:`preset`, with overrides)."""

    dataset: str
    quick: bool
    N: int
    n: int
    n_test: int | None
    iterations: int
    seeds: tuple[int, ...]
    betas: tuple[float, ...]
    depths: tuple[int, ...]
    d_qk: int
    m: int
    lr_grid: tuple[float, ...]
    probe_iterations: int
    safety: float
    reduction: str
    record_every: int
    rate_window: float
    target_fraction: float
    spearman_threshold: float
    qk_scale: float
    out_scale: float
    branch_scale: str
    activation: str
    logit_scale: str
    dtype: str
    data_seed: int = 0

    def __post_init__(self) -> None:
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"Settings.seeds: expected distinct seeds, got {self.seeds!r}")
        if not self.betas or not self.depths:
            raise ConfigError("Settings: betas and depths must not be empty")
        if not 0 < self.safety <= 1:
            raise ConfigError(f"Settings.safety: expected 0 < safety <= 1, got {self.safety!r}")
        if not 0 < self.rate_window <= 1:
            raise ConfigError(f"Settings.rate_window: expected a fraction in (0, 1], got {self.rate_window!r}")
        check_choice("Settings.branch_scale", self.branch_scale, ("1/sqrt(L)", "1"))

    @property
    def mode(self) -> str:
        return "quick" if self.quick else "full"

    @property
    def spec(self) -> DatasetSpec:
        return DatasetSpec(self.dataset, n_train=self.N, n_tokens=self.n, n_test=self.n_test, seed=self.data_seed)

    def model(self, beta: float, n_layers: int) -> ModelConfig:
        branch = 1.0 / math.sqrt(n_layers) if self.branch_scale == "1/sqrt(L)" else 1.0
        return ModelConfig(
            d=FEATURES[self.dataset], d_qk=self.d_qk, m=self.m, k=1, n_layers=n_layers, beta=float(beta),
            logit_scale=self.logit_scale, activation=self.activation, pooling=POOLING[self.dataset],
            qk_scale=self.qk_scale, v_scale=branch, ffn_scale=branch, out_scale=self.out_scale,
        )

    def config(self, beta: float, n_layers: int, seed: int, lr: float, iterations: int | None = None) -> RunConfig:
        iterations = self.iterations if iterations is None else iterations
        gd = GDConfig(lr=float(lr), iterations=iterations, reduction=self.reduction,
                      record_every=min(self.record_every, max(iterations, 1)))
        return RunConfig(self.spec, self.model(beta, n_layers), gd, seed=seed, dtype=self.dtype)


def settings(
    dataset: str,
    quick: bool = True,
    *,
    seed: int = 0,
    seeds: Sequence[int] | int | None = None,
    iterations: int | None = None,
    n_train: int | None = None,
    betas: Sequence[float] | None = None,
    depths: Sequence[int] | None = None,
    **overrides: Any,
) -> Settings:
    """:func:`preset` turned into :class:`Settings`; ``None`` arguments keep the preset's value.

    ``seed`` shifts everything random: the data sample (``data_seed = seed``) and the
    initialization seeds (``seed + s`` for each preset seed ``s``). ``seeds`` (a list, or a
    count) replaces the preset's seeds; ``betas``/``depths`` replace the swept values. Any other
    field of :class:`Settings` can be overridden by keyword.
    """
    values = preset(dataset, quick)
    widths = values.pop("widths")
    values.update(d_qk=widths["d_qk"], m=widths["m"])
    if seeds is None:
        seeds = tuple(seed + s for s in values["seeds"])
    elif isinstance(seeds, int):
        if seeds < 1:
            raise ConfigError(f"seeds: expected a count >= 1 or a list of seeds, got {seeds!r}")
        seeds = tuple(seed + s for s in range(seeds))
    values["seeds"] = tuple(int(s) for s in seeds)
    if iterations is not None:
        values["iterations"] = int(iterations)
    if n_train is not None:
        values["N"] = int(n_train)
    if betas is not None:
        values["betas"] = tuple(float(b) for b in betas)
    if depths is not None:
        values["depths"] = tuple(int(L) for L in depths)
    values["data_seed"] = int(seed)
    unknown = set(overrides) - set(Settings.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"settings: unknown setting(s) {sorted(unknown)}; known: {sorted(Settings.__dataclass_fields__)}")
    values.update(overrides)
    for name in ("betas", "depths", "lr_grid"):
        values[name] = tuple(values[name])
    return Settings(**values)


def choices_table(s: Settings) -> pd.DataFrame:
    """The companion's choices behind these experiments, one row each, with the parameter that holds it."""
    rows = [
        ("loss normalisation", f"reduction={s.reduction!r}: Φ = ½ Σ‖Ŷ−Y‖² / N (mean over samples); GD with step μ on it is GD on the paper's sum with step μ/N", "Settings.reduction"),
        ("widths", f"d_qk = {s.d_qk}, FFN width m = {s.m}", "preset()['widths']"),
        ("initialisation", f"every weight N(0, scale²/fan_in); qk_scale = {s.qk_scale}, out_scale = {s.out_scale}", "Settings.qk_scale, Settings.out_scale"),
        ("depth scaling of the init", "v_scale = ffn_scale = 1/√L (W_V, W_1, W_2), the same for the twins with and without residual" if s.branch_scale == "1/sqrt(L)" else "v_scale = ffn_scale = 1", "Settings.branch_scale"),
        ("residual placement", "β multiplies the skip path of both sublayers (β_ffn = β); β = 0 removes both residuals", "ModelConfig.beta, beta_ffn=None"),
        ("activation, logit scale", f"{s.activation}, logits / √d_qk" if s.logit_scale == "sqrt" else f"{s.activation}, logits / d_qk", "Settings.activation, Settings.logit_scale"),
        ("step-size rule", f"largest μ on the grid {list(s.lr_grid)} for which every β = 1 model of the comparison has a finite loss, lower after {s.probe_iterations} GD steps than at the start (seed {s.seeds[0]}), times safety {s.safety}; one μ per comparison", "Settings.lr_grid, probe_iterations, safety"),
        ("seeds", f"{len(s.seeds)} initialisation seeds {list(s.seeds)}; the data sample is fixed (data seed {s.data_seed}); curves: mean, band = min–max over seeds", "Settings.seeds, data_seed"),
        ("divergence", "a run stops when Φ exceeds 10⁶ Φ(θ⁽⁰⁾) or is not finite; it is kept (partial history, diverged=True) and its loss at T counts as +∞", "GDConfig.divergence_factor"),
        ("loss at T", "the training loss after the last iteration T, per seed; averaged over seeds", "Settings.iterations"),
        ("target loss", f"iterations to reach Φ ≤ {s.target_fraction} × Φ(Ŷ = 0), the loss of the zero predictor", "Settings.target_fraction"),
        ("measured rate", f"minus the least-squares slope of log Φ over the last {s.rate_window:.0%} of the iterations (resgd.theory.empirical_rate)", "Settings.rate_window"),
        ("predicted rate", "σ_min²(Z⁽⁰⁾)/σ_max²(Z⁽⁰⁾) of the stacked first-layer Z at initialisation, compared with measured rate / μ", "—"),
        ("claim thresholds", f"(b) holds when Spearman(β, loss at T) ≤ {s.spearman_threshold}; (a), (c) compare seed-averaged losses at T", "Settings.spearman_threshold"),
        ("precision", f"{s.dtype} throughout", "Settings.dtype"),
    ]
    return pd.DataFrame(rows, columns=["choice", "value", "parameter"])


# --------------------------------------------------------------------------- step size

def probe_stable(history: pd.DataFrame, diverged: bool) -> bool:
    """A probe is stable when it did not diverge, every loss is finite and the last is below the first."""
    loss = history["loss"].to_numpy(dtype=float)
    return (not diverged) and len(loss) > 1 and bool(np.isfinite(loss).all()) and loss[-1] < loss[0]


def choose_lr(
    s: Settings,
    n_layers: Sequence[int],
    *,
    n_jobs: int = 2,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = False,
) -> tuple[float, pd.DataFrame]:
    """The step size of one comparison and the probe table behind it.

    Rule (companion's choice): for each depth in ``n_layers``, the β = 1 model (seed
    ``s.seeds[0]``) is trained for ``s.probe_iterations`` steps at every step size of
    ``s.lr_grid``; the largest step size that is stable (:func:`probe_stable`) at every depth,
    times ``s.safety``, is the comparison's step size.
    """
    configs = [s.config(1.0, L, s.seeds[0], lr, iterations=s.probe_iterations) for L in n_layers for lr in s.lr_grid]
    runs = sweep(configs, n_jobs=n_jobs, cache_dir=cache_dir, progress=progress, desc=f"{s.dataset}: step-size probe")
    rows = []
    for (L, lr), h in runs.groupby(["n_layers", "lr"], sort=False):
        diverged = bool(h["diverged"].iloc[0])
        rows.append({"n_layers": int(L), "lr": float(lr), "loss_start": float(h["loss"].iloc[0]),
                     "loss_end": float(h["loss"].iloc[-1]), "diverged": diverged, "stable": probe_stable(h, diverged)})
    table = pd.DataFrame(rows).sort_values(["n_layers", "lr"], ascending=[True, False], ignore_index=True)
    stable = table[table["stable"]].groupby("lr")["n_layers"].nunique()
    common = [lr for lr, count in stable.items() if count == len(set(n_layers))]
    if not common:
        raise ConfigError(
            f"choose_lr: no step size in {list(s.lr_grid)} is stable for the β = 1 model at depth(s) "
            f"{list(n_layers)} on {s.dataset}; extend Settings.lr_grid downwards"
        )
    largest = max(common)
    table["chosen"] = False
    lr = largest * s.safety
    table.loc[table["lr"] == largest, "chosen"] = True
    return lr, table


# --------------------------------------------------------------------------- the section

@dataclass
class ExperimentResults:
    """Every run of one data set's experiments, and the tables the book shows."""

    settings: Settings
    data: dict[str, Any]
    lr: dict[str, float]
    probes: pd.DataFrame
    runs: pd.DataFrame
    _per_run: pd.DataFrame | None = field(default=None, repr=False)

    @property
    def is_standin(self) -> bool:
        return bool(self.data.get("is_standin", False))

    @property
    def source_label(self) -> str:
        return str(self.data.get("source_label", ""))

    def per_run(self) -> pd.DataFrame:
        if self._per_run is None:
            self._per_run = per_run_table(self.runs, target_fraction=self.settings.target_fraction,
                                          rate_window=self.settings.rate_window)
        return self._per_run

    def summary(self) -> pd.DataFrame:
        return summary_table(self.per_run())

    def curves(self, kind: str) -> pd.DataFrame:
        """Loss curves for the figure ``kind`` ∈ {"residual", "beta", "depth"}."""
        check_choice("kind", kind, ("residual", "beta", "depth"))
        runs = self.runs
        if kind == "residual":
            runs = runs[(runs["experiment"] == "beta") & runs["beta"].isin([0.0, 1.0])]
        else:
            runs = runs[runs["experiment"] == kind]
        return loss_curves(runs)

    def conditioning(self) -> pd.DataFrame:
        return conditioning_curves(self.runs)

    def rate_agreement(self) -> dict[str, float]:
        return rate_agreement(self.per_run())

    def beta_findings(self) -> dict[str, float]:
        return beta_findings(self.per_run())

    def verdicts(self):
        from .claims import evaluate

        return evaluate(self.per_run(), self.settings.dataset, threshold=self.settings.spearman_threshold)


def beta_configs(s: Settings, lr: float) -> list[RunConfig]:
    return [s.config(beta, 1, seed, lr) for beta in s.betas for seed in s.seeds]


def depth_configs(s: Settings, lr: float) -> list[RunConfig]:
    return [s.config(beta, L, seed, lr) for L in s.depths for beta in (1.0, 0.0) for seed in s.seeds]


def run_experiments(
    s: Settings,
    *,
    n_jobs: int = 2,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = False,
) -> ExperimentResults:
    """The whole empirical section for one data set: step sizes, the β sweep (which holds the
    Fig. 1 pair β ∈ {0, 1}) and the depth sweep, all cached."""
    data = load_dataset(s.spec, s.dtype)
    lr_beta, probe_beta = choose_lr(s, [1], n_jobs=n_jobs, cache_dir=cache_dir, progress=progress)
    lr_depth, probe_depth = choose_lr(s, list(s.depths), n_jobs=n_jobs, cache_dir=cache_dir, progress=progress)
    probes = pd.concat([probe_beta.assign(comparison="beta"), probe_depth.assign(comparison="depth")], ignore_index=True)
    beta_runs = sweep(beta_configs(s, lr_beta), n_jobs=n_jobs, cache_dir=cache_dir, progress=progress, desc=f"{s.dataset}: β sweep")
    depth_runs = sweep(depth_configs(s, lr_depth), n_jobs=n_jobs, cache_dir=cache_dir, progress=progress, desc=f"{s.dataset}: depth sweep")
    runs = pd.concat([beta_runs.assign(experiment="beta"), depth_runs.assign(experiment="depth")], ignore_index=True)
    description = data.describe()
    summary = {k: description[k] for k in ("name", "source_label", "is_standin", "n_train", "n_test", "n_tokens", "d")}
    return ExperimentResults(settings=s, data=summary, lr={"beta": lr_beta, "depth": lr_depth}, probes=probes, runs=runs)


# --------------------------------------------------------------------------- tables

RUN_KEYS = ["experiment", "dataset", "beta", "n_layers", "lr", "seed"]
SPIKE_FACTOR = 1.5
"""A loss spike: one GD step that multiplies Φ by more than this (counted in ``loss_spikes``)."""


def per_run_table(runs: pd.DataFrame, *, target_fraction: float = 0.5, rate_window: float = 0.25) -> pd.DataFrame:
    """One row per run: loss at T (+∞ when diverged), iterations to the target loss, the number
    of loss spikes (steps with Φ(t+1) > 1.5 Φ(t)), the measured rate over the last window, the
    spectrum of Z⁽⁰⁾ and the end-of-run metrics."""
    from .theory import empirical_rate

    rows = []
    for keys, h in runs.groupby(RUN_KEYS, sort=False):
        h = h.sort_values("iteration")
        first = h.iloc[0]
        T = int(first["iterations"])
        diverged = bool(first["diverged"])
        target = target_fraction * float(first["loss_zero"])
        reached = h.loc[h["loss"] <= target, "iteration"]
        window = max(2, int(round(rate_window * T)))
        sigma = h.dropna(subset=["sigma_min_Z"])
        smin0, smax0 = float(sigma["sigma_min_Z"].iloc[0]), float(sigma["sigma_max_Z"].iloc[0])
        rate = math.nan if diverged else empirical_rate(h, start=T - window + 1, stop=T + 1)
        rows.append({
            **dict(zip(RUN_KEYS, keys)),
            "iterations": T,
            "diverged": diverged,
            "diverged_at": first["diverged_at"],
            "loss_0": float(first["loss"]),
            "loss_T": math.inf if diverged else float(h["loss"].iloc[-1]),
            "target_loss": target,
            "iterations_to_target": float(reached.iloc[0]) if len(reached) else math.nan,
            "loss_spikes": int((h["ratio"] > SPIKE_FACTOR).sum()),
            "rate": rate,
            "rate_per_lr": rate / float(first["lr"]) if math.isfinite(rate) else math.nan,
            "sigma_min_Z0": smin0,
            "sigma_max_Z0": smax0,
            "rate_ratio_Z0": (smin0 / smax0) ** 2 if smax0 > 0 else 0.0,
            "sigma_min_ZT": float(sigma["sigma_min_Z"].iloc[-1]),
            "test_loss": float(first["test_loss"]),
            "train_acc": float(first["train_acc"]),
            "test_acc": float(first["test_acc"]),
            "is_standin": bool(first["is_standin"]),
            "source_label": str(first["source_label"]),
        })
    return pd.DataFrame(rows)


def summary_table(per_run: pd.DataFrame) -> pd.DataFrame:
    """The results table: one row per configuration, seeds aggregated (mean; the loss at T is
    +∞ when any seed diverged, and ``diverged`` counts them)."""
    rows = []
    for (experiment, L, beta, lr), g in per_run.groupby(["experiment", "n_layers", "beta", "lr"], sort=False):
        reached = g["iterations_to_target"].dropna()
        row = {
            "experiment": experiment, "n_layers": int(L), "beta": float(beta), "lr": float(lr),
            "seeds": len(g),
            "diverged": int(g["diverged"].sum()),
            "loss_T": float(g["loss_T"].mean()),
            "loss_T_min": float(g["loss_T"].min()),
            "loss_T_max": float(g["loss_T"].max()),
            "iterations_to_target": float(reached.median()) if len(reached) else math.nan,
            "reached_target": f"{len(reached)}/{len(g)}",
            "loss_spikes": int(g["loss_spikes"].sum()),
            "rate": float(g["rate"].mean()),
            "sigma_min_Z0": float(g["sigma_min_Z0"].mean()),
            "rate_ratio_Z0": float(g["rate_ratio_Z0"].mean()),
            "test_loss": float(g["test_loss"].mean()),
        }
        if g["train_acc"].notna().any() or g["test_acc"].notna().any():
            row["train_acc"] = float(g["train_acc"].mean())
            row["test_acc"] = float(g["test_acc"].mean())
        rows.append(row)
    table = pd.DataFrame(rows)
    return table.sort_values(["experiment", "n_layers", "beta"], ascending=[True, True, False], ignore_index=True)


def _band(frame: pd.DataFrame, by: list[str], value: str, center: str = "mean") -> pd.DataFrame:
    """Per group: the ``center`` ("mean", or "geomean" for quantities spanning decades) and the
    min–max band over the runs."""
    grouped = frame.groupby(by, sort=True)[value]
    out = grouped.agg(center="mean", lo="min", hi="max", n_runs="count").reset_index()
    if center == "geomean":
        logs = np.log(frame[value].where(frame[value] > 0))
        out["center"] = np.exp(logs.groupby([frame[k] for k in by], sort=True).mean()).to_numpy()
    return out


def loss_curves(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy curves for the loss figures: per (experiment, β, L) the mean over the seeds that did
    not diverge with a min–max band (``kind="mean"``), plus each diverged run's partial history
    (``kind="diverged"``, one per seed) so the figure can show it."""
    keys = ["experiment", "beta", "n_layers", "lr"]
    ok = runs[~runs["diverged"]]
    mean = _band(ok, keys + ["iteration"], "loss").assign(kind="mean", seed=-1)
    n_seeds = runs.groupby(keys)["seed"].nunique().rename("n_seeds")
    n_div = runs[runs["diverged"]].groupby(keys)["seed"].nunique().rename("n_diverged")
    bad = runs[runs["diverged"]][keys + ["iteration", "seed", "loss"]].rename(columns={"loss": "center"})
    bad = bad.assign(lo=bad["center"], hi=bad["center"], n_runs=1, kind="diverged")
    curves = pd.concat([mean, bad], ignore_index=True)
    curves = curves.join(n_seeds, on=keys).join(n_div, on=keys)
    curves["n_diverged"] = curves["n_diverged"].fillna(0).astype(int)
    curves["is_standin"] = bool(runs["is_standin"].any()) if len(runs) else False
    curves["source_label"] = runs["source_label"].iloc[0] if len(runs) else ""
    return curves


def conditioning_curves(runs: pd.DataFrame) -> pd.DataFrame:
    """σ_min(Z⁽ᵗ⁾) and σ_min²/σ_max²(Z⁽ᵗ⁾) of the first layer, where recorded: geometric mean and
    min–max band over the seeds that did not diverge (long format: column ``quantity``)."""
    keys = ["experiment", "beta", "n_layers", "lr", "iteration"]
    rec = runs[~runs["diverged"]].dropna(subset=["sigma_min_Z"]).copy()
    rec["rate_ratio_Z"] = (rec["sigma_min_Z"] / rec["sigma_max_Z"]) ** 2
    parts = [_band(rec, keys, q, center="geomean").assign(quantity=q) for q in ("sigma_min_Z", "rate_ratio_Z")]
    curves = pd.concat(parts, ignore_index=True)
    curves["is_standin"] = bool(runs["is_standin"].any()) if len(runs) else False
    curves["source_label"] = runs["source_label"].iloc[0] if len(runs) else ""
    return curves


def beta_findings(per_run: pd.DataFrame) -> dict[str, float]:
    """What the β sweep's losses at T say, as numbers for the prose (single layer, seeds averaged).

    ``best_beta``/``worst_beta``: the β with the lowest/highest mean loss at T;
    ``spread_pct``: (max − min)/mean of the mean losses over β > 0, in percent;
    ``seed_spread_pct``: the largest (max − min)/mean over the seeds of one β, in percent;
    ``gap0_pct``: the mean loss of β = 0 relative to the mean over β > 0, in percent (positive:
    β = 0 is worse); ``sigma_ratio``: mean σ_min(Z⁽⁰⁾) of β = 1 over that of β = 0;
    ``loss_ratio``: mean loss at T of β = 0 over that of β = 1. Diverged runs count as +∞.
    """
    rows = per_run[(per_run["experiment"] == "beta") & (per_run["n_layers"] == 1)]
    loss = rows["loss_T"].where(~rows["diverged"], math.inf)
    by_beta = loss.groupby(rows["beta"])
    means = by_beta.mean().sort_index()
    positive = means[means.index > 0]
    seed_spread = ((by_beta.max() - by_beta.min()) / by_beta.mean()).replace([np.inf, -np.inf], np.nan)
    sigma = rows.groupby("beta")["sigma_min_Z0"].mean()
    out = {
        "best_beta": float(means.idxmin()),
        "worst_beta": float(means.idxmax()),
        "spread_pct": float(100 * (positive.max() - positive.min()) / positive.mean()) if len(positive) else math.nan,
        "seed_spread_pct": float(100 * seed_spread.max()) if seed_spread.notna().any() else math.nan,
        "gap0_pct": math.nan, "sigma_ratio": math.nan, "loss_ratio": math.nan,
    }
    if 0.0 in means.index and len(positive):
        out["gap0_pct"] = float(100 * (means[0.0] / positive.mean() - 1))
    if 0.0 in means.index and 1.0 in means.index:
        out["sigma_ratio"] = float(sigma[1.0] / sigma[0.0]) if sigma[0.0] > 0 else math.inf
        out["loss_ratio"] = float(means[0.0] / means[1.0])
    return out


def rate_agreement(per_run: pd.DataFrame) -> dict[str, float]:
    """How well σ_min²/σ_max²(Z⁽⁰⁾) orders the measured rate per unit step (Spearman over runs
    that did not diverge), overall and within the single-layer β sweep."""
    from .theory import spearman

    ok = per_run[~per_run["diverged"]]
    single = ok[ok["experiment"] == "beta"]
    return {
        "spearman_all": spearman(ok["rate_ratio_Z0"], ok["rate_per_lr"]),
        "n_all": int(len(ok)),
        "spearman_beta": spearman(single["rate_ratio_Z0"], single["rate_per_lr"]),
        "n_beta": int(len(single)),
    }


# --------------------------------------------------------------------------- figures and outputs

def figure_name(dataset: str, kind: str) -> str:
    """File name (without extension) of a figure: ``<dataset>_<kind>``."""
    check_choice("kind", kind, FIGURE_KINDS)
    return f"{dataset}_{kind}"


def make_figure(results: ExperimentResults, kind: str):
    """The figure ``kind`` ∈ FIGURE_KINDS of ``results``, drawn by :mod:`resgd.plots.experiments`."""
    from .plots import experiments as plots

    check_choice("kind", kind, FIGURE_KINDS)
    name = results.settings.dataset
    if kind == "residual":
        return plots.plot_residual(results.curves("residual"), dataset=name)
    if kind == "beta":
        return plots.plot_beta_sweep(results.curves("beta"), dataset=name)
    if kind == "depth":
        return plots.plot_depth(results.curves("depth"), dataset=name)
    if kind == "conditioning":
        return plots.plot_conditioning(results.conditioning(), dataset=name)
    return plots.plot_rate(results.per_run(), dataset=name)


def claims_path(dataset: str, mode: str, directory: str | os.PathLike | None = None) -> Path:
    """``<results_dir>/claims/<dataset>_<mode>.json``."""
    check_choice("mode", mode, ("quick", "full"))
    return resolve_results_dir(directory) / "claims" / f"{dataset}_{mode}.json"


def write_outputs(results: ExperimentResults, *, results_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Write the results tables (CSV) and the claim verdicts (JSON), atomically."""
    from .claims import write_verdicts

    s = results.settings
    out = resolve_results_dir(results_dir)
    tag = f"{s.dataset}_{s.mode}"
    paths = {
        "summary": out / "tables" / f"{tag}_summary.csv",
        "per_run": out / "tables" / f"{tag}_runs.csv",
        "probes": out / "tables" / f"{tag}_probes.csv",
    }
    for name, table in (("summary", results.summary()), ("per_run", results.per_run()), ("probes", results.probes)):
        write_with(paths[name], lambda tmp, table=table: table.to_csv(tmp, index=False))
    paths["claims"] = write_verdicts(
        results.verdicts(), claims_path(s.dataset, s.mode, out),
        dataset=s.dataset, mode=s.mode,
        meta={"source_label": results.source_label, "is_standin": results.is_standin, "lr": results.lr,
              "iterations": s.iterations, "seeds": list(s.seeds), "N": s.N},
    )
    return paths


def reproduce(
    dataset: str,
    quick: bool,
    directory: str | os.PathLike | None = None,
    *,
    n_jobs: int = 2,
    progress: bool = True,
    **overrides: Any,
) -> dict[str, Path]:
    """Everything the data set's notebook makes, without Jupyter: figures (into ``directory``,
    else ``$RESGD_FIGURES_DIR``, else ``./figures``), tables and verdicts (into the results folder)."""
    import matplotlib.pyplot as plt

    from .plots import save_figure, use_style

    check_choice("dataset", dataset, PAPER_DATASETS + ("toy", "toy_cls"))
    use_style()
    results = run_experiments(settings(dataset, quick, **overrides), n_jobs=n_jobs, progress=progress)
    paths = write_outputs(results)
    for kind in FIGURE_KINDS:
        fig = make_figure(results, kind)
        paths[f"figure_{kind}"] = save_figure(fig, figure_name(dataset, kind), directory)["png"]
        plt.close(fig)
    return paths
