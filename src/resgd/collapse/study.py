"""Rank collapse of the attention output as d_QK grows, and why the residual prevents it.

Everything behind ``notebooks/03_rank_collapse.md`` (and ``resgd reproduce``) lives here:

* :func:`dqk_sweep` — σ_min, σ_max, distance to rank 1 and stable rank of ``Attn(X)`` and of
  ``Z = βX + Attn(X)`` over d_QK = 1, 2, 4, …, for both logit scalings, several W_Q/W_K
  initialization scales, several β and several seeds (one tidy table);
* :func:`attention_regimes` / :func:`attention_maps` — what the attention matrix ``A`` itself
  looks like (row entropy, largest weight, whether queries agree on a key; one sample's ``A``);
* :func:`z_lower_bound` — a rigorous lower bound on σ_min(Z) in terms of β and the centred input
  (in :mod:`resgd.collapse.residual_bound`);
* :func:`resgd.collapse.training.training_comparison` — full-batch GD with and without the
  residual at a small and at a collapsed d_QK, same initialization and step size;
* :func:`preset` / :func:`reproduce` — the sizes (quick or full, from
  :func:`resgd.pipeline.presets.collapse`) and every figure without Jupyter.

Two notions of "the attention output" are reported (column ``scope``):

``"per_sample"``
    the n×d matrix ``Attn(X_p)`` of each sample; the summary over samples is the **median**
    (companion's choice). Rank collapse in the sense of the paper happens here: uniform attention
    makes ``Attn(X_p) = 1 v_pᵀ`` with ``v_p = W_Vᵀ mean_i(x_{p,i})``, exactly rank 1.
``"stacked"``
    the (N·n)×d matrix ``[Attn(X_1); …; Attn(X_N)]`` that :mod:`resgd.core.conditioning` and the trainer
    use. Under uniform attention it is ``[1 v_1ᵀ; …; 1 v_Nᵀ]``: rank ≤ min(N, d), *not* 1, because
    each sample collapses onto its own direction ``v_p``.

σ_min of a matrix with d columns means ``min_{‖u‖=1} ‖M u‖`` (the d-th singular value, 0 when the
matrix has fewer than d rows); :class:`resgd.core.conditioning.Spectrum` agrees whenever rows ≥ d, which
holds for every default here (n = 16 tokens, d = 8 features).
"""


from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..core.conditioning import spectrum, stack
from ..core.model import LOGIT_SCALES, ModelConfig, forward, init_params
from ..pipeline.presets import DQK_GRID, INPUT_D, INPUT_N, INPUT_SEED, INPUT_TOKENS, QK_SCALES
from ..pipeline.presets import collapse as preset
from ..pipeline.reproduce import Outputs, reproduce_part
from .residual_bound import (  # noqa: F401 - part of this module's interface (tests, notebooks)
    ZBound, center_tokens, column_sigma_min, per_sample_bounds, spectrum_summaries, z_lower_bound,
)
from .attention_stats import attention_statistics, predicted_logit_std, random_argmax_agreement  # noqa: F401
from ..infra.threads import torch_threads
from .inputs import sweep_input
from .training import training_numbers, training_tables
from ..validation import ConfigError, check_choice

MATRICES = ("Attn", "Z")
SCOPES = ("per_sample", "stacked")
METRICS = ("sigma_min", "sigma_max", "rank1_distance", "stable_rank")
SWEEP_COLUMNS = (
    "d_qk", "logit_scale", "qk_scale", "beta", "seed", "matrix", "scope",
    *METRICS, "bound_weyl", "bound_centered", "bound",
)


# --------------------------------------------------------------------------------------------
# The d_QK sweep
# --------------------------------------------------------------------------------------------

def _check_list(name: str, values: Iterable) -> tuple:
    values = tuple(values)
    if not values:
        raise ConfigError(f"{name}: expected at least one value")
    return values


def _attention_trace(X: torch.Tensor, d: int, d_qk: int, logit_scale: str, qk_scale: float, seed: int):
    cfg = ModelConfig(d=d, d_qk=int(d_qk), m=d, logit_scale=logit_scale, qk_scale=float(qk_scale))
    params = init_params(cfg, seed)
    with torch.no_grad():
        return forward(params, cfg, X, return_trace=True).layers[0]


def dqk_sweep(
    d_qks: Sequence[int] = DQK_GRID,
    logit_scales: Sequence[str] = LOGIT_SCALES,
    qk_scales: Sequence[float] = QK_SCALES,
    betas: Sequence[float] = (0.0, 0.5, 1.0),
    seeds: Sequence[int] = (0, 1, 2),
    *,
    X: torch.Tensor | None = None,
    N: int = INPUT_N,
    n: int = INPUT_TOKENS,
    d: int = INPUT_D,
    input_seed: int = INPUT_SEED,
    threads: int | None = 1,
) -> pd.DataFrame:
    """Conditioning of ``Attn(X)`` and ``Z = βX + Attn(X)`` over d_QK, scalings, init scales, β, seeds.

    One row per d_qk × logit_scale × qk_scale × β × seed × matrix ∈ {Attn, Z} × scope ∈
    {per_sample, stacked}; columns :data:`SWEEP_COLUMNS`. ``Attn`` rows repeat for every β (Attn
    does not depend on β: the forward pass runs once per d_qk × logit_scale × qk_scale × seed).
    ``Z`` rows carry :func:`z_lower_bound` (per-sample rows: the median over samples of the
    per-sample bound, which stays below the median of the measured σ_min); ``Attn`` rows have NaN.

    Weights come from :func:`resgd.core.model.init_params` (seeded, the trainer's initialization), so
    the same ``seed`` gives the same W_Q, W_K for both logit scalings. ``X`` defaults to
    :func:`make_input` ``(N, n, d, input_seed)``.
    """
    d_qks = _check_list("d_qks", d_qks)
    logit_scales = _check_list("logit_scales", logit_scales)
    qk_scales = _check_list("qk_scales", qk_scales)
    betas = _check_list("betas", betas)
    seeds = _check_list("seeds", seeds)
    for scale in logit_scales:
        check_choice("logit_scales", scale, LOGIT_SCALES)
    X = sweep_input(X, N, n, d, input_seed)
    d = X.shape[-1]
    with torch_threads(threads):
        rows = _sweep_rows(X, d, d_qks, logit_scales, qk_scales, betas, seeds)
    return pd.DataFrame(rows, columns=list(SWEEP_COLUMNS))


def _sweep_rows(X, d, d_qks, logit_scales, qk_scales, betas, seeds) -> list[dict]:
    rows: list[dict] = []
    for d_qk in d_qks:
        for logit_scale in logit_scales:
            for qk_scale in qk_scales:
                for seed in seeds:
                    trace = _attention_trace(X, d, d_qk, logit_scale, qk_scale, seed)
                    attn = trace.Attn.to(torch.float64)
                    key = {"d_qk": int(d_qk), "logit_scale": logit_scale, "qk_scale": float(qk_scale), "seed": int(seed)}
                    attn_per = spectrum_summaries(torch.linalg.svdvals(attn).numpy())
                    attn_stacked = spectrum(attn).summary()
                    for beta in betas:
                        beta = float(beta)
                        Z = beta * X + attn
                        z_per = spectrum_summaries(torch.linalg.svdvals(Z).numpy())
                        z_stacked = spectrum(Z).summary()
                        bound_per = per_sample_bounds(X, attn, beta)
                        bound_stacked = z_lower_bound(X, attn, beta).as_dict()
                        nan_bounds = dict.fromkeys(("bound_weyl", "bound_centered", "bound"), math.nan)
                        base = {**key, "beta": beta}
                        rows.append({**base, "matrix": "Attn", "scope": "per_sample", **{m: float(np.median(attn_per[m])) for m in METRICS}, **nan_bounds})
                        rows.append({**base, "matrix": "Attn", "scope": "stacked", **{m: attn_stacked[m] for m in METRICS}, **nan_bounds})
                        rows.append({**base, "matrix": "Z", "scope": "per_sample", **{m: float(np.median(z_per[m])) for m in METRICS},
                                     **{b: float(np.median(v)) for b, v in bound_per.items()}})
                        rows.append({**base, "matrix": "Z", "scope": "stacked", **{m: z_stacked[m] for m in METRICS}, **bound_stacked})
    return rows


def input_spectra(X: torch.Tensor | None = None, *, N: int = INPUT_N, n: int = INPUT_TOKENS, d: int = INPUT_D, input_seed: int = INPUT_SEED) -> pd.DataFrame:
    """σ_min of the input and of the centred input, per sample (median) and stacked: the bound's ingredients."""
    X = sweep_input(X, N, n, d, input_seed)
    rows = []
    for name, M in (("X", X), ("PX", center_tokens(X))):
        per = torch.linalg.svdvals(M).numpy()[:, -1] if M.shape[1] >= M.shape[2] else np.zeros(M.shape[0])
        rows.append({"matrix": name, "scope": "per_sample", "sigma_min": float(np.median(per))})
        rows.append({"matrix": name, "scope": "stacked", "sigma_min": column_sigma_min(stack(M, None))})
    return pd.DataFrame(rows)


def bound_table(sweep: pd.DataFrame, betas: Sequence[float] = (0.5, 1.0)) -> pd.DataFrame:
    """Long table for the bound figure: measured σ_min(Z) next to the Weyl and the centred bound.

    Columns: d_qk, logit_scale, qk_scale, beta, seed, scope, quantity, value; ``quantity`` ∈
    {"measured σ_min(Z)", "Weyl bound", "centred bound"} (bounds clipped at 0, where they say nothing).
    """
    z = sweep[(sweep["matrix"] == "Z") & sweep["beta"].isin([float(b) for b in betas])]
    keys = ["d_qk", "logit_scale", "qk_scale", "beta", "seed", "scope"]
    long = z.melt(id_vars=keys, value_vars=["sigma_min", "bound_weyl", "bound_centered"], var_name="quantity", value_name="value")
    long["quantity"] = long["quantity"].map({"sigma_min": "measured σ_min(Z)", "bound_weyl": "Weyl bound", "bound_centered": "centred bound"})
    long["value"] = long["value"].clip(lower=0.0)
    return long.reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# The attention matrix itself
# --------------------------------------------------------------------------------------------

def _logits(trace_X: torch.Tensor, d: int, d_qk: int, logit_scale: str, qk_scale: float, seed: int) -> torch.Tensor:
    from ..core.model import attention_logits

    cfg = ModelConfig(d=d, d_qk=int(d_qk), m=d, logit_scale=logit_scale, qk_scale=float(qk_scale))
    params = init_params(cfg, seed)
    return attention_logits(trace_X, params["W_Q.0"], params["W_K.0"], cfg.logit_divisor)


def attention_regimes(
    d_qks: Sequence[int] = DQK_GRID,
    logit_scales: Sequence[str] = LOGIT_SCALES,
    qk_scales: Sequence[float] = QK_SCALES,
    seeds: Sequence[int] = (0, 1, 2),
    *,
    X: torch.Tensor | None = None,
    N: int = INPUT_N,
    n: int = INPUT_TOKENS,
    d: int = INPUT_D,
    input_seed: int = INPUT_SEED,
    threads: int | None = 1,
) -> pd.DataFrame:
    """:func:`attention_statistics` for every d_qk × logit_scale × qk_scale × seed (one row each)."""
    X = sweep_input(X, N, n, d, input_seed)
    d = X.shape[-1]
    rows = []
    for d_qk in d_qks:
        for logit_scale in logit_scales:
            check_choice("logit_scales", logit_scale, LOGIT_SCALES)
            for qk_scale in qk_scales:
                for seed in seeds:
                    with torch.no_grad(), torch_threads(threads):
                        logits = _logits(X, d, d_qk, logit_scale, qk_scale, seed)
                        stats = attention_statistics(torch.softmax(logits, dim=-1), logits)
                    rows.append({"d_qk": int(d_qk), "logit_scale": logit_scale, "qk_scale": float(qk_scale), "seed": int(seed), **stats})
    return pd.DataFrame(rows)


def attention_maps(
    d_qks: Sequence[int] = (4, 16384),
    logit_scales: Sequence[str] = LOGIT_SCALES,
    qk_scales: Sequence[float] = QK_SCALES,
    seed: int = 0,
    sample: int = 0,
    *,
    X: torch.Tensor | None = None,
    N: int = INPUT_N,
    n: int = INPUT_TOKENS,
    d: int = INPUT_D,
    input_seed: int = INPUT_SEED,
) -> pd.DataFrame:
    """One sample's attention matrix for each d_qk × logit_scale × qk_scale, long format.

    Columns: d_qk, logit_scale, qk_scale, query, key, prob.
    """
    X = sweep_input(X, N, n, d, input_seed)
    if not 0 <= sample < X.shape[0]:
        raise ConfigError(f"attention_maps: sample must be in [0, {X.shape[0]}), got {sample}")
    d = X.shape[-1]
    frames = []
    for d_qk in d_qks:
        for logit_scale in logit_scales:
            for qk_scale in qk_scales:
                with torch.no_grad():
                    A = torch.softmax(_logits(X[sample : sample + 1], d, d_qk, logit_scale, qk_scale, seed), dim=-1)[0]
                q, k = np.meshgrid(np.arange(A.shape[0]), np.arange(A.shape[1]), indexing="ij")
                frames.append(pd.DataFrame({"d_qk": int(d_qk), "logit_scale": logit_scale, "qk_scale": float(qk_scale),
                                            "query": q.ravel(), "key": k.ravel(), "prob": A.numpy().ravel()}))
    return pd.concat(frames, ignore_index=True)


# --------------------------------------------------------------------------------------------
# Numbers for the prose, and everything at once
# --------------------------------------------------------------------------------------------

def largest_dqk_sigma_min(sweep: pd.DataFrame, scope: str = "stacked") -> pd.DataFrame:
    """Median over seeds of σ_min at the largest d_qk, for Attn and for Z at each β (a small table)."""
    check_choice("scope", scope, SCOPES)
    top = sweep[(sweep["d_qk"] == sweep["d_qk"].max()) & (sweep["scope"] == scope)]
    top = top[(top["matrix"] == "Z") | (top["beta"] == top["beta"].min())]
    table = top.groupby(["logit_scale", "qk_scale", "matrix", "beta"], as_index=False)["sigma_min"].median()
    table.loc[table["matrix"] == "Attn", "beta"] = math.nan
    return table


def summary_numbers(
    sweep: pd.DataFrame,
    regimes: pd.DataFrame,
    training: pd.DataFrame | None = None,
    *,
    d_small: int = 4,
    d_reference: int = 16,
    inputs: pd.DataFrame | None = None,
    floor: float | None = None,
) -> dict[str, float]:
    """The numbers the notebook glues (names are glue keys without the ``rc-`` prefix).

    σ_min at the largest d_qk (qk_scale = the smallest in the sweep, median over seeds) per scope,
    scaling, matrix and β, with the centred bound; distance to rank 1 and attention statistics at
    ``d_small``, at ``d_reference`` (the experiment chapters' d_QK; keys ``r1-*-ref``) and at the
    largest d_qk; σ_min of X and of the centred PX (from
    :func:`input_spectra`); training losses (median over seeds) and the collapse floor.
    """
    out: dict[str, float] = {}
    qk = float(sweep["qk_scale"].min())
    d_max = int(sweep["d_qk"].max())
    out["dqk-max"] = d_max
    for scope in SCOPES:
        table = largest_dqk_sigma_min(sweep, scope)
        table = table[table["qk_scale"] == qk]
        for row in table.itertuples():
            tag = "attn" if row.matrix == "Attn" else f"z-b{row.beta:g}".replace(".", "")
            out[f"smin-{scope.replace('_', '')}-{row.logit_scale}-{tag}"] = float(row.sigma_min)
        top = sweep[(sweep["d_qk"] == d_max) & (sweep["scope"] == scope) & (sweep["matrix"] == "Z") & (sweep["qk_scale"] == qk)]
        for (logit_scale, beta), group in top.groupby(["logit_scale", "beta"]):
            out[f"bound-{scope.replace('_', '')}-{logit_scale}-b{beta:g}".replace(".", "")] = float(group["bound"].median())
    per = sweep[(sweep["scope"] == "per_sample") & (sweep["matrix"] == "Attn") & (sweep["qk_scale"] == qk)]
    for logit_scale in LOGIT_SCALES:
        sub = per[per["logit_scale"] == logit_scale]
        for label, d_qk in (("small", d_small), ("max", sub["d_qk"].max()), ("ref", d_reference)):
            if (sub["d_qk"] == d_qk).any():
                out[f"r1-{logit_scale}-{label}"] = float(sub[sub["d_qk"] == d_qk]["rank1_distance"].median())
    for logit_scale in LOGIT_SCALES:
        for q in sorted(regimes["qk_scale"].unique()):
            for label, d_qk in (("small", d_small), ("max", int(regimes["d_qk"].max()))):
                sub = regimes[(regimes["logit_scale"] == logit_scale) & (regimes["qk_scale"] == q) & (regimes["d_qk"] == d_qk)]
                for stat in ("entropy", "max_prob", "argmax_agreement", "logit_std"):
                    out[f"{stat.replace('_', '')}-{logit_scale}-q{q:g}-{label}"] = float(sub[stat].median())
                out[f"logitstd-pred-{logit_scale}-q{q:g}-max"] = predicted_logit_std(int(regimes["d_qk"].max()), logit_scale, q)
    d_min = int(regimes["d_qk"].min())
    out["dqk-min"] = d_min
    out["argmaxagreement-dmin"] = float(regimes[regimes["d_qk"] == d_min]["argmax_agreement"].median())
    if inputs is not None:
        for row in inputs.itertuples():
            out[f"smin{row.matrix}-{row.scope.replace('_', '')}"] = float(row.sigma_min)
    if floor is not None:
        out["floor"] = float(floor)
    if training is not None:
        out.update(training_numbers(training))
    return out


def regime_kwargs(p: dict) -> dict:
    """The arguments of :func:`attention_regimes` from a :func:`preset` (the sweep's, without β)."""
    return {key: value for key, value in p["sweep"].items() if key != "betas"}


def sweep_tables(p: dict) -> dict:
    """The d_QK sweep of a :func:`preset`, the input's spectra and the bound's long table."""
    sweep = dqk_sweep(**p["sweep"])
    return {"sweep": sweep, "bounds": bound_table(sweep),
            "inputs": input_spectra(**{k: p["sweep"][k] for k in ("N", "n", "d", "input_seed")})}


def attention_tables(p: dict) -> dict:
    """The attention statistics over the sweep's grid and one sample's attention maps."""
    return {"regimes": attention_regimes(**regime_kwargs(p)), "maps": attention_maps(**p["maps"])}


def run_all(quick: bool = True) -> dict:
    """Every table of the notebook at the preset sizes (the same three functions the notebook calls),
    with timings in seconds."""
    p = preset(quick)
    results: dict = {"preset": p}
    timings: dict[str, float] = {}
    start = time.perf_counter()
    for name, step in (("sweep", sweep_tables), ("attention", attention_tables), ("training", training_tables)):
        t = time.perf_counter()
        results.update(step(p))
        timings[name] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - start
    return {**results, "timings": timings}


_FIGURE_FILES = {
    "sweep_per_sample": "collapse_sweep_per_sample",
    "sweep_stacked": "collapse_sweep_stacked",
    "attention_maps": "collapse_attention_maps",
    "attention_regimes": "collapse_attention_regimes",
    "bound_per_sample": "collapse_bound_per_sample",
    "bound_stacked": "collapse_bound_stacked",
    "training": "collapse_training",
    "training_interaction": "collapse_training_interaction",
}
FIGURE_KINDS = tuple(_FIGURE_FILES)
"""This study's figures: the one list the notebook and :func:`reproduce` use (every study has
``FIGURE_KINDS``, ``figure_name(kind, …)`` and ``make_figure(results, kind)``)."""
FIGURE_TABLE = {"training_interaction": "training_interaction"}
"""Figures drawn only when their table was computed (the preset names an interaction target)."""


def figure_name(kind: str) -> str:
    """The file name (no suffix) of the figure ``kind``."""
    check_choice("figure kind", kind, FIGURE_KINDS)
    return _FIGURE_FILES[kind]


def make_figure(results: dict, kind: str):
    """The figure ``kind`` of :data:`FIGURE_KINDS` from the tables of :func:`sweep_tables`,
    :func:`attention_tables` and :func:`resgd.collapse.training.training_tables` (merged in ``results``)."""
    from ..plots import collapse as plots

    makers = {
        "sweep_per_sample": lambda r: plots.plot_dqk_sweep(r["sweep"], scope="per_sample"),
        "sweep_stacked": lambda r: plots.plot_dqk_sweep(r["sweep"], scope="stacked"),
        "attention_maps": lambda r: plots.plot_attention_maps(r["maps"]),
        "attention_regimes": lambda r: plots.plot_attention_regimes(r["regimes"]),
        "bound_per_sample": lambda r: plots.plot_bound(r["bounds"], scope="per_sample"),
        "bound_stacked": lambda r: plots.plot_bound(r["bounds"], scope="stacked"),
        "training": lambda r: plots.plot_training(r["training"], floor=r["floor"]),
        "training_interaction": lambda r: plots.plot_training(r["training_interaction"], floor=r["skip_floor_interaction"],
                                                              floor_label="best linear fit from [x_i, mean x, 1]"),
    }
    check_choice("figure kind", kind, FIGURE_KINDS)
    return makers[kind](results)


def outputs(quick: bool = True) -> Outputs:
    """Every figure of ``03_rank_collapse`` at the preset sizes."""
    results = run_all(quick)
    return Outputs(figures={figure_name(kind): make_figure(results, kind) for kind in FIGURE_KINDS
                            if FIGURE_TABLE.get(kind, "sweep") in results})


def reproduce(quick: bool, figures_dir: str | Path | None = None, *, n_jobs: int = 2,
              scheduler: str | None = None) -> dict[str, Path]:
    """Regenerate every figure of ``03_rank_collapse`` without Jupyter; returns name → PNG path
    (and ``name.pdf`` → PDF path).

    Figures go to ``figures_dir`` (else ``$RESGD_FIGURES_DIR``, else ``./figures``), published
    together (:func:`resgd.pipeline.reproduce.reproduce_part`). ``n_jobs`` and ``scheduler`` are
    accepted for the one signature of every study: this part runs no parallel sweep.
    """
    return reproduce_part(lambda: outputs(quick), figures_dir=figures_dir)
