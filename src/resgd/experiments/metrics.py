"""End-of-run metrics of a trained run: test loss, training and test accuracy.

One run at a time (:func:`_metrics`) or every run of a stack in one stacked pass
(:func:`_stacked_metrics`, bit for bit the same whichever runs share the stack).
"""

from __future__ import annotations

import math

import torch

from ..core.model import forward
from ..core.hand_pass import predict_stacked
from ..core.loss import loss_from_output
from .run_config import RunConfig


def _accuracy(Y_hat: torch.Tensor, Y: torch.Tensor) -> float:
    """Fraction of samples whose output sign matches the ±1 label (output 0 counts as −1)."""
    predicted = torch.where(Y_hat > 0, 1.0, -1.0).to(Y.dtype)
    return float((predicted == Y).to(torch.float64).mean())


_NO_METRICS = {"test_loss": math.nan, "train_acc": math.nan, "test_acc": math.nan}


def _metrics(config: RunConfig, data, final: dict | None) -> dict:
    """Test loss, train and test accuracy (classification) of one run's final weights; NaN if it diverged."""
    if final is None or not config.test_metrics:
        return dict(_NO_METRICS)
    cfg, reduction = config.model, config.gd.reduction
    with torch.no_grad():
        Y_hat_test = forward(final, cfg, data.X_test, data.mask_test)
        out = dict(_NO_METRICS, test_loss=float(loss_from_output(Y_hat_test, data.Y_test, data.mask_test, reduction)))
        if config.dataset.is_classification:
            out["train_acc"] = _accuracy(forward(final, cfg, data.X_train, data.mask_train), data.Y_train)
            out["test_acc"] = _accuracy(Y_hat_test, data.Y_test)
    return out


def _stacked_metrics(configs: list[RunConfig], data, finals: list[dict | None]) -> list[dict]:
    """:func:`_metrics` of every run of a stack, the surviving runs in one stacked pass each on the
    test and training sets (bit for bit the same whichever runs share the stack)."""
    out = [dict(_NO_METRICS) for _ in configs]
    done = [i for i, final in enumerate(finals) if final is not None]
    if not done or not configs[0].test_metrics:
        return out
    models = [configs[i].model for i in done]
    weights = [finals[i] for i in done]
    test = predict_stacked(weights, models, data.X_test, data.mask_test)
    losses = loss_from_output(test, data.Y_test, data.mask_test, configs[0].gd.reduction, per_run=True).to(torch.float64).numpy()
    train = predict_stacked(weights, models, data.X_train, data.mask_train) if configs[0].dataset.is_classification else None
    for j, i in enumerate(done):
        out[i]["test_loss"] = float(losses[j])
        if train is not None:
            out[i]["train_acc"] = _accuracy(train[j], data.Y_train)
            out[i]["test_acc"] = _accuracy(test[j], data.Y_test)
    return out


