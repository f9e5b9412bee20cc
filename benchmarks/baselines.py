"""What a user would write with ``torch.nn``: the benchmark's baselines for one GD step.

Same model as :mod:`resgd.core.model` (one-head softmax attention with residual, two-matrix FFN with
residual, output layer; no biases), built from ``nn.Linear`` modules, trained by autograd and
``torch.optim.SGD`` full batch (``zero_grad``, ``backward``, ``step``). ``NNModel`` computes the
same function as ``resgd.core.model.forward`` (checked at the start of every benchmark run);
``MHAModel`` uses ``nn.MultiheadAttention`` (one head), which adds an output projection W_O
(d×d) and forces d_qk = d, so it is a different (slightly larger) model with its own FLOP count.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from resgd.core.model import ModelConfig, Params

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "softplus": nn.Softplus}


class NNBlock(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.W_Q = nn.Linear(cfg.d, cfg.d_qk, bias=False)
        self.W_K = nn.Linear(cfg.d, cfg.d_qk, bias=False)
        self.W_V = nn.Linear(cfg.d, cfg.d, bias=False)
        self.ffn = nn.Sequential(nn.Linear(cfg.d, cfg.m, bias=False), _ACTIVATIONS[cfg.activation](), nn.Linear(cfg.m, cfg.d, bias=False))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        q, k, v = self.W_Q(x), self.W_K(x), self.W_V(x)
        logits = q @ k.transpose(-2, -1) / self.cfg.logit_divisor
        if mask is not None:
            logits = logits.masked_fill(~mask[:, None, :], -math.inf)
        z = self.cfg.beta * x + torch.softmax(logits, dim=-1) @ v
        return self.cfg.residual_ffn * z + self.ffn(z)


class MHABlock(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.attn = nn.MultiheadAttention(cfg.d, num_heads=1, bias=False, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(cfg.d, cfg.m, bias=False), _ACTIVATIONS[cfg.activation](), nn.Linear(cfg.m, cfg.d, bias=False))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        a, _ = self.attn(x, x, x, key_padding_mask=None if mask is None else ~mask, need_weights=False)
        z = self.cfg.beta * x + a
        return self.cfg.residual_ffn * z + self.ffn(z)


class _Model(nn.Module):
    block_type: type[nn.Module] = NNBlock

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList(self.block_type(cfg) for _ in range(cfg.n_layers))
        self.out = nn.Linear(cfg.d, cfg.k, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, mask)
        if self.cfg.pooling == "mean":
            if mask is None:
                x = x.mean(dim=1)
            else:
                w = mask.to(x.dtype)
                x = (x * w[..., None]).sum(dim=1) / w.sum(dim=1, keepdim=True)
        return self.out(x)


class NNModel(_Model):
    block_type = NNBlock


class MHAModel(_Model):
    block_type = MHABlock


def nn_loss(model: nn.Module, X: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """½ Σ ‖Ŷ − Y‖² over real tokens, as a user would write it."""
    residual = model(X, mask) - Y
    if mask is not None and residual.ndim == 3:
        residual = residual * mask[..., None]
    return 0.5 * (residual**2).sum()


def load_params(model: NNModel, params: Params) -> NNModel:
    """Copy resgd weights (``W`` is (fan_in, fan_out), ``nn.Linear.weight`` is its transpose)."""
    with torch.no_grad():
        for layer, block in enumerate(model.blocks):
            block.W_Q.weight.copy_(params[f"W_Q.{layer}"].T)
            block.W_K.weight.copy_(params[f"W_K.{layer}"].T)
            block.W_V.weight.copy_(params[f"W_V.{layer}"].T)
            block.ffn[0].weight.copy_(params[f"W_1.{layer}"].T)
            block.ffn[2].weight.copy_(params[f"W_2.{layer}"].T)
        model.out.weight.copy_(params["W_U"].T)
    return model


def nn_gradients(model: NNModel) -> Params:
    """The ``.grad`` of every weight under resgd's names and shapes (for the equivalence check)."""
    grads: Params = {}
    for layer, block in enumerate(model.blocks):
        grads[f"W_Q.{layer}"] = block.W_Q.weight.grad.T
        grads[f"W_K.{layer}"] = block.W_K.weight.grad.T
        grads[f"W_V.{layer}"] = block.W_V.weight.grad.T
        grads[f"W_1.{layer}"] = block.ffn[0].weight.grad.T
        grads[f"W_2.{layer}"] = block.ffn[2].weight.grad.T
    grads["W_U"] = model.out.weight.grad.T
    return grads


def make_sgd_step(model: nn.Module, X, Y, mask, lr: float):
    """One full-batch GD step the torch.nn way: zero_grad, forward, loss, backward, SGD step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn_loss(model, X, Y, mask)
        loss.backward()
        optimizer.step()
        return loss

    return step
