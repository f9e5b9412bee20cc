"""Resource faults, each one line: an entry larger than any resgd writes, a group-shared folder's mode
stamp, a standard output that cannot be written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_a_cache_entry_larger_than_any_resgd_writes_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """A cache entry larger than any this package writes (a sparse 6 GB file) is refused by its size in
    one line, before it is read, and the entry is computed again."""
    from resgd.pipeline import cache as cache_module
    from resgd.pipeline.cache import CacheEntryRejected, ResultsCache

    cache = ResultsCache(tmp_path)
    path = cache.path("k")
    with open(path, "wb") as handle:
        handle.truncate(6 << 30)
    read = Path.read_bytes

    def guarded(self):
        assert self != path, "the oversized entry was read"
        return read(self)

    monkeypatch.setattr(Path, "read_bytes", guarded)
    with pytest.warns(CacheEntryRejected) as caught:
        assert cache.read("k") is None
    message = str(caught[0].message)
    assert "\n" not in message and f"cache entry {path} not used ({6 << 30} bytes: larger than any entry" in message
    assert cache_module.MAX_ENTRY_BYTES == 256 << 20


@pytest.mark.parametrize("umask, mode", [(0o002, 0o664), (0o022, 0o644), (0o077, 0o600)], ids=["002", "022", "077"])
def test_the_mode_stamp_is_created_with_the_umask_s_mode(tmp_path, umask, mode):
    """The mode stamp is created with the umask's permissions, as any file, so the others of a group
    sharing the folder can read it."""
    from resgd.infra.mode_stamp import STAMP, claim, stamped_mode

    previous = os.umask(umask)
    try:
        claim(tmp_path / "figures", "quick", how_to_move="--figures-dir")
    finally:
        os.umask(previous)
    assert (tmp_path / "figures" / STAMP).stat().st_mode & 0o777 == mode
    assert stamped_mode(tmp_path / "figures") == "quick"


def _closed_pipe() -> int:
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.parametrize("where, said", [
    ("/dev/full", "standard output cannot be written (No space left on device)"),
    ("a closed pipe", "standard output cannot be written (Broken pipe)"),
    ("closed", "standard output is closed (started with >&-?)"),
], ids=["dev-full", "closed-pipe", "closed"])
def test_a_standard_output_that_cannot_be_written_is_one_line_and_exit_1(tmp_path, where, said):
    """Standard output that cannot be written (``> /dev/full``, a closed pipe, a closed stdout ``>&-``)
    is one line naming standard output and what to do, exit 1 (as documented), not a message about
    "writing a file" or a silent exit 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "RESGD_OFFLINE": "1"}
    command = [sys.executable, "-m", "resgd", "info"]
    if where == "/dev/full":
        with open("/dev/full", "w") as full:
            out = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    elif where == "a closed pipe":
        fd = _closed_pipe()
        try:
            out = subprocess.run(command, stdout=fd, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
        finally:
            os.close(fd)
    else:
        out = subprocess.run(command, stderr=subprocess.PIPE, text=True, env=env, timeout=300, preexec_fn=lambda: os.close(1))
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 1, out.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"error: {said}"), out.stderr[-2000:]
    assert "/dev/null" in lines[0]


@pytest.mark.parametrize("soft, hard, said", [
    (24, 24, "error: this process may open at most 24 files (`ulimit -n`, hard limit 24), too few for 2 local worker"),
    (24, 4096, None),
], ids=["hard-24", "soft-24"])
def test_an_open_file_limit_too_low_for_the_pool_is_one_line_or_raised(tmp_path, soft, hard, said):
    """Under ``ulimit -n 24`` a pool of two workers is refused in one line before any worker starts,
    saying what to do (was: an error naming a joblib file, then each half-made worker's traceback);
    when only the soft limit is low, the run raises it to what the pool needs and runs."""
    import resource

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT / "src")]), "RESGD_OFFLINE": "1"}
    script = ROOT / "tests" / "faults" / "toy_reproduce.py"
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "out"), "0", "--jobs", "2"], capture_output=True,
                         text=True, env=env, timeout=300,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))
    errors = [line for line in out.stderr.replace("\r", "\n").splitlines() if line.startswith("error:")]
    if said is None:
        assert out.returncode == 0 and not errors, out.stderr[-2000:]
        return
    assert out.returncode == 1, out.stderr[-2000:]
    assert len(errors) == 1 and errors[0].startswith(said) and "--jobs 1" in errors[0], out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
