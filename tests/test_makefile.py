"""What the Makefile gives every command it runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def python_under_make(env: dict[str, str]) -> tuple[str, str]:
    """``(sys.pycache_prefix, sys.flags.dont_write_bytecode)`` of a Python that a make recipe starts."""
    probe = f"{sys.executable} -c 'import sys; print(sys.pycache_prefix, sys.flags.dont_write_bytecode)'"
    out = subprocess.run(["make", "-s", "--no-print-directory", f"--eval=_probe: ; @{probe}", "_probe"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    prefix, flag = out.split()
    return prefix, flag


def test_byte_code_is_kept_in_the_venv_even_where_the_caller_writes_none():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    assert python_under_make(env) == (str(ROOT / ".venv" / "pycache"), "0")


def test_a_callers_own_byte_code_folder_is_kept(tmp_path):
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path)}
    assert python_under_make(env)[0] == str(tmp_path)
