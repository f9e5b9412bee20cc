"""The Transformer the paper analyses, written so the math stays visible.

Token-major inputs ``X: (N, n, d)`` — N samples (the paper's ``X_p``), n tokens, d features.
One block (layer ``l``)::

    Attn(X) = softmax_rows(X W_Q (X W_K)^T / s) X W_V            W_Q, W_K: (d, d_qk), W_V: (d, d)
    Z       = beta X + Attn(X)                                    attention sublayer + residual
    H       = beta_ffn Z + act(Z W_1) W_2                          W_1: (d, m), W_2: (m, d)

``L`` blocks are stacked (the output ``H`` of one is the ``X`` of the next) and the output layer
reads ``Y_hat = H W_U`` (``W_U: (d, k)``) per token, or mean-pooled over the real tokens.

The paper's full text was not available to us: the exact placement of ``beta``, the logit
scale ``s``, the pooling and the initialization are the companion's choices, each a field of
:class:`ModelConfig`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal

import torch

from ..validation import ConfigError, check_choice, check_inputs

LOGIT_SCALES = ("sqrt", "linear")
ACTIVATIONS = ("relu", "gelu", "softplus")
POOLINGS = ("none", "mean")
INITS = ("gaussian",)
WEIGHT_NAMES = ("W_Q", "W_K", "W_V", "W_1", "W_2")

Params = dict[str, torch.Tensor]
"""Weights by name: ``"W_Q.0"`` … ``"W_2.{L-1}"`` for the blocks and ``"W_U"`` for the output."""


@dataclass(frozen=True)
class ModelConfig:
    """Shapes and the architectural choices (frozen and hashable, so it can key a cache).

    Companion's choices (the paper is silent or we could not check it): ``beta_ffn``
    defaults to ``beta``; ``logit_scale`` ``"sqrt"`` divides logits by sqrt(d_qk)
    (``"linear"`` by d_qk); ``init="gaussian"`` draws every entry of a ``(fan_in, fan_out)``
    weight from N(0, scale² / fan_in), with one scale per weight group; ``gains`` (one pair
    per layer, or none) multiplies that layer's W_V and W_2 (a twin's signal-matching init,
    :mod:`resgd.experiments.configuration`).
    """

    d: int
    d_qk: int
    m: int
    k: int = 1
    n_layers: int = 1
    beta: float = 1.0
    beta_ffn: float | None = None
    logit_scale: Literal["sqrt", "linear"] = "sqrt"
    activation: Literal["relu", "gelu", "softplus"] = "relu"
    pooling: Literal["none", "mean"] = "none"
    init: Literal["gaussian"] = "gaussian"
    qk_scale: float = 1.0
    v_scale: float = 1.0
    ffn_scale: float = 1.0
    out_scale: float = 1.0
    gains: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        for name in ("d", "d_qk", "m", "k", "n_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"ModelConfig.{name}: expected an integer >= 1, got {value!r}")
        for name in ("beta", "beta_ffn"):
            value = getattr(self, name)
            if value is None and name == "beta_ffn":
                continue
            if not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
                raise ConfigError(f"ModelConfig.{name}: expected a number in [0, 1], got {value!r}")
        for name in ("qk_scale", "v_scale", "ffn_scale", "out_scale"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"ModelConfig.{name}: expected a finite number >= 0, got {value!r}")
        if self.gains and (len(self.gains) != self.n_layers or any(
                len(g) != 2 or not all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in g)
                for g in self.gains)):
            raise ConfigError(f"ModelConfig.gains: expected () or one pair (g_V, g_2) of finite numbers > 0 per layer "
                              f"({self.n_layers}), got {self.gains!r}")
        check_choice("ModelConfig.logit_scale", self.logit_scale, LOGIT_SCALES)
        check_choice("ModelConfig.activation", self.activation, ACTIVATIONS)
        check_choice("ModelConfig.pooling", self.pooling, POOLINGS)
        check_choice("ModelConfig.init", self.init, INITS)

    @property
    def residual_ffn(self) -> float:
        """The FFN's residual coefficient (``beta`` unless set apart)."""
        return self.beta if self.beta_ffn is None else float(self.beta_ffn)

    @property
    def logit_divisor(self) -> float:
        return math.sqrt(self.d_qk) if self.logit_scale == "sqrt" else float(self.d_qk)

    def replace(self, **changes) -> "ModelConfig":
        """A copy with some fields changed (validated again)."""
        return ModelConfig(**{**asdict(self), **changes})


def weight_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    """Name → shape of every trained weight, in a fixed order."""
    shapes: dict[str, tuple[int, int]] = {}
    for layer in range(cfg.n_layers):
        shapes[f"W_Q.{layer}"] = (cfg.d, cfg.d_qk)
        shapes[f"W_K.{layer}"] = (cfg.d, cfg.d_qk)
        shapes[f"W_V.{layer}"] = (cfg.d, cfg.d)
        shapes[f"W_1.{layer}"] = (cfg.d, cfg.m)
        shapes[f"W_2.{layer}"] = (cfg.m, cfg.d)
    shapes["W_U"] = (cfg.d, cfg.k)
    return shapes


def _group_scale(cfg: ModelConfig, name: str) -> float:
    group, _, layer = name.partition(".")
    gain = 1.0
    if cfg.gains and group in ("W_V", "W_2"):
        gain = cfg.gains[int(layer)][0 if group == "W_V" else 1]
    return gain * {
        "W_Q": cfg.qk_scale,
        "W_K": cfg.qk_scale,
        "W_V": cfg.v_scale,
        "W_1": cfg.ffn_scale,
        "W_2": cfg.ffn_scale,
        "W_U": cfg.out_scale,
    }[group]


def init_params(
    cfg: ModelConfig,
    seed: int,
    *,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
) -> Params:
    """Seeded initial weights; drawn on the CPU in float64 so every device and dtype sees the same draw."""
    generator = torch.Generator().manual_seed(int(seed))
    params: Params = {}
    for name, (fan_in, fan_out) in weight_shapes(cfg).items():
        std = _group_scale(cfg, name) / math.sqrt(fan_in)
        weight = torch.randn(fan_in, fan_out, generator=generator, dtype=torch.float64) * std
        params[name] = weight.to(dtype=dtype, device=device)
    return params


def activation_function(name: str):
    """The activation ``act`` called ``name`` (``ModelConfig.activation``), as torch computes it."""
    return {
        "relu": torch.relu,
        "gelu": torch.nn.functional.gelu,
        "softplus": torch.nn.functional.softplus,
    }[name]


@dataclass
class LayerTrace:
    """Intermediates of one block, for the conditioning analysis. Shapes ``(N, n, ·)``."""

    X: torch.Tensor
    A: torch.Tensor  # attention probabilities (N, n, n), rows sum to 1 over real keys
    Attn: torch.Tensor
    Z: torch.Tensor
    H: torch.Tensor


@dataclass
class Trace:
    """Every block's intermediates and the output."""

    layers: list[LayerTrace] = field(default_factory=list)
    Y_hat: torch.Tensor | None = None


def fold_logits(d: int, d_qk: int) -> bool:
    """Whether the logits go through ``M = W_Q W_Kᵀ`` (d×d): the one rule, so that the model and
    the trainer's hand pass (:mod:`resgd.core.hand_pass`) sum in the same order.

    Folded, ``X M`` and ``(X M) Xᵀ`` cost ``2 T d² + 2 T n d`` FLOPs; unfolded, ``X W_Q``, ``X W_K``
    and ``Q Kᵀ`` cost ``4 T d d_qk + 2 T n d_qk``: folding pays for certain when ``d_qk > d``
    (between, it depends on n)."""
    return d_qk > d


def attention_logits(X: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor, divisor: float) -> torch.Tensor:
    """``X W_Q (X W_K)^T / s`` with the association of :func:`fold_logits`."""
    if fold_logits(*W_Q.shape):
        return (X @ (W_Q @ W_K.T)) @ X.transpose(-1, -2) / divisor
    return (X @ W_Q) @ (X @ W_K).transpose(-1, -2) / divisor


def attention_probs(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Row softmax over the keys; padded keys (``mask`` False) get probability 0."""
    if mask is not None:
        logits = logits.masked_fill(~mask[:, None, :], float("-inf"))
    return torch.softmax(logits, dim=-1)


def block(
    X: torch.Tensor, params: Params, layer: int, cfg: ModelConfig, mask: torch.Tensor | None
) -> LayerTrace:
    """One Transformer block: attention + residual, then FFN + residual."""
    W_Q, W_K, W_V, W_1, W_2 = (params[f"{name}.{layer}"] for name in WEIGHT_NAMES)
    A = attention_probs(attention_logits(X, W_Q, W_K, cfg.logit_divisor), mask)
    attn = A @ (X @ W_V)
    Z = cfg.beta * X + attn
    H = cfg.residual_ffn * Z + activation_function(cfg.activation)(Z @ W_1) @ W_2
    return LayerTrace(X=X, A=A, Attn=attn, Z=Z, H=H)


def pool(H: torch.Tensor, mask: torch.Tensor | None, pooling: str) -> torch.Tensor:
    """Per-token (``"none"``) or mean over the real tokens (``"mean"``, shape (N, d))."""
    if pooling == "none":
        return H
    if mask is None:
        return H.mean(dim=1)
    weights = mask.to(H.dtype)
    return (H * weights[..., None]).sum(dim=1) / weights.sum(dim=1, keepdim=True)


def forward(
    params: Params,
    cfg: ModelConfig,
    X: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    return_trace: bool = False,
) -> torch.Tensor | Trace:
    """``Y_hat`` of shape (N, n, k) (per token) or (N, k) (mean pooling); the full :class:`Trace` on request."""
    check_inputs(X, mask=mask, d=cfg.d)
    trace = Trace()
    H = X
    for layer in range(cfg.n_layers):
        layer_trace = block(H, params, layer, cfg, mask)
        trace.layers.append(layer_trace)
        H = layer_trace.H
    Y_hat = pool(H, mask, cfg.pooling) @ params["W_U"]
    if not return_trace:
        return Y_hat
    trace.Y_hat = Y_hat
    return trace
