"""On screen, no mathematics is cut off: an equation wider than the column can be scrolled sideways
(its own box scrolls, _static/resgd.css), never clipped by a box that hides what overflows (section 3.5's proof line, for one, is wider than
the column at 1280 px).

Needs Chromium and a built site (``make book``); skips without them unless ``RESGD_REQUIRE_SITE=1``.
"""

from __future__ import annotations

import pytest

from resgd.publish import browser
from resgd.publish.toc import toc_docs

from test_browser import ROOT, SITE, base_url, driver, skip_or_fail  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

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


@pytest.mark.parametrize("window", [1280, 768])
def test_no_equation_is_clipped_on_screen(driver, base_url, window):  # noqa: F811
    docs = toc_docs(ROOT / "_toc.yml")
    if not (SITE / "notebooks" / "03_rank_collapse.html").is_file():
        skip_or_fail("notebooks/03_rank_collapse.html not built")
    found = {doc: cut for doc in docs if (SITE / f"{doc}.html").is_file()
             for cut in [clipped(driver, f"{base_url}/{doc}.html", window)] if cut}
    assert not found, f"at {window} px, equations cut off: {found}"


def test_checker_finds_a_clipped_equation(driver, tmp_path):  # noqa: F811
    """The check sees an equation cut by a box that hides overflow, and not one in a box that scrolls."""
    wide = "<mjx-container><mjx-math style='display:inline-block;width:900px'>x</mjx-math></mjx-container>"
    page = tmp_path / "p.html"
    page.write_text(f"<html><body><article class='bd-article'><div style='width:300px;overflow:hidden'>{wide}</div>"
                    f"<div style='width:300px;overflow-x:auto'>{wide}</div></article></body></html>", encoding="utf8")
    with browser.serve(tmp_path) as url:
        assert len(clipped(driver, f"{url}/p.html", 1280)) == 1
