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


# --- the pages' sentences (none reads "1 are horizon-dependent", "1 decide", "(7 > 0)", "0 of 0 seeds") ---

@pytest.mark.parametrize("n, holds, fails, are, checks, decide", [
    (0, "hold", "fail", "are", "checks", "decide"), (1, "holds", "fails", "is", "check", "decides"),
    (4, "hold", "fail", "are", "checks", "decide")])
def test_the_claims_counts_take_verbs_that_agree(n, holds, fails, are, checks, decide):
    """The claims page and the landing page glue these words beside verdict_counts' counts."""
    from resgd.experiments.claims import count_words

    row = {"K": n, "holds": n, "fails": n, "horizon_dependent": n, "undecided": n, "descriptive": n}
    words = count_words(row)
    assert (words["holds-verb"], words["fails-verb"], words["K-checks"], words["K-decide"]) == (holds, fails, checks, decide)
    assert words["horizon_dependent-verb"] == words["undecided-verb"] == words["descriptive-verb"] == are
    assert words["descriptive-checks"] == f"{checks} {are}"


@pytest.mark.parametrize("positive, left, text", [(0, 0, "no value left"), (1, 1, "it is above 0"), (0, 1, "it is not above 0"),
                                                  (7, 8, "7 of them above 0")])
def test_how_many_seeds_lie_above_zero_is_said_in_words(positive, left, text):
    from resgd.experiments.claims import _above_zero

    assert _above_zero(positive, left) == text


@pytest.mark.parametrize("seeds, text", [(0, "no seed to decide on"), (1, "1 seed cannot decide at 5 %"),
                                         (3, "3 seeds cannot decide at 5 %")])
def test_a_test_with_too_few_seeds_says_why(seeds, text):
    from resgd.experiments.claims import _cannot_decide

    assert _cannot_decide(seeds) == text


@pytest.mark.parametrize("seeds, first, second", [(0, "0 of 0 values > 0", "no value to decide on"),
                                                  (1, "1 of 1 value > 0", "1 value cannot decide at 5 %"),
                                                  (3, "1 of 3 values > 0", "3 values cannot decide at 5 %")])
def test_the_decision_figures_rule_text_agrees(seeds, first, second):
    from resgd.plots.experiments import _rule_text

    assert _rule_text({"seeds": seeds, "positive": min(1, seeds), "threshold": None}) == f"{first}\n{second}"


PAGES = ("notebooks/*.md", "notebooks/experiments.md.template", "book/*.md")
FIXED_VERBS = r"(are|is|were|was|has|have|hold|holds|fail|fails|decide|decides|checks are|check is)"


def test_no_page_glues_a_count_next_to_a_fixed_verb():
    """A count glued straight before a verb of fixed number reads "1 are …" when the count is 1: the
    pages glue the agreeing word instead (:func:`resgd.words.agree`). Counts are the glued integers
    (keys named as the pages name counts); formatted floats (``:.2f``) are not counts."""
    import glob
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    pattern = re.compile(r"\{glue:text\}`([^`:]+?)(?::s)?` " + FIXED_VERBS + r"\b")
    counts = ("holds", "fails", "horizon_dependent", "horizon-dependent", "undecided", "descriptive", "-K", "decided",
              "-n", "cells", "runs", "seeds", "configs")
    subject_elsewhere = {"rb-theory-n"}  # "the interval of 8 seeds decides": the verb's subject is the interval
    found = []
    for spec in PAGES:
        for path in sorted(glob.glob(str(root / spec))):
            text = Path(path).read_text(encoding="utf-8")
            for match in pattern.finditer(text):
                key = match.group(1)
                if key.endswith(counts) and not key.endswith(("-verb", "-are")) and key not in subject_elsewhere:
                    found.append(f"{Path(path).name}: {match.group(0)}")
    assert not found, found
