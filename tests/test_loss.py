"""The loss, written once (:mod:`resgd.core.loss`): a run's Φ is the same whether computed alone or
as one row of a stack (to rounding: the two sum in other orders), padded tokens never count, and
the hand pass's loss is the stack's Φ itself."""

from __future__ import annotations

import pytest
import torch

from resgd.core.loss import loss_from_output, output_residual, per_run_loss_and_output_grad


def _outputs(per_token: bool):
    g = torch.Generator().manual_seed(3)
    shape = (4, 5, 2) if per_token else (4, 2)
    Y_hat = torch.randn(3, *shape, generator=g, dtype=torch.float64)  # 3 runs
    Y = torch.randn(*shape, generator=g, dtype=torch.float64)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False], [True] * 3 + [False] * 2, [True] * 5])
    return Y_hat, Y, mask


@pytest.mark.parametrize("per_token", [True, False], ids=["per token", "pooled"])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_a_runs_loss_alone_is_its_row_of_the_stacks(per_token, reduction):
    Y_hat, Y, mask = _outputs(per_token)
    stacked = loss_from_output(Y_hat, Y, mask, reduction, per_run=True)
    assert stacked.shape == (3,)
    for r in range(3):
        assert float(stacked[r]) == pytest.approx(float(loss_from_output(Y_hat[r], Y, mask, reduction)), rel=1e-14)
    per_target = loss_from_output(Y_hat, Y.expand(3, *Y.shape), mask, reduction, per_run=True)  # one target per run
    assert torch.equal(per_target, stacked)
    loss, dY = per_run_loss_and_output_grad(Y_hat, Y, mask, reduction)
    assert torch.equal(loss, stacked)
    assert torch.equal(dY, output_residual(Y_hat, Y, mask, per_run=True) / (4 if reduction == "mean" else 1))


def test_padded_tokens_do_not_count():
    Y_hat, Y, mask = _outputs(per_token=True)
    moved = Y.clone()
    moved[~mask] += 100.0
    assert torch.equal(loss_from_output(Y_hat, moved, mask, "sum", per_run=True),
                       loss_from_output(Y_hat, Y, mask, "sum", per_run=True))
    assert torch.equal(loss_from_output(Y_hat[0], moved, mask, "sum"), loss_from_output(Y_hat[0], Y, mask, "sum"))
    assert not torch.equal(loss_from_output(Y_hat[0], moved, None, "sum"), loss_from_output(Y_hat[0], Y, None, "sum"))
