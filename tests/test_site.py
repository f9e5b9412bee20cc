"""Checks of the built HTML book in ``_build/html`` (run ``make book`` first).

The site tests skip when the site is absent, unless ``RESGD_REQUIRE_SITE=1`` (then they fail).
Each checker is a plain function of an HTML string; the ``test_checker_*`` tests feed each one a
tiny bad page to show that it can fail.
"""

from __future__ import annotations

import os
import posixpath
import re
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pandas as pd
import pytest
from bs4 import BeautifulSoup

from resgd.publish.toc import toc_docs
from resgd.publish.pdf import PDF_NAME

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"

# Text that must never reach a reader: unparsed MyST directives and roles.
RAW_MARKUP = [
    re.compile(r"\{glue"),
    re.compile(r"```\{"),
    re.compile(r"(?m)^\s*:::"),
    re.compile(r":::\s*\{"),
    re.compile(r"\{(numref|ref|doc|cite(:[a-z]+)?|eq|download|term|math)\}`"),
]
TRACEBACK_TEXT = ["Traceback (most recent call last)", "An Exception was encountered at"]
# What a matplotlib figure looks like once it has become text (e.g. MPLBACKEND=Agg when glued).
FIGURE_AS_TEXT = re.compile(r"<Figure size \d+(\.\d+)?x\d+(\.\d+)? with \d+ Axes>")


# ---------------------------------------------------------------- helpers


@lru_cache(maxsize=64)
def soup(html: str) -> BeautifulSoup:
    """``html`` parsed, once per text: a site page is read by a dozen checkers, and parsing is most of
    their time. The tree is shared, so a checker that edits one parses its own (:func:`fresh_soup`)."""
    return fresh_soup(html)


def fresh_soup(html: str) -> BeautifulSoup:
    """``html`` parsed into a tree of the caller's own, to edit."""
    return BeautifulSoup(html, "html.parser")


def content(page: BeautifulSoup):
    """The page's article (the theme's chrome excluded), or the whole page."""
    return page.select_one("article.bd-article") or page.select_one("main") or page


def reader_text(page: BeautifulSoup) -> str:
    """The article's text as a reader sees it, without scripts and without notebook code inputs."""
    page = fresh_soup(str(content(page)))
    for tag in page.select("script, style, .cell_input"):
        tag.decompose()
    return page.get_text("\n")


def resolve(page: str, ref: str) -> tuple[str | None, str]:
    """(site-relative path or None for an external/special link, fragment) of ``ref`` on ``page``."""
    parts = urlsplit(ref)
    if parts.scheme or ref.startswith("//"):
        return None, ""
    if not parts.path:
        return page, unquote(parts.fragment)
    target = posixpath.normpath(posixpath.join(posixpath.dirname(page), unquote(parts.path)))
    if target.endswith("/") or parts.path.endswith("/"):
        target = posixpath.join(target, "index.html")
    return target, unquote(parts.fragment)


def ids(html: str) -> set[str]:
    page = soup(html)
    return {t["id"] for t in page.find_all(id=True)} | {t["name"] for t in page.find_all("a", attrs={"name": True})}


# ---------------------------------------------------------------- checkers


def missing_images(page: str, html: str, exists) -> list[str]:
    """<img> whose src is external (not self-contained) or names no file of the site."""
    bad = []
    for img in soup(html).find_all("img"):
        src = img.get("src", "")
        if src.startswith("data:"):
            continue
        target, _ = resolve(page, src)
        if target is None:
            bad.append(f"{page}: external image {src}")
        elif not exists(target):
            bad.append(f"{page}: missing image {src}")
    return bad


def broken_links(page: str, html: str, exists, ids_of) -> list[str]:
    """Internal <a href> to a missing file, or to an anchor that the target page lacks."""
    bad = []
    for a in soup(html).find_all("a", href=True):
        href = a["href"]
        if href.startswith(("mailto:", "javascript:", "tel:")):
            continue
        target, fragment = resolve(page, href)
        if target is None:
            continue
        if not exists(target):
            bad.append(f"{page}: link to missing {href}")
        elif fragment and target.endswith(".html") and fragment not in ids_of(target):
            bad.append(f"{page}: link to missing anchor {href}")
    return bad


def leftover_markup(page: str, html: str) -> list[str]:
    text = reader_text(soup(html))
    return [f"{page}: raw markup {m.group(0)!r}" for rx in RAW_MARKUP for m in [rx.search(text)] if m]


def missing_pastes(page: str, source: str, html: str) -> list[str]:
    """A page written in Markdown pastes every ``{glue:text}`` it names: a reference to another notebook's
    key that did not resolve (a renamed key, a page not executed) is dropped from the HTML with only a warning."""
    wanted = len(re.findall(r"\{glue:text\}`", source))
    pasted = len(content(soup(html)).select(".pasted-text"))
    return [] if pasted == wanted else [f"{page}: {wanted} glue references in the source, {pasted} pasted"]


def tracebacks(page: str, html: str) -> list[str]:
    tree = soup(html)
    text = content(tree).get_text("\n")
    bad = [f"{page}: {needle!r}" for needle in TRACEBACK_TEXT if needle in text]
    bad += [f"{page}: error output cell" for _ in content(tree).select(".cell_output .traceback, .output.traceback")]
    return bad


LEAKED_REPR = ("PosixPath(", "WindowsPath(", "ModelConfig(")
"""Python reprs that show the build machine's paths or internals on a page (a cell that ends in a
call whose return value nobody asked to see)."""


def leaked_reprs(page: str, html: str) -> list[str]:
    """Leaked reprs, and tables with NaN or ±∞ but no legend saying what they mean."""
    tree = content(soup(html))
    text = tree.get_text(" ")
    bad = [f"{page}: output shows {needle!r}" for needle in LEAKED_REPR if needle in text]
    for table in tree.select("table.dataframe"):  # NaN and ±∞ only with the legend that says what they mean
        marks = {cell.get_text(strip=True) for cell in table.select("td")} & {"NaN", "inf", "-inf", "<NA>", "None"}
        # the legend follows the table in the same output (or in the table's own box, resgd.plots.tables)
        output = (table.find_parent(lambda tag: tag.name == "div" and {"output", "resgd-table"} & set(tag.get("class") or []))
                  or (table.parent.parent if table.parent is not None else None))
        if marks and not (output is not None and output.select_one("p.resgd-table-legend")):
            bad.append(f"{page}: a table shows {sorted(marks)} without a legend")
    return bad


ELLIPSES = ("...", "…")
TABLE_SHAPE = re.compile(r"\b\d+ rows × \d+ columns\b")


def cut_tables(page: str, html: str) -> list[str]:
    """Every truncation marker pandas leaves in a table: a "..." or "…" row or column standing for
    hidden ones, a cell cut short with "..." or "…" appended, and the "N rows × M columns" line under a
    table cut to a few rows (:mod:`resgd.plots.tables` shows every table whole)."""
    tree = content(soup(html))
    bad = []
    for number, table in enumerate(tree.select("table.dataframe"), start=1):
        cells = [cell.get_text(strip=True) for cell in table.select("th, td")]
        hidden = sum(text in ELLIPSES for text in cells)
        shortened = sum(text.endswith(ELLIPSES) and text not in ELLIPSES for text in cells)
        if hidden:
            bad.append(f"{page}: table {number} hides rows or columns behind '...' ({hidden} cells)")
        if shortened:
            bad.append(f"{page}: table {number} cuts {shortened} cells short with '...'")
    bad += [f"{page}: {m.group(0)!r} under a table cut short" for m in TABLE_SHAPE.finditer(tree.get_text(" "))]
    return bad


NAN_WORD = re.compile(r"\bnan\b", re.IGNORECASE)


def nan_in_words(page: str, html: str) -> list[str]:
    """A "nan" inside a sentence or a text cell: a number that does not exist, printed as if it did
    (a table cell that is exactly NaN carries a legend, checked in :func:`leaked_reprs`)."""
    tree = fresh_soup(str(content(soup(html))))
    for tag in tree.select("script, style, .cell_input, p.resgd-table-legend"):
        tag.decompose()
    for cell in tree.select("td, th"):
        if cell.get_text(strip=True) in ("NaN", "<NA>"):
            cell.decompose()
    text = " ".join(tree.get_text(" ").split())
    return [f"{page}: prints 'nan' in words: …{text[max(0, m.start() - 80):m.end() + 40]}…" for m in NAN_WORD.finditer(text)][:3]


def glued_figure_problems(page: str, html: str) -> list[str]:
    """Figures shown twice, figures rendered as text, and <figure>s without an image."""
    tree = content(soup(html))
    srcs = [img.get("src") for img in tree.find_all("img")]
    bad = [f"{page}: image shown twice {s}" for s in sorted({s for s in srcs if srcs.count(s) > 1})]
    m = FIGURE_AS_TEXT.search(tree.get_text(" "))
    if m:
        bad.append(f"{page}: a figure rendered as text {m.group(0)!r} (non-inline matplotlib backend?)")
    for fig in tree.find_all("figure"):
        if not fig.find(["img", "svg", "video"]):
            bad.append(f"{page}: <figure id={fig.get('id')!r}> holds no image")
    return bad


def mathjax_problems(page: str, html: str, exists) -> list[str]:
    """MathJax must come from the site itself; a page with math must load it."""
    tree = soup(html)
    scripts = [s["src"] for s in tree.find_all("script", src=True) if "mathjax" in s["src"].lower()]
    bad = []
    for src in scripts:
        target, _ = resolve(page, src)
        if target is None:
            bad.append(f"{page}: MathJax from a remote host {src}")
        elif not exists(target):
            bad.append(f"{page}: MathJax script missing {src}")
    if content(tree).select(".math") and not scripts:
        bad.append(f"{page}: has math but loads no MathJax")
    return bad


PLUMBING_TAGS = ("remove-input", "hide-input")  # the QuantEcon lectures' tags
PLUMBING_CALLS = re.compile(r"\b(glue|glue_figure|save_figure)\(")


def plumbing_tag_problems(name: str, cells: list[tuple[str, list[str]]]) -> list[str]:
    """Code cells that glue or save must hide their input; cells that do not (they teach) must show it.

    ``cells``: (source, tags) of each code cell of a notebook source.
    """
    bad = []
    for number, (source, tags) in enumerate(cells, start=1):
        hidden = [t for t in tags if t in PLUMBING_TAGS]
        if PLUMBING_CALLS.search(source) and not hidden:
            bad.append(f"{name}: code cell {number} glues or saves but is not tagged {' or '.join(PLUMBING_TAGS)}")
        if hidden and not PLUMBING_CALLS.search(source):
            bad.append(f"{name}: code cell {number} is tagged {hidden} but neither glues nor saves (it teaches)")
    return bad


def hidden_input_problems(page: str, html: str, tags_by_cell: list[list[str]]) -> list[str]:
    """Compare each rendered code cell of a notebook page with its source's tags.

    ``remove-input``: no code shown; ``hide-input``: code only inside a closed <details>;
    no tag: code shown.
    """
    cells = content(soup(html)).select("div.cell")
    if len(cells) != len(tags_by_cell):
        return [f"{page}: {len(cells)} rendered code cells, the source has {len(tags_by_cell)}"]
    bad = []
    for number, (cell, tags) in enumerate(zip(cells, tags_by_cell), start=1):
        code = cell.select_one(".cell_input")
        folded = code is not None and code.find_parent("details") is not None and not code.find_parent("details").has_attr("open")
        if "remove-input" in tags and code is not None:
            bad.append(f"{page}: code cell {number} is tagged remove-input but its code is on the page")
        elif "hide-input" in tags and not folded:
            bad.append(f"{page}: code cell {number} is tagged hide-input but its code is not folded away")
        elif not set(tags) & set(PLUMBING_TAGS) and (code is None or folded):
            bad.append(f"{page}: code cell {number} teaches but its code is not shown")
    return bad


# ---------------------------------------------------------------- the built site


def require_site() -> Path:
    if not (SITE / "index.html").is_file():
        message = f"no built site at {SITE} (run `make book`)"
        if os.environ.get("RESGD_REQUIRE_SITE") == "1":
            pytest.fail(message + " and RESGD_REQUIRE_SITE=1")
        pytest.skip(message)
    return SITE


@lru_cache(maxsize=None)
def site_files() -> frozenset[str]:
    return frozenset(p.relative_to(SITE).as_posix() for p in SITE.rglob("*") if p.is_file())


@lru_cache(maxsize=None)
def site_ids(rel: str) -> frozenset[str]:
    return frozenset(ids((SITE / rel).read_text(encoding="utf8")))


def exists(rel: str) -> bool:
    return rel in site_files()


def built_pages() -> list[str]:
    return sorted(f for f in site_files() if f.endswith(".html") and not f.startswith(("_static/", "_sources/")))


def toc_pages() -> list[str]:
    return [f"{doc}.html" for doc in toc_docs(ROOT / "_toc.yml")]


def read(rel: str) -> str:
    return (SITE / rel).read_text(encoding="utf8")


def report(problems: list[str]) -> str:
    return f"{len(problems)} problem(s):\n" + "\n".join(problems[:50])


@pytest.mark.site
def test_every_toc_page_is_built():
    require_site()
    pages = toc_pages()
    assert len(pages) >= 10
    missing = [p for p in pages if not exists(p)]
    assert not missing, f"TOC pages not built: {missing}"
    assert "book/intro.html" in read("index.html")  # the landing page leads to the intro


@pytest.mark.site
def test_images_exist():
    require_site()
    problems = [p for page in built_pages() for p in missing_images(page, read(page), exists)]
    assert not problems, report(problems)


@pytest.mark.site
def test_internal_links_and_anchors():
    require_site()
    problems = [p for page in built_pages() for p in broken_links(page, read(page), exists, site_ids)]
    if os.environ.get("RESGD_REQUIRE_SITE") != "1" and not exists(PDF_NAME):
        problems = [p for p in problems if not p.endswith(PDF_NAME)]  # `make pdf` not run: tests/test_pdf.py skips too
    assert not problems, report(problems)


@pytest.mark.site
def test_no_raw_markup_or_tracebacks():
    require_site()
    problems = [p for page in toc_pages() for check in (leftover_markup, tracebacks) for p in check(page, read(page))]
    assert not problems, report(problems)


@pytest.mark.site
def test_no_output_leaks_a_python_repr():
    require_site()
    problems = [p for page in toc_pages() for check in (leaked_reprs, nan_in_words) for p in check(page, read(page))]
    assert not problems, report(problems)


def test_checker_finds_a_leaked_path_and_a_bare_nan():
    page = '<article class="bd-article"><pre>{"png": PosixPath("/home/x/figures/a.png")}</pre></article>'
    assert leaked_reprs("notebooks/x.html", page) and not leaked_reprs("notebooks/x.html", '<article class="bd-article">ok</article>')
    bare = '<article class="bd-article"><table class="dataframe"><tbody><tr><td>inf</td></tr></tbody></table></article>'
    assert leaked_reprs("notebooks/x.html", bare)
    said = '<article class="bd-article"><p>the interval’s level is nan %</p><table><tr><td>NaN</td></tr></table></article>'
    assert nan_in_words("notebooks/x.html", said) and not nan_in_words("notebooks/x.html", said.replace("nan %", "93.0 %"))
    from resgd.plots.tables import table_html

    shown = table_html(pd.DataFrame({"rate": [float("-inf"), 0.5], "seed": [0, 1]}))
    assert not leaked_reprs("notebooks/x.html", f'<article class="bd-article"><div>{shown}</div></article>')


@pytest.mark.site
def test_no_table_is_cut():
    require_site()
    problems = [p for page in built_pages() for p in cut_tables(page, read(page))]
    assert not problems, report(problems)


@pytest.mark.parametrize("body", [
    "<table class=\"dataframe\"><thead><tr><th>a</th><th>...</th></tr></thead></table>",
    "<table class=\"dataframe\"><tbody><tr><td>…</td></tr></tbody></table>",
    "<table class=\"dataframe\"><tbody><tr><td>a sentence cut at fifty charac...</td></tr></tbody></table>",
    "<table class=\"dataframe\"><tbody><tr><td>1</td></tr></tbody></table><p>66 rows × 8 columns</p>",
])
def test_checker_finds_a_cut_table(body):
    assert cut_tables("notebooks/x.html", f'<article class="bd-article">{body}</article>')


def test_checker_passes_a_whole_table():
    from resgd.plots.tables import table_html

    frame = pd.DataFrame({"note": ["a sentence well over fifty characters long, shown in full"] * 70, "rate": [float("inf")] * 70})
    page = f'<article class="bd-article"><div>{table_html(frame)}</div></article>'
    assert not cut_tables("notebooks/x.html", page) and not leaked_reprs("notebooks/x.html", page)


REPOSITORY_HOSTS = ("https://github.com/", "https://gitlab.com/", "https://mybinder.org/")


def unnamed_repository_links(page: str, html: str, repository_url: str) -> list[str]:
    """Links of the theme's header buttons (repository, issues, launch) and any Binder link that lead
    to a repository other than the one ``_config.yml`` names (with none named: to any)."""
    tree = soup(html)
    hrefs = [a["href"] for a in tree.select(".article-header-buttons a[href], .header-article-items a[href]")]
    hrefs += [a["href"] for a in tree.find_all("a", href=True) if a["href"].startswith("https://mybinder.org/")]
    named = repository_url.rstrip("/")
    org_repo = urlsplit(named).path.strip("/") if named else None
    return [f"{page}: a button leads to {href}, not to the repository _config.yml names ({named or 'none'})"
            for href in dict.fromkeys(hrefs) if href.startswith(REPOSITORY_HOSTS)
            and not (org_repo and (href.startswith(named) or f"/{org_repo}/" in href))]


@pytest.mark.site
def test_no_button_leads_to_a_repository_that_is_not_named():
    require_site()
    import yaml

    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"] or ""
    problems = [p for page in built_pages() for p in unnamed_repository_links(page, read(page), url)]
    assert not problems, report(problems)


def test_checker_unnamed_repository_links():
    buttons = '<div class="article-header-buttons"><a href="https://github.com/someone/book">repository</a></div>'
    binder = '<a href="https://mybinder.org/v2/gh/someone/book/main?urlpath=lab">Binder</a>'
    assert unnamed_repository_links("x.html", buttons, "") and unnamed_repository_links("x.html", binder, "")
    assert not unnamed_repository_links("x.html", buttons + binder, "https://github.com/someone/book")
    assert unnamed_repository_links("x.html", buttons, "https://github.com/other/book")
    assert not unnamed_repository_links("x.html", '<p><a href="https://github.com/a/dataset">data</a></p>', "")


@pytest.mark.site
def test_intro_pastes_every_number():
    """The intro's *What we found* is glued across pages (``path::key``): each number must arrive."""
    require_site()
    source = (ROOT / "book" / "intro.md").read_text(encoding="utf8")
    assert "::" in source  # it does glue from the chapters
    problems = missing_pastes("book/intro.html", source, read("book/intro.html"))
    assert not problems, report(problems)


@pytest.mark.site
def test_glued_figures_render_once_as_images():
    require_site()
    problems = [p for page in toc_pages() for p in glued_figure_problems(page, read(page))]
    assert not problems, report(problems)
    notebook_images = [p for p in toc_pages() if p.startswith("notebooks/") and "<img" in str(content(soup(read(p))))]
    assert notebook_images, "no notebook page shows a single image"


@lru_cache(maxsize=None)
def notebook_code_cells(name: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(source, tags) of each code cell of ``notebooks/<name>.md``, read once (jupytext's parse of a
    notebook takes most of a second, and two tests read each notebook, one of them twice)."""
    import jupytext

    nb = jupytext.read(ROOT / "notebooks" / f"{name}.md")
    return tuple((c.source, tuple(c.metadata.get("tags", []))) for c in nb.cells if c.cell_type == "code")


def notebook_names() -> list[str]:
    return [posixpath.basename(p)[: -len(".html")] for p in toc_pages() if p.startswith("notebooks/")]


def test_plumbing_cells_are_tagged():
    problems = [p for name in notebook_names() for p in plumbing_tag_problems(name, notebook_code_cells(name))]
    assert not problems, report(problems)


@pytest.mark.site
def test_plumbing_cells_are_hidden_on_the_pages():
    require_site()
    problems = []
    for name in notebook_names():
        tags = [t for _, t in notebook_code_cells(name)]
        problems += hidden_input_problems(f"notebooks/{name}.html", read(f"notebooks/{name}.html"), tags)
    assert not problems, report(problems)
    hidden = sum(1 for name in notebook_names() for _, t in notebook_code_cells(name) if set(t) & set(PLUMBING_TAGS))
    assert hidden >= 10, f"only {hidden} plumbing cells hidden in the whole book"


@pytest.mark.site
def test_mathjax_is_local():
    require_site()
    problems = [p for page in built_pages() for p in mathjax_problems(page, read(page), exists)]
    assert not problems, report(problems)
    assert "_static/mathjax/tex-chtml.js" in read("book/intro.html")
    assert exists("_static/mathjax/tex-chtml.js")


@pytest.mark.site
def test_download_button():
    require_site()
    html = read("notebooks/01_setup.html")
    assert "_sources/notebooks/01_setup.ipynb" in html
    assert exists("_sources/notebooks/01_setup.ipynb")
    # The Binder button: tests/test_binder.py


@pytest.mark.site
def test_downloadable_notebooks_name_no_path_of_the_build_machine():
    """papermill's input and output paths are relative to the book (resgd.publish.notebook_run.publish)."""
    require_site()
    import json

    downloads = [f for f in site_files() if f.startswith("_sources/notebooks/") and f.endswith(".ipynb")]
    assert downloads
    bad = [f for f in downloads if any(os.path.isabs(str(path)) for key, path in
                                       json.loads(read(f)).get("metadata", {}).get("papermill", {}).items() if key.endswith("_path"))]
    assert not bad, f"notebooks whose metadata names an absolute path: {bad}"


# ---------------------------------------------------------------- the checkers can fail

GOOD = """<html><head><script src="../_static/mathjax/tex-chtml.js"></script></head><body>
<article class="bd-article"><section id="intro"><h1>Intro</h1>
<p>See <a href="other.html#fig-a">the figure</a> and <a href="#intro">the top</a>.
Math <span class="math notranslate nohighlight">\\(x\\)</span>.</p>
<figure id="fig-a"><img src="../_images/a.png"/><figcaption>A</figcaption></figure>
<div class="cell_input"><pre>glue("x", fig)  # {glue: in code is fine</pre></div>
</section></article></body></html>"""
FILES = {"book/page.html", "book/other.html", "_images/a.png", "_static/mathjax/tex-chtml.js"}


def fake_exists(rel: str) -> bool:
    return rel in FILES


def fake_ids(rel: str) -> set[str]:
    return {"book/other.html": {"fig-a"}, "book/page.html": ids(GOOD)}.get(rel, set())


def test_checker_good_page_passes():
    assert missing_images("book/page.html", GOOD, fake_exists) == []
    assert broken_links("book/page.html", GOOD, fake_exists, fake_ids) == []
    assert leftover_markup("book/page.html", GOOD) == []
    assert tracebacks("book/page.html", GOOD) == []
    assert glued_figure_problems("book/page.html", GOOD) == []
    assert mathjax_problems("book/page.html", GOOD, fake_exists) == []


@pytest.mark.parametrize(
    "img",
    ['<img src="../_images/missing.png">', '<img src="https://example.org/a.png">'],
)
def test_checker_finds_bad_image(img):
    assert missing_images("book/page.html", f"<p>{img}</p>", fake_exists)


@pytest.mark.parametrize(
    "href",
    ["missing.html", "other.html#no-such-id", "#nowhere", "../_sources/book/none.md"],
)
def test_checker_finds_broken_link(href):
    html = f'<article class="bd-article"><p id="here"><a href="{href}">x</a></p></article>'
    assert broken_links("book/page.html", html, fake_exists, fake_ids)


def test_checker_ignores_external_links():
    html = '<a href="https://arxiv.org/abs/2506.05249v1">paper</a><a href="mailto:a@b.c">m</a>'
    assert broken_links("book/page.html", html, fake_exists, fake_ids) == []


@pytest.mark.parametrize(
    "text",
    [
        "{glue:figure} fig_loss",
        "the value is {glue:text}`n_steps`",
        "{glue}`x`",
        "```{code-cell} ipython3",
        ":::{note}",
        "see {numref}`fig-a`",
        "{cite:p}`qin2025convergence`",
    ],
)
def test_checker_finds_raw_markup(text):
    html = f'<article class="bd-article"><p>{text}</p></article>'
    assert leftover_markup("book/page.html", html)


def test_checker_finds_missing_paste():
    source = "found {glue:text}`../notebooks/07_claims.ipynb::claims-theory-K:s` of {glue:text}`a::b:s`"
    one = '<article class="bd-article"><p>found <span class="pasted-text">8</span> of</p></article>'
    two = one.replace("of</p>", 'of <span class="pasted-text">3</span></p>')
    assert missing_pastes("book/intro.html", source, one)
    assert not missing_pastes("book/intro.html", source, two)


def test_checker_finds_indented_directive_rendered_as_code():
    html = '<article class="bd-article"><pre>```{glue:figure} fig\n:name: f\n```</pre></article>'
    assert leftover_markup("book/page.html", html)


@pytest.mark.parametrize(
    "output",
    [
        '<div class="cell_output"><pre>Traceback (most recent call last):\n  File "x"</pre></div>',
        '<div class="cell_output docutils container"><div class="output traceback highlight-ipythontb">'
        "<pre>ValueError: boom</pre></div></div>",
        "<p>An Exception was encountered at 'In [3]'.</p>",
    ],
)
def test_checker_finds_traceback(output):
    assert tracebacks("notebooks/x.html", f'<article class="bd-article">{output}</article>')


@pytest.mark.parametrize(
    "body",
    [
        '<img src="../_images/a.png"><figure id="f"><img src="../_images/a.png"></figure>',
        '<div class="output text_plain"><pre>&lt;Figure size 500x300 with 1 Axes&gt;</pre></div>',
        '<figure id="fig-a"><pre>&lt;Figure size 640x480 with 2 Axes&gt;</pre><figcaption>A</figcaption></figure>',
    ],
)
def test_checker_finds_glued_figure_trouble(body):
    assert glued_figure_problems("notebooks/x.html", f'<article class="bd-article">{body}</article>')


@pytest.mark.parametrize(
    "head",
    [
        '<script src="https://cdn.example.org/mathjax@3/es5/tex-chtml.js"></script>',
        '<script src="../_static/mathjax/missing.js"></script>',
        "",  # math on the page but no MathJax at all
    ],
)
def test_checker_finds_mathjax_trouble(head):
    html = f'<html><head>{head}</head><body><article class="bd-article"><span class="math">\\(x\\)</span></article></body></html>'
    assert mathjax_problems("book/page.html", html, fake_exists)


def test_resolve():
    assert resolve("book/intro.html", "../notebooks/01_setup.html#fig") == ("notebooks/01_setup.html", "fig")
    assert resolve("book/intro.html", "#top") == ("book/intro.html", "top")
    assert resolve("index.html", "book/") == ("book/index.html", "")
    assert resolve("book/intro.html", "https://x.org/a.html") == (None, "")


def test_checker_plumbing_tags():
    good = [("x = f()", []), ("glue('a', x, display=False)", ["remove-input"]), ("save_figure(fig, 'a')", ["hide-input"])]
    assert plumbing_tag_problems("nb", good) == []
    assert plumbing_tag_problems("nb", [("glue('a', 1)", [])])
    assert plumbing_tag_problems("nb", [("runs = train(cfg)", ["hide-input"])])


CELL = '<div class="cell {cls} docutils container">{body}<div class="cell_output docutils container"></div></div>'
CODE = '<div class="cell_input docutils container"><pre>x = 1</pre></div>'


@pytest.mark.parametrize(
    "cells, tags, ok",
    [
        ([CELL.format(cls="", body=CODE)], [[]], True),
        ([CELL.format(cls="tag_remove-input", body="")], [["remove-input"]], True),
        ([CELL.format(cls="tag_hide-input", body=f'<details class="hide above-input"><summary>Show</summary>{CODE}</details>')],
         [["hide-input"]], True),
        ([CELL.format(cls="", body=CODE)], [["remove-input"]], False),
        ([CELL.format(cls="", body=CODE)], [["hide-input"]], False),
        ([CELL.format(cls="", body=f"<details open>{CODE}</details>")], [["hide-input"]], False),
        ([CELL.format(cls="", body="")], [[]], False),
        ([CELL.format(cls="", body=CODE)], [[], []], False),
    ],
)
def test_checker_hidden_inputs(cells, tags, ok):
    html = f'<article class="bd-article">{"".join(cells)}</article>'
    assert (hidden_input_problems("notebooks/x.html", html, tags) == []) == ok


# ---------------------------------------------------------------- what a reader trusts at a glance

PROVENANCE = re.compile(r"Built (\d{4})-\d\d-\d\d \d\d:\d\d UTC from commit ([0-9a-f]{7,}(\+dirty)?|unknown \(no git\)), "
                        r"(results store [0-9a-f]{12}, )?"
                        r"(quick|full|quick\+full) mode; resgd [^,]+, torch [^,]+, numpy [^,]+, jupyter-book [^.]+")


def provenance_problems(page: str, html: str) -> list[str]:
    """The footer's build line (resgd.publish.sphinx_ext) and a © year that is the build's."""
    found = soup(html).select_one(".resgd-provenance")
    match = PROVENANCE.search(" ".join(found.get_text().split())) if found else None
    if not match:
        return [f"{page}: no provenance line (commit, date, mode, versions) in the footer"]
    copyright_ = soup(html).select_one(".copyright")
    if copyright_ is None or f"© Copyright {match.group(1)}" not in " ".join(copyright_.get_text().split()):
        return [f"{page}: the © year is not the build's year {match.group(1)}"]
    return []


def alt_text_problems(page: str, html: str) -> list[str]:
    """Article images whose alt text is missing, only a file path, or raw TeX."""
    bad = []
    for img in content(soup(html)).find_all("img"):
        alt = (img.get("alt") or "").strip()
        if not alt or alt == img.get("src") or re.fullmatch(r"\S*[/.]\S*\.(png|svg|jpe?g)", alt) or "\\" in alt:
            bad.append(f"{page}: image {img.get('src')} has alt text {alt!r}")
    return bad


@pytest.mark.site
def test_every_page_says_which_build_made_it():
    require_site()
    problems = [p for page in toc_pages() for p in provenance_problems(page, read(page))]
    assert not problems, report(problems)


@pytest.mark.site
def test_execution_report_page_lists_every_notebook():
    require_site()
    page = reader_text(soup(read("book/execution.html")))
    notebooks = [d for d in toc_docs(ROOT / "_toc.yml") if d.startswith("notebooks/")]
    assert "Execution report" in page
    assert all(n in page for n in notebooks), page[:2000]


@pytest.mark.site
def test_every_page_links_the_books_stylesheet():
    require_site()
    assert exists("_static/resgd.css")
    missing = [page for page in toc_pages() if "_static/resgd.css" not in read(page)]
    assert not missing, f"pages without _static/resgd.css: {missing}"


@pytest.mark.site
def test_figures_have_alt_text_not_paths():
    require_site()
    problems = [p for page in toc_pages() for p in alt_text_problems(page, read(page))]
    assert not problems, report(problems)


FOOTER = ('<footer><p class="copyright">© Copyright {year}, The authors.</p><div class="extra_footer">'
          '<p class="resgd-provenance">Built 2026-03-01 10:00 UTC from commit <code>abc1234</code>, '
          '<a href="execution.html">quick</a> mode; resgd 0.2.0, torch 2.5.0, numpy 2.1.0, jupyter-book 1.0.4.</p></div></footer>')


def test_a_quick_build_says_so_at_the_top_of_every_page_and_a_full_one_does_not():
    from resgd.publish.sphinx_ext import quick_banner_html

    assert quick_banner_html("full") == ""
    for mode in ("quick", "quick+full"):
        banner = quick_banner_html(mode)
        assert 'class="resgd-quick-banner"' in banner and "not the published book" in banner
        assert "smoke build" in banner  # quick mode is a smoke build, and every page says so


@pytest.mark.site
def test_ci_s_book_says_its_store_was_verified_by_this_code():
    """CI runs ``make verify`` before the book: the execution report of CI's build says the store it read
    was proven (the verification of this manifest, by this commit's code)."""
    require_site()
    if os.environ.get("RESGD_REQUIRE_SITE") != "1":
        pytest.skip("a local build need not run `make verify` first (CI's does: RESGD_REQUIRE_SITE=1)")
    text = " ".join(soup(read("book/execution.html")).get_text().split())
    assert "Every entry is what this code computes." in text, text[text.find("The results store"):][:600]


def test_the_store_section_counts_only_a_verification_of_this_manifest_by_this_code():
    from resgd.publish.sphinx_ext import store_markdown

    report = {"manifest_sha256": "ab" * 32, "commit": "0123456789abcdef", "entries": 3, "runs": 2,
              "first_iterations": 10, "sample": ["run a"], "sample_seed": "0123456789abcdef", "cpu_s": 1.0, "ok": True,
              "failures": {}, "arithmetic": {"isa": "AVX2"}, "cpu": "a CPU"}
    assert "Every entry is what this code computes" in store_markdown(report, "ab" * 32, "0123456")
    assert "did not verify it" in store_markdown(report, "cd" * 32, "0123456")  # another manifest
    assert "ran with the code of commit" in store_markdown(report, "ab" * 32, "fedcba9")  # other code
    assert "ran with the code of commit" in store_markdown(report, "ab" * 32, "0123456+dirty")  # edited since
    assert "no results store" in store_markdown(None, "")


def test_checker_provenance():
    assert provenance_problems("p.html", FOOTER.format(year=2026)) == []
    with_store = FOOTER.replace("</code>, ", "</code>, results store <code>8ce65b3bacca</code>, ")
    assert provenance_problems("p.html", with_store.format(year=2026)) == []
    assert "© year" in provenance_problems("p.html", FOOTER.format(year=2025))[0]
    assert "no provenance" in provenance_problems("p.html", "<footer></footer>")[0]


def test_checker_alt_text():
    good = '<main><img src="../_images/a.png" alt="Loss against iteration, with and without residual."></main>'
    assert alt_text_problems("p.html", good) == []
    for alt in ('alt="../_images/a.png"', 'alt=""', "", 'alt="_build/jupyter_execute/x.png"', 'alt="rate \\sigma"'):
        assert alt_text_problems("p.html", f'<main><img src="../_images/a.png" {alt}></main>'), alt


def tex_in_titles(index_js: str) -> list[str]:
    """Page titles in Sphinx's search index (``"titles":[...]``) that hold TeX or dollar signs."""
    import json

    match = re.search(r'"titles"\s*:\s*(\[.*?\])\s*[,}]', index_js)
    titles = json.loads(match.group(1)) if match else []
    return [t for t in titles if "$" in t or re.search(r"\\[a-zA-Z()\[\]]", t)]


def test_every_source_page_title_is_plain_text():
    """Search results and the browser tab show a page's H1 as text: no TeX in it (σ_min, not $\\sigma_{\\min}$)."""
    bad = []
    for doc in toc_docs(ROOT / "_toc.yml"):
        source = ROOT / f"{doc}.md"
        if source.is_file():
            title = re.search(r"(?m)^# (.+)$", source.read_text(encoding="utf8")).group(1)
            if "$" in title or "\\" in title:
                bad.append(f"{doc}: {title}")
    assert not bad, bad


@pytest.mark.site
def test_search_index_titles_are_plain_text():
    require_site()
    bad = tex_in_titles(read("searchindex.js"))
    assert not bad, bad


def test_checker_tex_in_titles():
    index = 'Search.setIndex({"docnames":["a"],"titles":["Theorem 1: the rate set by \\\\(\\\\sigma_{\\\\min}(Z)\\\\)","Setup"],"x":1})'
    assert tex_in_titles(index) == ["Theorem 1: the rate set by \\(\\sigma_{\\min}(Z)\\)"]
    assert tex_in_titles(index.replace("\\\\(\\\\sigma_{\\\\min}(Z)\\\\)", "σ_min(Z)")) == []
