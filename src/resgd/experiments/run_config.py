"""One training run of the empirical section, complete: :class:`RunConfig` and its cache key.

:class:`RunConfig` holds the data set, the :class:`~resgd.core.model.ModelConfig`, the
:class:`~resgd.core.trainer.GDConfig`, the seed and the dtype; frozen and hashable.
:func:`entry_key` (the one key function of every cached quantity) hashes the complete
configuration, a fingerprint of the loaded data and the arithmetic, so a cached result is never
served for another configuration, data or arithmetic; the code is proven otherwise (its docstring).
Studies build their RunConfigs with :meth:`resgd.experiments.study.Settings.config`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..core.model import ModelConfig
from ..core.trainer import GDConfig
from ..data.spec import DTYPES, DatasetSpec, data_fingerprint
from ..pipeline.cache import hash_key
from ..validation import ConfigError, check_choice


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines one training run (frozen and hashable).

    ``seed`` seeds the initial weights (the data sample is fixed by ``dataset.seed``).
    ``test_metrics``: whether the run's table gets its end-of-run test loss and accuracies (NaN
    otherwise); the robustness map does not use them, and on its small training sets evaluating
    the larger test sets cost a third of its time.
    """

    dataset: DatasetSpec
    model: ModelConfig
    gd: GDConfig
    seed: int = 0
    dtype: str = "float64"
    test_metrics: bool = True

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
        if not isinstance(self.test_metrics, bool):
            raise ConfigError(f"RunConfig.test_metrics: expected True or False, got {self.test_metrics!r}")
        if self.model.d != self.dataset.d:
            raise ConfigError(f"RunConfig: model.d = {self.model.d} but data set {self.dataset.name!r} has d = {self.dataset.d}")
        if self.model.pooling != self.dataset.pooling:
            raise ConfigError(
                f"RunConfig: model.pooling = {self.model.pooling!r} but data set {self.dataset.name!r} "
                f"needs pooling = {self.dataset.pooling!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {"dataset": asdict(self.dataset), "model": asdict(self.model), "gd": asdict(self.gd),
                "seed": self.seed, "dtype": self.dtype, "test_metrics": self.test_metrics}


def entry_key(config: RunConfig, kind: str = "run", *, dtype: str | None = None,
              fingerprint: str | None = None) -> str:
    """The one cache key of every quantity derived from a run's configuration (a training run, its
    L̂, a probe): SHA-256 of ``kind``, the complete configuration, the data's fingerprint and the
    arithmetic that computes it (:func:`resgd.infra.arithmetic.describe`).

    What the numbers depend on besides the code, and nothing else: the code is not in the key. A
    results-store entry is proven by executing today's code again (``make verify``), and a run-cache
    entry records the code that computed it and is used only by the same code
    (:class:`resgd.pipeline.cache.ResultsCache`). So a docstring edit keeps every key, and an edit
    that moves a number cannot pass ``make verify`` until ``make results`` refreshes the store.

    ``dtype`` overrides the configuration's (L̂ is computed in float64 whatever the run's dtype);
    ``fingerprint`` defaults to :func:`data_fingerprint` of the configuration's data set in that dtype.
    The key's description (kind, configuration, data) stays known to this process
    (:func:`key_description`): the store files it with the entry, to compute it again."""
    from ..infra.arithmetic import describe

    dtype = config.dtype if dtype is None else dtype
    payload = {
        "kind": kind,
        "config": {**config.to_dict(), "dtype": dtype},
        "data": data_fingerprint(config.dataset, dtype) if fingerprint is None else fingerprint,
        "arithmetic": describe(),
    }
    key = hash_key(payload)
    _DESCRIBED[key] = {"kind": kind, "config": config.to_dict(), "dtype": dtype, "data": payload["data"]}
    return key


_DESCRIBED: dict[str, dict[str, Any]] = {}


def key_description(key: str) -> dict[str, Any] | None:
    """``{kind, config, dtype, data}`` of a key this process made with :func:`entry_key` (else None)."""
    return _DESCRIBED.get(key)


def config_from_dict(described: dict[str, Any]) -> RunConfig:
    """The :class:`RunConfig` of :meth:`RunConfig.to_dict` (lists, as JSON gives them back, become tuples)."""
    def tuples(value):
        if isinstance(value, list):
            return tuple(tuples(v) for v in value)
        if isinstance(value, dict):
            return {k: tuples(v) for k, v in value.items()}
        return value

    try:
        d = tuples(described)
        return RunConfig(dataset=DatasetSpec(**d["dataset"]), model=ModelConfig(**d["model"]), gd=GDConfig(**d["gd"]),
                         seed=d["seed"], dtype=d["dtype"], test_metrics=d["test_metrics"])
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"a run configuration that cannot be read back ({type(exc).__name__}: {exc})") from None


def config_key(config: RunConfig, *, fingerprint: str | None = None) -> str:
    """A training run's cache key (:func:`entry_key` of kind ``"run"``)."""
    return entry_key(config, "run", fingerprint=fingerprint)
