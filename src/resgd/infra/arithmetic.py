"""Pinned arithmetic: one set of kernels that every x86-64 host with AVX2 runs the same way.

Why: the results store (:mod:`resgd.pipeline.store`) is computed on one machine and proven bit for bit
on CI hosts of other kinds (Intel with AVX-512, AMD EPYC with AVX2 only). Left alone, each library
picks the widest kernels of the CPU it finds, and wider kernels sum in another order: MKL's AVX-512
and AVX2 paths give losses equal only to about 1e-10 relative. Pinned, every library takes its AVX2
code path and MKL runs its conditional numerical reproducibility mode (``STRICT``: independent of
memory alignment too), so what an AVX-512 host computes equals, bit for bit, what an AVX2-only host
computes (``tests/test_store.py`` forces MKL onto AVX2 instructions to show it).

:func:`pin` sets the variables below into the environment before torch and numpy are imported
(``resgd/__init__`` calls it; child processes inherit them). ``RESGD_ARITHMETIC=native`` leaves every
library on its own choice (faster on some hosts; then the store is not used). :func:`describe` says
what this process runs, and is part of every cache key.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

PINNED = {
    "ATEN_CPU_CAPABILITY": "avx2",  # torch's own vectorised kernels (softmax, reductions, elementwise)
    "MKL_CBWR": "AVX2,STRICT",  # MKL's matrix products: the AVX2 branch, reproducible whatever the alignment
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN, where torch routes an operation through it
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",  # numpy's AVX-512 loops (data preparation)
}
"""The environment of pinned arithmetic (read by each library once, when it loads)."""

_LOADED_FIRST: list[str] = []
"""Libraries that were imported before :func:`pin` ran in this process (then their kernels are unknown)."""


def wanted(env: MutableMapping[str, str] | None = None) -> bool:
    """Whether this process should pin (``$RESGD_ARITHMETIC`` is ``pinned`` or unset)."""
    from .. import settings

    return settings.arithmetic(env) == "pinned"


def pin(env: MutableMapping[str, str] | None = None) -> None:
    """Set :data:`PINNED` into ``env`` (default: this process's environment) where not set already,
    unless ``RESGD_ARITHMETIC=native``. Records which of torch and numpy were loaded before it had
    to set anything (an environment pinned from the start, as the Makefile does, needs no order)."""
    target = os.environ if env is None else env
    if not wanted(target):
        return
    if env is None and any(target.get(name) != value for name, value in PINNED.items()):
        _LOADED_FIRST[:] = [name for name in ("torch", "numpy") if name in sys.modules]
    for name, value in PINNED.items():
        target.setdefault(name, value)


def describe() -> dict[str, str]:
    """What arithmetic this process runs: torch's version and vector width, and each pinned variable as
    this process saw it. Two processes with equal descriptions compute the same bits."""
    import torch

    described = {"torch": torch.__version__.split("+")[0], "isa": torch.backends.cpu.get_cpu_capability()}
    for name in PINNED:
        described[name] = os.environ.get(name, "")
    if _LOADED_FIRST:
        described["loaded_before_pinning"] = ",".join(_LOADED_FIRST)
    return described


def pinned_description() -> dict[str, str]:
    """:func:`describe` of a process that runs the pinned arithmetic."""
    import torch

    return {"torch": torch.__version__.split("+")[0], "isa": "AVX2", **PINNED}


def is_pinned() -> bool:
    """Whether this process runs the pinned arithmetic (:func:`describe` equals :func:`pinned_description`)."""
    return describe() == pinned_description()


def why_not_pinned() -> str:
    """One sentence on what differs from the pinned arithmetic (empty when pinned)."""
    have, want = describe(), pinned_description()
    if have == want:
        return ""
    if have.get("loaded_before_pinning"):
        return (f"{have['loaded_before_pinning']} was imported before resgd, so its kernels were chosen "
                f"before the arithmetic was pinned: import resgd first, or set {', '.join(f'{k}={v}' for k, v in PINNED.items())}")
    if have["isa"] != want["isa"] and all(have.get(k) == v for k, v in PINNED.items()):
        return (f"this CPU cannot run the pinned arithmetic: torch runs {have['isa']} kernels where AVX2 is "
                f"needed (an x86-64 CPU with AVX2)")
    differ = [f"{k}={have.get(k)!r} (pinned: {v!r})" for k, v in want.items() if have.get(k) != v]
    return "this process does not run the pinned arithmetic: " + "; ".join(differ)
