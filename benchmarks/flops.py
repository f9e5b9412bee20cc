"""Matrix-product FLOPs of one GD step: the work any implementation must do (the benchmarks' rates divide it by a time)."""

from __future__ import annotations

from resgd.core.model import ModelConfig, fold_logits


def step_flops(cfg: ModelConfig, N: int, n: int) -> dict[str, int]:
    """Matmul FLOPs of one forward+backward pass (the work any implementation must do).

    Counted: every matrix product (2 FLOPs per multiply-add), with the cheaper association of the
    logits (:func:`resgd.core.model.fold_logits`); not counted: elementwise work (softmax, activation, residual
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
    fold = fold_logits(cfg.d, cfg.d_qk)
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


