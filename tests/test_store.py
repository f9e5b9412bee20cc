"""The results store: tables stored without pickle and given back exactly, a manifest that cannot
send a reader outside the store, and a verification that fails for each way a store can be wrong
(a number edited, an entry relabelled, a code change that moves one arm's numbers) and passes a
docstring edit. The toy store is made by the same ``refresh`` that ``make results`` runs."""

from __future__ import annotations

import functools

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from resgd import study_store
from resgd.experiments import runs
from resgd.experiments.configuration import settings
from resgd.experiments.runs import sweep
from resgd.experiments.steps import PATH_KIND
from resgd.experiments.steps import warm_smoothness
from resgd.infra import arithmetic
from resgd.pipeline import frame_codec, store, stored_tables
from resgd.pipeline.store import Store, StoreError, StoreIncomplete

ROOT = Path(__file__).resolve().parents[1]
BETAS = (0.0, 1.0)


def toy_design(n_jobs=1, scheduler=None, progress=False):
    """A design of 8 runs (2 β × 2 depths × 2 seeds) and one L̂ on the toy data set."""
    s = settings("toy", True)
    sweep([s.config(b, L, seed, 0.05, iterations=30) for b in BETAS for L in (1, 2) for seed in (0, 1)],
             n_jobs=n_jobs, scheduler=scheduler)
    warm_smoothness([(s, 1.0, 1, None, 0)], n_jobs=n_jobs)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A toy store made by ``refresh`` (module-wide; each test copies it)."""
    base = tmp_path_factory.mktemp("made")
    old = os.environ.get("RESGD_RESULTS_DIR")
    os.environ["RESGD_RESULTS_DIR"] = str(base / "results")
    try:
        counts = study_store.refresh(base / "store", n_jobs=1, compute=toy_design, progress=False, out=lambda _: None)
    finally:
        os.environ.pop("RESGD_RESULTS_DIR") if old is None else os.environ.update(RESGD_RESULTS_DIR=old)
    return base / "store", counts


def _verify(root, **kw):
    return study_store.verify(root, n_jobs=1, seed="test", report_dir=root.parent / "report", progress=False,
                              out=lambda _: None, **kw)


# ------------------------------------------------------------------------------------------ the codec

def test_a_run_table_comes_back_exactly_and_its_bytes_are_its_address():
    s = settings("toy", True)
    frame = runs._compute(s.config(0.5, 1, 0, 0.05, iterations=25))
    data = frame_codec.encode(frame)
    back = frame_codec.decode(data)
    pd.testing.assert_frame_equal(back, frame, check_exact=True)
    assert list(back.dtypes) == list(frame.dtypes)
    assert frame_codec.encode(back) == data  # equal tables, equal bytes
    with np.load(__import__("io").BytesIO(data), allow_pickle=False) as archive:  # readable without pickle
        assert "header" in archive.files


def test_constant_nan_and_text_columns_and_an_empty_table_come_back():
    frame = pd.DataFrame({"a": [1.5, np.nan, -0.0], "b": [np.nan] * 3, "c": ["x", "x", "x"], "d": [True, False, True],
                          "e": np.array([3, 3, 3], dtype=np.int64)})
    back = frame_codec.decode(frame_codec.encode(frame))
    pd.testing.assert_frame_equal(back, frame, check_exact=True)
    assert np.signbit(back["a"].iloc[2])  # -0.0 kept
    empty = frame.iloc[:0].reset_index(drop=True)
    pd.testing.assert_frame_equal(frame_codec.decode(frame_codec.encode(empty)), empty, check_exact=True)


def test_a_column_that_would_need_pickle_is_refused():
    with pytest.raises(frame_codec.FrameFormatError, match="column 'x'.*only strings"):
        frame_codec.encode(pd.DataFrame({"x": [1, "a"]}, dtype=object))
    with pytest.raises(frame_codec.FrameFormatError, match="not a readable table"):
        frame_codec.decode(b"PK\x03\x04 not a zip")


# ------------------------------------------------------------------------------------------ the manifest

def _manifest(root):
    return json.loads((root / "manifest.json").read_text())


def _rewrite(root, manifest):
    (root / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("path", ["../outside.npz", "/etc/passwd", "objects/../../x.npz", "objects/ab/../../../x.npz"])
def test_a_manifest_naming_a_path_outside_the_store_is_refused_before_anything_is_read(store_copy, path):
    manifest = _manifest(store_copy)
    key = sorted(manifest["entries"])[0]
    manifest["entries"][key]["object"] = path
    _rewrite(store_copy, manifest)
    with pytest.raises(StoreError, match=rf"manifest.json: entry '{key}': field 'object'.*inside the store"):
        Store(store_copy)


def test_an_object_that_is_a_link_out_of_the_store_is_not_followed(store_copy, tmp_path):
    st = Store(store_copy)
    key = sorted(st.entries)[0]
    target = store_copy / st.entries[key]["object"]
    outside = tmp_path / "outside.npz"
    shutil.copy(target, outside)
    target.unlink()
    target.symlink_to(outside)
    with pytest.raises(StoreError, match="outside the store"):
        st.get(key)


def test_a_damaged_manifest_names_its_file_and_the_field(store_copy):
    (store_copy / "manifest.json").write_text('{"format": "resgd-store/0", "entries": {}}')
    with pytest.raises(StoreError, match=r"manifest.json: field 'format' is 'resgd-store/0', expected 'resgd-store/1'"):
        Store(store_copy)
    (store_copy / "manifest.json").write_text("{")
    with pytest.raises(StoreError, match="not a readable manifest"):
        Store(store_copy)


# ------------------------------------------------------------------------------------------ refresh

def test_refresh_fills_the_store_and_a_second_refresh_changes_nothing(made, store_copy):
    counts = made[1]
    assert counts["entries"] == 9 and counts["added"] == 9 and counts["removed"] == counts["moved"] == 0
    assert all(r["cpu_s"] > 0 for r in Store(store_copy).entries.values())  # each measured where it was computed
    before = {p.relative_to(store_copy): p.read_bytes() for p in store_copy.rglob("*") if p.is_file()}
    again = study_store.refresh(store_copy, n_jobs=1, compute=toy_design, progress=False, out=lambda _: None)
    assert again["added"] == again["removed"] == again["moved"] == again["stale"] == 0
    after = {p.relative_to(store_copy): p.read_bytes() for p in store_copy.rglob("*") if p.is_file()}
    assert after == before  # bit-identical: nothing for git to add


def test_refresh_drops_what_the_design_no_longer_uses_and_the_objects_with_it(store_copy):
    def smaller(n_jobs=1, scheduler=None, progress=False):
        s = settings("toy", True)
        sweep([s.config(1.0, 1, 0, 0.05, iterations=30)], n_jobs=n_jobs)

    counts = study_store.refresh(store_copy, n_jobs=1, compute=smaller, progress=False, out=lambda _: None)
    assert counts["entries"] == 1 and counts["removed"] == 8
    assert len(list((store_copy / "objects").glob("*/*.npz"))) == 1


def test_a_missing_result_under_require_is_one_error_naming_the_count_and_make_results(store_copy, monkeypatch):
    monkeypatch.setenv("RESGD_STORE_DIR", str(store_copy))
    monkeypatch.setenv("RESGD_STORE", "require")
    s = settings("toy", True)
    stored = [s.config(b, 1, 0, 0.05, iterations=30) for b in BETAS]
    swept = sweep(stored, n_jobs=1, cache_dir=store_copy.parent / "cache")  # all in the store: read, no work
    assert len(swept) == 2 * 31
    with pytest.raises(StoreIncomplete, match=r"lacks 1 of the 3 results asked for.*run `make results`"):
        sweep([*stored, s.config(0.5, 1, 0, 0.05, iterations=30)], n_jobs=1, cache_dir=store_copy.parent / "cache")


def test_require_without_any_store_is_an_error_too(tmp_path, monkeypatch):
    monkeypatch.setenv("RESGD_STORE_DIR", str(tmp_path / "no store"))
    monkeypatch.setenv("RESGD_STORE", "require")
    s = settings("toy", True)
    with pytest.raises(StoreIncomplete, match="there is no results store .*no manifest.json.*make results"):
        sweep([s.config(1.0, 1, 0, 0.05, iterations=3)], n_jobs=1, cache_dir=tmp_path / "cache")


# ------------------------------------------------------------------------------------------ verify

def test_verify_passes_the_store_refresh_made(store_copy):
    report = _verify(store_copy)
    assert report["ok"] and report["entries"] == 9 and report["runs"] == 8
    assert len(report["sample"]) == 3  # one per shape: run L=1, run L=2, L̂
    assert json.loads((store_copy.parent / "report" / "verification.json").read_text())["ok"]


def test_verify_fails_a_number_edited_inside_an_entry(store_copy):
    st = Store(store_copy)
    key = sorted(k for k in st.entries if st.entries[k]["kind"] == "run")[0]
    path = store_copy / st.entries[key]["object"]
    frame = st.get(key)
    frame.loc[3, "loss"] = np.nextafter(frame.loc[3, "loss"], np.inf)  # one bit of one number
    path.write_bytes(frame_codec.encode(frame))
    with pytest.raises(study_store.VerifyFailed, match=r"1 of 9 stored entries .* \(1 by checksum\)"):
        _verify(store_copy)


def test_verify_fails_an_edited_number_whose_checksum_was_updated_too(store_copy):
    st = Store(store_copy)
    key = sorted(k for k in st.entries if st.entries[k]["kind"] == "run")[0]
    frame = st.get(key)
    frame.loc[3, "loss"] = np.nextafter(frame.loc[3, "loss"], np.inf)
    st.put(key, frame, {f: st.entries[key][f] for f in ("kind", "config", "dtype", "data")})
    st.save(arithmetic.describe())
    with pytest.raises(study_store.VerifyFailed, match=r"1 of 9 .*\(1 by first iterations\)"):
        _verify(store_copy)


def test_verify_fails_an_entry_filed_under_another_key(store_copy):
    manifest = _manifest(store_copy)
    a, b = sorted(k for k, r in manifest["entries"].items() if r["kind"] == "run")[:2]
    manifest["entries"][a], manifest["entries"][b] = manifest["entries"][b], manifest["entries"][a]
    _rewrite(store_copy, manifest)
    with pytest.raises(study_store.VerifyFailed, match=r"2 of 9 .*\(2 by key\)"):
        _verify(store_copy)


def test_verify_fails_a_code_change_that_moves_the_numbers_of_one_arm_only(store_copy, monkeypatch):
    train = runs._train

    def moved(configs, data, **options):  # a "fix" that changes the β = 0 runs' losses by one ulp
        out = train(configs, data, **options)
        for config, (history, *_rest) in zip(configs, out):
            if config.model.beta == 0.0:
                history["loss"] = np.nextafter(history["loss"].to_numpy(), np.inf)
        return out

    monkeypatch.setattr(runs, "_train", moved)
    with pytest.raises(study_store.VerifyFailed, match=r"4 of 9 .*\(4 by first iterations") as caught:
        _verify(store_copy)
    report = json.loads((store_copy.parent / "report" / "verification.json").read_text())
    assert report["failures"]["first iterations"] == 4 and not report["ok"]
    assert "β=1" not in str(caught.value)


def test_a_docstring_edit_keeps_every_key_and_verify_passes(store_copy, tmp_path):
    """The package copied, a docstring of the step edited, ``verify`` run by that copy: it passes."""
    copy = tmp_path / "pkg"
    shutil.copytree(ROOT / "src" / "resgd", copy / "resgd", ignore=shutil.ignore_patterns("__pycache__"))
    step = copy / "resgd" / "core" / "hand_pass.py"
    text = step.read_text()
    start = text.index('"""') + 3
    step.write_text(text[:start] + "An edited docstring. " + text[start:])
    env = {**os.environ, "PYTHONPATH": str(copy), "RESGD_RESULTS_DIR": str(tmp_path / "results")}
    code = (f"from resgd import study_store; r = study_store.verify({str(store_copy)!r}, n_jobs=1, seed='doc', "
            f"progress=False); import resgd; print(resgd.__file__, r['ok'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == [str(copy / "resgd" / "__init__.py"), "True"]


def test_verify_refuses_a_process_without_the_pinned_arithmetic(store_copy, monkeypatch):
    monkeypatch.setenv("MKL_CBWR", "AUTO")
    with pytest.raises(store.ArithmeticMismatch, match=r"pinned arithmetic only: .*MKL_CBWR='AUTO' \(pinned: 'AVX2,STRICT'\)"):
        _verify(store_copy)


# ------------------------------------------------------------------------------------------ the arithmetic

BITS = """
import resgd, torch
from resgd.experiments.configuration import settings
from resgd.experiments.runs import _compute
torch.manual_seed(0)
a = torch.randn(130, 61, dtype=torch.float64)[1:, 3:]   # unaligned views, as the step's weights are
b = torch.randn(61, 77, dtype=torch.float64)[3:, 1:]
s = settings("toy", True)
frame = _compute(s.config(0.75, 2, 0, 0.05, iterations=20))
print((a @ b).sum().item().hex(), torch.softmax(a, 1).sum().item().hex(), *[v.hex() for v in frame["loss"]])
"""


def _bits(env):
    return list(_bits_under(frozenset(env.items())))


@functools.cache
def _bits_under(env: frozenset) -> tuple[str, ...]:
    """The bits of :data:`BITS` in a fresh process under ``env``, computed once per environment (the
    pinned one is the reference of both tests below: a process of torch's start-up each)."""
    done = subprocess.run([sys.executable, "-c", BITS], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **dict(env)})
    assert done.returncode == 0, done.stderr[-2000:]
    return tuple(done.stdout.split())


def test_an_avx2_only_host_computes_the_same_bits_as_this_one():
    """MKL restricted to AVX2 instructions (what an AVX2-only host offers it) under the pinned
    arithmetic gives the bits this host gives under it."""
    pinned = {k: v for k, v in arithmetic.PINNED.items()}
    assert _bits(pinned) == _bits({**pinned, "MKL_ENABLE_INSTRUCTIONS": "AVX2"})


@pytest.mark.skipif("avx512f" not in Path("/proc/cpuinfo").read_text(), reason="needs a CPU with AVX-512")
def test_the_pinning_matters_on_an_avx512_host():
    """Without the pin, this host's widest kernels give other bits (so the test above can fail)."""
    native = {"RESGD_ARITHMETIC": "native", **{k: "" for k in arithmetic.PINNED}}
    assert _bits(native) != _bits(dict(arithmetic.PINNED))


# ------------------------------------------------------------------------------------------ the committed store

def test_the_committed_store_is_sound_and_made_under_the_pinned_arithmetic():
    """The store in git: every object present with its checksum, under the arithmetic this code pins
    (``make verify`` re-executes it; CI runs that before the book)."""
    st = Store(ROOT / "store")
    assert len(st.entries) > 1000
    assert st.arithmetic == arithmetic.pinned_description()
    kinds = {r["kind"] for r in st.entries.values()}
    assert kinds == {"run", "smoothness/fast/20", PATH_KIND, "table"}
    producers = {r["config"]["producer"] for r in st.entries.values() if r["kind"] == "table"}
    assert producers == set(stored_tables.PRODUCERS)  # pages 2, 3 and 7's costly tables
    for key in st.entries:
        st.read_bytes(key)
    assert st.unreferenced_objects() == []
