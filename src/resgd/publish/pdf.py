"""The whole book as one PDF: ``make pdf`` (after ``make book``).

    python -m resgd.publish.pdf [--root DIR]

``make pdf`` first renders the book's executed notebooks and pages into one HTML page
(``jupyter-book build . --builder singlehtml`` → ``_build/singlehtml/book/intro.html``). This module
then prints that page with Debian's headless Chromium (:mod:`resgd.publish.browser`, the browser tests'
Chromium): served from a local port, every image loaded and MathJax finished typesetting, then
DevTools ``Page.printToPDF``. Jupyter Book's own ``pdfhtml`` builder would need pyppeteer, which
downloads a Chromium build of its own. Chromium numbers the pages (its print footer) but writes no
bookmarks: :func:`add_outline` adds them, one per chapter and section (:func:`outline_headings`), each
on the page of Chromium's link destination for the heading's own id (the merged page repeats ids,
so every heading gets one of its own first; a text search of the pages is the fallback). Before
printing, the page is laid out at the paper's text width: numbers in tables are kept whole, tables
still too wide are zoomed down, equations too wide are set smaller. The printed Contents gets page
numbers by printing again with the pages read back from the PDF, until they stop changing. Links
into the page become jumps inside the PDF (none points at the local server that served it), and the
build's commit is printed under the title. The PDF is written
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

# Paper has no horizontal scrollbar: long code lines wrap instead of being cut at the margin; a table
# wraps its text at spaces only, never inside a number (FIT_LAYOUT keeps each number on one line and
# scales a table that is still wider than the column), its header repeats on each page, a row is not
# split between pages; mathematics is never clipped (FIT_LAYOUT scales what is wider than the column);
# a chapter starts on a new page, a heading stays with what follows it; the Contents' page numbers
# (CONTENTS_PAGES) sit at the right margin.
PRINT_CSS = """
const style = document.createElement('style');
style.textContent = `@media print {
  pre { white-space: pre-wrap !important; overflow-wrap: anywhere; }
  .highlight, .cell_output, .output, div.math, span.math, mjx-container { overflow: visible !important; }
  table { max-width: 100% !important; font-size: 0.78em; table-layout: auto !important; }
  thead { display: table-header-group; }
  tr { break-inside: avoid; }
  th, td { overflow-wrap: normal !important; word-break: normal !important; hyphens: manual !important;
           padding: 0.2em 0.35em !important; }
  .resgd-num { white-space: nowrap; }
  h1, h2, h3, h4 { break-after: avoid-page; break-inside: avoid-page; }
  .toctree-wrapper > section:has(> h2) { break-before: page; }
  #jb-print-toc a.resgd-toc-numbered { display: flex !important; gap: 1em; }
  #jb-print-toc .resgd-toc-page { margin-left: auto; white-space: nowrap; }
}`;
document.head.appendChild(style);
"""

# Laid out as on paper (print media, the page's text width), before printing: each number in a table
# cell becomes one unbreakable span; a table wider than its column is zoomed down to fit (no further
# than MIN_TABLE_ZOOM); displayed mathematics wider than its column is set smaller to fit, inline
# mathematics that would run past the margin moves to its own line (and is set smaller when even a
# line is too short). Returns what still does not fit (layout_problems reads it).
FIT_LAYOUT = r"""
const minZoom = arguments[0];
const main = document.querySelector('article.bd-article, main, [role=main]') || document.body;
const NUM = /[-−+]?(?:\d[\d.,]*\d|\d)(?:e[-+]?\d+)?%?/g;
const numbers = cell => {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  const nodes = []; let n;
  while ((n = walker.nextNode())) if (!n.parentElement.closest('.resgd-num, mjx-container')) nodes.push(n);
  nodes.forEach(node => {
    const text = node.textContent, frag = document.createDocumentFragment();
    let at = 0, m; NUM.lastIndex = 0;
    while ((m = NUM.exec(text))) {
      if (m[0].length < 2) continue;
      frag.append(text.slice(at, m.index));
      const span = document.createElement('span'); span.className = 'resgd-num'; span.textContent = m[0];
      frag.append(span); at = m.index + m[0].length;
    }
    if (at) { frag.append(text.slice(at)); node.replaceWith(frag); }
  });
};
// a number drawn on more than one line
const split = cell => Array.from(cell.querySelectorAll('.resgd-num')).some(s =>
  new Set(Array.from(s.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.top))).size > 1);
const width = el => el.getBoundingClientRect().width;
// the column an element must fit: the content box of its nearest block ancestor (a displayed
// equation's: its own div.math)
const block = el => { let p = el.parentElement; while (p && getComputedStyle(p).display.startsWith('inline')) p = p.parentElement; return p; };
const bounds = el => { const r = el.getBoundingClientRect(), s = getComputedStyle(el);
                       return [r.left + parseFloat(s.paddingLeft) - 1, r.right - parseFloat(s.paddingRight) + 1]; };
const columnOf = el => el.matches('mjx-container[display="true"]') ? bounds(el.parentElement) : bounds(block(el));
const over = (el, inner) => { const [left, right] = columnOf(el), r = (inner || el).getBoundingClientRect();
                              return r.width > 0 && (r.right > right || r.left < left); };
// a column name such as iterations_to_target may break after its underscores
const breakNames = t => t.querySelectorAll('th').forEach(th => {
  const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT); const nodes = []; let n;
  while ((n = walker.nextNode())) if (n.textContent.includes('_')) nodes.push(n);
  nodes.forEach(node => { const frag = document.createDocumentFragment();
    node.textContent.split(/(?<=_)/).forEach((part, i) => { if (i) frag.append(document.createElement('wbr')); frag.append(part); });
    node.replaceWith(frag); });
});
const tables = Array.from(main.querySelectorAll('table')).filter(t => width(t) > 0);
const zoomed = [];
tables.forEach(t => {
  t.querySelectorAll('td, th').forEach(numbers);
  if (over(t)) breakNames(t);
  let zoom = 1;
  for (let i = 0; i < 4; i++) {
    const [left, right] = columnOf(t), r = t.getBoundingClientRect();
    if (r.right <= right || zoom <= minZoom) break;
    zoom = Math.max(minZoom, zoom * (right - left) / r.width * 0.99);
    t.style.zoom = zoom;
  }
  if (zoom < 1) zoomed.push(Math.round(zoom * 100) / 100);
});
// true when the equation was set smaller
const fitMath = m => {
  const inner = m.querySelector('mjx-math') || m;
  const display = m.getAttribute('display') === 'true';
  let smaller = false;
  for (let i = 0; i < 5; i++) {
    const [left, right] = columnOf(m), r = inner.getBoundingClientRect();
    if (r.right <= right && r.left >= left) break;
    if (!display && m.style.display !== 'inline-block') { m.style.display = 'inline-block'; continue; }
    const size = parseFloat(m.style.fontSize || '100') || 100;
    m.style.fontSize = (size * (right - left) / r.width * 0.98) + '%';
    smaller = true;
  }
  return smaller;
};
const scaled = Array.from(main.querySelectorAll('mjx-container')).filter(fitMath).length;
const mathOver = Array.from(main.querySelectorAll('mjx-container')).filter(m => over(m, m.querySelector('mjx-math') || m));
const label = el => (el.querySelector('mjx-assistive-mml') || el).textContent.replace(/\s+/g, ' ').trim().slice(0, 60);
return {
  tables: tables.length, zoomed: zoomed,
  splitTables: tables.filter(t => Array.from(t.querySelectorAll('td, th')).some(split)).map(label),
  wideTables: tables.filter(t => over(t)).map(label),
  math: main.querySelectorAll('mjx-container').length, mathScaled: scaled, wideMath: mathOver.map(label),
};
"""
MIN_TABLE_ZOOM = 0.55
"""A wide table is zoomed no further (0.78em × 0.85 × 0.55: about 4.5 pt); past this it is reported."""

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


# The page's h1/h2/h3 in document order: the outline's titles (mathematics as its plain text), an id
# given to each heading and linked from its headerlink (Chromium writes a named destination for the
# target of every link: the heading's page) and the text before any mathematics, which finds the
# heading in the PDF's text when it has no destination. Run before CONTENTS, which reads the ids.
HEADINGS = """
const main = document.querySelector('article.bd-article, main, [role=main]') || document.body;
return Array.from(main.querySelectorAll('h1, h2, h3')).map((h, i) => {
  // an id of its own (the merged pages repeat ids such as id1), which its headerlink points at
  h.id = 'resgd-heading-' + i;
  let link = h.querySelector('a.headerlink');
  if (!link) { link = document.createElement('a'); link.className = 'headerlink'; h.append(link); }
  link.setAttribute('href', '#' + h.id);
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
  return {level: Number(h.tagName[1]), title: copy.textContent.replace(/\\s+/g, ' ').trim(), key: key.trim(), id: h.id};
}).filter(h => h.title);
"""


# The printed Contents' entries (Jupyter Book's print-only table of contents): for each, the id it links
# to (a mark before the chapter's section) and the id HEADINGS gave the chapter's first heading, whose
# page it shows; with a page number for each (arguments[0], link id -> number), each entry gets it at
# the right margin.
CONTENTS = """
return Array.from(document.querySelectorAll('#jb-print-toc a[href^="#"]')).map(a => {
  const id = decodeURIComponent(a.getAttribute('href').slice(1));
  let el = document.getElementById(id);
  while (el && !el.matches('section') && !el.querySelector('h1, h2, h3')) el = el.nextElementSibling;
  const h = el && (el.matches('h1, h2, h3') ? el : el.querySelector('h1, h2, h3'));
  return [id, h ? h.id : id];
});
"""
CONTENTS_PAGES = """
const numbers = arguments[0];
let done = 0;
document.querySelectorAll('#jb-print-toc a[href^="#"]').forEach(a => {
  const n = numbers[decodeURIComponent(a.getAttribute('href').slice(1))];
  if (n === undefined) return;
  let span = a.querySelector('.resgd-toc-page');
  if (!span) {
    const label = document.createElement('span');
    label.append(...Array.from(a.childNodes));
    span = document.createElement('span'); span.className = 'resgd-toc-page';
    a.append(label, span); a.classList.add('resgd-toc-numbered');
  }
  span.textContent = String(n); done++;
});
return done;
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


def destination_pages(pdf: bytes) -> dict[str, int]:
    """The page index of each named destination Chromium wrote (one per element id that a link of the
    page points at, a section's headerlink included)."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(pdf))
    out = {}
    for name, dest in reader.named_destinations.items():
        page = reader.get_destination_page_number(dest)
        if page >= 0:
            out[name[1:] if name.startswith("/") else name] = page
    return out


def heading_pages(headings: Sequence[dict], pdf: bytes) -> list[int | None]:
    """Each heading's page index: its destination (HEADINGS links each heading), else the page
    :func:`locate` finds its text on (the pages' text is extracted only when a heading lacks a
    destination: reading the whole book's text costs more than printing it)."""
    from pypdf import PdfReader

    dests = destination_pages(pdf)
    if all((h.get("id") or "") in dests for h in headings):
        return [dests[h["id"]] for h in headings]
    found = locate(headings, [page.extract_text() or "" for page in PdfReader(io.BytesIO(pdf)).pages])
    return [dests.get(h.get("id") or "", where) for h, where in zip(headings, found)]


def layout_problems(layout: dict) -> list[str]:
    """What FIT_LAYOUT could not make fit the printed column: tables with a number on two lines, tables
    or mathematics wider than the column."""
    problems = []
    for key, what in (("splitTables", "a number broken across lines in table"),
                      ("wideTables", "table wider than the column"), ("wideMath", "mathematics wider than the column")):
        problems += [f"{what}: {label!r}" for label in layout.get(key, [])]
    return problems


def outline_headings(headings: Sequence[dict]) -> list[dict]:
    """The headings that get a bookmark, at levels 1 (chapters) and 2 (sections). The chapters are
    the shallowest level with two or more distinct titles: in the single-page book the one h1 is the
    book's title (printed twice: the page's and the intro's), its chapters are h2 and sections h3."""
    levels = sorted({h["level"] for h in headings})
    top = next((lv for lv in levels if len({h["title"] for h in headings if h["level"] == lv}) >= 2), None)
    if top is None:
        return []
    return [{**h, "level": h["level"] - top + 1} for h in headings if top <= h["level"] <= top + 1]


def add_outline(pdf: bytes, headings: Sequence[dict], pages: Sequence[int | None] | None = None) -> tuple[bytes, int]:
    """``pdf`` with bookmarks for ``headings`` (h2 under the h1 before it) on ``pages`` (default:
    :func:`heading_pages`), opened with the bookmarks pane showing; returns the new PDF and the
    number of bookmarks."""
    from pypdf import PdfReader, PdfWriter

    reader = PdfReader(io.BytesIO(pdf))
    pages = heading_pages(headings, pdf) if pages is None else pages
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


def print_width_px() -> int:
    """The printed text column's width in CSS pixels (paper less margins, at PRINT_OPTIONS' scale)."""
    inches = PRINT_OPTIONS["paperWidth"] - PRINT_OPTIONS["marginLeft"] - PRINT_OPTIONS["marginRight"]
    return int(inches * 96 / PRINT_OPTIONS["scale"])


def fit_layout(driver) -> dict:
    """Lay the page out as on paper (print media, the text column's width) and make it fit there
    (FIT_LAYOUT); the page keeps the changes when printed."""
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": print_width_px() - 2, "height": 1100, "deviceScaleFactor": 1, "mobile": False})
    try:
        return driver.execute_script(FIT_LAYOUT, MIN_TABLE_ZOOM)
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})


def print_with_contents_pages(driver, max_passes: int = 3) -> tuple[bytes, dict[str, int]]:
    """Print, read the page of each Contents entry's target from the PDF's destinations, write the
    numbers into the Contents and print again, until the numbers printed are the pages (Chromium
    cannot number a table of contents itself); returns the PDF and the numbers (1-based)."""
    targets = driver.execute_script(CONTENTS)
    printed: dict[str, int] = {}
    for _ in range(max_passes):
        pdf = base64.b64decode(driver.execute_cdp_cmd("Page.printToPDF", PRINT_OPTIONS)["data"])
        dests = destination_pages(pdf)
        numbers = {link: dests[heading] + 1 for link, heading in targets if heading in dests}
        if numbers == printed:
            return pdf, numbers
        driver.execute_script(CONTENTS_PAGES, numbers)
        printed = numbers
    raise BookPdfError(f"the Contents' page numbers did not settle in {max_passes} prints")


def print_pdf(page: Path, out: Path, log=print) -> dict:
    """Print the HTML file ``page`` to ``out``; returns the page's state (see PAGE_STATE), what
    FIT_LAYOUT did (``layout``), the Contents' page numbers and the number of bookmarks."""
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
        layout = fit_layout(driver)
        state["layout"] = layout
        floor = sum(zoom <= MIN_TABLE_ZOOM for zoom in layout["zoomed"])
        log(f"book_pdf: {len(layout['zoomed'])} of {layout['tables']} tables zoomed to fit the column "
            f"(down to {min(layout['zoomed'], default=1):.2f}, {floor} at the floor {MIN_TABLE_ZOOM}), "
            f"{layout['mathScaled']} equations set smaller")
        for problem in layout_problems(layout):
            log(f"book_pdf: warning: {problem}")
        headings = outline_headings(driver.execute_script(HEADINGS))
        links = driver.execute_script(PRINT_LINKS)
        log(f"book_pdf: {links['inside']} links made jumps inside the PDF, {links['dropped']} to other files made text")
        state.update(links)
        pdf, contents = print_with_contents_pages(driver)
    state["contents"] = contents
    log(f"book_pdf: {len(contents)} Contents entries numbered")
    pdf, marks = add_outline(pdf, headings)
    log(f"book_pdf: {marks} of {len(headings)} headings bookmarked")
    if marks < len(headings):
        log(f"book_pdf: warning: {len(headings) - marks} headings without a bookmark")
    state["bookmarks"] = marks
    state["headings"] = len(headings)
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
