"""The benchmark's JAX peer: the same model and loss as ``resgd.core.model``, one jitted GD step.

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
    """``Φ(params) = ½ Σ ‖Ŷ − Y‖²`` over real tokens, the model of ``resgd.core.model`` written in jax.numpy."""
    import jax
    import jax.numpy as jnp

    act = {"relu": jax.nn.relu, "gelu": lambda x: jax.nn.gelu(x, approximate=False), "softplus": jax.nn.softplus}[cfg.activation]
    beta, beta_ffn, s = float(cfg.beta), float(cfg.residual_ffn), cfg.logit_divisor

    def loss(params, X, Y, mask):
        H = X
        for layer in range(cfg.n_layers):
            W_Q, W_K, W_V, W_1, W_2 = (params[f"{name}.{layer}"] for name in ("W_Q", "W_K", "W_V", "W_1", "W_2"))
            logits = (H @ W_Q) @ jnp.swapaxes(H @ W_K, -1, -2) / s
            if masked:
                logits = jnp.where(mask[:, None, :], logits, -jnp.inf)
            Z = beta * H + jax.nn.softmax(logits, axis=-1) @ (H @ W_V)
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
        return 0.5 * jnp.sum(R * R)

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
