"""Many GD runs of one shape trained together, stacked along a leading run axis.

The book's sweeps train thousands of tiny models (N = 16 samples of 8 tokens in the robustness
map) that differ only in the seed of the initial weights, the residual weight β and the step size
μ. One such run is dominated by per-operation overhead (Python dispatch, kernel launch, tiny
GEMMs), so :func:`train_stacked` trains R of them at once: every weight carries a leading run
axis, β, β_ffn and μ are per-run tensors, and one autograd backward pass of the *summed* per-run
losses gives every run its exact own gradient (the runs share no weight, so ∂(Σ_r Φ_r)/∂θ_r =
∂Φ_r/∂θ_r). Each operation then serves all R runs.

Semantics are those of :func:`resgd.train.train_gd`, run by run: the same model
(:func:`resgd.model.forward`'s math, masks and mean pooling included, the same association of the
attention logits), the same loss, the same per-iteration history (loss, ‖∇Φ‖, the loss ratio and,
every ``record_every`` iterations and at the end, σ_min/σ_max of the stacked first-layer Z), the
same divergence rule (loss not finite or above ``divergence_factor`` × the run's loss at t = 0:
that run's history ends there and it leaves the stack; the others go on untouched).

Equality (tested in ``tests/test_stacked.py``):

* a run's history does not depend on which other runs share its stack — bit for bit (every
  operation acts on each run's slice with the same kernel whatever R is), so a run trained alone
  (a stack of one) and inside any stack give the same numbers;
* against the one-run-at-a-time :func:`~resgd.train.train_gd` (its hand-derived backward pass,
  :mod:`resgd.fastgrad`) it agrees to floating-point rounding (the two sum in different orders),
  not bit for bit: losses to a relative 1e-10 over short horizons, the same divergence iteration,
  ‖∇Φ‖ to 1e-8 and σ(Z) to 1e-6 (the Gram route squares the condition number).

Speed (``benchmarks/bench_stacked.py``): worth it only for small problems, where one run cannot
fill the kernels; at the headline experiments' sizes one ``train_gd`` run is faster per run
than any stack, so :func:`worth_stacking` (used by :func:`resgd.runs.stackable`) keeps those one at a time.

:mod:`resgd.runs` computes every cached run through this module (a single run is a stack of one),
so one configuration has one cached answer whichever path asked for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from .model import ModelConfig, Params, weight_shapes
from .train import HISTORY_COLUMNS, GDConfig, output_shape
from .validation import ConfigError, check_inputs

_ACTIVATIONS = {
    "relu": torch.relu,
    "gelu": torch.nn.functional.gelu,
    "softplus": torch.nn.functional.softplus,
}


STACK_MAX_TOKENS = 512
"""Stack only runs with at most this many training tokens N·n (:func:`worth_stacking`)."""
STACK_MAX_WEIGHTS = 50_000
"""... and at most this many weights per run (:func:`worth_stacking`)."""


def worth_stacking(cfg: ModelConfig, n_train: int, n_tokens: int) -> bool:
    """Whether runs of this shape train faster stacked than one at a time with :func:`resgd.train.train_gd`.

    Stacking pays where per-operation overhead dominates: few tokens (``benchmarks/bench_stacked.py``:
    1.4-2.3x at the map's 128-256 tokens, slower at the headline experiments' 2048-3072) and few
    weights, so that a stack's weights and gradients stay in cache (measured on an AMD EPYC: 1.1-1.4x
    for the map's Jena L = 10 with 24k weights per run, 0.96-0.99x for its SST-2 L = 10 with 105k,
    0.6x for the collapse study's d_QK = 16384 with 262k)."""
    weights = sum(a * b for a, b in weight_shapes(cfg).values())
    return n_train * n_tokens <= STACK_MAX_TOKENS and weights <= STACK_MAX_WEIGHTS


def shape_model(cfg: ModelConfig) -> ModelConfig:
    """What runs of one stack must share: the model without β, β_ffn and the init scales (the
    per-run parts; an explicit β_ffn equal to β is the same model as β_ffn = None)."""
    return cfg.replace(beta=1.0, beta_ffn=None, qk_scale=1.0, v_scale=1.0, ffn_scale=1.0, out_scale=1.0)


def shape_gd(gd: GDConfig) -> GDConfig:
    """What runs of one stack must share of their GD settings: all but the step size (and the
    progress bar, which changes no number)."""
    return replace(gd, lr=1.0, progress=False)


@dataclass
class StackedRun:
    """One run's outcome: its history (columns :data:`resgd.train.HISTORY_COLUMNS`), its final
    weights (``None`` when it diverged) and whether it diverged."""

    history: pd.DataFrame
    params: Params | None
    diverged: bool


class _Layout:
    """Where each weight lives in a run's flat parameter vector (the order of ``weight_shapes``)."""

    def __init__(self, cfg: ModelConfig):
        self.shapes = weight_shapes(cfg)
        self.names = list(self.shapes)
        self.sizes = [a * b for a, b in self.shapes.values()]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).tolist()
        self.total = int(self.offsets[-1])

    def flatten(self, params: Sequence[Params], dtype: torch.dtype) -> torch.Tensor:
        return torch.stack([torch.cat([p[name].detach().reshape(-1).to(dtype) for name in self.names])
                            for p in params])

    def views(self, theta: torch.Tensor) -> list[torch.Tensor]:
        R = theta.shape[0]
        return [theta[:, a:b].view(R, *shape)
                for (a, b), shape in zip(zip(self.offsets, self.offsets[1:]), self.shapes.values())]

    def unflatten(self, row: torch.Tensor) -> Params:
        return {name: row[a:b].view(shape).clone()
                for name, a, b, shape in zip(self.names, self.offsets, self.offsets[1:], self.shapes.values())}


def _forward(weights: list[torch.Tensor], cfg: ModelConfig, beta: torch.Tensor, beta_ffn: torch.Tensor,
             X: torch.Tensor, mask: torch.Tensor | None, record: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``Ŷ`` of every run, shape (R, N, k) or (R, N, n, k), and the first layer's Z (R, N, n, d) if
    ``record``. :func:`resgd.model.forward` with a run axis in front."""
    R = weights[0].shape[0]
    N, n, d = X.shape
    act = _ACTIVATIONS[cfg.activation]
    divisor = cfg.logit_divisor
    keypad = None if mask is None else ~mask.view(1, N, 1, n)
    b = beta.view(R, 1, 1, 1)
    bf = beta_ffn.view(R, 1, 1, 1)
    H = X.view(1, N, n, d).expand(R, N, n, d)
    Z0 = None
    for layer in range(cfg.n_layers):
        W_Q, W_K, W_V, W_1, W_2 = weights[5 * layer:5 * layer + 5]
        X2 = H.reshape(R, N * n, d)
        if cfg.d_qk > d:  # model.attention_logits' association: through W_Q W_Kᵀ (d×d)
            S = torch.bmm(torch.bmm(X2, torch.bmm(W_Q, W_K.transpose(1, 2))).view(R * N, n, d),
                          X2.reshape(R * N, n, d).transpose(1, 2)) / divisor
        else:
            Q = torch.bmm(X2, W_Q).view(R * N, n, cfg.d_qk)
            K = torch.bmm(X2, W_K).view(R * N, n, cfg.d_qk)
            S = torch.bmm(Q, K.transpose(1, 2)) / divisor
        S = S.view(R, N, n, n)
        if keypad is not None:
            S = S.masked_fill(keypad, float("-inf"))
        A = torch.softmax(S, dim=-1)
        V = torch.bmm(X2, W_V).view(R * N, n, d)
        attn = torch.bmm(A.view(R * N, n, n), V).view(R, N, n, d)
        Z = b * H + attn
        if layer == 0 and record:
            Z0 = Z.detach()
        Z2 = Z.view(R, N * n, d)
        H = (bf * Z + torch.bmm(act(torch.bmm(Z2, W_1)), W_2).view(R, N, n, d))
    W_U = weights[-1]
    if cfg.pooling == "mean":
        if mask is None:
            pooled = H.mean(dim=2)
        else:
            w = mask.to(H.dtype)
            pooled = (H * w.view(1, N, n, 1)).sum(dim=2) / w.sum(dim=1, keepdim=True).view(1, N, 1)
        return torch.bmm(pooled, W_U), Z0
    return torch.bmm(H.reshape(R, N * n, d), W_U).view(R, N, n, -1), Z0


def predict_stacked(params: Sequence[Params], models: Sequence[ModelConfig], X: torch.Tensor,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    """``Ŷ`` of every run on ``X`` in one pass, shape (R, N, k) or (R, N, n, k): the end-of-run
    metrics of a stack (one forward per run cost a quarter of the robustness map's time)."""
    cfg = models[0]
    layout = _Layout(cfg)
    beta = torch.tensor([float(m.beta) for m in models], dtype=X.dtype)
    beta_ffn = torch.tensor([float(m.residual_ffn) for m in models], dtype=X.dtype)
    with torch.no_grad():
        return _forward(layout.views(layout.flatten(params, X.dtype)), cfg, beta, beta_ffn, X, mask, False)[0]


def stacked_losses(Y_hat: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None, reduction: str) -> torch.Tensor:
    """Per-run ``½ Σ ‖Ŷ − Y‖²`` over real entries (÷ N for ``"mean"``), shape (R,)."""
    residual = Y_hat - Y.unsqueeze(0)
    if mask is not None and residual.ndim == 4:
        residual = residual * mask.unsqueeze(0).unsqueeze(-1).to(residual.dtype)
    loss = 0.5 * residual.pow(2).flatten(1).sum(dim=1)
    return loss / Y.shape[0] if reduction == "mean" else loss


def _sigma(Z: torch.Tensor, mask: torch.Tensor | None) -> tuple[np.ndarray, np.ndarray]:
    """σ_max and σ_min of every run's stacked Z (real tokens only), from the smaller Gram matrix
    as :func:`resgd.conditioning.gram_singular_values` does."""
    M = (Z.flatten(1, 2) if mask is None else Z[:, mask]).to(torch.float64)
    gram = M.transpose(1, 2) @ M if M.shape[1] >= M.shape[2] else M @ M.transpose(1, 2)
    eig = torch.linalg.eigvalsh(gram).clamp_min(0).sqrt()
    return eig[:, -1].numpy(), eig[:, 0].numpy()


def train_stacked(
    params: Sequence[Params],
    models: Sequence[ModelConfig],
    X: torch.Tensor,
    Y: torch.Tensor,
    gds: Sequence[GDConfig],
    mask: torch.Tensor | None = None,
) -> list[StackedRun]:
    """Train run r from ``params[r]`` with ``models[r]`` and ``gds[r]``, all on the same data, together.

    The runs must share :func:`shape_model` and :func:`shape_gd` (ConfigError otherwise); they may
    differ in β, β_ffn, the init scales and the step size. Returns one :class:`StackedRun` per run,
    in order. ``params`` are not modified.
    """
    R = len(params)
    if R == 0:
        return []
    if not len(models) == len(gds) == R:
        raise ConfigError(f"train_stacked: expected one model and one GDConfig per run, got {len(models)} "
                          f"models and {len(gds)} GDConfigs for {R} runs")
    cfg, gd = models[0], gds[0]
    for r in range(1, R):
        if shape_model(models[r]) != shape_model(cfg) or shape_gd(gds[r]) != shape_gd(gd):
            raise ConfigError(f"train_stacked: run {r} differs from run 0 in more than β, the init scales and "
                              f"the step size ({models[r]} / {gds[r]} vs {cfg} / {gd})")
    check_inputs(X, mask=mask, d=cfg.d, Y=Y, Y_shape=output_shape(cfg, X))
    layout = _Layout(cfg)
    dtype = X.dtype
    theta = layout.flatten(params, dtype)  # (R, P): run r's weights, flat
    lr = torch.tensor([g.lr for g in gds], dtype=dtype)
    beta = torch.tensor([float(m.beta) for m in models], dtype=dtype)
    beta_ffn = torch.tensor([float(m.residual_ffn) for m in models], dtype=dtype)
    alive = np.arange(R)  # original index of each row still in the stack
    rows: list[list[dict]] = [[] for _ in range(R)]
    outcome: list[StackedRun | None] = [None] * R
    loss0 = None

    for t in range(gd.iterations + 1):
        record = t % gd.record_every == 0 or t == gd.iterations
        leaves = [w.detach().requires_grad_(True) for w in layout.views(theta)]
        with torch.enable_grad():
            Y_hat, Z0 = _forward(leaves, cfg, beta, beta_ffn, X, mask, record)
            loss = stacked_losses(Y_hat, Y, mask, gd.reduction)
            grads = torch.autograd.grad(loss.sum(), leaves)
        flat = torch.cat([g.reshape(len(alive), -1) for g in grads], dim=1)
        values = loss.detach().to(torch.float64).numpy()
        norms = torch.linalg.vector_norm(flat.to(torch.float64), dim=1).numpy()
        smax = smin = None
        if record:
            smax, smin = _sigma(Z0, mask)
        if loss0 is None:
            loss0 = values.copy()
        stop = ~np.isfinite(values) | (values > gd.divergence_factor * loss0)
        for i, r in enumerate(alive):
            rows[r].append({"iteration": t, "loss": float(values[i]), "grad_norm": float(norms[i]),
                            "sigma_min_Z": float(smin[i]) if record else math.nan,
                            "sigma_max_Z": float(smax[i]) if record else math.nan})
            if stop[i]:
                outcome[r] = StackedRun(_history(rows[r]), None, True)
        if t == gd.iterations:
            break
        if stop.any():  # diverged runs leave the stack; the others are untouched
            keep = torch.from_numpy(np.flatnonzero(~stop))
            alive, loss0 = alive[~stop], loss0[~stop]
            theta, flat, lr = theta[keep], flat[keep], lr[keep]
            beta, beta_ffn = beta[keep], beta_ffn[keep]
            if len(alive) == 0:
                break
        theta.addcmul_(flat, lr.view(-1, 1), value=-1.0)  # θ_r ← θ_r − μ_r ∇Φ_r (in place: no fresh pages)
    for i, r in enumerate(alive):
        if outcome[r] is None:
            outcome[r] = StackedRun(_history(rows[r]), layout.unflatten(theta[i]), False)
    return outcome


def _history(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(HISTORY_COLUMNS))
    frame["ratio"] = frame["loss"].shift(-1) / frame["loss"]
    return frame
