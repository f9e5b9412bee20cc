"""Argument checks that fail early, naming the argument and what was expected, and the exceptions a
user's setting, data or output folder raises (:mod:`resgd.infra.user_errors` prints each as one line)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
# torch only inside the tensor checks: ConfigError's importers that compute nothing (``python -m resgd``
# before its MKL re-exec, the book build's kernels reading their mode) then start without it (1-2 s each).


class ConfigError(ValueError):
    """A configuration or input that the library cannot use; the message says which and why."""


class SourceChangedError(ConfigError):
    """The package's compute modules were edited on disk after this process imported them: what it
    computes now is the old code's, which it must not store under the new code's identity (rerun)."""


class OutputError(OSError):
    """An output folder cannot be written; the message names it and says what to do."""


class DataError(ValueError):
    """A data file that is missing, corrupt or not in the expected format. Its message names the file,
    the row or field, what was expected and what to do (delete a corrupt file, set ``RESGD_DATA_DIR``, ...),
    so a reader of a failed notebook cell can act without reading the loader's source."""


class DownloadError(DataError):
    """A download that failed (no network, HTTP error, timeout); nothing was written."""


def check_choice(name: str, value: object, choices: Iterable[str]) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise ConfigError(f"{name}: expected one of {', '.join(map(repr, choices))}, got {value!r}")


def _check_tensor(name: str, value: object, ndim: int, shape_doc: str) -> torch.Tensor:
    import torch

    if not isinstance(value, torch.Tensor):
        raise ConfigError(f"{name}: expected a torch.Tensor of shape {shape_doc}, got {type(value).__name__}")
    if value.ndim != ndim:
        raise ConfigError(f"{name}: expected a {ndim}-D tensor of shape {shape_doc}, got shape {tuple(value.shape)}")
    if value.dtype.is_floating_point and not bool(torch.isfinite(value).all()):
        raise ConfigError(f"{name}: contains NaN or inf values")
    return value


def check_inputs(
    X: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    d: int | None = None,
    Y: torch.Tensor | None = None,
    Y_shape: tuple[int, ...] | None = None,
) -> None:
    """Shapes and values of a batch: ``X (N, n, d)``, ``mask (N, n)`` bool, ``Y`` of ``Y_shape``."""
    import torch

    _check_tensor("X", X, 3, "(N, n, d)")
    if not X.dtype.is_floating_point:
        raise ConfigError(f"X: expected a floating-point tensor, got dtype {X.dtype}")
    N, n, features = X.shape
    if d is not None and features != d:
        raise ConfigError(f"X: expected d = {d} features in the last dimension, got shape {tuple(X.shape)}")
    if mask is not None:
        _check_tensor("mask", mask, 2, "(N, n)")
        if mask.dtype != torch.bool:
            raise ConfigError(f"mask: expected dtype torch.bool (True = real token), got {mask.dtype}")
        if tuple(mask.shape) != (N, n):
            raise ConfigError(f"mask: expected shape {(N, n)} to match X, got {tuple(mask.shape)}")
        if not bool(mask.any(dim=1).all()):
            raise ConfigError("mask: every sample needs at least one real token (a row of mask is all False)")
    if Y is not None:
        _check_tensor("Y", Y, Y.ndim if isinstance(Y, torch.Tensor) else 0, str(Y_shape))
        if not Y.dtype.is_floating_point:
            raise ConfigError(f"Y: expected a floating-point tensor, got dtype {Y.dtype}")
        if Y_shape is not None and tuple(Y.shape) != tuple(Y_shape):
            raise ConfigError(f"Y: expected shape {tuple(Y_shape)} to match the model output, got {tuple(Y.shape)}")
