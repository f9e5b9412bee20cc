"""Closing the loop of the collapse chapter: full-batch GD with and without the residual at a small
and at a collapsed d_QK, on one per-token target, with the loss floor of a collapsed model."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import torch

from ..core.model import ModelConfig, init_params
from ..core.trainer import GDConfig, train_runs
from ..pipeline import stored_tables
from ..pipeline.presets import INPUT_D, INPUT_N, INPUT_SEED, INPUT_TOKENS
from ..infra.threads import torch_threads
from ..validation import check_choice
from .inputs import make_input, sweep_input

TARGETS = ("linear", "random", "interaction")
TEACHER_SHARPNESS = 3.0
"""Scale of the interaction target's teacher logits x_iᵀBx_j, B = sharpness·G/d with G a seeded Gaussian d×d (companion's choice)."""


def make_target(X: torch.Tensor, kind: str = "linear", seed: int = 4321) -> torch.Tensor:
    """Per-token regression target (N, n, 1): ``X w*/√d`` (``"linear"``), i.i.d. N(0, 1) (``"random"``)
    or ``"interaction"`` (:func:`interaction_target`)."""
    check_choice("target", kind, TARGETS)
    generator = torch.Generator().manual_seed(int(seed))
    N, n, d = X.shape
    if kind == "linear":
        w = torch.randn(d, 1, generator=generator, dtype=torch.float64).to(X.dtype)
        return X @ w / math.sqrt(d)
    if kind == "interaction":
        return interaction_target(X, generator)
    return torch.randn(N, n, 1, generator=generator, dtype=torch.float64).to(X.dtype)


def skip_features(X: torch.Tensor) -> torch.Tensor:
    """Per token ``[x_i, x̄_p, 1]`` (stacked, (N·n) × (2d + 1)): what a linear read-out sees of a layer
    whose attention is uniform, with or without the residual (``Z_i = βx_i + W_Vᵀx̄_p``)."""
    N, n, d = X.shape
    mean = X.mean(dim=1, keepdim=True).expand(N, n, d)
    return torch.cat([X, mean, torch.ones(N, n, 1, dtype=X.dtype)], dim=-1).reshape(N * n, 2 * d + 1)


def _residual_off_span(F: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``y − F F⁺y``: what of ``y`` the columns of ``F`` cannot fit, by least squares through LAPACK's
    SVD driver (``gelsd``). Why not torch's default CPU driver (``gelsy``): on the same inputs it gave
    a different last digit in every process (the page's interaction-target losses moved from build to
    build by up to 3e-10, relative, over five builds); ``gelsd`` gives the same bytes every time
    (``tests/test_collapse.py``)."""
    return y - F @ torch.linalg.lstsq(F, y, driver="gelsd").solution


def interaction_target(X: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A target only token interactions explain: a teacher attention's output with the part a linear
    read-out of :func:`skip_features` can fit removed, scaled to RMS 1.

    Teacher: ``T_i = Σ_j softmax_j(x_iᵀBx_j) x_jᵀu`` with ``B = TEACHER_SHARPNESS·G/d``, G and u seeded
    Gaussians. ``y = T − proj(T)`` onto the span of :func:`skip_features`, so the best linear predictor
    from the skip path and a collapsed attention has loss ½‖y‖² (:func:`skip_floor`).
    """
    N, n, d = X.shape
    X64 = X.to(torch.float64)
    B = TEACHER_SHARPNESS * torch.randn(d, d, generator=generator, dtype=torch.float64) / d
    u = torch.randn(d, 1, generator=generator, dtype=torch.float64) / math.sqrt(d)
    A = torch.softmax(X64 @ B @ X64.transpose(1, 2), dim=-1)
    T = (A @ X64 @ u).reshape(N * n, 1)
    y = _residual_off_span(skip_features(X64), T)
    return (y / y.pow(2).mean().sqrt()).reshape(N, n, 1).to(X.dtype)


def skip_floor(X: torch.Tensor, Y: torch.Tensor, reduction: str = "mean") -> float:
    """Smallest loss of a linear read-out of :func:`skip_features` (no FFN): what the skip path and a
    collapsed attention can fit linearly. ``½‖Y − proj(Y)‖²`` (÷N for ``"mean"``)."""
    F = skip_features(X.to(torch.float64))
    loss = 0.5 * float(_residual_off_span(F, Y.to(torch.float64).reshape(F.shape[0], -1)).pow(2).sum())
    return loss / X.shape[0] if reduction == "mean" else loss


VERDICT_RULE = "paired"
"""How :func:`speed_verdicts` reads a β = 0 vs β = 1 comparison (pre-registered with the interaction target)."""


def speed_verdicts(training: pd.DataFrame) -> pd.DataFrame:
    """Per d_QK: is GD faster with the residual? Speed = Φ(T)/Φ(0) of each run (same T, same μ; pairs share
    their seed, hence their initial weights). ``"residual faster"`` if β = 1 has the smaller ratio in every
    seed, ``"residual slower"`` if the larger in every seed, else ``"undecided"``; with the medians over seeds."""
    first = training[training["iteration"] == 0].set_index(["d_qk", "beta", "seed"])["loss"]
    last = training.sort_values("iteration").groupby(["d_qk", "beta", "seed"])["loss"].last()
    ratio = (last / first).rename("ratio").reset_index()
    rows = []
    for d_qk, g in ratio.groupby("d_qk"):
        wide = g.pivot(index="seed", columns="beta", values="ratio")
        lo, hi = min(wide.columns), max(wide.columns)
        faster, slower = bool((wide[hi] < wide[lo]).all()), bool((wide[hi] > wide[lo]).all())
        rows.append({"d_qk": int(d_qk), "ratio_no_residual": float(wide[lo].median()),
                     "ratio_residual": float(wide[hi].median()), "seeds": int(len(wide)),
                     "verdict": "residual faster" if faster else "residual slower" if slower else "undecided"})
    return pd.DataFrame(rows)


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
    one d_qk train together where that pays (:func:`resgd.core.trainer.worth_stacking`; a run's
    history does not depend on its stack), else one at a time.
    """
    if X is None and Y is None and threads == 1:  # the data follow from the parameters: one stored chunk per d_qk
        params = [dict(d_qks=[int(d_qk)], betas=list(betas), seeds=list(seeds), logit_scale=logit_scale, qk_scale=qk_scale,
                       m=m, lr=lr, iterations=iterations, record_every=record_every, reduction=reduction, target=target,
                       N=N, n=n, d=d, input_seed=input_seed) for d_qk in d_qks]
        return pd.concat(stored_tables.chunks("collapse/training", params), ignore_index=True)
    return _train(d_qks=d_qks, betas=betas, seeds=seeds, logit_scale=logit_scale, qk_scale=qk_scale, m=m, lr=lr,
                  iterations=iterations, record_every=record_every, reduction=reduction, target=target,
                  X=sweep_input(X, N, n, d, input_seed), Y=Y, threads=threads)


def training_chunk(params: dict) -> pd.DataFrame:
    """One stored chunk of :func:`training_comparison` (:mod:`resgd.pipeline.stored_tables`): its
    runs at one d_qk, from its parameters as the store files them (JSON)."""
    p = dict(params)
    X = sweep_input(None, p.pop("N"), p.pop("n"), p.pop("d"), p.pop("input_seed"))
    return _train(**p, X=X, Y=None, threads=1)


def _train(*, d_qks, betas, seeds, logit_scale, qk_scale, m, lr, iterations, record_every, reduction, target, X, Y,
           threads) -> pd.DataFrame:
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
    """The training comparisons of a :func:`resgd.pipeline.presets.collapse` preset: on its target
    (``training``, with the collapse floor) and, if the preset names one, on the interaction target
    (``training_interaction``, with its collapse floor, its skip floor and :func:`speed_verdicts`)."""
    tr = {k: v for k, v in p["training"].items() if k != "interaction_target"}
    second = p["training"].get("interaction_target")
    X = make_input(tr["N"], tr["n"], tr["d"], tr["input_seed"])
    out = {"training": training_comparison(**tr), "floor": collapse_floor(make_target(X, tr["target"]), "mean")}
    if second:
        Y = make_target(X, second)
        runs = training_comparison(**{**tr, "target": second})
        out |= {"training_interaction": runs, "floor_interaction": collapse_floor(Y, "mean"),
                "skip_floor_interaction": skip_floor(X, Y, "mean"), "verdicts_interaction": speed_verdicts(runs)}
    return out


def training_numbers(training: pd.DataFrame) -> dict[str, float]:
    """Median over seeds of the first and last loss per d_QK and β (glue keys ``initial-loss-d{d}-b{β}``,
    ``final-loss-d{d}-b{β}``)."""
    out: dict[str, float] = {}
    last = training.sort_values("iteration").groupby(["d_qk", "beta", "seed"]).tail(1)
    for (d_qk, beta), group in last.groupby(["d_qk", "beta"]):
        out[f"final-loss-d{d_qk}-b{beta:g}"] = float(group["loss"].median())
    first = training[training["iteration"] == 0]
    for (d_qk, beta), group in first.groupby(["d_qk", "beta"]):
        out[f"initial-loss-d{d_qk}-b{beta:g}"] = float(group["loss"].median())
    return out
