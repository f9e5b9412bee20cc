"""Theorem 1 made checkable: rates, the bound, the exact special case and the sweep.


Everything the theory notebooks (``01_setup``, ``02_theorem1``) compute lives here or in
:mod:`resgd.theorem1.quantities` (the theorem's quantities and its exact special case), so that
:func:`reproduce` regenerates their figures without Jupyter; sizes come from
:func:`resgd.pipeline.presets.theory` (``preset`` here).

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
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..core.conditioning import spectrum, stack
from ..core.model import ModelConfig, forward, init_params
from ..pipeline.presets import theory as preset
from ..pipeline.reproduce import Outputs, reproduce_part
from ..pipeline.sweep import Group, execute
from ..core.stacked import train_stacked
from ..core.stats import empirical_rate, spearman
from .quantities import (  # noqa: F401 - part of this module's interface (tests, notebooks)
    TARGETS, X_KINDS, bound_check, hessian_norm, jacobian, make_task, ntk_eigenvalues, readout_gd, readout_summary,
    row_sigma_min, shapes_table, smoothness_estimate, step_size, theorem_alpha,
)
from ..threads import torch_threads
from ..validation import ConfigError
from ..core.train import DivergenceError, GDConfig, loss_from_output, train_gd

# --------------------------------------------------------------------------------------------
# The exactly solvable special case.
# --------------------------------------------------------------------------------------------


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
    return run_configs([config], iterations, lr_factor=lr_factor, alpha_factor=alpha_factor, window=window,
                       rel_floor=rel_floor)[0]


def task_key(config: SweepConfig) -> SweepConfig:
    """Configurations with one task key share their data and shapes: they differ only in β, β_ffn
    and the init scale, so :func:`run_configs` trains them in one stack."""
    return replace(config, beta=0.0, beta_ffn=1.0, init_scale=1.0)


def run_configs(configs: Sequence[SweepConfig], iterations: int, *, lr_factor: float = 0.5, alpha_factor: float = 0.25,
                window: tuple[float, float] = (0.5, 1.0), rel_floor: float = 1e-16) -> list[dict]:
    """The rows of :func:`rate_sweep` for configurations of one :func:`task_key`, in order.

    Everything but the training is per configuration; the GD runs (each at its own step size
    ``lr_factor / L̂``) train together in one stack (:func:`resgd.core.stacked.train_stacked`: each
    run's history is the one :func:`resgd.core.train.train_gd` gives, to rounding; tiny models, where
    one run at a time is mostly per-operation overhead).
    """
    configs = list(configs)
    if len({task_key(c) for c in configs}) > 1:
        raise ConfigError("run_configs: the configurations must share their task key (theory.task_key)")
    with torch_threads(1):
        X, Y = configs[0].task()
        before = []
        for config in configs:
            cfg = config.model_config()
            params = init_params(cfg, config.seed)
            with torch.no_grad():
                layer = forward(params, cfg, X, return_trace=True).layers[0]
            smooth = smoothness_estimate(params, cfg, X, Y)
            before.append((cfg, params, layer, smooth, lr_factor / smooth))
        gd = GDConfig(lr=1.0, iterations=iterations, record_every=max(iterations, 1))
        trained = train_stacked([b[1] for b in before], [b[0] for b in before], X, Y,
                                [replace(gd, lr=b[4]) for b in before])
        return [_sweep_row_of(config, X, *b, run.history, run.params, iterations, alpha_factor=alpha_factor,
                              window=window, rel_floor=rel_floor)
                for config, b, run in zip(configs, before, trained)]


def _sweep_row_of(config: SweepConfig, X: torch.Tensor, cfg: ModelConfig, params, layer, smooth: float, mu: float,
                  history: pd.DataFrame, final, iterations: int, *, alpha_factor: float,
                  window: tuple[float, float], rel_floor: float) -> dict:
    """One sweep row from a configuration's weights at t = 0, its step size and its trained run."""
    sz = spectrum(layer.Z)
    lam = ntk_eigenvalues(params, cfg, X)
    alpha = theorem_alpha(params, cfg, X, alpha_factor=alpha_factor)
    start, stop = _window(history, window, rel_floor)
    check = bound_check(history, mu, alpha, rel_floor=rel_floor)
    row = {**asdict(config),
           "sigma_min_Z0": sz.sigma_min, "sigma_max_Z0": sz.sigma_max, "rate_ratio": sz.rate_ratio,
           "sigma_min_H0": row_sigma_min(stack(layer.H)), "sigma_max_H0": spectrum(layer.H).sigma_max,
           "A3_at_init": bool(row_sigma_min(stack(layer.H)) >= 0.5 * cfg.residual_ffn * row_sigma_min(stack(layer.Z))),
           "ntk_min": float(lam[0]), "ntk_max": float(lam[-1]),
           "ntk_ratio": float(lam[0] / lam[-1]) if lam[-1] > 0 else 0.0,
           "smoothness": smooth, "lr": mu, "alpha": alpha,
           "bound_rate": -math.log1p(-mu * alpha) if mu * alpha < 1 else math.inf,
           "empirical_rate": empirical_rate(history, start, stop), "window_start": start, "window_stop": stop,
           **check,
           "final_loss_ratio": float(history["loss"].iloc[-1] / history["loss"].iloc[0]),
           "diverged": final is None, "iterations": int(history["iteration"].iloc[-1])}
    if final is not None:
        with torch.no_grad():
            ZT = forward(final, cfg, X, return_trace=True).layers[0].Z
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


def _sweep_rows(arg: tuple) -> list[dict]:
    """A grouped sweep task: :func:`run_configs` of the configurations of one task key."""
    configs, iterations, kwargs = arg
    return run_configs(configs, iterations, **kwargs)


def rate_sweep(configs: Iterable[SweepConfig], *, iterations: int = 300, lr_factor: float = 0.5,
               alpha_factor: float = 0.25, window: tuple[float, float] = (0.5, 1.0), n_jobs: int = 1,
               scheduler: str | None = None) -> pd.DataFrame:
    """Full GD on all weights for every configuration; one row each (columns :data:`SWEEP_COLUMNS`).

    Per configuration: the predicted ``rate_ratio = σ_min²(Z⁽⁰⁾)/σ_max²(Z⁽⁰⁾)``, whether assumption
    (A3) holds at θ⁽⁰⁾ (``A3_at_init``: σ_min(H⁽⁰⁾) ≥ ½β_ffn σ_min(Z⁽⁰⁾)), the tangent-kernel
    eigenvalues ``ntk_min``/``ntk_max``, the step
    ``lr = lr_factor/L̂``, the theorem's ``alpha`` and ``bound_rate = −log(1 − lr·alpha)``, the
    ``empirical_rate`` over the window (fractions of the run before Φ reaches round-off), the
    :func:`bound_check` columns and the spectrum of Z at the end. Configurations of one
    :func:`task_key` train in one stack (:func:`run_configs`); the stacks run on the pipeline's
    sweep engine (``n_jobs`` single-threaded workers, or ``scheduler``); rows come back in
    ``configs`` order and do not depend on n_jobs.
    """
    configs = list(configs)
    kwargs = {"lr_factor": lr_factor, "alpha_factor": alpha_factor, "window": tuple(window)}
    groups: dict[SweepConfig, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(task_key(c), []).append(i)
    tasks = [Group(tuple(str(i) for i in members), _sweep_rows, (tuple(configs[i] for i in members), iterations, kwargs))
             for members in groups.values()]
    rows = dict(execute(tasks, n_jobs=n_jobs, scheduler=scheduler))
    return pd.DataFrame([rows[str(i)] for i in range(len(configs))], columns=SWEEP_COLUMNS)


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

    The run is :func:`resgd.core.train.train_gd` in chunks of ``record_every`` steps (same step size, so
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


def compute_all(quick: bool, seed: int = 0, parts: Sequence[str] = ("setup", "theorem1"), *,
                scheduler: str | None = None) -> dict[str, pd.DataFrame]:
    """Every table behind the figures of ``01_setup`` (part ``"setup"``) and ``02_theorem1`` (``"theorem1"``)."""
    p = preset(quick)
    tables: dict[str, pd.DataFrame] = {}
    if "setup" in parts:
        tables["setup"] = setup_runs(p, seed)
    if "theorem1" in parts:
        tables["special"] = special_case(p, seed)
        tables["sweep"] = rate_sweep(sweep_configs(p), iterations=p["iterations"], lr_factor=p["lr_factor"],
                                     alpha_factor=p["alpha_factor"], window=p["window"], n_jobs=p["n_jobs"],
                                     scheduler=scheduler)
        tables["trajectories"] = sigma_trajectories(p, seed)
    return tables


FIGURE_NAMES = {
    "setup": "01_setup_loss",
    "special": "02_theorem1_special_case",
    "rate": "02_theorem1_rate_vs_prediction",
    "bound": "02_theorem1_bound_check",
    "trajectories": "02_theorem1_sigma_trajectories",
}
SWEEP_CSV = "02_theorem1_sweep.csv"


def make_figures(tables: dict[str, pd.DataFrame]) -> dict:
    """The figures of the two notebooks that ``tables`` allows, by key of :data:`FIGURE_NAMES`."""
    from ..plots import theorem1 as tplots

    makers = {
        "setup": ("setup", tplots.loss_curves),
        "special": ("special", tplots.special_case),
        "rate": ("sweep", tplots.rate_vs_prediction),
        "bound": ("sweep", tplots.bound_check),
        "trajectories": ("trajectories", tplots.sigma_trajectories),
    }
    return {key: make(tables[table]) for key, (table, make) in makers.items() if table in tables}


def outputs(quick: bool, seed: int = 0, parts: Sequence[str] = ("setup", "theorem1"), *,
            scheduler: str | None = None) -> Outputs:
    """The figures of ``parts`` and, with ``theorem1``, the sweep table (CSV beside the figures)."""
    tables = compute_all(quick, seed, parts, scheduler=scheduler)
    figure_files = {}
    if "sweep" in tables:
        figure_files[SWEEP_CSV] = (SWEEP_CSV, lambda tmp: tables["sweep"].to_csv(tmp, index=False))
    figures = {FIGURE_NAMES[key]: fig for key, fig in make_figures(tables).items()}
    return Outputs(figures=figures, figure_files=figure_files)


def reproduce(quick: bool, directory: str | os.PathLike | None = None, seed: int = 0, *,
              parts: Sequence[str] = ("setup", "theorem1"), scheduler: str | None = None) -> dict[str, Path]:
    """Regenerate every figure of ``01_setup`` and ``02_theorem1`` (PNG + PDF) and the sweep table (CSV).

    Returns ``{file name: path}`` (PNG under the figure's name, PDF under ``name.pdf``); files go to
    ``directory`` (else ``$RESGD_FIGURES_DIR`` else ``./figures``), published together
    (:func:`resgd.pipeline.reproduce.reproduce_part`). The same functions as the notebooks, the same
    :func:`preset`.
    """
    return reproduce_part(lambda: outputs(quick, seed, parts, scheduler=scheduler), figures_dir=directory)


def reproduce_setup(quick: bool, directory: str | os.PathLike | None = None, seed: int = 0, *,
                    scheduler: str | None = None) -> dict[str, Path]:
    """Only the figure of ``01_setup`` (for ``python -m resgd reproduce --only setup``)."""
    return reproduce(quick, directory, seed, parts=("setup",), scheduler=scheduler)


def reproduce_theorem1(quick: bool, directory: str | os.PathLike | None = None, seed: int = 0, *,
                       scheduler: str | None = None) -> dict[str, Path]:
    """Only the figures (and sweep CSV) of ``02_theorem1``."""
    return reproduce(quick, directory, seed, parts=("theorem1",), scheduler=scheduler)
