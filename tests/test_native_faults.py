"""The compiled step's library is trusted by its build record and a self-test, never by its name.

Each fault (a truncated, garbage or foreign library, a compiler that writes garbage or fails, a
build stopped by SIGTERM) must end in a rebuilt, checked library or in the Python path with one
line on stderr: never SIGBUS, SIGILL, a traceback or a file left half-written. One real build per
module; the other builds are by a stand-in "compiler" that copies it (a valid build, in no time).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import resgd.core.native as native
from resgd import settings

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CXX") or "g++") is None,
                                reason="no C++ compiler: the Python path runs, and is tested everywhere else")

_OUTPUT = 'out=""; prev=""; for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'


def _script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + _OUTPUT + body)
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def real_library(tmp_path_factory):
    cache = tmp_path_factory.mktemp("real")
    env = {k: v for k, v in os.environ.items() if k != "CXX"}
    code = "import sys, resgd.core.native as n; print(n.build(sys.argv[1]))"
    out = subprocess.run([sys.executable, "-c", code, str(cache)], env=env, capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


@pytest.fixture(scope="module")
def compilers(tmp_path_factory, real_library):
    """Stand-in compilers: ``copy`` (a valid build), ``garbage`` (exit 0, not a library), ``fail`` (exit 1),
    ``sleep`` (never finishes)."""
    folder = tmp_path_factory.mktemp("cxx")
    return {
        "copy": _script(folder, "copy-cxx", f'cp "{real_library}" "$out"\n'),
        "garbage": _script(folder, "garbage-cxx", 'head -c 4096 /dev/urandom > "$out"\n'),
        "fail": _script(folder, "fail-cxx", 'echo "stacked_step.cpp:1: error: a stand-in failure" >&2\nexit 1\n'),
        "sleep": _script(folder, "sleep-cxx", 'echo partial > "$out"\nexec sleep 60\n'),
    }


def _env(cache: Path, cxx: Path | None = None, **extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CXX", "RESGD_NATIVE")}
    env.update(RESGD_CACHE_DIR=str(cache), **extra)
    if cxx is not None:
        env["CXX"] = str(cxx)
    return env


def _status(env: dict[str, str]) -> tuple[str, list[str]]:
    """``python -m resgd.core.native``'s line and its stderr lines; fails on a crash or a traceback."""
    done = subprocess.run([sys.executable, "-m", "resgd.core.native"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout.strip(), done.stderr.strip().splitlines()


def _library(cache: Path, cxx: Path) -> Path:
    env = _env(cache, cxx)
    code = "import resgd.core.native as n; print(n.library_path())"
    return Path(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip())


def _good_build(cache: Path, compilers) -> Path:
    line, errors = _status(_env(cache, compilers["copy"]))
    assert line.startswith("resgd.core.native: compiled (") and errors == [], (line, errors)
    return _library(cache, compilers["copy"])


def _leftovers(cache: Path) -> list[str]:
    return [p.name for p in (cache / "native").iterdir() if p.name.startswith(".")] if (cache / "native").exists() else []


def test_a_build_records_its_inputs_and_its_sha256(real_library):
    record = json.loads(native.record_path(real_library).read_text())
    assert set(record) == {"source_sha256", "command", "torch", "library_sha256"}
    assert record["torch"] == torch.__version__ and " -o OUT " in record["command"]
    assert record["source_sha256"] == native._sha256(native.SOURCE)
    assert record["library_sha256"] == native._sha256(real_library)
    assert native.verify(real_library) is None


def _truncate(path: Path, real: Path) -> None:
    path.write_bytes(real.read_bytes()[: real.stat().st_size // 2])


def _garbage(path: Path, real: Path) -> None:
    path.write_bytes(b"\x7fELF" + os.urandom(real.stat().st_size))


def _foreign(path: Path, real: Path) -> None:
    source = path.with_name("foreign.cpp")
    source.write_text("extern \"C\" int resgd_foreign() { return 1; }\n")
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(path)], check=True)
    source.unlink()


def _no_record(path: Path, real: Path) -> None:
    native.record_path(path).unlink()


@pytest.mark.parametrize("fault", [_truncate, _garbage, _foreign, _no_record], ids=lambda f: f.__name__[1:])
def test_a_library_unlike_its_record_is_rebuilt_then_used(tmp_path, compilers, real_library, fault, monkeypatch):
    monkeypatch.setenv("CXX", str(compilers["copy"]))  # the compiler is part of what the record holds
    path = _good_build(tmp_path, compilers)
    fault(path, real_library)
    assert native.verify(path) is not None
    line, errors = _status(_env(tmp_path, compilers["copy"]))
    assert line.startswith("resgd.core.native: compiled (") and errors == [], (line, errors)
    assert native.verify(path) is None and native._sha256(path) == native._sha256(real_library)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("fault,compiler", [(_truncate, "garbage"), (_garbage, "fail"), (_foreign, "fail")],
                         ids=["truncated-garbage", "garbage-fail", "foreign-fail"])
def test_a_library_that_cannot_be_rebuilt_leaves_the_python_path_and_one_line(tmp_path, compilers, real_library,
                                                                               fault, compiler):
    path = _good_build(tmp_path, compilers)
    fault(path, real_library)
    native.record_path(path).rename(native.record_path(_library(tmp_path, compilers[compiler])))
    path.rename(_library(tmp_path, compilers[compiler]))  # the faulty build where this compiler looks
    line, errors = _status(_env(tmp_path, compilers[compiler]))
    assert line.startswith("resgd.core.native: Python path: "), line
    assert len(errors) == 1 and str(_library(tmp_path, compilers[compiler])) in errors[0], errors
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("compiler,why", [("garbage", "exited 0 but wrote no shared library"),
                                          ("fail", "failed: stacked_step.cpp:1: error: a stand-in failure")])
def test_a_broken_compiler_installs_nothing(tmp_path, compilers, compiler, why):
    line, errors = _status(_env(tmp_path, compilers[compiler]))
    assert line.startswith("resgd.core.native: Python path: ") and line.endswith(why), line
    assert len(errors) == 1 and why in errors[0] and str(_library(tmp_path, compilers[compiler])) in errors[0]
    assert list((tmp_path / "native").iterdir()) == []  # no library, no record, no temporary
    assert _good_build(tmp_path, compilers)  # a working compiler then builds


def test_a_foreign_library_with_a_matching_record_does_not_load(tmp_path, compilers, real_library):
    path = _good_build(tmp_path, compilers)
    _foreign(path, real_library)
    record = json.loads(native.record_path(path).read_text())
    native.record_path(path).write_text(json.dumps({**record, "library_sha256": native._sha256(path)}))
    line, errors = _status(_env(tmp_path, compilers["copy"]))
    assert line.startswith("resgd.core.native: Python path: ") and "does not load" in line, line
    assert len(errors) == 1 and str(path) in errors[0]


def test_a_library_failing_the_self_test_is_not_used(tmp_path, compilers):
    _good_build(tmp_path, compilers)
    code = ("import resgd.core.stacked, resgd.core.native as n; n.set_self_test(lambda cls: 'loss differs');"
            "print(n.status()); print(n.step_class())")
    done = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path, compilers["copy"]), capture_output=True,
                          text=True, check=True)
    assert done.stdout.splitlines()[1] == "None" and "self-test" in done.stdout and "loss differs" in done.stdout
    assert len(done.stderr.strip().splitlines()) == 1


_OFF_BY_ONE_ULP = """
import torch, resgd.core.native as n, resgd.core.stacked as s
step = n.step_class()
class Off:
    def __init__(self, *args):
        self.step = step(*args)
    def evaluate(self, *args):
        loss, flat, norm, Z0 = self.step.evaluate(*args)
        return torch.nextafter(loss, loss + 1), flat, norm, Z0
print(s._self_test(step)); print(s._self_test(Off))
"""


def test_the_self_test_passes_the_real_build_and_catches_one_ulp(tmp_path, compilers):
    _good_build(tmp_path, compilers)
    done = subprocess.run([sys.executable, "-c", _OFF_BY_ONE_ULP], env=_env(tmp_path, compilers["copy"]),
                          capture_output=True, text=True, check=True)
    same, off = done.stdout.splitlines()
    assert same == "None" and off.startswith("loss differs"), done.stdout


def _build_in_progress(tmp_path, compilers, number, action):
    """A child process building with the never-ending compiler, once the compiler has written; the
    child starts with ``action`` for signal ``number`` (a test run in a background job inherits an
    ignored SIGINT, so the default is set explicitly too)."""
    code = "import resgd.core.native as n; n.build()"
    process = subprocess.Popen([sys.executable, "-c", code], env=_env(tmp_path, compilers["sleep"]),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(number, action))
    folder = tmp_path / "native"
    deadline = time.monotonic() + 60
    while not (folder.exists() and any(p.stat().st_size for p in folder.iterdir())):  # the compiler has written
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    return process, folder


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_a_build_stopped_by_a_signal_leaves_no_partial_file(tmp_path, compilers, number):
    process, folder = _build_in_progress(tmp_path, compilers, number, signal.SIG_DFL)
    process.send_signal(number)
    _, err = process.communicate(timeout=60)
    assert process.returncode == -number, err  # the signal still ends the process, after the cleanup
    assert list(folder.iterdir()) == []


def test_a_build_in_a_process_that_ignores_sigint_is_not_stopped_by_it(tmp_path, compilers):
    process, folder = _build_in_progress(tmp_path, compilers, signal.SIGINT, signal.SIG_IGN)
    process.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert process.poll() is None  # ignored, as the process asked
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGTERM, err
    assert list(folder.iterdir()) == []


def test_stale_partial_files_of_dead_builds_are_removed(tmp_path, compilers):
    folder = tmp_path / "native"
    folder.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = folder / f".libresgd_stacked_step-0123.so.{dead.pid}.1.partial"
    live = folder / f".libresgd_stacked_step-0123.so.{os.getpid()}.1.partial"
    stale.write_bytes(b"half"), live.write_bytes(b"half")
    _good_build(tmp_path, compilers)
    assert not stale.exists() and live.exists()


@pytest.mark.parametrize("value,on", [(None, True), ("1", True), ("true", True), ("TRUE", True), ("on", True),
                                      ("Yes", True), ("0", False), ("false", False), ("Off", False), ("no", False)])
def test_resgd_native_accepts_the_usual_flags(value, on):
    env = {} if value is None else {"RESGD_NATIVE": value}
    assert settings.native(env) is on
    settings.check_all(env)  # a known setting (it was rejected as unknown)


@pytest.mark.parametrize("value", ["2", "maybe", "compiled"])
def test_resgd_native_rejects_anything_else_in_one_line(tmp_path, value):
    with pytest.raises(settings.SettingError) as caught:
        settings.native({"RESGD_NATIVE": value})
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"$RESGD_NATIVE={value!r}")
    assert "1, true, yes, on, 0, false, no, off" in message
    if value != "maybe":
        return
    done = subprocess.run([sys.executable, "-m", "resgd.core.native"], env=_env(tmp_path, RESGD_NATIVE=value),
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip() == f"resgd.core.native: {message}"


@pytest.mark.parametrize("value", ["0", "OFF"])
def test_resgd_native_off_builds_and_loads_nothing(tmp_path, compilers, value):
    line, errors = _status(_env(tmp_path, compilers["copy"], RESGD_NATIVE=value))
    assert line == f"resgd.core.native: Python path: $RESGD_NATIVE={value}" and errors == []
    assert not (tmp_path / "native").exists()
