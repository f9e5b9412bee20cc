"""One forward and backward pass over the whole batch, chunk by chunk, and the trainer's fused update.

The chunk loop: forward through every block (:func:`~.sublayers.attention_forward`,
:func:`~.sublayers.ffn_forward`), the read-out and loss, then backward through every block in
reverse, accumulating the weight gradients over chunks; the trace is written in place.
"""

from __future__ import annotations

import math

import torch

from ..model import LayerTrace, ModelConfig, Params, Trace, fold_logits
from ...validation import ConfigError, check_choice
from .plan import chunk_samples
from .sublayers import (Block, Chunk, Readout, attention_backward, attention_forward, ffn_backward, ffn_forward,
                        finish_attention_grads, output_backward, output_forward)
from .workspace import WORKSPACE, Scratch, output


def _check_shapes(cfg: ModelConfig, X: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None) -> None:
    if not isinstance(X, torch.Tensor) or X.ndim != 3 or X.shape[-1] != cfg.d:
        raise ConfigError(f"X: expected a tensor of shape (N, n, d={cfg.d}), got {getattr(X, 'shape', type(X))}")
    N, n, _ = X.shape
    expected = (N, cfg.k) if cfg.pooling == "mean" else (N, n, cfg.k)
    if not isinstance(Y, torch.Tensor) or tuple(Y.shape) != expected:
        raise ConfigError(f"Y: expected shape {expected} to match the model output, got {getattr(Y, 'shape', type(Y))}")
    if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != (N, n)):
        raise ConfigError(f"mask: expected a torch.bool tensor of shape {(N, n)}, got {getattr(mask, 'shape', type(mask))}")


def loss_and_grad_manual(
    params: Params,
    cfg: ModelConfig,
    X: torch.Tensor,
    Y: torch.Tensor,
    mask: torch.Tensor | None = None,
    reduction: str = "sum",
    *,
    chunk_bytes: int | None = None,
) -> tuple[torch.Tensor, Params, Trace]:
    """Φ(θ), ∇Φ(θ) for every weight and the forward :class:`~resgd.core.model.Trace`, without autograd.

    Same contract as :func:`resgd.core.train.loss_and_grad`: ``loss`` is a 0-d tensor, ``grads`` has
    the keys of ``params`` (same order, same shapes), ``trace.layers[l]`` holds ``X, A, Attn, Z,
    H`` of shapes (N, n, ·) (``A`` is a transposed view of keys-major storage) and
    ``trace.Y_hat`` the output. Only shapes are checked here; :func:`resgd.core.train.train_gd` checks
    the values once per run. ``chunk_bytes`` overrides :data:`CHUNK_BYTES`.
    """
    check_choice("reduction", reduction, ("sum", "mean"))
    _check_shapes(cfg, X, Y, mask)
    with torch.no_grad():
        return _loss_and_grad(params, cfg, X.contiguous(), Y, mask, reduction, chunk_bytes)




def _trace_outputs(N: int, n: int, d: int, L: int, beta: float, X: torch.Tensor) -> tuple[Trace, list, list, list, list]:
    """The trace's tensors: keys-major A, Attn, Z, H per layer, as views of two pooled tensors.

    Two pooled tensors (all layers' A; all layers' Attn, Z, H) rather than 4L: the pool recycles
    a tensor once no view of it is alive, and keeps two per shape (the trainer holds one trace
    while the next is computed), so 4L separately pooled tensors of a few shapes would page-fault
    fresh memory every step for L > 1.
    """
    dtype, device = X.dtype, X.device
    trace = Trace()
    per_layer = 2 if beta == 0.0 else 3  # Attn, (Z,) H; Z is Attn when beta = 0
    A_all = output((L, N, n, n), dtype, device)  # keys-major: A_all[l, p, j, i] = A_l[p, i, j]
    acts = output((L, per_layer, N, n, d), dtype, device)
    A_T, attn, Z, H = [], [], [], []
    inputs = X
    for layer in range(L):
        a, at, h = A_all[layer], acts[layer, 0], acts[layer, per_layer - 1]
        z = at if beta == 0.0 else acts[layer, 1]
        A_T.append(a), attn.append(at), Z.append(z), H.append(h)
        trace.layers.append(LayerTrace(X=inputs, A=a.transpose(1, 2), Attn=at, Z=z, H=h))
        inputs = h
    return trace, A_T, attn, Z, H


def _loss_and_grad(params, cfg, X, Y, mask, reduction, chunk_bytes):
    N, n, d = X.shape
    L, k = cfg.n_layers, cfg.k
    dtype, device = X.dtype, X.device
    blocks = [Block(params, layer, cfg) for layer in range(L)]

    c_max = min(N, chunk_samples(cfg, n, dtype, chunk_bytes))
    c_full = -(-N // -(-N // c_max))  # balanced: ceil(N / number of chunks), no small last chunk
    WORKSPACE.select((c_full, n, d, cfg.d_qk, cfg.m, k, L, cfg.activation, cfg.pooling, fold_logits(cfg.d, cfg.d_qk), dtype,
                      device))
    buf = Scratch(WORKSPACE.scratch, c_full, n, dtype, device)
    shifted = WORKSPACE.shifted

    trace, A_T, attn, Z, H = _trace_outputs(N, n, d, L, float(cfg.beta), X)
    trace.Y_hat = output((N, k) if cfg.pooling == "mean" else (N, n, k), dtype, device)
    names = list(params)
    sizes = [params[name].numel() for name in names]
    flat = output((sum(sizes),), dtype, device)  # every gradient, written by the first chunk
    grads = {name: part.view(params[name].shape) for name, part in zip(names, flat.split(sizes))}
    dM = [buf.fixed("dM" + str(b.index), d, d) if b.folded else None for b in blocks]
    readout = Readout(params, cfg, Y, trace.Y_hat, mask, 1.0 / N if reduction == "mean" else 1.0)

    keymask = keybias = None
    if mask is not None:
        keymask = mask.to(dtype).view(N, n, 1)  # (N, keys, 1): 1 real, 0 padded
        keybias = torch.zeros_like(keymask).masked_fill_(keymask == 0, -math.inf)  # 0 real, −inf padded

    loss = None
    for s0 in range(0, N, c_full):
        ch = Chunk(s0, min(N, s0 + c_full), N, n)
        km, kb = ch.rows(keymask), ch.rows(keybias)
        saved = []
        Xc = ch.rows(X)
        for blk in blocks:
            layer = blk.index
            s, shifted[layer] = attention_forward(blk, ch, Xc, buf, ch.rows(A_T[layer]), ch.rows(attn[layer]),
                                                  ch.rows(Z[layer]), km, kb, shifted.get(layer, False))
            Xc = ffn_forward(blk, ch, s, buf, ch.rows(H[layer]))
            saved.append(s)
        part, R, read_in = output_forward(readout, ch, Xc, buf)
        loss = part if ch.first else loss.add_(part)
        dH2 = output_backward(readout, ch, R, read_in, grads, buf)
        for blk in reversed(blocks):
            dZ2 = ffn_backward(blk, ch, saved[blk.index], dH2, grads, buf)
            dH2 = attention_backward(blk, ch, saved[blk.index], dZ2, grads, dM[blk.index], buf,
                                     need_dX=blk.index > 0)  # nobody needs dΦ/dX of the input
    for blk in blocks:
        finish_attention_grads(blk, grads, dM[blk.index])
    loss.mul_(0.5 * readout.scale)
    return loss, grads, trace


# --------------------------------------------------------------------------------------------
# Helpers for the trainer's per-iteration bookkeeping (one fused call instead of one per weight).


def grad_norm(grads: Params) -> float:
    """‖∇Φ‖ over all weights: ``sqrt(Σ_w ‖g_w‖²)`` with one fused kernel for all of them (float64 sum)."""
    norms = torch._foreach_norm(list(grads.values()))
    return float(torch.linalg.vector_norm(torch.stack(norms).to(torch.float64)))


def gd_update(params: Params, grads: Params, lr: float) -> Params:
    """``{w: p_w − lr g_w}`` (new tensors; ``params`` is not modified) with one fused kernel."""
    names = list(params)
    updated = torch._foreach_add([params[k] for k in names], [grads[k] for k in names], alpha=-lr)
    return dict(zip(names, updated))
