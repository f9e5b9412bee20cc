"""Theorem 1 made checkable: rates, the bound, the exact special case and the sweep.

Everything the theory notebooks (``01_setup``, ``02_theorem1``) compute lives here, so that
:func:`reproduce` regenerates their figures without Jupyter.

What follows the paper and what is ours
---------------------------------------
The paper (Qin, Zhou & Zhu, arXiv 2506.05249) states that GD on a one-layer Transformer with
residual connections converges linearly, ``Φ(θ⁽ᵗ⁺¹⁾) ≤ (1 − μα) Φ(θ⁽ᵗ⁾)``, with ``α`` growing with
``σ_min²(Z⁽⁰⁾)``, ``Z = βX + Attn(X)``. Its full text was not available to us. The precise statement
checked here is the **companion's reconstruction** (see ``book/theorem1_proof.md``):

* realizability through an over-parameterized output map: the stacked tokens do not outnumber
  the width, ``N·n ≤ d``, so a full-row-rank ``H`` can fit any targets and ``Φ* = 0``;
* ``α = alpha_factor · β_ffn² · σ_min²(Z⁽⁰⁾)`` with ``alpha_factor = 1/4`` (our constant);
* step size ``μ = lr_factor / L̂`` with ``L̂ = max(‖∇²Φ(θ⁽⁰⁾)‖₂, λ_max(J⁽⁰⁾J⁽⁰⁾ᵀ))`` (our rule).

The exactly solvable special case (only a linear read-out trained on fixed features) is proved
in full; the statement for all weights is proved *given* its hypotheses, which we do not verify
with explicit constants: it is checked numerically by :func:`rate_sweep` and :func:`bound_check`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch

from .conditioning import singular_values, spectrum, stack
from .model import ModelConfig, Params, forward, init_params, weight_shapes
from .threads import torch_threads
from .train import DivergenceError, GDConfig, loss_from_output, train_gd
from .validation import ConfigError, check_choice

X_KINDS = ("orthogonal", "gaussian")
TARGETS = ("gaussian", "teacher")

# --------------------------------------------------------------------------------------------
# Shared helpers (contract with the experiments notebooks): keep these signatures.
# --------------------------------------------------------------------------------------------


def empirical_rate(history: pd.DataFrame, start: int | None = None, stop: int | None = None) -> float:
    """Minus the least-squares slope of ``log Φ`` against the iteration, over ``start <= iteration < stop``.

    Positive for a decaying loss (``Φ(t) ≈ C e^{-rate·t}``, so the per-step factor is ``exp(-rate)``);
    NaN when fewer than two finite, positive losses fall in the window.
    """
    it = np.asarray(history["iteration"], dtype=float)
    loss = np.asarray(history["loss"], dtype=float)
    keep = np.ones_like(it, dtype=bool)
    if start is not None:
        keep &= it >= start
    if stop is not None:
        keep &= it < stop
    with np.errstate(divide="ignore", invalid="ignore"):
        log_loss = np.log(loss)
    keep &= np.isfinite(log_loss) & np.isfinite(it)
    x, y = it[keep], log_loss[keep]
    if x.size < 2 or np.ptp(x) == 0:
        return math.nan
    xc = x - x.mean()
    slope = float((xc * (y - y.mean())).sum() / (xc * xc).sum())
    return -slope


def _average_ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size, dtype=float)
    sorted_values = values[order]
    i = 0
    while i < values.size:
        j = i
        while j + 1 < values.size and sorted_values[j + 1] == sorted_values[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(x, y) -> float:
    """Spearman rank correlation (Pearson correlation of average ranks; ties share their mean rank).

    Pairs with a non-finite member are dropped; NaN when fewer than 3 pairs remain or a side is constant.
    """
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"spearman: x and y differ in length ({x.size} vs {y.size})")
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size < 3:
        return math.nan
    rx, ry = _average_ranks(x), _average_ranks(y)
    rx -= rx.mean()
    ry -= ry.mean()
    denom = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / denom) if denom > 0 else math.nan


# --------------------------------------------------------------------------------------------
# Sizes: one preset for the notebooks and the CLI.
# --------------------------------------------------------------------------------------------


def preset(quick: bool) -> dict:
    """Sizes of every computation in ``01_setup`` and ``02_theorem1`` (quick: CI; full: the book).

    Both sweep at least 50 configurations; full adds seeds, d_qk values, β values and iterations.
    """
    common = {
        "N": 4, "n": 4, "d": 32, "m": 32,            # N·n = 16 ≤ d = 32: the realizable regime
        "logit_scale": "linear",                      # uniform attention as d_qk grows (collapse)
        "ffn_rel": 0.25, "out_scale": 0.1,            # small FFN and read-out at init (theorem's regime)
        "target_scale": 0.1, "x_kind": "orthogonal", "targets": "gaussian",
        "lr_factor": 0.5, "alpha_factor": 0.25, "window": (0.5, 1.0),
        "base": {"beta": 0.3, "d_qk": 16, "init_scale": 1.0},
        "special": {"N": 8, "n": 6, "d": 8, "d_qk": 8, "m": 16, "beta": 0.3, "iterations": 150},  # tall: N·n = 48 > d
        "n_jobs": 2,
    }
    if quick:
        return {**common, "betas": (0.0, 0.1, 0.3, 1.0), "d_qks": (1, 16, 256), "init_scales": (0.5, 1.0, 2.0),
                "seeds": (0, 1), "iterations": 300, "setup_iterations": 150, "trajectory_iterations": 300,
                "record_every": 5}
    return {**common, "betas": (0.0, 0.1, 0.3, 0.6, 1.0), "d_qks": (1, 4, 16, 64, 256), "init_scales": (0.5, 1.0, 2.0),
            "seeds": (0, 1, 2, 3), "iterations": 600, "setup_iterations": 300, "trajectory_iterations": 600,
            "record_every": 5}


# --------------------------------------------------------------------------------------------
# Notation: the shapes table.
# --------------------------------------------------------------------------------------------


def shapes_table(cfg: ModelConfig, N: int, n: int) -> pd.DataFrame:
    """Every symbol of the model with its shape, the name in the code and its meaning."""
    s = weight_shapes(cfg)
    out = (N, cfg.k) if cfg.pooling == "mean" else (N, n, cfg.k)
    rows = [
        ("X", "X", (N, n, cfg.d), "input tokens: N samples, n tokens, d features"),
        ("W_Q", "W_Q.0", s["W_Q.0"], "query weights"),
        ("W_K", "W_K.0", s["W_K.0"], "key weights"),
        ("W_V", "W_V.0", s["W_V.0"], "value weights"),
        ("A", "LayerTrace.A", (N, n, n), "attention probabilities softmax(X W_Q (X W_K)ᵀ / s)"),
        ("Z", "LayerTrace.Z", (N, n, cfg.d), "attention output with residual: βX + A X W_V"),
        ("W_1", "W_1.0", s["W_1.0"], "FFN first weight (ReLU after it)"),
        ("W_2", "W_2.0", s["W_2.0"], "FFN second weight"),
        ("H", "LayerTrace.H", (N, n, cfg.d), "block output: β_ffn Z + relu(Z W_1) W_2"),
        ("W_U", "W_U", s["W_U"], "output layer"),
        ("Ŷ", "Y_hat", out, "prediction H W_U (per token)" if cfg.pooling == "none" else "prediction mean(H) W_U"),
    ]
    return pd.DataFrame(
        [{"symbol": sym, "in code": code, "shape": "(" + ", ".join(map(str, shape)) + ")", "meaning": meaning}
         for sym, code, shape, meaning in rows]
    )


# --------------------------------------------------------------------------------------------
# The synthetic task.
# --------------------------------------------------------------------------------------------


def make_task(
    N: int,
    n: int,
    d: int,
    seed: int,
    *,
    x_kind: Literal["orthogonal", "gaussian"] = "orthogonal",
    targets: Literal["gaussian", "teacher"] = "gaussian",
    target_scale: float = 0.1,
    teacher_cfg: ModelConfig | None = None,
    k: int = 1,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``X (N, n, d)`` and per-token targets ``Y (N, n, k)``, both seeded.

    ``x_kind="orthogonal"``: the N·n stacked tokens are orthonormal rows scaled by √d (every singular
    value of the stacked X equals √d, the row norms match Gaussian tokens); needs N·n ≤ d.
    ``"gaussian"``: i.i.d. N(0, 1) entries. ``targets="gaussian"``: N(0, target_scale²) entries;
    ``"teacher"``: the output of ``teacher_cfg`` at seeded weights, rescaled to RMS ``target_scale``.
    """
    check_choice("x_kind", x_kind, X_KINDS)
    check_choice("targets", targets, TARGETS)
    if x_kind == "orthogonal" and N * n > d:
        raise ConfigError(f"x_kind='orthogonal' needs N*n <= d (got N*n = {N * n} > d = {d}); use x_kind='gaussian'")
    g = torch.Generator().manual_seed(10_000 + int(seed))
    if x_kind == "orthogonal":
        q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
        X = math.sqrt(d) * q[: N * n].reshape(N, n, d)
    else:
        X = torch.randn(N, n, d, generator=g, dtype=torch.float64)
    if targets == "gaussian":
        Y = target_scale * torch.randn(N, n, k, generator=g, dtype=torch.float64)
    else:
        tcfg = teacher_cfg or ModelConfig(d=d, d_qk=d, m=d, k=k, beta=1.0)
        with torch.no_grad():
            Y = forward(init_params(tcfg, 20_000 + int(seed)), tcfg, X)
        Y = target_scale * Y / Y.pow(2).mean().sqrt()
    return X.to(dtype), Y.to(dtype)


# --------------------------------------------------------------------------------------------
# The quantities of the theorem at θ⁽⁰⁾.
# --------------------------------------------------------------------------------------------


def jacobian(params: Params, cfg: ModelConfig, X: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``J = ∂ vec Ŷ / ∂θ`` (outputs × all weights, in :func:`weight_shapes` order)."""
    names = list(params)

    def outputs(*weights):
        return forward(dict(zip(names, weights)), cfg, X, mask).reshape(-1)

    blocks = torch.autograd.functional.jacobian(outputs, tuple(params[k].detach() for k in names))
    return torch.cat([b.reshape(b.shape[0], -1) for b in blocks], dim=1)


def ntk_eigenvalues(params: Params, cfg: ModelConfig, X: torch.Tensor, mask: torch.Tensor | None = None) -> np.ndarray:
    """Eigenvalues (ascending) of the tangent kernel ``K = J Jᵀ``; ``∇Φ = Jᵀr`` so ``‖∇Φ‖² = rᵀKr``."""
    J = jacobian(params, cfg, X, mask)
    return torch.linalg.eigvalsh(J @ J.T).clamp_min(0).numpy()


def hessian_norm(
    params: Params, cfg: ModelConfig, X: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None = None,
    *, iterations: int = 50, seed: int = 0,
) -> float:
    """``‖∇²Φ(θ)‖₂`` (largest |eigenvalue|) by power iteration on Hessian-vector products (sum reduction)."""
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    loss = loss_from_output(forward(leaves, cfg, X, mask), Y, mask, "sum")
    grads = torch.autograd.grad(loss, list(leaves.values()), create_graph=True)
    g = torch.Generator().manual_seed(seed)
    v = [torch.randn(x.shape, generator=g, dtype=x.dtype) for x in grads]
    value = 0.0
    for _ in range(iterations):
        norm = math.sqrt(sum(float(a.pow(2).sum()) for a in v))
        if norm == 0:
            return 0.0
        v = [a / norm for a in v]
        hv = torch.autograd.grad(grads, list(leaves.values()), grad_outputs=v, retain_graph=True)
        value = math.sqrt(sum(float(a.pow(2).sum()) for a in hv))
        v = [a.detach() for a in hv]
    return value


def smoothness_estimate(
    params: Params, cfg: ModelConfig, X: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None = None
) -> float:
    """``L̂ = max(‖∇²Φ(θ)‖₂, λ_max(JJᵀ))``: the local smoothness at θ, the step-size rule's denominator."""
    lam = ntk_eigenvalues(params, cfg, X, mask)
    return max(hessian_norm(params, cfg, X, Y, mask), float(lam[-1]))


def step_size(
    params: Params, cfg: ModelConfig, X: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None = None,
    *, lr_factor: float = 0.5,
) -> float:
    """The one step-size rule of the theory notebooks: ``μ = lr_factor / L̂(θ⁽⁰⁾)`` (companion's choice)."""
    return lr_factor / smoothness_estimate(params, cfg, X, Y, mask)


def row_sigma_min(M: torch.Tensor) -> float:
    """``σ_{rows}(M)``: the smallest of the ``rows`` singular values of a wide-or-square matrix, 0 if tall.

    ``‖Mᵀv‖ ≥ σ_rows(M)‖v‖`` for every v: the lower bound the PL inequality uses.
    """
    if M.shape[0] > M.shape[1]:
        return 0.0
    return float(singular_values(M)[-1])


def theorem_alpha(
    params: Params, cfg: ModelConfig, X: torch.Tensor, mask: torch.Tensor | None = None,
    *, alpha_factor: float = 0.25,
) -> float:
    """The reconstruction's ``α = alpha_factor · β_ffn² · σ_min²(Z⁽⁰⁾)`` (σ_min = σ_{Nn} of the stacked Z; 0 if N·n > d)."""
    with torch.no_grad():
        Z = forward(params, cfg, X, mask, return_trace=True).layers[0].Z
    return alpha_factor * cfg.residual_ffn**2 * row_sigma_min(stack(Z, mask)) ** 2


# --------------------------------------------------------------------------------------------
# The bound check.
# --------------------------------------------------------------------------------------------


def bound_check(history: pd.DataFrame, mu: float, alpha: float, *, rel_floor: float = 1e-16, rtol: float = 1e-12) -> dict:
    """Did every step obey ``Φ(t+1) ≤ (1 − μα) Φ(t)``?

    Steps where Φ(t) or Φ(t+1) is below ``rel_floor · Φ(0)`` (round-off) are not counted.
    Returns ``n_steps``, ``bound`` (= 1 − μα), ``fraction_obeyed``, ``max_violation`` (largest
    ``ratio − bound``; negative = every step had that margin), ``tightness_median`` and
    ``tightness_min``: the actual decrease ``1 − ratio`` in units of the guaranteed ``μα``
    (≥ 1 when obeyed, 1 = the bound is tight; NaN when μα = 0).
    """
    loss = np.asarray(history["loss"], dtype=float)
    bound = 1.0 - mu * alpha
    if loss.size < 2:
        return {"n_steps": 0, "bound": bound, "fraction_obeyed": math.nan, "max_violation": math.nan,
                "tightness_median": math.nan, "tightness_min": math.nan}
    floor = rel_floor * loss[0]
    now, nxt = loss[:-1], loss[1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = nxt / now
    keep = (now > floor) & ((nxt > floor) | ~np.isfinite(nxt))  # a non-finite Φ(t+1) counts as a violation
    ratio = np.where(np.isfinite(nxt), ratio, np.inf)[keep]
    if ratio.size == 0:
        return {"n_steps": 0, "bound": bound, "fraction_obeyed": math.nan, "max_violation": math.nan,
                "tightness_median": math.nan, "tightness_min": math.nan}
    obeyed = ratio <= bound + rtol * abs(bound)
    guaranteed = mu * alpha
    with np.errstate(divide="ignore", invalid="ignore"):
        tight = (1.0 - ratio) / guaranteed if guaranteed > 0 else np.full(ratio.shape, np.nan)
    return {
        "n_steps": int(ratio.size),
        "bound": bound,
        "fraction_obeyed": float(obeyed.mean()),
        "max_violation": float(np.max(ratio - bound)),
        "tightness_median": float(np.median(tight)) if guaranteed > 0 else math.nan,
        "tightness_min": float(np.min(tight)) if guaranteed > 0 else math.nan,
    }


# --------------------------------------------------------------------------------------------
# The exactly solvable special case: a linear read-out on fixed features.
# --------------------------------------------------------------------------------------------


def readout_gd(F: torch.Tensor, Y: torch.Tensor, lr: float | None = None, iterations: int = 100,
               W0: torch.Tensor | None = None) -> pd.DataFrame:
    """GD on ``Φ(W) = ½‖FW − Y‖²`` (F: M×d fixed features, Y: M×k), measured and predicted in closed form.

    ``lr`` defaults to ``1/σ_max²(F)``. Columns: ``iteration``, ``loss``, ``excess`` (Φ − Φ*, computed
    as ½‖Uᵀ(FW − Y)‖² with U the left singular vectors, so it stays accurate far below Φ*),
    ``predicted`` (the closed form ½Σᵢ(1 − μσᵢ²)^{2t}‖uᵢᵀE₀‖²), ``asymptote`` (the slowest mode
    alone, ½‖u_minᵀE₀‖²ρ^t with ρ = (1 − μσ_min²)², which the excess approaches), ``phi_star``.
    ``frame.attrs``: ``lr``, ``rho``, ``rate_ratio`` (σ_min²/σ_max² over the nonzero σ), ``rank``.
    """
    F = F.to(torch.float64)
    Y = Y.to(torch.float64).reshape(F.shape[0], -1)
    U, S, _ = torch.linalg.svd(F, full_matrices=False)
    rank = int((S > S[0] * F.shape[0] * torch.finfo(torch.float64).eps).sum())
    U, S = U[:, :rank], S[:rank]
    mu = float(1.0 / S[0] ** 2) if lr is None else float(lr)
    W = torch.zeros(F.shape[1], Y.shape[1], dtype=torch.float64) if W0 is None else W0.to(torch.float64).clone()
    E0 = F @ W - Y
    coef = U.T @ E0                                     # components of the reachable error
    phi_star = 0.5 * float((E0 - U @ coef).pow(2).sum())
    factors = 1.0 - mu * S**2
    rho = float((factors**2).max())  # the slowest mode: σ_min's when μ ≤ 1/σ_max²
    rows = []
    for t in range(iterations + 1):
        E = F @ W - Y
        rows.append({
            "iteration": t,
            "loss": 0.5 * float(E.pow(2).sum()),
            "excess": 0.5 * float((U.T @ E).pow(2).sum()),
            "predicted": 0.5 * float(((factors[:, None] ** t) * coef).pow(2).sum()),
        })
        W = W - mu * (F.T @ E)
    frame = pd.DataFrame(rows)
    slowest = int(torch.argmax(factors**2))
    frame["asymptote"] = 0.5 * float(coef[slowest].pow(2).sum()) * rho ** frame["iteration"]
    frame["phi_star"] = phi_star
    frame.attrs.update({"lr": mu, "rho": rho, "rate_ratio": float((S[-1] / S[0]) ** 2), "rank": rank})
    return frame


def readout_summary(frame: pd.DataFrame, *, rel_floor: float = 1e-12) -> dict:
    """Measured vs predicted per-step factor of Φ − Φ* for a :func:`readout_gd` run.

    ``measured_factor``: excess(T)/excess(T−1) at the last step above ``rel_floor·excess(0)``;
    ``fitted_factor``: exp(−slope) of log excess over the second half of that range;
    ``predicted_factor``: (1 − σ_min²/σ_max²)² (with μ = 1/σ_max²; (1 − μσ_min²)² in general);
    ``max_rel_error``: max relative gap between the measured curve and the closed form.
    """
    ex = frame["excess"].to_numpy()
    ok = np.nonzero(ex > rel_floor * ex[0])[0]
    last = int(ok[-1])
    window = frame[["iteration"]].assign(loss=frame["excess"])
    rel = np.abs(frame["excess"] - frame["predicted"]) / frame["predicted"].where(frame["predicted"] > 0)
    return {
        "predicted_factor": frame.attrs["rho"],
        "measured_factor": float(ex[last] / ex[last - 1]),
        "fitted_factor": math.exp(-empirical_rate(window, last // 2, last + 1)),
        "rate_ratio": frame.attrs["rate_ratio"],
        "lr": frame.attrs["lr"],
        "phi_star": float(frame["phi_star"].iloc[0]),
        "max_rel_error": float(np.nanmax(rel.iloc[: last + 1].to_numpy())),
        "last_iteration": last,
    }


def special_case(p: dict, seed: int = 0) -> pd.DataFrame:
    """The notebook's special case: the read-out trained on the stacked ``Z⁽⁰⁾`` of a tall task (N·n > d)."""
    s = p["special"]
    cfg = ModelConfig(d=s["d"], d_qk=s["d_qk"], m=s["m"], beta=s["beta"], logit_scale=p["logit_scale"])
    X, Y = make_task(s["N"], s["n"], s["d"], seed, x_kind="gaussian", target_scale=1.0)
    with torch.no_grad():
        Z = forward(init_params(cfg, seed), cfg, X, return_trace=True).layers[0].Z
    return readout_gd(stack(Z), stack(Y), iterations=s["iterations"])


# --------------------------------------------------------------------------------------------
# Full GD on all weights: one configuration and the sweep.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepConfig:
    """One point of the sweep: the model, the task and the seed (weights and data)."""

    beta: float
    d_qk: int
    init_scale: float
    seed: int
    N: int = 4
    n: int = 4
    d: int = 32
    m: int = 32
    logit_scale: str = "linear"
    ffn_rel: float = 0.25
    out_scale: float = 0.1
    beta_ffn: float = 1.0
    target_scale: float = 0.1
    x_kind: str = "orthogonal"
    targets: str = "gaussian"

    def model_config(self) -> ModelConfig:
        """``qk_scale = v_scale = init_scale``, ``ffn_scale = ffn_rel·init_scale``, ``out_scale`` fixed."""
        s = float(self.init_scale)
        return ModelConfig(d=self.d, d_qk=self.d_qk, m=self.m, beta=float(self.beta), beta_ffn=float(self.beta_ffn),
                           logit_scale=self.logit_scale, qk_scale=s, v_scale=s, ffn_scale=self.ffn_rel * s,
                           out_scale=self.out_scale)

    def task(self) -> tuple[torch.Tensor, torch.Tensor]:
        return make_task(self.N, self.n, self.d, self.seed, x_kind=self.x_kind, targets=self.targets,
                         target_scale=self.target_scale)


_SHARED = ("N", "n", "d", "m", "logit_scale", "ffn_rel", "out_scale", "target_scale", "x_kind", "targets")


def sweep_configs(p: dict) -> list[SweepConfig]:
    """The grid β × d_qk × init scale × seed of a :func:`preset`."""
    shared = {k: p[k] for k in _SHARED}
    return [SweepConfig(beta=b, d_qk=q, init_scale=s, seed=seed, **shared)
            for b in p["betas"] for q in p["d_qks"] for s in p["init_scales"] for seed in p["seeds"]]


def base_config(p: dict, seed: int = 0, **changes) -> SweepConfig:
    """The preset's reference configuration (β = 0.3, d_qk = 16, init scale 1), with changes."""
    shared = {k: p[k] for k in _SHARED}
    return SweepConfig(seed=seed, **{**shared, **p["base"], **changes})


def train_config(config: SweepConfig, iterations: int, *, lr_factor: float = 0.5, lr: float | None = None,
                 record_every: int = 10) -> tuple[pd.DataFrame, dict]:
    """Full GD on all weights for one configuration: ``(history, info)``; a diverged run keeps its partial history.

    ``info``: ``lr``, ``smoothness``, ``diverged`` and the parameters at the end (``params``).
    """
    with torch_threads(1):
        cfg = config.model_config()
        X, Y = config.task()
        params = init_params(cfg, config.seed)
        smooth = smoothness_estimate(params, cfg, X, Y)
        mu = lr_factor / smooth if lr is None else float(lr)
        try:
            result = train_gd(params, cfg, X, Y, GDConfig(lr=mu, iterations=iterations, record_every=record_every))
            history, final, diverged = result.history, result.params, False
        except DivergenceError as err:
            history, final, diverged = err.history, None, True
    return history, {"lr": mu, "smoothness": smooth, "diverged": diverged, "params": final}


def _window(history: pd.DataFrame, window: tuple[float, float], rel_floor: float) -> tuple[int, int]:
    loss = history["loss"].to_numpy()
    below = np.nonzero(~(loss > rel_floor * loss[0]))[0]
    stop = int(history["iteration"].iloc[below[0]]) if below.size else int(history["iteration"].iloc[-1]) + 1
    return int(window[0] * stop), max(int(window[1] * stop), 2)


def run_config(config: SweepConfig, iterations: int, *, lr_factor: float = 0.5, alpha_factor: float = 0.25,
               window: tuple[float, float] = (0.5, 1.0), rel_floor: float = 1e-16) -> dict:
    """One row of :func:`rate_sweep` (runs single-threaded)."""
    with torch_threads(1):
        cfg = config.model_config()
        X, Y = config.task()
        params = init_params(cfg, config.seed)
        with torch.no_grad():
            layer = forward(params, cfg, X, return_trace=True).layers[0]
        sz = spectrum(layer.Z)
        lam = ntk_eigenvalues(params, cfg, X)
        alpha = theorem_alpha(params, cfg, X, alpha_factor=alpha_factor)
        history, info = train_config(config, iterations, lr_factor=lr_factor, record_every=max(iterations, 1))
        mu = info["lr"]
        start, stop = _window(history, window, rel_floor)
        check = bound_check(history, mu, alpha, rel_floor=rel_floor)
        row = {**asdict(config),
               "sigma_min_Z0": sz.sigma_min, "sigma_max_Z0": sz.sigma_max, "rate_ratio": sz.rate_ratio,
               "sigma_min_H0": row_sigma_min(stack(layer.H)), "sigma_max_H0": spectrum(layer.H).sigma_max,
               "A3_at_init": bool(row_sigma_min(stack(layer.H)) >= 0.5 * cfg.residual_ffn * row_sigma_min(stack(layer.Z))),
               "ntk_min": float(lam[0]), "ntk_max": float(lam[-1]),
               "ntk_ratio": float(lam[0] / lam[-1]) if lam[-1] > 0 else 0.0,
               "smoothness": info["smoothness"], "lr": mu, "alpha": alpha,
               "bound_rate": -math.log1p(-mu * alpha) if mu * alpha < 1 else math.inf,
               "empirical_rate": empirical_rate(history, start, stop), "window_start": start, "window_stop": stop,
               **check,
               "final_loss_ratio": float(history["loss"].iloc[-1] / history["loss"].iloc[0]),
               "diverged": info["diverged"], "iterations": int(history["iteration"].iloc[-1])}
        if info["params"] is not None:
            with torch.no_grad():
                ZT = forward(info["params"], cfg, X, return_trace=True).layers[0].Z
            sT = spectrum(ZT)
            row["sigma_min_ZT"], row["sigma_max_ZT"] = sT.sigma_min, sT.sigma_max
        else:
            row["sigma_min_ZT"] = row["sigma_max_ZT"] = math.nan
    return row


SWEEP_COLUMNS = (
    [f.name for f in fields(SweepConfig)]
    + ["sigma_min_Z0", "sigma_max_Z0", "rate_ratio", "sigma_min_H0", "sigma_max_H0", "A3_at_init", "ntk_min", "ntk_max", "ntk_ratio",
       "smoothness", "lr", "alpha", "bound_rate", "empirical_rate", "window_start", "window_stop",
       "n_steps", "bound", "fraction_obeyed", "max_violation", "tightness_median", "tightness_min",
       "final_loss_ratio", "diverged", "iterations", "sigma_min_ZT", "sigma_max_ZT"]
)


def rate_sweep(configs: Iterable[SweepConfig], *, iterations: int = 300, lr_factor: float = 0.5,
               alpha_factor: float = 0.25, window: tuple[float, float] = (0.5, 1.0), n_jobs: int = 1) -> pd.DataFrame:
    """Full GD on all weights for every configuration; one row each (columns :data:`SWEEP_COLUMNS`).

    Per configuration: the predicted ``rate_ratio = σ_min²(Z⁽⁰⁾)/σ_max²(Z⁽⁰⁾)``, whether assumption
    (A3) holds at θ⁽⁰⁾ (``A3_at_init``: σ_min(H⁽⁰⁾) ≥ ½β_ffn σ_min(Z⁽⁰⁾)), the tangent-kernel
    eigenvalues ``ntk_min``/``ntk_max``, the step
    ``lr = lr_factor/L̂``, the theorem's ``alpha`` and ``bound_rate = −log(1 − lr·alpha)``, the
    ``empirical_rate`` over the window (fractions of the run before Φ reaches round-off), the
    :func:`bound_check` columns and the spectrum of Z at the end. ``n_jobs > 1`` runs joblib
    workers, each single-threaded; rows come back in ``configs`` order and do not depend on n_jobs.
    """
    configs = list(configs)
    kwargs = {"lr_factor": lr_factor, "alpha_factor": alpha_factor, "window": tuple(window)}
    if n_jobs == 1 or len(configs) < 2:
        rows = [run_config(c, iterations, **kwargs) for c in configs]
    else:
        from joblib import Parallel, delayed

        rows = Parallel(n_jobs=n_jobs)(delayed(run_config)(c, iterations, **kwargs) for c in configs)
    return pd.DataFrame(rows, columns=SWEEP_COLUMNS)


def sweep_summary(sweep: pd.DataFrame) -> dict:
    """The numbers the notebook quotes: Spearman ρ(predicted, rate) over all configurations and over
    those with a residual (β > 0), the bound-check totals, and how close the attained rate is to the
    ratio (``median_rate_over_ratio_residual``) and L̂ to σ_max²(H⁽⁰⁾)."""
    positive = sweep["empirical_rate"] > 0
    ok = sweep["rate_ratio"] > 0
    return {
        "n_configs": int(len(sweep)),
        "spearman": spearman(sweep["rate_ratio"], sweep["empirical_rate"]),
        "spearman_ntk": spearman(sweep["ntk_ratio"], sweep["empirical_rate"]),
        "n_nonpositive_rate": int((~positive).sum()),
        "n_all_obeyed": int((sweep["fraction_obeyed"] == 1.0).sum()),
        "fraction_steps_obeyed": float((sweep["fraction_obeyed"] * sweep["n_steps"]).sum() / sweep["n_steps"].sum()),
        "min_fraction_obeyed": float(sweep["fraction_obeyed"].min()),
        "n_diverged": int(sweep["diverged"].sum()),
        "median_tightness": float(sweep["tightness_median"].median()),
        "n_rate_above_bound": int((sweep["empirical_rate"] >= sweep["bound_rate"]).sum()),
        "n_positive_ratio": int(ok.sum()),
        "n_A3_at_init": int(sweep["A3_at_init"].sum()),
        "spearman_residual": spearman(sweep.loc[sweep["beta"] > 0, "rate_ratio"], sweep.loc[sweep["beta"] > 0, "empirical_rate"]),
        "median_rate_over_ratio_residual": float((sweep["empirical_rate"] / sweep["rate_ratio"])[sweep["beta"] > 0].median()),
        "median_smoothness_over_sigma_max_H2": float((sweep["smoothness"] / sweep["sigma_max_H0"] ** 2).median()),
    }


def obeyed_table(sweep: pd.DataFrame, by: Sequence[str] = ("beta", "init_scale")) -> pd.DataFrame:
    """Per group: configurations, how many obeyed the bound at every step, mean fraction of steps, median tightness."""
    g = sweep.groupby(list(by))
    return pd.DataFrame({
        "configs": g.size(),
        "all_steps_obeyed": g["fraction_obeyed"].apply(lambda s: int((s == 1.0).sum())),
        "mean_fraction_obeyed": g["fraction_obeyed"].mean(),
        "median_tightness": g["tightness_median"].median(),
        "median_rate": g["empirical_rate"].median(),
    }).reset_index()


# --------------------------------------------------------------------------------------------
# How σ(Z⁽ᵗ⁾) moves.
# --------------------------------------------------------------------------------------------


def sigma_trajectory(config: SweepConfig, iterations: int, *, lr_factor: float = 0.5, record_every: int = 1,
                     label: str | None = None, alpha_factor: float = 0.25) -> pd.DataFrame:
    """σ_min and σ_max of the stacked Z⁽ᵗ⁾ every ``record_every`` steps of full GD, with the loss.

    The run is :func:`resgd.train.train_gd` in chunks of ``record_every`` steps (same step size, so
    the same iterates as one run); the spectrum is computed by SVD of the stacked Z at each chunk
    boundary. (The trainer's own ``sigma_min_Z`` column comes from the d×d Gram matrix, which is
    exactly singular when N·n < d, as here.) Columns: ``scenario``, ``iteration``, ``loss``,
    ``sigma_min_Z``, ``sigma_max_Z``, their ratios to t = 0 (``sigma_min_rel``, ``sigma_max_rel``),
    ``loss_rel``, and the run's ``lr`` and theorem ``alpha``.
    """
    with torch_threads(1):
        cfg = config.model_config()
        X, Y = config.task()
        params = init_params(cfg, config.seed)
        mu = step_size(params, cfg, X, Y, lr_factor=lr_factor)
        alpha = theorem_alpha(params, cfg, X, alpha_factor=alpha_factor)
        rows, t = [], 0
        while True:
            with torch.no_grad():
                trace = forward(params, cfg, X, return_trace=True)
            sz = spectrum(trace.layers[0].Z)
            loss = float(loss_from_output(trace.Y_hat, Y, None, "sum"))
            rows.append({"iteration": t, "loss": loss, "sigma_min_Z": sz.sigma_min, "sigma_max_Z": sz.sigma_max})
            if t >= iterations or not math.isfinite(loss):
                break
            steps = min(record_every, iterations - t)
            try:
                params = train_gd(params, cfg, X, Y, GDConfig(lr=mu, iterations=steps, record_every=steps)).params
            except DivergenceError:
                break
            t += steps
    frame = pd.DataFrame(rows)
    frame.insert(0, "scenario", label or f"beta={config.beta}, init={config.init_scale}, c={lr_factor}")
    for col in ("sigma_min_Z", "sigma_max_Z", "loss"):
        frame[col.replace("_Z", "") + "_rel" if col != "loss" else "loss_rel"] = frame[col] / frame[col].iloc[0]
    frame["lr"] = mu
    frame["alpha"] = alpha
    return frame


def trajectory_scenarios(p: dict, seed: int = 0) -> dict[str, tuple[SweepConfig, float]]:
    """The runs of the σ(Z⁽ᵗ⁾) figure: the theorem's regime and ways in and out of it.

    ``name → (configuration, lr_factor)``. Targets far from the initial outputs make the weights
    travel further (the theorem needs √Φ⁽⁰⁾ small against α); a step beyond 2/L̂ makes the loss
    rise before it falls; a larger initialization makes training lazier, not less.
    """
    t = p["target_scale"]
    return {
        "theorem regime (c = 0.5)": (base_config(p, seed), p["lr_factor"]),
        "large init (scale 4)": (base_config(p, seed, init_scale=4.0), p["lr_factor"]),
        "large step (c = 3)": (base_config(p, seed), 3.0),
        "far targets (×30)": (base_config(p, seed, target_scale=30 * t), p["lr_factor"]),
        "far targets (×100, c = 0.1)": (base_config(p, seed, target_scale=100 * t), 0.1),
    }


def sigma_trajectories(p: dict, seed: int = 0) -> pd.DataFrame:
    """Long table of :func:`sigma_trajectory` (one row per step) for every scenario of :func:`trajectory_scenarios`."""
    return pd.concat(
        [sigma_trajectory(c, p["trajectory_iterations"], lr_factor=lr, record_every=1, label=name,
                          alpha_factor=p["alpha_factor"])
         for name, (c, lr) in trajectory_scenarios(p, seed).items()],
        ignore_index=True,
    )


def trajectory_summary(traj: pd.DataFrame) -> pd.DataFrame:
    """Per scenario: largest relative drift of σ_min and σ_max of Z from t = 0, the final loss ratio,
    the peak loss ratio and the fraction of steps obeying the theorem's bound (with that run's μ and α)."""
    rows = []
    for name, g in traj.groupby("scenario", sort=False):
        check = bound_check(g, float(g["lr"].iloc[0]), float(g["alpha"].iloc[0]))
        rows.append({
            "scenario": name,
            "max_drift_sigma_min": float((g["sigma_min_rel"] - 1).abs().max()),
            "max_drift_sigma_max": float((g["sigma_max_rel"] - 1).abs().max()),
            "peak_loss_rel": float(g["loss_rel"].max()),
            "final_loss_rel": float(g["loss_rel"].iloc[-1]),
            "fraction_obeyed": check["fraction_obeyed"],
            "iterations": int(g["iteration"].max()),
        })
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# The setup notebook's tiny run.
# --------------------------------------------------------------------------------------------


def setup_runs(p: dict, seed: int = 0, betas: Sequence[float] = (1.0, 0.0)) -> pd.DataFrame:
    """Tiny end-to-end training of the reference configuration with and without the attention residual."""
    frames = []
    for beta in betas:
        history, info = train_config(base_config(p, seed, beta=beta), p["setup_iterations"],
                                     lr_factor=p["lr_factor"], record_every=p["record_every"])
        frames.append(history.assign(beta=beta, lr=info["lr"]))
    return pd.concat(frames, ignore_index=True)


# --------------------------------------------------------------------------------------------
# Everything without Jupyter.
# --------------------------------------------------------------------------------------------


SETUP_KEYS = ("setup",)
THEOREM1_KEYS = ("special", "rate", "bound", "trajectories")


def compute_all(quick: bool, seed: int = 0, parts: Sequence[str] = ("setup", "theorem1")) -> dict[str, pd.DataFrame]:
    """Every table behind the figures of ``01_setup`` (part ``"setup"``) and ``02_theorem1`` (``"theorem1"``)."""
    p = preset(quick)
    tables: dict[str, pd.DataFrame] = {}
    if "setup" in parts:
        tables["setup"] = setup_runs(p, seed)
    if "theorem1" in parts:
        tables["special"] = special_case(p, seed)
        tables["sweep"] = rate_sweep(sweep_configs(p), iterations=p["iterations"], lr_factor=p["lr_factor"],
                                     alpha_factor=p["alpha_factor"], window=p["window"], n_jobs=p["n_jobs"])
        tables["trajectories"] = sigma_trajectories(p, seed)
    return tables


FIGURE_NAMES = {
    "setup": "01_setup_loss",
    "special": "02_theorem1_special_case",
    "rate": "02_theorem1_rate_vs_prediction",
    "bound": "02_theorem1_bound_check",
    "trajectories": "02_theorem1_sigma_trajectories",
}


def make_figures(tables: dict[str, pd.DataFrame]) -> dict:
    """The figures of the two notebooks that ``tables`` allows, by key of :data:`FIGURE_NAMES`."""
    from .plots import theory as tplots

    makers = {
        "setup": ("setup", tplots.loss_curves),
        "special": ("special", tplots.special_case),
        "rate": ("sweep", tplots.rate_vs_prediction),
        "bound": ("sweep", tplots.bound_check),
        "trajectories": ("trajectories", tplots.sigma_trajectories),
    }
    return {key: make(tables[table]) for key, (table, make) in makers.items() if table in tables}


def _reproduce(quick: bool, directory, seed: int, parts: Sequence[str]) -> dict[str, Path]:
    import matplotlib.pyplot as plt

    from .atomic import write_with
    from .plots import figures_dir, save_figure, use_style

    use_style()
    tables = compute_all(quick, seed, parts)
    paths: dict[str, Path] = {}
    for key, fig in make_figures(tables).items():
        name = FIGURE_NAMES[key]
        saved = save_figure(fig, name, directory)
        plt.close(fig)
        paths[name] = saved["png"]
        paths[name + ".pdf"] = saved["pdf"]
    if "sweep" in tables:
        csv = figures_dir(directory) / "02_theorem1_sweep.csv"
        paths["02_theorem1_sweep.csv"] = write_with(csv, lambda tmp: tables["sweep"].to_csv(tmp, index=False))
    return paths


def reproduce(quick: bool, directory: str | os.PathLike | None = None, seed: int = 0) -> dict[str, Path]:
    """Regenerate every figure of ``01_setup`` and ``02_theorem1`` (PNG + PDF) and the sweep table (CSV).

    Returns ``{file name: path}`` (PNG under the figure's name, PDF under ``name.pdf``); files go to
    ``directory`` (else ``$RESGD_FIGURES_DIR`` else ``./figures``), written atomically. The same
    functions as the notebooks, the same :func:`preset`.
    """
    return _reproduce(quick, directory, seed, ("setup", "theorem1"))


def reproduce_setup(quick: bool, directory: str | os.PathLike | None = None, seed: int = 0) -> dict[str, Path]:
    """Only the figure of ``01_setup`` (for ``python -m resgd reproduce --only setup``)."""
    return _reproduce(quick, directory, seed, ("setup",))


def reproduce_theorem1(quick: bool, directory: str | os.PathLike | None = None, seed: int = 0) -> dict[str, Path]:
    """Only the figures (and sweep CSV) of ``02_theorem1``."""
    return _reproduce(quick, directory, seed, ("theorem1",))
