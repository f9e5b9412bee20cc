"""Many GD runs of one shape trained together, stacked along a leading run axis.

The book's sweeps train thousands of tiny models (N = 16 samples of 8 tokens in the robustness
map) that differ only in the seed of the initial weights, the residual weight β and the step size
μ. One such run is dominated by per-operation overhead (Python dispatch, kernel launch, tiny
GEMMs), so :func:`train_stacked` trains R of them at once: every weight carries a leading run
axis, β, β_ffn and μ are per-run tensors, and a hand-derived backward pass (:func:`_backward`,
one batched product per product of the forward pass, no autograd graph) gives every run its own
gradient. Each operation then serves all R runs. (A first version took one autograd backward pass
of the summed losses; its graph cost 1.6x the forward pass, the hand-derived pass ~1.4x: the
robustness map's quick grid in one process went from 55 s to 37 s, AMD EPYC, shared machine.)

Semantics are those of :func:`resgd.core.train.train_gd`, run by run: the same model
(:func:`resgd.core.model.forward`'s math, masks and mean pooling included, the same association of the
attention logits), the same loss, the same per-iteration history (loss, ‖∇Φ‖, the loss ratio and,
every ``record_every`` iterations and at the end, σ_min/σ_max of the stacked first-layer Z), the
same divergence rule (loss not finite or above ``divergence_factor`` × the run's loss at t = 0:
that run's history ends there and it leaves the stack; the others go on untouched).

Equality (tested in ``tests/test_stacked.py``):

* a run's history does not depend on which other runs share its stack — bit for bit (every
  operation acts on each run's slice with the same kernel whatever R is; the one exception torch
  makes, gemv for a one-column product of a stack of one, is avoided by :func:`_bmm`), so a run
  trained alone (a stack of one) and inside any stack give the same numbers
  (``tests/test_stack_identity.py``: map shapes, stacks of 1, 2, 13 and 16, one and two threads);
* against the one-run-at-a-time :func:`~resgd.core.train.train_gd` (its hand-derived backward pass,
  :mod:`resgd.core.fastgrad`) it agrees to floating-point rounding (the two sum in different orders),
  not bit for bit: losses to a relative 1e-10 over short horizons, the same divergence iteration,
  ‖∇Φ‖ to 1e-8 and σ(Z) to 1e-6 (the Gram route squares the condition number).

Why two trainers: a stack of one at the headline experiments'
sizes (N = 128, n = 24/16, d_QK = 16, m = 64, float64) was 1.26x / 1.22x slower per step than
:func:`~resgd.core.train.train_gd` for Jena L = 1 / 10 and 1.06x / 1.14x for SST-2 (medians of 5
interleaved repeats, AMD EPYC family 25 model 17, shared 2-core machine, spread ±15 %), above the
10 % allowed; and the two sum in different orders, so routing the headline runs through this
module would move their histories by rounding (beyond 1e-12 on rounding-sensitive runs,
``tests/engine_cases.py``). ``tests/test_stacked.py::test_each_run_of_a_stack_equals_train_gd``
holds the two equal to rounding.

Speed (``benchmarks/bench_stacked.py``, ``benchmarks/bench_map.py``): worth it only for small problems, where one run cannot
fill the kernels; at the headline experiments' sizes one ``train_gd`` run is faster per run
than any stack, so :func:`worth_stacking` (used by :func:`resgd.experiments.runs.stackable`) keeps those one at a time.

:mod:`resgd.experiments.runs` computes every cached run through this module (a single run is a stack of one),
so one configuration has one cached answer whichever path asked for it.

Each step's evaluation (forward, loss, backward, flat gradients, their norms) runs compiled where a
C++ compiler is found (:mod:`resgd.core.native`: the same ATen calls from C++, the softmax and its
backward by row kernels checked equal to ATen's at load, so the same numbers bit for bit,
``tests/test_native_step.py``), else through :func:`_forward`, :func:`_backward` and
:func:`_loss_and_output_grad` below, which stay the definition the compiled code follows.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from .conditioning import gram_singular_values
from . import native as _native
from .model import ModelConfig, Params, _activation, fold_logits, init_params, weight_shapes
from .train import ROW_FIELDS, DivergenceError, GDConfig, history_frame, output_shape, train_gd
from ..validation import ConfigError, check_inputs

STACK_MAX_TOKENS = 512
"""Stack only runs with at most this many training tokens N·n (:func:`worth_stacking`)."""
STACK_MAX_WEIGHTS = 50_000
"""... and at most this many weights per run (:func:`worth_stacking`)."""


def worth_stacking(cfg: ModelConfig, n_train: int, n_tokens: int) -> bool:
    """Whether runs of this shape train faster stacked than one at a time with :func:`resgd.core.train.train_gd`.

    Stacking pays where per-operation overhead dominates: few tokens (``benchmarks/bench_stacked.py``:
    1.4-2.3x at the map's 128-256 tokens, slower at the headline experiments' 2048-3072) and few
    weights, so that a stack's weights and gradients stay in cache (measured on an AMD EPYC: 1.1-1.4x
    for the map's Jena L = 10 with 24k weights per run, 0.96-0.99x for its SST-2 L = 10 with 105k,
    0.6x for the collapse study's d_QK = 16384 with 262k)."""
    weights = sum(a * b for a, b in weight_shapes(cfg).values())
    return n_train * n_tokens <= STACK_MAX_TOKENS and weights <= STACK_MAX_WEIGHTS


@functools.lru_cache(maxsize=1024)
def shape_model(cfg: ModelConfig) -> ModelConfig:
    """What runs of one stack must share: the model without β, β_ffn, the init scales and gains (the
    per-run parts; an explicit β_ffn equal to β is the same model as β_ffn = None). Cached: a
    stack's check calls it once per run and call, and a fresh validated copy costs 20 µs."""
    return cfg.replace(beta=1.0, beta_ffn=None, qk_scale=1.0, v_scale=1.0, ffn_scale=1.0, out_scale=1.0, gains=())


def shape_gd(gd: GDConfig) -> GDConfig:
    """What runs of one stack must share of their GD settings: all but the step size (and the
    progress bar, which changes no number)."""
    return replace(gd, lr=1.0, progress=False)


@dataclass
class StackedRun:
    """One run's outcome: its history (columns :data:`resgd.core.train.HISTORY_COLUMNS`), its final
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


class _Buffers:
    """Tensors reused from step to step of one :func:`train_stacked` call, by name and shape.

    A step's intermediates (about 1 MB each at the map's shapes) came fresh from the allocator
    every step, and glibc hands such blocks back to the system, so every step page-faulted them
    in again: ``threshold_backward`` and ``relu`` took 10-20x their in-cache time. Every operation
    writes into a buffer with ``out=`` instead: the same kernels on the same layouts, so every
    result is bit for bit what it was (``tests/test_stack_identity.py``, ``tests/test_engine_reference.py``).
    ``None`` as the store (:func:`predict_stacked`) gives fresh tensors."""

    def __init__(self, dtype: torch.dtype, store: dict | None = None):
        self.dtype, self.store = dtype, store

    def __call__(self, key, *shape: int) -> torch.Tensor:
        if self.store is None:
            return torch.empty(shape, dtype=self.dtype)
        tensor = self.store.get(key)
        if tensor is None or tensor.shape != shape:
            tensor = self.store[key] = torch.empty(shape, dtype=self.dtype)
        return tensor


@dataclass
class _Saved:
    """One layer's forward tensors that its backward pass reads (runs × samples flattened where bmm wants it)."""

    X2: torch.Tensor  # (R, T, d): the layer's input, T = N·n tokens
    QK: tuple[torch.Tensor, ...]  # (Q, K), each (R·N, n, q); folded: (X M, M) with X M (R·N, n, d), M (R, d, d)
    A: torch.Tensor  # (R·N, n, n) attention probabilities
    V: torch.Tensor  # (R·N, n, d)
    Z: torch.Tensor  # (R, T, d)
    P: torch.Tensor  # (R, T, m): the FFN's pre-activation
    G: torch.Tensor  # (R, T, m): act(P)


def _forward(weights: list[torch.Tensor], cfg: ModelConfig, beta: torch.Tensor, beta_ffn: torch.Tensor,
             X: torch.Tensor, mask: torch.Tensor | None, record: bool,
             saved: list[_Saved] | None = None, buf: _Buffers | None = None,
             ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``Ŷ`` of every run, shape (R, N, k) or (R, N, n, k), the first layer's Z (R, N, n, d) if
    ``record``, and the last layer's output H (R, N, n, d). :func:`resgd.core.model.forward` with a run
    axis in front (the same association of the logits). Appends each layer's :class:`_Saved` to
    ``saved`` when given (for :func:`_backward`); writes into ``buf``'s tensors when given."""
    R = weights[0].shape[0]
    N, n, d = X.shape[-3:]
    T = N * n
    q, m = cfg.d_qk, cfg.m
    divisor = cfg.logit_divisor
    buf = buf if buf is not None else _Buffers(X.dtype)
    keypad = None if mask is None else ~mask.view(1, N, 1, n)
    b = beta.view(R, 1, 1, 1)
    bf = beta_ffn.view(R, 1, 1, 1)
    H = X if X.ndim == 4 else X.view(1, N, n, d).expand(R, N, n, d)  # (R, N, n, d): given once per call by train_stacked
    Z0 = None
    for layer in range(cfg.n_layers):
        W_Q, W_K, W_V, W_1, W_2 = weights[5 * layer:5 * layer + 5]
        X2 = H.reshape(R, T, d)
        Xs = X2.reshape(R * N, n, d)
        if fold_logits(d, q):  # model.attention_logits' association: through W_Q W_Kᵀ (d×d)
            M = torch.bmm(W_Q, W_K.transpose(1, 2), out=buf(("M", layer), R, d, d))
            XM = torch.bmm(X2, M, out=buf(("XM", layer), R, T, d)).view(R * N, n, d)
            S = torch.bmm(XM, Xs.transpose(1, 2), out=buf("S", R * N, n, n)).div_(divisor)
            qk = (XM, M)
        else:
            Q = torch.bmm(X2, W_Q, out=buf(("Q", layer), R, T, q)).view(R * N, n, q)
            K = torch.bmm(X2, W_K, out=buf(("K", layer), R, T, q)).view(R * N, n, q)
            S = torch.bmm(Q, K.transpose(1, 2), out=buf("S", R * N, n, n)).div_(divisor)
            qk = (Q, K)
        if keypad is not None:
            S.view(R, N, n, n).masked_fill_(keypad, float("-inf"))
        A = torch._softmax(S, -1, False, out=buf(("A", layer), R * N, n, n))  # = torch.softmax(S, dim=-1)
        V = torch.bmm(X2, W_V, out=buf(("V", layer), R, T, d)).view(R * N, n, d)
        Z = torch.mul(H, b, out=buf(("Z", layer), R, N, n, d))
        Z.add_(torch.bmm(A, V, out=buf("AV", R * N, n, d)).view(R, N, n, d))  # b H + A V
        if layer == 0 and record:
            Z0 = Z
        Z2 = Z.view(R, T, d)
        P = torch.bmm(Z2, W_1, out=buf(("P", layer), R, T, m))
        G = _activation_out(cfg.activation, P, buf(("G", layer), R, T, m))
        H = torch.mul(Z, bf, out=buf(("H", layer), R, N, n, d))
        H.add_(torch.bmm(G, W_2, out=buf("GW2", R, T, d)).view(R, N, n, d))  # bf Z + G W_2
        if saved is not None:
            saved.append(_Saved(X2, qk, A, V, Z2, P, G))
    W_U = weights[-1]
    if cfg.pooling == "mean":
        return _bmm(_pool(H, mask), W_U), Z0, H
    return _bmm(H.reshape(R, T, d), W_U).view(R, N, n, -1), Z0, H


def _activation_out(name: str, P: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``act(P)``, into ``out`` for ReLU (``torch.relu`` is ``clamp_min(P, 0)``: the same kernel)."""
    if name == "relu":
        return torch.clamp_min(P, 0, out=out)
    return _activation(name)(P)


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.bmm(a, b)``, through the batched kernel even for a stack of one: for a one-column
    ``b`` (a one-output model's output layer) torch computes a single product by gemv and a stack
    by the batched gemm, which round differently, so a run alone would not be bit for bit the run
    inside a stack. A stack of one is computed as a stack of two (the run twice)."""
    if a.shape[0] != 1 or b.shape[-1] != 1:
        return torch.bmm(a, b)
    return torch.bmm(a.repeat(2, 1, 1), b.repeat(2, 1, 1))[:1]


def _pool(H: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over the real tokens, (R, N, d)."""
    if mask is None:
        return H.mean(dim=2)
    N, n = mask.shape
    w = mask.to(H.dtype)
    return (H * w.view(1, N, n, 1)).sum(dim=2) / w.sum(dim=1, keepdim=True).view(1, N, 1)


def _activation_backward(name: str, dG: torch.Tensor, P: torch.Tensor, G: torch.Tensor,
                         out: torch.Tensor | None = None) -> torch.Tensor:
    """∂Φ/∂P from ∂Φ/∂G (``G = act(P)``), as torch's autograd computes it; ReLU's by its fused
    kernel (one pass, no mask tensor; into ``out`` when given), in place into ``dG`` otherwise."""
    if name == "relu":
        if out is None:
            return torch.ops.aten.threshold_backward(dG, P, 0)
        return torch.ops.aten.threshold_backward.grad_input(dG, P, 0, grad_input=out)
    if name == "gelu":  # exact (erf) GELU: Φ(x) + x φ(x)
        return dG.mul_(0.5 * (1.0 + torch.erf(P * (0.5 ** 0.5))) + P * torch.exp(-0.5 * P * P) * (2.0 * math.pi) ** -0.5)
    return dG.mul_(torch.where(P > 20.0, torch.ones_like(P), torch.sigmoid(P)))  # softplus, threshold 20 as torch's


def _backward(saved: list[_Saved], weights: list[torch.Tensor], cfg: ModelConfig, beta: torch.Tensor,
              beta_ffn: torch.Tensor, H: torch.Tensor, dY: torch.Tensor, mask: torch.Tensor | None,
              buf: _Buffers | None = None) -> list[torch.Tensor]:
    """∂Φ_r/∂θ_r of every run from the output gradient ``dY`` (shape of Ŷ): the hand-derived
    backward pass of :func:`_forward` (one bmm per product, no autograd graph; per-operation
    overhead is what a stack of tiny models pays for). Writes into ``buf``'s tensors when given:
    the weight gradients per layer, the scratch shared by the layers (``dX`` alternates two)."""
    R, N, n, d = H.shape
    T = N * n
    q, m = cfg.d_qk, cfg.m
    divisor = cfg.logit_divisor
    buf = buf if buf is not None else _Buffers(H.dtype)
    grads: list[torch.Tensor | None] = [None] * len(weights)
    W_U = weights[-1]
    if cfg.pooling == "mean":
        grads[-1] = torch.bmm(_pool(H, mask).transpose(1, 2), dY)
        dpool = torch.bmm(dY, W_U.transpose(1, 2))  # (R, N, d)
        if mask is None:
            dH = (dpool / n).unsqueeze(2).expand(R, N, n, d)
        else:
            w = mask.to(H.dtype)
            dH = torch.mul(dpool.unsqueeze(2), (w / w.sum(dim=1, keepdim=True)).view(1, N, n, 1),
                           out=buf("dH", R, N, n, d))
    else:
        dY2 = dY.reshape(R, T, -1)
        grads[-1] = torch.bmm(H.reshape(R, T, d).transpose(1, 2), dY2)
        dH = torch.bmm(dY2, W_U.transpose(1, 2), out=buf("dH", R, T, d)).view(R, N, n, d)
    b = beta.view(R, 1, 1)
    bf = beta_ffn.view(R, 1, 1)
    for layer in reversed(range(cfg.n_layers)):
        W_Q, W_K, W_V, W_1, W_2 = weights[5 * layer:5 * layer + 5]
        sv = saved[layer]
        dH2 = dH.reshape(R, T, d)
        # FFN sublayer: H = bf Z + act(Z W_1) W_2
        grads[5 * layer + 4] = torch.bmm(sv.G.transpose(1, 2), dH2, out=buf(("dW_2", layer), R, m, d))
        dG = torch.bmm(dH2, W_2.transpose(1, 2), out=buf("dG", R, T, m))
        dP = _activation_backward(cfg.activation, dG, sv.P, sv.G, out=buf("dP", R, T, m))
        grads[5 * layer + 3] = torch.bmm(sv.Z.transpose(1, 2), dP, out=buf(("dW_1", layer), R, d, m))
        dZ = torch.mul(dH2, bf, out=buf("dZ", R, T, d))
        dZ.baddbmm_(dP, W_1.transpose(1, 2))  # (R, T, d); in place: a faster kernel than baddbmm's
        # attention sublayer: Z = b X + A V, A = softmax(S), V = X W_V
        dattn = dZ.view(R * N, n, d)
        dA = torch.bmm(dattn, sv.V.transpose(1, 2), out=buf("dA", R * N, n, n))
        dV = torch.bmm(sv.A.transpose(1, 2), dattn, out=buf("dV", R * N, n, d)).view(R, T, d)
        grads[5 * layer + 2] = torch.bmm(sv.X2.transpose(1, 2), dV, out=buf(("dW_V", layer), R, d, d))
        # softmax's backward A ⊙ (dA − rowsum(dA ⊙ A)), in place into dA (padded keys: A = 0, so dS = 0)
        rowsum = torch.sum(torch.mul(dA, sv.A, out=buf("dA*A", R * N, n, n)), dim=-1, keepdim=True,
                           out=buf("rowsum", R * N, n, 1))
        dS = dA.sub_(rowsum).mul_(sv.A).div_(divisor)
        Xs = sv.X2.reshape(R * N, n, d)
        if fold_logits(d, q):  # S = (X M) Xᵀ / s, M = W_Q W_Kᵀ
            XM, M = sv.QK
            dXM = torch.bmm(dS, Xs, out=buf("dXM", R * N, n, d))
            dM = torch.bmm(sv.X2.transpose(1, 2), dXM.view(R, T, d), out=buf("dM", R, d, d))
            grads[5 * layer] = torch.bmm(dM, W_K, out=buf(("dW_Q", layer), R, d, q))
            grads[5 * layer + 1] = torch.bmm(dM.transpose(1, 2), W_Q, out=buf(("dW_K", layer), R, d, q))
        else:  # S = Q Kᵀ / s
            Q, K = sv.QK
            dQ = torch.bmm(dS, K, out=buf("dQ", R * N, n, q)).view(R, T, -1)
            dK = torch.bmm(dS.transpose(1, 2), Q, out=buf("dK", R * N, n, q)).view(R, T, -1)
            grads[5 * layer] = torch.bmm(sv.X2.transpose(1, 2), dQ, out=buf(("dW_Q", layer), R, d, q))
            grads[5 * layer + 1] = torch.bmm(sv.X2.transpose(1, 2), dK, out=buf(("dW_K", layer), R, d, q))
        if layer == 0:
            break  # nobody needs ∂Φ/∂X of the input
        dX = torch.mul(dZ, b, out=buf(("dX", layer % 2), R, T, d))
        dX.baddbmm_(dV, W_V.transpose(1, 2))
        if fold_logits(d, q):
            dX.add_(torch.bmm(dXM.view(R, T, d), M.transpose(1, 2), out=buf("dXM Mᵀ", R, T, d)))
            dX.add_(torch.bmm(dS.transpose(1, 2), XM, out=buf("dSᵀ XM", R * N, n, d)).view(R, T, d))
        else:
            dX.baddbmm_(dQ, W_Q.transpose(1, 2)).baddbmm_(dK, W_K.transpose(1, 2))
        dH = dX.view(R, N, n, d)
    return grads


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


def _residual(Y_hat: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``Ŷ − Y`` of every run, zero at padded tokens of per-token outputs."""
    residual = Y_hat - Y.unsqueeze(0)
    if mask is not None and residual.ndim == 4:
        residual = residual * mask.unsqueeze(0).unsqueeze(-1).to(residual.dtype)
    return residual


def stacked_losses(Y_hat: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None, reduction: str) -> torch.Tensor:
    """Per-run ``½ Σ ‖Ŷ − Y‖²`` over real entries (÷ N for ``"mean"``), shape (R,)."""
    return _loss_and_output_grad(Y_hat, Y, mask, reduction)[0]


def _loss_and_output_grad(Y_hat: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None,
                          reduction: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-run losses (R,) and ∂Φ_r/∂Ŷ_r (the shape of Ŷ)."""
    residual = _residual(Y_hat, Y, mask)
    loss = 0.5 * residual.pow(2).flatten(1).sum(dim=1)
    if reduction == "mean":
        return loss / Y.shape[0], residual / Y.shape[0]
    return loss, residual


def _sigma(Z: torch.Tensor, mask: torch.Tensor | None) -> tuple[np.ndarray, np.ndarray]:
    """σ_max and σ_min of every run's stacked Z (real tokens only), as :func:`resgd.core.train.train_gd`
    records them (:func:`resgd.core.conditioning.gram_singular_values`, batched over the runs)."""
    sigma = gram_singular_values(Z.flatten(1, 2) if mask is None else Z[:, mask])
    return sigma[:, 0], sigma[:, -1]


_STORE = threading.local()


def _buffer_store(key: tuple) -> dict:
    """This thread's buffers for the stack shape ``key``, kept from call to call (the map trains
    many stacks of one shape in a row; a call's first step no longer page-faults them in). Only
    the last shape's are kept; no buffer outlives a call in anything the call returns."""
    if getattr(_STORE, "key", None) != key:
        _STORE.key, _STORE.buffers = key, {}
    return _STORE.buffers


def _native_step(cfg: ModelConfig, gd: GDConfig, buf: _Buffers):
    """The compiled evaluation for this stack shape (kept with its buffers), or None where the
    Python path runs: no compiler, ``$RESGD_NATIVE=0``, :func:`resgd.core.native.python_path`, or
    an activation other than ReLU."""
    step = _native.step_class()
    if step is None or cfg.activation != "relu":
        return None
    key = ("native", gd.reduction)  # the store's key holds the model's shape, not the GD settings
    if key not in buf.store:
        buf.store[key] = _make_native(step, cfg, gd)
    return buf.store[key]


def _make_native(step_class, cfg: ModelConfig, gd: GDConfig):
    return step_class(cfg.n_layers, cfg.d_qk, cfg.m, fold_logits(cfg.d, cfg.d_qk), cfg.pooling == "mean",
                      gd.reduction == "mean", float(cfg.logit_divisor))


def _evaluate(native, weights, cfg: ModelConfig, gd: GDConfig, beta, beta_ffn, X_runs, mask, Y, n_weights: int,
              record: bool, buf: _Buffers):
    """One step's (loss, flat gradients, their norms, the first layer's Z) of every run: compiled
    (``native``) or by the Python path (``native`` None), the same numbers."""
    if native is not None:  # the same arithmetic from C++ (resgd.core.native)
        return native.evaluate(weights, beta, beta_ffn, X_runs, mask, Y, n_weights)
    saved: list[_Saved] = []
    Y_hat, Z0, H = _forward(weights, cfg, beta, beta_ffn, X_runs, mask, record, saved, buf)
    loss, dY = _loss_and_output_grad(Y_hat, Y, mask, gd.reduction)
    grads = _backward(saved, weights, cfg, beta, beta_ffn, H, dY, mask, buf)
    flat = torch.cat([g.reshape(X_runs.shape[0], -1) for g in grads], dim=1, out=buf("flat", X_runs.shape[0], n_weights))
    return loss, flat, torch.linalg.vector_norm(flat.to(torch.float64), dim=1), Z0


SELF_TEST_CASES = ((ModelConfig(d=4, d_qk=6, m=5, k=1, n_layers=2, pooling="mean"), True, "mean"),
                   (ModelConfig(d=6, d_qk=3, m=5, k=2, n_layers=1), False, "sum"))
"""Tiny stacks on both branches of the logits, pooled and padded or per token: the compiled step's check."""


def _self_test(step_class) -> str | None:
    """Why one compiled step differs from the Python path on :data:`SELF_TEST_CASES` (None: equal).
    Bit for bit, no tolerance: both make the same ATen calls in the same order, so any difference
    is a foreign or broken build, not rounding."""
    g = torch.Generator().manual_seed(0)
    for cfg, masked, reduction in SELF_TEST_CASES:
        N, n, R = 3, 4, 2
        X = torch.randn(N, n, cfg.d, generator=g, dtype=torch.float64)
        mask = torch.arange(n).view(1, n) < torch.tensor([4, 2, 3]).view(N, 1) if masked else None
        X = X * mask.unsqueeze(-1) if masked else X
        Y = torch.randn(output_shape(cfg, X), generator=g, dtype=torch.float64)
        gd = GDConfig(lr=0.1, iterations=1, reduction=reduction)
        layout = _Layout(cfg)
        theta = layout.flatten([init_params(cfg, seed, dtype=torch.float64) for seed in range(R)], torch.float64)
        beta = torch.tensor([0.5, 1.0], dtype=torch.float64)
        args = (layout.views(theta), cfg, gd, beta, beta.flip(0), X.expand(R, *X.shape).contiguous(), mask, Y,
                theta.shape[1], True)
        compiled = _evaluate(_make_native(step_class, cfg, gd), *args, _Buffers(torch.float64))
        python = _evaluate(None, *args, _Buffers(torch.float64))
        for name, a, b in zip(("loss", "gradient", "gradient norm", "first layer's Z"), compiled, python):
            if not (a.shape == b.shape and torch.equal(a, b)):
                return f"{name} differs ({cfg.n_layers} layers, d = {cfg.d}, d_qk = {cfg.d_qk})"
    return None


_native.set_self_test(_self_test)


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
    table = np.full((R, gd.iterations + 1, len(ROW_FIELDS)), math.nan)  # run r's row t: ROW_FIELDS
    outcome: list[StackedRun | None] = [None] * R
    loss0 = None
    buf = _Buffers(dtype, _buffer_store((shape_model(cfg), tuple(X.shape), R, dtype)))
    native = _native_step(cfg, gd, buf)

    weights = layout.views(theta)  # θ is updated in place: its views stay valid until runs leave the stack
    X_runs = X.expand(len(alive), *X.shape).contiguous()  # the first layer's input of every run, copied once

    for t in range(gd.iterations + 1):
        record = t % gd.record_every == 0 or t == gd.iterations
        loss, flat, norm, Z0 = _evaluate(native, weights, cfg, gd, beta, beta_ffn, X_runs, mask, Y, theta.shape[1],
                                         record, buf)
        values = loss.to(torch.float64).numpy()
        norms = norm.numpy()
        smax = smin = None
        if record:
            smax, smin = _sigma(Z0, mask)
        if loss0 is None:
            loss0 = values.copy()
        stop = ~np.isfinite(values) | (values > gd.divergence_factor * loss0)
        table[alive, t, 0], table[alive, t, 1], table[alive, t, 2] = t, values, norms
        if record:
            table[alive, t, 3], table[alive, t, 4] = smin, smax
        for r in alive[stop]:
            outcome[r] = StackedRun(history_frame(table[r, :t + 1]), None, True)
        if t == gd.iterations:
            break
        if stop.any():  # diverged runs leave the stack; the others are untouched
            keep = torch.from_numpy(np.flatnonzero(~stop))
            alive, loss0 = alive[~stop], loss0[~stop]
            theta, flat, lr = theta[keep], flat[keep], lr[keep]
            beta, beta_ffn = beta[keep], beta_ffn[keep]
            if len(alive) == 0:
                break
            weights, X_runs = layout.views(theta), X_runs[keep]
        theta.addcmul_(flat, lr.view(-1, 1), value=-1.0)  # θ_r ← θ_r − μ_r ∇Φ_r (in place: no fresh pages)
    for i, r in enumerate(alive):
        if outcome[r] is None:
            outcome[r] = StackedRun(history_frame(table[r, :t + 1]), layout.unflatten(theta[i]), False)  # t: the last step
    return outcome


def train_runs(params: Sequence[Params], models: Sequence[ModelConfig], X: torch.Tensor, Y: torch.Tensor,
               gds: Sequence[GDConfig], mask: torch.Tensor | None = None, *, stacked: bool | None = None) -> list[StackedRun]:
    """Runs of one shape trained the way that pays: in one stack (:func:`train_stacked`), or one at
    a time by :func:`resgd.core.train.train_gd`; same report either way. ``stacked`` is the caller's
    decision; ``None``: :func:`worth_stacking`."""
    if stacked is None:
        stacked = worth_stacking(models[0], X.shape[0], X.shape[1])
    if stacked:
        return train_stacked(params, models, X, Y, gds, mask)
    out = []
    for p, cfg, gd in zip(params, models, gds):
        try:
            result = train_gd(p, cfg, X, Y, gd, mask=mask)
            out.append(StackedRun(result.history, result.params, False))
        except DivergenceError as error:
            out.append(StackedRun(error.history, None, True))
    return out
