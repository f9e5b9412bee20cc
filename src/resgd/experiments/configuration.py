"""One training run's configuration and its cache key (:class:`RunConfig`, :func:`entry_key`), the
matched twin's init gains, and one data set's settings (:class:`Settings`, from :func:`settings`).
A cached run's numbers depend on all of it, so the cache key covers this module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any

import torch

from .. import dataset_registry as registry
from ..core.model import ModelConfig, block, init_params
from ..core.smoothness import FAST_ITERATIONS
from ..core.trainer import GDConfig
from ..data.spec import DTYPES, DatasetSpec, data_fingerprint, load_dataset
from ..pipeline.cache import hash_key
from ..pipeline.presets import experiments as preset
from ..validation import ConfigError, check_choice

# ------------------------------------------------------------------------------ one run and its key
# One training run of the empirical section, complete: :class:`RunConfig` and its cache key.
#
# :class:`RunConfig` holds the data set, the :class:`~resgd.core.model.ModelConfig`, the
# :class:`~resgd.core.trainer.GDConfig`, the seed and the dtype; frozen and hashable.
# :func:`entry_key` (the one key function of every cached quantity) hashes the complete
# configuration, a fingerprint of the loaded data and the arithmetic, so a cached result is never
# served for another configuration, data or arithmetic; the code is proven otherwise (its docstring).
# Studies build their RunConfigs with :meth:`resgd.experiments.configuration.Settings.config`.

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



# ------------------------------------------------------------------------- the matched twin's gains
# The model without a skip, or with a partial one, initialised so that it keeps the residual model's
# signal ("matched" twin; every β < 1 of the β sweep too).
#
# Why: a comparison "with vs without residual" proves nothing about the paper when the model
# without is dead, or explodes, at t = 0 because of our initialisation. The matched twin is built
# layer by layer on its own training inputs (the idea of LSUV, Mishkin & Matas 2016): for each
# layer ℓ, with the layers below already set,
#
# * a sublayer whose skip coefficient is 0 gets a gain on its output weight (W_V for attention,
#   W_2 for the FFN) chosen so that the RMS of that sublayer's output equals the RMS of the same
#   quantity in the fully residual model (β = β_ffn = 1, its own init scales, same seed, same data): Z⁽ℓ⁾ for attention,
#   H⁽ℓ⁾ for the FFN;
# * a sublayer with a partial skip (0 < β < 1) gets the gain that brings the same RMS with its skip
#   term included (:func:`_gain`, the root of a quadratic), so the β sweep compares skip weights at
#   one signal scale (before, β ∈ (0, 1) kept the plain init: a smaller ‖Z‖ and a larger step μ);
# * every gain is exact in one step: Z is linear in W_V and the ReLU FFN is positively
#   homogeneous in W_2, so rescaling by the RMS ratio hits the target.
#
# So at t = 0 every hidden state of the twin has the residual model's RMS (the last one
# included), by construction. The gradient norm is not matched by construction; it is checked
# (``tests/test_configuration.py``: within a factor 2 at every seed and depth of the full-mode grids).
# The gains are rounded to 6 significant digits and stored in the run's :class:`ModelConfig`
# (``gains``), so they are part of its cache key and every engine draws the same weights.

def rms(x: torch.Tensor, mask: torch.Tensor | None) -> float:
    """RMS over the real tokens (``mask`` True) of ``x (N, n, d)``."""
    if mask is None:
        return float(x.pow(2).mean().sqrt())
    w = mask.to(x.dtype)[..., None]
    return float(((x.pow(2) * w).sum() / (w.sum() * x.shape[-1])).sqrt())


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def _mean(x: torch.Tensor, mask: torch.Tensor | None) -> float:
    """Mean over the real tokens (``mask`` True) and features of ``x (N, n, d)``."""
    if mask is None:
        return float(x.mean())
    w = mask.to(x.dtype)[..., None]
    return float((x * w).sum() / (w.sum() * x.shape[-1]))


def _gain(skip: torch.Tensor, branch: torch.Tensor, target: float, mask: torch.Tensor | None) -> float:
    """The gain g > 0 with RMS(skip + g · branch) = ``target``: the positive root of the quadratic
    B g² + 2P g + S = target² (B, P, S: the branch's mean square, the cross term, the skip's). Exact
    in one step, since a sublayer's branch is linear in W_V and positively homogeneous in W_2. An
    error when no positive root exists (the skip term alone already exceeds the target)."""
    S, P, B = _mean(skip * skip, mask), _mean(skip * branch, mask), _mean(branch * branch, mask)
    disc = P * P - B * (S - target * target)
    root = (-P + disc**0.5) / B if B > 0 and disc >= 0 else math.nan
    if not root > 0:
        raise ValueError(f"matched_gains: no gain brings this sublayer to the residual model's RMS {target:.4g} "
                         f"(skip term's mean square {S:.4g}, branch's {B:.4g}, cross term {P:.4g}); "
                         "use Settings.twin_init='living' for the plain initialisation")
    return _round(root)


def needs_gains(cfg: ModelConfig) -> bool:
    """Whether some sublayer's skip coefficient is below 1: only those are matched."""
    return cfg.beta < 1 or cfg.residual_ffn < 1


@lru_cache(maxsize=512)
def matched_gains(cfg: ModelConfig, ref_cfg: ModelConfig, seed: int, spec: DatasetSpec,
                  dtype: str = "float64") -> tuple[tuple[float, float], ...]:
    """Per layer (g_V, g_2) of the matched model ``cfg`` (its ``gains`` are ignored) at ``seed`` on
    the training inputs of ``spec``, against the fully residual model ``ref_cfg``; (1, 1) for a
    sublayer that keeps its full skip (coefficient 1). A sublayer without skip (0) gets the RMS
    ratio; one with a partial skip (0 < β < 1) the gain of :func:`_gain`, so that every β starts at
    the residual model's signal scale and only the skip weight differs."""
    if ref_cfg.beta != 1 or ref_cfg.residual_ffn != 1 or ref_cfg.n_layers != cfg.n_layers:
        raise ValueError(f"matched_gains: the reference must be the fully residual model of the same depth, got {ref_cfg}")
    data = load_dataset(spec, dtype)
    X, mask = data.X_train.to(torch.float64), data.mask_train
    base = cfg.replace(gains=())
    ref = init_params(ref_cfg, seed)
    params = init_params(base, seed)
    gains = []
    H_ref, H = X, X
    with torch.no_grad():
        for layer in range(cfg.n_layers):
            ref_trace = block(H_ref, ref, layer, ref_cfg, mask)
            g_v = 1.0
            if cfg.beta == 0:
                trace = block(H, params, layer, base, mask)
                g_v = _round(rms(ref_trace.Z, mask) / max(rms(trace.Z, mask), 1e-300))
            elif cfg.beta < 1:
                trace = block(H, params, layer, base, mask)
                g_v = _gain(cfg.beta * H, trace.Attn, rms(ref_trace.Z, mask), mask)
            params[f"W_V.{layer}"] = params[f"W_V.{layer}"] * g_v
            g_2 = 1.0
            if cfg.residual_ffn == 0:
                trace = block(H, params, layer, base, mask)
                g_2 = _round(rms(ref_trace.H, mask) / max(rms(trace.H, mask), 1e-300))
            elif cfg.residual_ffn < 1:
                trace = block(H, params, layer, base, mask)
                g_2 = _gain(cfg.residual_ffn * trace.Z, trace.H - cfg.residual_ffn * trace.Z, rms(ref_trace.H, mask), mask)
            params[f"W_2.{layer}"] = params[f"W_2.{layer}"] * g_2
            H = block(H, params, layer, base, mask).H
            H_ref = ref_trace.H
            gains.append((g_v, g_2))
    return tuple(gains)



# -------------------------------------------------------------------------- one data set's settings
# One data set's experiment settings (:class:`Settings`, from :func:`settings`) and the init choices
# they carry.

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
        the gains of :func:`resgd.experiments.configuration.matched_gains` at ``seed`` (required then)."""
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
(:mod:`resgd.experiments.configuration`); ``"living"`` (an earlier choice, a sensitivity row) the fixed
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
