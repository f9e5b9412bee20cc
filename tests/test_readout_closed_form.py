"""The experiment pages' read-out link: the closed form equals GD on the read-out alone for the
pages' models (any depth, per-token and pooled read-out), and its summary states its power."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from resgd.core.model import forward, init_params
from resgd.core.loss import loss_from_output
from resgd.data.spec import DTYPES, load_dataset
from resgd.experiments import readout_closed_form as link
from resgd.experiments.configuration import settings


@pytest.mark.parametrize("dataset, L", [("toy", 1), ("toy", 3), ("toy_cls", 2)])
def test_closed_form_matches_gd_on_the_readout_at_any_depth(dataset, L):
    s = settings(dataset, True)
    config = s.config(1.0 if L == 1 else 0.0, L, 2, 0.05)
    data = load_dataset(config.dataset, config.dtype)
    params = init_params(config.model, config.seed, dtype=DTYPES[config.dtype])
    W = params["W_U"].clone().requires_grad_(True)
    first = None
    for _ in range(9):
        loss = loss_from_output(forward({**params, "W_U": W}, config.model, data.X_train, data.mask_train),
                                data.Y_train, data.mask_train, config.gd.reduction)
        first = float(loss.detach()) if first is None else first
        (grad,) = torch.autograd.grad(loss, W)
        W = (W - config.gd.lr * grad).detach().requires_grad_(True)
    with torch.no_grad():
        final = float(loss_from_output(forward({**params, "W_U": W}, config.model, data.X_train, data.mask_train),
                                       data.Y_train, data.mask_train, config.gd.reduction))
    assert link.readout_relative_loss(config, 9) == pytest.approx(final / first, rel=1e-9)


def test_power_statements():
    assert link.critical_spearman(101) == pytest.approx(0.196)
    assert link.detectable_spearman(100) == pytest.approx(math.tanh(2.8016 * math.sqrt(1.06 / 97)), rel=1e-4)
    assert link.detectable_spearman(40) > link.detectable_spearman(200) > link.critical_spearman(200)
    assert math.isnan(link.detectable_spearman(3)) and math.isnan(link.critical_spearman(1))


def test_link_summary_drops_diverged_runs_and_counts_the_rest():
    rng = np.random.default_rng(1)
    predicted = np.exp(rng.normal(size=30))
    measured = predicted**2
    measured[:3] = math.inf  # diverged runs: no finite log
    summary = link.link_summary(pd.DataFrame({"predicted": predicted, "measured": measured}))
    assert summary["runs"] == 27 and summary["spearman"] == pytest.approx(1.0)
    assert summary["critical"] == pytest.approx(1.96 / math.sqrt(26))
    reversed_ = link.link_summary(pd.DataFrame({"predicted": predicted, "measured": 1 / predicted}))
    assert reversed_["spearman"] == pytest.approx(-1.0)
