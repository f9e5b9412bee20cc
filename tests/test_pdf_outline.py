"""The PDF's page numbers and bookmarks (:mod:`resgd.publish.pdf`), on a small HTML page printed by
Chromium: one bookmark per h1 (chapter) with its h2 (sections) under it, each on its page."""

from __future__ import annotations

import os

import pytest

from resgd.publish import browser
from resgd.publish.pdf import locate, print_pdf

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


@pytest.mark.browser
def test_printed_pdf_has_page_numbers_and_a_two_level_outline(tmp_path):
    if not browser.have_chromium():
        if os.environ.get("RESGD_REQUIRE_SITE") == "1":
            pytest.fail("no Chromium and RESGD_REQUIRE_SITE=1")
        pytest.skip(f"{browser.CHROMIUM} or {browser.CHROMEDRIVER} missing (apt-get install chromium chromium-driver)")
    from pypdf import PdfReader

    body = ""
    for c in (1, 2):
        body += f"<section><h1>{c}. Chapter {'one' if c == 1 else 'two'}<a class='headerlink' href='#'>#</a></h1>{FILLER}"
        for s in (1, 2):
            body += f"<section><h2>{c}.{s}. Section {c}{s} about σ</h2>{FILLER * 2}</section>"
        body += "</section>"
    page = tmp_path / "book.html"
    page.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body><main>{body}</main></body></html>",
                    encoding="utf8")
    out = tmp_path / "book.pdf"
    state = print_pdf(page, out, log=lambda *a: None)
    assert state["bookmarks"] == 6
    reader = PdfReader(out)
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
