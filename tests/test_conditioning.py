"""Spectral summaries of the stacked attention output."""

import math

import numpy as np
import pytest
import torch

from resgd.core.conditioning import attention_spectra, gram_singular_values, singular_values, spectra_table, spectrum, stack
from resgd.core.model import ModelConfig, init_params


def test_summaries_of_a_known_diagonal_matrix():
    s = spectrum(torch.diag(torch.tensor([4.0, 2.0, 1.0], dtype=torch.float64)))
    assert s.sigma_min == 1.0 and s.sigma_max == 4.0 and s.condition_number == 4.0
    assert s.stable_rank == pytest.approx(21 / 16)
    assert s.rank1_distance == pytest.approx(math.sqrt(5 / 21))
    assert s.rate_ratio == pytest.approx(1 / 16)


def test_rank_one_matrix():
    u, v = torch.randn(12, 1, dtype=torch.float64), torch.randn(1, 4, dtype=torch.float64)
    s = spectrum(u @ v)
    assert s.rank1_distance < 1e-12 and s.stable_rank == pytest.approx(1.0)
    assert s.sigma_min < 1e-12 * s.sigma_max and s.rate_ratio < 1e-20


def test_gram_path_matches_svd_for_well_conditioned_matrices():
    M = torch.randn(500, 8, dtype=torch.float64)
    np.testing.assert_allclose(gram_singular_values(M), singular_values(M), rtol=1e-10)
    np.testing.assert_allclose(gram_singular_values(M.float()), singular_values(M), rtol=1e-4)
    wide = M[:5].clone()  # fewer rows than columns: min(rows, cols) values, as the SVD gives
    np.testing.assert_allclose(gram_singular_values(wide), singular_values(wide), rtol=1e-8)
    assert gram_singular_values(wide).shape == (5,)


def test_gram_path_takes_a_batch_of_matrices():
    batch = torch.randn(3, 40, 6, dtype=torch.float64)
    got = gram_singular_values(batch)
    assert got.shape == (3, 6)
    for b in range(3):
        np.testing.assert_array_equal(got[b], gram_singular_values(batch[b]))  # row b is matrix b's values
    with pytest.raises(ValueError, match="a 2-D matrix or a batch of them"):
        gram_singular_values(torch.zeros(2, 2, 2, 2))


def test_stack_keeps_only_real_tokens():
    M = torch.arange(2 * 3 * 2, dtype=torch.float64).reshape(2, 3, 2)
    mask = torch.tensor([[True, False, True], [True, True, False]])
    assert stack(M).shape == (6, 2)
    assert torch.equal(stack(M, mask), M[mask])
    with pytest.raises(ValueError, match=r"M: expected shape \(N, n, d\)"):
        stack(M[0])


def test_attention_spectra_match_z_definition():
    X = torch.randn(3, 5, 4, dtype=torch.float64)
    cfg = ModelConfig(d=4, d_qk=2, m=3, beta=0.0, v_scale=0.0)
    spectra = attention_spectra(init_params(cfg, 0), cfg, X)
    assert spectra["Attn"].sigma_max == 0.0 and spectra["Z"].sigma_max == 0.0  # W_V = 0 and beta = 0
    cfg = cfg.replace(beta=0.5)
    spectra = attention_spectra(init_params(cfg, 0), cfg, X)
    np.testing.assert_allclose(spectra["Z"].sigma, 0.5 * spectra["X"].sigma, rtol=1e-12)
    table = spectra_table(spectra)
    assert list(table["matrix"]) == ["X", "Attn", "Z"] and "rank1_distance" in table
    with pytest.raises(ValueError, match="layer"):
        attention_spectra(init_params(cfg, 0), cfg, X, layer=1)
