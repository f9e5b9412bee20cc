"""The book's table of contents (``_toc.yml``, sphinx-external-toc's format): its documents and
notebooks in reading order, the book's root folder, and the ``--only`` selection of notebooks.
Its own module because the build, the PDF, the lab launcher and the site tests all read the TOC,
and only the build executes notebooks."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import yaml

NOTEBOOK_DIR = "notebooks"


class BookBuildError(RuntimeError):
    """The book cannot be built as asked: a notebook failed (or could not be prepared), or the TOC or an
    option names something that is not there."""


def find_root(start: Path | None = None) -> Path:
    """The book root: the nearest folder at or above ``start`` (default cwd) holding _toc.yml."""
    start = (start or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / "_toc.yml").is_file():
            return folder
    raise BookBuildError(f"no _toc.yml at or above {start}")


def toc_files(toc: Mapping | Sequence) -> list[str]:
    """Every ``root``/``file`` entry of a sphinx-external-toc structure, in reading order."""
    out: list[str] = []

    def walk(node):
        if isinstance(node, Mapping):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    out.append(node[key])
            for key, value in node.items():
                if key not in ("root", "file"):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc)
    return out


def toc_docs(toc_path: Path) -> list[str]:
    """The TOC's documents without suffix (``book/intro``, ``notebooks/01_setup``, ...), in order."""
    toc = yaml.safe_load(Path(toc_path).read_text(encoding="utf8"))
    docs = []
    for entry in toc_files(toc):
        path = Path(entry)
        doc = path.with_suffix("").as_posix() if path.suffix in (".md", ".ipynb") else path.as_posix()
        if doc not in docs:
            docs.append(doc)
    return docs


def toc_notebooks(toc_path: Path) -> list[str]:
    """Notebook names (``NN_name``) listed in the TOC under ``notebooks/``, in reading order."""
    return [Path(doc).name for doc in toc_docs(toc_path) if Path(doc).parent.as_posix() == NOTEBOOK_DIR]


def select(names: Sequence[str], only: Sequence[str] | None) -> list[str]:
    """Restrict ``names`` to ``only`` (full names or unique prefixes such as ``02``)."""
    if not only:
        return list(names)
    chosen = []
    for want in only:
        want = Path(want).stem
        hits = [n for n in names if n == want] or [n for n in names if n.startswith(want)]
        if len(hits) != 1:
            raise BookBuildError(f"--only {want!r} matches {hits or 'no notebook'} in the TOC {list(names)}")
        if hits[0] not in chosen:
            chosen.append(hits[0])
    return [n for n in names if n in chosen]
