"""Outputs that survive: other code on a worker, interrupted publishes, stale locks and caches,
huge or odd input files and unclear settings, each inflicted on the real code."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- code identity of Dask workers


def test_the_source_hash_changes_with_an_edited_module_and_not_otherwise(tmp_path):
    from resgd import source_hash

    copy = tmp_path / "resgd"
    shutil.copytree(source_hash.package_root(), copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    assert source_hash.source_hash(copy) == source_hash.source_hash()
    step = copy / "core" / "train.py"
    step.write_text(step.read_text() + "\n# an edited step\n")
    source_hash._hash_of.cache_clear()
    assert source_hash.source_hash(copy) != source_hash.source_hash()
    assert source_hash.code_identity() == {"version": source_hash.package_version(), "source": source_hash.source_hash()}


@pytest.mark.parametrize("what", ["version", "source"])
def test_a_worker_running_other_resgd_code_refuses_the_task_and_nothing_is_cached(tmp_path, monkeypatch, what):
    """Before: a worker with another version and an edited step trained, and its result was cached
    under the client's key. After: one line naming the worker and both identities; nothing cached."""
    distributed = pytest.importorskip("distributed")
    from resgd import source_hash
    from resgd.pipeline.cache import ResultsCache
    from resgd.pipeline.sweep import CodeMismatchError, Task, cached_sweep
    from resgd.user_errors import describe

    real = source_hash.code_identity()
    if what == "version":  # the client differs from its workers: as a worker differs from its client
        monkeypatch.setattr(source_hash, "package_version", lambda: "9.9.9")
    else:
        monkeypatch.setattr(source_hash, "source_hash", lambda root=None: "0" * 64)
    cache = ResultsCache(tmp_path / "runs")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with pytest.raises(CodeMismatchError) as caught:
            cached_sweep([Task("k", abs, -3)], cache, n_jobs=1, scheduler=cluster.scheduler_address)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("Dask worker tcp://127.0.0.1:")
    assert f"runs resgd {real['version']} with sources sha256 {real['source']}" in message
    assert ("the client runs resgd 9.9.9" if what == "version" else "0" * 64) in message
    assert describe(caught.value) == (2, message)
    assert not list((tmp_path / "runs").glob("*.pkl"))
