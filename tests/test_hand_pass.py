"""The hand pass's own rules (:mod:`resgd.core.hand_pass`): which buffers the backward pass may read,
and what a stack reads of its runs' models. Its numbers are tested against autograd in
``tests/test_trainer_gradients.py`` and bit for bit in ``tests/test_engine_reference.py``."""

from __future__ import annotations

import pytest
import torch

from resgd.core.hand_pass import (BufferRuleError, Buffers, Layout, Saved, Stack, buffer_store,
                                  stacked_forward)
from resgd.core.model import ModelConfig, init_params


def _saved(buf: Buffers, **override) -> Saved:
    """A layer's saved tensors, every one from a per-layer buffer unless overridden."""
    fields = {name: buf((name, 0), 2, 3, 4) for name in ("X", "At", "V", "Z", "P", "G")}
    return Saved(**{**fields, **override})


@pytest.mark.parametrize("store", [{}, None], ids=["kept buffers", "fresh tensors"])
def test_saving_a_scratch_buffer_for_the_backward_pass_is_refused(store):
    buf = Buffers(torch.float64, store)
    assert buf.check_saved(_saved(buf), 0) is not None  # per-layer buffers: allowed
    assert buf.check_saved(_saved(buf, pooled=torch.zeros(2, 3)), 0) is not None  # a fresh tensor: allowed
    scratch = buf("S", 2, 3, 4)
    for saved in (scratch, scratch.view(6, 4), scratch[1:]):  # the buffer itself, or any view of it
        with pytest.raises(BufferRuleError, match="saves At of layer 3 .* scratch buffer 'S'"):
            buf.check_saved(_saved(buf, At=saved), 3)


def test_a_scratch_buffer_kept_from_an_earlier_call_is_refused_too():
    store = {}
    Buffers(torch.float64, store)("S", 2, 3, 4)  # an earlier call of the same stack shape
    buf = Buffers(torch.float64, store)
    scratch = buf("S", 2, 3, 4)
    assert scratch is store["S"]
    with pytest.raises(BufferRuleError):
        buf.check_saved(_saved(buf, G=scratch), 0)


@pytest.mark.parametrize("d_qk, pooling", [(4, "none"), (9, "mean")], ids=["unfolded", "folded, pooled"])
def test_the_forward_pass_saves_per_layer_buffers_only(d_qk, pooling):
    """The rule holds for the forward pass as written, on kept buffers from step to step (checked
    while it saves); every saved tensor of one layer is distinct memory from the other layers'."""
    models = [ModelConfig(d=6, d_qk=d_qk, m=5, n_layers=3, beta=b, pooling=pooling) for b in (1.0, 0.5)]
    X = torch.randn(4, 3, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[True, True, False]] * 4)
    layout = Layout(models[0])
    weights = layout.views(layout.flatten([init_params(c, s) for s, c in enumerate(models)], X.dtype))
    stack = Stack.of(models, X.expand(2, *X.shape).contiguous(), mask)
    buf = Buffers(X.dtype, buffer_store(("test_hand_pass", d_qk, pooling)))
    for _ in range(2):  # the second step reuses every buffer
        saved: list[Saved] = []
        stacked_forward(weights, stack, saved=saved, buf=buf)
    memory = [{getattr(s, f).untyped_storage().data_ptr() for f in ("At", "V", "Z", "P", "G")} for s in saved]
    assert all(not (memory[a] & memory[b]) for a in range(3) for b in range(a + 1, 3))


def test_a_stack_reads_each_runs_beta_and_no_shared_one():
    """The shared shape has no β (run 0's would be read as every run's); β and β_ffn are per run."""
    models = [ModelConfig(d=4, d_qk=2, m=3, beta=0.25), ModelConfig(d=4, d_qk=2, m=3, beta=1.0, beta_ffn=0.5)]
    stack = Stack.of(models, torch.zeros(2, 1, 2, 4, dtype=torch.float64), None)
    assert not hasattr(stack.shape, "beta") and not hasattr(stack.shape, "beta_ffn")
    assert stack.beta.tolist() == [0.25, 1.0] and stack.beta_ffn.tolist() == [0.25, 0.5]
    assert stack.shape.logit_divisor == models[0].logit_divisor
