"""The read-out link's closed form equals GD on the read-out alone, and its summary states its power."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from resgd.core.model import forward, init_params
from resgd.core.loss import loss_from_output
from resgd.data.spec import DTYPES, load_dataset
from resgd.robustness import study as rb
from resgd.robustness.limits import point_config
from resgd.robustness.readout_link import critical_spearman, readout_link, readout_relative_loss


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_closed_form_matches_gd_on_the_readout(beta):
    grid = rb.map_grid(True, datasets=("toy",), sizes=(6,), n_tokens=4)
    config = point_config(grid.settings("toy", 1.0, 6), beta, 1, "matched", 3, 0.05)
    data = load_dataset(config.dataset, config.dtype)
    params = init_params(config.model, config.seed, dtype=DTYPES[config.dtype])
    W = params["W_U"].clone().requires_grad_(True)
    losses = []
    for _ in range(7):
        Y_hat = forward({**params, "W_U": W}, config.model, data.X_train, data.mask_train)
        loss = loss_from_output(Y_hat, data.Y_train, data.mask_train, config.gd.reduction)
        losses.append(float(loss.detach()))
        (grad,) = torch.autograd.grad(loss, W)
        W = (W - config.gd.lr * grad).detach().requires_grad_(True)
    Y_hat = forward({**params, "W_U": W}, config.model, data.X_train, data.mask_train)
    final = float(loss_from_output(Y_hat, data.Y_train, data.mask_train, config.gd.reduction))
    assert readout_relative_loss(config, 7) == pytest.approx(final / losses[0], rel=1e-9)
    assert final < losses[0]


def test_link_summary_counts_runs_and_states_power():
    rng = np.random.default_rng(0)
    predicted = np.exp(rng.normal(size=40))
    table = pd.DataFrame(dict(dataset="toy", protocol=["common"] * 20 + ["own"] * 20, qk_scale=1.0, N=16, beta=1.0,
                              init="matched", seed=range(40), lr=0.1, predicted=predicted, measured=predicted**2))
    link = readout_link(table)
    assert link.set_index("protocol").loc["all", "runs"] == 40
    assert link["spearman"].tolist() == pytest.approx([1.0] * len(link))
    assert critical_spearman(101) == pytest.approx(0.196)
    assert math.isnan(critical_spearman(1))


def test_the_link_sentence_calls_a_correlation_a_prediction_only_when_significant_and_positive():
    from resgd.robustness.readout_link import link_sentence

    assert "not significant" in link_sentence({"spearman": 0.06, "critical": 0.11, "runs": 300})
    assert "opposite sign" in link_sentence({"spearman": -0.28, "critical": 0.11, "runs": 300})
    assert "predicted direction" in link_sentence({"spearman": 0.4, "critical": 0.11, "runs": 1})
    assert "over 1 run:" in link_sentence({"spearman": 0.4, "critical": 0.11, "runs": 1})
