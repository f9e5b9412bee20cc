"""What code this process runs: the package version and a hash of the installed package's sources.

Why: a Dask worker (or a cache entry) computed by other ``resgd`` code gives other results under
the same key; comparing :func:`code_identity` before a task runs catches that. The hash covers
every ``.py`` file under the installed ``resgd`` package (path and content), so an
edited step changes it even when the version string does not. Computed once per process.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

SUFFIXES = (".py",)
CHUNK_BYTES = 1 << 20


def package_root() -> Path:
    """The folder of the ``resgd`` package this process imported."""
    import resgd

    return Path(resgd.__file__).resolve().parent


def package_version() -> str:
    import resgd

    return str(resgd.__version__)


@functools.lru_cache(maxsize=None)
def _hash_of(root: str) -> str:
    digest = hashlib.sha256()
    base = Path(root)
    files = sorted(p for p in base.rglob("*") if p.suffix in SUFFIXES and p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        digest.update(path.relative_to(base).as_posix().encode() + b"\0")
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()


def source_hash(root: str | Path | None = None) -> str:
    """SHA-256 (hex) over the ``.py`` files of the package at ``root`` (default: the
    imported ``resgd``), each as its relative path then its bytes, in sorted order; cached per root."""
    return _hash_of(str(Path(root).resolve() if root is not None else package_root()))


def code_identity() -> dict[str, str]:
    """``{"version": ..., "source": ...}`` of the code this process runs."""
    return {"version": package_version(), "source": source_hash()}


COMPUTE_ENTRIES = ("experiments/runs.py", "experiments/step_size.py", "robustness/limits.py", "robustness/map_runs.py")
"""The modules whose functions write cached numbers (the runs, L̂, the map's probes and runs). What a
cached number depends on is found from them (:func:`compute_modules`), not listed by hand."""


def _module_file(base: Path, dotted: str) -> Path | None:
    """The file of module ``resgd.a.b`` under the package folder ``base`` (None if not a module of it)."""
    path = base.joinpath(*dotted.split(".")[1:])
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _imported_files(base: Path, path: Path) -> set[Path]:
    """The files of the ``resgd`` modules that ``path`` imports anywhere in its text (function-level
    imports included), with the packages that hold them (their ``__init__`` runs too)."""
    import ast

    package = ["resgd", *path.relative_to(base).parent.parts]  # what a relative import starts from
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            anchor = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(anchor + ([node.module] if node.module else []))
            names.add(module)
            names |= {f"{module}.{a.name}" for a in node.names}  # `from . import runs` names a module
    files = set()
    for name in names:
        if name == "resgd" or name.startswith("resgd."):
            pieces = name.split(".")
            files |= {f for i in range(1, len(pieces) + 1) if (f := _module_file(base, ".".join(pieces[:i])))}
    return files


@functools.lru_cache(maxsize=None)
def _compute_files(root: str) -> tuple[Path, ...]:
    base = Path(root)
    todo, seen = [base / entry for entry in COMPUTE_ENTRIES], set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += sorted(_imported_files(base, path) - seen)
    return tuple(sorted(seen))


def compute_modules(root: str | Path | None = None) -> list[str]:
    """The package's files (relative paths) that a cached number can depend on: :data:`COMPUTE_ENTRIES`
    and everything they import, directly or not. Tables, verdicts, figures and pages are outside it
    (they read cached numbers without changing them), so editing them keeps the cache."""
    base = Path(root).resolve() if root is not None else package_root()
    return [p.relative_to(base).as_posix() for p in _compute_files(str(base))]


def code_text(source: str, filename: str = "<module>") -> bytes:
    """What of a module's source computes: its syntax tree without docstrings or other bare strings
    (comments are not in the tree), so editing a docstring or a comment does not change it."""
    import ast

    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [n for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                                             and isinstance(n.value.value, str))]
            node.body = kept or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False).encode()


@functools.lru_cache(maxsize=None)
def _compute_hash(root: str) -> str:
    digest = hashlib.sha256()
    base = Path(root)
    for path in _compute_files(root):
        text = code_text(path.read_text(encoding="utf-8"), str(path))
        digest.update(path.relative_to(base).as_posix().encode() + b"\0" + text + b"\0")
    return digest.hexdigest()


def compute_hash(root: str | Path | None = None) -> str:
    """SHA-256 (hex) over :func:`code_text` of :func:`compute_modules` of the package at ``root``
    (default: the imported ``resgd``): recorded in every run-cache entry, which only the same code
    uses (:class:`resgd.pipeline.cache.ResultsCache`)."""
    return _compute_hash(str(Path(root).resolve() if root is not None else package_root()))
