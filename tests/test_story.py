"""The landing page's sentences are built from the verdicts they state, and change when a verdict does."""

from __future__ import annotations

import pandas as pd

from resgd.experiments.pages import sentences


def _verdicts(**changes) -> pd.DataFrame:
    rows = []
    for name in ("residual_helps", "beta_monotone", "depth_residual_helps", "factorial"):
        for dataset in ("jena", "sst2"):
            rows.append(dict(name=name, protocol="theory c=0.5", dataset=dataset, verdict=changes.get(f"{name}-{dataset}", "undecided"),
                             skips="attention skip undecided, FFN skip undecided" if name == "factorial" else "",
                             shape=changes.get(f"shape-{dataset}", "rises with β") if name == "beta_monotone" else ""))
    for name in ("residual_helps", "beta_monotone", "depth_residual_helps"):
        for dataset in ("jena", "sst2"):
            rows.append(dict(name=name, protocol="common", dataset=dataset, verdict=changes.get(f"common-{name}-{dataset}", "holds"),
                             skips="", shape=changes.get(f"common-shape-{dataset}", "rises with β") if name == "beta_monotone" else "",
                             decides=name != "depth_residual_helps", seeds_in_arm=3 if name == "depth_residual_helps" else 8))
    return pd.DataFrame(rows)


def test_each_sentence_follows_its_verdicts():
    plain = sentences(_verdicts())
    assert len(plain) == 5
    assert "not decidedly faster or slower than without it on either data set" in plain[0]
    assert "residual connection is faster than without it on both data sets" in plain[4]
    assert "a larger β ranks faster (each seed's rank correlation of β with the rate is above 0) on both data sets" in plain[4]
    assert "at depth (descriptive: 3 seeds, fewer than the 8 a verdict needs) are faster" in plain[4]
    changed = sentences(_verdicts(**{"residual_helps-jena": "holds", "depth_residual_helps-sst2": "fails"}))
    assert "faster than without it on Jena and not decidedly faster or slower than without it on SST-2" in changed[0]
    assert "undecided on Jena and slower on SST-2" in changed[2]
    assert changed[1] == plain[1]


def test_the_beta_sentence_names_the_shape():
    plain = sentences(_verdicts(**{"shape-sst2": "is an inverted U in β (peak at β = 0.25)"}))
    assert "the median rate over seeds rises with β on Jena and is an inverted U in β (peak at β = 0.25) on SST-2" in plain[1]
    # a rank verdict against an inverted U: the sentence says how β ranks the rates, then the shape, never "trains slower"
    common = sentences(_verdicts(**{"common-beta_monotone-sst2": "fails", "common-beta_monotone-jena": "horizon-dependent",
                                    "common-shape-sst2": "is an inverted U in β (peak at β = 0.25)"}))[4]
    assert ("a larger β ranks faster or not depending on the horizon (T/4, T/2, T) on Jena and ranks slower "
            "(each seed's rank correlation of β with the rate is below 0) on SST-2") in common
    assert "is an inverted U in β (peak at β = 0.25) on SST-2" in common and "trains slower" not in common


def test_rate_shape_names_monotone_inverted_u_and_flat():
    from resgd.experiments.claims import rate_shape

    assert rate_shape({"0": 1.0, "0.5": 2.0, "1": 3.0}) == "rises with β"
    assert rate_shape({"0": 3.0, "0.5": 2.0, "1": 1.0}) == "falls with β"
    assert rate_shape({"0": 1.0, "0.25": 3.0, "0.5": 2.5, "0.75": 2.0, "1": 0.5}) == "is an inverted U in β (peak at β = 0.25)"
    assert rate_shape({"0": 3.0, "0.5": 1.0, "1": 2.0}) == "is a U in β (lowest at β = 0.5)"
    assert rate_shape({"0": 1.0, "0.5": 1.001, "1": 0.999}) == "is flat in β"
    assert rate_shape({"0": 1.0, "0.25": 2.0, "0.5": 1.0, "0.75": 2.0, "1": 1.0}) == "has no single shape in β"
    assert rate_shape({"0": float("-inf"), "0.5": 1.0, "1": 2.0}) == "rises with β"  # a diverged median is the lowest
