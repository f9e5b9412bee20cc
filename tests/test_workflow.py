"""The GitHub workflow that builds, tests and publishes the book.

Validated offline against check-jsonschema's built-in (vendored) GitHub-workflow schema.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


def check_jsonschema(path: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent)) or shutil.which("check-jsonschema")
    if exe is None:
        pytest.skip("check-jsonschema is not installed")
    return subprocess.run(
        [exe, "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True, text=True, timeout=120,
    )


def load() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf8"))


def run_lines(workflow: dict) -> list[str]:
    return [
        line.strip()
        for job in workflow["jobs"].values()
        for step in job.get("steps", [])
        for line in str(step.get("run", "")).splitlines()
    ]


def uses(workflow: dict) -> list[str]:
    return [step.get("uses", "") for job in workflow["jobs"].values() for step in job.get("steps", [])]


def test_workflow_matches_the_schema():
    result = check_jsonschema(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_can_fail(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("name: bad\non: push\njobs:\n  build:\n    steps: not-a-list\n")
    assert check_jsonschema(bad).returncode != 0


def test_workflow_triggers_and_permissions():
    wf = load()
    triggers = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads the key `on` as True
    assert triggers["push"]["branches"] == ["main"]
    assert "workflow_dispatch" in triggers
    deploy = wf["jobs"]["deploy"]
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["needs"] == "build"


def test_workflow_builds_full_with_real_data_then_tests_and_deploys():
    wf = load()
    lines = run_lines(wf)
    book = [i for i, line in enumerate(lines) if line.startswith("make book")]
    test = [i for i, line in enumerate(lines) if line.startswith("make test")]
    assert book and test and book[0] < test[0], lines
    assert "quick" not in lines[book[0]]
    build = wf["jobs"]["build"]
    assert build["env"]["RESGD_MODE"] == "full"
    envs = [wf.get("env", {}), build.get("env", {})] + [s.get("env", {}) for s in build["steps"]]
    assert not any("RESGD_DATA_DIR" in env for env in envs), "full builds download the real data"
    assert not any("RESGD_DATA_DIR" in line for line in lines)
    assert any("apt-get install" in line and "chromium chromium-driver" in line for line in lines)
    assert "3.11" in str(build.get("container", "")) or any(
        "setup-python" in u for u in uses(wf)
    )
    steps = uses(wf)
    assert any(u.startswith("actions/checkout@") for u in steps)
    assert any(u.startswith("actions/upload-pages-artifact@") for u in steps)
    assert any(u.startswith("actions/deploy-pages@") for u in steps)
    artifact = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert artifact["with"]["path"] == "_build/html"
