"""Faults that once gave a wrong result with exit 0, a hang or a traceback (issue 24), each as a test.

The Dask ones run against a real ``LocalCluster`` (worker processes on 127.0.0.1). Each test polls
for its condition with a generous deadline instead of sleeping a fixed time.
"""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from resgd.core.model import ModelConfig
from resgd.core.train import GDConfig
from resgd.data.spec import DataMismatchError, DatasetSpec, data_fingerprint
from resgd.data.standin import DEFAULT_STANDIN_DAYS, standin_file_name, write_standin_csv
from resgd.experiments import study as ex


def jena_config(seed: int) -> ex.RunConfig:
    spec = DatasetSpec("jena", n_train=8, n_tokens=4, n_test=4, seed=seed)
    return ex.RunConfig(spec, ModelConfig(d=14, d_qk=3, m=5, beta=1.0),
                        GDConfig(lr=0.01, iterations=5, reduction="mean", record_every=5))


@pytest.fixture
def client_standin(monkeypatch, tmp_path):
    """The client runs Jena on the stand-in of its own cache folder (offline, no data folder)."""
    monkeypatch.delenv("RESGD_DATA_DIR", raising=False)
    monkeypatch.setenv("RESGD_OFFLINE", "1")
    monkeypatch.setenv("RESGD_CACHE_DIR", str(tmp_path / "client-cache"))
    return tmp_path


def test_a_worker_with_other_data_fails_before_training_and_nothing_is_cached(client_standin):
    """Before: a worker with another Jena file trained on it, the result was cached under the
    client's key, exit 0 (41 of 180 verdicts differed). After: one line naming the worker and both
    digests; no entry written."""
    distributed = pytest.importorskip("distributed")
    tmp_path = client_standin
    worker_cache = tmp_path / "worker-cache"
    # another file that passes every check: the stand-in of another seed, where the worker looks
    write_standin_csv(worker_cache / "jena" / "standin" / standin_file_name(DEFAULT_STANDIN_DAYS, 0),
                      days=DEFAULT_STANDIN_DAYS, seed=1)
    config = jena_config(seed=9101)
    client_digest = data_fingerprint(config.dataset, config.dtype)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                  env={"RESGD_CACHE_DIR": str(worker_cache)}) as cluster:
        with pytest.raises(DataMismatchError) as caught:
            ex.sweep([config], cache_dir=tmp_path / "runs", scheduler=cluster.scheduler_address)
    message = str(caught.value)
    assert "\n" not in message and "Dask worker tcp://127.0.0.1:" in message
    assert f"the client's have {client_digest}" in message and "have digest " in message
    assert not list((tmp_path / "runs").glob("*.pkl"))


def test_every_cache_entry_holds_the_digest_of_its_data(client_standin):
    tmp_path = client_standin
    config = jena_config(seed=9102)
    ex.sweep([config, replace(config, seed=1)], n_jobs=1, cache_dir=tmp_path / "runs")
    entries = list((tmp_path / "runs").glob("*.pkl"))
    assert len(entries) == 2
    digest = data_fingerprint(config.dataset, config.dtype)
    for entry in entries:
        assert list(pickle.loads(entry.read_bytes())["data"].values()) == [digest]
