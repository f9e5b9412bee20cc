"""The built book in headless Chromium: images load, MathJax typesets, screenshots are saved.

Needs Debian's ``chromium`` and ``chromium-driver`` (``make test`` installs them as root) and a
built site (``make book``). Skips when either is missing, unless ``RESGD_REQUIRE_SITE=1``.
Screenshots go to ``_build/screenshots/NAME.png``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from resgd.publish import browser
from resgd.publish.toc import toc_docs

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
MAX_SHOT_HEIGHT = 16000  # px; longer pages are cut in the screenshot only

pytestmark = pytest.mark.browser


def skip_or_fail(message: str):
    if os.environ.get("RESGD_REQUIRE_SITE") == "1":
        pytest.fail(message + " and RESGD_REQUIRE_SITE=1")
    pytest.skip(message)


@pytest.fixture(scope="module")
def base_url():
    if not (SITE / "index.html").is_file():
        skip_or_fail(f"no built site at {SITE} (run `make book`)")
    with browser.serve(SITE) as url:
        yield url


@pytest.fixture(scope="module")
def driver():
    if not browser.have_chromium():
        skip_or_fail(f"{browser.CHROMIUM} or {browser.CHROMEDRIVER} missing (apt-get install chromium chromium-driver)")
    with browser.chromium() as drv:
        yield drv


def notebook_docs() -> list[str]:
    return [d for d in toc_docs(ROOT / "_toc.yml") if d.startswith("notebooks/")]


PAGE_FACTS = """
const article = document.querySelector('article.bd-article') || document.body;
const copy = article.cloneNode(true);
copy.querySelectorAll('pre, code, script, style, mjx-container, .cell_input').forEach(n => n.remove());
return {
  broken: Array.from(document.images).filter(i => !(i.naturalWidth > 0)).map(i => i.currentSrc || i.src),
  images: document.images.length,
  articleImages: article.querySelectorAll('img').length,
  mathSource: article.querySelectorAll('.math').length,
  typeset: document.querySelectorAll('mjx-container').length,
  text: copy.innerText,
  height: Math.max(document.body.scrollHeight, document.documentElement.scrollHeight),
};
"""


def visit(driver, url: str, shot: str, lands_on: str | None = None) -> dict:
    """Load ``url`` (waiting for a redirect to ``lands_on``), check-ready it, screenshot it."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.set_window_size(1280, 900)
    driver.get_log("browser")  # the console so far (earlier pages) is read and dropped
    driver.get(url)
    if lands_on:
        WebDriverWait(driver, 30).until(lambda d: d.current_url.endswith(lands_on))
        WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")
    browser.wait_for_page(driver)
    facts = driver.execute_script(PAGE_FACTS)
    # Full-page screenshot: make the window as tall as the page, then capture it.
    driver.set_window_size(1280, min(int(facts["height"]) + 100, MAX_SHOT_HEIGHT))
    browser.wait_for_page(driver)  # lazily loaded images now in view
    facts = driver.execute_script(PAGE_FACTS)
    facts["console"] = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(SHOTS / f"{shot}.png"))
    return facts


def assert_page_ok(facts: dict, page: str) -> None:
    assert not facts["broken"], f"{page}: images that did not load: {facts['broken']}"
    assert not facts["console"], f"{page}: console errors: {facts['console']}"
    if facts["mathSource"]:
        assert facts["typeset"] > 0, f"{page}: has math but MathJax typeset nothing"
    text = facts["text"]
    for raw in ("$$", "\\(", "\\["):
        assert raw not in text, f"{page}: raw TeX {raw!r} left in the visible text"


def test_index_page(driver, base_url):
    facts = visit(driver, f"{base_url}/index.html", "index", lands_on="/book/intro.html")
    assert_page_ok(facts, "index")
    assert facts["mathSource"] > 0 and facts["typeset"] > 0, "the intro's mathematics was not typeset"
    assert "Gradient descent" in driver.title


@pytest.mark.parametrize("doc", notebook_docs(), ids=lambda d: Path(d).name)
def test_notebook_page(driver, base_url, doc):
    if not (SITE / f"{doc}.html").is_file():
        skip_or_fail(f"{doc}.html not built")
    facts = visit(driver, f"{base_url}/{doc}.html", Path(doc).name)
    assert_page_ok(facts, doc)
    assert facts["articleImages"] > 0, f"{doc}: no figure on the page"


CAPTION_STYLE = """
const cap = document.querySelector('article figure figcaption p, article figure figcaption');
if (!cap) return null;
const style = getComputedStyle(cap);
const rgb = style.color.match(/[0-9.]+/g).slice(0, 3).map(Number);
return {weight: Number(style.fontWeight), luminance: (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255};
"""


def test_captions_are_readable(driver, base_url):
    """_static/resgd.css: figure captions at normal weight, in a dark colour (light theme)."""
    doc = next((d for d in notebook_docs() if (SITE / f"{d}.html").is_file()), None)
    if doc is None:
        skip_or_fail("no notebook page built")
    driver.get(f"{base_url}/{doc}.html")
    browser.wait_for_page(driver)
    style = driver.execute_script(CAPTION_STYLE)
    assert style is not None, f"{doc}: no figure caption"
    assert style["weight"] >= 400, style
    assert style["luminance"] < 0.3, style  # dark text on the light page


FIGURE_WIDTH = """
const widths = Array.from(document.querySelectorAll('article.bd-article figure img'))
  .filter(i => i.naturalWidth > 0).map(i => [i.clientWidth, i.naturalWidth]);
return widths;
"""


@pytest.mark.parametrize("window", [1280, 768])
def test_wide_figures_get_at_least_the_column_the_legibility_test_assumes(driver, base_url, window):
    """``tests/test_figure_legibility.py`` reads every figure at :data:`COLUMN_PX`; in a desktop
    (1280 px) and a tablet (768 px) window a figure wider than the column is shown at least that wide."""
    import matplotlib.pyplot as plt

    from resgd.plots.style import COLUMN_PX, use_style

    use_style()
    shown_per_saved = plt.rcParams["figure.dpi"] / plt.rcParams["savefig.dpi"]  # glue_figure's display width

    doc = "notebooks/04_jena"
    if not (SITE / f"{doc}.html").is_file():
        skip_or_fail(f"{doc}.html not built")
    driver.set_window_size(window, 900)
    driver.get(f"{base_url}/{doc}.html")
    browser.wait_for_page(driver)
    shown = driver.execute_script(FIGURE_WIDTH)
    assert shown, f"{doc} at {window} px: no figure"
    widest, natural = max(shown)  # the widest figure, capped by the column
    assert natural * shown_per_saved > widest, f"{doc} at {window} px: the widest figure ({widest} px) is not capped by the column"
    assert widest >= COLUMN_PX, f"{doc} at {window} px: a wide figure is shown {widest} px wide, under {COLUMN_PX}"
