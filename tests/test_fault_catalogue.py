"""The fault catalogue (tests/faults/catalogue.py) is complete and points at real tests."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from faults.catalogue import FAMILIES, FAULTS, STATUSES

ROOT = Path(__file__).resolve().parents[1]


def collected(pytester, files: list[str]) -> list[str]:
    """The node ids pytest collects from ``files``: pytest's own collection, in this process (the
    libraries the test files import are loaded already; a second interpreter spent half a minute
    importing them again)."""
    items = pytester.inline_genitems("-p", "no:cacheprovider", "-n0", "--rootdir", str(ROOT), *(str(ROOT / f) for f in files))[0]
    nodes = [item.nodeid for item in items]
    assert nodes, "nothing collected"
    return nodes


def exists(node: str, nodes: list[str]) -> bool:
    if "[~" in node:  # a parametrized case named by a piece of its id
        function, text = node[:-1].split("[~", 1)
        return any(n.startswith(function + "[") and text in n[len(function):] for n in nodes)
    return node in nodes


def test_every_entry_names_a_test_that_exists(pytester):
    nodes = collected(pytester, sorted({fault.node.split("::", 1)[0] for fault in FAULTS}))
    missing = [f"{fault.id}: {fault.node}" for fault in FAULTS if not exists(fault.node, nodes)]
    assert missing == []


def test_the_catalogue_holds_at_least_74_faults_each_once():
    assert len(FAULTS) >= 74
    assert [k for k, n in Counter(f.id for f in FAULTS).items() if n > 1] == []
    assert [k for k, n in Counter((f.family, f.fault) for f in FAULTS).items() if n > 1] == []
    assert {f.family for f in FAULTS} == set(FAMILIES) and {f.status for f in FAULTS} <= set(STATUSES)
    assert all(f.fault and f.expected for f in FAULTS)
    # at least 56 faults that the code handled as promised without a fix of their own (covered or scripted)
    assert sum(f.status in ("covered", "scripted") for f in FAULTS) >= 56
