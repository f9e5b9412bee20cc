"""The PDF's page numbers and bookmarks (:mod:`resgd.publish.pdf`), on a small HTML page printed by
Chromium: one bookmark per h1 (chapter) with its h2 (sections) under it, each on its page."""

from __future__ import annotations

import os

import pytest

from resgd.publish import browser
from resgd.publish.pdf import locate, outline_headings, print_pdf

FILLER = "<p>" + "Gradient descent on a residual Transformer. " * 60 + "</p>"


def test_locate_searches_forward_and_skips_what_it_cannot_find():
    pages = ["1 Intro text", "more 1.1 First steps", "2 Theorem Ω", "2.1 Proof σ_min"]
    heads = [dict(level=1, title="1 Intro", key="1 Intro"), dict(level=2, title="1.1 First steps", key="1.1 First steps"),
             dict(level=2, title="Nowhere at all", key="Nowhere at all"), dict(level=1, title="2 Theorem", key="2 Theorem"),
             dict(level=2, title="2.1 Proof σmin(Z)", key="2.1 Proof")]
    assert locate(heads, pages) == [0, 1, None, 2, 3]
    # a heading's words that also occur earlier are found at or after the previous heading's page
    assert locate([dict(level=1, title="B", key="Theorem Ω"), dict(level=2, title="A", key="Intro text")],
                  ["Intro text Theorem Ω", "x", "Intro text"]) == [0, 0]


def test_the_single_page_books_chapters_are_its_h2_under_one_title():
    title = dict(level=1, title="The book", key="The book")
    heads = [title, title, dict(level=2, title="1 Intro", key=""), dict(level=3, title="1.1 A", key=""),
             dict(level=4, title="1.1.1 deep", key=""), dict(level=2, title="2 Theorem", key="")]
    assert [(h["level"], h["title"]) for h in outline_headings(heads)] == [(1, "1 Intro"), (2, "1.1 A"), (1, "2 Theorem")]
    two = [dict(level=1, title="One", key=""), dict(level=2, title="1.1", key=""), dict(level=1, title="Two", key="")]
    assert [h["level"] for h in outline_headings(two)] == [1, 2, 1]  # h1 chapters when there are several


@pytest.mark.browser
def test_printed_pdf_has_page_numbers_and_a_two_level_outline(tmp_path):
    if not browser.have_chromium():
        if os.environ.get("RESGD_REQUIRE_SITE") == "1":
            pytest.fail("no Chromium and RESGD_REQUIRE_SITE=1")
        pytest.skip(f"{browser.CHROMIUM} or {browser.CHROMEDRIVER} missing (apt-get install chromium chromium-driver)")
    from pypdf import PdfReader

    body = ""
    for c in (1, 2):
        # as in the single-page book: one h1 (the title, twice), chapters h2, sections h3
        body += f"<section><h2>{c}. Chapter {'one' if c == 1 else 'two'}<a class='headerlink' href='#'>#</a></h2>{FILLER}"
        for s in (1, 2):
            body += f"<section><h3>{c}.{s}. Section {c}{s} about σ</h3>{FILLER * 2}</section>"
        body += "</section>"
    links = ("<p><a href='book.html#chapter-two'>to chapter two</a> <a href='_images/fig.png'>a figure</a> "
             "<a href='https://arxiv.org/abs/2506.05249'>the paper</a></p>")
    footer = "<footer><p class='resgd-provenance'>Built 2026-01-01 from commit <code>abc1234</code></p></footer>"
    page = tmp_path / "book.html"
    page.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body><main><h1>The book</h1><h1>The book</h1>{links}"
                    f"{body.replace('<h2>2.', '<h2 id=chapter-two>2.')}</main>{footer}</body></html>", encoding="utf8")
    out = tmp_path / "book.pdf"
    state = print_pdf(page, out, log=lambda *a: None)
    assert state["bookmarks"] == 6 and state["provenance"]
    # one link to chapter two, and each of the 8 headings' link to itself (its bookmark's destination)
    assert (state["inside"], state["dropped"]) == (1 + 8, 1)
    reader = PdfReader(out)
    uris = [a.get_object()["/A"].get_object().get("/URI") for page in reader.pages for a in page.get("/Annots", []) or []
            if "/A" in a.get_object()]
    assert "https://arxiv.org/abs/2506.05249" in uris and not [u for u in uris if u and "127.0.0.1" in u]
    assert "commit abc1234" in reader.pages[0].extract_text()  # the build, under the title
    n = len(reader.pages)
    assert n >= 4
    texts = [p.extract_text() for p in reader.pages]
    assert all(f"{i + 1} / {n}" in t for i, t in enumerate(texts)), "page numbers in the footer"
    outline = reader.outline
    chapters = [item for item in outline if not isinstance(item, list)]
    assert [c.title for c in chapters] == ["1. Chapter one", "2. Chapter two"]
    children = [item for item in outline if isinstance(item, list)]
    assert [[s.title for s in kids] for kids in children] == [["1.1. Section 11 about σ", "1.2. Section 12 about σ"],
                                                             ["2.1. Section 21 about σ", "2.2. Section 22 about σ"]]
    pages = [reader.get_destination_page_number(c) for c in chapters]
    assert pages[0] == 0 and pages[1] > pages[0]
    for item in chapters + [s for kids in children for s in kids]:
        where = reader.get_destination_page_number(item)
        assert item.title.split(" about")[0].replace(" ", "") in texts[where].replace(" ", "")


def test_heading_pages_takes_each_headings_destination_without_reading_the_text(monkeypatch):
    """Every heading has its destination: no page's text is extracted (``b"not a pdf"`` would fail to
    parse); one without a destination: the text search runs (and fails on these bytes)."""
    from resgd.publish import pdf

    monkeypatch.setattr(pdf, "destination_pages", lambda data: {"a": 0, "b": 3})
    heads = [dict(level=1, title="A", key="A", id="a"), dict(level=2, title="B", key="B", id="b")]
    assert pdf.heading_pages(heads, b"not a pdf") == [0, 3]
    with pytest.raises(Exception):
        pdf.heading_pages([*heads, dict(level=2, title="C", key="C", id="c")], b"not a pdf")
