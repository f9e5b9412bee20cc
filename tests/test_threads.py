"""resgd.infra.threads.torch_threads sets torch's thread count for a block and always restores it."""

from __future__ import annotations

import pytest
import torch

from resgd.infra.threads import torch_threads


def test_sets_then_restores_even_on_error():
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    with torch_threads(target):
        assert torch.get_num_threads() == target
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), torch_threads(target):
        raise RuntimeError("inside the block")
    assert torch.get_num_threads() == before


def test_none_leaves_the_setting_alone():
    before = torch.get_num_threads()
    with torch_threads(None):
        assert torch.get_num_threads() == before
    assert torch.get_num_threads() == before
