"""The landing page's sentences are built from the verdicts they state, and change when a verdict does."""

from __future__ import annotations

import pandas as pd

from resgd.experiments.story import sentences


def _verdicts(**changes) -> pd.DataFrame:
    rows = []
    for name in ("residual_helps", "beta_monotone", "depth_residual_helps", "factorial"):
        for dataset in ("jena", "sst2"):
            rows.append(dict(name=name, protocol="theory c=0.5", dataset=dataset, verdict=changes.get(f"{name}-{dataset}", "undecided"),
                             skips="attention skip undecided, FFN skip undecided" if name == "factorial" else ""))
    for name in ("beta_monotone", "depth_residual_helps"):
        for dataset in ("jena", "sst2"):
            rows.append(dict(name=name, protocol="common", dataset=dataset, verdict=changes.get(f"common-{name}-{dataset}", "holds"), skips=""))
    return pd.DataFrame(rows)


def test_each_sentence_follows_its_verdicts():
    plain = sentences(_verdicts())
    assert len(plain) == 5
    assert "not decidedly faster or slower than without it on either data set" in plain[0]
    assert "trains faster on both data sets" in plain[4]
    changed = sentences(_verdicts(**{"residual_helps-jena": "holds", "depth_residual_helps-sst2": "fails"}))
    assert "faster than without it on Jena and not decidedly faster or slower than without it on SST-2" in changed[0]
    assert "undecided on Jena and slower on SST-2" in changed[2]
    assert changed[1] == plain[1]
