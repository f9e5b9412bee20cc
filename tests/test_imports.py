"""The library's import graph has no cycle (imports inside functions count too): each layer can be
read, tested and replaced without the ones above it."""

from __future__ import annotations

import ast
from pathlib import Path

import resgd

ROOT = Path(resgd.__file__).parent


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module → the library modules it imports; ``from . import sub`` names the submodule, not the package."""
    paths = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in paths}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in paths]
                names = subs + ([target] if len(subs) < len(node.names) else [])
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            graph[module] |= {n for n in names if n in paths and n != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_in_the_library():
    assert cycles(import_graph()) == []


def test_the_checker_finds_a_cycle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n")
    (pkg / "c.py").write_text("from . import a\n")
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.b"]]


def test_module_names_are_dotted_from_the_package():
    assert module_name(ROOT / "pipeline" / "__init__.py") == "resgd.pipeline"
    assert module_name(ROOT / "pipeline" / "sweep.py") == "resgd.pipeline.sweep"


LAYERS = {  # README "Layout": imports point down (or sideways within a layer) only
    "top": 5, "studies": 4, "pipeline": 3, "output": 2, "ground": 1, "helpers": 0,
}
HOMES = {
    "cli": "top", "__main__": "top", "study_store": "top",
    "theorem1": "studies", "collapse": "studies", "experiments": "studies", "robustness": "studies",
    "pipeline": "pipeline", "plots": "output", "publish": "output",
    "core": "ground", "data": "ground", "claim_registry": "ground", "dataset_registry": "ground",
    "infra": "helpers", "validation": "helpers", "settings": "helpers", "words": "helpers",
}
STUDY_USES = {("robustness", "experiments")}
"""The one study that builds on another: the claims' map trains the experiments' runs."""


def layer_violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    def home(module: str) -> str:
        return module.split(".")[1] if "." in module else ""

    bad = []
    for module, targets in graph.items():
        for target in targets:
            a, b = home(module), home(target)
            if not a or not b or a == b:
                continue
            up = LAYERS[HOMES[b]] > LAYERS[HOMES[a]]
            across = HOMES[a] == HOMES[b] == "studies" and (a, b) not in STUDY_USES
            if up or across:
                bad.append((module, target))
    return sorted(bad)


def test_every_folder_has_a_layer():
    folders = {p.name.removesuffix(".py") for p in ROOT.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert folders - {"__init__"} <= set(HOMES)


def test_imports_point_down_only():
    assert layer_violations(import_graph()) == []


def test_the_layer_check_finds_an_upward_import():
    assert layer_violations({"resgd.core.model": {"resgd.experiments.runs"}}) == [("resgd.core.model", "resgd.experiments.runs")]
    assert layer_violations({"resgd.collapse.study": {"resgd.theorem1.study"}}) == [("resgd.collapse.study", "resgd.theorem1.study")]
    assert layer_violations({"resgd.robustness.grid": {"resgd.experiments.study"}}) == []
