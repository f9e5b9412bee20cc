"""The costly tables of pages 2, 3 and 7 as chunks of the results store (resgd.pipeline.stored_tables):
the same table whichever chunks come from the store, proven by ``verify`` like the runs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from resgd import study_store
from resgd.collapse.training import training_comparison
from resgd.experiments.claims import null_rates
from resgd.pipeline import frame_codec, store, stored_tables
from resgd.pipeline.store import Store, StoreIncomplete
from resgd.theorem1.sweep import SweepConfig, rate_sweep

CONFIGS = [SweepConfig(beta=b, d_qk=4, init_scale=1.0, seed=0, N=2, n=3, d=8, m=8) for b in (0.0, 1.0)]
CONFIGS += [SweepConfig(beta=1.0, d_qk=4, init_scale=1.0, seed=1, N=2, n=3, d=8, m=8)]  # a second stack


def sweep():
    return rate_sweep(CONFIGS, iterations=20, checkpoints=1, hess_iterations=2)


def training():
    return training_comparison(d_qks=(2, 8), betas=(0.0, 1.0), seeds=(0,), m=4, iterations=10, record_every=5,
                               N=2, n=3, d=4)


def nulls():
    return null_rates(4, seeds=3, correlations=(0.0,))


def tiny_tables(n_jobs=1, scheduler=None, progress=False):
    """One small table of each producer: 2 sweep stacks, 2 training chunks, 8 null-rule chunks."""
    sweep(), training(), nulls()


@pytest.fixture(scope="module")
def direct():
    """The tables computed with no store at all."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESGD_STORE", "off")
        store.use(None)
        return {"sweep": sweep(), "training": training(), "nulls": nulls()}


@pytest.fixture(scope="module")
def made(tmp_path_factory, direct):
    base = tmp_path_factory.mktemp("tables")
    counts = study_store.refresh(base / "store", n_jobs=1, compute=tiny_tables, progress=False, out=lambda _: None)
    return base / "store", counts


def _verify(root, said=None):
    return study_store.verify(root, n_jobs=1, seed="test", report_dir=root.parent / "report", progress=False,
                              out=(said if said is not None else []).append)


def _producers(root):
    entries = json.loads((root / "manifest.json").read_text())["entries"]
    return {k: r["config"]["producer"] for k, r in entries.items()}


def test_make_results_files_one_entry_per_chunk(made):
    producers = _producers(made[0])
    assert sorted(producers.values()).count("theorem1/sweep") == 2  # one per stack (task key)
    assert sorted(producers.values()).count("collapse/training") == 2  # one per d_qk
    assert sorted(producers.values()).count("claims/null-rates") == 8  # one per rule and correlation
    assert made[1]["added"] == 12


def test_the_tables_read_from_a_required_store_are_the_computed_ones_bit_for_bit(store_copy, direct, monkeypatch):
    monkeypatch.setenv("RESGD_STORE_DIR", str(store_copy))
    monkeypatch.setenv("RESGD_STORE", "require")  # nothing may be computed
    store.use(None)
    try:
        again = {"sweep": sweep(), "training": training(), "nulls": nulls()}
        assert len(store.active().used) == 12
    finally:
        store.use(None)
    for name, table in direct.items():
        pd.testing.assert_frame_equal(again[name], table, check_exact=True)


def test_a_chunk_missing_from_a_required_store_is_an_error_not_a_computation(store_copy, monkeypatch):
    monkeypatch.setenv("RESGD_STORE_DIR", str(store_copy))
    monkeypatch.setenv("RESGD_STORE", "require")
    store.use(None)
    try:
        with pytest.raises(StoreIncomplete, match=r"lacks 8 of the 8 results .* run `make results`"):
            null_rates(5, seeds=3, correlations=(0.0,))  # another size: other keys
    finally:
        store.use(None)


def test_verify_passes_and_reexecutes_one_chunk_of_every_producer(store_copy):
    report = _verify(store_copy)
    assert report["ok"] and report["entries"] == 12
    tables = [s for s in report["sample"] if s.startswith("table ")]
    assert sorted(s.split()[1] for s in tables) == sorted(stored_tables.PRODUCERS)


def test_verify_fails_a_number_edited_inside_a_chunk(store_copy):
    st = Store(store_copy)
    key = next(k for k, p in _producers(store_copy).items() if p == "theorem1/sweep")
    frame = st.get(key)
    frame.loc[0, "empirical_rate"] = np.nextafter(frame.loc[0, "empirical_rate"], np.inf)
    (store_copy / st.entries[key]["object"]).write_bytes(frame_codec.encode(frame))
    with pytest.raises(study_store.VerifyFailed, match=r"1 of 12 .*\(1 by checksum\)"):
        _verify(store_copy)


def test_verify_fails_chunks_filed_under_each_others_keys(store_copy):
    manifest = json.loads((store_copy / "manifest.json").read_text())
    a, b = [k for k, p in _producers(store_copy).items() if p == "collapse/training"]
    manifest["entries"][a], manifest["entries"][b] = manifest["entries"][b], manifest["entries"][a]
    (store_copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(study_store.VerifyFailed, match=r"2 of 12 .*\(2 by key\)"):
        _verify(store_copy)


def test_verify_fails_a_code_change_that_moves_one_producers_numbers(store_copy, monkeypatch):
    from resgd.experiments import claims as module

    chunk = module.null_chunk

    def moved(params):  # a "fix" that moves the null simulation's standard errors by one ulp
        frame = chunk(params)
        frame["se"] = np.nextafter(frame["se"].to_numpy(), np.inf)
        return frame

    monkeypatch.setattr(module, "null_chunk", moved)
    said = []
    with pytest.raises(study_store.VerifyFailed, match=r"1 of 12 .*\(1 by sample\)"):
        _verify(store_copy, said)
    assert [line for line in said if line.startswith("verify: sample: table claims/null-rates")]


def test_an_edited_chunk_with_its_checksum_updated_is_caught_when_drawn(store_copy):
    st = Store(store_copy)
    key = next(k for k, p in _producers(store_copy).items() if p == "collapse/training")
    other = next(k for k, p in _producers(store_copy).items() if p == "collapse/training" and k != key)
    for k in (key, other):  # both chunks of the producer: whichever the sample draws
        frame = st.get(k)
        frame.loc[1, "loss"] = np.nextafter(frame.loc[1, "loss"], np.inf)
        st.put(k, frame, {f: st.entries[k][f] for f in ("kind", "config", "dtype", "data")})
    st.save(study_store.arithmetic.describe())
    with pytest.raises(study_store.VerifyFailed, match=r"\(1 by sample\)"):
        _verify(store_copy)


def test_an_unknown_producer_is_named():
    with pytest.raises(store.StoreError, match=r"table producer 'nope' is not one of"):
        stored_tables.table_key("nope", {})


def test_parameters_that_are_not_json_are_refused_by_name():
    with pytest.raises(TypeError, match=r"table parameter .* is not JSON"):
        stored_tables.as_json({"x": object()})
