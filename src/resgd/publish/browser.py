"""Headless Chromium for the built book: the PDF (:mod:`resgd.publish.pdf`) and the browser tests.

Debian's ``chromium`` and ``chromium-driver`` (``make chromium``), driven by selenium; nothing is
downloaded (Selenium Manager is kept offline). The built site is served from a local port, so that
MathJax and the images load as they do on the published site.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Iterator

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROME_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,900",
]

# Resolves once every image has loaded (or failed) and MathJax, if the page loads it, has typeset.
# MathJax's script is deferred: wait for MathJax.startup to exist before awaiting its promise.
WAIT_FOR_PAGE = """
const done = arguments[arguments.length - 1];
document.querySelectorAll('img[loading="lazy"]').forEach(img => { img.loading = 'eager'; });
const images = () => Promise.all(Array.from(document.images).map(img => img.complete ? null :
    new Promise(ok => { img.addEventListener('load', ok); img.addEventListener('error', ok); })));
const wantsMath = () => Array.from(document.scripts).some(s => /mathjax/i.test(s.src));
const math = () => new Promise((ok, fail) => {
  const start = Date.now();
  (function poll() {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) return MathJax.startup.promise.then(ok, fail);
    if (!wantsMath() || Date.now() - start > 30000) return ok();
    setTimeout(poll, 100);
  })();
});
images().then(math).then(() => done(true), err => done(String(err)));
"""


def have_chromium() -> bool:
    return CHROMIUM.exists() and CHROMEDRIVER.exists()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on a free local port; yields the base URL."""
    handler = functools.partial(QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def chromium(timeout_s: float = 60, *, javascript: bool = True) -> Iterator:
    """A selenium driver of Debian's headless Chromium, with a throw-away profile (``javascript=False``:
    scripts off, as a reader who blocks them)."""
    if not have_chromium():
        raise FileNotFoundError(f"{CHROMIUM} or {CHROMEDRIVER} missing: run `make chromium`"
                                " (apt-get install chromium chromium-driver)")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never try to download a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="resgd-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROME_FLAGS + [f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for driver.get_log("browser")
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        driver.set_page_load_timeout(timeout_s)
        driver.set_script_timeout(timeout_s)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for_page(driver) -> None:
    """Block until the page's images have loaded and its mathematics is typeset."""
    result = driver.execute_async_script(WAIT_FOR_PAGE)
    if result is not True:
        raise RuntimeError(f"page {driver.current_url} did not settle: {result}")


# How the page's tables read at the window's width: (a) cells in which a number (-1.2e-3, 0.9688,
# 12,345, 3/8, 12–0, 95 %) is drawn on more than one line, read from the line boxes of a DOM Range over the
# number; (b) tables wider than their column, which the reader must scroll sideways (the table's
# scroll box, or else the article's text column, is narrower than the table). Folded parts of the
# page (<details>) are opened first: a reader can open them. A table of no width (not shown) is skipped.
TABLE_FIT = r"""
const article = document.querySelector('article.bd-article') || document.body;
article.querySelectorAll('details').forEach(d => { d.open = true; });
const NUMBER = /[-−+]?(?:\d+[\/–]\d+|(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:[eE][-−+]?\d+)?(?:[ \u00a0\u202f]?%)?)/g;
const lines = rects => {
  const tops = Array.from(rects).filter(r => r.width > 0).map(r => [r.top, r.bottom]).sort((a, b) => a[0] - b[0]);
  let count = 0, bottom = -Infinity;
  tops.forEach(([top, end]) => { if (top >= bottom - 1) { count += 1; bottom = end; } else bottom = Math.max(bottom, end); });
  return count;
};
const broken = cell => {
  const found = [];
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  let node;
  while ((node = walker.nextNode())) {
    const text = node.textContent; let m; NUMBER.lastIndex = 0;
    while ((m = NUMBER.exec(text))) {
      if (m[0].length < 2) continue;
      const range = document.createRange();
      range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
      if (lines(range.getClientRects()) > 1) found.push(m[0]);
    }
  }
  return found;
};
const column = (() => { const r = article.getBoundingClientRect(), s = getComputedStyle(article);
                        return r.right - parseFloat(s.paddingRight) + 1; })();
const scrollBox = t => { for (let p = t.parentElement; p && p !== article; p = p.parentElement)
                           if (/auto|scroll|hidden/.test(getComputedStyle(p).overflowX)) return p; return null; };
const label = t => t.textContent.replace(/\s+/g, ' ').trim().slice(0, 60);
const tables = Array.from(article.querySelectorAll('table')).filter(t => t.getBoundingClientRect().width > 0);
const out = {tables: tables.length, splitTables: [], splitCells: 0, splitNumbers: [], wideTables: []};
tables.forEach(t => {
  const cells = Array.from(t.querySelectorAll('td, th')).map(broken).filter(f => f.length);
  if (cells.length) { out.splitTables.push(label(t)); out.splitCells += cells.length; out.splitNumbers.push(...cells.flat().slice(0, 3)); }
  const box = scrollBox(t);
  const over = (box && box.scrollWidth > box.clientWidth + 1) || t.getBoundingClientRect().right > column;
  if (over) out.wideTables.push({table: label(t), width: Math.round(box ? box.scrollWidth : t.scrollWidth),
                                 column: Math.round(box ? box.clientWidth : column)});
});
return out;
"""


def table_fit(driver) -> dict:
    """:data:`TABLE_FIT` on the page loaded in ``driver``: ``tables`` (shown), ``splitTables`` and
    ``splitCells`` (a number on more than one line; ``splitNumbers`` a few of them), ``wideTables``
    (each with its width and its column's, px)."""
    return driver.execute_script(TABLE_FIT)
