"""Hand-derived forward and backward pass: Φ(θ), ∇Φ(θ) and the forward trace, without autograd.

Full-batch GD calls ``loss_and_grad`` once per iteration and every figure of the book is made of
thousands of such calls, so this is the product's inner loop. :func:`loss_and_grad_manual`
returns what the autograd version (:func:`resgd.train.loss_and_grad` with
``backend="autograd"``) returns — ``(loss, grads, trace)`` — up to floating-point rounding;
``tests/test_fastgrad.py`` checks it against autograd and against central finite differences.

Notation (one block; ``s`` the logit divisor, ``T = N·n`` stacked tokens)::

    S = X W_Q (X W_K)ᵀ / s     A = softmax over the real keys     Attn = A V,  V = X W_V
    Z = β X + Attn             P = Z W_1     G = act(P)            H = β_ffn Z + G W_2

Backward pass, from ``dH = ∂Φ/∂H``::

    dW_2 = Gᵀ dH      dP = (dH W_2ᵀ) ⊙ act'(P)      dW_1 = Zᵀ dP      dZ = β_ffn dH + dP W_1ᵀ
    dV = Aᵀ dZ        dA = dZ Vᵀ      dS = A ⊙ (dA − rowsum(A ⊙ dA))   (per sample, per query)
    dQ = dS K         dK = dSᵀ Q      (Q = X W_Q / s carries the 1/s)
    dW_Q = Xᵀ dQ / s  dW_K = Xᵀ dK    dW_V = Xᵀ dV
    dX = β dZ + dQ (W_Q/s)ᵀ + dK W_Kᵀ + dV W_Vᵀ

When ``d ≤ 2 d_qk`` the logits are computed through ``M = W_Q W_Kᵀ / s`` (d×d), the cheaper
association (:func:`fold_logits`): ``S = (X M) Xᵀ``; then ``dM = Σ_p X_pᵀ dS_p X_p``,
``dW_Q = dM W_K / s``, ``dW_K = dMᵀ W_Q / s`` and ``dX`` gains ``dSᵀ (X M)``.

What makes it fast (measured with ``benchmarks/bench_gd.py``; numbers in ``benchmarks/README.md``):

* batched kernels over the samples (one GEMM over all stacked tokens per weight, ``bmm`` over
  samples for the n×n attention products), no Python loop over samples, no autograd graph;
* samples are processed in chunks of about :data:`CHUNK_BYTES` of FFN activations, through all
  layers forward and back, so the intermediates stay in the CPU cache (2× at N = 8192); the
  weight gradients are accumulated over chunks, the trace is written in place;
* the internal buffers are reused from call to call (a per-thread workspace), so a GD loop does
  not page-fault fresh memory every step (another ~1.5× at large N);
* the attention matrix is stored keys-major (the softmax reduces over contiguous memory, 2-4×
  faster than ``torch.softmax`` over rows of a few dozen) and the max-shift of the softmax is
  skipped when it cannot change the result, checked on the row sums after the exp (no extra pass
  over the logits; see :func:`_attention_probs_`);
* the backward pass works in place: ``dH``, ``dZ`` and ``dX`` of a chunk share one buffer (the
  residuals enter as the ``beta`` of in-place GEMMs, ``dZ = β_ffn dH + dP W_1ᵀ``), the softmax
  derivative overwrites ``dA``, activation derivatives overwrite ``dG`` (ATen's fused backward
  kernels), and the first layer computes no gradient for its input.
"""

from __future__ import annotations

import functools
import math
import os
import threading

import torch

from .model import WEIGHT_NAMES, LayerTrace, ModelConfig, Params, Trace
from .validation import ConfigError, check_choice

BACKENDS = ("manual", "autograd")
BACKEND_ENV = "RESGD_GRAD_BACKEND"

CHUNK_BYTES = 5 * 2**19
"""Target size (bytes) of the largest per-chunk intermediate (the FFN activations, tokens × m) of a
one-layer model; an L-layer model keeps L layers' intermediates alive per chunk and uses
``CHUNK_BYTES / sqrt(L)``.

Tuned on the machine of ``benchmarks/README.md`` (2 MiB L2 per core): for L = 1 the optimum was
1.5-5 MiB, for L = 10 0.5-1 MiB, for the Jena and SST-2 sizes in float32 and float64 (within 3 % of
the best in every case measured). Samples are never split across chunks."""

_aten = torch.ops.aten

# e^±limit: the range of softmax row sums (of unshifted exps) in which the max-shift changes only rounding
_EXP_SAFE = {torch.float64: 600.0, torch.float32: 60.0}


def default_backend() -> str:
    """``$RESGD_GRAD_BACKEND`` if set (``"manual"`` or ``"autograd"``), else ``"manual"``.

    The environment variable lets a whole book build run on the autograd path for a
    cross-check without changing any code.
    """
    backend = os.environ.get(BACKEND_ENV, "manual")
    check_choice(f"${BACKEND_ENV}", backend, BACKENDS)
    return backend


def fold_logits(cfg: ModelConfig) -> bool:
    """Whether the logits go through ``M = W_Q W_Kᵀ / s`` (d×d), the cheaper association when ``d ≤ 2 d_qk``.

    Unfolded, ``X W_Q`` and ``X W_K`` cost ``2·(2 T d d_qk)`` FLOPs; folded, ``X M`` costs ``2 T d²``.
    """
    return cfg.d <= 2 * cfg.d_qk


def chunk_samples(cfg: ModelConfig, n: int, dtype: torch.dtype, chunk_bytes: int | None = None) -> int:
    """Samples per chunk: the largest per-chunk intermediate (tokens × max(m, n, d)) near the budget.

    The budget is ``chunk_bytes`` if given, else ``CHUNK_BYTES / sqrt(n_layers)``.
    """
    budget = CHUNK_BYTES / math.sqrt(cfg.n_layers) if chunk_bytes is None else chunk_bytes
    itemsize = dtype.itemsize
    return max(1, int(budget // (n * max(cfg.m, n, cfg.d) * itemsize)))


def step_flops(cfg: ModelConfig, N: int, n: int) -> dict[str, int]:
    """Matmul FLOPs of one forward+backward pass (the work any implementation must do).

    Counted: every matrix product (2 FLOPs per multiply-add), with the cheaper association of the
    logits (:func:`fold_logits`); not counted: elementwise work (softmax, activation, residual
    adds), O(d² d_qk) weight-only products, and the gradient for the input X of the first layer
    (nobody needs it). With ``T = N n`` tokens and ``q = d_qk``, per layer::

        forward   proj = 2T·d·d (fold) or 2T·2d·q          (X M,  or X W_Q and X W_K)
                  + 2T·d·d                                   V = X W_V
                  + 2N·n²·(d if fold else q) + 2N·n²·d       S, then A V
                  + 2T·d·m·2                                 P = Z W_1, G W_2
        backward  2 × forward (one product for the weight gradient, one for the input gradient),
                  less the input-gradient products of layer 0: proj + 2T·d·d + 2N·n²·(d or q)
                  (the keys-side term dSᵀ(XM) exists only when folded)
        output    2T·d·k forward (per token) or 2N·d·k (mean pooling), ×3 with backward
    """
    d, q, m, k, L = cfg.d, cfg.d_qk, cfg.m, cfg.k, cfg.n_layers
    T = N * n
    fold = fold_logits(cfg)
    proj = 2 * T * d * d if fold else 2 * T * 2 * d * q
    width = d if fold else q
    value = 2 * T * d * d
    attention = 2 * N * n * n * width + 2 * N * n * n * d
    ffn = 2 * 2 * T * d * m
    forward_layer = proj + value + attention + ffn
    # input-gradient products of the attention: dQ·W_Qᵀ (+ dK·W_Kᵀ) or dL·Mᵀ, dV·W_Vᵀ, and the
    # keys-side dSᵀ(XM) (folded; unfolded it is inside dK·W_Kᵀ)
    input_grad_l0 = proj + value + (2 * N * n * n * d if fold else 0)
    rows = N if cfg.pooling == "mean" else T
    output = 2 * rows * d * k
    forward = L * forward_layer + output
    backward = 2 * L * forward_layer - input_grad_l0 + 2 * output
    return {"forward": forward, "backward": backward, "total": forward + backward}


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


def _within(values: torch.Tensor, lo: float, hi: float) -> bool:
    """Every entry strictly inside (lo, hi); False if any is NaN."""
    low, high = torch.aminmax(values)
    return lo < float(low) and float(high) < hi


def _attention_probs_(out: torch.Tensor, K: torch.Tensor, QL: torch.Tensor, keymask: torch.Tensor | None,
                      keybias: torch.Tensor | None, expect_large: bool = False) -> bool:
    """Keys-major attention probabilities ``out[p, j, i] = softmax_j(K_p QL_pᵀ)[i, j]``, in ``out``.

    Keys-major, the reductions run over dim 1 with contiguous queries in the inner loop (2-4×
    faster than a row softmax for rows of a few dozen). Softmax is shift-invariant, so the
    max-shift is skipped when it cannot matter (:data:`_EXP_SAFE`), checked in one of two ways:

    * by default after the exp, on the (c, 1, n) row sums only: every row sum in
      ``(e^-limit, e^limit)`` means no weight overflowed and a weight that underflowed is below
      ``e^-limit`` of its row's largest, invisible at the dtype's precision; otherwise the logits
      are recomputed (one ``bmm``) and shifted;
    * with ``expect_large`` (the caller saw this layer need the shift last time) before the exp,
      on the logits themselves (``|logit| < limit``), which wastes no exp on a failing chunk.

    The shifted path subtracts the maximum over the real keys. Padded keys (``keymask`` 0,
    ``keybias`` −inf) get weight 0. Returns whether the shifted path was taken.
    """
    torch.bmm(K, QL.transpose(1, 2), out=out)
    limit = _EXP_SAFE.get(out.dtype)
    if limit is not None and (not expect_large or _within(out, -limit, limit)):
        E = out.exp_()
        if keymask is not None:
            E.mul_(keymask)  # an overflowed padded key gives inf·0 = NaN: the check below fails
        sums = E.sum(dim=1, keepdim=True)
        if expect_large or _within(sums, math.exp(-limit), math.exp(limit)):
            E.mul_(sums.reciprocal_())
            return False
        torch.bmm(K, QL.transpose(1, 2), out=out)  # recompute the logits for the shifted path
    S_T = out
    if keybias is not None:
        S_T.add_(keybias)  # −inf on padded keys: excluded from the max, exp gives 0
    S_T.sub_(S_T.amax(dim=1, keepdim=True))
    if limit is not None:
        # exp is 30-200x slower where its result underflows (measured); weights below e^-limit
        # relative to the largest (1e-261 in float64, 1e-26 in float32) are kept at e^-limit
        # instead of their true, smaller value: invisible at the dtype's precision
        S_T.clamp_(min=-limit)
        if keybias is not None:
            S_T.add_(keybias)  # padded keys back to −inf (the clamp lifted them)
    E = S_T.exp_()
    E.mul_(E.sum(dim=1, keepdim=True).reciprocal_())
    return True


# --------------------------------------------------------------------------------------------
# Workspace: internal buffers reused from call to call (one set per thread, for the last shapes).


class _Workspace(threading.local):
    """Per-thread buffers for the last shapes seen: internal scratch, and recycled output tensors."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.scratch: dict[str, torch.Tensor] = {}
        self.outputs: dict[tuple, list[torch.Tensor]] = {}
        self.shifted: dict[int, bool] = {}  # per layer: did its softmax need the max-shift last time?

    def select(self, key: tuple) -> None:
        if key != self.key:
            self.key, self.scratch, self.outputs, self.shifted = key, {}, {}, {}


_WORKSPACE = _Workspace()
_MAX_RECYCLED = 2  # per output shape: the trainer holds one trace while the next is computed
_use_count = getattr(torch._C, "_storage_Use_Count", None)


def clear_workspace() -> None:
    """Free the buffers the calling thread keeps for reuse (kept for the last shapes only)."""
    _WORKSPACE.key, _WORKSPACE.scratch, _WORKSPACE.outputs, _WORKSPACE.shifted = None, {}, {}, {}


def _output(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised tensor for a returned value, recycled once nothing refers to it any more.

    Returned tensors (the trace) are handed out as views of pooled tensors; the storage's use
    count says whether any view is still alive anywhere (the pool's own tensor plus the
    temporary storage object count 2). Recycling spares a GD loop from page-faulting fresh
    memory every step, which costs as much as a third of a step at large N.
    """
    if _use_count is None:
        return torch.empty(shape, dtype=dtype, device=device)
    pool = _WORKSPACE.outputs.setdefault((shape, dtype, device), [])
    for tensor in pool:
        if _use_count(tensor.untyped_storage()._cdata) == 2:
            return tensor.view(shape)
    tensor = torch.empty(shape, dtype=dtype, device=device)
    if len(pool) < _MAX_RECYCLED:
        pool.append(tensor)
        return tensor.view(shape)
    return tensor


class _Scratch:
    """Internal buffers sized for a full chunk, reused across chunks and calls; views cached."""

    def __init__(self, store: dict, c_full: int, n: int, dtype: torch.dtype, device: torch.device):
        self.store, self.c_full, self.n, self.dtype, self.device = store, c_full, n, dtype, device

    def tokens(self, name: str, width: int, c: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A (c·n, width) buffer and its (c, n, width) view."""
        entry = self.store.get(name)
        if entry is None:
            batched = torch.empty((self.c_full, self.n, width), dtype=self.dtype, device=self.device)
            entry = self.store[name] = (batched.view(self.c_full * self.n, width), batched)
        if c == self.c_full:
            return entry
        batched = entry[1][:c]
        return batched.view(c * self.n, width), batched

    def rows(self, name: str, c: int, *tail: int) -> torch.Tensor:
        """A (c, *tail) buffer."""
        entry = self.store.get(name)
        if entry is None:
            entry = self.store[name] = torch.empty((self.c_full, *tail), dtype=self.dtype, device=self.device)
        return entry if c == self.c_full else entry[:c]

    def fixed(self, name: str, *shape: int) -> torch.Tensor:
        """A buffer of a fixed shape."""
        entry = self.store.get(name)
        if entry is None:
            entry = self.store[name] = torch.empty(shape, dtype=self.dtype, device=self.device)
        return entry


# --------------------------------------------------------------------------------------------
# The pass itself.


@functools.lru_cache(maxsize=None)
def _layer_names(layer: int) -> tuple[str, ...]:
    return tuple(f"{name}.{layer}" for name in WEIGHT_NAMES)


@functools.lru_cache(maxsize=None)
def _layer_keys(layer: int) -> tuple[str, ...]:
    return tuple(f"{key}{layer}" for key in ("QL", "K", "V", "P", "G"))


class _Layer:
    """Per-call constants of one block: its weights, their transposes and weight-only products."""

    def __init__(self, params: Params, layer: int, cfg: ModelConfig):
        self.index = layer
        self.names = _layer_names(layer)
        self.W_Q, self.W_K, self.W_V, self.W_1, self.W_2 = (params[name] for name in self.names)
        self.inv_s = 1.0 / cfg.logit_divisor
        self.folded = fold_logits(cfg)
        if self.folded:
            self.W_QL = torch.mm(self.W_Q, self.W_K.T).mul_(self.inv_s)  # M = W_Q W_Kᵀ / s
        else:
            self.W_QL = self.W_Q * self.inv_s
        self.width = cfg.d if self.folded else cfg.d_qk  # width of the "queries" X W_QL
        self.W_QL_T, self.W_K_T, self.W_V_T, self.W_1_T, self.W_2_T = (
            self.W_QL.T, self.W_K.T, self.W_V.T, self.W_1.T, self.W_2.T)
        self.k_QL, self.k_K, self.k_V, self.k_P, self.k_G = _layer_keys(layer)


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
    """Φ(θ), ∇Φ(θ) for every weight and the forward :class:`~resgd.model.Trace`, without autograd.

    Same contract as :func:`resgd.train.loss_and_grad`: ``loss`` is a 0-d tensor, ``grads`` has
    the keys of ``params`` (same order, same shapes), ``trace.layers[l]`` holds ``X, A, Attn, Z,
    H`` of shapes (N, n, ·) (``A`` is a transposed view of keys-major storage) and
    ``trace.Y_hat`` the output. Only shapes are checked here; :func:`resgd.train.train_gd` checks
    the values once per run. ``chunk_bytes`` overrides :data:`CHUNK_BYTES`.
    """
    check_choice("reduction", reduction, ("sum", "mean"))
    _check_shapes(cfg, X, Y, mask)
    with torch.no_grad():
        return _loss_and_grad(params, cfg, X.contiguous(), Y, mask, reduction, chunk_bytes)


def _loss_and_grad(params, cfg, X, Y, mask, reduction, chunk_bytes):
    N, n, d = X.shape
    L, m, k = cfg.n_layers, cfg.m, cfg.k
    dtype, device = X.dtype, X.device
    layers = [_Layer(params, layer, cfg) for layer in range(L)]
    beta, beta_ffn = float(cfg.beta), float(cfg.residual_ffn)
    relu = cfg.activation == "relu"
    mean_pool = cfg.pooling == "mean"
    scale = 1.0 / N if reduction == "mean" else 1.0
    W_U = params["W_U"]
    W_U_T = W_U.T

    c_max = min(N, chunk_samples(cfg, n, dtype, chunk_bytes))
    c_full = -(-N // -(-N // c_max))  # balanced: ceil(N / number of chunks), no small last chunk
    _WORKSPACE.select((c_full, n, d, cfg.d_qk, m, k, L, cfg.activation, fold_logits(cfg), dtype, device))
    buf = _Scratch(_WORKSPACE.scratch, c_full, n, dtype, device)
    shifted = _WORKSPACE.shifted

    # ---- outputs: the trace (recycled once the caller has let go of it) and the gradients
    trace = Trace()
    A_T, attn, Z, H = [], [], [], []
    inputs = X
    for _ in range(L):
        a = _output((N, n, n), dtype, device)  # keys-major: a[p, j, i] = A[p, i, j]
        at = _output((N, n, d), dtype, device)
        z = at if beta == 0.0 else _output((N, n, d), dtype, device)
        h = _output((N, n, d), dtype, device)
        A_T.append(a), attn.append(at), Z.append(z), H.append(h)
        trace.layers.append(LayerTrace(X=inputs, A=a.transpose(1, 2), Attn=at, Z=z, H=h))
        inputs = h
    Y_hat = _output((N, k) if mean_pool else (N, n, k), dtype, device)
    trace.Y_hat = Y_hat
    names = list(params)
    sizes = [params[name].numel() for name in names]
    flat = _output((sum(sizes),), dtype, device)  # every gradient, written by the first chunk
    grads = {name: part.view(params[name].shape) for name, part in zip(names, flat.split(sizes))}
    dM = [buf.fixed("dM" + str(layer), d, d) if lw.folded else None for layer, lw in enumerate(layers)]

    keymask = keybias = None
    if mask is not None:
        keymask = mask.to(dtype).view(N, n, 1)  # (N, keys, 1): 1 real, 0 padded
        keybias = torch.zeros_like(keymask).masked_fill_(keymask == 0, -math.inf)  # 0 real, −inf padded
    tokmask = None if (mask is None or mean_pool) else mask.to(dtype).view(N * n, 1)
    pool_weights = None
    if mean_pool and mask is not None:
        pool_weights = mask.to(dtype)
        pool_weights = pool_weights / pool_weights.sum(dim=1, keepdim=True)  # rows sum to 1 over real tokens

    loss = None
    for s0 in range(0, N, c_full):
        s1 = min(N, s0 + c_full)
        whole = s0 == 0 and s1 == N
        first = s0 == 0
        c = s1 - s0
        T = c * n
        km = keymask if whole or keymask is None else keymask[s0:s1]
        kb = keybias if whole or keybias is None else keybias[s0:s1]
        saved = []
        # ---------------- forward through every layer
        Xc = X if whole else X[s0:s1]
        for lw in layers:
            layer = lw.index
            X2 = Xc.view(T, d)
            QL2, QL = buf.tokens(lw.k_QL, lw.width, c)
            torch.mm(X2, lw.W_QL, out=QL2)
            if lw.folded:
                K = Xc
            else:
                K2, K = buf.tokens(lw.k_K, cfg.d_qk, c)
                torch.mm(X2, lw.W_K, out=K2)
            V2, V = buf.tokens(lw.k_V, d, c)
            torch.mm(X2, lw.W_V, out=V2)
            a = A_T[layer] if whole else A_T[layer][s0:s1]
            shifted[layer] = _attention_probs_(a, K, QL, km, kb, expect_large=shifted.get(layer, False))
            at = attn[layer] if whole else attn[layer][s0:s1]
            torch.bmm(a.transpose(1, 2), V, out=at)
            if beta != 0.0:
                z = Z[layer] if whole else Z[layer][s0:s1]
                torch.add(at, Xc, alpha=beta, out=z)
            else:
                z = at
            Z2 = z.view(T, d)
            P2, _ = buf.tokens(lw.k_P, m, c)
            torch.mm(Z2, lw.W_1, out=P2)
            if relu:
                G2 = P2.relu_()  # the backward pass needs only relu(P)
            else:
                G2 = _act_forward(cfg.activation, P2, buf.tokens(lw.k_G, m, c)[0])
            h = H[layer] if whole else H[layer][s0:s1]
            H2 = torch.mm(G2, lw.W_2, out=h.view(T, d))  # then add: cheaper than addmm's copy into h
            if beta_ffn != 0.0:
                H2.add_(Z2, alpha=beta_ffn)
            saved.append((Xc, X2, QL2, QL, K, V2, V, a, Z2, P2, G2))
            Xc = h
        # ---------------- output layer and loss
        if mean_pool:
            pooled = buf.rows("pooled", c, d)
            if pool_weights is None:
                torch.mean(Xc, dim=1, out=pooled)
            else:
                torch.bmm((pool_weights if whole else pool_weights[s0:s1]).unsqueeze(1), Xc, out=pooled.view(c, 1, d))
            y_hat = torch.mm(pooled, W_U, out=Y_hat if whole else Y_hat[s0:s1])
            R = torch.sub(y_hat, Y if whole else Y[s0:s1], out=buf.rows("R", c, k))
            out_in = pooled
        else:
            H2 = Xc.view(T, d)
            y_hat = torch.mm(H2, W_U, out=(Y_hat if whole else Y_hat[s0:s1]).view(T, k))
            R = torch.sub(y_hat, (Y if whole else Y[s0:s1]).reshape(T, k), out=buf.tokens("R", k, c)[0])
            if tokmask is not None:
                R.mul_(tokmask if whole else tokmask[s0 * n : s1 * n])  # padded tokens do not count
            out_in = H2
        R1 = R.view(-1)
        part = torch.dot(R1, R1)
        loss = part if first else loss.add_(part)
        if scale != 1.0:
            R.mul_(scale)
        if first:
            torch.mm(out_in.T, R, out=grads["W_U"])
        else:
            grads["W_U"].addmm_(out_in.T, R)
        if mean_pool:
            dpooled = torch.mm(R, W_U_T, out=buf.rows("dpooled", c, d))
            dH2, dH = buf.tokens("dH", d, c)
            if pool_weights is None:
                torch.mul(dpooled.unsqueeze(1).expand(c, n, d), 1.0 / n, out=dH)
            else:
                torch.mul((pool_weights if whole else pool_weights[s0:s1]).unsqueeze(2), dpooled.unsqueeze(1), out=dH)
        else:
            dH2 = torch.mm(R, W_U_T, out=buf.tokens("dH", d, c)[0])
        # ---------------- backward through every layer
        for lw in reversed(layers):
            layer = lw.index
            Xc, X2, QL2, QL, K, V2, V, a, Z2, P2, G2 = saved[layer]
            n_Q, n_K, n_V, n_1, n_2 = lw.names
            X2_T = X2.T
            if first:
                torch.mm(G2.T, dH2, out=grads[n_2])
            else:
                grads[n_2].addmm_(G2.T, dH2)
            dP2 = _act_backward_(cfg.activation, torch.mm(dH2, lw.W_2_T, out=buf.tokens("dG", m, c)[0]), P2, G2)
            if first:
                torch.mm(Z2.T, dP2, out=grads[n_1])
            else:
                grads[n_1].addmm_(Z2.T, dP2)
            dZ2 = dH2.addmm_(dP2, lw.W_1_T, beta=beta_ffn)  # in place: dH is not needed any more
            dZ = dZ2.view(c, n, d)
            dA = torch.bmm(V, dZ.transpose(1, 2), out=buf.rows("dA", c, n, n))
            dS = torch._softmax_backward_data(dA, a, 1, dtype, grad_input=dA)  # in place: dA is not needed after
            dV2, dV = buf.tokens("dV", d, c)
            torch.bmm(a, dZ, out=dV)
            dQL2, dQL = buf.tokens("dQL", lw.width, c)
            torch.bmm(dS.transpose(1, 2), K, out=dQL)
            if first:
                torch.mm(X2_T, dV2, out=grads[n_V])
            else:
                grads[n_V].addmm_(X2_T, dV2)
            if lw.folded:
                if first:
                    torch.mm(X2_T, dQL2, out=dM[layer])
                else:
                    dM[layer].addmm_(X2_T, dQL2)
            else:
                dK2, dK = buf.tokens("dK", cfg.d_qk, c)
                torch.bmm(dS, QL, out=dK)
                if first:
                    torch.mm(X2_T, dQL2, out=grads[n_Q])
                    torch.mm(X2_T, dK2, out=grads[n_K])
                else:
                    grads[n_Q].addmm_(X2_T, dQL2)
                    grads[n_K].addmm_(X2_T, dK2)
            if layer == 0:
                break  # nobody needs dΦ/dX of the input
            dX2 = dZ2.addmm_(dQL2, lw.W_QL_T, beta=beta)  # in place: dZ is not needed any more
            dX2.addmm_(dV2, lw.W_V_T)
            if lw.folded:
                dZ.baddbmm_(dS, QL)  # the keys side of S = (X M) Xᵀ (dZ is dX's (c, n, d) view)
            else:
                dX2.addmm_(dK2, lw.W_K_T)
            dH2 = dX2
    # ---------------- finish: the 1/s of the logits and the folded products
    for layer, lw in enumerate(layers):
        n_Q, n_K = lw.names[0], lw.names[1]
        if lw.folded:
            torch.mm(dM[layer], lw.W_K, out=grads[n_Q]).mul_(lw.inv_s)
            torch.mm(dM[layer].T, lw.W_Q, out=grads[n_K]).mul_(lw.inv_s)
        else:
            grads[n_Q].mul_(lw.inv_s)
    loss.mul_(0.5 * scale)
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
