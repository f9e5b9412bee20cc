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
def read_pdf():
    """The built PDF read once for every check (pypdf's text pass is most of their time): its
    reader, each page's text, its images and where each piece of text is drawn (:func:`_glyph_visitor`)."""
    from pypdf import PdfReader

    reader = PdfReader(require_pdf())
    glyphs: list[tuple[int, float, str]] = []
    pages = [page.extract_text(visitor_text=_glyph_visitor(glyphs, i)) or "" for i, page in enumerate(reader.pages)]
    images = sum(image_count(page.get("/Resources")) for page in reader.pages)
    return reader, pages, images, glyphs


@pytest.fixture(scope="module")
def pdf(read_pdf):
    _, pages, images, _ = read_pdf
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


# --- Layout on paper: numbers whole, nothing past the text column, every section bookmarked, the
# Contents numbered.

NUMBER = re.compile(r"[-−+]?(?:\d[\d.,]*\d|\d)(?:e[-+]?\d+)?%?")


def numbers(text: str) -> list[str]:
    """The numbers of two or more characters in ``text`` (a one-digit number cannot be split)."""
    return [m for m in NUMBER.findall(text) if len(m) >= 2]


def split_numbers(tables: list[list[str]], pdf_text: str) -> list[str]:
    """Each table (its cells' numbers) whose numbers the PDF's text holds fewer times than the
    tables do: a number broken across lines reads as two numbers. The prose may hold a number too,
    never fewer."""
    from collections import Counter

    want = Counter(n for table in tables for n in table)
    have = Counter(numbers(pdf_text))
    short = {n for n in want if have[n] < want[n]}
    return [f"table {i + 1}: {sorted(short & set(table))[:4]} not whole in the PDF"
            for i, table in enumerate(tables) if short & set(table)]


def book_tables() -> list[list[str]]:
    """The numbers of each table the single-page book shows (not the no-JavaScript stand-ins)."""
    page = BeautifulSoup(single_page(ROOT).read_text(encoding="utf8"), "html.parser")
    return [[n for cell in t.find_all(["td", "th"]) for n in numbers(cell.get_text(" "))]
            for t in page.find_all("table") if not t.find_parent("noscript")]


def outside_column(glyphs: list[tuple[int, float, str]], left: float, right: float) -> list[str]:
    """Text drawn past the text column (page index, x in points, text): a table or an equation wider
    than the column (the print CSS lets nothing clip it). Text far left of the page is Chromium's
    off-screen copy of hidden elements (x < 0), not drawn on the page."""
    return [f"page {page + 1}: {text!r} at x = {x:.0f} pt (column {left:.0f}–{right:.0f})"
            for page, x, text in glyphs if (x > right + 1 or 0 <= x < left - 1)]


def _glyph_visitor(out: list, page: int):
    """pypdf's text visitor that records where on ``page`` each piece of text is drawn (x in points)."""
    def visit(text, cm, tm, font, size):
        if text.strip():
            out.append((page, tm[4] * cm[0] + tm[5] * cm[2] + cm[4], text))
    return visit


def test_no_number_is_broken_across_lines_in_a_table(pdf):
    pages, _ = pdf
    tables = book_tables()
    assert len(tables) >= 20 and sum(map(len, tables)) > 1000, f"{len(tables)} tables"
    problems = split_numbers(tables, "\n".join(pages))
    assert not problems, f"{len(problems)} of {len(tables)} tables:\n" + "\n".join(problems[:20])


def test_no_table_or_equation_runs_past_the_text_column(read_pdf):
    from resgd.publish.pdf import PRINT_OPTIONS

    reader, _, _, glyphs = read_pdf
    width = float(reader.pages[0].mediabox.width)
    left, right = PRINT_OPTIONS["marginLeft"] * 72, width - PRINT_OPTIONS["marginRight"] * 72
    problems = outside_column(glyphs, left, right)
    assert not problems, f"{len(problems)} pieces of text past the column:\n" + "\n".join(problems[:20])


def test_every_chapter_and_section_is_bookmarked_on_its_page(read_pdf):
    reader, pages, _, _ = read_pdf
    page = BeautifulSoup(single_page(ROOT).read_text(encoding="utf8"), "html.parser")
    main = page.select_one("article.bd-article, main, [role=main]") or page  # as pdf.HEADINGS reads it
    heads = main.find_all(["h2", "h3"])  # the single page's h1 is the book's title

    def walk(items):
        for item in items:
            yield from (walk(item) if isinstance(item, list) else [item])

    marks = list(walk(reader.outline))
    assert len(marks) == len(heads), f"{len(marks)} bookmarks for {len(heads)} chapters and sections"
    for mark in marks:
        text = squash(pages[reader.get_destination_page_number(mark)])
        assert squash(mark.title)[:12] in text, f"bookmark {mark.title!r} not on its page"


def test_printed_contents_gives_each_chapters_page():
    from pypdf import PdfReader

    reader = PdfReader(require_pdf())
    chapters = {c.title: reader.get_destination_page_number(c) + 1 for c in reader.outline
                if not isinstance(c, list) and re.match(r"\d+\. ", c.title)}  # not the intro's sections
    first = reader.pages[0].extract_text() or ""
    numbered = dict(re.findall(r"(?m)^(\d+\. .+?) (\d+)$", first))
    assert len(numbered) >= len(chapters) - 1, f"{len(numbered)} numbered Contents lines for {len(chapters)} chapters"
    wrong = [(title, numbered[title], page) for title, page in chapters.items()
             if title in numbered and int(numbered[title]) != page]
    assert not wrong, f"Contents says page N, the chapter is on page M: {wrong}"


def test_checker_finds_a_split_number_and_text_past_the_column():
    tables = [numbers("0.00 / 1718 / 8"), numbers("2.551681e-09 0.5")]
    assert split_numbers(tables, "0.00 / 1718 / 8\n2.551681e-09 0.5") == []
    assert split_numbers(tables, "prose 1718\n0.00 / 171\n8\n2.551681e-\n09 0.5") == ["table 2: ['2.551681e-09'] not whole in the PDF"]
    assert len(split_numbers(tables, "0.00 / 171\n8 2.551681e-0\n9 0.5")) == 2
    assert outside_column([(0, 50, "a"), (0, -9000, "hidden"), (1, 560, "Φ")], 43.2, 552.7) == \
        ["page 2: 'Φ' at x = 560 pt (column 43–553)"]
