"""The paper's empirical section (its Figs. 3a and 3b, on Jena climate and SST-2, and the single-layer
comparison with and without the residual) as library code.

What the paper reports: single-layer models with the residual connection (β = 1) train faster
than without (β = 0); a larger residual weight β converges faster; deeper models (L = 2, 6, 10)
with residuals reach a lower training loss faster than without. This module runs that study and
is the one module pages 4 and 5 import (``from resgd.experiments import study as ex``):

* :class:`Settings` / :func:`settings` — one data set's settings, from
  :func:`resgd.pipeline.presets.experiments` (``preset`` here; the one place the notebooks and
  ``python -m resgd reproduce`` read them from), with overrides;
* :func:`choose_lr` — the step-size rule; :func:`beta_configs`, :func:`depth_configs` — the sweeps;
* :func:`run_experiments` — the whole section for one data set; :func:`reproduce` — its figures,
  tables and claim verdicts without Jupyter, published together.

What the pages read from the runs lives beside it, one idea per module, and is re-exported here
as the pages' API: :mod:`resgd.experiments.results` (:class:`ExperimentResults`),
:mod:`resgd.experiments.figures` (``FIGURE_KINDS``, ``figure_name``, ``make_figure``: which figure
from which table), :mod:`resgd.experiments.page_tables` (``twins_table``, ``step_table``, …),
:mod:`resgd.experiments.page_numbers` (the numbers glued into the pages),
:mod:`resgd.experiments.result_files` (``write_outputs``) and :mod:`resgd.experiments.choices`
(``choices_table``: the companion's choices — the paper's text was not available to us — each
with the parameter that holds it).

Runs, their cache and the sweep engine are in :mod:`resgd.experiments.runs` and :mod:`resgd.pipeline`; the
data in :mod:`resgd.data.spec`; the tables in :mod:`resgd.experiments.tables`. Their names are
re-exported here (``RunConfig``, ``run``, ``sweep``, ``DatasetSpec``, ``load_dataset``, …).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from ..data.spec import (  # noqa: F401 - re-exported: the experiments' public names
    DTYPES, DatasetSpec, data_fingerprint, load_dataset,
)
from .tables import (  # noqa: F401
    RUN_KEYS, SPIKE_FACTOR, conditioning_curves, loss_curves, per_run_table, summary_parts, summary_table,
)
from ..pipeline.cache import RESULTS_ENV, resolve_cache_dir, resolve_results_dir  # noqa: F401
from ..pipeline.presets import experiments as preset  # noqa: F401 - re-exported: the pages name study.preset
from ..pipeline.reproduce import Outputs, reproduce_part
from .run_config import RunConfig, config_key  # noqa: F401 - re-exported: the map builds runs through the study
from .runs import CONFIG_COLUMNS, run, runs_table, sweep, sweep_frames  # noqa: F401
from .design import arms
from .step_size import (  # noqa: F401
    PROTOCOLS, THEORY_FACTORS, THEORY_PRIMARY, check_protocol, choose_lr, probe_stable, theory_lr, warm_smoothness,
)
from .. import dataset_registry as registry
from ..validation import ConfigError, check_choice  # noqa: F401 - re-exported
from .experiment_settings import (  # noqa: F401 - re-exported: the study's public names
    LIVING_SCALES, STARTS, TWIN_INITS, TWIN_NAMES, Settings, branch_scales, settings,
)
# The pages' API (pages 4 and 5 call these as ``ex.<name>``), each defined in the module named.
from .choices import choices_table  # noqa: F401
from .figures import FIGURE_KINDS, figure_kinds, figure_name, make_figure  # noqa: F401 - FIGURE_KINDS re-exported
from .page_numbers import page_numbers  # noqa: F401
from .page_tables import (  # noqa: F401
    beta_init_table, horizon_table, regime_table, replay_table, step_table, twins_table,
)
from .result_files import result_files, write_outputs  # noqa: F401
from .results import ExperimentResults


def run_experiments(
    s: Settings,
    *,
    n_jobs: int = 2,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = False,
    scheduler: str | None = None,
    only: Sequence[tuple[str, str]] | None = None,
) -> ExperimentResults:
    """Every arm of the pre-registered design (:func:`resgd.experiments.design.arms`) for one data
    set: the step sizes of each protocol, then the runs, all cached. Tags each run with its
    arm (``experiment``, ``protocol``, ``c``, ``twin_init``, ``beta_ffn``). ``only``: the matched arms to run,
    as (experiment, protocol label) pairs (the Jena stand-in's sensitivity row runs the L = 1 arms of
    the theorem's protocol only)."""
    data = load_dataset(s.spec, s.dtype)
    engine = {"n_jobs": n_jobs, "cache_dir": cache_dir, "progress": progress, "scheduler": scheduler}
    sizes = {"beta": s, "factorial": s, "depth": s.depth()}
    chosen = [arm for arm in arms(s.betas, s.depths)
              if only is None or ((arm.experiment, arm.label) in set(only) and arm.twin_init == "matched")]
    common = {}
    probes = []
    for experiment, depths in (("beta", [1]), ("depth", list(s.depths))):
        if any(arm.protocol == "common" and (arm.experiment == "depth") == (experiment == "depth") for arm in chosen):
            common[experiment], table = choose_lr(sizes[experiment], depths, **engine)
            probes.append(table.assign(comparison=experiment))
    frames, steps = [], []
    warm_smoothness([(replace(sizes[arm.experiment], twin_init=arm.twin_init), beta, L, beta_ffn, seed)
                     for arm in chosen if arm.protocol == "theory"
                     for beta, beta_ffn, L in arm.points for seed in arm.seeds(sizes[arm.experiment])],
                    n_jobs=n_jobs, cache_dir=cache_dir, scheduler=scheduler)
    planned = []
    for arm in chosen:
        arm_s = replace(sizes[arm.experiment], twin_init=arm.twin_init)
        seeds = arm.seeds(arm_s)
        configs = []
        for beta, beta_ffn, L in arm.points:
            for seed in seeds:
                lr = (common["depth" if arm.experiment == "depth" else "beta"] if arm.protocol == "common"
                      else theory_lr(arm_s, beta, L, arm.c, seed=seed, beta_ffn=beta_ffn, cache_dir=cache_dir))
                steps.append({"experiment": arm.experiment, "protocol": arm.label, "twin_init": arm.twin_init,
                              "beta": beta, "beta_ffn": beta if beta_ffn is None else beta_ffn, "n_layers": L,
                              "seed": seed, "lr": lr})
                configs.append(arm_s.config(beta, L, seed, lr, beta_ffn=beta_ffn))
        planned.append((arm, configs))
    # every arm's runs in one sweep: one worker pool, the longest runs first, no idle tail per arm
    frames_by_key = sweep_frames([c for _, configs in planned for c in configs],
                                 desc=f"{s.dataset}: {len(planned)} arms", **engine)
    for arm, configs in planned:
        runs = runs_table(frames_by_key, configs)
        frames.append(runs.assign(experiment=arm.experiment, protocol=arm.label,
                                  c=math.nan if arm.c is None else arm.c, twin_init=arm.twin_init,
                                  beta_ffn=runs["key"].map({config_key(c): c.model.residual_ffn for c in configs})))
    description = data.describe()
    summary = {k: description[k] for k in ("name", "source_label", "is_standin", "n_train", "n_test", "n_tokens", "d")}
    runs = pd.concat(frames, ignore_index=True)
    speed = None
    if s.v6_seeds and only is None:
        from .speed import run_speed

        common = runs[(runs["protocol"] == "common") & (runs["twin_init"] == "matched")]
        speed = run_speed(s, common=common, **engine)
    return ExperimentResults(settings=s, data=summary, lr=pd.DataFrame(steps),
                             probes=pd.concat(probes, ignore_index=True) if probes else pd.DataFrame(),
                             runs=runs, speed=speed)



def outputs(dataset: str, quick: bool, *, n_jobs: int = 2, progress: bool = True, scheduler: str | None = None,
            **overrides: Any) -> Outputs:
    """Everything the data set's notebook makes: its figures, tables and verdicts."""
    results = run_experiments(settings(dataset, quick, **overrides), n_jobs=n_jobs, progress=progress, scheduler=scheduler)
    figures = {figure_name(kind, dataset): make_figure(results, kind) for kind in figure_kinds(results)}
    return Outputs(figures=figures, result_files=result_files(results))


def reproduce(
    dataset: str,
    quick: bool,
    directory: str | os.PathLike | None = None,
    *,
    n_jobs: int = 2,
    progress: bool = True,
    scheduler: str | None = None,
    **overrides: Any,
) -> dict[str, Path]:
    """Everything the data set's notebook makes, without Jupyter: figures (into ``directory``,
    else ``$RESGD_FIGURES_DIR``, else ``./figures``), tables and verdicts (into the results
    folder), all published together once every output folder was found writable."""
    check_choice("dataset", dataset, registry.names())
    return reproduce_part(
        lambda: outputs(dataset, quick, n_jobs=n_jobs, progress=progress, scheduler=scheduler, **overrides),
        figures_dir=directory, writes_results=True,
    )


def reproducer(dataset: str):
    """The study contract's entry point of one data set's page (``python -m resgd reproduce --only
    <dataset>``): ``(quick, figures_dir, *, n_jobs, scheduler) -> {name: path}``."""
    check_choice("dataset", dataset, registry.names())

    def reproduce_page(quick: bool, figures_dir: str | os.PathLike | None = None, *, n_jobs: int = 2,
                       scheduler: str | None = None) -> dict[str, Path]:
        return reproduce(dataset, quick, figures_dir, n_jobs=n_jobs, scheduler=scheduler)

    reproduce_page.__name__ = reproduce_page.__qualname__ = f"reproduce_{dataset}"
    reproduce_page.__doc__ = f"{registry.dataset(dataset).title}: the page's figures, tables and verdicts (the study contract)."
    return reproduce_page
