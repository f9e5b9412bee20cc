"""The stacked trainer's evaluation compiled (optional, same numbers, less Python).

At the robustness map's shapes a GD step of a stack is ~100 ATen calls of a few microseconds each,
and Python's share of each call was about a third of the step (0.5 of 1.8 ms at Jena N = 16, L = 1,
AMD EPYC family 25 model 17). ``stacked_step.cpp`` makes the same ATen calls from C++: one Python
call per step. It calls the very functions :mod:`resgd.core.stacked` calls, with the same
arguments, output buffers and order, so its numbers are the Python path's bit for bit
(``tests/test_native_step.py``), and whether it is used changes no result and no cache entry.

It is compiled on first use with the system C++ compiler (``$CXX``, else ``g++``; about 15 s)
against the installed torch's headers, into the download cache (:func:`library_path`, named by a
digest of the source, torch's version and the flags), to a temporary name renamed into place, and
removed on a failure, an exception, SIGTERM or SIGINT. Beside it a build record
(:func:`record_path`: the source's sha256, the command, torch's version, the library's sha256).

A file is trusted by its record, never by its name: a truncated library was dlopened and killed
the process with SIGBUS, garbage gave SIGILL, another build gave other numbers. So before dlopen
the library's sha256 must match its record (:func:`verify`); if not, it is rebuilt once, and if
it still does not match, or does not load, the Python path runs and one line on stderr names
the file and why. After load, :mod:`resgd.core.stacked`'s self-test (:func:`set_self_test`)
compares one compiled step with the Python path on tiny stacks, bit for bit (tolerance zero: the
claim is the same ATen calls in the same order, so any difference means a foreign or broken
build); on a difference the Python path runs. Without a compiler, with a non-ReLU activation, or
with ``$RESGD_NATIVE`` off (:func:`resgd.settings.native`), the Python path runs; :func:`status`
says which path runs and why.

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
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import torch

from ... import atomic, settings

SOURCE = Path(__file__).with_name("stacked_step.cpp")
ENV = "RESGD_NATIVE"
"""Off (``0``, ``false``, ``no``, ``off``) keeps the Python path (nothing is built or loaded)."""
COMPILE_TIMEOUT_S = 600

_LOCK = threading.Lock()
_LOCAL = threading.local()
_STATE: dict = {}
_SELF_TEST: list[Callable] = []


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


def record_path(library: Path) -> Path:
    """The build record beside ``library`` (JSON)."""
    return library.with_suffix(".json")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _expected() -> dict[str, str]:
    """What a build records, bar the library's sha256 (the command with SOURCE and OUT for
    the paths: a checkout elsewhere, same source, may use the same build)."""
    return {"source_sha256": _sha256(SOURCE), "command": " ".join(_command(Path("SOURCE"), Path("OUT"))),
            "torch": torch.__version__}


def verify(library: Path) -> str | None:
    """Why ``library`` must not be loaded (None: its sha256 and inputs match its build record)."""
    if not library.is_file():
        return "missing"
    try:
        record = json.loads(record_path(library).read_text(encoding="utf8"))
    except FileNotFoundError:
        return "no build record beside it"
    except (OSError, ValueError) as error:
        return f"unreadable build record ({error})"
    if not isinstance(record, dict):
        return "unreadable build record"
    for key, value in _expected().items():
        if record.get(key) != value:
            return f"its build record names another {key.replace('_', ' ')}"
    if record.get("library_sha256") != _sha256(library):
        return "its sha256 differs from its build record"
    return None


class NoCompiler(RuntimeError):
    """No C++ compiler: the Python path runs, as designed (no warning)."""


class _Signalled(BaseException):
    """SIGTERM or SIGINT during a build (raised so that the cleanup runs, then re-delivered)."""


@contextmanager
def _signals_unwind():
    """SIGTERM and SIGINT raise :class:`_Signalled` inside the block (main thread only); after the
    cleanup the signal is re-delivered to its previous handler (so the process still ends)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # a signal the process ignores (SIGINT in a background job) stays ignored: it cannot stop the build
    numbers = tuple(n for n in (signal.SIGTERM, signal.SIGINT) if signal.getsignal(n) is not signal.SIG_IGN)
    previous = {n: signal.getsignal(n) for n in numbers}

    def handler(number, frame):
        raise _Signalled(number)

    for n in numbers:
        signal.signal(n, handler)
    try:
        yield
    except _Signalled as caught:
        for n in numbers:
            signal.signal(n, previous[n])
        signal.raise_signal(caught.args[0])  # ends the process (or raises KeyboardInterrupt)
        raise RuntimeError(f"the build was interrupted by signal {caught.args[0]}") from None
    finally:
        for n in numbers:
            signal.signal(n, previous[n])


def _remove_stale_partials(folder: Path) -> None:
    """Earlier builds' ``.partial`` files whose process is gone (killed where no cleanup could run)."""
    for path in folder.glob(".libresgd_stacked_step-*.partial"):
        try:
            pid = int(path.name.split(".")[-3])  # .<library>.<pid>.<thread>.partial
            if not atomic.writer_alive(pid, path.stat().st_mtime):
                path.unlink()
        except (ValueError, IndexError, OSError):
            continue


def build(cache_dir: str | os.PathLike | None = None, *, force: bool = False) -> Path:
    """The compiled library with its build record, built now if missing, unverified or ``force``.
    RuntimeError, with the compiler's last line, when it cannot be built."""
    path = library_path(cache_dir)
    if not force and verify(path) is None:
        return path
    compiler = _command(SOURCE, path)[0]
    if shutil.which(compiler) is None:
        raise NoCompiler(f"no C++ compiler {compiler!r} (set $CXX, or install Debian's g++)")
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(path.parent)
    with _signals_unwind(), atomic.atomic_path(path) as partial:
        done = subprocess.run(_command(SOURCE, partial), capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise RuntimeError(f"compiling {SOURCE.name} with {compiler} failed: {last[-300:]}")
        with partial.open("rb") as file:
            if file.read(4) != b"\x7fELF":
                raise RuntimeError(f"{compiler} exited 0 but wrote no shared library")
        record = {**_expected(), "library_sha256": _sha256(partial)}
    atomic.write_json(record_path(path), record)
    return path


def set_self_test(check: Callable) -> None:
    """``check(step_class)``: why one compiled step differs from the Python path (None: equal);
    run once after load. :mod:`resgd.core.stacked` registers it (it owns the Python path)."""
    _SELF_TEST[:] = [check]


def step_class():
    """``torch.classes.resgd_native.StackedStep``, or None where the Python path runs (see :func:`status`)."""
    if getattr(_LOCAL, "off", False):
        return None
    with _LOCK:
        if "class" not in _STATE:
            loaded, reason = _load()
            if not _SELF_TEST and loaded is not None:
                return None  # not yet checkable: decided once resgd.core.stacked is imported
            _STATE["class"], _STATE["reason"] = loaded, reason
        return _STATE["class"]


@contextmanager
def python_path():
    """Within it, this thread's stacks run the Python path (to see or time its ATen calls)."""
    before, _LOCAL.off = getattr(_LOCAL, "off", False), True
    try:
        yield
    finally:
        _LOCAL.off = before


def _refuse(path: Path, why: str):
    line = f"{path}: {why}"
    print(f"resgd.core.native: {line}; the Python path runs (the same numbers)", file=sys.stderr)
    return None, f"Python path: {line}"


def _load():
    if not settings.native():
        return None, f"Python path: ${ENV}={os.environ.get(ENV, '').strip()}"
    path = library_path()
    try:
        if verify(path) is not None:
            build(force=True)  # missing, or not what its record says: rebuilt once
    except NoCompiler as error:
        return None, f"Python path: {error}"
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        return _refuse(path, str(error).splitlines()[0] if str(error) else type(error).__name__)
    why = verify(path)
    if why is not None:
        return _refuse(path, f"rebuilt, but {why}")
    try:
        torch.ops.load_library(str(path))
        loaded = torch.classes.resgd_native.StackedStep
    except (RuntimeError, OSError, AttributeError) as error:
        return _refuse(path, f"does not load: {(str(error).splitlines() or [''])[0][:300]}")
    if not _SELF_TEST:
        return loaded, "compiled"
    why = _SELF_TEST[0](loaded)
    if why is not None:
        return _refuse(path, f"self-test against the Python path failed: {why}")
    return loaded, "compiled"


def status() -> str:
    """``"compiled"``, or why the Python path runs."""
    step_class()
    return _STATE.get("reason", "Python path: not decided until resgd.core.stacked is imported (its self-test)")


def row_kernels() -> str | None:
    """Which softmax and softmax backward the compiled path runs on this CPU (its own row kernels
    where a check at load found them bit for bit ATen's, else ATen's); None on the Python path."""
    return torch.ops.resgd_native.row_kernels() if step_class() is not None else None
