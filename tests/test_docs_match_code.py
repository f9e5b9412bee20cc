"""The README's layout and the chapter numbers in the packages' docstrings say what the code is.

Why: a newcomer finds a module through the README's layout table and a chapter's code through its
package's docstring; both drifted from the code once (modules missing from the table, chapters
renumbered in the book but not in the docstrings). These tests read the docs and the package and
fail, naming the row, when they disagree.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from test_imports import HOMES

import resgd

ROOT = Path(resgd.__file__).parent
REPO = ROOT.parents[1]
STUDIES = ("theorem1", "collapse", "experiments", "robustness")
FLOORS = {"studies": "studies", "shared": "pipeline", "output": "output", "ground": "ground",
          "plumbing": "helpers", "top": "top"}
"""The README layout block's floor names → the layers of :data:`test_imports.HOMES`."""


def modules(package: str) -> set[str]:
    """The modules of ``resgd.<package>`` (file names, ``__init__.py`` left out)."""
    return {p.name for p in (ROOT / package).glob("*.py") if p.name != "__init__.py"}


def layout_rows(text: str) -> dict[str, str]:
    """The README layout table's rows: path (e.g. ``src/resgd/core/``) → its "what" cell."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"^\| `([^`]+)` \| (.*) \|$", line)
        if match:
            rows[match[1]] = match[2]
    return rows


def named_modules(cell: str) -> set[str]:
    """The modules a row names: every backticked ``name.py``."""
    return set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*\.py)`", cell))


def bare_module_names(cell: str, package: str) -> set[str]:
    """Backticked bare names that are modules of ``package`` (the table writes modules as ``name.py``)."""
    return {name for name in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cell) if f"{name}.py" in modules(package)}


def chapters(text: str) -> set[int]:
    """The chapter numbers of ``chapters 4, 5 and 7`` / ``chapter 6`` / ``chapters 1-2`` at the start of ``text``."""
    match = re.match(r"\s*chapters?\s+([0-9][0-9 ,\-–and]*[0-9]|[0-9])", text, re.IGNORECASE)
    if match is None:
        return set()
    found: set[int] = set()
    for part in re.split(r",|\band\b", match[1]):
        ends = [int(x) for x in re.split(r"[-–]", part.strip()) if x]
        found |= set(range(ends[0], ends[-1] + 1))
    return found


def notebook_chapters() -> dict[str, set[int]]:
    """Study package → the chapters of the book whose notebook imports it most (among the studies),
    chapter numbers from the notebooks' order in ``_toc.yml``."""
    files = re.findall(r"file:\s*notebooks/(\S+)", (REPO / "_toc.yml").read_text())
    found: dict[str, set[int]] = {study: set() for study in STUDIES}
    for number, name in enumerate(files, start=1):
        text = (REPO / "notebooks" / f"{name}.md").read_text()
        counts = {study: len(re.findall(rf"\bresgd\.{study}\b", text)) for study in STUDIES}
        found[max(counts, key=counts.get)].add(number)
    return found


def test_every_package_row_names_exactly_the_package_s_modules():
    rows = layout_rows((REPO / "README.md").read_text())
    packages = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file())
    problems = []
    for package in packages:
        cell = rows.get(f"src/resgd/{package}/")
        if cell is None:
            problems.append(f"src/resgd/{package}/: no row")
            continue
        named, present = named_modules(cell), modules(package)
        problems += [f"src/resgd/{package}/ names {m}, which is not there" for m in sorted(named - present)]
        problems += [f"src/resgd/{package}/ does not name {m}" for m in sorted(present - named)]
        problems += [f"src/resgd/{package}/ names the module {m} without .py" for m in sorted(bare_module_names(cell, package))]
    top = {p.name for p in ROOT.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    problems += [f"{m}: no row" for m in sorted(top - {Path(path).name for path in rows if path.startswith("src/resgd/")})]
    assert problems == []


def test_the_layout_block_puts_each_module_on_its_floor():
    """Each name in the README's layout block is on the floor the import guard gives it
    (``tests/test_imports.py``), and every package and top-level module is in the block."""
    text = (REPO / "README.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    placed, floor = {}, None
    for line in block.splitlines():
        floor = floor if line.startswith(" ") else line.split(" ", 1)[0]  # an indented line continues its floor
        if floor in FLOORS:
            for name in re.findall(r"(?<![\w.])([A-Za-z_][A-Za-z0-9_]*)(?:/|\.py\b)", line):
                placed[name] = floor
    wrong = {name: floor for name, floor in placed.items() if HOMES.get(name) != FLOORS[floor]}
    assert wrong == {}
    every = {p.stem if p.suffix else p.name for p in ROOT.iterdir()
             if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file()}
    assert every - set(placed) == set()


def test_chapter_numbers_in_the_docs_are_the_book_s():
    """A study's chapters, as its package docstring, its README row and the README's layout block
    give them, are the chapters whose notebooks use it (numbered in ``_toc.yml``'s order)."""
    expected = notebook_chapters()
    assert set().union(*expected.values()) == set(range(1, 8))
    readme = (REPO / "README.md").read_text()
    rows = layout_rows(readme)
    studies_line = next(line for line in readme.splitlines() if line.startswith("studies "))
    in_block = [chapters(f"chapters {part}") for part in studies_line.split("chapters", 1)[1].split(",")]
    problems = []
    for index, study in enumerate(STUDIES):
        docstring = ast.get_docstring(ast.parse((ROOT / study / "__init__.py").read_text())) or ""
        for where, found in ((f"resgd.{study}'s docstring", chapters(docstring)),
                             (f"README's row src/resgd/{study}/", chapters(rows[f"src/resgd/{study}/"])),
                             ("README's layout block", in_block[index])):
            if found != expected[study]:
                problems.append(f"{where}: chapters {sorted(found)}, the book's {sorted(expected[study])}")
    assert problems == []


def test_the_notebooks_are_numbered_in_the_book_s_order():
    files = re.findall(r"file:\s*notebooks/(\S+)", (REPO / "_toc.yml").read_text())
    assert [int(name.split("_", 1)[0]) for name in files] == list(range(1, len(files) + 1))


@pytest.mark.parametrize("text, numbers", [("Chapters 4, 5 and 7: the", {4, 5, 7}), ("chapter 6, the", {6}),
                                           ("Chapters 1-2: x", {1, 2}), ("4-5 and 7", set()),
                                           ("chapters 4-5 and 7", {4, 5, 7})])
def test_chapter_numbers_are_read_as_written(text, numbers):
    assert chapters(text) == numbers


def test_a_row_that_misses_a_module_or_names_a_gone_one_is_found():
    cell = "`model.py` the model; `gone.py` old; `cache` (bare)"
    assert named_modules(cell) == {"model.py", "gone.py"}
    assert bare_module_names(cell, "pipeline") == {"cache"}
