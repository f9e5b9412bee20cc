"""Theorem 1's objects: the synthetic task, the quantities at θ⁽⁰⁾, the bound check, the special case.

The statement checked is the companion's reconstruction (``book/theorem1_proof.md``):
``Φ(θ⁽ᵗ⁺¹⁾) ≤ (1 − μα) Φ(θ⁽ᵗ⁾)`` with ``α = alpha_factor · β_ffn² · σ_min²(Z⁽⁰⁾)`` and
``μ = lr_factor / L̂``, ``L̂ = max(‖∇²Φ(θ⁽⁰⁾)‖₂, λ_max(J⁽⁰⁾J⁽⁰⁾ᵀ))`` (our rule). The special case
(only a linear read-out trained on fixed features) is solved in closed form by :func:`readout_gd`.
:mod:`resgd.theorem1.study` runs these over its sweeps.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import numpy as np
import pandas as pd
import torch

from ..core.conditioning import singular_values, stack
from ..core.smoothness import smoothness_estimate
from ..core.model import ModelConfig, Params, forward, init_params, weight_shapes
from ..core.stats import empirical_rate
from ..validation import ConfigError, check_choice

X_KINDS = ("orthogonal", "gaussian")
TARGETS = ("gaussian", "teacher")


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


SETTING_MEANINGS = {
    "d": "features per token", "d_qk": "query–key width", "m": "FFN hidden width", "k": "outputs per token",
    "n_layers": "blocks", "beta": "attention residual weight β", "beta_ffn": "FFN residual weight β_ffn",
    "logit_scale": "logit divisor s: √d_QK (sqrt) or d_QK (linear)", "activation": "FFN activation",
    "pooling": "none: one output per token; mean: one per sample",
    "init": "distribution of the initial weights, N(0, scale²/fan-in)", "qk_scale": "initial scale of W_Q, W_K",
    "v_scale": "initial scale of W_V", "ffn_scale": "initial scale of W_1, W_2", "out_scale": "initial scale of W_U",
    "gains": "per-layer factors on W_V and W_2 (a twin's initialization)",
}


def settings_table(cfg: ModelConfig) -> pd.DataFrame:
    """Every setting of ``cfg`` with its value and its meaning (a bare ``()`` or ``None`` says nothing to
    a reader: no gains read "none", an unset β_ffn "1.0 (follows beta)")."""
    def text(name: str, value) -> str:
        if name == "beta_ffn" and value is None:
            return f"{cfg.beta} (follows beta)"
        if name == "gains" and not value:
            return "none"
        return str(value)

    names = [f.name for f in dataclasses.fields(cfg)]
    return pd.DataFrame({"value": [text(name, getattr(cfg, name)) for name in names],
                         "meaning": [SETTING_MEANINGS[name] for name in names]}, index=names)

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

