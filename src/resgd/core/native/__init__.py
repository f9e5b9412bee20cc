"""The stacked trainer's evaluation compiled (optional, same numbers, less Python).

At the robustness map's shapes a GD step of a stack is ~100 ATen calls of a few microseconds each,
and Python's share of each call was about a third of the step (0.5 of 1.8 ms at Jena N = 16, L = 1,
AMD EPYC family 25 model 17). ``stacked_step.cpp`` makes the same ATen calls from C++: one Python
call per step. It calls the very functions :mod:`resgd.core.stacked` calls, with the same
arguments, output buffers and order, so its numbers are the Python path's bit for bit
(``tests/test_native_step.py``), and whether it is used changes no result and no cache entry.

It is compiled on first use with the system C++ compiler (``$CXX``, else ``g++``; about 15 s)
against the installed torch's headers, into the download cache (:func:`library_path`, named by a
digest of the source, torch's version and the flags; written atomically, so concurrent first
users cannot load half a file). Without a compiler, on a failed build, with a non-ReLU activation,
or with ``$RESGD_NATIVE=0``, :mod:`resgd.core.stacked` runs its Python path; :func:`status` says
which path runs and why.

Where ATen itself is slow on the map's short rows, the compiled path has two row kernels of its
own: the softmax (ATen's took ~140 ns a row of 8 keys, a sixth of a Jena N = 16, L = 1 step, for
its lane-by-lane reductions) and the softmax's backward (five ATen passes). They do ATen's
arithmetic in ATen's order (the same SLEEF exp; its summation orders, which follow the vector
width ATen picks: ``torch.backends.cpu.get_cpu_capability()``), and at load each is checked
against ATen on rows of 1 to 32 with -inf and NaN entries and used only if equal bit for bit;
:func:`row_kernels` says which run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path

import torch

from ... import settings

SOURCE = Path(__file__).with_name("stacked_step.cpp")
ENV = "RESGD_NATIVE"
"""``0`` keeps the Python path (the compiled one is never built or loaded)."""

_LOCK = threading.Lock()
_LOCAL = threading.local()
_STATE: dict = {}


def _command(source: Path, output: Path) -> list[str]:
    root = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [os.environ.get("CXX") or "g++", "-O2", "-ffp-contract=off", "-std=c++20", "-shared", "-fPIC",
            f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{root / 'include'}",
            f"-I{root / 'include' / 'torch' / 'csrc' / 'api' / 'include'}",
            str(source), "-o", str(output), f"-L{root / 'lib'}", "-ltorch", "-ltorch_cpu", "-lc10",
            f"-Wl,-rpath,{root / 'lib'}"]


def library_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where the compiled library of this source, torch version and compiler command lives."""
    key = "\n".join([SOURCE.read_text(encoding="utf8"), torch.__version__,
                     " ".join(_command(Path("SOURCE"), Path("OUT")))])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir is not None else settings.download_cache_dir()
    return root / "native" / f"libresgd_stacked_step-{digest}.so"


def build(cache_dir: str | os.PathLike | None = None) -> Path:
    """The compiled library, built now if missing (compiled beside it, then renamed into place).
    RuntimeError with the compiler's message when it cannot be built."""
    path = library_path(cache_dir)
    if path.is_file():
        return path
    compiler = _command(SOURCE, path)[0]
    if shutil.which(compiler) is None:
        raise RuntimeError(f"no C++ compiler {compiler!r} (set $CXX, or install Debian's g++)")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.partial")
    try:
        done = subprocess.run(_command(SOURCE, partial), capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"compiling {SOURCE.name} with {compiler} failed: {done.stderr.strip()[-800:]}")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def step_class():
    """``torch.classes.resgd_native.StackedStep``, or None where the Python path runs (see :func:`status`)."""
    if getattr(_LOCAL, "off", False):
        return None
    with _LOCK:
        if "class" not in _STATE:
            _STATE["class"], _STATE["reason"] = _load()
        return _STATE["class"]


@contextmanager
def python_path():
    """Within it, this thread's stacks run the Python path (to see or time its ATen calls)."""
    before, _LOCAL.off = getattr(_LOCAL, "off", False), True
    try:
        yield
    finally:
        _LOCAL.off = before


def _load():
    if os.environ.get(ENV, "1") == "0":
        return None, f"${ENV}=0"
    try:
        torch.ops.load_library(str(build()))
        return torch.classes.resgd_native.StackedStep, "compiled"
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        return None, f"Python path: {error}"


def status() -> str:
    """``"compiled"``, or why the Python path runs."""
    step_class()
    return _STATE["reason"]


def row_kernels() -> str | None:
    """Which softmax and softmax backward the compiled path runs on this CPU (its own row kernels
    where a check at load found them bit for bit ATen's, else ATen's); None on the Python path."""
    return torch.ops.resgd_native.row_kernels() if step_class() is not None else None
