"""One way every part of the book is reproduced without Jupyter, and how its outputs are published.

A study (``theory``, ``collapse``, ``experiments``) describes a part by a function that computes
and returns :class:`Outputs` (figures, and files for the figures and the results folders);
:func:`reproduce_part` does the rest the same way for all of them:

1. every output folder is checked to be writable **before** any work starts (a read-only
   figures folder is reported at once, not after the sweep);
2. the part is computed and drawn;
3. its files are **published together** (:func:`publish`): each is written completely into a
   staging folder beside its destination, and only when all of them are ready are they moved
   into place. A failure before that point leaves every earlier output as it was, so tables,
   verdicts and figures never come from two different runs. Before the first move a manifest of
   all moves is written (atomically) into each staging folder: it is the commit point. A run
   killed (even with kill -9) between the moves leaves its stage and manifest behind, and the
   next publish into that folder first completes those moves (:func:`recover_stages`); a stage
   without a manifest was never committed and is removed. So a part's outputs are all old or all new.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import write_with, writer_alive
from ..validation import OutputError
from .cache import resolve_cache_dir, resolve_results_dir

Writer = Callable[[Path], object]
STAGE_PREFIX = ".resgd-stage-"
MANIFEST = "resgd-publish-manifest.json"


@dataclass
class Outputs:
    """What one part publishes. ``figures``: name → matplotlib figure (PNG + PDF in the figures
    folder); ``figure_files`` / ``result_files``: label → (path relative to the figures / results
    folder, writer called with a temporary path)."""

    figures: dict[str, Any] = field(default_factory=dict)
    figure_files: dict[str, tuple[str, Writer]] = field(default_factory=dict)
    result_files: dict[str, tuple[str, Writer]] = field(default_factory=dict)


def check_writable(folders: Iterable[str | os.PathLike]) -> None:
    """Raise :class:`OutputError` unless a file can be created in every folder (made if missing)."""
    for folder in dict.fromkeys(Path(f) for f in folders):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".resgd-write-check-", dir=folder)
            os.close(fd)
            os.unlink(probe)
        except OSError as err:
            raise OutputError(
                f"output folder {folder} is not writable ({err.strerror or err}); nothing was computed. "
                "Fix its permissions or choose another folder (--figures-dir / --results-dir, "
                "$RESGD_FIGURES_DIR / $RESGD_RESULTS_DIR)"
            ) from None


def publish(outputs: Outputs, figures_dir: str | os.PathLike | None = None,
            results_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Write every output of ``outputs`` into staging folders, then move all into place.

    Returns label → final path (a figure ``name`` → its PNG, ``name.pdf`` → its PDF).
    """
    import matplotlib.pyplot as plt

    from ..plots import figures_dir as resolve_figures_dir
    from ..plots import save_figure

    roots = {"figures": resolve_figures_dir(figures_dir), "results": resolve_results_dir(results_dir)}
    stages: dict[str, Path] = {}
    moves: list[tuple[Path, Path]] = []
    paths: dict[str, Path] = {}

    def stage(root: str) -> Path:
        if root not in stages:
            roots[root].mkdir(parents=True, exist_ok=True)
            recover_stages(roots[root])
            stages[root] = Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{os.getpid()}-", dir=roots[root]))
        return stages[root]

    try:
        for name, fig in outputs.figures.items():
            staged = save_figure(fig, name, stage("figures"))
            plt.close(fig)
            for ext, path in staged.items():
                final = roots["figures"] / path.name
                moves.append((path, final))
                paths[name if ext == "png" else f"{name}.{ext}"] = final
        for root, files in (("figures", outputs.figure_files), ("results", outputs.result_files)):
            for label, (relative, writer) in files.items():
                moves.append((write_with(stage(root) / relative, writer), roots[root] / relative))
                paths[label] = roots[root] / relative
        manifest = json.dumps([[str(staged), str(final)] for staged, final in moves])
        for folder in stages.values():  # the commit point: from here on the moves are completed, even after a kill
            write_with(folder / MANIFEST, lambda tmp: tmp.write_text(manifest))
        _complete(moves)
    finally:
        for folder in stages.values():
            shutil.rmtree(folder, ignore_errors=True)
    return paths


def _complete(moves: Iterable[tuple[Path, Path]]) -> None:
    """Move each staged file whose stage still holds it into place (again after a kill: idempotent)."""
    for staged, final in moves:
        if staged.exists():
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, final)


def recover_stages(folder: str | os.PathLike) -> None:
    """Finish or drop what a killed run left in ``folder``: a stage with a manifest was committed,
    so its moves are completed; one without was not, so it is removed (live runs' stages are left alone)."""
    for stale in Path(folder).glob(f"{STAGE_PREFIX}*-*"):
        pid = stale.name[len(STAGE_PREFIX):].split("-", 1)[0]
        try:
            modified = stale.stat().st_mtime
        except OSError:
            continue  # removed by its own run meanwhile
        if not pid.isdigit() or writer_alive(int(pid), modified):
            continue
        try:
            moves = json.loads((stale / MANIFEST).read_text())
        except (OSError, ValueError):
            moves = []
        _complete((Path(staged), Path(final)) for staged, final in moves)
        shutil.rmtree(stale, ignore_errors=True)



def reproduce_part(
    compute: Callable[[], Outputs],
    *,
    figures_dir: str | os.PathLike | None = None,
    results_dir: str | os.PathLike | None = None,
    writes_results: bool = False,
) -> dict[str, Path]:
    """Check the output folders, ``compute()`` the part in the book's style, publish it together."""
    from ..plots import figures_dir as resolve_figures_dir
    from ..plots import use_style

    folders = [resolve_figures_dir(figures_dir)]
    if writes_results:
        folders += [resolve_results_dir(results_dir), resolve_cache_dir()]
    check_writable(folders)
    use_style()
    return publish(compute(), figures_dir, results_dir)
