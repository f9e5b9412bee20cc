"""The whole book as one PDF: ``make pdf`` (after ``make book``).

    python -m resgd.publish.pdf [--root DIR]

``make pdf`` first renders the book's executed notebooks and pages into one HTML page
(``jupyter-book build . --builder singlehtml`` → ``_build/singlehtml/book/intro.html``). This module
then prints that page with Debian's headless Chromium (:mod:`resgd.publish.browser`, the browser tests'
Chromium): served from a local port, every image loaded and MathJax finished typesetting, then
DevTools ``Page.printToPDF``. Jupyter Book's own ``pdfhtml`` builder would need pyppeteer, which
downloads a Chromium build of its own. Chromium numbers the pages (its print footer) but writes no
bookmarks: :func:`add_outline` adds them, one per chapter and section (:func:`outline_headings`), each
found on the first page at or after its predecessor's whose text holds the heading (pypdf). Links into
the page become jumps inside the PDF (none points at the local server that served it), wide tables
wrap inside the margins, and the build's commit is printed under the title. The PDF is written
atomically to ``_build/pdf/`` and copied into the site (``_build/html/``), whose intro page links to it.
"""

from __future__ import annotations

import argparse
import base64
import io
import re
import sys
import time
import unicodedata
from pathlib import Path
from typing import Sequence

import yaml

from . import browser
from ..infra.atomic import write_bytes
from .toc import find_root

PDF_NAME = "resgd-companion.pdf"
SINGLEHTML = Path("_build") / "singlehtml"
PDF_DIR = Path("_build") / "pdf"
SITE = Path("_build") / "html"

# A4, with the page number at the foot of each page.
PRINT_OPTIONS = {
    "paperWidth": 8.27,
    "paperHeight": 11.69,
    "marginTop": 0.6,
    "marginBottom": 0.7,
    "marginLeft": 0.6,
    "marginRight": 0.6,
    "printBackground": True,
    "scale": 0.85,  # wide tables and displayed equations fit the page width
    "displayHeaderFooter": True,
    "headerTemplate": "<span></span>",
    "footerTemplate": '<div style="font-size:8px;width:100%;text-align:center;">'
                      '<span class="pageNumber"></span> / <span class="totalPages"></span></div>',
}

# Paper has no horizontal scrollbar: long code lines wrap instead of being cut at the margin.
PRINT_CSS = """
const style = document.createElement('style');
style.textContent = `@media print {
  pre { white-space: pre-wrap !important; overflow-wrap: anywhere; }
  .highlight, .cell_output, .output, mjx-container { overflow: visible !important; }
  table { max-width: 100% !important; font-size: 0.78em; }
  th, td { overflow-wrap: anywhere; word-break: break-word; }
}`;
document.head.appendChild(style);
"""

# Paper has no server: a link into the single page becomes a jump inside the PDF (its fragment),
# a link to another file of the site (a figure at full size, the PDF itself) plain text. The build's
# provenance line (commit, date) goes under the title, so the first page says which build it is.
PRINT_LINKS = """
let inside = 0, dropped = 0;
document.querySelectorAll('a[href]').forEach(a => {
  const u = new URL(a.getAttribute('href'), location.href);
  if (u.origin !== location.origin) return;
  if (u.pathname === location.pathname) { if (u.hash) { a.setAttribute('href', u.hash); inside++; } }
  else { a.removeAttribute('href'); dropped++; }
});
const prov = document.querySelector('.resgd-provenance');
const title = document.querySelector('h1');
if (prov && title) {
  const line = document.createElement('p');
  line.className = 'resgd-pdf-provenance';
  line.textContent = prov.textContent.trim();
  title.after(line);
}
return {inside: inside, dropped: dropped, provenance: !!(prov && title)};
"""

# What the page shows once settled: math typeset, images loaded; raw TeX left in visible text.
PAGE_STATE = """
const copy = document.body.cloneNode(true);
copy.querySelectorAll('pre, code, script, style, mjx-container, .cell_input').forEach(n => n.remove());
const text = copy.innerText;
return {
  math: document.querySelectorAll('.math').length,
  typeset: document.querySelectorAll('mjx-container').length,
  images: document.images.length,
  broken: Array.from(document.images).filter(i => !(i.naturalWidth > 0)).map(i => i.src),
  rawTex: ['$$', '\\\\(', '\\\\['].filter(t => text.includes(t)),
};
"""


# The page's h1/h2/h3 in document order: the outline's titles (mathematics as its plain text) and the
# text before any mathematics, which is how the heading is found in the PDF's extracted text.
HEADINGS = """
const main = document.querySelector('article.bd-article, main, [role=main]') || document.body;
return Array.from(main.querySelectorAll('h1, h2, h3')).map(h => {
  const copy = h.cloneNode(true);
  copy.querySelectorAll('.headerlink').forEach(n => n.remove());
  const bare = copy.cloneNode(true);
  copy.querySelectorAll('mjx-container').forEach(n => {
    const mml = n.querySelector('mjx-assistive-mml');
    n.replaceWith(document.createTextNode(mml ? mml.textContent : ''));
  });
  let key = '';
  for (const node of Array.from(bare.childNodes)) {
    if (node.nodeType === 1 && (node.matches('mjx-container, .math') || node.querySelector('mjx-container, .math'))) break;
    key += node.textContent;
  }
  return {level: Number(h.tagName[1]), title: copy.textContent.replace(/\\s+/g, ' ').trim(), key: key.trim()};
}).filter(h => h.title);
"""


def squash(text: str) -> str:
    """Text as compared with the PDF's: no spacing, case, ligatures or typographic apostrophes."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text).replace("\u2019", "'")).lower()


def locate(headings: Sequence[dict], pages: Sequence[str]) -> list[int | None]:
    """The page index of each heading: the first page, at or after the previous heading's, whose
    text holds the heading's key (its first 40 characters; the title when the key is too short to
    tell); None when not found (it then gets no bookmark, the next search starts where it was)."""
    flat = [squash(p) for p in pages]
    out, at = [], 0
    for h in headings:
        key = squash(h.get("key") or "")
        key = (key if len(key) >= 4 else squash(h["title"]))[:40]
        found = next((i for i in range(at, len(flat)) if key and key in flat[i]), None)
        out.append(found)
        at = found if found is not None else at
    return out


def outline_headings(headings: Sequence[dict]) -> list[dict]:
    """The headings that get a bookmark, at levels 1 (chapters) and 2 (sections). The chapters are
    the shallowest level with two or more distinct titles: in the single-page book the one h1 is the
    book's title (printed twice: the page's and the intro's), its chapters are h2 and sections h3."""
    levels = sorted({h["level"] for h in headings})
    top = next((lv for lv in levels if len({h["title"] for h in headings if h["level"] == lv}) >= 2), None)
    if top is None:
        return []
    return [{**h, "level": h["level"] - top + 1} for h in headings if top <= h["level"] <= top + 1]


def add_outline(pdf: bytes, headings: Sequence[dict]) -> tuple[bytes, int]:
    """``pdf`` with bookmarks for ``headings`` (h2 under the h1 before it), opened with the
    bookmarks pane showing; returns the new PDF and the number of bookmarks."""
    from pypdf import PdfReader, PdfWriter

    reader = PdfReader(io.BytesIO(pdf))
    pages = locate(headings, [page.extract_text() or "" for page in reader.pages])
    writer = PdfWriter(clone_from=reader)
    parents: dict[int, object] = {}
    count = 0
    for h, page in zip(headings, pages):
        if page is None:
            continue
        parent = next((parents[lv] for lv in range(h["level"] - 1, 0, -1) if lv in parents), None)
        parents[h["level"]] = writer.add_outline_item(title=h["title"], page_number=page, parent=parent)
        for deeper in [lv for lv in parents if lv > h["level"]]:
            del parents[deeper]
        count += 1
    writer.page_mode = "/UseOutlines"
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue(), count


class BookPdfError(RuntimeError):
    """The single-page book is missing or did not render completely."""


def single_page(root: Path) -> Path:
    """The single-page book, placed at the top of ``_build/singlehtml/``.

    Jupyter Book names the page after the TOC's root document (``book/intro.html``), but writes
    its links to images and scripts relative to the build folder; a copy at the top (written by
    :func:`place_single_page`) finds them.
    """
    return root / SINGLEHTML / "book.html"


def place_single_page(root: Path) -> Path:
    doc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf8"))["root"]
    built = root / SINGLEHTML / f"{Path(doc).with_suffix('').as_posix()}.html"
    if not built.is_file():
        raise BookPdfError(f"no {built}: run `jupyter-book build . --builder singlehtml` (make pdf)")
    return write_bytes(single_page(root), built.read_bytes())


def print_pdf(page: Path, out: Path, log=print) -> dict:
    """Print the HTML file ``page`` to ``out``; returns the page's state (see PAGE_STATE)."""
    with browser.serve(page.parent) as url, browser.chromium(timeout_s=300) as driver:
        driver.get(f"{url}/{page.name}")
        browser.wait_for_page(driver)
        driver.execute_script(PRINT_CSS)
        state = driver.execute_script(PAGE_STATE)
        log(f"book_pdf: {state['images']} images, {state['typeset']} of {state['math']} math elements typeset")
        problems = []
        if state["broken"]:
            problems.append(f"images that did not load: {state['broken'][:5]}")
        if state["math"] and not state["typeset"]:
            problems.append("MathJax typeset nothing")
        if state["rawTex"]:
            problems.append(f"raw TeX {state['rawTex']} left in the text")
        if problems:
            raise BookPdfError(f"{page}: " + "; ".join(problems))
        headings = outline_headings(driver.execute_script(HEADINGS))
        links = driver.execute_script(PRINT_LINKS)
        log(f"book_pdf: {links['inside']} links made jumps inside the PDF, {links['dropped']} to other files made text")
        state.update(links)
        pdf = base64.b64decode(driver.execute_cdp_cmd("Page.printToPDF", PRINT_OPTIONS)["data"])
    pdf, marks = add_outline(pdf, headings)
    log(f"book_pdf: {marks} of {len(headings)} headings bookmarked")
    state["bookmarks"] = marks
    write_bytes(out, pdf)
    return state


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m resgd.publish.pdf", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, help="book root (default: nearest folder with _toc.yml)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        root = find_root(args.root)
        out = root / PDF_DIR / PDF_NAME
        print_pdf(place_single_page(root), out)
    except (BookPdfError, FileNotFoundError) as exc:
        print(f"book_pdf: error: {exc}", file=sys.stderr)
        return 1
    site = root / SITE
    if site.is_dir():
        write_bytes(site / PDF_NAME, out.read_bytes())
    print(f"book_pdf: {out.relative_to(root)} ({out.stat().st_size / 1e6:.1f} MB) in "
          f"{time.perf_counter() - start:.1f} s" + (f"; copied to {SITE / PDF_NAME}" if site.is_dir() else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
