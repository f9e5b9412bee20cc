"""The benchmarks' JAX peers: the same model and loss as ``resgd.core.model``, one jitted GD step
(``bench_gd.py``), and a whole stacked training call as ``resgd.core.trainer.train_stacked``
(``bench_map.py``: :func:`make_stacked_train`).

``jax.jit`` of ``value_and_grad`` of the loss plus the update ``p − lr g``, in one compiled
function (the weights are donated, so XLA may update them in place). One thread: XLA's CPU
client is told to use a single intra-op thread before jax is imported (``XLA_FLAGS``), and
float64 is enabled (``jax_enable_x64``), so it runs what ours runs. Optional: install with
``pip install -c requirements.lock -e '.[jax]'``; the benchmark skips it when jax is absent.
"""

from __future__ import annotations

import math
import os
import time

_SINGLE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def import_jax():
    """``jax`` configured for the benchmark (one thread, float64), or ``None`` when not installed.

    The thread flags take effect only if jax was not imported before in this process.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if _SINGLE_THREAD not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_SINGLE_THREAD}".strip()
    try:
        import jax
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    return jax


def make_loss(cfg, masked: bool):
    """``Φ(params) = ½ Σ ‖Ŷ − Y‖²`` over real tokens, the model of ``resgd.core.model`` written in jax.numpy:
    one run of :func:`make_stacked_loss` with the configuration's β and β_ffn (one copy of the maths)."""
    stacked = make_stacked_loss(cfg, masked, "sum")
    beta, beta_ffn = float(cfg.beta), float(cfg.residual_ffn)

    def loss(params, X, Y, mask):
        return stacked(params, beta, beta_ffn, X, Y, mask)[0]

    return loss


def to_jax(tensor):
    import jax.numpy as jnp

    return None if tensor is None else jnp.asarray(tensor.numpy())


def make_jax_step(cfg, X, Y, mask, params, lr: float):
    """(step function, compile seconds, jax inputs): ``step()`` runs one jitted GD step on a state it keeps.

    Compile time (tracing, lowering, XLA compilation) is measured apart, ahead of time, so the
    timed steps are pure execution; each step waits for its result (``block_until_ready``).
    """
    import jax

    masked = mask is not None
    loss = make_loss(cfg, masked)

    def gd_step(p, X, Y, mask, lr):
        value, grads = jax.value_and_grad(loss)(p, X, Y, mask)
        return jax.tree_util.tree_map(lambda w, g: w - lr * g, p, grads), value

    inputs = (to_jax(X), to_jax(Y), to_jax(mask) if masked else None)
    state = {"p": {k: to_jax(v) for k, v in params.items()}}
    t0 = time.perf_counter()
    compiled = jax.jit(gd_step, donate_argnums=0).lower(state["p"], *inputs, lr).compile()
    compile_s = time.perf_counter() - t0

    def step():
        state["p"], value = compiled(state["p"], *inputs, lr)
        value.block_until_ready()
        return value

    return step, compile_s


def value_and_grad(cfg, X, Y, mask, params):
    """Φ and ∇Φ from the jax model on resgd's weights (float64 numpy arrays), for the equivalence checks."""
    import jax
    import numpy as np

    loss = make_loss(cfg, mask is not None)
    value, grads = jax.jit(jax.value_and_grad(loss))({k: to_jax(v) for k, v in params.items()},
                                                     to_jax(X), to_jax(Y), to_jax(mask) if mask is not None else None)
    return float(value), {k: np.asarray(g) for k, g in grads.items()}


def max_rel_diff(grads: dict, reference: dict) -> float:
    """max over weights of max|g − ref| / max|ref|."""
    worst = 0.0
    for name, ref in reference.items():
        ref = ref.numpy() if hasattr(ref, "numpy") else ref
        worst = max(worst, float(abs(grads[name] - ref).max()) / max(float(abs(ref).max()), 1e-300))
    return worst if math.isfinite(worst) else math.inf


# --- the robustness map's workload: a stack of runs trained together (bench_map.py) -------------

def make_stacked_loss(cfg, masked: bool, reduction: str):
    """One run's ``Φ`` with β and β_ffn as arguments (they differ across a stack), returning the
    first layer's Z as auxiliary output (for σ(Z)): :func:`resgd.core.hand_pass.stacked_forward`'s maths,
    the same association of the logits (:func:`resgd.core.model.fold_logits`)."""
    import jax
    import jax.numpy as jnp

    from resgd.core.model import fold_logits

    act = {"relu": jax.nn.relu, "gelu": lambda x: jax.nn.gelu(x, approximate=False), "softplus": jax.nn.softplus}[cfg.activation]
    s, fold = cfg.logit_divisor, fold_logits(cfg.d, cfg.d_qk)

    def loss(params, beta, beta_ffn, X, Y, mask):
        H, Z0 = X, None
        for layer in range(cfg.n_layers):
            W_Q, W_K, W_V, W_1, W_2 = (params[f"{name}.{layer}"] for name in ("W_Q", "W_K", "W_V", "W_1", "W_2"))
            if fold:
                logits = (H @ (W_Q @ W_K.T)) @ jnp.swapaxes(H, -1, -2) / s
            else:
                logits = (H @ W_Q) @ jnp.swapaxes(H @ W_K, -1, -2) / s
            if masked:
                logits = jnp.where(mask[:, None, :], logits, -jnp.inf)
            Z = beta * H + jax.nn.softmax(logits, axis=-1) @ (H @ W_V)
            Z0 = Z if layer == 0 else Z0
            H = beta_ffn * Z + act(Z @ W_1) @ W_2
        if cfg.pooling == "mean":
            if masked:
                w = mask.astype(H.dtype)
                H = (H * w[..., None]).sum(axis=1) / w.sum(axis=1, keepdims=True)
            else:
                H = H.mean(axis=1)
        R = H @ params["W_U"] - Y
        if masked and R.ndim == 3:
            R = R * mask[..., None]
        value = 0.5 * jnp.sum(R * R)
        return (value / Y.shape[0] if reduction == "mean" else value), Z0

    return loss


def make_stacked_train(cfg, gd, X, Y, mask, params, lrs, betas, betas_ffn):
    """(train function, compile seconds): ``train()`` trains the stack from ``params`` (one dict per
    run) and returns numpy (losses (T+1, R), gradient norms (T+1, R), σ_min, σ_max (T+1, R), NaN
    where not recorded). The peer the benchmark times against PyTorch: ``lax.scan`` over the GD steps of ``jax.vmap`` of one
    run's step (value and gradient by ``jax.grad``, ‖∇Φ‖, θ − μ ∇Φ), σ(Z) of the first layer's Z by
    its Gram's eigenvalues every ``record_every`` steps (a ``lax.cond`` on the step counter, which
    is not batched), all in one ``jax.jit``. No divergence rule (the benchmark's step is small)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    masked = mask is not None
    grad = jax.value_and_grad(make_stacked_loss(cfg, masked, gd.reduction), has_aux=True)
    T_steps, every = gd.iterations, gd.record_every
    run_axes = (0, 0, 0, None, None, None)

    def evaluate(p, beta, bf, X, Y, mask):
        (value, Z0), g = jax.vmap(grad, in_axes=run_axes)(p, beta, bf, X, Y, mask)
        norm = jnp.sqrt(sum(jnp.sum(v.reshape(v.shape[0], -1) ** 2, axis=1) for v in jax.tree_util.tree_leaves(g)))
        return value, norm, Z0, g

    def sigma(Z0, mask):  # (R, N, n, d) → σ_min, σ_max of each run's real tokens, from the d × d Gram
        Zr = Z0 * mask[None, :, :, None] if masked else Z0
        Zr = Zr.reshape(Z0.shape[0], -1, Z0.shape[-1])
        eig = jnp.sqrt(jnp.clip(jnp.linalg.eigvalsh(jnp.swapaxes(Zr, 1, 2) @ Zr), 0.0))
        return eig[:, 0], eig[:, -1]

    def no_sigma(Z0, mask):
        nan = jnp.full(Z0.shape[:1], jnp.nan, Z0.dtype)
        return nan, nan

    def train(p, lr, beta, bf, X, Y, mask):
        def body(p, t):
            value, norm, Z0, g = evaluate(p, beta, bf, X, Y, mask)
            smin, smax = jax.lax.cond(t % every == 0, sigma, no_sigma, Z0, mask)
            p = jax.tree_util.tree_map(lambda w, gw: w - lr.reshape((-1,) + (1,) * (w.ndim - 1)) * gw, p, g)
            return p, (value, norm, smin, smax)

        p, rows = jax.lax.scan(body, p, jnp.arange(T_steps))
        value, norm, Z0, _ = evaluate(p, beta, bf, X, Y, mask)  # the last evaluation, always recorded
        last = (value, norm) + sigma(Z0, mask)
        return tuple(jnp.concatenate([r, v[None]]) for r, v in zip(rows, last)), p

    dtype = X.dtype
    stacked = {k: jnp.asarray(np.stack([q[k].numpy() for q in params])) for k in params[0]}
    args = (stacked, *(jnp.asarray(np.asarray(v, dtype=np.float64)) for v in (lrs, betas, betas_ffn)),
            to_jax(X), to_jax(Y), to_jax(mask) if masked else None)
    assert str(dtype) == "torch.float64", "the peer runs float64"
    t0 = time.perf_counter()
    compiled = jax.jit(train).lower(*args).compile()
    compile_s = time.perf_counter() - t0

    def run():
        rows, _ = compiled(*args)
        return tuple(np.asarray(r) for r in rows)  # waits for the result, copies it to numpy

    return run, compile_s
