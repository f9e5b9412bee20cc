"""The map's interval means what it says: its coverage, measured on simulated data, matches the
exact level it reports, with no effect and with a known effect, for light, heavy and skewed
tails, at the map's seed counts (8 and 12)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from resgd.core.stats import median_interval, order_statistic_coverage

REPS = 4000


def _draw(kind: str, rng: np.random.Generator, shape) -> np.ndarray:
    """Draws whose median is 0."""
    if kind == "normal":
        return rng.normal(size=shape)
    if kind == "cauchy":
        return rng.standard_cauchy(size=shape)
    return rng.exponential(size=shape) - math.log(2.0)  # skewed; median of Exp(1) is log 2


@pytest.mark.parametrize("n", [8, 12])
@pytest.mark.parametrize("kind", ["normal", "cauchy", "skewed"])
@pytest.mark.parametrize("effect", [0.0, 1.5])
def test_measured_coverage_matches_the_exact_level(n, kind, effect):
    rng = np.random.default_rng([21, n, len(kind), int(10 * effect)])
    samples = effect + _draw(kind, rng, (REPS, n))
    results = [median_interval(row, 0.9) for row in samples]
    lo = np.array([r[0] for r in results])
    hi = np.array([r[1] for r in results])
    level = results[0][2]
    covered = np.mean((lo <= effect) & (effect <= hi))
    tolerance = 4 * math.sqrt(level * (1 - level) / REPS)
    assert abs(covered - level) < tolerance, f"measured {covered:.4f}, exact {level:.4f}"
    # the map's "holds" (lo > 0): a false holds under no effect at most half the miss rate
    if effect == 0.0:
        assert np.mean(lo > 0) < (1 - level) / 2 + tolerance
    else:  # a clear effect is found most of the time (power), at both seed counts
        assert np.mean(lo > 0) > (0.4 if kind == "cauchy" else 0.6)


def test_the_levels_of_the_map_seed_counts():
    assert median_interval(np.arange(8.0), 0.9)[2] == pytest.approx(1 - 2 * 9 / 256)  # k = 2: 93.0 %
    assert median_interval(np.arange(12.0), 0.9)[2] == pytest.approx(1 - 2 * 79 / 4096)  # k = 3: 96.1 %
    lo, hi, _ = median_interval(np.arange(8.0), 0.9)
    assert (lo, hi) == (1.0, 6.0)  # the 2nd smallest and the 2nd largest, not [min, max]
    assert order_statistic_coverage(3, 1) == pytest.approx(0.75)  # the old 3-seed [min, max]: 75 %, not 95 %


def test_infinite_values_sort_and_nan_values_drop():
    lo, hi, level = median_interval([math.inf] * 7 + [1.0, math.nan], 0.9)
    assert lo == math.inf and hi == math.inf and level == pytest.approx(1 - 2 * 9 / 256)
    assert all(math.isnan(v) for v in median_interval([1.0, 2.0, 3.0], 0.9))  # too few values for 90 %


def test_bad_levels_are_named():
    with pytest.raises(ValueError, match="min_coverage"):
        median_interval([1.0] * 8, 1.0)
    with pytest.raises(ValueError, match="order_statistic_coverage"):
        order_statistic_coverage(8, 5)


def test_interval_k_is_the_interval_s_and_says_how_many_seeds_must_agree():
    import numpy as np

    from resgd.core.stats import interval_k, median_interval

    assert interval_k(8, 0.9) == 2 and interval_k(12, 0.9) == 3 and interval_k(3, 0.9) is None
    need = 8 + 1 - interval_k(8, 0.9)  # 7 of 8 above 0: the interval lies above 0
    assert median_interval(np.r_[-1.0, np.arange(1.0, 8.0)], 0.9)[0] > 0
    assert not median_interval(np.r_[-1.0, -0.5, np.arange(1.0, 7.0)], 0.9)[0] > 0
    assert need == 7
