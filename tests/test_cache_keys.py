"""Every cached quantity is keyed by the data it was computed from: swapping the data under a warm
results folder reuses no entry (the runs and their L̂ alike); the key names the arithmetic, and the
run cache the code that computed each entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from resgd.data import spec as data_spec
from resgd.experiments import study as ex
from resgd.experiments.run_config import entry_key
from resgd.experiments.twin import matched_gains

from shared_data import shared_data_dir

SHARED = shared_data_dir("jena/jena_climate_2009_excerpt.csv") or Path(__file__).resolve().parents[2] / "shared" / "data"


def _forget_loaded_data():
    for cached in (data_spec._load, data_spec.data_fingerprint, matched_gains):
        cached.cache_clear()


def _warm(tmp_path, cache):
    s = ex.settings("jena", True, N=8, n=4, n_test=4, iterations=3, seeds=1, depth_N=8, depth_iterations=3)
    lrs = {(beta, L): ex.theory_lr(s, beta, L, 0.5, seed=0, cache_dir=cache) for beta, L in ((1.0, 1), (0.0, 2))}
    ex.run(s.config(0.0, 2, 0, lrs[(0.0, 2)], iterations=3), cache_dir=cache)
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
    s = ex.settings("toy", True)
    config = s.config(1.0, 1, 0, 0.1, iterations=3)
    run, lhat = entry_key(config), entry_key(config, "smoothness/fast/20", dtype="float64")
    assert run != lhat and run == ex.config_key(config)
    assert entry_key(config, fingerprint="other data") != run
    import resgd.core.engine as engine
    import resgd.infra.source_hash as source_hash

    ex.run(config, tmp_path)
    monkeypatch.setattr(engine, "engine_path_digest", lambda: "another engine")
    monkeypatch.setattr(source_hash, "compute_hash", lambda: "other code")
    assert entry_key(config) == run
    from resgd.pipeline.cache import ResultsCache

    assert ResultsCache(tmp_path).read(run) is None  # computed by other code: not used (silently)
    monkeypatch.undo()
    assert ResultsCache(tmp_path).read(run) is not None


RUNTIME_MODULES = """
import json, sys
from resgd.experiments import study as ex
from resgd.experiments.step_size import warm_smoothness
from resgd.robustness import map_runs, limits  # noqa: F401
s = ex.settings("toy", True)
ex.run(s.config(1.0, 1, 0, 0.1), sys.argv[1])
warm_smoothness([(s, 1.0, 1, None, 0)], n_jobs=1, cache_dir=sys.argv[1])
print(json.dumps(sorted(m.__file__ for n, m in list(sys.modules.items()) if n.startswith("resgd") and getattr(m, "__file__", None))))
"""


def test_the_cache_key_covers_every_module_a_cached_number_is_computed_with(tmp_path):
    """Found from the code: every module of the package that a run and an L̂ import while they are
    computed (study, tables and plots are imported too, and are allowed not to be covered: they only
    read cached numbers) is in :func:`compute_modules`."""
    import json
    import subprocess
    import sys

    from resgd.infra.source_hash import compute_modules, package_root

    out = subprocess.run([sys.executable, "-c", RUNTIME_MODULES, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    root = package_root()
    loaded = {Path(f).resolve().relative_to(root).as_posix() for f in json.loads(out.stdout.strip().splitlines()[-1])}
    covered = set(compute_modules())
    readers = {m for m in loaded if m.startswith(("plots/", "experiments/study.py", "experiments/tables.py",
                                                   "experiments/results.py", "experiments/figures.py",
                                                   "experiments/page_tables.py", "experiments/page_numbers.py",
                                                   "experiments/result_files.py", "experiments/choices.py",
                                                   "experiments/claims.py", "experiments/rules.py",
                                                   "experiments/verdict_files.py", "experiments/design.py",
                                                   "experiments/readout_link.py", "pipeline/reproduce.py",
                                                   "infra/mode_stamp.py", "claim_registry.py", "words.py"))}
    assert loaded - readers <= covered, sorted(loaded - readers - covered)
    assert "experiments/metrics.py" in covered  # computes the cached test loss and accuracies
    assert not covered & readers  # editing a table or a figure keeps the cache


def test_an_edited_compute_module_changes_the_code_hash_and_an_edited_figure_or_docstring_does_not(tmp_path):
    import shutil

    from resgd.infra import source_hash

    copy = tmp_path / "resgd"
    shutil.copytree(source_hash.package_root(), copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    before = source_hash.tree_hash(copy)
    assert before == source_hash.compute_hash()  # the files as imported are the files on disk
    (copy / "plots" / "experiments.py").write_text((copy / "plots" / "experiments.py").read_text() + "\n# a figure edit\n")
    assert source_hash.tree_hash(copy) == before
    step = copy / "core" / "hand_pass.py"
    text = step.read_text()
    start = text.index('"""') + 3
    step.write_text(text[:start] + "A docstring edit. " + text[start:] + "\n# a comment\n")
    assert source_hash.tree_hash(copy) == before  # docstrings and comments do not compute
    (copy / "experiments" / "metrics.py").write_text((copy / "experiments" / "metrics.py").read_text() + "\nEDITED = 1\n")
    assert source_hash.tree_hash(copy) != before
