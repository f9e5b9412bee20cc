"""The compiled stack evaluation (``resgd.core.native``) gives the Python path's numbers bit for bit.

Both paths make the same ATen calls in the same order, so every history, final weight and
divergence must be identical — on the map's stacks (runs diverge and leave, the stack shrinks to
one), on every branch of the step (folded or separate Q and K, per-token or pooled output, with
and without a padding mask, one or two layers, float32) — and the Python path must stay the one
that runs wherever the compiled one cannot.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import engine_cases as cases
import resgd.core.native as native
from resgd.core.model import ModelConfig, init_params
from resgd.core.stacked import train_stacked
from resgd.core.train import GDConfig

needs_compiler = pytest.mark.skipif(shutil.which(os.environ.get("CXX") or "g++") is None,
                                    reason="no C++ compiler: the Python path runs, and is tested everywhere else")


def _both(stack):
    """(compiled, Python) results of one stack; fails if the compiled path did not run."""
    assert native.status() == "compiled", native.status()
    compiled = train_stacked(*stack)
    with native.python_path():
        python = train_stacked(*stack)
    return compiled, python


def _assert_identical(compiled, python):
    assert len(compiled) == len(python)
    for a, b in zip(compiled, python):
        assert a.diverged == b.diverged
        ha, hb = cases.history_array(a.history), cases.history_array(b.history)
        assert ha.shape == hb.shape and np.array_equal(ha, hb, equal_nan=True)
        if a.params is None:
            assert b.params is None
        else:
            assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)


@needs_compiler
@pytest.mark.parametrize("kind,L,N", [("jena", 1, 16), ("jena", 2, 32), ("sst2", 1, 16), ("sst2", 2, 16)])
def test_the_compiled_step_equals_the_python_path_on_the_maps_stacks(kind, L, N):
    params, models, X, Y, gds, mask = cases.map_stack(kind, L, N)
    stack = (params, models, X, Y, [replace(g, iterations=12) for g in gds], mask)
    compiled, python = _both(stack)
    _assert_identical(compiled, python)
    assert any(r.diverged for r in compiled) and not all(r.diverged for r in compiled)  # the stack shrank


@needs_compiler
@pytest.mark.parametrize("pooling,masked,d,dtype,R,reduction", [
    ("none", True, 6, torch.float64, 3, "mean"),  # per token, padded; folded logits (d_QK > d)
    ("mean", False, 6, torch.float64, 2, "sum"),  # pooled, no mask
    ("mean", True, 12, torch.float32, 1, "mean"),  # separate Q and K; a stack of one (one-column output)
    ("none", False, 6, torch.float64, 1, "sum")])
def test_the_compiled_step_equals_the_python_path_on_every_branch(pooling, masked, d, dtype, R, reduction):
    g = torch.Generator().manual_seed(3)
    N, n = 5, 4
    X = torch.randn(N, n, d, generator=g, dtype=dtype)
    mask = (torch.arange(n).view(1, n) < torch.tensor([4, 2, 3, 1, 4]).view(N, 1)) if masked else None
    if mask is not None:
        X = X * mask.unsqueeze(-1)
    Y = torch.randn((N, 1) if pooling == "mean" else (N, n, 1), generator=g, dtype=dtype)
    models = [ModelConfig(d=d, d_qk=8, m=10, k=1, n_layers=2, beta=0.5 * r, pooling=pooling) for r in range(R)]
    gds = [GDConfig(lr=0.05, iterations=6, reduction=reduction, record_every=3)] * R
    stack = ([init_params(m, r, dtype=dtype) for r, m in enumerate(models)], models, X, Y, gds, mask)
    _assert_identical(*_both(stack))


def test_without_the_compiled_path_the_python_path_runs_and_says_why(tmp_path):
    code = ("import resgd.core.native as n, resgd.core.stacked as s;"
            "print(n.status()); print(s._native_step(s.ModelConfig(d=4, d_qk=4, m=8), s.GDConfig(lr=0.1, iterations=1), s._Buffers(None, {})))")
    env = {**os.environ, "RESGD_NATIVE": "0"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split("\n")[:2] == ["Python path: $RESGD_NATIVE=0", "None"]
    env = {**os.environ, "CXX": str(tmp_path / "no-such-compiler"), "RESGD_CACHE_DIR": str(tmp_path)}
    env.pop("RESGD_NATIVE", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.startswith("Python path: no C++ compiler") and "no-such-compiler" in out
    assert not list(tmp_path.rglob("*.so"))


@needs_compiler
def test_the_library_is_built_atomically_and_named_by_its_inputs(tmp_path):
    path = native.build(tmp_path)
    assert path == native.library_path(tmp_path) and path.is_file()
    assert sorted(p.name for p in path.parent.iterdir()) == [native.record_path(path).name, path.name]  # no partial file
    assert native.verify(path) is None
    assert native.build(tmp_path) == path  # built once
    assert path.name.startswith("libresgd_stacked_step-") and len(path.stem.split("-")[1]) == 16


def test_python_path_is_a_context_of_this_thread():
    with native.python_path():
        assert native.step_class() is None
        with native.python_path():
            assert native.step_class() is None
        assert native.step_class() is None
    assert (native.step_class() is None) == (native.status() != "compiled")


@needs_compiler
def test_the_row_kernels_run_where_atens_vectors_allow_them():
    """The compiled path's own softmax runs wherever ATen vectorises (its bit-for-bit check passed),
    so the identity tests above cover it; without AVX2, ATen's scalar exp is not SLEEF's."""
    kernels = native.row_kernels()
    lanes = {"AVX512": "lanes of 8", "AVX2": "lanes of 4"}.get(torch.backends.cpu.get_cpu_capability())
    assert kernels.startswith(f"softmax: row kernel, {lanes}" if lanes else "softmax: ATen's"), kernels
    assert kernels.endswith("softmax backward: row kernel"), kernels


_CAPABILITY_CHECK = """
import json, sys, numpy as np, torch
sys.path.insert(0, {tests!r})
import engine_cases as cases, resgd.core.native as native
from dataclasses import replace
from resgd.core.stacked import train_stacked
params, models, X, Y, gds, mask = cases.map_stack("sst2", 1, 16)
stack = (params, models, X, Y, [replace(g, iterations=12) for g in gds], mask)
compiled = train_stacked(*stack)
with native.python_path():
    python = train_stacked(*stack)
same = all(np.array_equal(cases.history_array(a.history), cases.history_array(b.history), equal_nan=True)
           for a, b in zip(compiled, python))
print(json.dumps([torch.backends.cpu.get_cpu_capability(), native.status(), native.row_kernels(), same]))
"""


@needs_compiler
@pytest.mark.parametrize("capability", ["avx2", "default"])
def test_the_compiled_step_equals_the_python_path_under_atens_other_instruction_sets(capability):
    """What an AVX2-only CPU (AMD EPYC Zen 3) or one without AVX2 runs, on this CPU: ATen's kernels
    for that set (``ATEN_CPU_CAPABILITY``), the row kernels chosen by the check at load."""
    if capability == "avx2" and torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("this CPU has no AVX2")
    code = _CAPABILITY_CHECK.format(tests=str(Path(__file__).parent))
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    ran, state, kernels, same = json.loads(out.strip().splitlines()[-1])
    assert ran == capability.upper() and state == "compiled" and same
    assert kernels.startswith("softmax: row kernel, lanes of 4" if capability == "avx2" else "softmax: ATen's")
