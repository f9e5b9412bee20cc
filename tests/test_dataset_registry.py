"""One record per data set (resgd.dataset_registry): no module outside it and the loaders spells a data
set's name, a data set added to the registry runs through the whole loading path, and the records keep
the shapes, tasks and data fingerprints that key the stored results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_claim_registry import spelled_names

import resgd
from resgd import dataset_registry as registry
from resgd.data.spec import DatasetSpec, data_fingerprint, load_dataset
from resgd.data.toy import toy_data
from resgd.validation import ConfigError

ROOT = Path(resgd.__file__).parent
REPO = ROOT.parents[1]
LOADER_MODULES = frozenset({"data/jena.py", "data/jena_parse.py", "data/jena_checks.py", "data/jena_schema.py",
                            "data/standin.py", "data/sst2.py", "data/glove.py", "data/toy.py"})
"""A loader's own modules, which may name its data set (SupervisedData's ``name``, its cache folders).
The data package's shared modules (spec, dataset, locations, download, npzcache) may not."""


def test_no_module_outside_the_registry_and_the_loaders_spells_a_data_set_name():
    names = frozenset(registry.names())
    assert names == {"jena", "sst2", "toy", "toy_cls", "jena_standin"}
    assert all((ROOT / module).is_file() for module in LOADER_MODULES)
    found = {rel: hits for path in sorted(ROOT.rglob("*.py"))
             if (rel := path.relative_to(ROOT).as_posix()) not in LOADER_MODULES | {"dataset_registry.py"}
             and (hits := spelled_names(path.read_text(encoding="utf-8"), names))}
    assert found == {}, f"read the data set from resgd.dataset_registry instead: {found}"


def test_the_records_keep_the_shapes_and_tasks_the_stored_runs_were_made_with():
    """``d`` and the pooling enter every run's model configuration, hence every stored key."""
    table = {d: (registry.dataset(d).features, registry.dataset(d).pooling, registry.dataset(d).is_classification)
             for d in registry.names()}
    assert table == {"jena": (11, "none", False), "sst2": (50, "mean", True), "toy": (6, "none", False),
                     "toy_cls": (6, "mean", True), "jena_standin": (11, "none", False)}
    assert registry.paper_names() == ("jena", "sst2")
    assert [registry.dataset(d).notebook for d in registry.paper_names()] == ["04_jena", "05_sst2"]
    assert registry.dataset("jena").standin == "jena_standin"
    with pytest.raises(KeyError, match="no data set 'nope'; the data sets are"):
        registry.dataset("nope")


TOY_FINGERPRINTS = {
    ("toy", 3, 0, "float64"): "1fafb0491bc1e79f", ("toy", None, 1, "float64"): "e7ee8124ad413617",
    ("toy", 3, 0, "float32"): "f8f5e6e09e536fe5", ("toy_cls", 3, 0, "float64"): "a45526b70ffd6fe3",
    ("toy_cls", None, 1, "float64"): "e6942992b5903c64", ("toy_cls", None, 0, "float32"): "0e608b66e8ee688d",
}
"""Fingerprints of the toy data sets (8 samples of 4 tokens), as computed before their loading went through the registry."""


@pytest.mark.parametrize("name, n_test, seed, dtype", sorted(TOY_FINGERPRINTS, key=str))
def test_the_toy_data_keep_their_fingerprints(name, n_test, seed, dtype):
    assert data_fingerprint(DatasetSpec(name, 8, 4, n_test, seed), dtype) == TOY_FINGERPRINTS[(name, n_test, seed, dtype)]


def _stored_specs() -> list[tuple[str, str, str]]:
    """(data set spec as JSON, dtype, fingerprint) of every run configuration in the results store."""
    entries = json.loads((REPO / "store" / "manifest.json").read_text())["entries"]
    return sorted({(json.dumps(e["config"]["dataset"], sort_keys=True), e["dtype"], e["data"])
                   for e in entries.values() if "dataset" in e.get("config", {})})


STORED_FROM = {"jena": "jena/jena_climate_2009_excerpt.csv", "sst2": "sst2/dev.tsv"}
"""The files in ``RESGD_DATA_DIR`` the stored runs' real data came from (with the full Jena file there,
the same numbers carry another source label, hence another fingerprint)."""


@pytest.mark.parametrize("spec, dtype, stored", _stored_specs())
def test_every_stored_data_set_has_its_stored_fingerprint(spec, dtype, stored):
    """The data of each stored run are the stored ones, byte for byte (the real Jena and SST-2 data
    need the workplace's copies; the stand-in is computed anywhere)."""
    from shared_data import SHARED_ENV

    from resgd.data.jena_schema import JENA_RELATIVE_PATH

    spec = DatasetSpec(**json.loads(spec))
    here = Path(SHARED_ENV) if SHARED_ENV else None
    if spec.name in STORED_FROM and (here is None or not (here / STORED_FROM[spec.name]).is_file()
                                     or (here / JENA_RELATIVE_PATH).is_file()):
        pytest.skip(f"RESGD_DATA_DIR does not hold only the data the stored runs were made from ({STORED_FROM[spec.name]})")
    assert data_fingerprint(spec, dtype) == stored


def tiny(spec, dtype, *, scale: float = 1.0):
    """A test's data set: the toy regression data, scaled by its record's option."""
    data = toy_data(spec, dtype)
    CALLS.append((spec, dtype, scale))
    return data.__class__(**{**data.__dict__, "name": spec.name, "X_train": scale * data.X_train})


CALLS: list = []
TINY = registry.Dataset(
    name="tiny_test_set", loader=tiny, features=3, pooling="none", task="regression", title="tiny data",
    options={"scale": 2.0},
    sizes={"quick": dict(N=4, n=3, n_test=2, iterations=4, seeds=(0,), widths={"d_qk": 2, "m": 4}, depth_N=4, depth_iterations=4),
           "full": dict(N=6, n=3, n_test=2, iterations=8, seeds=(0,), widths={"d_qk": 2, "m": 4}, depth_N=4, depth_iterations=8)},
)


def test_a_data_set_added_to_the_registry_runs_through_the_loading_path(tmp_path):
    from resgd.experiments.configuration import settings
    from resgd.experiments.runs import run
    from resgd.plots.experiments import _title
    from resgd.robustness.grid import map_grid

    with pytest.raises(ConfigError, match="DatasetSpec.name: expected one of"):
        DatasetSpec(TINY.name, 4, 3)
    with registry.registered(TINY):
        s = settings(TINY.name, True)
        assert (s.N, s.n, s.n_test, s.iterations, s.d_qk, s.m) == (4, 3, 2, 4, 2, 4)
        model = s.model(1.0, 1, seed=0)
        assert (model.d, model.pooling) == (3, "none")
        data = load_dataset(s.spec, "float32")
        assert CALLS[-1] == (s.spec, torch.float32, 2.0)  # the record's loader, with the record's options
        assert data.X_train.shape == (4, 3, 3) and data.X_train.dtype == torch.float32
        plain = toy_data(s.spec, torch.float32)
        assert torch.equal(data.X_train, 2.0 * plain.X_train) and torch.equal(data.Y_test, plain.Y_test)
        table = run(s.config(1.0, 1, 0, 0.01), cache_dir=tmp_path)  # trained on it, cached under its key
        assert len(table) > 1 and table["loss"].notna().all() and table["key"].nunique() == 1
        assert map_grid(True, datasets=(TINY.name,)).datasets == (TINY.name,)
        assert _title(TINY.name, "loss") == "tiny data: loss"
    with pytest.raises(ConfigError, match="DatasetSpec.name"):
        DatasetSpec(TINY.name, 4, 3)  # gone with the block


def test_a_record_that_cannot_be_used_is_refused_naming_its_field():
    with pytest.raises(ValueError, match="Dataset 'bad'.task: expected one of"):
        with registry.registered(registry.Dataset("bad", tiny, 3, "none", "ranking", "bad")):
            pass
    with pytest.raises(ValueError, match=r"data set\(s\) \['jena'\] already registered"):
        with registry.registered(registry.JENA):
            pass
    assert "bad" not in registry.names()
