"""How a GD step is computed in this process, as a flat record (for cache keys and run tables).

There is one trainer (:mod:`resgd.core.trainer`, Python over ATen), so results are equal bit for
bit between processes that share what ATen's kernels depend on: MKL's code path
(:mod:`resgd.infra.mkl_path`: equal to rounding only), ATen's instruction set (its vector width sets the
softmax's summation order) and torch's version. :func:`engine_path` names each, with this
package's version, so a record can say which engine made it and a cache can tell engines apart.
"""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path

import torch

from .. import __version__
from ..infra import mkl_path

FIELDS = ("engine", "mkl_path", "isa", "torch")


def engine_path() -> dict[str, str]:
    """``{engine, mkl_path, isa, torch}``, every value a string; ``mkl_path`` is ``"intel"`` where
    the MKL stub is active in this process, else ``"default"``."""
    return {
        "engine": f"resgd {__version__}",
        "mkl_path": "intel" if mkl_path.active() else "default",
        "isa": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
    }


def engine_path_digest(path: dict[str, str] | None = None) -> str:
    """12 hex digits of the sha256 of ``path``'s sorted items (default: :func:`engine_path`)."""
    items = sorted((path if path is not None else engine_path()).items())
    return hashlib.sha256("\n".join(f"{k}={v}" for k, v in items).encode()).hexdigest()[:12]


def cpu_id() -> str:
    """The CPU's model name with its family/model numbers (virtual machines often show only
    "AMD EPYC" for CPUs 2x apart in float64 matmul rate)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or platform.machine()
    name = fields.get("model name", platform.processor() or platform.machine())
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name
