"""Atomic writes leave either the old file or the complete new one."""

import pytest

from resgd.atomic import atomic_path, write_json, write_text


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
