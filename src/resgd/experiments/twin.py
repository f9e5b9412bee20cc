"""The model without a skip, or with a partial one, initialised so that it keeps the residual model's
signal ("matched" twin; every β < 1 of the β sweep too).

Why: a comparison "with vs without residual" proves nothing about the paper when the model
without is dead, or explodes, at t = 0 because of our initialisation. The matched twin is built
layer by layer on its own training inputs (the idea of LSUV, Mishkin & Matas 2016): for each
layer ℓ, with the layers below already set,

* a sublayer whose skip coefficient is 0 gets a gain on its output weight (W_V for attention,
  W_2 for the FFN) chosen so that the RMS of that sublayer's output equals the RMS of the same
  quantity in the fully residual model (β = β_ffn = 1, its own init scales, same seed, same data): Z⁽ℓ⁾ for attention,
  H⁽ℓ⁾ for the FFN;
* a sublayer with a partial skip (0 < β < 1) gets the gain that brings the same RMS with its skip
  term included (:func:`_gain`, the root of a quadratic), so the β sweep compares skip weights at
  one signal scale (before, β ∈ (0, 1) kept the plain init: a smaller ‖Z‖ and a larger step μ);
* every gain is exact in one step: Z is linear in W_V and the ReLU FFN is positively
  homogeneous in W_2, so rescaling by the RMS ratio hits the target.

So at t = 0 every hidden state of the twin has the residual model's RMS (the last one
included), by construction. The gradient norm is not matched by construction; it is checked
(``tests/test_twins.py``: within a factor 2 at every seed and depth of the full-mode grids).
The gains are rounded to 6 significant digits and stored in the run's :class:`ModelConfig`
(``gains``), so they are part of its cache key and every engine draws the same weights.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from ..core.model import ModelConfig, block, init_params
from ..data.spec import DatasetSpec, load_dataset


def _rms(x: torch.Tensor, mask: torch.Tensor | None) -> float:
    """RMS over the real tokens (``mask`` True) of ``x (N, n, d)``."""
    if mask is None:
        return float(x.pow(2).mean().sqrt())
    w = mask.to(x.dtype)[..., None]
    return float(((x.pow(2) * w).sum() / (w.sum() * x.shape[-1])).sqrt())


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def _mean(x: torch.Tensor, mask: torch.Tensor | None) -> float:
    """Mean over the real tokens (``mask`` True) and features of ``x (N, n, d)``."""
    if mask is None:
        return float(x.mean())
    w = mask.to(x.dtype)[..., None]
    return float((x * w).sum() / (w.sum() * x.shape[-1]))


def _gain(skip: torch.Tensor, branch: torch.Tensor, target: float, mask: torch.Tensor | None) -> float:
    """The gain g > 0 with RMS(skip + g · branch) = ``target``: the positive root of the quadratic
    B g² + 2P g + S = target² (B, P, S: the branch's mean square, the cross term, the skip's). Exact
    in one step, since a sublayer's branch is linear in W_V and positively homogeneous in W_2. An
    error when no positive root exists (the skip term alone already exceeds the target)."""
    S, P, B = _mean(skip * skip, mask), _mean(skip * branch, mask), _mean(branch * branch, mask)
    disc = P * P - B * (S - target * target)
    root = (-P + disc**0.5) / B if B > 0 and disc >= 0 else math.nan
    if not root > 0:
        raise ValueError(f"matched_gains: no gain brings this sublayer to the residual model's RMS {target:.4g} "
                         f"(skip term's mean square {S:.4g}, branch's {B:.4g}, cross term {P:.4g}); "
                         "use Settings.twin_init='living' for the plain initialisation")
    return _round(root)


def needs_gains(cfg: ModelConfig) -> bool:
    """Whether some sublayer's skip coefficient is below 1: only those are matched."""
    return cfg.beta < 1 or cfg.residual_ffn < 1


@lru_cache(maxsize=512)
def matched_gains(cfg: ModelConfig, ref_cfg: ModelConfig, seed: int, spec: DatasetSpec,
                  dtype: str = "float64") -> tuple[tuple[float, float], ...]:
    """Per layer (g_V, g_2) of the matched model ``cfg`` (its ``gains`` are ignored) at ``seed`` on
    the training inputs of ``spec``, against the fully residual model ``ref_cfg``; (1, 1) for a
    sublayer that keeps its full skip (coefficient 1). A sublayer without skip (0) gets the RMS
    ratio; one with a partial skip (0 < β < 1) the gain of :func:`_gain`, so that every β starts at
    the residual model's signal scale and only the skip weight differs."""
    if ref_cfg.beta != 1 or ref_cfg.residual_ffn != 1 or ref_cfg.n_layers != cfg.n_layers:
        raise ValueError(f"matched_gains: the reference must be the fully residual model of the same depth, got {ref_cfg}")
    data = load_dataset(spec, dtype)
    X, mask = data.X_train.to(torch.float64), data.mask_train
    base = cfg.replace(gains=())
    ref = init_params(ref_cfg, seed)
    params = init_params(base, seed)
    gains = []
    H_ref, H = X, X
    with torch.no_grad():
        for layer in range(cfg.n_layers):
            ref_trace = block(H_ref, ref, layer, ref_cfg, mask)
            g_v = 1.0
            if cfg.beta == 0:
                trace = block(H, params, layer, base, mask)
                g_v = _round(_rms(ref_trace.Z, mask) / max(_rms(trace.Z, mask), 1e-300))
            elif cfg.beta < 1:
                trace = block(H, params, layer, base, mask)
                g_v = _gain(cfg.beta * H, trace.Attn, _rms(ref_trace.Z, mask), mask)
            params[f"W_V.{layer}"] = params[f"W_V.{layer}"] * g_v
            g_2 = 1.0
            if cfg.residual_ffn == 0:
                trace = block(H, params, layer, base, mask)
                g_2 = _round(_rms(ref_trace.H, mask) / max(_rms(trace.H, mask), 1e-300))
            elif cfg.residual_ffn < 1:
                trace = block(H, params, layer, base, mask)
                g_2 = _gain(cfg.residual_ffn * trace.Z, trace.H - cfg.residual_ffn * trace.Z, _rms(ref_trace.H, mask), mask)
            params[f"W_2.{layer}"] = params[f"W_2.{layer}"] * g_2
            H = block(H, params, layer, base, mask).H
            H_ref = ref_trace.H
            gains.append((g_v, g_2))
    return tuple(gains)


TWIN_MODELS = (("residual", 1.0, "matched"), ("matched twin", 0.0, "matched"), ("He-scaled twin", 0.0, "living"))


def twin_table(s, *, cache_dir=None, smoothness: bool = True, n_jobs: int = 2):
    """At t = 0, per depth and seed of ``s`` (a :class:`resgd.experiments.study.Settings`; give its
    ``depth()`` sizes): the RMS of the last hidden state, the gradient norm (whole, the read-out's, the
    rest's) and L̂ of the residual model, its matched twin and the earlier He-scaled twin, with the
    twins' ratios to the residual model. L̂ comes from the run cache; the missing ones (the He-scaled
    twin's, which no arm trains under the theorem's step) are computed first on ``n_jobs`` workers."""
    import math
    from dataclasses import replace

    import pandas as pd

    from ..core.autograd_reference import autograd_loss_and_grad
    from .step_size import smoothness as smoothness_of, warm_smoothness

    if smoothness:
        warm_smoothness([(replace(s, twin_init=init), beta, L, None, seed) for L in s.depths for seed in s.seeds
                         for _, beta, init in TWIN_MODELS], n_jobs=n_jobs, cache_dir=cache_dir)
    data = load_dataset(s.spec, "float64")
    rows = []
    for L in s.depths:
        for seed in s.seeds:
            for model, beta, init in TWIN_MODELS:
                ss = replace(s, twin_init=init)
                cfg = ss.model(beta, L, seed=seed)
                _, grads, trace = autograd_loss_and_grad(init_params(cfg, seed), cfg, data.X_train, data.Y_train,
                                                data.mask_train, s.reduction)
                readout = float(grads["W_U"].norm())
                body = math.sqrt(sum(float(g.pow(2).sum()) for k, g in grads.items() if k != "W_U"))
                rows.append({"n_layers": L, "seed": seed, "model": model,
                             "rms_H": _rms(trace.layers[-1].H, data.mask_train),
                             "grad": math.hypot(readout, body), "grad_readout": readout, "grad_rest": body,
                             "L_hat": smoothness_of(ss, beta, L, seed=seed, cache_dir=cache_dir) if smoothness else math.nan})
    table = pd.DataFrame(rows)
    ref = table[table["model"] == "residual"].set_index(["n_layers", "seed"])
    for column in ("rms_H", "grad", "grad_rest", "L_hat"):
        table[f"{column}_ratio"] = table[column].to_numpy() / ref.loc[list(zip(table["n_layers"], table["seed"])), column].to_numpy()
    return table


def twin_summary(table) -> dict[str, float]:
    """The ranges a page states about :func:`twin_table`: over every depth and seed, the matched twin's
    RMS deviation, gradient and L̂ ratios, and the He-scaled twin's."""
    out = {}
    for model, slug in (("matched twin", "twin"), ("He-scaled twin", "he")):
        part = table[table["model"] == model]
        out[f"{slug}-rms-dev"] = float((part["rms_H_ratio"] - 1).abs().max())
        out[f"{slug}-rms-max"] = float(part["rms_H_ratio"].max())
        for column in ("grad", "grad_rest", "L_hat"):
            out[f"{slug}-{column.replace('_', '')}-min"] = float(part[f"{column}_ratio"].min())
            out[f"{slug}-{column.replace('_', '')}-max"] = float(part[f"{column}_ratio"].max())
    out["res-lhat-max"] = float(table.loc[table["model"] == "residual", "L_hat"].max())
    out["he-lhat-abs-max"] = float(table.loc[table["model"] == "He-scaled twin", "L_hat"].max())
    return out
