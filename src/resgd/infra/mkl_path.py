"""Opt-in: MKL's Intel code path on non-Intel CPUs, through a preloaded one-line stub.

torch's CPU build computes its matrix products with Intel MKL, which checks the CPU's vendor and
takes slower kernels on AMD processors (``benchmarks/README.md``: the one trainer on an AMD EPYC on
both paths, about twice as fast on the Intel one). MKL asks one *internal, undocumented* function,
``mkl_serv_intel_cpu_true``; a tiny shared library exporting it (returning 1), preloaded with
``LD_PRELOAD`` into the processes that compute, makes MKL take its Intel path.

Off unless ``$RESGD_MKL_INTEL_PATH=1``. It relies on that internal symbol: a future MKL may
rename it, and then the stub is simply not called (the old speed, never other numbers than
MKL's own kernels give). Results agree with the default path to rounding (different kernels
sum in another order); ``tests/test_mkl_path.py`` checks losses and gradients both ways.

The stub is compiled from :data:`SOURCE` with the system C compiler (``$CC``, else ``cc``) at
first use into the cache directory (``$RESGD_CACHE_DIR``, else the per-user cache).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from .. import settings
from ..validation import ConfigError

ENV = "RESGD_MKL_INTEL_PATH"
SYMBOL = "mkl_serv_intel_cpu_true"
SOURCE = f"int {SYMBOL}(void) {{ return 1; }}\n"
_REEXECED = "_RESGD_MKL_INTEL_PATH_REEXECED"


def requested(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``$RESGD_MKL_INTEL_PATH`` asks for the Intel path (``1``/``0``, unset means ``0``;
    anything else is a :class:`resgd.settings.SettingError`)."""
    return settings.mkl_intel_path(env)


def stub_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """The compiled stub, built now if missing (atomically: compiled beside it, then renamed)."""
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()[:12]
    path = (Path(cache_dir) if cache_dir is not None else settings.download_cache_dir()) / "mkl_path" / f"libresgd_mkl_intel_path-{digest}.so"
    if path.is_file():
        return path
    compiler = os.environ.get("CC") or "cc"
    if shutil.which(compiler) is None:
        raise ConfigError(f"${ENV}=1 needs a C compiler to build its stub; {compiler!r} was not found "
                          f"(install Debian's gcc, or set $CC, or unset ${ENV})")
    source = path.with_suffix(f".{os.getpid()}.c")
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(SOURCE)
    except OSError as exc:
        raise ConfigError(f"${ENV}=1 builds its stub under {path.parent}, which cannot be written ({exc.strerror}): "
                          f"set $RESGD_CACHE_DIR to a writable folder, or unset ${ENV}") from None
    try:
        done = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(partial), str(source)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise ConfigError(f"${ENV}=1: compiling the stub with {compiler} failed: {done.stderr.strip()[:500]}")
        os.replace(partial, path)
    finally:
        source.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)
    return path


def child_env(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """``env`` with the stub first on ``LD_PRELOAD`` when ``env`` requests the Intel path (else unchanged)."""
    if requested(env):
        stub = str(stub_path())
        preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p and p != stub]
        env["LD_PRELOAD"] = ":".join([stub, *preload])
    return env


def active() -> bool:
    """Whether this process runs with the stub preloaded (MKL then takes its Intel path).

    Without the stub the symbol is not visible globally (torch loads MKL privately), so the
    lookup fails; with it, it resolves to the stub and returns 1.
    """
    try:
        return ctypes.CDLL(None)[SYMBOL]() == 1
    except AttributeError:
        return False


def reexec_if_requested(argv: list[str] | None = None) -> None:
    """Restart this program with the stub preloaded when ``$RESGD_MKL_INTEL_PATH=1`` and it is not yet.

    For entry points (``python -m resgd``) whose own process computes; it never loops: after one
    restart it goes on as it is (and says so) if the stub is still not active.
    """
    if not requested() or active():
        return
    if os.environ.get(_REEXECED):
        print(f"resgd: ${ENV}=1 but MKL's {SYMBOL} is not called here (no MKL, or a renamed symbol); "
              "running with MKL's default path", file=sys.stderr)
        return
    env = child_env(dict(os.environ))
    env[_REEXECED] = "1"
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # None: closed from the start (>&-), which resgd.cli reports
            stream.flush()
    os.execve(sys.executable, [sys.executable, *(sys.argv if argv is None else argv)], env)
