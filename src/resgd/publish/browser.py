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
