"""``resgd.core.engine.engine_path``: how a step is computed here, as flat strings, and its digest."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

import resgd
from resgd.core import engine, native


def test_the_engine_path_names_each_part_as_a_string():
    path = engine.engine_path()
    assert tuple(path) == engine.FIELDS and all(isinstance(v, str) for v in path.values())
    assert path["engine"] == f"resgd {resgd.__version__}" and path["torch"] == torch.__version__
    assert path["isa"] == torch.backends.cpu.get_cpu_capability()
    assert path["kernel"] == ("compiled" if native.status() == "compiled" else "python")
    assert engine.kernel_reason() == native.status()
    assert path["mkl_path"] in ("intel", "default") and path["grad_backend"] in ("manual", "autograd")


def test_the_digest_is_short_stable_and_tells_engines_apart():
    path = engine.engine_path()
    digest = engine.engine_path_digest(path)
    assert len(digest) == 12 and int(digest, 16) >= 0
    assert engine.engine_path_digest(dict(reversed(list(path.items())))) == digest  # order does not matter
    assert engine.engine_path_digest({**path, "kernel": "other"}) != digest


def test_with_the_compiled_step_off_the_kernel_is_python_and_says_why():
    code = "from resgd.core import engine; p = engine.engine_path(); print(p['kernel'], '|', engine.kernel_reason())"
    env = {**os.environ, "RESGD_NATIVE": "off", "RESGD_GRAD_BACKEND": "autograd"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "python | Python path: $RESGD_NATIVE=off"
