"""The book as one PDF (``make pdf``): every page of the book, its figures, typeset mathematics.

Skips when the PDF has not been built, unless ``RESGD_REQUIRE_SITE=1`` (CI builds it between the
book and the tests). The checks are plain functions of the PDF's text and image count; the
``test_checker_*`` tests show that each can fail.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from resgd.publish.toc import toc_docs
from resgd.publish.pdf import PDF_DIR, PDF_NAME, SITE, single_page

ROOT = Path(__file__).resolve().parents[1]
PDF = ROOT / PDF_DIR / PDF_NAME
# TeX that MathJax should have turned into typeset mathematics: $$, \( \) \[ \], and any command
# such as \sigma (also where a title with mathematics became a link's plain text).
RAW_TEX = re.compile(r"\$\$|\\[()\[\]]|\\[a-zA-Z]{2,}")

pytestmark = pytest.mark.site


def require_pdf() -> Path:
    if not PDF.is_file():
        message = f"no {PDF} (run `make book` then `make pdf`)"
        if os.environ.get("RESGD_REQUIRE_SITE") == "1":
            pytest.fail(message + " and RESGD_REQUIRE_SITE=1")
        pytest.skip(message)
    return PDF


def squash(text: str) -> str:
    """Compare text without spacing, case, ligatures (ﬁ) or typographic apostrophes."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text).replace("\u2019", "'")).lower()


def page_titles() -> list[str]:
    """Each TOC page's title, up to its first mathematics (typeset math extracts as other text)."""
    titles = []
    for doc in toc_docs(ROOT / "_toc.yml"):
        source = (ROOT / f"{doc}.md").read_text(encoding="utf8")
        title = re.search(r"(?m)^# (.+)$", source).group(1)
        titles.append(title.split("$")[0].strip(" ,"))
    return titles


def pdf_problems(pages: list[str], images: int, expected_images: int, titles: list[str]) -> list[str]:
    """What is wrong with a PDF of the book, from its pages' text and its number of images."""
    problems = []
    if len(pages) < len(titles):
        problems.append(f"{len(pages)} pages for {len(titles)} chapters and pages")
    if images < expected_images:
        problems.append(f"{images} images, the book shows {expected_images}")
    text = "\n".join(pages)
    problems += [f"raw TeX {m.group(0)!r} in the text: ...{text[max(m.start() - 40, 0):m.end() + 20]!r}"
                 for m in list(RAW_TEX.finditer(text))[:10]]
    flat = squash(text)
    problems += [f"page {t!r} missing" for t in titles if squash(t) not in flat]
    # what the site check (tests/test_site.py) refuses on a page, refused in the PDF's text too: a
    # Python repr of the build's objects, or the build machine's own folder
    problems += [f"leaked {leak!r} in the text" for leak in LEAKS if leak in text]
    flat_root = re.sub(r"\s+", "", str(ROOT))
    if flat_root in re.sub(r"\s+", "", text):
        problems.append(f"the build folder {ROOT} (an absolute path) in the text")
    return problems


LEAKS = ("PosixPath(", "WindowsPath(", "ModelConfig(")
"""As tests/test_site.py's LEAKED_REPR."""


def book_images() -> int:
    """Distinct images of the single-page book that the PDF was printed from."""
    page = BeautifulSoup(single_page(ROOT).read_text(encoding="utf8"), "html.parser")
    return len({img["src"] for img in page.find_all("img", src=True) if "_images/" in img["src"]})


@pytest.fixture(scope="module")
def pdf():
    from pypdf import PdfReader

    reader = PdfReader(require_pdf())
    pages = [page.extract_text() or "" for page in reader.pages]
    images = sum(image_count(page.get("/Resources")) for page in reader.pages)
    return pages, images


def image_count(resources) -> int:
    """Image XObjects drawn from a page's (or a form's) resources, forms searched too: the count of
    ``page.images`` without decoding any image (which took half of this module's time)."""
    resources = resources.get_object() if resources is not None else None
    xobjects = resources.get("/XObject") if resources is not None else None
    if xobjects is None:
        return 0
    count = 0
    for ref in xobjects.get_object().values():
        xobject = ref.get_object()
        if xobject.get("/Subtype") == "/Image":
            count += 1
        elif xobject.get("/Subtype") == "/Form":
            count += image_count(xobject.get("/Resources"))
    return count


def test_pdf_holds_the_whole_book(pdf):
    pages, images = pdf
    expected = book_images()
    assert expected >= 10, f"the single-page book shows only {expected} images"
    problems = pdf_problems(pages, images, expected, page_titles())
    assert not problems, "\n".join(problems)


def test_pdf_has_chapter_and_section_bookmarks_and_no_link_to_the_printing_server():
    from pypdf import PdfReader

    reader = PdfReader(require_pdf())
    chapters = [item for item in reader.outline if not isinstance(item, list)]
    sections = [s for item in reader.outline if isinstance(item, list) for s in item if not isinstance(s, list)]
    titles = page_titles()
    assert len(chapters) >= len(titles) - 2, f"{len(chapters)} chapter bookmarks for {len(titles)} pages"
    assert len({c.title for c in chapters}) == len(chapters), "a bookmark twice (the title?)"
    assert len(sections) > len(chapters), f"{len(sections)} section bookmarks"
    uris = [a.get_object()["/A"].get_object().get("/URI") for page in reader.pages for a in page.get("/Annots", []) or []
            if "/A" in a.get_object()]
    local = [u for u in uris if u and re.match(r"https?://(127\.0\.0\.1|localhost)", u)]
    assert not local, f"{len(local)} links to the server that printed the PDF, e.g. {local[:3]}"
    assert "from commit" in (reader.pages[0].extract_text() or ""), "the build's commit is not on the first page"


def test_site_links_to_the_pdf():
    require_pdf()
    site_pdf = ROOT / SITE / PDF_NAME
    assert site_pdf.read_bytes() == PDF.read_bytes(), "the site's copy is not the PDF just built"
    intro = (ROOT / SITE / "book" / "intro.html").read_text(encoding="utf8")
    assert f'href="../{PDF_NAME}"' in intro


def test_checker_good_pdf_passes():
    assert pdf_problems(["Intro text", "Setup: more"], 3, 3, ["Intro", "Setup"]) == []


@pytest.mark.parametrize(
    "pages, images, why",
    [
        (["Intro and Setup"], 3, "pages"),
        (["Intro", "Setup"], 2, "images"),
        (["Intro $$x$$", "Setup"], 3, "raw TeX"),
        (["Intro \\(x\\)", "Setup"], 3, "raw TeX"),
        (["Intro, the rate set by \\sigma_{\\min}(Z)", "Setup"], 3, "raw TeX"),
        (["Intro", "nothing else"], 3, "missing"),
        (["Intro {'png': PosixPath('/x/a.png')}", "Setup"], 3, "leaked"),
        ([f"Intro {ROOT}/figures/a.png", "Setup"], 3, "absolute path"),
    ],
)
def test_checker_finds_bad_pdf(pages, images, why):
    problems = pdf_problems(pages, images, 3, ["Intro", "Setup"])
    assert any(why in p for p in problems), problems


def test_image_count_matches_pypdf_on_the_built_pdf():
    """:func:`image_count` counts what ``page.images`` would (checked on a few pages, where decoding is cheap)."""
    from pypdf import PdfReader

    reader = PdfReader(require_pdf())
    with_images = [page for page in reader.pages if image_count(page.get("/Resources"))][:3]
    without = [page for page in reader.pages if not image_count(page.get("/Resources"))][:3]
    assert with_images, "no page with an image"
    for page in with_images + without:
        assert image_count(page.get("/Resources")) == len(page.images)
