"""The numerical certificate of Theorem 1′: full GD on all weights over a grid of configurations.

Per configuration: the theorem's quantities at θ⁽⁰⁾, the measured rate, the step-wise bound
check (:func:`resgd.theorem1.quantities.bound_check`) and the hypotheses along the path
(:mod:`resgd.theorem1.path`). The chapter's sweep and the regime map
(:mod:`resgd.theorem1.regime_map`) both run here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace

import numpy as np
import pandas as pd
import torch

from ..core.conditioning import spectrum, stack
from ..core.model import ModelConfig, forward, init_params
from ..core.stats import empirical_rate, spearman
from ..core.trainer import DivergenceError, GDConfig, train_gd, train_stacked
from ..pipeline import stored_tables
from ..infra.threads import torch_threads
from ..validation import ConfigError
from ..words import agree, count_noun
from .path import PATH_COLUMNS, checkpoint, path_summary
from ..core.smoothness import ntk_eigenvalues, smoothness_estimate
from .quantities import bound_check, make_task, row_sigma_min, theorem_alpha

VACUOUS_RATIO = 1e-6
"""A configuration's guarantee is *vacuous* when its bound rate is below this fraction of its measured rate."""
INFORMATIVE_TIGHTNESS = 10.0
"""The bound is *informative* when the median step-wise tightness (actual / guaranteed decrease) is at most this."""


@dataclass(frozen=True)
class SweepConfig:
    """One point of a sweep: the model, the task and the seed (weights and data)."""

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
    qk_rel: float = 1.0

    def model_config(self) -> ModelConfig:
        """``qk_scale = qk_rel·init_scale``, ``v_scale = init_scale``, ``ffn_scale = ffn_rel·init_scale``, ``out_scale`` fixed."""
        s = float(self.init_scale)
        return ModelConfig(d=self.d, d_qk=self.d_qk, m=self.m, beta=float(self.beta), beta_ffn=float(self.beta_ffn),
                           logit_scale=self.logit_scale, qk_scale=self.qk_rel * s, v_scale=s, ffn_scale=self.ffn_rel * s,
                           out_scale=self.out_scale)

    def task(self) -> tuple[torch.Tensor, torch.Tensor]:
        return make_task(self.N, self.n, self.d, self.seed, x_kind=self.x_kind, targets=self.targets,
                         target_scale=self.target_scale)


_SHARED = ("N", "n", "d", "m", "logit_scale", "ffn_rel", "out_scale", "target_scale", "x_kind", "targets")


def sweep_configs(p: dict) -> list[SweepConfig]:
    """The grid β × d_qk × init scale × seed of a :func:`resgd.pipeline.presets.theory` preset."""
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


def task_key(config: SweepConfig) -> SweepConfig:
    """Configurations with one task key share their data and shapes: they differ only in β, β_ffn
    and the init scales, so :func:`run_configs` trains them in one stack."""
    return replace(config, beta=0.0, beta_ffn=1.0, init_scale=1.0, qk_rel=1.0)


def _train_with_checkpoints(params: list, models: list, X, Y, lrs: list[float], iterations: int, checkpoints: int,
                            on_checkpoint) -> list[tuple[pd.DataFrame, object]]:
    """GD for every run in one stack, ``on_checkpoint(run index, params)`` called at ``checkpoints``
    evenly spaced iterations (the last one the end). Returns ``(history, final params or None)``."""
    bounds = sorted({round(iterations * (i + 1) / checkpoints) for i in range(max(checkpoints, 1))} - {0})
    gd = GDConfig(lr=1.0, iterations=iterations, record_every=max(iterations, 1))
    runs = train_stacked(params, models, X, Y, [replace(gd, lr=lr) for lr in lrs], checkpoints=bounds,
                         on_checkpoint=lambda r, _t, theta: on_checkpoint(r, theta))
    return [(run.history, run.params) for run in runs]


def run_configs(configs: Sequence[SweepConfig], iterations: int, *, lr_factor: float = 0.5, alpha_factor: float = 0.25,
                window: tuple[float, float] = (0.5, 1.0), rel_floor: float = 1e-16, checkpoints: int = 3,
                hess_iterations: int = 10, jac_slack: float = 2.0) -> list[dict]:
    """The rows of :func:`rate_sweep` for configurations of one :func:`task_key`, in order.

    Everything but the training is per configuration; the GD runs (each at its own step size
    ``lr_factor / L̂``) train together in one stack (:func:`resgd.core.trainer.train_stacked`),
    whose checkpoint hook tests the hypotheses on the path ``checkpoints`` times (:mod:`resgd.theorem1.path`).
    """
    configs = list(configs)
    if len({task_key(c) for c in configs}) > 1:
        raise ConfigError("run_configs: the configurations must share their task key (sweep.task_key)")
    with torch_threads(1):
        X, Y = configs[0].task()
        before, points = [], []
        for config in configs:
            cfg = config.model_config()
            params = init_params(cfg, config.seed)
            with torch.no_grad():
                layer = forward(params, cfg, X, return_trace=True).layers[0]
            smooth = smoothness_estimate(params, cfg, X, Y)
            before.append((cfg, params, layer, smooth, lr_factor / smooth))
            points.append([checkpoint(params, params, cfg, X, Y, hess_iterations=0) | {"smoothness": smooth}])

        def on_checkpoint(r: int, params) -> None:
            points[r].append(checkpoint(params, before[r][1], before[r][0], X, Y, hess_iterations=hess_iterations))

        trained = _train_with_checkpoints([b[1] for b in before], [b[0] for b in before], X, Y, [b[4] for b in before],
                                         iterations, checkpoints, on_checkpoint)
        return [_sweep_row_of(config, X, *b, history, final, pts, lr_factor=lr_factor, alpha_factor=alpha_factor,
                              window=window, rel_floor=rel_floor, jac_slack=jac_slack)
                for config, b, (history, final), pts in zip(configs, before, trained, points)]


def _sweep_row_of(config: SweepConfig, X: torch.Tensor, cfg: ModelConfig, params, layer, smooth: float, mu: float,
                  history: pd.DataFrame, final, points: list[dict], *, lr_factor: float, alpha_factor: float,
                  window: tuple[float, float], rel_floor: float, jac_slack: float) -> dict:
    """One sweep row from a configuration's weights at t = 0, its step size, its trained run and its checkpoints."""
    sz = spectrum(layer.Z)
    sigma_M_Z0 = row_sigma_min(stack(layer.Z))
    sigma_M_H0 = row_sigma_min(stack(layer.H))
    lam = ntk_eigenvalues(params, cfg, X)
    alpha = theorem_alpha(params, cfg, X, alpha_factor=alpha_factor)
    start, stop = _window(history, window, rel_floor)
    check = bound_check(history, mu, alpha, rel_floor=rel_floor)
    rate = empirical_rate(history, start, stop)
    bound_rate = -math.log1p(-mu * alpha) if mu * alpha < 1 else math.inf
    row = {**asdict(config), "lr_factor": lr_factor,
           "sigma_min_Z0": sz.sigma_min, "sigma_max_Z0": sz.sigma_max, "rate_ratio": sz.rate_ratio,
           "sigma_min_H0": sigma_M_H0, "sigma_max_H0": spectrum(layer.H).sigma_max,
           "A3_at_init": bool(sigma_M_H0 >= 0.5 * cfg.residual_ffn * sigma_M_Z0),
           "ntk_min": float(lam[0]), "ntk_max": float(lam[-1]),
           "ntk_ratio": float(lam[0] / lam[-1]) if lam[-1] > 0 else 0.0,
           "smoothness": smooth, "lr": mu, "alpha": alpha, "bound_rate": bound_rate,
           "lazy_rate": -2 * math.log1p(-mu * sigma_M_H0**2) if mu * sigma_M_H0**2 < 1 else math.inf,
           "empirical_rate": rate, "window_start": start, "window_stop": stop,
           **check,
           "vacuous": bool(bound_rate < VACUOUS_RATIO * rate) if rate > 0 else False,
           "final_loss_ratio": float(history["loss"].iloc[-1] / history["loss"].iloc[0]),
           "diverged": final is None, "iterations": int(history["iteration"].iloc[-1])}
    row.update(path_summary(points, history, mu=mu, alpha=alpha, beta_ffn=cfg.residual_ffn, sigma_M_Z0=sigma_M_Z0,
                            realizable=config.N * config.n <= config.d, jac_slack=jac_slack, diverged=final is None))
    if final is not None:
        with torch.no_grad():
            sT = spectrum(forward(final, cfg, X, return_trace=True).layers[0].Z)
        row["sigma_min_ZT"], row["sigma_max_ZT"] = sT.sigma_min, sT.sigma_max
    else:
        row["sigma_min_ZT"] = row["sigma_max_ZT"] = math.nan
    return row


SWEEP_COLUMNS = (
    [f.name for f in fields(SweepConfig)]
    + ["lr_factor", "sigma_min_Z0", "sigma_max_Z0", "rate_ratio", "sigma_min_H0", "sigma_max_H0", "A3_at_init",
       "ntk_min", "ntk_max", "ntk_ratio", "smoothness", "lr", "alpha", "bound_rate", "lazy_rate", "empirical_rate",
       "window_start", "window_stop", "n_steps", "bound", "fraction_obeyed", "max_violation", "tightness_median",
       "tightness_min", "vacuous", "final_loss_ratio", "diverged", "iterations", *PATH_COLUMNS,
       "sigma_min_ZT", "sigma_max_ZT"]
)


def sweep_chunk(params: dict) -> pd.DataFrame:
    """One stored chunk of :func:`rate_sweep` (:mod:`resgd.pipeline.stored_tables`): the rows of the
    configurations of one task key, from its parameters as the store files them (JSON)."""
    configs = [SweepConfig(**c) for c in params["configs"]]
    kwargs = dict(params["kwargs"], window=tuple(params["kwargs"]["window"]))
    return pd.DataFrame(run_configs(configs, params["iterations"], **kwargs), columns=SWEEP_COLUMNS)


def rate_sweep(configs: Iterable[SweepConfig], *, iterations: int = 300, lr_factor: float = 0.5,
               alpha_factor: float = 0.25, window: tuple[float, float] = (0.5, 1.0), checkpoints: int = 3,
               hess_iterations: int = 10, jac_slack: float = 2.0, n_jobs: int = 1,
               scheduler: str | None = None) -> pd.DataFrame:
    """Full GD on all weights for every configuration; one row each (columns :data:`SWEEP_COLUMNS`).

    Per configuration: the predicted ``rate_ratio = σ_min²(Z⁽⁰⁾)/σ_max²(Z⁽⁰⁾)``, (A3) at θ⁽⁰⁾,
    the tangent-kernel eigenvalues, the step ``lr = lr_factor/L̂``, the theorem's ``alpha`` and
    ``bound_rate = −log(1 − lr·alpha)``, the read-out-only (lazy) prediction
    ``lazy_rate = −2 log(1 − lr·σ_M²(H⁽⁰⁾))``, the ``empirical_rate`` over the window, the
    :func:`bound_check` columns, ``vacuous`` (:data:`VACUOUS_RATIO`), the path checks
    (:data:`resgd.theorem1.path.PATH_COLUMNS`) and the spectrum of Z at the end. Configurations of
    one :func:`task_key` train in one stack, one chunk of the results store (:func:`sweep_chunk`);
    the stacks the store lacks run on the pipeline's sweep engine (``n_jobs`` single-threaded
    workers, or ``scheduler``); rows come back in ``configs`` order.
    """
    configs = list(configs)
    kwargs = {"lr_factor": lr_factor, "alpha_factor": alpha_factor, "window": tuple(window),
              "checkpoints": checkpoints, "hess_iterations": hess_iterations, "jac_slack": jac_slack}
    groups: dict[SweepConfig, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(task_key(c), []).append(i)
    members = list(groups.values())
    params = [{"configs": [asdict(configs[i]) for i in group], "iterations": int(iterations), "kwargs": kwargs}
              for group in members]
    rows: dict[int, dict] = {}
    for group, frame in zip(members, stored_tables.chunks("theorem1/sweep", params, n_jobs=n_jobs, scheduler=scheduler)):
        rows.update(zip(group, frame.to_dict("records")))
    return pd.DataFrame([rows[i] for i in range(len(configs))], columns=SWEEP_COLUMNS)


def sweep_summary(sweep: pd.DataFrame) -> dict:
    """The numbers the notebook quotes: Spearman ρ(predicted, rate) over all configurations and over
    those with a residual (β > 0), the bound-check totals, the vacuous and in-regime counts, and how
    close the attained rate is to the ratio and L̂ to σ_max²(H⁽⁰⁾)."""
    positive = sweep["empirical_rate"] > 0
    residual = sweep["beta"] > 0
    informative = (sweep["fraction_obeyed"] == 1.0) & (sweep["tightness_median"] <= INFORMATIVE_TIGHTNESS)
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
        "n_positive_ratio": int((sweep["rate_ratio"] > 0).sum()),
        "n_A3_at_init": int(sweep["A3_at_init"].sum()),
        "n_vacuous": int(sweep["vacuous"].sum()),
        "n_informative": int(informative.sum()),
        "n_in_regime": int(sweep["in_regime"].sum()),
        "n_A3_path": int(sweep["A3_path"].sum()),
        "n_A4_path": int(sweep["A4_path"].sum()),
        "n_A5_path": int(sweep["A5_path"].sum()),
        "max_distance_over_rho": float((sweep["max_distance"] / sweep["rho"]).max()),
        "median_distance_over_rho": float((sweep["max_distance"] / sweep["rho"]).median()),
        "spearman_residual": spearman(sweep.loc[residual, "rate_ratio"], sweep.loc[residual, "empirical_rate"]),
        "median_rate_over_ratio_residual": float((sweep["empirical_rate"] / sweep["rate_ratio"])[residual].median()),
        "median_smoothness_over_sigma_max_H2": float((sweep["smoothness"] / sweep["sigma_max_H0"] ** 2).median()),
    }



def sweep_phrases(summary: dict) -> dict[str, str]:
    """The counts of :func:`sweep_summary` with the nouns and verbs that agree with them, for the
    page's sentences (a count of 1 must not read "1 configurations are")."""
    return {"configs": count_noun(summary["n_configs"], "configuration"),
            "runs": count_noun(summary["n_configs"], "run"),
            "all-obeyed": count_noun(summary["n_all_obeyed"], "configuration"),
            "vacuous-are": count_noun(summary["n_vacuous"], "configuration is", "configurations are"),
            "in-regime-are": agree(summary["n_in_regime"], "is", "are")}


def certificate_table(sweep: pd.DataFrame) -> pd.DataFrame:
    """Per β: configurations, vacuous ones (counted apart), and over the others: how many obeyed the
    bound at every step, the median tightness, its lazy-regime prediction 2σ_M²(H⁰)/α (= 8σ_M²(H⁰)/(β_f²σ_M²(Z⁰))), and how
    many were in the theorem's regime along their whole path."""
    rows = []
    for beta, g in sweep.groupby("beta"):
        live = g[~g["vacuous"]]
        rows.append({
            "beta": beta, "configs": len(g), "vacuous": int(g["vacuous"].sum()),
            "non_vacuous_obeyed": int((live["fraction_obeyed"] == 1.0).sum()),
            "median_tightness": float(live["tightness_median"].median()) if len(live) else math.nan,
            "lazy_tightness": float((2 * live["sigma_min_H0"] ** 2 / live["alpha"]).median()) if len(live) else math.nan,
            "median_tightness_vacuous": float(g.loc[g["vacuous"], "tightness_median"].median())
            if g["vacuous"].any() else math.nan,
            "in_regime": int(g["in_regime"].sum()),
        })
    return pd.DataFrame(rows)
