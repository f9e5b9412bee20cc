"""The collapse study's one input: i.i.d. Gaussian tokens, seeded (companion's choice), shared by
the sweeps of :mod:`resgd.collapse.study` and the training of :mod:`resgd.collapse.training`."""

from __future__ import annotations

import torch

from ..pipeline.presets import INPUT_D, INPUT_N, INPUT_SEED, INPUT_TOKENS
from ..validation import ConfigError, check_inputs


def make_input(N: int = INPUT_N, n: int = INPUT_TOKENS, d: int = INPUT_D, input_seed: int = INPUT_SEED, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The fixed input of the sweep: i.i.d. standard Gaussian tokens, shape (N, n, d) (companion's choice)."""
    for name, value in (("N", N), ("n", n), ("d", d)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"make_input: {name} must be an integer >= 1, got {value!r}")
    generator = torch.Generator().manual_seed(int(input_seed))
    return torch.randn(N, n, d, generator=generator, dtype=torch.float64).to(dtype)


def sweep_input(X: torch.Tensor | None, N: int, n: int, d: int, input_seed: int) -> torch.Tensor:
    """The input every sweep here runs on: ``X`` in float64 (checked), or :func:`make_input` when None."""
    X = make_input(N, n, d, input_seed) if X is None else X.detach().to(torch.float64)
    check_inputs(X)
    return X
