"""CI's time guard (.ci/budget.py): every CPU kind's budget is well formed, and an overrun is named."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "budget.py"


@pytest.fixture(scope="module")
def budget():
    spec = importlib.util.spec_from_file_location("ci_budget", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_kind_budgets_every_stage_of_ci_run(budget):
    stages = {line.split()[1] for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("stage ")}
    assert stages == {"verify", "book", "pdf", "lint", "test"}
    for kind, entry in budget.load()["kinds"].items():
        assert set(entry["stages"]) == stages, kind
        assert entry["source"] in ("measured", "scaled") and entry["name"] and entry["derived"]
        assert sum(entry["stages"].values()) <= 5400, kind  # CI's limit, 90 minutes, on every host


def test_an_overrun_is_named_and_a_stage_within_budget_is_not(budget):
    table = budget.load()
    kind = next(iter(table["kinds"]))
    allowed = table["kinds"][kind]["stages"]["book"]
    assert budget.check("book", allowed, table, kind).startswith("ci: budget: stage book")
    over = budget.check("book", 1.6 * allowed, table, kind)
    assert over.startswith("ci: OVER BUDGET: stage book") and kind in over
    assert "no budget for" in budget.check("book", 1, table, "SomeVendor family 1 model 2")


def test_a_malformed_budget_is_one_line(budget, tmp_path):
    bad = tmp_path / "budget.json"
    bad.write_text(json.dumps({"kinds": {"x": {"stages": {"book": -1}}}}))
    with pytest.raises(SystemExit, match=r"kinds.x.stages.book: expected seconds > 0"):
        budget.load(bad)


def test_the_script_names_this_cpu():
    out = subprocess.run([sys.executable, str(SCRIPT), "cpu"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("ci: cpu: ") and " family " in out and " model " in out
