"""The Jena task on its two sources side by side: the real measurements and the synthetic stand-in.

Why: the paper's argument runs through the conditioning of X and of Z = βX + Attn(X), and the real
variables are strongly collinear (T and Tpot, sh and H2OC) where the stand-in's are built from a few
formulas; and a verdict made on the stand-in says nothing about the paper until it is set beside the
same verdict on real data (same rules, same seeds).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from .. import dataset_registry as registry
from ..core.conditioning import attention_spectra
from ..core.model import init_params
from ..data.spec import load_dataset
from ..validation import ConfigError

STANDIN_ARMS = (("beta", "theory c=0.5"),)
"""The stand-in's sensitivity row runs the arms decided at 8 seeds on one layer under the theorem's
protocol: claims (a) and (b) (the depth sweep and ``common`` would double the page's cost)."""


def standin_settings(s):
    """The stand-in's sensitivity row: ``s`` on the synthetic stand-in, at
    :data:`resgd.pipeline.presets.STANDIN_SIZE` (N = 64, T = 300: the quick preset's before quick mode
    became a smoke build), never more than ``s``'s. Its purpose is to show that the rules and the code
    reach a verdict on data of the same schema, not to give the paper's numbers, so it runs small
    (about a sixth of the full row's training work); same seeds, same rules, same protocols."""
    from ..pipeline.presets import STANDIN_SIZE

    standin = registry.dataset(s.dataset).standin
    if not standin:
        raise ConfigError(f"Settings.dataset: {s.dataset!r} has no synthetic stand-in (its record's standin is empty)")
    return replace(s, dataset=standin, N=min(s.N, STANDIN_SIZE["N"]),
                   iterations=min(s.iterations, STANDIN_SIZE["iterations"]))


def conditioning_by_source(s, datasets=None, betas=(1.0, 0.0)) -> pd.DataFrame:
    """σ_min, σ_max and κ of the stacked training input X, of Attn(X) and of Z = βX + Attn(X) at θ⁰
    (single layer, each seed of ``s``; the median over seeds), for each source of the Jena task
    (``datasets``: ``s``'s data set and its stand-in by default)."""
    rows = []
    datasets = (s.dataset, registry.dataset(s.dataset).standin) if datasets is None else datasets
    for dataset in datasets:
        ds = replace(s, dataset=dataset)
        data = load_dataset(ds.spec, "float64")
        for beta in betas:
            per_seed = []
            for seed in ds.seeds:
                cfg = ds.model(beta, 1, seed=seed)
                with torch.no_grad():
                    spectra = attention_spectra(init_params(cfg, seed), cfg, data.X_train, data.mask_train)
                per_seed.append({name: (sp.sigma_min, sp.sigma_max, sp.condition_number) for name, sp in spectra.items()})
            for name in ("X", "Attn", "Z"):
                if name == "X" and beta != betas[0]:
                    continue  # X does not depend on β
                values = np.array([p[name] for p in per_seed])
                rows.append({"source": data.source_label, "matrix": name if name == "X" else f"{name} (β = {beta:g})",
                             "sigma_min": float(np.median(values[:, 0])), "sigma_max": float(np.median(values[:, 1])),
                             "kappa": float(np.median(values[:, 2])), "seeds": len(per_seed)})
    return pd.DataFrame(rows)


def verdict_comparison(real, standin) -> pd.DataFrame:
    """Each verdict the stand-in's arms reach, beside the real data's (claim × protocol): outcome and the
    median of the per-seed statistic that decided it."""
    def table(verdicts):
        return {(v.name, v.protocol): (v.outcome, v.numbers.get("median", np.nan)) for v in verdicts}

    real_v, standin_v = table(real), table(standin)
    rows = [{"claim": name, "protocol": protocol, "real": real_v.get((name, protocol), ("—", np.nan))[0],
             "stand-in": outcome, "median statistic, real": real_v.get((name, protocol), ("—", np.nan))[1],
             "median statistic, stand-in": median, "same verdict": real_v.get((name, protocol), ("",))[0] == outcome}
            for (name, protocol), (outcome, median) in standin_v.items()]
    return pd.DataFrame(rows)


def conditioning_numbers(table: pd.DataFrame) -> dict[str, float]:
    """κ of each matrix of :func:`conditioning_by_source`, keyed ``kappa-<real|standin>-<X|Attn-b1|Z-b0|…>``
    (the page glues them as ``jena-<key>``)."""
    out = {}
    for row in table.itertuples():
        which = "standin" if str(row.source).startswith("SYNTHETIC") else "real"
        name, _, beta = str(row.matrix).partition(" (β = ")
        out[f"kappa-{which}-{name}" + (f"-b{beta.rstrip(')')}" if beta else "")] = float(row.kappa)
    return out
