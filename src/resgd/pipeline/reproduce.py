"""One way every part of the book is reproduced without Jupyter, and how its outputs are published.

A study (``theory``, ``collapse``, ``experiments``) describes a part by a function that computes
and returns :class:`Outputs` (figures, and files for the figures and the results folders);
:func:`reproduce_part` does the rest the same way for all of them:

1. every output folder is checked to be writable **before** any work starts (a read-only
   figures folder is reported at once, not after the sweep);
2. the part is computed and drawn;
3. its files are **published by one rename** (:func:`publish`). Every publish writes a new build
   folder, ``<figures>/.resgd-builds/builds/<id>/`` (``figures/`` and ``results/`` inside, and the
   mode): the current build's files (hard links), then this part's new files, all fsynced; then it
   replaces one pointer, the symlink ``<figures>/.resgd-builds/current-<mode>``, by ``rename(2)``.
   Quick and full have their own pointer. Today's paths are links through the pointer: each name
   in the figures folder (``figures/f.png``) and each top folder in the results folder
   (``results/tables``, ``results/claims``, ...) is a symlink to ``.resgd-builds/current-<mode>/...``,
   so a reader sees the old build or the new one, whole, whatever signal or kill comes when.
   Builds no pointer names (replaced ones, or one a killed run left) are removed by the next
   publish. A file written at a today's path by other means (a notebook's ``glue_figure``, an older
   version's outputs) is taken into a build first, as it is, and then replaced by its link.
   The run cache (``results/cache``) is not an output: it keeps its own atomic writes, untouched.
   Runs publishing into the same folders take turns (:func:`publish_lock`). The builds and their
   pointers are :mod:`resgd.infra.builds`, shared with the book build
   (:mod:`resgd.publish.book_outputs`), whose notebooks publish into a workspace of their own.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..infra.atomic import write_with
from ..infra.builds import (  # noqa: F401 - HOME, LOCK_NAME, STAGE_PREFIX: the builds' names, for the tests
    HOME, LOCK_NAME, SIDES, STAGE_PREFIX, WORKSPACE_ENV, Builds, adopt, clean_leftovers, confined,
    drop_unless_current, link_absent, publish_lock, workspace_of,
)
from ..validation import OutputError
from .cache import resolve_cache_dir, resolve_results_dir

Writer = Callable[[Path], object]


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
            results_dir: str | os.PathLike | None = None, mode: str | None = None) -> dict[str, Path]:
    """Write every output of ``outputs`` into a new build beside the current one's files, then switch
    the mode's pointer to it in one rename (see the module docstring): old or new outputs, whole,
    under any signal or kill. ``mode``: quick or full (default: ``$RESGD_MODE``, else full); the
    figures folder is stamped with it (:mod:`resgd.infra.mode_stamp`), here too, so that outputs
    and stamp cannot part (a folder removed mid-run is stamped again). Runs that publish into the
    same folders take turns (:func:`publish_lock`). Returns label → path at today's place (a figure
    ``name`` → its PNG, ``name.pdf`` → its PDF).

    Inside a book build's notebook (``$RESGD_BOOK_WORKSPACE`` names the folder both output folders
    are in, :func:`resgd.infra.builds.workspace_of`) the files are written there as plain files:
    the book build publishes the workspace of a notebook that ran to the end with all the book's
    other outputs in its one switch, and a build of its own here would nest a pointer inside it."""
    from .. import settings
    from ..infra.mode_stamp import claim
    from ..plots import figures_dir as resolve_figures_dir

    mode = settings.mode(mode)
    roots = {"figures": resolve_figures_dir(figures_dir), "results": resolve_results_dir(results_dir)}
    files = {"figures": outputs.figure_files, "results": outputs.result_files}
    for side, entries in files.items():
        for label, (relative, _) in entries.items():
            if not confined(str(relative)):
                raise OutputError(f"output {label!r}: {str(relative)!r} is not a path inside the {side} folder "
                                  f"(relative, without '..'); nothing was published")
    workspace = workspace_of(roots)
    if workspace is not None:  # a book build's notebook: its workspace goes into the book's one switch
        return _write(outputs, workspace, roots)
    written = {side: {Path(relative).parts[0] for relative, _ in files[side].values()} for side in SIDES}
    written["figures"] |= {f"{name}.{ext}" for name in outputs.figures for ext in ("png", "pdf")}
    sides = SIDES if outputs.result_files or roots["results"].is_dir() else ("figures",)
    with publish_lock([roots[side] for side in sides]):
        claim(roots["figures"], mode, how_to_move="--figures-dir or $RESGD_FIGURES_DIR")
        builds = Builds(roots["figures"])
        clean_leftovers(builds, roots)
        adopt(builds, roots, mode, written, sides)
        build = builds.new(mode, builds.current(mode))
        try:
            paths = _write(outputs, build, roots)
            (build / "mode").write_text(f"{mode}\n")
            for side in sides:  # a new name's link dangles until the switch: absent, as it was
                link_absent(builds, roots[side], build, mode, side, {str(Path(r)) for r, _ in files[side].values()}
                             | ({*written["figures"]} if side == "figures" else set()))
            builds.switch(mode, build)  # the one commit point
        except BaseException:
            drop_unless_current(builds, mode, build)
            raise
        builds.remove_unused()
    return paths


def _write(outputs: Outputs, build: Path, roots: dict[str, Path]) -> dict[str, Path]:
    """Write ``outputs`` into ``build``; an error names the path at today's place, not the build's."""
    import matplotlib.pyplot as plt

    from ..plots import save_figure

    paths: dict[str, Path] = {}
    try:
        for name, fig in outputs.figures.items():
            saved = save_figure(fig, name, build / "figures")
            plt.close(fig)
            for ext, path in saved.items():
                paths[name if ext == "png" else f"{name}.{ext}"] = roots["figures"] / path.name
        for side, files in (("figures", outputs.figure_files), ("results", outputs.result_files)):
            for label, (relative, writer) in files.items():
                write_with(build / side / relative, writer)
                paths[label] = roots[side] / relative
    except OSError as exc:
        for side in SIDES:
            if exc.filename and exc.errno is not None and Path(exc.filename).is_relative_to(build / side):
                live = roots[side] / Path(exc.filename).relative_to(build / side)
                raise OSError(exc.errno, f"{exc.strerror}; nothing was published, the outputs are as before",
                              str(live)) from exc
        raise
    return paths


def reproduce_part(
    compute: Callable[[], Outputs],
    *,
    figures_dir: str | os.PathLike | None = None,
    results_dir: str | os.PathLike | None = None,
    writes_results: bool = False,
    mode: str | None = None,
) -> dict[str, Path]:
    """Check the output folders, ``compute()`` the part in the book's style, publish it in one switch."""
    from ..plots import figures_dir as resolve_figures_dir
    from ..plots import use_style

    folders = [resolve_figures_dir(figures_dir)]
    if writes_results:
        folders += [resolve_results_dir(results_dir), resolve_cache_dir()]
    check_writable(folders)
    use_style()
    return publish(compute(), figures_dir, results_dir, mode)
