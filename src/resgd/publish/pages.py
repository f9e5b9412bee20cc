"""The experiment pages (Jena, SST-2) from one source: ``notebooks/experiments.md.template``.

Why: the two pages are the same page on two data sets; kept as two files, every change had to be made
twice and they drifted. The template is a MyST notebook with three kinds of marks, rendered per data
set by :func:`render` into ``notebooks/<name>.md``. The rendered pages are committed, so that Binder,
GitHub and ``make lab`` open them; every build and ``make lab`` re-render them (a template change
reaches them), and ``tests/test_pages.py`` checks that the committed ones equal a fresh render. A page
edited by hand is never overwritten: its notice records the digest of its render, and a page whose
text no longer has that digest stops the build with one line (:func:`write_pages`). Marks:

* ``{{ds}}`` (the data set's key: glue keys, figure names), ``{{DS}}`` (its title), ``{{WHAT}}`` (the task);
* a line ``<!-- if jena -->`` (or another key) starts a block kept for that data set only, up to the
  line ``<!-- end -->`` (blocks do not nest; they may hold markdown and code cells).

Numbers and verdicts never go through the template: they are glued by the executed notebook.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ..dataset_registry import paper
from ..infra.atomic import write_text

TEMPLATE = Path("notebooks") / "experiments.md.template"
PAGES = {d.notebook: {"ds": d.name, "DS": d.title, "WHAT": d.what} for d in paper()}
"""Page name → the values of its marks: one page per paper's data set (:mod:`resgd.dataset_registry`)."""
BEGIN = re.compile(r"^<!-- if (\w+) -->\s*$")
END = re.compile(r"^<!-- end -->\s*$")
NOTICE = "<!-- Generated from notebooks/experiments.md.template by resgd.publish.pages: edit the template, not this file."
"""The start of a rendered page's notice line; the line ends with the digest of the render (:func:`_digest`)."""
DIGEST = re.compile(r"^" + re.escape(NOTICE) + r" render sha256 ([0-9a-f]{64}) -->\n", re.M)


class TemplateError(ValueError):
    """The template's marks are malformed (named with its line)."""


def render(text: str, values: dict[str, str]) -> str:
    """``text`` with the blocks of other data sets removed and every ``{{key}}`` replaced."""
    out, keep, open_line = [], True, None
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        begin = BEGIN.match(line)
        if begin:
            if open_line is not None:
                raise TemplateError(f"{TEMPLATE}: line {number}: a block opens inside the block of line {open_line}")
            open_line, keep = number, begin.group(1) == values["ds"]
            continue
        if END.match(line):
            if open_line is None:
                raise TemplateError(f"{TEMPLATE}: line {number}: '<!-- end -->' closes no block")
            open_line, keep = None, True
            continue
        if keep:
            out.append(line)
    if open_line is not None:
        raise TemplateError(f"{TEMPLATE}: the block of line {open_line} is never closed")
    rendered = "".join(out)
    for key, value in values.items():
        rendered = rendered.replace("{{" + key + "}}", value)
    left = re.search(r"\{\{\w+\}\}", rendered)
    if left:
        raise TemplateError(f"{TEMPLATE}: unknown mark {left.group(0)} (known: {sorted(values)})")
    return _with_notice(rendered)


def _digest(text: str) -> str:
    """The sha256 of a page's text without its notice line (what :func:`render` produced around it)."""
    return hashlib.sha256(DIGEST.sub("", text, count=1).encode("utf-8")).hexdigest()


def _with_notice(text: str) -> str:
    """The notice (with the render's digest) after the front matter, so jupytext still reads the header."""
    head, tail = "", text
    if text.startswith("---\n"):
        end = text.index("\n---\n", 4) + len("\n---\n")
        head, tail = text[:end] + "\n", text[end:]
    return f"{head}{NOTICE} render sha256 {hashlib.sha256((head + tail).encode('utf-8')).hexdigest()} -->\n{tail}"


def edited_by_hand(text: str) -> bool:
    """Whether a page's text differs from the render its notice records (no notice: not a render)."""
    found = DIGEST.search(text)
    return found is None or found.group(1) != _digest(text)


def write_pages(root: Path) -> list[Path]:
    """Render every page of :data:`PAGES` into ``<root>/notebooks/`` (only those whose text changed).
    A page that was edited by hand (:func:`edited_by_hand`) is not overwritten: :class:`TemplateError`
    names it, so that a reader's edit is never lost silently."""
    root = Path(root)
    template = root / TEMPLATE
    if not template.is_file():
        return []
    text = template.read_text(encoding="utf-8")
    written = []
    for name, values in PAGES.items():
        target = root / "notebooks" / f"{name}.md"
        page = render(text, values)
        old = target.read_text(encoding="utf-8") if target.is_file() else None
        if old is not None and old != page and edited_by_hand(old):
            raise TemplateError(
                f"{target}: edited by hand (its text is not the render its notice records); the page is generated "
                f"from {TEMPLATE}: move your edits there (or move the file away) and build again")
        if old != page:
            write_text(target, page)
            written.append(target)
    return written
