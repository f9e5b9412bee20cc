"""Every result unchanged by the engine's rewrites: the map's and the headline's shapes against the
histories recorded before them (``tests/engine_cases.py``: one recording per ATen instruction set)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import engine_cases as cases
from resgd.core.trainer import GDConfig

LOSS_RTOL = 1e-12  # the engine's contract: loss histories within 1e-12 relative of the recorded ones


@pytest.fixture(scope="module")
def computed():
    return cases.compute()


@pytest.fixture(scope="module")
def reference():
    path = cases.reference_path()
    if path is None:  # e.g. an ARM machine (NEON/SVE) or a CPU without AVX2
        pytest.skip(f"this CPU's ATen kernels ({torch.backends.cpu.get_cpu_capability()}) have no recorded "
                    f"histories, only {' and '.join(cases.REFERENCES)} do: vector kernels of another width sum "
                    f"in another order, so its histories can differ from both by more than 1e-12 from rounding alone; "
                    f"the engine is still checked here against autograd (tests/test_stacked.py); "
                    f"record this set with tests/engine_cases.py")
    with np.load(path) as stored:
        return {name: stored[name] for name in stored.files}


def test_a_recording_per_instruction_set():
    assert all(path.is_file() for path in cases.REFERENCES.values())


def test_every_case_is_recorded(computed, reference):
    assert sorted(computed) == sorted(reference)
    assert len(reference) == len(cases.MAP_CASES) * len(cases.MAP_RUNS) + len(cases.HEADLINE_CASES)


@pytest.mark.parametrize("column,rtol", [("loss", LOSS_RTOL), ("grad_norm", 1e-10), ("sigma_min_Z", 1e-8),
                                         ("sigma_max_Z", 1e-8)])
def test_histories_equal_the_recorded_ones(computed, reference, column, rtol):
    j = cases.COLUMNS.index(column)
    for name, ref in reference.items():
        got = computed[name]
        assert got.shape == ref.shape, name  # the same divergence iteration
        if diverged(ref):  # the step it blew up at (loss x1e6 or more) holds overflowed sums: chaos, not a result
            assert diverged(got), name
            got, ref = got[:-1], ref[:-1]
        if name in cases.SENSITIVE:  # rounding-chaotic: portable only over the first row
            got, ref = got[:cases.SENSITIVE_PREFIX], ref[:cases.SENSITIVE_PREFIX]
        if column == "sigma_min_Z":  # σ_min² is an eigenvalue of ZᵀZ: accurate to ~ε σ_max² in absolute terms,
            # so a tiny σ_min moves by rounding alone (4.9e-8 relative at σ_min = 3.8e-5 on one map run)
            k = cases.COLUMNS.index("sigma_max_Z")
            _close_squares(got[:, j], ref[:, j], ref[:, k], rtol, name)
        else:
            np.testing.assert_allclose(got[:, j], ref[:, j], rtol=rtol, atol=0, equal_nan=True, err_msg=name)


def diverged(history: np.ndarray) -> bool:
    """Whether a run stopped on the divergence rule (its last loss not finite or above the
    factor times its first): its last row is then the state it overflowed in. Only its length (the
    iteration it diverged at) and the rows before are held to the recording."""
    last, first = history[-1, 0], history[0, 0]
    return bool(not np.isfinite(last) or last > GDConfig(lr=1.0, iterations=1).divergence_factor * first)


def _close_squares(got, ref, sigma_max, rtol: float, name: str) -> None:
    """|σ_min² − σ_min,ref²| ≤ rtol σ_min,ref² + 1e-13 σ_max² (NaN where the reference is NaN)."""
    recorded = ~np.isnan(ref)
    assert (np.isnan(got) == ~recorded).all(), name
    error = np.abs(got[recorded] ** 2 - ref[recorded] ** 2)
    bound = rtol * ref[recorded] ** 2 + 1e-13 * sigma_max[recorded] ** 2
    assert (error <= bound).all(), f"{name}: σ_min² off by {np.max(error / bound):.2g} × its bound"


def test_the_sensitive_runs_are_few_and_named():
    assert set(cases.SENSITIVE) <= set(cases.map_name(*case, 1) for case in cases.MAP_CASES)
    assert len(cases.SENSITIVE) <= len(cases.MAP_CASES)  # at most one run per stack left out of the full check


def test_the_cases_cover_divergence_and_progress(reference):
    lengths = {len(a) for a in reference.values()}
    assert 2 in lengths and cases.MAP_ITERATIONS + 1 in lengths  # runs that diverge and runs that do not
    finals = [a[-1, 0] / a[0, 0] for name, a in reference.items() if len(a) == cases.MAP_ITERATIONS + 1]
    assert min(finals) < 0.5  # some runs train, so a wrong gradient would show
