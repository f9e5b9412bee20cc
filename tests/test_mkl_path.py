"""The opt-in MKL Intel-path stub: off by default, on only when asked, and the same numbers to rounding.

The equivalence check runs the same loss and gradients in a child process with the stub preloaded
and compares them with this process's (MKL's default path); it needs the system C compiler and
torch's MKL symbol, and is skipped (with the reason) where either is missing.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from resgd.infra import mkl_path
from resgd.validation import ConfigError

PROBE = r"""
import json, sys, torch
from resgd.infra import mkl_path
from resgd.core.model import ModelConfig, init_params
from resgd.core.autograd_reference import autograd_loss_and_grad
torch.set_num_threads(1)
out = {"active": mkl_path.active(), "cases": []}
for d, n, pooling in ((14, 24, "none"), (50, 16, "mean")):
    cfg = ModelConfig(d=d, d_qk=d, m=4 * d, n_layers=2, pooling=pooling)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(64, n, d, generator=g, dtype=torch.float64)
    Y = torch.randn((64, 1) if pooling == "mean" else (64, n, 1), generator=g, dtype=torch.float64)
    loss, grads, _ = autograd_loss_and_grad(init_params(cfg, 1), cfg, X, Y)
    out["cases"].append({"loss": float(loss), "grads": {k: v.flatten().tolist() for k, v in grads.items()}})
print(json.dumps(out))
"""


def _has_mkl_symbol() -> bool:
    lib = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        ctypes.CDLL(str(lib))[mkl_path.SYMBOL]
    except (OSError, AttributeError):
        return False
    return True


def _probe(env: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_requested_reads_the_switch_and_rejects_other_values():
    assert not mkl_path.requested({})
    assert not mkl_path.requested({mkl_path.ENV: "0"})
    assert mkl_path.requested({mkl_path.ENV: "1"})
    with pytest.raises(ConfigError, match=r"RESGD_MKL_INTEL_PATH.*'yes'"):
        mkl_path.requested({mkl_path.ENV: "yes"})


def test_child_env_is_unchanged_unless_requested():
    env = {"LD_PRELOAD": "/x/other.so"}
    assert mkl_path.child_env(dict(env)) == env


@pytest.mark.skipif(shutil.which(os.environ.get("CC") or "cc") is None, reason="no C compiler")
def test_child_env_preloads_the_stub_first_once(tmp_path, monkeypatch):
    monkeypatch.setenv("RESGD_CACHE_DIR", str(tmp_path))
    env = mkl_path.child_env({mkl_path.ENV: "1", "LD_PRELOAD": "/x/other.so"})
    stub = env["LD_PRELOAD"].split(":")[0]
    assert Path(stub).is_file() and Path(stub).parent.parent == tmp_path
    assert env["LD_PRELOAD"].split(":")[1:] == ["/x/other.so"]
    assert mkl_path.child_env(dict(env))["LD_PRELOAD"] == env["LD_PRELOAD"]  # idempotent
    assert ctypes.CDLL(stub)[mkl_path.SYMBOL]() == 1


@pytest.mark.skipif(shutil.which(os.environ.get("CC") or "cc") is None, reason="no C compiler")
@pytest.mark.skipif(not _has_mkl_symbol(), reason="this torch has no MKL vendor-check symbol")
def test_losses_and_gradients_agree_to_rounding_with_and_without_the_stub(tmp_path):
    base = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", mkl_path.ENV)}
    base["RESGD_CACHE_DIR"] = str(tmp_path)
    default = _probe(base)
    intel = _probe(mkl_path.child_env({**base, mkl_path.ENV: "1"}))
    assert not default["active"] and intel["active"]
    for a, b in zip(default["cases"], intel["cases"]):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-12)
        for name, values in a["grads"].items():
            ref = torch.tensor(values, dtype=torch.float64)
            got = torch.tensor(b["grads"][name], dtype=torch.float64)
            assert float((got - ref).abs().max()) <= 1e-11 * float(ref.abs().max()), name


@pytest.mark.skipif(shutil.which(os.environ.get("CC") or "cc") is None, reason="no C compiler")
def test_book_kernels_get_the_stub_only_when_asked(tmp_path, monkeypatch):
    from resgd.publish.environment import notebook_env

    monkeypatch.setenv("RESGD_CACHE_DIR", str(tmp_path))
    assert "LD_PRELOAD" not in notebook_env(tmp_path, "quick", base={"PATH": "/usr/bin"})
    env = notebook_env(tmp_path, "quick", base={"PATH": "/usr/bin", mkl_path.ENV: "1"})
    assert Path(env["LD_PRELOAD"]).parent.parent == tmp_path


def test_a_cache_folder_that_cannot_be_written_is_one_line(tmp_path):
    """A cache folder that cannot be written is a one-line ConfigError saying to set ``$RESGD_CACHE_DIR``
    to a writable folder. (A regular file stands where the folder should be: root, as in CI, may write
    into a read-only folder.)"""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match=r"cannot be written .*set \$RESGD_CACHE_DIR to a writable folder"):
        mkl_path.stub_path(blocker)
