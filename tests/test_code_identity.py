"""The code identity comes from the source as imported (:mod:`resgd.infra.source_hash`): stale bytecode
never runs under a new hash, a file edited after start stops the cache writes, a worker that imported
other code is refused."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import py_compile
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from resgd.infra import source_hash


def _stale_bytecode(path: Path, old: str, new: str) -> None:
    """``path`` holding ``old`` with a ``.pyc`` compiled from it (Python's default, checked by size and
    mtime), then edited to ``new`` of the same length with its mtime restored."""
    path.write_text(old)
    py_compile.compile(str(path), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP, doraise=True)
    stat = path.stat()
    path.write_text(new)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns


def test_an_edit_that_keeps_size_and_mtime_runs_the_new_code_under_the_new_hash(tmp_path):
    """An edit that keeps a file's size and mtime (which plain Python's ``.pyc`` check misses) runs the
    new code, and the hash is of those bytes; the ``.pyc`` is rewritten hash-checked."""
    copy = tmp_path / "resgd"
    shutil.copytree(source_hash.package_root(), copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    module = copy / "infra" / "processes.py"
    text = module.read_text()
    _stale_bytecode(module, text + "\nEDITED = 101\n", text + "\nEDITED = 202\n")
    stale = importlib.machinery.SourceFileLoader("probe", str(module)).get_code("probe")
    assert 101 in stale.co_consts and 202 not in stale.co_consts  # what plain Python runs: the old code
    script = ("import pathlib, resgd.infra.processes as p, resgd.infra.source_hash as s; "
              "print(p.EDITED, b'EDITED = 202' in s.imported_source(pathlib.Path(p.__file__).resolve()))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tmp_path)
    run = lambda: subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)  # noqa: E731
    out = run()
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["202", "True"]
    cached = Path(importlib.util.cache_from_source(str(module))).read_bytes()  # beside it, or under $PYTHONPYCACHEPREFIX
    assert cached[4:8] == source_hash.CHECKED_HASH_PYC  # rewritten hash-checked: plain Python checks it by content too
    assert run().stdout.split() == ["202", "True"]  # read from that cache


def test_a_module_imported_before_the_hook_with_stale_bytecode_is_recorded_as_stale(tmp_path, monkeypatch):
    """``resgd``, ``resgd.infra`` and this module are compiled before the hook exists: their bytecode is
    compared with what their source compiles to, and stale bytecode is recorded as such (no identity)."""
    monkeypatch.setattr(source_hash, "_IMPORTED", {})
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    path = tmp_path / "early.py"
    for old, new, expected in (("X = 101\n", "X = 202\n", source_hash.STALE), ("X = 101\n", "X = 101\n", b"X = 101\n")):
        _stale_bytecode(path, old, new)
        module = types.ModuleType("early")
        module.__spec__ = importlib.util.spec_from_file_location("early", path)
        source_hash._adopt(module)
        assert source_hash._IMPORTED[path.resolve()] == expected
    assert source_hash.code_text(source_hash.STALE) == source_hash.STALE  # hashed as no source's


def test_the_imported_hash_keeps_a_docstring_edit_and_names_a_constant_edit(monkeypatch):
    path = source_hash.package_root() / "core" / "hand_pass.py"
    source_hash.compute_hash()
    imported = source_hash._IMPORTED[path]
    text = imported.decode()
    start = text.index('"""') + 3

    def hashed(source: bytes) -> str:
        monkeypatch.setitem(source_hash._IMPORTED, path, source)
        source_hash.imported_hash.cache_clear()
        return source_hash.compute_hash()

    try:
        base = hashed(imported)
        assert hashed((text[:start] + "A docstring edit. " + text[start:] + "\n# a comment\n").encode()) == base
        assert hashed(imported + b"\nSTEP_CONSTANT = 1\n") != hashed(imported + b"\nSTEP_CONSTANT = 2\n")
    finally:
        monkeypatch.undo()
        source_hash.imported_hash.cache_clear()
    assert source_hash.compute_hash() == base


def test_a_cache_entry_is_not_written_once_a_compute_module_changed_on_disk(tmp_path, monkeypatch):
    """Before each cache write the files on disk are compared with what was imported: a docstring edit
    lets the write through, a change that computes stops it in one line and nothing is written (else
    the old code's numbers would be filed under the new code's hash)."""
    from resgd.infra.user_errors import describe
    from resgd.pipeline.cache import ResultsCache
    from resgd.validation import SourceChangedError

    path = source_hash.package_root() / "core" / "hand_pass.py"
    source_hash.compute_hash()  # every compute module imported
    on_disk = path.read_bytes()
    text = on_disk.decode()
    start = text.index('"""') + 3
    cache = ResultsCache(tmp_path)
    monkeypatch.setitem(source_hash._IMPORTED, path, (text[:start] + "An older docstring. " + text[start:]).encode())
    cache.write("a", 1)  # the process imported a hand_pass.py that differs in its docstring only
    assert cache.read("a") == 1
    monkeypatch.setitem(source_hash._IMPORTED, path, on_disk + b"\nOLD_CONSTANT = 1\n")
    with pytest.raises(SourceChangedError) as caught:
        cache.write("b", 2)
    message = str(caught.value)
    assert message == f"source files changed since this process started ({path}): rerun"
    assert describe(caught.value) == (2, message)
    assert not cache.path("b").exists()


def test_a_worker_whose_imported_code_differs_from_the_client_s_refuses_the_task(monkeypatch):
    """A worker reports the hash of the code it imported (not of its files on disk): one that imported
    other code refuses the task in one line naming the client's identity, without running it."""
    from resgd.core.engine import engine_path
    from resgd.pipeline.identity import CodeMismatchError
    from resgd.pipeline.sweep import _checked_call

    client = (source_hash.COMPUTE_ENTRIES, source_hash.code_identity())
    assert _checked_call((abs, -3, {}, client, engine_path()))[0] == 3
    path = source_hash.package_root() / "core" / "trainer.py"
    ran = []
    monkeypatch.setitem(source_hash._IMPORTED, path, source_hash._IMPORTED[path] + b"\nWORKER_ONLY = 1\n")
    source_hash.imported_hash.cache_clear()
    try:
        with pytest.raises(CodeMismatchError) as caught:
            _checked_call((ran.append, 1, {}, client, engine_path()))
    finally:
        monkeypatch.undo()
        source_hash.imported_hash.cache_clear()
    assert not ran and "\n" not in str(caught.value)
    assert f"the client runs resgd {client[1]['version']} with sources sha256 {client[1]['source']}" in str(caught.value)


def test_a_worker_s_identity_covers_the_cached_runs_and_its_task_s_own_code():
    """The identity a worker reports: the version and the hash of the code, as imported, of the cached
    runs' modules and of the module that defines its task (the Theorem 1 sweep's is outside the cache's)."""
    from resgd.infra import source_hash
    from resgd.theorem1 import sweep

    assert source_hash.entries_of([abs]) == source_hash.COMPUTE_ENTRIES
    entries = source_hash.entries_of([sweep.sweep_chunk])
    assert set(entries) == {*source_hash.COMPUTE_ENTRIES, "theorem1/sweep.py"}
    identity = source_hash.code_identity(entries)
    assert identity == {"version": source_hash.package_version(), "source": source_hash.imported_hash(entries)}
    assert identity["source"] != source_hash.compute_hash() == source_hash.code_identity()["source"]
