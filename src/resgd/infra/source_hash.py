"""What code this process runs: the package version and a hash of its compute modules' source *as imported*.

Why: a run-cache entry, or a Dask worker's result, computed by other ``resgd`` code gives other
numbers under the same key. Hashing the files as they are on disk named the wrong code: an edit that
keeps a file's size and mtime makes Python run its old ``.pyc`` (checked by size and mtime only)
under the new source's hash; a file edited while a sweep runs gave later entries the new hash for
the old code; a worker with stale bytecode passed the code check. So the identity comes from the
bytes that were compiled, once per process:

* ``resgd/__init__`` calls :func:`record_imports` before it imports anything else: from then on every
  module of the package is compiled from source bytes recorded as they are read, and its ``.pyc``
  is used only when it is hash-checked against those bytes (and written that way, PEP 552, which
  plain Python checks by content too), so stale bytecode never runs. The modules imported before
  the hook (``resgd``, ``resgd.infra``, this one) are recorded right after, their bytecode compared
  with what those bytes compile to; a mismatch is recorded as :data:`STALE` (that process caches
  nothing, and its identity matches no one's).
* :func:`compute_hash` (recorded in every run-cache entry) and :func:`code_identity` (a worker's)
  hash the recorded bytes of the modules a result depends on (:func:`compute_modules`), without
  docstrings and comments (:func:`code_text`), so a docstring edit keeps the cache.
* :func:`check_unchanged`, run before a cache entry is written, compares the files on disk with
  what was imported: an edit since the process started is :class:`resgd.validation.SourceChangedError`.

This module imports only the standard library: it runs before the arithmetic is pinned.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import marshal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import CodeType

PACKAGE = __name__.split(".")[0]
STALE = b"\0bytecode not compiled from this file\0"
"""Recorded instead of a module's source when the bytecode it ran was not compiled from it."""
CHECKED_HASH_PYC = (0b11).to_bytes(4, "little")
"""A ``.pyc`` header's flags: hash-based, checked against the source (PEP 552)."""

_IMPORTED: dict[Path, bytes] = {}


def package_root() -> Path:
    """The folder of the ``resgd`` package this process imported (this module's grandparent)."""
    return Path(__file__).resolve().parents[1]


def package_version() -> str:
    return str(sys.modules[PACKAGE].__version__)  # not `import resgd`: it imports this module first


# --------------------------------------------------------------------------- recording what is imported


def _bytecode(path: str) -> bytes:
    try:
        with open(importlib.util.cache_from_source(path), "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _header(source: bytes) -> bytes:
    """The first 16 bytes of the hash-checked ``.pyc`` of ``source``: magic number, flags, hash of ``source``."""
    return importlib.util.MAGIC_NUMBER + CHECKED_HASH_PYC + importlib.util.source_hash(source)


def _write_bytecode(name: str, path: str, code: CodeType, source: bytes) -> None:
    """Cache ``code`` as the hash-checked ``.pyc`` of ``source`` (failures ignored, as Python ignores them)."""
    if not sys.dont_write_bytecode:
        loader = importlib.machinery.SourceFileLoader(name, path)
        loader.set_data(importlib.util.cache_from_source(path), _header(source) + marshal.dumps(code))


class _RecordingLoader(importlib.machinery.SourceFileLoader):
    """Compiles a module from the bytes it records; its ``.pyc`` only when hash-checked against them."""

    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        source = self.get_data(path)
        _IMPORTED[Path(path).resolve()] = source
        data = _bytecode(path)
        if data[:16] == _header(source):
            try:
                return marshal.loads(data[16:])
            except (EOFError, ValueError, TypeError):
                pass  # a damaged cache: compiled again below
        code = self.source_to_code(source, path)
        _write_bytecode(fullname, path, code, source)
        return code


class _RecordingFinder:
    """Gives every module of the package (a source file) a :class:`_RecordingLoader`."""

    @staticmethod
    def find_spec(name: str, path=None, target=None):
        if not name.startswith(PACKAGE + "."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and type(spec.loader) is importlib.machinery.SourceFileLoader:
            spec.loader = _RecordingLoader(name, spec.origin)
        return spec


def _run_by_python(data: bytes, path: str) -> bool:
    """Whether Python's own loader runs the ``.pyc`` ``data`` rather than compile ``path`` (PEP 552):
    a timestamp ``.pyc`` whose recorded mtime and size are the file's, or an unchecked hash-based one."""
    if data[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags = int.from_bytes(data[4:8], "little")
    if flags == 0:
        stat = Path(path).stat()
        return data[8:16] == (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    return flags == 0b01


def _adopt(module) -> None:
    """Record a module imported before the hook: the bytes on disk now, or :data:`STALE` when the
    bytecode Python ran for it (its ``.pyc``, where Python's rules take it) is not what they compile to."""
    path = module.__spec__.origin
    source = Path(path).read_bytes()
    data = _bytecode(path)
    if data[:16] != _header(source):
        code = compile(source, path, "exec", dont_inherit=True)
        try:
            stale = _run_by_python(data, path) and marshal.loads(data[16:]) != code
        except (EOFError, ValueError, TypeError):
            stale = False  # unreadable: Python compiled the source
        if stale:
            source = STALE
        else:
            _write_bytecode(module.__name__, path, code, source)
    _IMPORTED[Path(path).resolve()] = source


def record_imports() -> None:
    """Record the source of every module of the package, as compiled (see the module's docstring)."""
    if _RecordingFinder not in sys.meta_path:
        sys.meta_path.insert(0, _RecordingFinder)
    for name, module in list(sys.modules.items()):
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        if (name == PACKAGE or name.startswith(PACKAGE + ".")) and origin and Path(origin).resolve() not in _IMPORTED:
            _adopt(module)


def _module_name(base: Path, path: Path) -> str:
    parts = path.relative_to(base).with_suffix("").parts
    return ".".join((PACKAGE, *parts[: -1 if parts[-1] == "__init__" else None]))


def imported_source(path: Path) -> bytes:
    """The bytes the module at ``path`` (a file of the imported package) was compiled from, importing
    it first if this process has not."""
    if path not in _IMPORTED:
        importlib.import_module(_module_name(package_root(), path))
    try:
        return _IMPORTED[path]
    except KeyError:
        raise RuntimeError(f"{path} was imported before resgd.infra.source_hash.record_imports ran") from None


# --------------------------------------------------------------------------- what a cached number depends on

COMPUTE_ENTRIES = ("experiments/runs.py", "experiments/steps.py", "robustness/limits.py", "robustness/map_runs.py")
"""The modules whose functions write cached numbers (the runs, L̂, the theorem's path-step runs, the
map's probes and runs), in sorted order. What a
cached number depends on is found from them (:func:`compute_modules`), not listed by hand."""


OUTSIDE_KEY = ("data/download.py", "data/locations.py", "data/npzcache.py",
               "infra/atomic.py", "infra/builds.py", "infra/file_lock.py", "infra/processes.py", "infra/source_hash.py",
               "infra/threads.py", "infra/user_errors.py",
               "pipeline/cache.py", "pipeline/dask_backend.py", "pipeline/frame_codec.py", "pipeline/identity.py",
               "pipeline/local_backend.py", "pipeline/polling.py", "pipeline/store.py", "pipeline/sweep.py",
               "settings.py", "validation.py")
"""The modules that carry numbers without computing them: where data files are and how they are
fetched and cached, writes, locks, published builds, processes and threads, error messages and argument checks,
the run cache and the results store, the sweeps and their local and Dask backends, the settings.
The key neither hashes them nor follows their imports, so rewording an error or changing how runs
are scheduled keeps every cached run. What they choose that a number depends on is keyed apart:
the data (which file, however cached) by its fingerprint, the arithmetic by its description
(:func:`resgd.experiments.configuration.entry_key`). A module not listed here is in the key when a
compute entry imports it, so a new module costs a recomputation at worst; a computing module that
only these import would fall outside, which ``tests/test_cache_keys.py`` rules out from the modules
a run and an L̂ import."""


def _module_file(base: Path, dotted: str) -> Path | None:
    """The file of module ``resgd.a.b`` under the package folder ``base`` (None if not a module of it)."""
    path = base.joinpath(*dotted.split(".")[1:])
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _imported_files(base: Path, path: Path, source: bytes) -> set[Path]:
    """The files of the ``resgd`` modules that ``path`` (whose text is ``source``) imports anywhere in
    its text (function-level imports included), with the packages that hold them (their ``__init__`` runs too)."""
    import ast

    package = [PACKAGE, *path.relative_to(base).parent.parts]  # what a relative import starts from
    names: set[str] = set()
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            anchor = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(anchor + ([node.module] if node.module else []))
            names.add(module)
            names |= {f"{module}.{a.name}" for a in node.names}  # `from . import runs` names a module
    files = set()
    for name in names:
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            pieces = name.split(".")
            files |= {f for i in range(1, len(pieces) + 1) if (f := _module_file(base, ".".join(pieces[:i])))}
    return files


def _closure(base: Path, entries: Iterable[str], read: Callable[[Path], bytes]) -> tuple[Path, ...]:
    """``entries`` (paths relative to ``base``) and every package file they import, directly or not,
    except through :data:`OUTSIDE_KEY`."""
    todo, seen = [base / entry for entry in entries], set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            source = read(path)
            if source is not STALE:
                todo += sorted(_imported_files(base, path, source) - seen - {base / m for m in OUTSIDE_KEY})
    return tuple(sorted(seen))


def compute_modules(root: str | Path | None = None) -> list[str]:
    """The package's files (relative paths) that a cached number can depend on: :data:`COMPUTE_ENTRIES`
    and everything they import, directly or not, except the plumbing (:data:`OUTSIDE_KEY`), as the
    files at ``root`` are now (default: the imported ``resgd``). Tables, verdicts, figures and pages
    are outside it (they read cached numbers without changing them), so editing them keeps the cache."""
    base = Path(root).resolve() if root is not None else package_root()
    return [p.relative_to(base).as_posix() for p in _closure(base, COMPUTE_ENTRIES, Path.read_bytes)]


def code_text(source: str | bytes, filename: str = "<module>") -> bytes:
    """What of a module's source computes: its syntax tree without docstrings or other bare strings
    (comments are not in the tree), so editing a docstring or a comment does not change it."""
    import ast

    if source is STALE:
        return STALE
    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [n for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                                             and isinstance(n.value.value, str))]
            node.body = kept or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False).encode()


def _digest(base: Path, files: Iterable[Path], read: Callable[[Path], bytes]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(base).as_posix().encode() + b"\0" + code_text(read(path), str(path)) + b"\0")
    return digest.hexdigest()


def tree_hash(root: str | Path, entries: Iterable[str] = COMPUTE_ENTRIES) -> str:
    """:func:`compute_hash` of the package files at ``root`` as they are on disk (a checkout not imported)."""
    base = Path(root).resolve()
    return _digest(base, _closure(base, entries, Path.read_bytes), Path.read_bytes)


@functools.lru_cache(maxsize=None)
def _imported_files_of(entries: tuple[str, ...]) -> tuple[Path, ...]:
    return _closure(package_root(), entries, imported_source)


@functools.lru_cache(maxsize=None)
def imported_hash(entries: tuple[str, ...] = COMPUTE_ENTRIES) -> str:
    """SHA-256 (hex) over :func:`code_text` of ``entries`` and every package module they import, as this
    process imported them (each imported now if it was not yet)."""
    return _digest(package_root(), _imported_files_of(entries), imported_source)


def compute_hash() -> str:
    """The code of every cached number, as this process imported it (:func:`imported_hash` of
    :data:`COMPUTE_ENTRIES`): recorded in every run-cache entry, which only the same code uses
    (:class:`resgd.pipeline.cache.ResultsCache`)."""
    return imported_hash(COMPUTE_ENTRIES)


def entries_of(functions: Iterable[object]) -> tuple[str, ...]:
    """:data:`COMPUTE_ENTRIES` and the package modules that define ``functions`` (a sweep's tasks: a
    worker's identity covers the code its task runs, e.g. the Theorem 1 sweep, besides the cached runs)."""
    base, found = package_root(), set(COMPUTE_ENTRIES)
    for function in functions:
        module = sys.modules.get(getattr(function, "__module__", None) or "")
        name = getattr(module, "__name__", "")
        if (name == PACKAGE or name.startswith(PACKAGE + ".")) and getattr(module, "__file__", None):
            found.add(Path(module.__file__).resolve().relative_to(base).as_posix())
    return tuple(sorted(found))


def code_identity(entries: tuple[str, ...] = COMPUTE_ENTRIES) -> dict[str, str]:
    """``{"version": ..., "source": ...}`` of the code this process runs for ``entries``, as imported."""
    return {"version": package_version(), "source": imported_hash(tuple(entries))}


def check_unchanged() -> None:
    """:class:`resgd.validation.SourceChangedError` unless every file that :func:`compute_hash` covers
    still holds the code this process imported (an edited docstring or comment is no change): else a
    cache entry would store numbers of the old code under a key a new process reads as the new code's."""
    changed = []
    for path in _imported_files_of(COMPUTE_ENTRIES):
        imported = _IMPORTED[path]
        try:
            now = path.read_bytes()
        except OSError:
            changed.append(path)
            continue
        if now != imported and (imported is STALE or _parsed(now, path) != code_text(imported, str(path))):
            changed.append(path)
    if changed:
        from ..validation import SourceChangedError

        raise SourceChangedError(f"source files changed since this process started ({', '.join(map(str, changed))}): rerun")


def _parsed(source: bytes, path: Path) -> bytes | None:
    """:func:`code_text` of ``source``, or None when it does not parse (a file being written)."""
    try:
        return code_text(source, str(path))
    except (SyntaxError, ValueError):
        return None
