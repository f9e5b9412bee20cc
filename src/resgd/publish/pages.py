"""The experiment pages (Jena, SST-2) from one source: ``notebooks/experiments.md.template``.

Why: the two pages are the same page on two data sets; kept as two files, every change had to be made
twice and they drifted. The template is a MyST notebook with three kinds of marks, rendered per data
set by :func:`render` into ``notebooks/<name>.md`` (git-ignored; written before every build and by
``make lab``):

* ``{{ds}}`` (the data set's key: glue keys, figure names), ``{{DS}}`` (its title), ``{{WHAT}}`` (the task);
* a line ``<!-- if jena -->`` (or another key) starts a block kept for that data set only, up to the
  line ``<!-- end -->`` (blocks do not nest; they may hold markdown and code cells).

Numbers and verdicts never go through the template: they are glued by the executed notebook.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..atomic import write_text

TEMPLATE = Path("notebooks") / "experiments.md.template"
PAGES = {
    "04_jena": {"ds": "jena", "DS": "Jena climate", "WHAT": "a time series"},
    "05_sst2": {"ds": "sst2", "DS": "SST-2", "WHAT": "sentiment classification"},
}
"""Page name → the values of its marks."""
BEGIN = re.compile(r"^<!-- if (\w+) -->\s*$")
END = re.compile(r"^<!-- end -->\s*$")
NOTICE = "<!-- Generated from notebooks/experiments.md.template by resgd.publish.pages: edit the template, not this file. -->"


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


def _with_notice(text: str) -> str:
    """The notice after the front matter, so jupytext still reads the header."""
    if text.startswith("---\n"):
        end = text.index("\n---\n", 4) + len("\n---\n")
        return text[:end] + "\n" + NOTICE + "\n" + text[end:]
    return NOTICE + "\n" + text


def write_pages(root: Path) -> list[Path]:
    """Render every page of :data:`PAGES` into ``<root>/notebooks/`` (only those whose text changed)."""
    root = Path(root)
    template = root / TEMPLATE
    if not template.is_file():
        return []
    text = template.read_text(encoding="utf-8")
    written = []
    for name, values in PAGES.items():
        target = root / "notebooks" / f"{name}.md"
        page = render(text, values)
        if not target.is_file() or target.read_text(encoding="utf-8") != page:
            write_text(target, page)
            written.append(target)
    return written
