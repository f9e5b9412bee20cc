"""Stacking decided by measurement on the host (:mod:`resgd.core.calibration`)."""

from __future__ import annotations

import json

import pytest
import torch

from resgd.core import calibration
from resgd.core.model import ModelConfig
from resgd.validation import ConfigError

TINY = ModelConfig(d=6, d_qk=4, m=8, k=1)


def test_measure_times_both_trainers():
    result = calibration.measure(TINY, 4, 5, stack_size=3, steps=1, repeats=2)
    assert result.stacked_s > 0 and result.single_s > 0 and result.stack_size == 3
    assert calibration.Calibration(1.0, 1.2, 8).pays is True
    assert calibration.Calibration(1.2, 1.0, 8).pays is False
    assert calibration.Calibration(1.0, 1.05, 8).pays is None and calibration.Calibration(1.05, 1.0, 8).pays is None
    with pytest.raises(ConfigError, match="calibration.measure: steps: expected an integer >= 1, got 0"):
        calibration.measure(TINY, 4, 5, steps=0)


def test_the_decision_is_measured_once_and_cached(tmp_path, monkeypatch):
    calls = []

    def fake(cfg, n_train, n_tokens, dtype):
        calls.append((cfg.n_layers, n_train))
        stacked = {1: 1.0, 2: 3.0, 3: 2.05}[cfg.n_layers]  # clearly faster, clearly slower, undecided
        return calibration.Calibration(stacked_s=stacked, single_s=2.0, stack_size=8)

    monkeypatch.setattr(calibration, "measure", fake)
    assert calibration.stacking_pays(TINY, 16, 8, tmp_path)
    assert not calibration.stacking_pays(TINY.replace(n_layers=2), 16, 8, tmp_path)
    assert calibration.stacking_pays(TINY.replace(beta=0.0, qk_scale=4.0), 16, 8, tmp_path)  # per-run parts: same shape
    assert calibration.stacking_pays(TINY.replace(n_layers=3), 16, 8, tmp_path)  # undecided: the rule (small: stack)
    assert not calibration.stacking_pays(TINY.replace(n_layers=3, d_qk=16384), 16, 8, tmp_path)  # the rule: 262k weights
    assert calls == [(1, 16), (2, 16), (3, 16), (3, 16)]
    table = json.loads((tmp_path / calibration.CALIBRATION_FILE).read_text())
    assert len(table) == 4 and all(json.loads(key)["cpu"] == calibration.cpu_id() for key in table)


def test_a_damaged_calibration_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setattr(calibration, "measure", lambda *a: calibration.Calibration(1.0, 2.0, 8))
    (tmp_path / calibration.CALIBRATION_FILE).write_text('{"x": {"stacked_s": -1, "single_s": 2, "stack_size": 8}}')
    with pytest.warns(UserWarning, match="not a stacking calibration"):
        assert calibration.stacking_pays(TINY, 16, 8, tmp_path)
    assert "x" not in json.loads((tmp_path / calibration.CALIBRATION_FILE).read_text())


def test_the_key_names_cpu_dtype_and_shape():
    a = calibration.calibration_key(TINY, 16, 8, torch.float64)
    assert a != calibration.calibration_key(TINY, 32, 8, torch.float64)
    assert a != calibration.calibration_key(TINY, 16, 8, torch.float32)
    assert a != calibration.calibration_key(TINY.replace(m=9), 16, 8, torch.float64)
    assert a == calibration.calibration_key(TINY.replace(beta=0.5), 16, 8, torch.float64)
