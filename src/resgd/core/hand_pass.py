"""The hand pass: one GD step of a stack of R runs of one shape, the forward pass and the
hand-derived backward pass (one batched product per product of the forward pass, no autograd
graph), for the trainer (:mod:`resgd.core.trainer`).

Why apart from the trainer: this is the maths of :func:`resgd.core.model.forward` and its gradient
with a run axis in front, apart from the trainer's bookkeeping (histories, divergence, checkpoints).
:func:`stacked_forward` mirrors the model's block sublayer by sublayer, and :func:`stacked_backward`
is one function per sublayer, in reverse, each with its gradient formula.

Layouts (shapes as model.py's, with these differences):

* every weight, activation and gradient has the run axis first: ``(R, …)``; β and β_ffn are (R,);
* a layer's tokens are either all of a run's tokens in a row, ``(R, T, ·)`` with T = N·n (for the
  products with a weight), or one sample per batch entry, ``(R·N, n, ·)`` (for the products within
  a sample): two views of the same memory;
* the attention logits and probabilities are stored transposed, keys-major: ``St[p, j, i]`` is
  model.py's ``S[p, i, j]`` (key j, query i), and so are ``At`` and their gradients, so that the
  softmax reduces over dim 1 with the queries contiguous;
* a run's weights live in one flat row of θ (R, P) (:class:`Layout`); the code reads them by name
  through :class:`Weights`, views into that row.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from dataclasses import dataclass, replace
from typing import Iterator, NamedTuple, Sequence

import numpy as np
import torch

from .conditioning import gram_singular_values
from .loss import output_shape, per_run_loss_and_output_grad
from .model import ModelConfig, Params, activation_function, fold_logits, weight_shapes
from ..validation import ConfigError, check_inputs


class Block(NamedTuple):
    """One layer's weights of every run (or their gradients), named as in :func:`resgd.core.model.block`;
    each (R, fan_in, fan_out). The field order is the flat layout's (:func:`resgd.core.model.weight_shapes`)."""

    W_Q: torch.Tensor  # (R, d, d_qk)
    W_K: torch.Tensor  # (R, d, d_qk)
    W_V: torch.Tensor  # (R, d, d)
    W_1: torch.Tensor  # (R, d, m): the FFN's first layer
    W_2: torch.Tensor  # (R, m, d): the FFN's second layer


class Weights(NamedTuple):
    """All weights of every run (or their gradients): the blocks, first layer first, and the output layer."""

    blocks: tuple[Block, ...]
    W_U: torch.Tensor  # (R, d, k)

    def tensors(self) -> Iterator[torch.Tensor]:
        """Every tensor in the flat layout's order."""
        return itertools.chain(*self.blocks, (self.W_U,))


class Layout:
    """Where each weight lives in a run's flat parameter vector (a row of θ, the order of ``weight_shapes``)."""

    def __init__(self, cfg: ModelConfig):
        self.shapes = weight_shapes(cfg)
        self.names = list(self.shapes)
        self.sizes = [a * b for a, b in self.shapes.values()]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).tolist()
        self.n_weights = self.offsets[-1]  # P
        self.n_layers = cfg.n_layers
        # Weights.tensors()' order, which the flat gradient is concatenated in
        assert self.names == [f"{name}.{layer}" for layer in range(cfg.n_layers) for name in Block._fields] + ["W_U"]

    def flatten(self, params: Sequence[Params], dtype: torch.dtype) -> torch.Tensor:
        """θ (R, P): run r's weights in row r."""
        return torch.stack([torch.cat([p[name].detach().reshape(-1).to(dtype) for name in self.names])
                            for p in params])

    def views(self, theta: torch.Tensor) -> Weights:
        """Every weight of every run by name, as views into ``theta`` (updating θ in place updates them)."""
        R = theta.shape[0]
        view = {name: theta[:, a:b].view(R, *shape)
                for name, a, b, shape in zip(self.names, self.offsets, self.offsets[1:], self.shapes.values())}
        blocks = tuple(Block(**{name: view[f"{name}.{layer}"] for name in Block._fields})
                       for layer in range(self.n_layers))
        return Weights(blocks=blocks, W_U=view["W_U"])

    def unflatten(self, row: torch.Tensor) -> Params:
        """One run's weights by name from its row of θ (copies)."""
        return {name: row[a:b].view(shape).clone()
                for name, a, b, shape in zip(self.names, self.offsets, self.offsets[1:], self.shapes.values())}


class StackShape(NamedTuple):
    """What the step reads of the model its runs share. No β, β_ffn or init scale: those are per
    run (:attr:`Stack.beta`, :attr:`Stack.beta_ffn`), and a shared model's would be one run's."""

    n_layers: int
    d_qk: int
    m: int
    logit_divisor: float
    activation: str
    pooling: str

    @classmethod
    def of(cls, cfg: ModelConfig) -> StackShape:
        return cls(cfg.n_layers, cfg.d_qk, cfg.m, cfg.logit_divisor, cfg.activation, cfg.pooling)


@dataclass(frozen=True)
class Stack:
    """What every step of a stack reads besides the weights: the shared model shape and data, and the
    per-run residual weights (one row per run still in the stack)."""

    shape: StackShape
    beta: torch.Tensor  # (R,)
    beta_ffn: torch.Tensor  # (R,)
    X: torch.Tensor  # (R, N, n, d): the first layer's input, one copy per run; or (N, n, d), shared (forward only)
    mask: torch.Tensor | None  # (N, n), True at real tokens
    Y: torch.Tensor | None = None  # targets: (N, …) shared, or (R, N, …) one per run
    reduction: str = "sum"
    n_weights: int = 0  # P, the length of a run's flat gradient

    @classmethod
    def of(cls, models: Sequence[ModelConfig], X: torch.Tensor, mask: torch.Tensor | None, **rest) -> Stack:
        """The stack of runs ``models`` (one shape, :func:`resgd.core.trainer.shape_model`) on ``X``."""
        return cls(shape=StackShape.of(models[0]), beta=per_run(models, "beta", X.dtype),
                   beta_ffn=per_run(models, "residual_ffn", X.dtype), X=X, mask=mask, **rest)

    # made once per stack rather than at every step:
    @functools.cached_property
    def residual_4d(self) -> tuple[torch.Tensor, torch.Tensor]:
        """β and β_ffn as (R, 1, 1, 1), against the (R, N, n, d) activations."""
        return self.beta.view(-1, 1, 1, 1), self.beta_ffn.view(-1, 1, 1, 1)

    @functools.cached_property
    def residual_3d(self) -> tuple[torch.Tensor, torch.Tensor]:
        """β and β_ffn as (R, 1, 1), against the (R, T, d) gradients."""
        return self.beta.view(-1, 1, 1), self.beta_ffn.view(-1, 1, 1)

    @functools.cached_property
    def keypad(self) -> torch.Tensor | None:
        """The padded keys as (1, N, n, 1): along dim 2 of the keys-major logits St viewed (R, N, n, n)."""
        return None if self.mask is None else ~self.mask.view(1, *self.mask.shape, 1)

    def select(self, keep: torch.Tensor) -> Stack:
        """The stack of the runs ``keep`` (the targets stay: where runs leave, :func:`resgd.core.trainer.train_stacked`, all share them)."""
        return replace(self, beta=self.beta[keep], beta_ffn=self.beta_ffn[keep], X=self.X[keep])


class BufferRuleError(RuntimeError):
    """The forward pass saved a scratch buffer for the backward pass (the rule of :class:`Buffers`)."""


class Buffers:
    """Tensors reused from step to step of one :func:`resgd.core.trainer.train_stacked` call, by key and shape.

    Fresh intermediates every step came from the allocator, glibc handed such blocks back to the
    system, and every step page-faulted them in again, so the memory-bound kernels ran out of cache.
    Every operation writes into a buffer with ``out=`` instead: the same kernels on the same
    layouts, so every result is bit for bit what it was (``tests/test_stack_identity.py``,
    ``tests/test_engine_reference.py``). ``None`` as the store (:func:`predict_stacked`) gives fresh tensors.

    The keys, and the rule that follows from them:

    * ``(name, layer)``: that layer's own buffer, written once per step;
    * ``name`` (a string): scratch, shared by every layer and by the backward pass, overwritten at
      its next use (the next layer's, or the backward pass's).

    So a tensor the backward pass reads (a :class:`Saved` field) must be a per-layer buffer (or a
    view of one), the stack's input or a fresh tensor, never scratch: the next layer would overwrite
    it before the backward pass reads it, silently. :meth:`check_saved` enforces this
    (:class:`BufferRuleError`) for every layer the forward pass saves."""

    def __init__(self, dtype: torch.dtype, store: dict | None = None):
        self.dtype, self.store = dtype, store
        self.scratch: dict[str, torch.Tensor] = {}  # each scratch name's tensor last handed out
        self._scratch_memory: dict[int, str] | None = None  # their storages' addresses → name

    def __call__(self, key: str | tuple[str, int], *shape: int) -> torch.Tensor:
        if self.store is None:
            tensor = torch.empty(shape, dtype=self.dtype)
        else:
            tensor = self.store.get(key)
            if tensor is None or tensor.shape != shape:
                tensor = self.store[key] = torch.empty(shape, dtype=self.dtype)
        if isinstance(key, str) and self.scratch.get(key) is not tensor:
            self.scratch[key] = tensor
            self._scratch_memory = None
        return tensor

    def check_saved(self, saved: Saved, layer: int) -> Saved:
        """``saved`` (layer ``layer``'s), or :class:`BufferRuleError` if a field's memory is a scratch buffer's."""
        if self._scratch_memory is None:
            self._scratch_memory = {t.untyped_storage().data_ptr(): name for name, t in self.scratch.items()}
        for field in Saved.__slots__:
            tensor = getattr(saved, field)
            if tensor is not None and (name := self._scratch_memory.get(tensor.untyped_storage().data_ptr())):
                raise BufferRuleError(
                    f"the forward pass saves {field} of layer {layer} for the backward pass in the scratch buffer "
                    f"{name!r}, which the next use overwrites: write it into a per-layer buffer, key ({name!r}, layer)")
        return saved


@dataclass(slots=True)
class Saved:
    """One layer's forward tensors that its backward pass reads (per-layer buffers only: the rule of
    :class:`Buffers`). Folded logits (:func:`resgd.core.model.fold_logits`) keep ``XM`` and ``M``,
    unfolded ones ``Q`` and ``K``."""

    X: torch.Tensor  # (R, T, d): the layer's input
    At: torch.Tensor  # (R·N, n, n): the attention probabilities, keys-major (Aᵀ per sample)
    V: torch.Tensor  # (R·N, n, d)
    Z: torch.Tensor  # (R, T, d)
    P: torch.Tensor  # (R, T, m): the FFN's pre-activation
    G: torch.Tensor  # (R, T, m): act(P)
    Q: torch.Tensor | None = None  # (R·N, n, d_qk)
    K: torch.Tensor | None = None  # (R·N, n, d_qk)
    XM: torch.Tensor | None = None  # (R·N, n, d): X M
    M: torch.Tensor | None = None  # (R, d, d): W_Q W_Kᵀ
    pooled: torch.Tensor | None = None  # (R, N, d): the last layer's output, mean-pooled (mean pooling only)


def stacked_forward(weights: Weights, stack: Stack, *, record: bool = False, saved: list[Saved] | None = None,
                    buf: Buffers | None = None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``Ŷ`` of every run, shape (R, N, k) or (R, N, n, k), the first layer's Z (R, N, n, d) if
    ``record``, and the last layer's output H (R, N, n, d). :func:`resgd.core.model.forward` with a run
    axis in front (the same association of the logits). Appends each layer's :class:`Saved` to
    ``saved`` when given (for :func:`stacked_backward`); writes into ``buf``'s tensors when given."""
    shape, mask = stack.shape, stack.mask
    R = weights.W_U.shape[0]
    N, n, d = stack.X.shape[-3:]
    T = N * n
    q, m = shape.d_qk, shape.m
    divisor = shape.logit_divisor
    fold = fold_logits(d, q)
    buf = buf if buf is not None else Buffers(stack.X.dtype)
    keypad = stack.keypad
    beta, beta_ffn = stack.residual_4d
    H = stack.X if stack.X.ndim == 4 else stack.X.view(1, N, n, d).expand(R, N, n, d)  # (R, N, n, d)
    Z0 = None
    for layer, w in enumerate(weights.blocks):
        X = H.reshape(R, T, d)  # the layer's input, a run's tokens in a row
        Xs = X.reshape(R * N, n, d)  # ... and per sample
        # attention logits
        Q = K = XM = M = None
        if fold:  # model.attention_logits' association: through W_Q W_Kᵀ (d×d)
            M = torch.bmm(w.W_Q, w.W_K.transpose(1, 2), out=buf(("M", layer), R, d, d))
            XM = torch.bmm(X, M, out=buf(("XM", layer), R, T, d)).view(R * N, n, d)
            St = torch.bmm(Xs, XM.transpose(1, 2), out=buf("S", R * N, n, n)).div_(divisor)  # Sᵀ = X (X M)ᵀ / s
        else:
            Q = torch.bmm(X, w.W_Q, out=buf(("Q", layer), R, T, q)).view(R * N, n, q)
            K = torch.bmm(X, w.W_K, out=buf(("K", layer), R, T, q)).view(R * N, n, q)
            St = torch.bmm(K, Q.transpose(1, 2), out=buf("S", R * N, n, n)).div_(divisor)  # Sᵀ = K Qᵀ / s
        if keypad is not None:
            St.view(R, N, n, n).masked_fill_(keypad, float("-inf"))
        # softmax attention, over the keys: dim 1 of the keys-major St, so its reductions run with
        # the queries contiguous, faster than over rows of a few dozen keys; each sample's slab is
        # computed alike whatever R is
        At = torch.softmax(St, 1, out=buf(("A", layer), R * N, n, n))
        # attention's residual: Z = β X + A V
        V = torch.bmm(X, w.W_V, out=buf(("V", layer), R, T, d)).view(R * N, n, d)
        Z = torch.mul(H, beta, out=buf(("Z", layer), R, N, n, d))
        Z.add_(torch.bmm(At.transpose(1, 2), V, out=buf("AV", R * N, n, d)).view(R, N, n, d))  # β H + A V
        if layer == 0 and record:
            Z0 = Z
        # FFN and its residual: H = β_ffn Z + act(Z W_1) W_2
        Z2 = Z.view(R, T, d)
        P = torch.bmm(Z2, w.W_1, out=buf(("P", layer), R, T, m))
        G = _activation_out(shape.activation, P, buf(("G", layer), R, T, m))
        H = torch.mul(Z, beta_ffn, out=buf(("H", layer), R, N, n, d))
        H.add_(torch.bmm(G, w.W_2, out=buf("GW2", R, T, d)).view(R, N, n, d))  # β_ffn Z + G W_2
        if saved is not None:
            saved.append(buf.check_saved(Saved(X=X, At=At, V=V, Z=Z2, P=P, G=G, Q=Q, K=K, XM=XM, M=M), layer))
    # output layer (the unembedding), on the mean-pooled or every token's H
    if shape.pooling == "mean":
        pooled = _pool(H, mask, buf)
        if saved is not None:
            saved[-1].pooled = pooled  # the backward pass reads it instead of pooling H again
            buf.check_saved(saved[-1], len(saved) - 1)
        return _bmm(pooled, weights.W_U), Z0, H
    return _bmm(H.reshape(R, T, d), weights.W_U).view(R, N, n, -1), Z0, H


def _activation_out(name: str, P: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``act(P)``, into ``out`` for ReLU (``torch.relu`` is ``clamp_min(P, 0)``: the same kernel)."""
    if name == "relu":
        return torch.clamp_min(P, 0, out=out)
    return activation_function(name)(P)


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.bmm(a, b)``, through the batched kernel even for a stack of one: for a one-column
    ``b`` (a one-output model's output layer) torch computes a single product by gemv and a stack
    by the batched gemm, which round differently, so a run alone would not be bit for bit the run
    inside a stack. A stack of one is computed as a stack of two (the run twice, expanded: no copy)."""
    if a.shape[0] != 1 or b.shape[-1] != 1:
        return torch.bmm(a, b)
    return torch.bmm(a.expand(2, -1, -1), b.expand(2, -1, -1))[:1]


def _pool(H: torch.Tensor, mask: torch.Tensor | None, buf: Buffers) -> torch.Tensor:
    """Mean over the real tokens, (R, N, d). The masked product goes into a reused buffer: a fresh
    one of the activations' size was page-faulted in anew at every step (:class:`Buffers`), about 4×
    the time of the same product into a kept buffer (SST-2, N = 128); the same kernel either way."""
    if mask is None:
        return H.mean(dim=2)
    R, N, n, d = H.shape
    w = mask.to(H.dtype)
    weighted = torch.mul(H, w.view(1, N, n, 1), out=buf("H*w", R, N, n, d))
    return weighted.sum(dim=2) / w.sum(dim=1, keepdim=True).view(1, N, 1)


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


def stacked_backward(saved: list[Saved], weights: Weights, stack: Stack, H: torch.Tensor, dY: torch.Tensor,
                     buf: Buffers) -> Weights:
    """∂Φ_r/∂θ_r of every run, by name, from the output gradient ``dY`` = ∂Φ/∂Ŷ (shape of Ŷ): the
    hand-derived backward pass of :func:`stacked_forward` (one bmm per product, no autograd graph;
    per-operation overhead is what a stack of tiny models pays for), one function per sublayer, the
    forward's in reverse. Writes into ``buf``'s tensors: the weight gradients per layer, the scratch
    shared by the layers (∂X alternates two)."""
    shape = stack.shape
    R, N, n, d = H.shape
    output_backward = _pooled_output_backward if shape.pooling == "mean" else _token_output_backward
    logits_backward, logits_input_backward = _LOGITS_BACKWARD[fold_logits(d, shape.d_qk)]
    dW_U, dH = output_backward(saved[-1], weights.W_U, H, dY, stack.mask, buf)
    beta, beta_ffn = stack.residual_3d
    grads: list[Block | None] = [None] * shape.n_layers
    for layer in reversed(range(shape.n_layers)):
        w, sv = weights.blocks[layer], saved[layer]
        dW_1, dW_2, dZ = _ffn_backward(sv, w, dH, beta_ffn, shape.activation, layer, buf)
        dAt, dV, dW_V = _attention_values_backward(sv, dZ, layer, buf)
        dSt = _softmax_backward(dAt, sv.At, shape.logit_divisor, buf)
        dW_Q, dW_K, dlogits = logits_backward(sv, w, dSt, layer, buf)
        grads[layer] = Block(W_Q=dW_Q, W_K=dW_K, W_V=dW_V, W_1=dW_1, W_2=dW_2)
        if layer == 0:
            break  # nobody needs ∂Φ/∂X of the input
        dX = _residual_input_backward(dZ, dV, w, beta, layer, buf)
        logits_input_backward(dX, sv, w, dSt, dlogits, buf)
        dH = dX.view(R, N, n, d)
    return Weights(blocks=tuple(grads), W_U=dW_U)


def _token_output_backward(last: Saved, W_U: torch.Tensor, H: torch.Tensor, dY: torch.Tensor,
                           mask: torch.Tensor | None, buf: Buffers) -> tuple[torch.Tensor, torch.Tensor]:
    """The output layer per token, ``Ŷ = H W_U``: ``∂W_U = Hᵀ dY``, ``∂H = dY W_Uᵀ`` (padded tokens
    have dY = 0 already: the loss's residual is masked)."""
    R, N, n, d = H.shape
    T = N * n
    dY2 = dY.reshape(R, T, -1)
    dW_U = torch.bmm(H.reshape(R, T, d).transpose(1, 2), dY2)
    dH = torch.bmm(dY2, W_U.transpose(1, 2), out=buf("dH", R, T, d)).view(R, N, n, d)
    return dW_U, dH


def _pooled_output_backward(last: Saved, W_U: torch.Tensor, H: torch.Tensor, dY: torch.Tensor,
                            mask: torch.Tensor | None, buf: Buffers) -> tuple[torch.Tensor, torch.Tensor]:
    """The output layer on the mean-pooled H, ``Ŷ = pool(H) W_U``: ``∂W_U = pool(H)ᵀ dY`` (the forward
    pass's pooled output), ``∂pool(H) = dY W_Uᵀ``, then :func:`_pool_backward`."""
    dW_U = torch.bmm(last.pooled.transpose(1, 2), dY)
    dpool = torch.bmm(dY, W_U.transpose(1, 2))  # (R, N, d)
    return dW_U, _pool_backward(dpool, mask, H, buf)


def _pool_backward(dpool: torch.Tensor, mask: torch.Tensor | None, H: torch.Tensor, buf: Buffers) -> torch.Tensor:
    """Of :func:`_pool`, ``pool(H)_p = Σ_i w_pi H_pi / Σ_i w_pi`` (w: 1 at real tokens, all 1
    without a mask): ``∂H_pi = w_pi / Σ_j w_pj · ∂pool(H)_p``, (R, N, n, d)."""
    R, N, n, d = H.shape
    if mask is None:
        return (dpool / n).unsqueeze(2).expand(R, N, n, d)
    w = mask.to(H.dtype)
    return torch.mul(dpool.unsqueeze(2), (w / w.sum(dim=1, keepdim=True)).view(1, N, n, 1), out=buf("dH", R, N, n, d))


def _ffn_backward(sv: Saved, w: Block, dH: torch.Tensor, beta_ffn: torch.Tensor, activation: str, layer: int,
                  buf: Buffers) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """∂W_1, ∂W_2 and ∂Z of the FFN and its residual, ``H = β_ffn Z + G W_2``, ``G = act(P)``, ``P = Z W_1``::

        ∂W_2 = Gᵀ ∂H,   ∂G = ∂H W_2ᵀ,   ∂P = act′(P) ⊙ ∂G,   ∂W_1 = Zᵀ ∂P,   ∂Z = β_ffn ∂H + ∂P W_1ᵀ
    """
    R, T, m = sv.P.shape
    d = sv.Z.shape[-1]
    dH2 = dH.reshape(R, T, d)
    dW_2 = torch.bmm(sv.G.transpose(1, 2), dH2, out=buf(("dW_2", layer), R, m, d))
    dG = torch.bmm(dH2, w.W_2.transpose(1, 2), out=buf("dG", R, T, m))
    dP = _activation_backward(activation, dG, sv.P, sv.G, out=buf("dP", R, T, m))
    dW_1 = torch.bmm(sv.Z.transpose(1, 2), dP, out=buf(("dW_1", layer), R, d, m))
    dZ = torch.mul(dH2, beta_ffn, out=buf("dZ", R, T, d))
    dZ.baddbmm_(dP, w.W_1.transpose(1, 2))  # (R, T, d); in place: a faster kernel than baddbmm's
    return dW_1, dW_2, dZ


def _attention_values_backward(sv: Saved, dZ: torch.Tensor, layer: int, buf: Buffers
                               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """∂Aᵀ, ∂V and ∂W_V of attention's residual, ``Z = β X + A V``, ``V = X W_V`` (per sample)::

        ∂Aᵀ = V ∂Zᵀ (keys-major, as At),   ∂V = Aᵀ ∂Z,   ∂W_V = Xᵀ ∂V

    (β X's and V's parts of ∂X: :func:`_residual_input_backward`)."""
    R, T, d = dZ.shape
    RN, n, _ = sv.At.shape
    dattn = dZ.view(RN, n, d)
    dAt = torch.bmm(sv.V, dattn.transpose(1, 2), out=buf("dA", RN, n, n))
    dV = torch.bmm(sv.At, dattn, out=buf("dV", RN, n, d)).view(R, T, d)
    dW_V = torch.bmm(sv.X.transpose(1, 2), dV, out=buf(("dW_V", layer), R, d, d))
    return dAt, dV, dW_V


def _softmax_backward(dAt: torch.Tensor, At: torch.Tensor, divisor: float, buf: Buffers) -> torch.Tensor:
    """∂Sᵀ ÷ s of the softmax over the keys, ``A = softmax(S)``, keys-major, in place into ``dAt``::

        ∂S = A ⊙ (∂A − Σ_keys ∂A ⊙ A)

    divided by the logits' scale s, so that the result is the gradient of the products in S (padded
    keys: A = 0, so ∂S = 0)."""
    RN, n, _ = At.shape
    rowsum = torch.sum(torch.mul(dAt, At, out=buf("dA*A", RN, n, n)), dim=1, keepdim=True, out=buf("rowsum", RN, 1, n))
    return dAt.sub_(rowsum).mul_(At).div_(divisor)


def _folded_logits_backward(sv: Saved, w: Block, dSt: torch.Tensor, layer: int, buf: Buffers
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """∂W_Q, ∂W_K of the folded logits, ``S = (X M) Xᵀ / s``, ``M = W_Q W_Kᵀ`` (``dSt``: ∂Sᵀ ÷ s)::

        ∂(X M) = ∂S X,   ∂M = Xᵀ ∂(X M),   ∂W_Q = ∂M W_K,   ∂W_K = ∂Mᵀ W_Q

    and ∂(X M), for :func:`_folded_logits_input_backward`."""
    R, T, d = sv.X.shape
    RN, n, _ = dSt.shape
    q = w.W_Q.shape[-1]
    Xs = sv.X.reshape(RN, n, d)
    dXM = torch.bmm(dSt.transpose(1, 2), Xs, out=buf("dXM", RN, n, d))
    dM = torch.bmm(sv.X.transpose(1, 2), dXM.view(R, T, d), out=buf("dM", R, d, d))
    dW_Q = torch.bmm(dM, w.W_K, out=buf(("dW_Q", layer), R, d, q))
    dW_K = torch.bmm(dM.transpose(1, 2), w.W_Q, out=buf(("dW_K", layer), R, d, q))
    return dW_Q, dW_K, dXM


def _unfolded_logits_backward(sv: Saved, w: Block, dSt: torch.Tensor, layer: int, buf: Buffers
                              ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """∂W_Q, ∂W_K of the unfolded logits, ``S = Q Kᵀ / s``, ``Q = X W_Q``, ``K = X W_K`` (``dSt``: ∂Sᵀ ÷ s)::

        ∂Q = ∂S K,   ∂K = ∂Sᵀ Q,   ∂W_Q = Xᵀ ∂Q,   ∂W_K = Xᵀ ∂K

    and (∂Q, ∂K), for :func:`_unfolded_logits_input_backward`."""
    R, T, d = sv.X.shape
    RN, n, _ = dSt.shape
    q = w.W_Q.shape[-1]
    dQ = torch.bmm(dSt.transpose(1, 2), sv.K, out=buf("dQ", RN, n, q)).view(R, T, -1)
    dK = torch.bmm(dSt, sv.Q, out=buf("dK", RN, n, q)).view(R, T, -1)
    dW_Q = torch.bmm(sv.X.transpose(1, 2), dQ, out=buf(("dW_Q", layer), R, d, q))
    dW_K = torch.bmm(sv.X.transpose(1, 2), dK, out=buf(("dW_K", layer), R, d, q))
    return dW_Q, dW_K, (dQ, dK)


def _residual_input_backward(dZ: torch.Tensor, dV: torch.Tensor, w: Block, beta: torch.Tensor, layer: int,
                             buf: Buffers) -> torch.Tensor:
    """∂X of attention's residual and values, ``Z = β X + A (X W_V)``: ``∂X = β ∂Z + ∂V W_Vᵀ``, into
    one of two scratch buffers that alternate (this layer's ∂X is the next one down's ∂H); the
    logits' part is added next (:data:`_LOGITS_BACKWARD`)."""
    R, T, d = dZ.shape
    dX = torch.mul(dZ, beta, out=buf(f"dX{layer % 2}", R, T, d))
    dX.baddbmm_(dV, w.W_V.transpose(1, 2))
    return dX


def _folded_logits_input_backward(dX: torch.Tensor, sv: Saved, w: Block, dSt: torch.Tensor, dXM: torch.Tensor,
                                  buf: Buffers) -> None:
    """Adds the folded logits' part of ∂X, X being both factors of ``S = (X M) Xᵀ / s``::

        ∂X += ∂(X M) Mᵀ + ∂Sᵀ (X M)
    """
    R, T, d = dX.shape
    RN, n, _ = dSt.shape
    dX.add_(torch.bmm(dXM.view(R, T, d), sv.M.transpose(1, 2), out=buf("dXM Mᵀ", R, T, d)))
    dX.add_(torch.bmm(dSt, sv.XM, out=buf("dSᵀ XM", RN, n, d)).view(R, T, d))


def _unfolded_logits_input_backward(dX: torch.Tensor, sv: Saved, w: Block, dSt: torch.Tensor,
                                    dQK: tuple[torch.Tensor, torch.Tensor], buf: Buffers) -> None:
    """Adds the unfolded logits' part of ∂X, ``Q = X W_Q``, ``K = X W_K``: ``∂X += ∂Q W_Qᵀ + ∂K W_Kᵀ``."""
    dQ, dK = dQK
    dX.baddbmm_(dQ, w.W_Q.transpose(1, 2)).baddbmm_(dK, w.W_K.transpose(1, 2))


_LOGITS_BACKWARD = {True: (_folded_logits_backward, _folded_logits_input_backward),
                    False: (_unfolded_logits_backward, _unfolded_logits_input_backward)}
"""Whether the logits are folded (:func:`resgd.core.model.fold_logits`) → their backward pass: the
weights' gradients, then their part of ∂X."""


def per_run(models: Sequence[ModelConfig], field: str, dtype: torch.dtype) -> torch.Tensor:
    """Each run's β (``"beta"``) or β_ffn (``"residual_ffn"``), (R,)."""
    return torch.tensor([float(getattr(m, field)) for m in models], dtype=dtype)


def sigma_extremes(Z: torch.Tensor, mask: torch.Tensor | None) -> tuple[np.ndarray, np.ndarray]:
    """σ_max and σ_min of every run's stacked Z (real tokens only), as the trainer
    records them (:func:`resgd.core.conditioning.gram_singular_values`, batched over the runs)."""
    sigma = gram_singular_values(Z.flatten(1, 2) if mask is None else Z[:, mask])
    return sigma[:, 0], sigma[:, -1]


_STORE = threading.local()


def buffer_store(key: tuple) -> dict:
    """This thread's buffers for the stack shape ``key``, kept from call to call (the map trains
    many stacks of one shape in a row; a call's first step no longer page-faults them in). Only
    the last shape's are kept; no buffer outlives a call in anything the call returns."""
    if getattr(_STORE, "key", None) != key:
        _STORE.key, _STORE.buffers = key, {}
    return _STORE.buffers


def forward_backward(weights: Weights, stack: Stack, *, record: bool, buf: Buffers
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One step's numbers: every run's loss (R,), flat gradient ∇Φ_r (R, P) in the layout of θ, its
    norm (R,) in float64, and the first layer's Z (R, N, n, d) when ``record``."""
    saved: list[Saved] = []
    Y_hat, Z0, H = stacked_forward(weights, stack, record=record, saved=saved, buf=buf)
    loss, dY = per_run_loss_and_output_grad(Y_hat, stack.Y, stack.mask, stack.reduction)
    grads = stacked_backward(saved, weights, stack, H, dY, buf)
    R = stack.X.shape[0]
    grad = torch.cat([g.reshape(R, -1) for g in grads.tensors()], dim=1, out=buf("flat", R, stack.n_weights))
    return loss, grad, torch.linalg.vector_norm(grad.to(torch.float64), dim=1), Z0


def predict_stacked(params: Sequence[Params], models: Sequence[ModelConfig], X: torch.Tensor,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    """``Ŷ`` of every run on ``X`` in one pass, shape (R, N, k) or (R, N, n, k): the end-of-run
    metrics of a stack, without one forward per run."""
    layout = Layout(models[0])
    stack = Stack.of(models, X, mask)
    with torch.no_grad():
        return stacked_forward(layout.views(layout.flatten(params, X.dtype)), stack)[0]


def hand_loss_and_grads(params: Sequence[Params], models: Sequence[ModelConfig], X: torch.Tensor, Y: torch.Tensor,
                        mask: torch.Tensor | None = None, reduction: str = "sum", *,
                        per_run_targets: bool = False) -> tuple[torch.Tensor, list[Params]]:
    """The hand pass's losses (R,) and each run's gradient by weight name, for every run of a stack:
    what the trainer computes at t = 0 (for tests against
    :func:`resgd.core.autograd_reference.autograd_loss_and_grad`, the stacked L̂ of
    :mod:`resgd.core.smoothness` and the benchmarks' replay of one step's products).
    ``per_run_targets``: ``Y`` has a leading run axis, run r is fitted to ``Y[r]``."""
    cfg = models[0]
    if per_run_targets:
        if Y.shape[0] != len(params):
            raise ConfigError(f"hand_loss_and_grads: per-run targets need one per run, got {Y.shape[0]} for {len(params)} runs")
        for target in Y:
            check_inputs(X, mask=mask, d=cfg.d, Y=target, Y_shape=output_shape(cfg, X))
    else:
        check_inputs(X, mask=mask, d=cfg.d, Y=Y, Y_shape=output_shape(cfg, X))
    layout = Layout(cfg)
    stack = Stack.of(models, X.expand(len(params), *X.shape).contiguous(), mask, Y=Y, reduction=reduction,
                     n_weights=layout.n_weights)
    loss, grad, _, _ = forward_backward(layout.views(layout.flatten(params, X.dtype)), stack, record=False,
                                        buf=Buffers(X.dtype))
    return loss, [layout.unflatten(row) for row in grad]
