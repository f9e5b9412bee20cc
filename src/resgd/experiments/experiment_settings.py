"""One data set's experiment settings (:class:`Settings`, from :func:`settings`) and the init choices
they carry. Its own module because a cached run's numbers depend on it (the model and GD settings it
builds), while the study's tables, figures and page numbers do not: the cache key covers this module
and not :mod:`resgd.experiments.study` (:func:`resgd.infra.source_hash.compute_modules`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..core.model import ModelConfig
from ..core.smoothness import FAST_ITERATIONS
from ..core.trainer import GDConfig
from ..data.spec import DatasetSpec
from .. import dataset_registry as registry
from ..pipeline.presets import experiments as preset
from ..validation import ConfigError, check_choice
from .run_config import RunConfig
from .twin import matched_gains, needs_gains


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
    target_fraction: float
    depth_N: int
    depth_iterations: int
    qk_scale: float
    out_scale: float
    branch_scale: str
    activation: str
    logit_scale: str
    dtype: str
    interval_seeds: tuple[int, ...] = ()
    twin_init: str = "matched"
    start: str = "equal"
    equal_out_scale: float = 0.01
    data_seed: int = 0
    test_metrics: bool = True
    v6_seeds: tuple[int, ...] = ()
    regime_N: int = 16
    regime_iterations: int = 1000
    lhat_iterations: int = FAST_ITERATIONS
    """Power-iteration steps per term of each L̂ (the theorem's step μ = c/L̂): 20 in full mode (the
    store's); the quick smoke build takes fewer (its steps are not the book's)."""
    own_grid_stride: int = 1
    """Design v6's own-step search tries every ``own_grid_stride``-th step of ``design.OWN_GRID`` (1 in
    full mode, the pre-registered grid; the quick smoke build searches a coarser grid to stay short)."""

    def __post_init__(self) -> None:
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"Settings.seeds: expected distinct seeds, got {self.seeds!r}")
        if len(set(self.interval_seeds)) != len(self.interval_seeds):
            raise ConfigError(f"Settings.interval_seeds: expected distinct seeds, got {self.interval_seeds!r}")
        if not self.betas or not self.depths:
            raise ConfigError("Settings: betas and depths must not be empty")
        if not 0 < self.safety <= 1:
            raise ConfigError(f"Settings.safety: expected 0 < safety <= 1, got {self.safety!r}")
        check_choice("Settings.branch_scale", self.branch_scale, ("1/sqrt(L)", "1"))
        check_choice("Settings.twin_init", self.twin_init, TWIN_INITS)
        check_choice("Settings.start", self.start, STARTS)
        if not 0 < self.equal_out_scale <= 1:
            raise ConfigError(f"Settings.equal_out_scale: expected 0 < scale <= 1, got {self.equal_out_scale!r}")
        if not (isinstance(self.lhat_iterations, int) and self.lhat_iterations >= 1):
            raise ConfigError(f"Settings.lhat_iterations: expected an integer >= 1, got {self.lhat_iterations!r}")
        if not (isinstance(self.own_grid_stride, int) and self.own_grid_stride >= 1):
            raise ConfigError(f"Settings.own_grid_stride: expected an integer >= 1, got {self.own_grid_stride!r}")

    def depth(self) -> "Settings":
        """The depth sweep's settings: ``depth_N`` samples, ``depth_iterations`` iterations."""
        return replace(self, N=self.depth_N, iterations=self.depth_iterations)

    @property
    def mode(self) -> str:
        return "quick" if self.quick else "full"

    @property
    def spec(self) -> DatasetSpec:
        return DatasetSpec(self.dataset, n_train=self.N, n_tokens=self.n, n_test=self.n_test, seed=self.data_seed)

    def model(self, beta: float, n_layers: int, beta_ffn: float | None = None, *, seed: int | None = None) -> ModelConfig:
        """The model at (β, L) (β_ffn: the FFN skip's weight, β when None), with the init scales
        of :func:`branch_scales`, the read-out scale of ``start`` and, for a ``"matched"`` twin,
        the gains of :func:`resgd.experiments.twin.matched_gains` at ``seed`` (required then)."""
        v_scale, ffn_scale = branch_scales(self.branch_scale, self.twin_init, n_layers, beta,
                                           beta if beta_ffn is None else beta_ffn)
        cfg = self._model(beta, n_layers, beta_ffn, v_scale, ffn_scale)
        if self.twin_init == "matched" and needs_gains(cfg):
            if seed is None:
                raise ConfigError("Settings.model: a matched twin's gains depend on its seed; pass seed=")
            branch = branch_scales(self.branch_scale, self.twin_init, n_layers, 1.0, 1.0)
            reference = self._model(1.0, n_layers, None, *branch)
            cfg = cfg.replace(gains=matched_gains(cfg, reference, int(seed), self.spec, "float64"))
        return cfg

    def _model(self, beta, n_layers, beta_ffn, v_scale, ffn_scale) -> ModelConfig:
        return ModelConfig(
            d=registry.dataset(self.dataset).features, d_qk=self.d_qk, m=self.m, k=1, n_layers=n_layers, beta=float(beta),
            beta_ffn=None if beta_ffn is None else float(beta_ffn),
            logit_scale=self.logit_scale, activation=self.activation, pooling=registry.dataset(self.dataset).pooling,
            qk_scale=self.qk_scale, v_scale=v_scale, ffn_scale=ffn_scale,
            out_scale=self.equal_out_scale if self.start == "equal" else self.out_scale,
        )

    def config(self, beta: float, n_layers: int, seed: int, lr: float, iterations: int | None = None, *,
               beta_ffn: float | None = None) -> RunConfig:
        iterations = self.iterations if iterations is None else iterations
        gd = GDConfig(lr=float(lr), iterations=iterations, reduction=self.reduction,
                      record_every=min(self.record_every, max(iterations, 1)))
        return RunConfig(self.spec, self.model(beta, n_layers, beta_ffn, seed=seed), gd, seed=seed, dtype=self.dtype,
                         test_metrics=self.test_metrics)


TWIN_INITS = ("matched", "living", "scaled")
"""How a sublayer without its skip (coefficient 0) is initialised: ``"matched"`` (the book's) gets
gains on W_V / W_2 so that every hidden state has the residual model's RMS at t = 0
(:mod:`resgd.experiments.twin`); ``"living"`` (an earlier choice, a sensitivity row) the fixed
scales :data:`LIVING_SCALES`, which multiply the squared norm by about 2 per FFN; ``"scaled"``
gives it the residual model's depth scaling, which at L = 6, 10 leaves the model without residual
dead at initialisation (its loss never moves)."""
STARTS = ("equal", "free")
"""``"equal"``: a small read-out (``Settings.equal_out_scale``) so Ŷ⁰ ≈ 0 and every β starts from the
loss of the zero predictor; ``"free"``: the read-out scale ``Settings.out_scale``."""
TWIN_NAMES = {"matched": "matched twin", "living": "He-scaled twin", "scaled": "1/√L-init twin"}
"""The depth figure's and tables' names of the models without residual, by ``twin_init``."""
LIVING_SCALES = (1.0, math.sqrt(2.0))
"""(W_V, W_1 and W_2) init scales of a sublayer without skip under ``twin_init="living"`` and the
base scales that ``"matched"`` then corrects: He's √2 on both FFN matrices multiplies the squared
norm by about 2 per layer (√2 on W_1 alone would keep it in expectation, not per seed)."""


def branch_scales(branch_scale: str, twin_init: str, n_layers: int, beta: float, beta_ffn: float) -> tuple[float, float]:
    """(v_scale, ffn_scale): the depth scaling ``branch_scale`` for a sublayer with its skip; for
    one without (coefficient 0) the same under ``twin_init="scaled"``, :data:`LIVING_SCALES` under
    ``"living"``."""
    branch = 1.0 / math.sqrt(n_layers) if branch_scale == "1/sqrt(L)" else 1.0
    living = twin_init in ("living", "matched")
    v_scale = LIVING_SCALES[0] if living and beta == 0 else branch
    ffn_scale = LIVING_SCALES[1] if living and beta_ffn == 0 else branch
    return v_scale, ffn_scale


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
    initialization seeds (``seed + s`` for each preset seed ``s``, and for each of the preset's
    ``interval_seeds``, the seeds of the interval-rule arms). ``seeds`` (a list, or a
    count) replaces the preset's seeds (not the interval arms'); ``betas``/``depths`` replace the swept values. Any other
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
    values["interval_seeds"] = tuple(seed + int(s) for s in values["interval_seeds"])
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
    for name in ("betas", "depths", "lr_grid", "interval_seeds", "v6_seeds"):
        if name in values:
            values[name] = tuple(values[name])
    return Settings(**values)
