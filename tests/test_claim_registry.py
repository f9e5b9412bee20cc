"""One record per claim (resgd.claim_registry): no module outside it spells a claim's name, every
claim a verdict file holds has a record, and the words that key stored tables stay as they were."""

from __future__ import annotations

import ast
import pandas as pd
from pathlib import Path

import pytest

import resgd
from resgd import claim_registry as registry
from resgd.experiments import claims
from resgd.experiments.design import arms

ROOT = Path(resgd.__file__).parent
EXPERIMENTS = frozenset(arm.experiment for arm in arms((0.0, 1.0), (2,)))
"""The design's sweeps: "factorial" names both a sweep and the claim it decides, so the scan below
cannot tell them apart and leaves that word to the sweeps."""


def spelled_names(source: str, names: frozenset[str]) -> list[tuple[int, str]]:
    """(line, name) of every string constant in ``source`` that is exactly one of ``names``."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names]


def test_the_scan_finds_a_spelled_claim_name_and_skips_other_strings():
    names = frozenset({"residual_helps"})
    source = 'X = {"residual_helps": 1}\n"""About residual_helps."""\ny = f"{X}residual_helps" + "residual_helpsx"\n'
    assert spelled_names(source, names) == [(1, "residual_helps"), (3, "residual_helps")]  # a docstring names it freely


def test_no_module_outside_the_registry_spells_a_claim_name():
    names = registry.names() - EXPERIMENTS
    assert {"residual_helps", "beta_monotone", "depth_residual_helps", "depth_residual_helps_second"} <= names
    found = {path.relative_to(ROOT).as_posix(): hits for path in sorted(ROOT.rglob("*.py"))
             if path.name != "claim_registry.py" and (hits := spelled_names(path.read_text(encoding="utf-8"), names))}
    assert found == {}, f"read the claim from resgd.claim_registry instead: {found}"


def _every_sweep() -> pd.DataFrame:
    """Per-run rows of every sweep a verdict file checks (β sweep, depth sweep, factorial), two protocols."""
    rows = []
    for protocol in ("theory c=0.5", "common"):
        for seed in range(8):
            rows += [("beta", 1, b, b, seed, 0.01 + 0.04 * b + 0.001 * seed, protocol) for b in (0.0, 0.25, 0.5, 0.75, 1.0)]
            rows += [("depth", L, b, b, seed, 0.05 + 0.05 * b + 0.001 * seed, protocol) for L in (2, 6) for b in (0.0, 1.0)]
            rows += [("factorial", 1, b, f, seed, 0.01 + 0.03 * b + 0.01 * f + 0.001 * seed, protocol)
                     for b in (0.0, 1.0) for f in (0.0, 1.0)]
    frame = pd.DataFrame(rows, columns=["experiment", "n_layers", "beta", "beta_ffn", "seed", "rate", "protocol"])
    return frame.assign(twin_init="matched")


def test_the_registry_covers_every_claim_a_verdict_file_holds(tmp_path):
    verdicts = claims.evaluate(_every_sweep(), "jena")
    claims.write_verdicts(verdicts, tmp_path / "jena_quick.json", dataset="jena", mode="quick")
    table = claims.load_verdicts(tmp_path, mode="quick", datasets=("jena",))
    assert set(table["name"]) == set(registry.BY_NAME)  # every record is checked, and every check has a record
    for v in verdicts:
        assert v.claim == registry.claim(v.name).text and v.figure == f"fig-jena-{registry.claim(v.name).figure}"


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[1] / "results" / "claims").glob("*.json")), ids=str)
def test_the_registry_covers_every_claim_of_the_built_verdict_files(path):
    import json

    assert {v["name"] for v in json.loads(path.read_text())["verdicts"]} <= set(registry.BY_NAME)


def test_every_claim_has_a_check_and_distinct_names_keys_and_figures():
    assert set(claims.CHECKS) == set(registry.BY_NAME)
    for field in ("name", "key", "figure", "null_check"):
        values = [getattr(c, field) for c in registry.CLAIMS]
        assert len(set(values)) == len(values), field
    assert len({f.name for f in registry.MAP_FORMS}) == len(registry.MAP_FORMS)
    assert {c.experiment for c in registry.CLAIMS} <= EXPERIMENTS
    with pytest.raises(KeyError, match="no claim 'nope'; the claims are"):
        registry.claim("nope")


def test_every_claim_has_its_curve_figure_and_its_decision_figure():
    from resgd.experiments.pages import DRAWERS, FIGURE_KINDS

    assert FIGURE_KINDS[:4] == ("residual", "beta", "depth", "factorial")  # the order the figures are made in
    for c in registry.CLAIMS:
        assert c.figure in DRAWERS and DRAWERS[c.decision_figure].keywords == {"claim": c.name}


def test_the_null_simulation_keeps_the_check_names_its_stored_chunks_are_keyed_by():
    """A chunk's key holds its ``check`` name: renaming one would miss every stored chunk of it."""
    assert [name for name, _, _ in claims.NULL_RULES + claims.REPLAYED] == [
        "(a) residual helps", "(a) residual helps", "(b) larger β faster", "(c) residual helps at depth",
        "(c) residual helps at depth", "factorial: some skip speeds up",
        "(c) earlier rule: pooled (L, seed) pairs", "(b) earlier rule: Spearman of the median rates"]


EXPECTED = {"(a) residual helps": ("residual_helps", "rate"), "(b) larger β faster": ("beta_monotone", "rate"),
            "(c) residual helps at depth": ("depth_residual_helps", "per-seed median over L"),
            "factorial: some skip speeds up": ("factorial", "rate"),
            "(c) earlier rule: pooled (L, seed) pairs": ("depth_residual_helps", "pooled (L, seed) pairs"),
            "(b) earlier rule: Spearman of the median rates": ("beta_monotone", "rate")}
"""Null-simulation check → the claim its verdict is of, and the statistic (where the check names one)."""


@pytest.mark.parametrize("name, rule, experiment", claims.NULL_RULES + claims.REPLAYED)
def test_each_null_check_runs_its_claims_check(name, rule, experiment):
    table = _every_sweep()
    v = claims._check(name, rule, table[(table["protocol"] == "common") & (table["experiment"] == experiment)])
    claim, statistic = EXPECTED[name]
    assert v.name == claim and v.numbers.get("statistic", "rate") == statistic
    assert ("bound" in v.numbers) == name.startswith("(b) earlier")  # the replayed Spearman bound, not the interval
