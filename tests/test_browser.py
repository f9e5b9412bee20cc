"""The built book in headless Chromium: images load, MathJax typesets, no table breaks a number or
scrolls sideways, no equation is cut off, screenshots are saved.

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


def write_page(folder: Path, body: str) -> str:
    """A page of ``body`` in the book's article column, with the book's style sheet; its file URL."""
    css = (ROOT / "_static" / "resgd.css").read_text()
    page = folder / "page.html"
    page.write_text(f'<!doctype html><html><head><meta charset="utf-8"><style>{css}</style></head>'
                    f'<body><article class="bd-article" style="width: 661px">{body}</article></body></html>')
    return page.as_uri()


BROKEN_NUMBER = '<table><tr><td style="max-width: 2.5em; overflow-wrap: anywhere">0.968812</td><td>ok</td></tr></table>'
WIDE_TABLE = ('<div style="overflow-x: auto"><table><tr><td style="white-space: nowrap">'
              + "a long line of words " * 12 + "</td></tr></table></div>")


def test_table_check_finds_a_broken_number_and_a_table_wider_than_its_column(driver, tmp_path):
    """The checker the site test relies on can fail: a number drawn on two lines, a table scrolled sideways."""
    driver.set_window_size(1280, 900)
    driver.get(write_page(tmp_path, BROKEN_NUMBER + WIDE_TABLE))
    fit = browser.table_fit(driver)
    assert fit["tables"] == 2 and fit["splitCells"] == 1 and fit["splitNumbers"] == ["0.968812"], fit
    assert len(fit["wideTables"]) == 1 and fit["wideTables"][0]["width"] > fit["wideTables"][0]["column"], fit
    driver.get(write_page(tmp_path, BROKEN_NUMBER.replace("overflow-wrap: anywhere", "")
                          + WIDE_TABLE.replace("white-space: nowrap", "")))
    fit = browser.table_fit(driver)
    assert fit["tables"] == 2 and fit["splitCells"] == 0 and not fit["wideTables"], fit


def test_a_wide_table_of_numbers_is_shown_in_parts_that_fit_with_every_number_whole(driver, tmp_path):
    """resgd.plots.tables.table_html and _static/resgd.css: fourteen columns of long numbers, in a
    column as narrow as the book's (661 px), in a narrow cell too: no number broken, no part scrolls."""
    import numpy as np
    import pandas as pd

    from resgd.plots.tables import table_html

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(4, 14)) * 1e-7, columns=[f"sigma_min_of_{i}" for i in range(14)])
    frame.insert(0, "note", ["a sentence long enough to wrap inside its cell, at 95 % and 12,345 runs"] * 4)
    shown = table_html(frame)
    assert shown.count("<table") > 1
    for window in (1280, 768):
        driver.set_window_size(window, 900)
        driver.get(write_page(tmp_path, shown))
        fit = browser.table_fit(driver)
        assert fit["tables"] == shown.count("<table"), fit
        assert fit["splitCells"] == 0 and not fit["wideTables"], fit


def site_docs() -> list[str]:
    return [d for d in toc_docs(ROOT / "_toc.yml") if (SITE / f"{d}.html").is_file()]


# Each typeset equation whose drawn extent passes the edge of a box that clips it (overflow hidden or
# clip; an inline element's overflow does not apply). A box that scrolls is a way to read it.
CLIPPED_MATH = r"""
const out = [];
document.querySelectorAll('article.bd-article mjx-container').forEach(m => {
  const r = (m.querySelector('mjx-math') || m).getBoundingClientRect();
  if (!r.width) return;
  for (let a = m; a && a !== document.documentElement; a = a.parentElement) {
    const s = getComputedStyle(a);
    if (s.overflowX === 'visible' || s.display === 'inline') continue;
    const b = a.getBoundingClientRect();
    if (r.right <= b.right + 1 && r.left >= b.left - 1) continue;
    if (['auto', 'scroll'].includes(s.overflowX)) break;
    out.push((m.querySelector('mjx-assistive-mml') || m).textContent.slice(0, 60));
    break;
  }
});
return out;
"""


def clipped(drv, url: str, window: int) -> list[str]:
    drv.set_window_size(window, 900)
    drv.get(url)
    browser.wait_for_page(drv)
    return drv.execute_script(CLIPPED_MATH)


@pytest.fixture(scope="module")
def at_window():
    """Each site page read once per window width by the two checks of that width (loading and typesetting a
    page is most of their time): first the equations cut off (:data:`CLIPPED_MATH`, which changes nothing),
    then the tables' fit (:func:`resgd.publish.browser.table_fit`, which opens the page's folded parts)."""
    seen: dict[tuple[str, str, int], dict] = {}

    def read(driver, base_url: str, doc: str, window: int) -> dict:
        key = (base_url, doc, window)
        if key not in seen:
            driver.set_window_size(window, 900)
            driver.get(f"{base_url}/{doc}.html")
            browser.wait_for_page(driver)
            seen[key] = {"clipped": driver.execute_script(CLIPPED_MATH), "fit": browser.table_fit(driver)}
        return seen[key]

    return read


@pytest.mark.parametrize("window", [1280, 768])
def test_no_table_breaks_a_number_or_scrolls_sideways(driver, base_url, at_window, window):
    """Every page of the site, in a desktop and a tablet window: no number in a table drawn on two
    lines, no table wider than its column (:func:`resgd.publish.browser.table_fit`)."""
    docs = site_docs()
    if not docs:
        skip_or_fail("no page built")
    problems = []
    for doc in docs:
        fit = at_window(driver, base_url, doc, window)["fit"]
        problems += [f"{doc}: a number on two lines ({', '.join(fit['splitNumbers'])}) in {label!r}"
                     for label in fit["splitTables"]]
        problems += [f"{doc}: table {wide['table']!r} is {wide['width']} px in a {wide['column']}-px column"
                     for wide in fit["wideTables"]]
    assert not problems, f"at {window} px:\n" + "\n".join(problems)


# ---------------------------------------------------------------- no mathematics is cut off on screen
# An equation wider than the column can be scrolled sideways (its own box scrolls, _static/resgd.css), never
# clipped by a box that hides what overflows (section 3.5's proof line, for one, is wider than the column at
# 1280 px).


@pytest.mark.parametrize("window", [1280, 768])
def test_no_equation_is_clipped_on_screen(driver, base_url, at_window, window):
    if not (SITE / "notebooks" / "03_rank_collapse.html").is_file():
        skip_or_fail("notebooks/03_rank_collapse.html not built")
    found = {doc: cut for doc in site_docs() for cut in [at_window(driver, base_url, doc, window)["clipped"]] if cut}
    assert not found, f"at {window} px, equations cut off: {found}"


def test_checker_finds_a_clipped_equation(driver, tmp_path):
    """The check sees an equation cut by a box that hides overflow, and not one in a box that scrolls."""
    wide = "<mjx-container><mjx-math style='display:inline-block;width:900px'>x</mjx-math></mjx-container>"
    page = tmp_path / "p.html"
    page.write_text(f"<html><body><article class='bd-article'><div style='width:300px;overflow:hidden'>{wide}</div>"
                    f"<div style='width:300px;overflow-x:auto'>{wide}</div></article></body></html>", encoding="utf8")
    with browser.serve(tmp_path) as url:
        assert len(clipped(driver, f"{url}/p.html", 1280)) == 1
