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
with explicit constants: it is checked numerically (:mod:`resgd.theorem1.sweep`, its hypotheses along the path
in :mod:`resgd.theorem1.path`, where it stops holding in :mod:`resgd.theorem1.regime_map`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import torch

from ..core.conditioning import spectrum, stack
from ..core.model import ModelConfig, forward, init_params
from ..core.stats import spearman  # noqa: F401 - the robustness tests import it from here
from ..core.trainer import GDConfig, train_stacked
from ..core.loss import loss_from_output
from ..pipeline.presets import theory as preset
from ..pipeline.reproduce import Outputs, reproduce_part
from ..infra.threads import torch_threads
from ..validation import check_choice
from .quantities import bound_check, make_task, readout_gd, step_size, theorem_alpha
from .regime_map import regime_map
from .sweep import SweepConfig, base_config, rate_sweep, sweep_configs, train_config

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
# How σ(Z⁽ᵗ⁾) moves.
# --------------------------------------------------------------------------------------------


def sigma_trajectory(config: SweepConfig, iterations: int, *, lr_factor: float = 0.5, record_every: int = 1,
                     label: str | None = None, alpha_factor: float = 0.25) -> pd.DataFrame:
    """σ_min and σ_max of the stacked Z⁽ᵗ⁾ every ``record_every`` steps of full GD, with the loss.

    The run is one :func:`resgd.core.trainer.train_stacked` call whose checkpoint hook, every
    ``record_every`` steps, computes the spectrum by SVD of the stacked Z and the loss. (The
    trainer's own ``sigma_min_Z`` column comes from the d×d Gram matrix, which is exactly singular
    when N·n < d, as here.) The rows end where the run diverges. Columns: ``scenario``, ``iteration``,
    ``loss``, ``sigma_min_Z``, ``sigma_max_Z``, their ratios to t = 0 (``sigma_min_rel``,
    ``sigma_max_rel``), ``loss_rel``, and the run's ``lr`` and theorem ``alpha``.
    """
    with torch_threads(1):
        cfg = config.model_config()
        X, Y = config.task()
        params = init_params(cfg, config.seed)
        mu = step_size(params, cfg, X, Y, lr_factor=lr_factor)
        alpha = theorem_alpha(params, cfg, X, alpha_factor=alpha_factor)
        rows = []

        def measure(_run: int, t: int, theta) -> None:
            with torch.no_grad():
                trace = forward(theta, cfg, X, return_trace=True)
            sz = spectrum(trace.layers[0].Z)
            loss = float(loss_from_output(trace.Y_hat, Y, None, "sum"))
            rows.append({"iteration": t, "loss": loss, "sigma_min_Z": sz.sigma_min, "sigma_max_Z": sz.sigma_max})

        train_stacked([params], [cfg], X, Y, [GDConfig(lr=mu, iterations=iterations, record_every=max(iterations, 1))],
                      checkpoints=[*range(0, iterations, record_every), iterations], on_checkpoint=measure)
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



def certificate_sweep(p: dict, *, n_jobs: int | None = None, scheduler: str | None = None) -> pd.DataFrame:
    """The chapter's certificate: :func:`resgd.theorem1.sweep.rate_sweep` over the preset's grid, path checks included."""
    return rate_sweep(sweep_configs(p), iterations=p["iterations"], lr_factor=p["lr_factor"],
                      alpha_factor=p["alpha_factor"], window=p["window"], checkpoints=p["checkpoints"],
                      hess_iterations=p["hess_iterations"], n_jobs=p["n_jobs"] if n_jobs is None else n_jobs,
                      scheduler=scheduler)


def compute_all(quick: bool, seed: int = 0, parts: Sequence[str] = ("setup", "theorem1"), *, whole_map: bool = False,
                n_jobs: int | None = None, scheduler: str | None = None) -> dict[str, pd.DataFrame]:
    """Every table behind the figures of ``01_setup`` (part ``"setup"``) and ``02_theorem1`` (``"theorem1"``);
    ``whole_map``: the regime map on its whole grid instead of the book's subset."""
    p = preset(quick)
    jobs = p["n_jobs"] if n_jobs is None else n_jobs
    tables: dict[str, pd.DataFrame] = {}
    if "setup" in parts:
        tables["setup"] = setup_runs(p, seed)
    if "theorem1" in parts:
        tables["special"] = special_case(p, seed)
        tables["sweep"] = certificate_sweep(p, n_jobs=jobs, scheduler=scheduler)
        tables["trajectories"] = sigma_trajectories(p, seed)
        tables["regime"] = regime_map(p, whole=whole_map, n_jobs=jobs, scheduler=scheduler)
    return tables


_FIGURE_FILES = {
    "setup": "01_setup_loss",
    "special": "02_theorem1_special_case",
    "rate": "02_theorem1_rate_vs_prediction",
    "bound": "02_theorem1_bound_check",
    "distance": "02_theorem1_distance_vs_radius",
    "regime": "02_theorem1_regime_map",
    "trajectories": "02_theorem1_sigma_trajectories",
}
FIGURE_KINDS = tuple(_FIGURE_FILES)
"""This study's figures: the one list the notebooks and :func:`reproduce` use (every study has
``FIGURE_KINDS``, ``figure_name(kind, …)`` and ``make_figure(results, kind)``)."""
FIGURE_TABLES = {"setup": "setup", "special": "special", "rate": "sweep", "bound": "sweep", "distance": "sweep",
                 "regime": "regime", "trajectories": "trajectories"}
"""Figure kind → the table of :func:`compute_all` it is drawn from."""
TABLE_CSV = {"sweep": "02_theorem1_sweep.csv", "regime": "02_theorem1_regime_map.csv"}


def figure_name(kind: str) -> str:
    """The file name (no suffix) of the figure ``kind``."""
    check_choice("figure kind", kind, FIGURE_KINDS)
    return _FIGURE_FILES[kind]


def make_figure(table: pd.DataFrame, kind: str):
    """The figure ``kind`` of :data:`FIGURE_KINDS`, drawn from its table (:data:`FIGURE_TABLES`)."""
    from ..plots import theorem1 as tplots

    check_choice("figure kind", kind, FIGURE_KINDS)
    makers = {"setup": tplots.loss_curves, "special": tplots.special_case, "rate": tplots.rate_vs_prediction,
              "bound": tplots.bound_check, "distance": tplots.distance_vs_radius, "regime": tplots.regime_map,
              "trajectories": tplots.sigma_trajectories}
    return makers[kind](table)


def outputs(quick: bool, seed: int = 0, parts: Sequence[str] = ("setup", "theorem1"), *, n_jobs: int | None = None,
            scheduler: str | None = None) -> Outputs:
    """The figures of ``parts`` and, with ``theorem1``, the sweep and regime-map tables (CSV beside the figures).
    The regime map covers its whole grid here (the book shows a subset in full mode)."""
    tables = compute_all(quick, seed, parts, whole_map=True, n_jobs=n_jobs, scheduler=scheduler)
    figure_files = {name: (name, lambda tmp, t=tables[key]: t.to_csv(tmp, index=False))
                    for key, name in TABLE_CSV.items() if key in tables}
    figures = {figure_name(kind): make_figure(tables[table], kind)
               for kind, table in FIGURE_TABLES.items() if table in tables}
    return Outputs(figures=figures, figure_files=figure_files)


def _reproduce(parts: Sequence[str], quick: bool, figures_dir, n_jobs: int, scheduler: str | None) -> dict[str, Path]:
    return reproduce_part(lambda: outputs(quick, 0, parts, n_jobs=n_jobs, scheduler=scheduler), figures_dir=figures_dir)


def reproduce_setup(quick: bool, figures_dir: str | os.PathLike | None = None, *, n_jobs: int = 2,
                    scheduler: str | None = None) -> dict[str, Path]:
    """The figure of ``01_setup`` without Jupyter; returns ``{file name: path}`` (PNG under the name, PDF
    under ``name.pdf``) in ``figures_dir`` (else ``$RESGD_FIGURES_DIR`` else ``./figures``)."""
    return _reproduce(("setup",), quick, figures_dir, n_jobs, scheduler)


def reproduce_theorem1(quick: bool, figures_dir: str | os.PathLike | None = None, *, n_jobs: int = 2,
                       scheduler: str | None = None) -> dict[str, Path]:
    """The figures of ``02_theorem1`` and its two tables (CSV), the regime map on its whole grid."""
    return _reproduce(("theorem1",), quick, figures_dir, n_jobs, scheduler)
