"""A figures folder is stamped with the mode of its outputs (:mod:`resgd.infra.mode_stamp`): a run of
the other mode is refused in one line before any work, a damaged stamp is refused, two first runs of
both modes cannot both stamp a new folder, and the stamp takes the umask's permissions.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def test_a_run_of_the_other_mode_does_not_overwrite_a_folder_s_figures(tmp_path, monkeypatch, capsys):
    """A figures folder is stamped with its mode: a run of the other mode is refused in one line before
    any work, and the folder's figures are kept."""
    from resgd import cli

    monkeypatch.delenv("RESGD_MODE", raising=False)
    figures, drawn = tmp_path / "figures", []

    def part(quick, figures_dir, *, n_jobs, scheduler):
        drawn.append(quick)
        Path(figures_dir, "fig.png").write_text("quick" if quick else "full")

    argv = ["reproduce", "--only", "setup", "--figures-dir", str(figures)]
    assert cli.main(argv, parts={"setup": part}) == 0
    assert cli.main([*argv, "--quick"], parts={"setup": part}) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: {figures} holds full-mode outputs") and "a quick run would overwrite them" in err
    assert "--figures-dir or $RESGD_FIGURES_DIR" in err
    assert drawn == [False] and (figures / "fig.png").read_text() == "full"
    assert cli.main(argv, parts={"setup": part}) == 0  # the same mode again: fine
    assert cli.main([*argv[:-1], str(tmp_path / "quick"), "--quick"], parts={"setup": part}) == 0  # elsewhere: fine


def test_a_damaged_mode_stamp_is_refused_not_read_as_no_stamp(tmp_path):
    """A damaged mode stamp (``full\xff``) is refused in one line naming it, not read as no stamp;
    nothing is written."""
    from resgd.infra.mode_stamp import STAMP, claim
    from resgd.validation import OutputError

    (tmp_path / STAMP).write_bytes(b"full\xff\n")
    with pytest.raises(OutputError, match="the stamp is damaged") as caught:
        claim(tmp_path, "quick", how_to_move="--figures-dir")
    assert str(tmp_path / STAMP) in str(caught.value) and "\n" not in str(caught.value)
    assert (tmp_path / STAMP).read_bytes() == b"full\xff\n"


def test_two_first_runs_of_both_modes_cannot_both_stamp_a_new_folder(tmp_path):
    """The stamp is created exclusively: of two first runs (quick and full) racing into a new folder,
    exactly one is let in and the other refused, in every one of 40 races."""
    import threading

    from resgd.infra.mode_stamp import claim, stamped_mode
    from resgd.validation import OutputError

    for trial in range(40):
        folder, outcomes, start = tmp_path / f"new{trial}", {}, threading.Barrier(2)

        def first_run(mode, folder=folder, outcomes=outcomes, start=start):
            start.wait()
            try:
                claim(folder, mode, how_to_move="--figures-dir")
                outcomes[mode] = "in"
            except OutputError:
                outcomes[mode] = "refused"

        runs = [threading.Thread(target=first_run, args=(mode,)) for mode in ("quick", "full")]
        for run in runs:
            run.start()
        for run in runs:
            run.join()
        winner = stamped_mode(folder)
        assert outcomes == {winner: "in", ({"quick", "full"} - {winner}).pop(): "refused"}, outcomes
        assert sorted(p.name for p in folder.iterdir()) == [".resgd-mode"]  # no temporary file left


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
