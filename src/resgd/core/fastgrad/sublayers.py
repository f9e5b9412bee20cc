"""Forward and backward of each sublayer — attention, FFN, read-out and loss — for one chunk of samples.

Each function is one line group of the notation in :mod:`resgd.core.fastgrad` (``model.py`` has the
same math with autograd). They write into the workspace's buffers and the caller's gradient
tensors: on the first chunk a weight gradient is set (``torch.mm(…, out=g)``), on later chunks
accumulated (``g.addmm_(…)``), see :func:`_gemm_into`. Shapes: ``c`` samples of ``n`` tokens,
``T = c·n`` stacked tokens; a name ending in ``2`` is the (T, ·) view of a (c, n, ·) tensor.
"""

from __future__ import annotations

import functools

import torch

from ..model import WEIGHT_NAMES, ModelConfig, Params, fold_logits
from .softmax import attention_probs_
from .workspace import Scratch

_aten = torch.ops.aten


def _gemm_into(grad: torch.Tensor, a: torch.Tensor, b: torch.Tensor, first: bool) -> None:
    """``grad = a b`` on the first chunk, ``grad += a b`` on the others (weight gradients sum over samples)."""
    if first:
        torch.mm(a, b, out=grad)
    else:
        grad.addmm_(a, b)


# --------------------------------------------------------------------------------------------
# Activations and their derivatives (the fused ATen kernels autograd uses, writing into buffers).


def _act_forward(name: str, P: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    if name == "gelu":
        return torch._C._nn.gelu(P, out=out)
    return torch._C._nn.softplus(P, 1.0, 20.0, out=out)  # torch's defaults: beta=1, threshold=20


def _act_backward_(name: str, dG: torch.Tensor, P: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """``dG ⊙ act'(P)``, written into ``dG``."""
    if name == "relu":
        return _aten.threshold_backward.grad_input(dG, G, 0, grad_input=dG)  # 0 where relu(P) = 0
    if name == "gelu":
        return _aten.gelu_backward.grad_input(dG, P, grad_input=dG)
    return _aten.softplus_backward.grad_input(dG, P, 1.0, 20.0, grad_input=dG)


# --------------------------------------------------------------------------------------------
# Per-call constants.


@functools.lru_cache(maxsize=None)
def _layer_names(layer: int) -> tuple[str, ...]:
    return tuple(f"{name}.{layer}" for name in WEIGHT_NAMES)


@functools.lru_cache(maxsize=None)
def _layer_keys(layer: int) -> tuple[str, ...]:
    return tuple(f"{key}{layer}" for key in ("QL", "K", "V", "P", "G"))


class Block:
    """One block's weights, their transposes, weight-only products and the model's constants."""

    def __init__(self, params: Params, layer: int, cfg: ModelConfig):
        self.index = layer
        self.names = _layer_names(layer)
        self.W_Q, self.W_K, self.W_V, self.W_1, self.W_2 = (params[name] for name in self.names)
        self.inv_s = 1.0 / cfg.logit_divisor
        self.folded = fold_logits(cfg.d, cfg.d_qk)
        if self.folded:
            self.W_QL = torch.mm(self.W_Q, self.W_K.T).mul_(self.inv_s)  # M = W_Q W_Kᵀ / s
        else:
            self.W_QL = self.W_Q * self.inv_s
        self.width = cfg.d if self.folded else cfg.d_qk  # width of the "queries" X W_QL
        self.d, self.d_qk, self.m = cfg.d, cfg.d_qk, cfg.m
        self.beta, self.beta_ffn = float(cfg.beta), float(cfg.residual_ffn)
        self.activation = cfg.activation
        self.W_QL_T, self.W_K_T, self.W_V_T, self.W_1_T, self.W_2_T = (
            self.W_QL.T, self.W_K.T, self.W_V.T, self.W_1.T, self.W_2.T)
        self.k_QL, self.k_K, self.k_V, self.k_P, self.k_G = _layer_keys(layer)


class Chunk:
    """Samples ``s0:s1`` of the batch: slices per sample (``rows``) and per token (``tokens``)."""

    __slots__ = ("s0", "s1", "c", "n", "T", "first", "whole")

    def __init__(self, s0: int, s1: int, N: int, n: int):
        self.s0, self.s1, self.c, self.n, self.T = s0, s1, s1 - s0, n, (s1 - s0) * n
        self.first, self.whole = s0 == 0, s0 == 0 and s1 == N

    def rows(self, t: torch.Tensor | None) -> torch.Tensor | None:
        return t if self.whole or t is None else t[self.s0:self.s1]

    def tokens(self, t: torch.Tensor | None) -> torch.Tensor | None:
        return t if self.whole or t is None else t[self.s0 * self.n:self.s1 * self.n]


class Saved:
    """What a block's backward pass needs from its forward pass (views of workspace buffers)."""

    __slots__ = ("X2", "QL2", "QL", "K", "V", "A_T", "Z2", "P2", "G2")


# --------------------------------------------------------------------------------------------
# Attention:  S = X W_Q (X W_K)ᵀ / s,  A = softmax(S),  Z = β X + A V,  V = X W_V


def attention_forward(blk: Block, ch: Chunk, X: torch.Tensor, buf: Scratch, A_T: torch.Tensor,
                      Attn: torch.Tensor, Z: torch.Tensor, keymask, keybias, expect_large: bool) -> tuple[Saved, bool]:
    """``Z = β X + softmax(S) V`` into ``Z`` (``A_T``, ``Attn``: the trace's chunk views). Returns what
    the backward pass needs and whether the softmax took the max-shift."""
    saved = Saved()
    X2 = saved.X2 = X.view(ch.T, blk.d)
    saved.QL2, QL = buf.tokens(blk.k_QL, blk.width, ch.c)
    torch.mm(X2, blk.W_QL, out=saved.QL2)  # Q = X W_Q / s, or X M when folded
    if blk.folded:
        K = X  # S = (X M) Xᵀ
    else:
        K2, K = buf.tokens(blk.k_K, blk.d_qk, ch.c)
        torch.mm(X2, blk.W_K, out=K2)
    V2, V = buf.tokens(blk.k_V, blk.d, ch.c)
    torch.mm(X2, blk.W_V, out=V2)
    shifted = attention_probs_(A_T, K, QL, keymask, keybias, expect_large=expect_large)
    torch.bmm(A_T.transpose(1, 2), V, out=Attn)  # Attn = A V
    if blk.beta != 0.0:
        torch.add(Attn, X, alpha=blk.beta, out=Z)
    saved.QL, saved.K, saved.V, saved.A_T, saved.Z2 = QL, K, V, A_T, Z.view(ch.T, blk.d)
    return saved, shifted


def attention_backward(blk: Block, ch: Chunk, saved: Saved, dZ2: torch.Tensor, grads: Params,
                       dM: torch.Tensor | None, buf: Scratch, need_dX: bool) -> torch.Tensor | None:
    """From ``dZ``: ``dW_V = Xᵀ dV``, ``dW_Q``/``dW_K`` (or ``dM`` when folded, finished by the caller),
    and ``dX = β dZ + dQ (W_Q/s)ᵀ + dK W_Kᵀ + dV W_Vᵀ`` in ``dZ``'s buffer if ``need_dX``."""
    n_Q, n_K, n_V = blk.names[:3]
    X2_T, QL, K, V, A_T = saved.X2.T, saved.QL, saved.K, saved.V, saved.A_T
    c, n, first = ch.c, ch.n, ch.first
    dZ = dZ2.view(c, n, blk.d)
    dA = torch.bmm(V, dZ.transpose(1, 2), out=buf.rows("dA", c, n, n))  # dA = dZ Vᵀ (keys-major)
    dS = torch._softmax_backward_data(dA, A_T, 1, dA.dtype, grad_input=dA)  # in place: dA not needed after
    dV2, dV = buf.tokens("dV", blk.d, c)
    torch.bmm(A_T, dZ, out=dV)  # dV = Aᵀ dZ
    dQL2, dQL = buf.tokens("dQL", blk.width, c)
    torch.bmm(dS.transpose(1, 2), K, out=dQL)  # dQ = dS K
    _gemm_into(grads[n_V], X2_T, dV2, first)
    if blk.folded:
        _gemm_into(dM, X2_T, dQL2, first)  # dM = Σ Xᵀ dS X
    else:
        dK2, dK = buf.tokens("dK", blk.d_qk, c)
        torch.bmm(dS, QL, out=dK)  # dK = dSᵀ Q
        _gemm_into(grads[n_Q], X2_T, dQL2, first)
        _gemm_into(grads[n_K], X2_T, dK2, first)
    if not need_dX:
        return None
    dX2 = dZ2.addmm_(dQL2, blk.W_QL_T, beta=blk.beta)  # in place: dZ is not needed any more
    dX2.addmm_(dV2, blk.W_V_T)
    if blk.folded:
        dZ.baddbmm_(dS, QL)  # the keys side of S = (X M) Xᵀ (dZ is dX's (c, n, d) view)
    else:
        dX2.addmm_(dK2, blk.W_K_T)
    return dX2


def finish_attention_grads(blk: Block, grads: Params, dM: torch.Tensor | None) -> None:
    """After the last chunk: ``dW_Q = dM W_K / s``, ``dW_K = dMᵀ W_Q / s`` (folded), or the 1/s of ``dW_Q``."""
    n_Q, n_K = blk.names[:2]
    if blk.folded:
        torch.mm(dM, blk.W_K, out=grads[n_Q]).mul_(blk.inv_s)
        torch.mm(dM.T, blk.W_Q, out=grads[n_K]).mul_(blk.inv_s)
    else:
        grads[n_Q].mul_(blk.inv_s)


# --------------------------------------------------------------------------------------------
# FFN:  P = Z W_1,  G = act(P),  H = β_ffn Z + G W_2


def ffn_forward(blk: Block, ch: Chunk, saved: Saved, buf: Scratch, H: torch.Tensor) -> torch.Tensor:
    """``H = β_ffn Z + act(Z W_1) W_2`` into ``H`` (the trace's chunk view); returns ``H``."""
    P2, _ = buf.tokens(blk.k_P, blk.m, ch.c)
    torch.mm(saved.Z2, blk.W_1, out=P2)
    if blk.activation == "relu":
        G2 = P2.relu_()  # the backward pass needs only relu(P)
    else:
        G2 = _act_forward(blk.activation, P2, buf.tokens(blk.k_G, blk.m, ch.c)[0])
    H2 = torch.mm(G2, blk.W_2, out=H.view(ch.T, blk.d))  # then add: cheaper than addmm's copy into H
    if blk.beta_ffn != 0.0:
        H2.add_(saved.Z2, alpha=blk.beta_ffn)
    saved.P2, saved.G2 = P2, G2
    return H


def ffn_backward(blk: Block, ch: Chunk, saved: Saved, dH2: torch.Tensor, grads: Params, buf: Scratch) -> torch.Tensor:
    """From ``dH``: ``dW_2 = Gᵀ dH``, ``dP = (dH W_2ᵀ) ⊙ act'(P)``, ``dW_1 = Zᵀ dP`` and
    ``dZ = β_ffn dH + dP W_1ᵀ``, returned in ``dH``'s buffer."""
    n_1, n_2 = blk.names[3:]
    _gemm_into(grads[n_2], saved.G2.T, dH2, ch.first)
    dG2 = torch.mm(dH2, blk.W_2_T, out=buf.tokens("dG", blk.m, ch.c)[0])
    dP2 = _act_backward_(blk.activation, dG2, saved.P2, saved.G2)
    _gemm_into(grads[n_1], saved.Z2.T, dP2, ch.first)
    return dH2.addmm_(dP2, blk.W_1_T, beta=blk.beta_ffn)  # in place: dH is not needed any more


# --------------------------------------------------------------------------------------------
# Read-out and loss:  Ŷ = H W_U (per token) or mean-pool(H) W_U,  Φ = ½ Σ (Ŷ − Y)²  (÷ N for "mean")


class Readout:
    """The output layer's weight and the loss's constants for one call."""

    def __init__(self, params: Params, cfg: ModelConfig, Y: torch.Tensor, Y_hat: torch.Tensor,
                 mask: torch.Tensor | None, scale: float):
        self.W_U = params["W_U"]
        self.W_U_T = self.W_U.T
        self.d, self.k = cfg.d, cfg.k
        self.mean_pool = cfg.pooling == "mean"
        self.Y, self.Y_hat, self.scale = Y, Y_hat, scale
        N, n = Y_hat.shape[0], (1 if self.mean_pool else Y_hat.shape[1])
        dtype = Y_hat.dtype
        self.tokmask = None if (mask is None or self.mean_pool) else mask.to(dtype).view(N * n, 1)
        self.pool_weights = None
        if self.mean_pool and mask is not None:
            weights = mask.to(dtype)
            self.pool_weights = weights / weights.sum(dim=1, keepdim=True)  # rows sum to 1 over real tokens


def output_forward(out: Readout, ch: Chunk, H: torch.Tensor, buf: Scratch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``Ŷ`` into the trace, the chunk's unscaled ``Σ (Ŷ − Y)²``, the residual ``R = scale·(Ŷ − Y)``
    (padded tokens zeroed) and the read-out's input (pooled ``H``, or ``H``)."""
    c, T = ch.c, ch.T
    if out.mean_pool:
        pooled = buf.rows("pooled", c, out.d)
        if out.pool_weights is None:
            torch.mean(H, dim=1, out=pooled)
        else:
            torch.bmm(ch.rows(out.pool_weights).unsqueeze(1), H, out=pooled.view(c, 1, out.d))
        y_hat = torch.mm(pooled, out.W_U, out=ch.rows(out.Y_hat))
        R = torch.sub(y_hat, ch.rows(out.Y), out=buf.rows("R", c, out.k))
        read_in = pooled
    else:
        read_in = H.view(T, out.d)
        y_hat = torch.mm(read_in, out.W_U, out=ch.rows(out.Y_hat).view(T, out.k))
        R = torch.sub(y_hat, ch.rows(out.Y).reshape(T, out.k), out=buf.tokens("R", out.k, c)[0])
        if out.tokmask is not None:
            R.mul_(ch.tokens(out.tokmask))  # padded tokens do not count
    R1 = R.view(-1)
    sq = torch.dot(R1, R1)
    if out.scale != 1.0:
        R.mul_(out.scale)
    return sq, R, read_in


def output_backward(out: Readout, ch: Chunk, R: torch.Tensor, read_in: torch.Tensor, grads: Params,
                    buf: Scratch) -> torch.Tensor:
    """``dW_U = (read-out input)ᵀ R`` and ``dH`` (T, d): ``R W_Uᵀ``, spread over the pooled tokens."""
    c, n = ch.c, ch.n
    _gemm_into(grads["W_U"], read_in.T, R, ch.first)
    if not out.mean_pool:
        return torch.mm(R, out.W_U_T, out=buf.tokens("dH", out.d, c)[0])
    dpooled = torch.mm(R, out.W_U_T, out=buf.rows("dpooled", c, out.d))
    dH2, dH = buf.tokens("dH", out.d, c)
    if out.pool_weights is None:
        torch.mul(dpooled.unsqueeze(1).expand(c, n, out.d), 1.0 / n, out=dH)
    else:
        torch.mul(ch.rows(out.pool_weights).unsqueeze(2), dpooled.unsqueeze(1), out=dH)
    return dH2
