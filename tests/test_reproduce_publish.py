"""A publish is one rename: a fault at any moment of it leaves the old outputs or the new ones, whole.

Each fault is inflicted on the real code (:func:`resgd.pipeline.reproduce.publish`) in a forked
process, at every one of the publish's file-system steps in turn (every ``replace``, ``rename``,
``symlink``, ``link``, ``fsync`` and ``mkdir``): kill -9, SIGHUP (default action: the process ends
at once) and SIGTERM (the CLI's stop path: an exception, then clean-up). After each, what a reader
sees at today's paths is checked, then a later publish must give its own outputs whole and leave
one build. A failure while publishing and a publish lock held by a stopped or far run leave
the old outputs too.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from fault_helpers import with_fault_at_step

from resgd.infra import builds as builds_module
from resgd.pipeline import reproduce
from resgd.pipeline.reproduce import Outputs, publish

NAMES = ("a", "b", "c")


def _outputs(tag: str, names=NAMES) -> Outputs:
    return Outputs(figure_files={n: (f"{n}.txt", lambda tmp, n=n: tmp.write_text(f"{tag} {n}")) for n in names},
                   result_files={n: (f"tables/{n}.csv", lambda tmp, n=n: tmp.write_text(f"{tag} {n}")) for n in names}
                   | {"claims": ("claims/x.json", lambda tmp: tmp.write_text(f"{tag} x"))})


def _view(root: Path) -> dict[str, str]:
    """What a reader sees at today's paths: each output's tag ("missing" when it cannot be read)."""
    seen = {}
    for path in [root / "figures" / f"{n}.txt" for n in NAMES] + [root / "results" / "tables" / f"{n}.csv" for n in NAMES] \
            + [root / "results" / "claims" / "x.json"]:
        try:
            seen[str(path.relative_to(root))] = path.read_text().split()[0]
        except OSError:
            seen[str(path.relative_to(root))] = "missing"
    return seen


def _leftovers(root: Path) -> list[str]:
    """Build folders beyond the current one, half-placed links, folders moved aside, temporaries."""
    builds = root / "figures" / ".resgd-builds"
    current = {os.path.basename(os.readlink(p)) for p in builds.glob("current-*")}
    extra = [b.name for b in (builds / "builds").iterdir() if b.name not in current]
    stray = [p.name for p in root.rglob("*") if p.suffix == ".part" or ".resgd-link-" in p.name
             or ".resgd-replaced-" in p.name or p.name.endswith(".tmp") or ".resgd-stage-" in p.name]
    return extra + stray


def _old_outputs(root: Path, start: str) -> None:
    """``build``: the old outputs published by this version; ``legacy``: files an earlier version
    wrote in place, dated two hours ahead (a clock stepped back since)."""
    if start == "build":
        publish(_outputs("old"), root / "figures", root / "results", mode="full")
        return
    (root / "results" / "tables").mkdir(parents=True)
    (root / "results" / "claims").mkdir()
    (root / "results" / "cache").mkdir()
    (root / "figures").mkdir()
    ahead = time.time() + 7200
    for path in [root / "figures" / f"{n}.txt" for n in NAMES] + [root / "results" / "tables" / f"{n}.csv" for n in NAMES]:
        path.write_text(f"old {path.stem}")
        os.utime(path, (ahead, ahead))
    (root / "results" / "claims" / "x.json").write_text("old x")


def _publish_with_fault(root: Path, via: Path, event: str, at: int) -> tuple[int, int]:
    """Publish "new" through ``via`` with ``event`` at its ``at``-th file-system step (:func:`with_fault_at_step`)."""
    return with_fault_at_step(lambda: publish(_outputs("new"), via / "figures", via / "results", mode="full"), event, at)


FAULT_CASES = [(event, start) for event in ("kill -9", "SIGHUP") for start in ("build", "legacy", "second path")]


FAULT_CASES += [("SIGTERM", "build"), ("SIGTERM", "legacy"), ("SIGINT", "build")]
"""kill -9 and SIGHUP from every starting state; SIGTERM and SIGINT, which take SIGHUP's path
(``stop_on_signals`` raises :class:`Stopped` for all three), from a build (SIGTERM also from an older
version's files)."""


@pytest.mark.parametrize(("event", "start"), FAULT_CASES)
def test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole(tmp_path, start, event):
    """A fault (SIGHUP, SIGTERM, kill -9) at any step of a publish, old outputs dated ahead included,
    and the folders reached by a second path, leaves every output folder all old or all new; the next
    publish gives its own outputs."""
    old = {k: "old" for k in _view(_fresh(tmp_path, 0, start))}
    at, outcomes = 1, set()
    while True:
        root = _fresh(tmp_path, at, start)
        via = root
        if start == "second path":  # the same folders under another name (as a second mount point)
            via = tmp_path / f"alias{at}"
            via.symlink_to(root)
        status, steps = _publish_with_fault(root, via, event, at)
        seen = _view(root)
        assert seen in (old, {k: "new" for k in seen}), (at, event, seen)
        outcomes.add(set(seen.values()).pop())
        publish(_outputs("later"), root / "figures", root / "results", mode="full")
        assert set(_view(root).values()) == {"later"} and _leftovers(root) == [], (at, _leftovers(root))
        shutil.rmtree(root)
        if status == 0:  # the publish ended before the step: every step was faulted once
            assert steps < at
            break
        assert status in (9, -signal.SIGHUP, 128 + signal.SIGHUP, 143, 130), status
        at += 1
    assert outcomes == {"old", "new"} and at > 20  # faults came both before and after the switch


def _fresh(tmp_path: Path, at: int, start: str) -> Path:
    root = tmp_path / f"r{at}"
    root.mkdir()
    _old_outputs(root, "legacy" if start == "legacy" else "build")
    return root


def test_no_record_is_read_a_forged_stage_or_pointer_moves_nothing_from_outside(tmp_path):
    """The publish reads no stage record: a stage folder of an earlier version is removed unread, and a
    pointer that names anything but a build of its own folder is not followed, so a forged one (``..``
    paths, emptied) moves no file in from outside the output folders and writes none outside them."""
    root = tmp_path / "out"
    _old_outputs(root, "build")
    outside = tmp_path / "outside.txt"
    outside.write_text("not an output")
    stage = root / "results" / f"{reproduce.STAGE_PREFIX}forged"
    stage.mkdir()
    (stage / "resgd-publish-prepared.json").write_text('{"moves": [["../../../outside.txt", "tables/a.csv"]]}')
    (stage / "resgd-publish-manifest.json").write_text("")
    pointer = root / "figures" / reproduce.HOME / "current-quick"
    pointer.symlink_to("../../../outside.txt")
    publish(_outputs("new"), root / "figures", root / "results", mode="full")
    assert set(_view(root).values()) == {"new"} and not stage.exists()
    assert outside.read_text() == "not an output" and sorted(p.name for p in tmp_path.iterdir()) == ["out", "outside.txt"]
    assert reproduce.Builds(root / "figures").current("quick") is None


def test_a_read_only_or_misplaced_output_folder_fails_before_the_switch_or_not_at_all(tmp_path, monkeypatch):
    """A read-only claims/ of an earlier version is taken into the build (published whole); a full disk
    or a folder where an output file goes fails before the switch, naming the path at its real place:
    the old outputs stay whole, and a later publish of other outputs is not blocked."""
    from resgd.infra import atomic

    root = tmp_path / "out"
    _old_outputs(root, "legacy")
    (root / "results" / "claims").chmod(0o555)
    try:
        publish(_outputs("v1"), root / "figures", root / "results", mode="full")
    finally:
        for folder in root.rglob("*"):
            if folder.is_dir() and not folder.is_symlink():
                folder.chmod(0o755)
    assert set(_view(root).values()) == {"v1"}

    real = atomic.os.replace

    def full(src, dst):
        if str(dst).endswith("b.csv"):
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", full)
    with pytest.raises(OSError) as caught:
        publish(_outputs("v2"), root / "figures", root / "results", mode="full")
    monkeypatch.setattr(atomic.os, "replace", real)
    assert caught.value.filename == str(root / "results" / "tables" / "b.csv") and caught.value.errno == 28
    assert set(_view(root).values()) == {"v1"} and _leftovers(root) == []

    (root / "results" / "claims" / "x.json").unlink()  # through the link: the current build's file
    (root / "results" / "claims" / "x.json").mkdir()
    with pytest.raises(IsADirectoryError) as caught:
        publish(_outputs("v3"), root / "figures", root / "results", mode="full")
    assert caught.value.filename == str(root / "results" / "claims" / "x.json")
    assert "nothing was published" in str(caught.value)
    assert _view(root)["figures/a.txt"] == "v1" and _leftovers(root) == []
    other = Outputs(figure_files={"d": ("d.txt", lambda tmp: tmp.write_text("v4 d"))})
    publish(other, root / "figures", root / "results", mode="full")  # another part: not blocked
    assert (root / "figures" / "d.txt").read_text() == "v4 d" and _view(root)["figures/a.txt"] == "v1"


def test_a_failure_while_publishing_leaves_every_earlier_output_as_it_was(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    figures, results = tmp_path / "figures", tmp_path / "results"
    publish(Outputs(result_files={"t": ("tables/t.csv", lambda p: Path(p).write_text("old\n"))}), figures, results)

    class Broken(Figure):  # a figure whose file cannot be written
        def savefig(self, *args, **kwargs):
            raise OSError(28, "No space left on device (simulated)")

    fig = plt.figure()
    outputs = Outputs(figures={"good": fig, "broken": Broken()},
                      result_files={"t": ("tables/t.csv", lambda p: Path(p).write_text("new\n"))})
    with pytest.raises(OSError, match="No space left"):
        publish(outputs, figures, results)
    plt.close(fig)
    assert (results / "tables" / "t.csv").read_text() == "old\n"  # not half-updated
    assert not (figures / "good.png").exists()
    builds = list((figures / ".resgd-builds" / "builds").iterdir())
    assert [b.name for b in builds] == [os.readlink(figures / ".resgd-builds" / "current-full").split("/")[-1]]  # the failed build is gone
    leftovers = [p for p in tmp_path.rglob("*") if p.suffix == ".part" or ".resgd-link-" in p.name]
    assert leftovers == []


def test_figures_removed_mid_run_are_published_with_their_mode_stamp(tmp_path, monkeypatch, capsys):
    """Figures removed during a quick run (``rm -rf figures``, as ``make clean``) are published with the
    mode stamp the publish writes under its lock, so a later full run is refused rather than stamping
    quick figures "full"."""
    from resgd import cli

    monkeypatch.delenv("RESGD_MODE", raising=False)
    figures = tmp_path / "figures"

    def part(quick, figures_dir, *, n_jobs, scheduler):
        def compute():
            shutil.rmtree(figures)  # removed while the part computes
            return Outputs(figure_files={"f": ("f.txt", lambda tmp: tmp.write_text("quick" if quick else "full"))})
        return reproduce.reproduce_part(compute, figures_dir=figures_dir)

    argv = ["reproduce", "--only", "p", "--figures-dir", str(figures)]
    assert cli.main([*argv, "--quick"], parts={"p": part}) == 0
    assert (figures / ".resgd-mode").read_text() == "quick\n" and (figures / "f.txt").read_text() == "quick"
    assert reproduce.Builds(figures).current("quick") is not None
    assert cli.main(argv, parts={"p": part}) == 1
    assert "holds quick-mode outputs" in capsys.readouterr().err
    assert (figures / "f.txt").read_text() == "quick"


def test_quick_and_full_builds_live_under_their_own_pointers(tmp_path):
    root = tmp_path / "out"
    publish(_outputs("q"), root / "quick-figures", root / "results", mode="quick")
    builds = reproduce.Builds(root / "quick-figures")
    assert builds.current("quick") is not None and builds.current("full") is None
    assert (builds.current("quick") / "mode").read_text() == "quick\n"
    assert os.readlink(root / "quick-figures" / "a.txt") == f"{reproduce.HOME}/current-quick/figures/a.txt"


@pytest.mark.parametrize("held_s", [0.1, 1.5])
def test_two_runs_publishing_into_one_folder_take_turns(tmp_path, capsys, monkeypatch, held_s):
    """Two runs publishing into one results folder take turns: the second waits for the first's lock
    (and says so when the wait is long: a short one is silent, as a notebook's stderr is printed on its
    page), then publishes all of its own outputs, never a mix."""
    import threading

    monkeypatch.setattr(builds_module, "TELL_AFTER_S", 0.5)  # a wait: at most held_s + one poll (0.25 s)
    root = tmp_path / "out"
    _old_outputs(root, "build")
    done = []
    with reproduce.publish_lock([root / "figures", root / "results"]):  # the first run, publishing
        second = threading.Thread(target=lambda: done.append(publish(_outputs("second"), root / "figures",
                                                                     root / "results", mode="full")))
        second.start()
        time.sleep(held_s)
        assert not done and set(_view(root).values()) == {"old"}
    second.join(timeout=60)
    assert done and set(_view(root).values()) == {"second"} and _leftovers(root) == []
    assert ("which publishes there now" in capsys.readouterr().err) == (held_s > 0.5)


def test_a_publish_lock_held_by_a_stopped_or_far_run_is_given_up_in_one_line(tmp_path):
    """A publish lock held by a stopped run (SIGSTOP), or by a run on a host whose clock is an hour
    ahead, is given up after the stated time on the waiter's own monotonic clock, in one line naming the
    holder; nothing of that run is published."""
    import fcntl
    import time

    from resgd.infra import builds
    from resgd.infra.user_errors import describe
    from resgd.pipeline import reproduce

    path = tmp_path / reproduce.LOCK_NAME
    holder = open(path, "a+b")  # another open file: flock conflicts as with another process
    try:
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
        holder.write(b"4242 far-host\n")  # what every lock holder writes (resgd.infra.file_lock)
        holder.flush()
        os.utime(path, (time.time() + 3600, time.time() + 3600))  # the holder's clock an hour ahead
        start = time.monotonic()
        with pytest.raises(OSError) as caught:
            builds.lock_file(path, give_up_s=0.5)
        assert time.monotonic() - start < 5
    finally:
        holder.close()
    message = str(caught.value)
    assert "\n" not in message and "run 4242 on far-host has held its publish lock" in message
    assert "nothing of this run was published" in message and describe(caught.value)[0] == 1
    lock = builds.lock_file(path, give_up_s=0.5)  # free again: taken at once
    try:
        assert path.read_text().startswith(f"{os.getpid()} ")
    finally:
        lock.close()
    assert not path.exists()  # a released lock's file is removed


def test_a_moved_or_copied_checkout_reads_and_publishes_its_own_outputs(tmp_path):
    """Links are relative and name the pointer, so a moved or copied checkout reads its own build and
    publishes into it; the original is untouched."""
    original = tmp_path / "original"
    _old_outputs(original, "build")
    shutil.copytree(original, tmp_path / "copy", symlinks=True)
    original.rename(tmp_path / "moved")
    moved, copy = tmp_path / "moved", tmp_path / "copy"
    assert set(_view(moved).values()) == set(_view(copy).values()) == {"old"}
    publish(_outputs("new"), copy / "figures", copy / "results", mode="full")
    assert set(_view(copy).values()) == {"new"} and set(_view(moved).values()) == {"old"}
    assert _leftovers(copy) == [] and _leftovers(moved) == []


def test_outputs_of_another_file_system_are_taken_in_by_copy(tmp_path, monkeypatch):
    """An output folder on another file system (results/tables a symlink there) is taken into the build
    by copy where a hard link cannot be made, and its place becomes the build's link: published whole."""
    import errno

    root = tmp_path / "out"
    _old_outputs(root, "legacy")
    elsewhere = tmp_path / "other-fs-tables"
    (root / "results" / "tables").rename(elsewhere)
    (root / "results" / "tables").symlink_to(elsewhere)
    real = os.link

    def cross(src, dst, *args, **kwargs):
        if str(elsewhere) in os.path.realpath(src):
            raise OSError(errno.EXDEV, "Invalid cross-device link", str(dst))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(reproduce.os, "link", cross)
    publish(_outputs("new"), root / "figures", root / "results", mode="full")
    assert set(_view(root).values()) == {"new"} and _leftovers(root) == []
    assert sorted(p.read_text() for p in elsewhere.iterdir()) == ["old a", "old b", "old c"]  # not written through
