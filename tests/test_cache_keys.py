"""Every cached quantity is keyed by the data it was computed from: swapping the data under a warm
results folder reuses no entry (the runs and their L̂ alike); the key names the arithmetic, and the
run cache the code that computed each entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from resgd.data import spec as data_spec
from resgd.experiments import configuration, runs
from resgd.experiments.configuration import entry_key, matched_gains
from resgd.experiments.steps import theory_lr

from shared_data import shared_data_dir

SHARED = shared_data_dir("jena/jena_climate_2009_excerpt.csv") or Path(__file__).resolve().parents[2] / "shared" / "data"


def _forget_loaded_data():
    for cached in (data_spec._load, data_spec._fingerprint, matched_gains):
        cached.cache_clear()


def _warm(tmp_path, cache):
    s = configuration.settings("jena", True, N=8, n=4, n_test=4, iterations=3, seeds=1, depth_N=8, depth_iterations=3)
    lrs = {(beta, L): theory_lr(s, beta, L, 0.5, seed=0, cache_dir=cache) for beta, L in ((1.0, 1), (0.0, 2))}
    runs.run(s.config(0.0, 2, 0, lrs[(0.0, 2)], iterations=3), cache_dir=cache)
    return lrs, {p.name for p in Path(cache).glob("*.pkl")}


@pytest.mark.skipif(not (SHARED / "jena").is_dir(), reason="no real Jena data ($RESGD_DATA_DIR or ../shared/data)")
def test_swapping_the_data_under_a_warm_results_folder_reuses_no_entry(tmp_path, monkeypatch):
    cache = tmp_path / "results" / "cache"
    monkeypatch.setenv("RESGD_CACHE_DIR", str(tmp_path / "downloads"))
    monkeypatch.setenv("RESGD_OFFLINE", "1")
    monkeypatch.delenv("RESGD_DATA_DIR", raising=False)
    _forget_loaded_data()
    try:
        standin_steps, standin_entries = _warm(tmp_path, cache)  # no data folder: the stand-in
        monkeypatch.setenv("RESGD_DATA_DIR", str(SHARED))
        _forget_loaded_data()
        real_steps, all_entries = _warm(tmp_path, cache)  # the real excerpt, same results folder
    finally:
        _forget_loaded_data()
    assert len(standin_entries) == 3 and len(all_entries) == 6  # three new entries, none reused
    assert all(standin_steps[k] != real_steps[k] for k in standin_steps)


def test_the_key_names_kind_data_and_arithmetic_and_not_the_code(monkeypatch, tmp_path):
    """A docstring edit (any edit of the code) keeps every key, so a results-store entry stays
    addressable and is proven by re-execution; a run-cache entry records the code that computed it
    and another code does not use it."""
    s = configuration.settings("toy", True)
    config = s.config(1.0, 1, 0, 0.1, iterations=3)
    run, lhat = entry_key(config), entry_key(config, "smoothness/fast/20", dtype="float64")
    assert run != lhat and run == configuration.config_key(config)
    assert entry_key(config, fingerprint="other data") != run
    import resgd.core.engine as engine
    import resgd.infra.source_hash as source_hash

    runs.run(config, tmp_path)
    monkeypatch.setattr(engine, "engine_path_digest", lambda: "another engine")
    monkeypatch.setattr(source_hash, "compute_hash", lambda: "other code")
    assert entry_key(config) == run
    from resgd.pipeline.cache import ResultsCache

    assert ResultsCache(tmp_path).read(run) is None  # computed by other code: not used (silently)
    monkeypatch.undo()
    assert ResultsCache(tmp_path).read(run) is not None


RUNTIME_MODULES = """
import json, sys
from resgd.experiments import configuration, runs
from resgd.experiments.steps import warm_smoothness
from resgd.robustness import map_runs, limits  # noqa: F401
s = configuration.settings("toy", True)
runs.run(s.config(1.0, 1, 0, 0.1), sys.argv[1])
warm_smoothness([(s, 1.0, 1, None, 0)], n_jobs=1, cache_dir=sys.argv[1])
print(json.dumps(sorted(m.__file__ for n, m in list(sys.modules.items()) if n.startswith("resgd") and getattr(m, "__file__", None))))
"""


def test_the_cache_key_covers_every_module_a_cached_number_is_computed_with(tmp_path):
    """Found from the code: every module of the package that a run and an L̂ import while they are
    computed is in :func:`compute_modules`, except those that only read cached numbers (study, tables,
    plots) and the plumbing that carries them (:data:`resgd.infra.source_hash.OUTSIDE_KEY`)."""
    import json
    import subprocess
    import sys

    from resgd.infra.source_hash import OUTSIDE_KEY, compute_modules, package_root

    out = subprocess.run([sys.executable, "-c", RUNTIME_MODULES, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    root = package_root()
    loaded = {Path(f).resolve().relative_to(root).as_posix() for f in json.loads(out.stdout.strip().splitlines()[-1])}
    covered = set(compute_modules())
    readers = {m for m in loaded if m.startswith(("plots/", "experiments/study.py", "experiments/results.py",
                                                   "experiments/pages.py", "experiments/design.py",
                                                   "experiments/claims.py", "experiments/decisions.py",
                                                   "experiments/readout_closed_form.py", "pipeline/reproduce.py",
                                                   "infra/mode_stamp.py", "claim_registry.py", "words.py"))}
    readers |= set(OUTSIDE_KEY) & loaded  # the plumbing: carries numbers without computing them
    assert loaded - readers <= covered, sorted(loaded - readers - covered)
    assert "experiments/runs.py" in covered  # computes the cached test loss and accuracies
    assert not covered & readers  # editing a table or a figure keeps the cache


def _offset(lines: list[bytes], lineno: int, col: int) -> int:
    """The byte offset of an AST position (``col`` counts UTF-8 bytes)."""
    return sum(len(line) for line in lines[: lineno - 1]) + col


def _with_docstrings_edited(source: bytes) -> bytes:
    """``source`` with "Edited. " written into every docstring (module, class, function)."""
    import ast

    lines, at = source.splitlines(keepends=True), []
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            start = _offset(lines, body[0].lineno, body[0].col_offset)
            opening = len(source[start:]) - len(source[start:].lstrip(b"rRuU"))
            opening += 3 if source[start + opening:start + opening + 3] in (b'"""', b"'''") else 1
            at.append(start + opening)
    for position in sorted(at, reverse=True):
        source = source[:position] + b"Edited. " + source[position:]
    return source


def _with_a_constant_edited(source: bytes) -> bytes:
    """``source`` with its first number (else its first string that is not a bare docstring) changed;
    a module that holds neither gets a constant."""
    import ast

    tree, lines = ast.parse(source), source.splitlines(keepends=True)
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}  # bare strings
    in_fstrings = {id(c) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for c in ast.walk(node)}
    constants = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Constant) and id(node) not in docstrings
                        and id(node) not in in_fstrings and type(node.value) in (int, float, str)),
                       key=lambda n: (not isinstance(n.value, (int, float)), n.lineno, n.col_offset))
    if not constants:
        return source + b"\nEDITED_CONSTANT = 1\n"
    node = constants[0]
    edited = repr(node.value + 1 if isinstance(node.value, (int, float)) else node.value + "!")
    start, end = _offset(lines, node.lineno, node.col_offset), _offset(lines, node.end_lineno, node.end_col_offset)
    return source[:start] + edited.encode() + source[end:]


@pytest.fixture
def package_copy(tmp_path):
    """A copy of the package's sources to edit, with the hash of its computing modules."""
    import shutil

    from resgd.infra import source_hash

    copy = tmp_path / "resgd"
    shutil.copytree(source_hash.package_root(), copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    before = source_hash.tree_hash(copy)
    assert before == source_hash.compute_hash()  # the files as imported are the files on disk
    return copy, before


def test_a_docstring_or_comment_edit_in_every_computing_module_keeps_the_key(package_copy):
    from resgd.infra import source_hash

    copy, before = package_copy
    computing = source_hash.compute_modules(copy)
    for relative in computing:
        path = copy / relative
        path.write_bytes(_with_docstrings_edited(path.read_bytes()) + b"\n# a comment\n")
    assert b"Edited. " in (copy / "core" / "hand_pass.py").read_bytes()
    assert source_hash.compute_modules(copy) == computing
    assert source_hash.tree_hash(copy) == before


def test_an_edited_constant_in_any_computing_module_changes_the_key(package_copy):
    from resgd.infra import source_hash

    copy, before = package_copy
    unchanged = []
    for relative in source_hash.compute_modules(copy):
        path = copy / relative
        source = path.read_bytes()
        path.write_bytes(_with_a_constant_edited(source))
        if source_hash.tree_hash(copy) == before:
            unchanged.append(relative)
        path.write_bytes(source)
    assert not unchanged
    assert source_hash.tree_hash(copy) == before


def test_error_messages_plumbing_and_figures_are_outside_the_key(package_copy):
    """A reworded error message, any edit to the cache, the store, the sweeps and their backends, the
    settings and the checks (:data:`OUTSIDE_KEY`), and a figure edit keep every cached run."""
    from resgd.infra import source_hash

    copy, before = package_copy
    errors = copy / "infra" / "user_errors.py"
    message = b"the disk is full: free some space"
    assert message in errors.read_bytes()
    errors.write_bytes(errors.read_bytes().replace(message, b"no space is left on the disk: free some"))
    for relative in (*source_hash.OUTSIDE_KEY, "plots/experiments.py"):
        path = copy / relative
        path.write_bytes(path.read_bytes() + b"\nEDITED_CONSTANT = 1\n")
    assert source_hash.tree_hash(copy) == before
    assert {"infra/user_errors.py", "pipeline/dask_backend.py", "settings.py"} <= set(source_hash.OUTSIDE_KEY)


def test_the_modules_outside_the_key_exist_and_no_compute_entry_is_among_them():
    from resgd.infra import source_hash

    root = source_hash.package_root()
    assert [m for m in source_hash.OUTSIDE_KEY if not (root / m).is_file()] == []
    assert not set(source_hash.COMPUTE_ENTRIES) & set(source_hash.OUTSIDE_KEY)
