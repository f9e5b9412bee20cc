"""Closing the loop of the collapse chapter: full-batch GD with and without the residual at a small
and at a collapsed d_QK, on one per-token target, with the loss floor of a collapsed model."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import torch

from ..core.model import ModelConfig, init_params
from ..core.stacked import train_runs
from ..core.train import GDConfig
from ..pipeline.presets import INPUT_D, INPUT_N, INPUT_SEED, INPUT_TOKENS
from ..threads import torch_threads
from ..validation import check_choice
from .inputs import make_input, sweep_input

TARGETS = ("linear", "random")


def make_target(X: torch.Tensor, kind: str = "linear", seed: int = 4321) -> torch.Tensor:
    """Per-token regression target (N, n, 1): ``X w*/√d`` (``"linear"``) or i.i.d. N(0, 1) (``"random"``)."""
    check_choice("target", kind, TARGETS)
    generator = torch.Generator().manual_seed(int(seed))
    N, n, d = X.shape
    if kind == "linear":
        w = torch.randn(d, 1, generator=generator, dtype=torch.float64).to(X.dtype)
        return X @ w / math.sqrt(d)
    return torch.randn(N, n, 1, generator=generator, dtype=torch.float64).to(X.dtype)


def collapse_floor(Y: torch.Tensor, reduction: str = "mean") -> float:
    """Smallest loss of any model whose prediction is constant over the tokens of a sample.

    ``½ Σ_p Σ_i (y_{p,i} − ȳ_p)²`` (÷N for ``"mean"``): with β = 0 and exactly uniform attention
    every token of a sample has the same Z row, so the same output, and the loss cannot go lower.
    """
    loss = 0.5 * float((Y - Y.mean(dim=1, keepdim=True)).pow(2).sum())
    return loss / Y.shape[0] if reduction == "mean" else loss


def training_comparison(
    d_qks: Sequence[int] = (4, 16384),
    betas: Sequence[float] = (0.0, 1.0),
    seeds: Sequence[int] = (0, 1),
    *,
    logit_scale: str = "linear",
    qk_scale: float = 1.0,
    m: int = 32,
    lr: float = 0.01,
    iterations: int = 300,
    record_every: int = 25,
    reduction: str = "mean",
    target: str = "linear",
    X: torch.Tensor | None = None,
    Y: torch.Tensor | None = None,
    N: int = INPUT_N,
    n: int = INPUT_TOKENS,
    d: int = INPUT_D,
    input_seed: int = INPUT_SEED,
    threads: int | None = 1,
) -> pd.DataFrame:
    """Full-batch GD for every d_qk × β × seed on the same data, same step size.

    For each seed the weights are ``init_params(cfg, seed)``; β changes only the forward pass
    (``beta_ffn`` follows ``beta``, so β = 0 removes both residuals), so β = 0 and β = 1 start from
    identical weights. Returns the trainer's history (tidy) with columns d_qk, beta, seed,
    logit_scale, qk_scale, diverged added (a diverged run keeps its partial history). The runs of
    one d_qk train together where that pays (:func:`resgd.core.stacked.worth_stacking`; each run's
    history is the one :func:`resgd.core.train.train_gd` gives, to rounding), else one at a time.
    """
    X = sweep_input(X, N, n, d, input_seed)
    Y = make_target(X, target) if Y is None else Y
    gd = GDConfig(lr=float(lr), iterations=int(iterations), reduction=reduction, record_every=int(record_every))
    frames = []
    for d_qk in d_qks:  # the runs of one d_qk share their shapes: one stack where that pays
        runs = [(float(beta), int(seed)) for beta in betas for seed in seeds]
        models = [ModelConfig(d=X.shape[-1], d_qk=int(d_qk), m=int(m), beta=beta, logit_scale=logit_scale,
                              qk_scale=float(qk_scale)) for beta, _ in runs]
        params = [init_params(cfg, seed) for cfg, (_, seed) in zip(models, runs)]
        with torch_threads(threads):
            out = train_runs(params, models, X, Y, [gd] * len(runs))
        frames += [o.history.assign(d_qk=int(d_qk), beta=beta, seed=seed, logit_scale=logit_scale,
                                    qk_scale=float(qk_scale), diverged=o.diverged) for o, (beta, seed) in zip(out, runs)]
    return pd.concat(frames, ignore_index=True)


def training_tables(p: dict) -> dict:
    """The training comparison of a :func:`resgd.pipeline.presets.collapse` preset and its collapse floor."""
    tr = p["training"]
    X = make_input(tr["N"], tr["n"], tr["d"], tr["input_seed"])
    return {"training": training_comparison(**tr), "floor": collapse_floor(make_target(X, tr["target"]), "mean")}
