"""CITATION.cff is valid CFF 1.2.0, and the book's *How to cite* page agrees with it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CFF = ROOT / "CITATION.cff"
CITE_PAGE = ROOT / "book" / "cite.md"


def check_cff(path: Path) -> subprocess.CompletedProcess:
    """check-jsonschema against the CFF 1.2.0 schema it ships (no download)."""
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.citation-file-format", str(path)],
        capture_output=True, text=True,
    )


def bibtex_fields(entry: str) -> dict[str, str]:
    return {k.lower(): v.strip("{}") for k, v in re.findall(r"(?m)^\s*(\w+)\s*=\s*\{(.*)\},?\s*$", entry)}


def test_citation_cff_is_valid():
    result = check_cff(CFF)
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_can_fail(tmp_path):
    bad = yaml.safe_load(CFF.read_text())
    del bad["authors"]
    bad["cff-version"] = "1.2.0"
    path = tmp_path / "CITATION.cff"
    path.write_text(yaml.safe_dump(bad))
    assert check_cff(path).returncode != 0


def test_cff_names_the_paper_and_the_companion():
    cff = yaml.safe_load(CFF.read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert cff["cff-version"] == "1.2.0"
    assert cff["version"] == project["version"]
    paper = cff["references"][0]
    assert paper["title"] == "On the Convergence of Gradient Descent on Learning Transformers with Residual Connections"
    assert [a["family-names"] for a in paper["authors"]] == ["Qin", "Zhou", "Zhu"]
    assert paper["year"] == 2025 and "2506.05249" in paper["url"]
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cff.get("repository-code", "") == config["repository"]["url"]  # both absent while there is none


def test_cite_page_bibtex_agrees_with_the_cff_and_the_bibliography():
    page = CITE_PAGE.read_text()
    cff = yaml.safe_load(CFF.read_text())
    companion = re.search(r"```bibtex\n(@software\{.*?\n\})\n```", page, re.S)
    assert companion, "no @software BibTeX block on the How to cite page"
    fields = bibtex_fields(companion.group(1))
    assert fields["title"] == cff["title"]
    assert fields["version"] == cff["version"]
    assert fields.get("url", "") == cff.get("repository-code", "")
    assert re.fullmatch(r"20\d\d", fields["year"]) and int(fields["year"]) >= 2026  # the companion's, not the paper's
    assert f"version {fields['version']}, {fields['year']}." in " ".join(page.split())  # the plain-text citation agrees
    # The paper's entry is included from the bibliography, not copied: it must be there.
    bib = (ROOT / "book" / "references.bib").read_text()
    start = re.search(r':start-at: "(.*)"', page).group(1)
    end = re.search(r':end-before: "(.*)"', page).group(1)
    assert start in bib and end in bib and bib.index(start) < bib.index(end)
    paper = bibtex_fields(bib[bib.index(start):bib.index(end)])
    assert paper["eprint"] == "2506.05249" and paper["year"] == "2025"
    assert paper["title"] == cff["references"][0]["title"]
