"""The book build's outputs, published together by one pointer switch (:mod:`resgd.infra.builds`).

Why: a notebook writes figures and results files as it runs. Written at today's paths, a cell that
failed after one ``glue_figure`` left ``figures/`` half rewritten, and two book builds at once left
the execution report saying a notebook failed while its new page was good. Here:

1. the build's stage (``<figures>/.resgd-builds/stages/<id>/stage``) starts as the current build's
   files (hard links), taken under the publish lock;
2. each notebook runs in a workspace of its own, a copy of the stage: ``$RESGD_FIGURES_DIR`` and
   ``$RESGD_RESULTS_DIR`` point into it (the results folder's other entries, the run cache first,
   are linked in) and ``$RESGD_BOOK_WORKSPACE`` names it, so that a notebook's publish writes plain
   files there (:func:`resgd.pipeline.reproduce.publish`); papermill's input and output live there
   too. Only a notebook that ran to the end has its new or changed files, with its executed
   notebook, moved into the stage; a failed one's workspace is dropped whole;
3. at the end, under the publish lock, a new build is made from the current one (a part or a book
   published meanwhile is kept), the stage's new files go into it, with the execution report
   (merged with the current build's) and its page, and one rename switches to it. Today's paths of
   the book's own files (``notebooks/NN_name.ipynb``, ``_build/execution_report.json``,
   ``book/execution.md``) are relative links through the pointer, like the figures'.

An interrupted or killed build publishes nothing: the previous outputs stay whole, and the next
book build removes the stage it left.
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..infra.atomic import write_text
from ..infra.builds import (
    BOOK, SIDES, WORKSPACE_ENV, Builds, adopt, clean_leftovers, clone, drop_unless_current, link_absent,
    link_or_copy, place_link, publish_lock,
)
from ..infra.file_lock import FileLock, try_lock
from ..infra.mode_stamp import claim
from .report import REPORT, Record, read_report, write_report
from .toc import NOTEBOOK_DIR

STAGES = "stages"
"""Inside ``<figures>/.resgd-builds``: one folder per running book build, its lock inside."""
EXECUTION_PAGE = Path("book") / "execution.md"


@dataclass
class Workspace:
    """One notebook's copy of the stage, and the settings that point its kernel into it."""

    folder: Path
    origin: dict[str, tuple[int, int, int]]

    @property
    def env(self) -> dict[str, str]:
        return {"RESGD_FIGURES_DIR": str(self.folder / "figures"), "RESGD_RESULTS_DIR": str(self.folder / "results"),
                WORKSPACE_ENV: str(self.folder)}

    @property
    def notebooks(self) -> Path:
        """Where the executed notebook goes (published with the build)."""
        return self.folder / BOOK / NOTEBOOK_DIR

    def drop(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


class BookOutputs:
    """One book build's outputs: a stage, a workspace per notebook, one switch at the end."""

    def __init__(self, root: Path, mode: str, env: Mapping[str, str], toc: Sequence[str]):
        self.root, self.mode, self.toc = root, mode, list(toc)
        self.roots = {"figures": Path(env["RESGD_FIGURES_DIR"]), "results": Path(env["RESGD_RESULTS_DIR"])}
        for folder in self.roots.values():
            folder.mkdir(parents=True, exist_ok=True)
        self.builds = Builds(self.roots["figures"])
        home = self.builds.home / STAGES
        home.mkdir(parents=True, exist_ok=True)
        _remove_left_stages(home)
        self.lock, self.folder = _new_stage(home, mode)
        self.guard = threading.Lock()  # notebooks finishing at once move their files into the stage in turn
        self.stage = self.folder / "stage"
        with publish_lock(self._locked()):
            self._adopt()
            base = self.builds.current(mode)
            for side in (*SIDES, BOOK):
                (self.stage / side).mkdir(parents=True)
                if base is not None and (base / side).is_dir():
                    clone(base / side, self.stage / side)
        self.base_report = {r.notebook: r for r in read_report(self.stage / BOOK / REPORT)}
        self.origin = _identities(self.stage)
        self._take_plain_book_files()  # after the origin: they count as this build's, published with it

    def _locked(self) -> list[Path]:
        return [self.roots[side] for side in SIDES]

    def _adopt(self) -> None:
        """Files at the figures' and results' paths that are not links into a build (an earlier
        version's, a notebook run by hand) taken into one first (:func:`resgd.infra.builds.adopt`)."""
        results = self.roots["results"]
        folders = {n for n in (os.listdir(results) if results.is_dir() else ())
                   if not n.startswith(".") and n != "cache" and (results / n).is_dir() and not (results / n).is_symlink()}
        clean_leftovers(self.builds, self.roots)
        _remove_half_placed_links(self.root)
        adopt(self.builds, self.roots, self.mode, {"figures": set(), "results": folders}, SIDES)

    def _book_paths(self) -> list[Path]:
        return [*(Path(NOTEBOOK_DIR) / f"{n}.ipynb" for n in self.toc), REPORT]

    def _take_plain_book_files(self) -> None:
        """Executed notebooks and a report at today's paths that are plain files (an earlier version's
        build, ``jupytext --sync``): kept, as they are, unless this build replaces them."""
        for rel in self._book_paths():
            live = self.root / rel
            if live.is_file() and not live.is_symlink():
                dest = self.stage / BOOK / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.unlink(missing_ok=True)
                shutil.copy2(live, dest)
        self.base_report = {r.notebook: r for r in read_report(self.stage / BOOK / REPORT)}

    def workspace(self, name: str) -> Workspace:
        """A notebook's own copy of the stage (copies: a kernel that writes a file in place cannot
        change a published one); the results folder's other entries (the run cache) linked in."""
        work = self.folder / "work" / name
        shutil.rmtree(work, ignore_errors=True)
        with self.guard:
            for side in (*SIDES, BOOK):
                shutil.copytree(self.stage / side, work / side, symlinks=True)
        results = self.roots["results"]
        for entry in sorted(os.listdir(results)) if results.is_dir() else ():
            if not entry.startswith(".") and not os.path.lexists(work / "results" / entry):
                os.symlink(os.path.abspath(results / entry), work / "results" / entry)
        return Workspace(work, _identities(work, (*SIDES, BOOK)))

    def accept(self, work: Workspace) -> None:
        """Move what a notebook that ran to the end wrote (files new or changed) into the stage."""
        with self.guard:
            for rel in _changed(work.folder, work.origin, (*SIDES, BOOK)):
                dest = self.stage / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(work.folder / rel, dest)

    def publish(self, records: Sequence[Record], total: float, jobs: int) -> None:
        """The stage's new files, the report and its page in a new build, switched to in one rename."""
        from .sphinx_ext import execution_page

        with publish_lock(self._locked()):
            claim(self.roots["figures"], self.mode, how_to_move="another checkout")
            self._adopt()
            build = self.builds.new(self.mode, self.builds.current(self.mode))
            try:
                for rel in _changed(self.stage, self.origin):
                    dest = build / rel
                    if os.path.lexists(dest):
                        os.unlink(dest)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    link_or_copy(self.stage / rel, dest)
                book = build / BOOK
                report = self._report(book, records)
                write_report(book / REPORT, report, self.mode, total, jobs)
                write_text(book / EXECUTION_PAGE, execution_page(self.root, book / REPORT))
                (build / "mode").write_text(f"{self.mode}\n")
                for side in SIDES:
                    link_absent(self.builds, self.roots[side], build, self.mode, side)
                links = {rel: self.root / rel for rel in _files(book)}
                for rel, live in links.items():  # absent or a link: nothing changes for a reader until the switch
                    if not os.path.lexists(live) or live.is_symlink():
                        live.parent.mkdir(parents=True, exist_ok=True)
                        place_link(live, self.builds.link_text(live, self.mode, BOOK, rel))
                self.builds.switch(self.mode, build)  # the one commit point
            except BaseException:
                drop_unless_current(self.builds, self.mode, build)
                raise
            for rel, live in links.items():  # a plain file (taken into the stage, or a page Sphinx rewrote)
                if not live.is_symlink():
                    place_link(live, self.builds.link_text(live, self.mode, BOOK, rel))
            self.builds.remove_unused()

    def _report(self, book: Path, records: Sequence[Record]) -> list[Record]:
        """The records of the notebooks in ``book``, in TOC order: this build's, except a failure of a
        notebook another build published since this one began (its page is that build's, so is
        its record); the other notebooks' earlier records where their executed notebook is there."""
        now = {r.notebook: r for r in read_report(book / REPORT)}
        ran = {r.notebook: r for r in records}
        merged: list[Record] = []
        for key in (f"{NOTEBOOK_DIR}/{n}" for n in self.toc):
            rec, other = ran.get(key), now.get(key)
            replaced = other is not None and other != self.base_report.get(key)
            if rec is not None and (rec.ok or not replaced):
                merged.append(rec)
            elif other is not None and (book / f"{key}.ipynb").is_file():
                merged.append(other)
            elif rec is not None:
                merged.append(rec)
        return merged

    def close(self) -> None:
        """Remove the stage and every workspace (what was not published is dropped)."""
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.lock is not None:
            self.lock.close()


def _remove_half_placed_links(root: Path) -> None:
    """The temporary links a killed build left beside the book's own files (:func:`place_link`'s)."""
    for folder in (root / NOTEBOOK_DIR, root / REPORT.parent, root / EXECUTION_PAGE.parent):
        for left in folder.glob(".*.resgd-link-*"):
            left.unlink(missing_ok=True)


def _new_stage(home: Path, mode: str) -> tuple[FileLock, Path]:
    """A new stage folder and its lock, taken first (``<id>.lock`` beside it): a folder whose lock is
    free, or absent, belongs to no running build."""
    while True:
        name = f"{mode}-{os.getpid()}-{os.urandom(4).hex()}"
        lock = try_lock(home / f"{name}.lock")
        if lock is not None:
            (home / name).mkdir()
            return lock, home / name


def _remove_left_stages(home: Path) -> None:
    """Stages of book builds that were killed: their lock is free (or gone), then the lock file."""
    for left in sorted(home.iterdir()):
        if left.suffix == ".lock" or not left.is_dir():
            continue
        lock = try_lock(home / f"{left.name}.lock")
        if lock is None:
            continue  # a build running now
        shutil.rmtree(left, ignore_errors=True)
        lock.close()
    for left in home.glob("*.lock"):  # a build killed between its folder's removal and its lock's
        if not (home / left.stem).exists() and (lock := try_lock(left)) is not None:
            lock.close()


def _files(folder: Path, sides: Sequence[str] = ()) -> list[str]:
    """The files under ``folder`` (or its ``sides``), relative: neither links nor names beginning
    with a dot (temporaries, locks), and no folder reached through a link (the run cache)."""
    found = []
    for top in [folder / s for s in sides] or [folder]:
        for dirpath, dirnames, names in os.walk(top):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            found += [os.path.relpath(os.path.join(dirpath, n), folder) for n in names
                      if not n.startswith(".") and not os.path.islink(os.path.join(dirpath, n))]
    return found


def _identities(folder: Path, sides: Sequence[str] = ()) -> dict[str, tuple[int, int, int]]:
    """Each file by inode, size and mtime: a file replaced (a new inode) or written in place is told apart."""
    return {rel: (st.st_ino, st.st_size, st.st_mtime_ns) for rel in _files(folder, sides)
            for st in (os.stat(folder / rel),)}


def _changed(folder: Path, origin: Mapping[str, tuple[int, int, int]], sides: Sequence[str] = ()) -> list[str]:
    """The files under ``folder`` new or changed since ``origin`` was taken."""
    return sorted(rel for rel, ident in _identities(folder, sides).items() if origin.get(rel) != ident)
