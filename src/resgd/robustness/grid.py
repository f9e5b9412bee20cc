"""The robustness map's design: which cells, which runs, fixed before any outcome was seen.

A *cell* is one point of the grid: data set × attention sharpness (``qk_scale``, the scale of
the Q/K initialisation under the √d_QK logit scale) × step fraction (the step size as a
fraction of that configuration's own measured stability limit) × size (``N`` training samples).
Every cell holds the runs of all three claims (β sweep at L = 1 for (a) and (b), twins with and
without residual at L = 2, 6, 10 for (c)), ``seeds`` initialisation seeds each, under two
protocols (see :mod:`resgd.robustness.map_runs`).

The quick grid is a subset of the full grid's cells, with the same seeds, and a shorter horizon
``iterations`` (so the quick/full agreement test compares a short with a long horizon on the
same cells: it fails when a verdict flips with T). The cells are smaller than the headline
experiments (fewer tokens, fewer samples, fewer iterations) so that the map fits the book's
budget; :func:`map_grid` is the one place for these sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Any

from ..experiments import study as ex
from ..validation import ConfigError, check_choice

PROTOCOLS = ("common", "own")
"""``common``: every β (and both twins of a depth) at fraction × the stability limit of the β = 1
model (today's rule); ``own``: each configuration at fraction × its own stability limit."""


@dataclass(frozen=True)
class MapGrid:
    """The map's axes and run sizes (frozen; :func:`map_grid` gives the presets)."""

    mode: str
    datasets: tuple[str, ...]
    qk_scales: tuple[float, ...]
    fractions: tuple[float, ...]
    sizes: tuple[int, ...]
    seeds: tuple[int, ...]
    iterations: int
    horizons: tuple[int, ...]
    n_tokens: int
    betas: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    depths: tuple[int, ...] = (2, 6, 10)
    lr_grid: tuple[float, ...] = (3.0, 1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001, 3e-4, 1e-4)
    probe_iterations: int = 30
    headline: tuple[float, float] = (1.0, 0.5)
    """(qk_scale, fraction) of the headline experiments: preset Q/K scale, safety factor 0.5."""
    bootstrap: int = 2000
    confidence: float = 0.95
    dtype: str = "float64"
    """Precision of the map's runs (a parameter, for the float32-vs-float64 comparison)."""

    def __post_init__(self) -> None:
        check_choice("MapGrid.mode", self.mode, ("quick", "full"))
        if len(self.seeds) < 3:
            raise ConfigError(f"MapGrid.seeds: the map needs >= 3 seeds per cell, got {self.seeds!r}")
        if not self.horizons or max(self.horizons) != self.iterations or min(self.horizons) < 1:
            raise ConfigError(f"MapGrid.horizons: expected values in [1, iterations] ending at {self.iterations}, "
                              f"got {self.horizons!r}")
        for f in self.fractions:
            if not 0 < f <= 1:
                raise ConfigError(f"MapGrid.fractions: expected fractions in (0, 1], got {self.fractions!r}")
        for name in self.datasets:
            check_choice("MapGrid.datasets", name, ex.DATASETS)
        check_choice("MapGrid.dtype", self.dtype, tuple(ex.DTYPES))

    def cells(self) -> list[dict[str, Any]]:
        """Every cell as a dict (dataset, qk_scale, fraction, N)."""
        return [dict(dataset=d, qk_scale=q, fraction=f, N=n)
                for d, q, f, n in product(self.datasets, self.qk_scales, self.fractions, self.sizes)]

    def settings(self, dataset: str, qk_scale: float, N: int) -> ex.Settings:
        """The experiment settings of one (data set, sharpness, size): the preset's widths and
        choices, with the map's sizes; no test-set metrics (the map judges training loss only)."""
        return ex.settings(dataset, True, seeds=self.seeds, iterations=self.iterations, n_train=N,
                           betas=self.betas, depths=self.depths, n=self.n_tokens, qk_scale=float(qk_scale),
                           lr_grid=self.lr_grid, probe_iterations=self.probe_iterations, test_metrics=False,
                           dtype=self.dtype)

    def is_subset_of(self, other: "MapGrid") -> bool:
        """True when every cell and seed of this grid is also in ``other``."""
        return (set(self.datasets) <= set(other.datasets) and set(self.qk_scales) <= set(other.qk_scales)
                and set(self.fractions) <= set(other.fractions) and set(self.sizes) <= set(other.sizes)
                and set(self.seeds) <= set(other.seeds) and self.n_tokens == other.n_tokens
                and self.betas == other.betas and self.depths == other.depths and self.lr_grid == other.lr_grid
                and self.dtype == other.dtype)


# The design, chosen before any map run was looked at (see notebooks/07_robustness.md):
# sharpness over a 16x range around the preset (1), three step fractions including the
# headline's safety factor 0.5, two sizes, three seeds.
_FULL = dict(datasets=("jena", "sst2"), qk_scales=(0.25, 1.0, 4.0), fractions=(0.1, 0.5, 0.9), sizes=(16, 32),
             seeds=(0, 1, 2), iterations=100, horizons=(12, 25, 50, 100), n_tokens=8)
_QUICK = dict(_FULL, qk_scales=(1.0, 4.0), fractions=(0.5, 0.9), sizes=(16,), iterations=50, horizons=(12, 25, 50))


def map_grid(quick: bool, **overrides: Any) -> MapGrid:
    """The quick or full grid (``overrides`` replace fields, e.g. ``datasets=("sst2",)``)."""
    if not isinstance(quick, bool):
        raise ConfigError(f"quick: expected True or False, got {quick!r}")
    values = dict(_QUICK if quick else _FULL, mode="quick" if quick else "full")
    unknown = set(overrides) - set(MapGrid.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"map_grid: unknown field(s) {sorted(unknown)}; known: {sorted(MapGrid.__dataclass_fields__)}")
    values.update(overrides)
    for key, value in values.items():
        if isinstance(value, list):
            values[key] = tuple(value)
    return MapGrid(**values)


