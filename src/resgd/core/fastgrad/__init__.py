"""Hand-derived forward and backward pass: Φ(θ), ∇Φ(θ) and the forward trace, without autograd.

Full-batch GD calls ``loss_and_grad`` once per iteration and every figure of the book is made of
thousands of such calls, so this is the product's inner loop. :func:`loss_and_grad_manual`
returns what the autograd version (:func:`resgd.core.train.loss_and_grad` with
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

When ``d_qk > d`` the logits are computed through ``M = W_Q W_Kᵀ / s`` (d×d), the cheaper
association (:func:`resgd.core.model.fold_logits`, every engine's rule): ``S = (X M) Xᵀ``; then ``dM = Σ_p X_pᵀ dS_p X_p``,
``dW_Q = dM W_K / s``, ``dW_K = dMᵀ W_Q / s`` and ``dX`` gains ``dSᵀ (X M)``.

What makes it fast (measured with ``benchmarks/bench_gd.py``; numbers in ``benchmarks/README.md``):

* batched kernels over the samples (one GEMM over all stacked tokens per weight, ``bmm`` over
  samples for the n×n attention products), no Python loop over samples, no autograd graph;
* samples are processed in chunks of about :data:`CHUNK_BYTES` of FFN activations, through all
  layers forward and back, so the intermediates stay in the CPU cache (2× at N = 8192); the
  weight gradients are accumulated over chunks, the trace is written in place;
* the internal buffers are reused from call to call (a per-thread workspace), so a GD loop does
  not page-fault fresh memory every step (another ~1.5× at large N); the trace of all L layers is
  two pooled tensors (all A; all Attn, Z, H), so deep models' traces are recycled too;
* the attention matrix is stored keys-major (the softmax reduces over contiguous memory, 2-4×
  faster than ``torch.softmax`` over rows of a few dozen) and the max-shift of the softmax is
  skipped when it cannot change the result, checked on the row sums after the exp (no extra pass
  over the logits; see :func:`.softmax.attention_probs_`);
* the backward pass works in place: ``dH``, ``dZ`` and ``dX`` of a chunk share one buffer (the
  residuals enter as the ``beta`` of in-place GEMMs, ``dZ = β_ffn dH + dP W_1ᵀ``), the softmax
  derivative overwrites ``dA``, activation derivatives overwrite ``dG`` (ATen's fused backward
  kernels), and the first layer computes no gradient for its input.

Layout: :mod:`.plan` (backend, association of the logits, chunk size, FLOP count),
:mod:`.sublayers` (forward and backward of attention, FFN and read-out for one chunk),
:mod:`.softmax` (the keys-major softmax and its overflow checks), :mod:`.workspace` (reused
buffers) and :mod:`.step` (the chunk loop, the trainer's fused update).
"""

from .plan import BACKEND_ENV, BACKENDS, CHUNK_BYTES, chunk_samples, default_backend, step_flops
from .step import gd_update, grad_norm, loss_and_grad_manual
from .workspace import clear_workspace

__all__ = ["BACKENDS", "BACKEND_ENV", "CHUNK_BYTES", "chunk_samples", "clear_workspace", "default_backend",
           "gd_update", "grad_norm", "loss_and_grad_manual", "step_flops"]
