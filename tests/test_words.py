"""Counts meet their nouns and verbs in agreement (:mod:`resgd.words`), over 0, 1 and many."""

from __future__ import annotations

import numpy as np
import pytest

from resgd.words import agree, count_noun


@pytest.mark.parametrize("n, noun, verb", [(0, "0 seeds", "0 are"), (1, "1 seed", "1 is"), (3, "3 seeds", "3 are"),
                                           (np.int64(1), "1 seed", "1 is"), (np.int64(12), "12 seeds", "12 are"),
                                           (1.0, "1 seed", "1 is"), (np.float64(4.0), "4 seeds", "4 are")])
def test_count_noun_agrees_over_zero_one_and_many(n, noun, verb):
    assert count_noun(n, "seed") == noun
    assert count_noun(n, "is", "are") == verb


def test_irregular_plurals_and_phrases():
    assert count_noun(1, "point fails", "points fail") == "1 point fails"
    assert count_noun(5, "point fails", "points fail") == "5 points fail"
    assert count_noun(2, "pass", "passes") == "2 passes"
    assert [agree(n, "obeys", "obey") for n in (0, 1, 2)] == ["obey", "obeys", "obey"]


@pytest.mark.parametrize("n", [2.5, float("nan"), float("inf"), True, "3", None])
def test_a_count_that_is_not_a_whole_number_is_refused(n):
    with pytest.raises(ValueError, match="a count must be a whole number"):
        count_noun(n, "seed")
