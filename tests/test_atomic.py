"""Atomic writes leave either the old file or the complete new one."""

import pytest

from resgd.infra.atomic import atomic_path, write_json, write_text


def test_write_replaces_and_leaves_no_temporary_files(tmp_path):
    target = tmp_path / "sub" / "out.txt"
    write_text(target, "one")
    write_text(target, "two")
    assert target.read_text() == "two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]


def test_failure_keeps_the_old_file(tmp_path):
    target = tmp_path / "result.json"
    write_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("interrupted")
    assert target.read_text().strip().startswith("{") and '"a": 1' in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_published_files_get_the_usual_permissions(tmp_path):
    import os
    import stat

    mask = os.umask(0o022)
    try:
        target = write_text(tmp_path / "figure.txt", "x")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


# ---------------------------------------------------------------- stale temporaries (a kill inside the write)

KILLED_INSIDE_THE_WRITE = """
import os, signal, sys
from resgd.infra.atomic import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    os.kill(os.getpid(), signal.SIGKILL)
"""

WRITING_UNTIL_TOLD = """
import sys, time
from pathlib import Path
from resgd.infra.atomic import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_text("complete")
    print(tmp, flush=True)
    while not Path(sys.argv[2]).exists():
        time.sleep(0.05)
"""


def _python(code, *args, **kwargs):
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], text=True, **kwargs)


def test_a_temporary_left_by_a_killed_writer_is_removed_by_the_next_run(tmp_path):
    target = tmp_path / "figures" / "jena_residual.png"
    leftovers = []
    for _ in range(2):  # the second killed run removes the first one's temporary before leaving its own
        assert _python(KILLED_INSIDE_THE_WRITE, target).wait(timeout=120) == -9
        leftovers.append(sorted(p.name for p in target.parent.iterdir()))
    assert all(len(left) == 1 and left[0].startswith(".jena_residual.png.") and left[0].endswith(".part") for left in leftovers)
    assert leftovers[0] != leftovers[1]
    write_text(tmp_path / "figures" / "other.txt", "x")  # this process's first write into the folder
    assert sorted(p.name for p in target.parent.iterdir()) == ["other.txt"]


def test_a_live_writers_temporary_is_kept(tmp_path):
    import subprocess
    from pathlib import Path

    from resgd.infra.atomic import clean_stale_temporaries

    target, go = tmp_path / "result.json", tmp_path / "go"
    writer = _python(WRITING_UNTIL_TOLD, target, go, stdout=subprocess.PIPE)
    tmp = writer.stdout.readline().strip()
    try:
        assert clean_stale_temporaries(tmp_path) == []
        write_text(tmp_path / "other.txt", "x")
        assert Path(tmp).exists()
    finally:
        go.touch()
        assert writer.wait(timeout=120) == 0
    assert target.read_text() == "complete"


def test_only_our_stale_temporaries_are_removed(tmp_path):
    import os
    import time

    from resgd.infra.atomic import HOST, clean_stale_temporaries
    from resgd.infra.processes import start_time

    long_ago = time.time() - 3 * 24 * 3600
    names = {
        f".a.png.{HOST}-{os.getpid()}.abcd1234.part": False,  # this live process, written now
        f".b.png.{HOST}-1.abcd1234.part": True,  # pid 1 started after this file was written: the pid was reused
        ".c.png.otherhost-77.abcd1234.part": True,  # another host's: unchecked, stale after a day
        ".d.png.otherhost-77.abcd5678.part": False,  # ... but kept while younger
        ".e.png.qqqq1234.part": True,  # an earlier version's naming, old
        ".f.png.qqqq5678.part": False,  # ... recent
        "notes.part": False,  # not ours
        ".g.png.part": False,  # not ours
        "h.png": False,
    }
    for name in names:
        (tmp_path / name).write_text("")
    for name in (".c.png.", ".e.png.", "notes", ".g.png", "h.png"):
        for path in tmp_path.glob(f"{name}*"):
            os.utime(path, (long_ago, long_ago))
    pid1_started = start_time(1)
    if pid1_started is None:
        pytest.skip("no /proc: process start times unknown")
    before_pid1 = pid1_started - 100.0
    os.utime(next(tmp_path.glob(".b.png.*")), (before_pid1, before_pid1))
    removed = {p.name for p in clean_stale_temporaries(tmp_path)}
    assert removed == {name for name, stale in names.items() if stale}
    assert {p.name for p in tmp_path.iterdir()} == {name for name, stale in names.items() if not stale}


def test_temporaries_name_their_writer(tmp_path):
    import os

    from resgd.infra.atomic import HOST, TEMP_NAME

    with atomic_path(tmp_path / "x.json") as tmp:
        match = TEMP_NAME.match(tmp.name)
        assert match and match["target"] == "x.json" and match["host"] == HOST and int(match["pid"]) == os.getpid()
