"""The map's and the headline experiments' shapes on synthetic data, and their recorded histories.

The training engine (:mod:`resgd.core.trainer`, the one trainer) may be rewritten for speed, but
every result must stay what it was: ``tests/test_engine_reference.py`` holds each case's loss
history within 1e-12 relative of ``engine_reference.npz`` (the rounding-sensitive runs,
:data:`SENSITIVE`, over their first iterations only), recorded by
``PYTHONPATH=src python tests/engine_cases.py`` on commit ecb60ed (AMD EPYC family 25 model 17,
torch 2.13.0+cpu, 1 thread). Then the headline cases came from a second, single-run engine; they
are held to the same 1e-12, so merging the engines moved no headline history by more than that. Synthetic data (no download, same shapes
as the real sets): Jena-like (d = 14, one output per token) and SST-2-like (d = 50, mean pooling,
padded sentences).

ATen's elementwise kernels round by the instruction set it picks (the softmax sums in vectors of 8
lanes under AVX-512, of 4 under AVX2), so one recording per set, :data:`REFERENCES`; the AVX2 one
was recorded on the same host and commit with ``ATEN_CPU_CAPABILITY=avx2`` (what an AVX2-only CPU,
e.g. AMD EPYC Zen 3, runs). MKL's kernel choice does not matter here: the recorded histories are
met under ``MKL_ENABLE_INSTRUCTIONS=AVX2`` and ``=AVX512`` alike.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

import pandas as pd

from resgd.core.conditioning import gram_singular_values, stack
from resgd.core.model import ModelConfig, init_params
from resgd.core.trainer import GDConfig, history_frame, train_stacked
from resgd.core.autograd_reference import autograd_loss_and_grad

REFERENCES = {"AVX512": Path(__file__).with_name("engine_reference.npz"),
              "AVX2": Path(__file__).with_name("engine_reference_avx2.npz")}


def reference_path() -> Path | None:
    """The recording for the instruction set ATen runs here (None: none recorded for it)."""
    return REFERENCES.get(torch.backends.cpu.get_cpu_capability())

COLUMNS = ("loss", "grad_norm", "sigma_min_Z", "sigma_max_Z")
SCALE = 10 ** -0.5  # the presets' v_scale and ffn_scale

# (β, seed, qk_scale, lr) of each run of a map stack; lr = 50 diverges
MAP_RUNS = ((0.0, 0, 1.0, 0.05), (1.0, 1, 4.0, 0.1), (0.5, 2, 0.25, 0.02), (1.0, 0, 1.0, 50.0), (1.0, 2, 1.0, 0.01))
MAP_CASES = tuple((kind, L, N) for kind in ("jena", "sst2") for L in (1, 2, 6, 10) for N in (16,)) + (
    ("jena", 2, 32), ("sst2", 2, 32))
HEADLINE_CASES = (("jena", 1, 0.0), ("jena", 10, 1.0), ("sst2", 2, 0.0), ("sst2", 10, 1.0))
MAP_ITERATIONS, HEADLINE_ITERATIONS = 50, 12
SENSITIVE_RTOL = 1e-13
SENSITIVE = ("map_jena_L2_N16_run1", "map_jena_L6_N16_run1", "map_jena_L10_N16_run1", "map_sst2_L2_N16_run1",
             "map_sst2_L6_N16_run1", "map_sst2_L10_N16_run1", "map_sst2_L2_N32_run1")
"""The runs whose dynamics amplify rounding (:func:`rounding_sensitivity` above :data:`SENSITIVE_RTOL`;
measured on the recording host: 1.6e-13 to 4.7e-7, all run 1, β = 1 with qk_scale 4 at μ = 0.1): on
another CPU (other GEMM kernels) their histories differ from the recorded ones by more than
1e-12 although nothing changed. Three of them blow up within two steps (loss ×1e27 or more), so a
rounding change in one step is multiplied many orders of magnitude by the next; the keys-major
softmax of the one trainer (ATen's softmax over dim 1, not over rows) is such a change: 7.3e-12 and
1.6e-7 on the second and third rows of two of them (against autograd, :func:`rounding_sensitivity`
measures 4.7e-12 and 1.8e-7). So only their first :data:`SENSITIVE_PREFIX` row, the forward pass
before any update, is held to 1e-12, with their length (the divergence iteration). The other runs
agreed across the two engines of the recording to at most 8.4e-14, and agree with the one trainer
to at most 1.6e-13."""
SENSITIVE_PREFIX = 1


def data(kind: str, N: int, n: int, seed: int = 0):
    """(X, Y, mask) of Jena-like (per-token targets) or SST-2-like (±1 labels, padded) data."""
    g = torch.Generator().manual_seed(seed)
    d = 14 if kind == "jena" else 50
    X = torch.randn(N, n, d, generator=g, dtype=torch.float64)
    if kind == "jena":
        return X, 0.5 * torch.randn(N, n, 1, generator=g, dtype=torch.float64), None
    lengths = torch.randint(2, n + 1, (N,), generator=g)
    mask = torch.arange(n).view(1, n) < lengths.view(N, 1)
    X = X * mask.unsqueeze(-1)
    # float32 named: the draw must not follow the default dtype (tests/test_model.py sets float64 at import)
    Y = torch.where(torch.rand(N, 1, generator=g, dtype=torch.float32) < 0.5, -1.0, 1.0).to(torch.float64)
    return X, Y, mask


def model(kind: str, L: int, beta: float, qk_scale: float = 1.0) -> ModelConfig:
    return ModelConfig(d=14 if kind == "jena" else 50, d_qk=16, m=64, k=1, n_layers=L, beta=beta,
                       pooling="none" if kind == "jena" else "mean", qk_scale=qk_scale,
                       v_scale=SCALE, ffn_scale=SCALE)


def map_stack(kind: str, L: int, N: int, runs=MAP_RUNS):
    """(params, models, X, Y, gds, mask) of one map stack (n = 8 tokens)."""
    X, Y, mask = data(kind, N, 8)
    models = [model(kind, L, beta, qk) for beta, _, qk, _ in runs]
    gds = [GDConfig(lr=lr, iterations=MAP_ITERATIONS, reduction="mean", record_every=10) for *_, lr in runs]
    params = [init_params(m, seed) for m, (_, seed, _, _) in zip(models, runs)]
    return params, models, X, Y, gds, mask


def headline_run(kind: str, L: int, beta: float):
    """(params, model, X, Y, gd, mask) of one headline-sized run (N = 128; n = 24 Jena, 16 SST-2)."""
    X, Y, mask = data(kind, 128, 24 if kind == "jena" else 16, seed=1)
    cfg = model(kind, L, beta)
    return init_params(cfg, 3), cfg, X, Y, GDConfig(lr=0.05, iterations=HEADLINE_ITERATIONS, reduction="mean"), mask


def map_name(kind, L, N, r):
    return f"map_{kind}_L{L}_N{N}_run{r}"


def headline_name(kind, L, beta):
    return f"headline_{kind}_L{L}_beta{beta:g}"


def history_array(history) -> np.ndarray:
    return history[list(COLUMNS)].to_numpy(dtype=np.float64)


def reference_gd(params, cfg: ModelConfig, X, Y, gd: GDConfig, mask=None) -> tuple[pd.DataFrame, bool]:
    """(history, diverged) of plain GD by autograd on :func:`resgd.core.model.forward`: the readable
    reference for the trainer's hand-derived pass, with the trainer's record and divergence rule."""
    params = {k: v.detach().clone() for k, v in params.items()}
    rows, loss0 = [], None
    for t in range(gd.iterations + 1):
        loss, grads, trace = autograd_loss_and_grad(params, cfg, X, Y, mask, gd.reduction)
        value = float(loss)
        norm = float(torch.linalg.vector_norm(torch.cat([g.reshape(-1) for g in grads.values()])))
        sigma = (gram_singular_values(stack(trace.layers[0].Z, mask)) if t % gd.record_every == 0 or t == gd.iterations
                 else None)
        rows.append((t, value, norm, math.nan if sigma is None else float(sigma[-1]),
                     math.nan if sigma is None else float(sigma[0])))
        loss0 = value if loss0 is None else loss0
        if not math.isfinite(value) or value > gd.divergence_factor * loss0:
            return history_frame(rows), True
        if t < gd.iterations:
            params = {k: p - gd.lr * grads[k] for k, p in params.items()}
    return history_frame(rows), False


def compute() -> dict[str, np.ndarray]:
    """Every case's history (columns :data:`COLUMNS`) with the code as it is."""
    out = {}
    torch.set_num_threads(1)
    for kind, L, N in MAP_CASES:
        params, models, X, Y, gds, mask = map_stack(kind, L, N)
        for r, run in enumerate(train_stacked(params, models, X, Y, gds, mask)):
            out[map_name(kind, L, N, r)] = history_array(run.history)
    for kind, L, beta in HEADLINE_CASES:
        params, cfg, X, Y, gd, mask = headline_run(kind, L, beta)
        out[headline_name(kind, L, beta)] = history_array(train_stacked([params], [cfg], X, Y, [gd], mask)[0].history)
    return out


def rounding_sensitivity() -> dict[str, float]:
    """Each case's largest relative loss difference between the trainer and :func:`reference_gd`,
    which sum in different orders: how much its dynamics amplify a rounding change (the rule
    behind :data:`SENSITIVE`)."""
    computed = compute()
    out = {}
    torch.set_num_threads(1)
    for kind, L, N in MAP_CASES:
        params, models, X, Y, gds, mask = map_stack(kind, L, N)
        for r, (p, cfg, gd) in enumerate(zip(params, models, gds)):
            a, b = history_array(reference_gd(p, cfg, X, Y, gd, mask)[0])[:, 0], computed[map_name(kind, L, N, r)][:, 0]
            out[map_name(kind, L, N, r)] = float(np.max(np.abs(a - b) / np.abs(b))) if a.shape == b.shape else np.inf
    for kind, L, beta in HEADLINE_CASES:
        params, cfg, X, Y, gd, mask = headline_run(kind, L, beta)
        a, b = history_array(reference_gd(params, cfg, X, Y, gd, mask)[0])[:, 0], computed[headline_name(kind, L, beta)][:, 0]
        out[headline_name(kind, L, beta)] = float(np.max(np.abs(a - b) / np.abs(b))) if a.shape == b.shape else np.inf
    return out


if __name__ == "__main__":
    path = reference_path()
    if path is None:
        raise SystemExit(f"no recording is kept for ATen's {torch.backends.cpu.get_cpu_capability()} kernels: "
                         f"add it to REFERENCES ({', '.join(REFERENCES)})")
    arrays = compute()
    np.savez_compressed(path, **arrays)
    for name, a in arrays.items():
        print(name, a.shape, a[0, 0], a[-1, 0])
