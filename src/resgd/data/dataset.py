"""The container both loaders return: train and held-out tensors plus where they came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True, eq=False)
class SupervisedData:
    """Inputs ``X (N, n, d)``, targets ``Y``, optional masks (``True`` = real token).

    ``is_standin`` is True when the numbers are synthetic (the real file was not found); then
    ``source_label`` says so, and every plot made from this data must show it.
    ``index_train``/``index_test`` say where each sample came from: for Jena the first hour
    of each window (``datetime64[h]``), for SST-2 the row number in ``train.tsv``/``dev.tsv``.
    ``info`` holds JSON-friendly facts about the preprocessing (split, statistics, files).
    """

    name: str
    X_train: torch.Tensor
    Y_train: torch.Tensor
    X_test: torch.Tensor
    Y_test: torch.Tensor
    feature_names: tuple[str, ...]
    source_label: str
    is_standin: bool = False
    mask_train: torch.Tensor | None = None
    mask_test: torch.Tensor | None = None
    index_train: np.ndarray | None = None
    index_test: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)

    # SST-2 calls its held-out split "dev" (GLUE's name); the same tensors, another name.
    @property
    def X_dev(self) -> torch.Tensor:
        return self.X_test

    @property
    def Y_dev(self) -> torch.Tensor:
        return self.Y_test

    @property
    def mask_dev(self) -> torch.Tensor | None:
        return self.mask_test

    @property
    def n_tokens(self) -> int:
        return int(self.X_train.shape[1])

    @property
    def d(self) -> int:
        return int(self.X_train.shape[2])

    def describe(self) -> dict[str, Any]:
        """Sizes, shapes and provenance as a JSON-friendly dict (for tables and logs)."""

        def shape(tensor: torch.Tensor | None) -> list[int] | None:
            return None if tensor is None else list(tensor.shape)

        return {
            "name": self.name,
            "source_label": self.source_label,
            "is_standin": self.is_standin,
            "n_train": int(self.X_train.shape[0]),
            "n_test": int(self.X_test.shape[0]),
            "n_tokens": self.n_tokens,
            "d": self.d,
            "dtype": str(self.X_train.dtype),
            "X_train": shape(self.X_train),
            "Y_train": shape(self.Y_train),
            "X_test": shape(self.X_test),
            "Y_test": shape(self.Y_test),
            "mask_train": shape(self.mask_train),
            "mask_test": shape(self.mask_test),
            "feature_names": list(self.feature_names),
            **self.info,
        }
