"""The whole book as one PDF: ``make pdf`` (after ``make book``).

    python -m resgd.publish.pdf [--root DIR]

``make pdf`` first renders the book's executed notebooks and pages into one HTML page
(``jupyter-book build . --builder singlehtml`` → ``_build/singlehtml/book/intro.html``). This module
then prints that page with Debian's headless Chromium (:mod:`resgd.publish.browser`, the browser tests'
Chromium): served from a local port, every image loaded and MathJax finished typesetting, then
DevTools ``Page.printToPDF``. Jupyter Book's own ``pdfhtml`` builder would need pyppeteer, which
downloads a Chromium build of its own. The PDF is written atomically to ``_build/pdf/`` and
copied into the site (``_build/html/``), whose intro page links to it.
"""

from __future__ import annotations

import argparse
import base64
import sys
import time
from pathlib import Path
from typing import Sequence

import yaml

from . import browser
from ..atomic import write_bytes
from .build import find_root

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
  .highlight, .cell_output, .output, .table-wrapper, mjx-container { overflow: visible !important; }
}`;
document.head.appendChild(style);
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
        pdf = base64.b64decode(driver.execute_cdp_cmd("Page.printToPDF", PRINT_OPTIONS)["data"])
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
