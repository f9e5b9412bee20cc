"""The book's Sphinx extension (:mod:`resgd.publish.sphinx_ext`): the provenance footer, the © year,
the execution report page and figures' alt text; unit tests and one tiny ``jupyter-book build``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

from resgd.publish import sphinx_ext as ext

REPORT = {"mode": "quick", "finished": "2026-01-02T00:00:00+00:00", "total_seconds": 3.5, "ok": False,
          "notebooks": [{"notebook": "notebooks/01_a", "mode": "quick", "seconds": 1.25, "ok": True, "error": None,
                         "engine": "engine=resgd 0.3.0"},
                        {"notebook": "notebooks/02_b", "mode": "quick", "seconds": 2.0, "ok": False,
                         "error": "code cell 3 `x = 1`: ValueError | boom"}]}


def test_provenance_line(tmp_path):
    info = ext.provenance(tmp_path, datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc))
    assert info["year"] == 2026 and info["date"] == "2026-03-01 10:00 UTC"
    assert info["mode"] == "unknown (no execution report)"
    assert set(info["versions"]) == {"resgd", "torch", "numpy", "jupyter-book"}
    line = ext.provenance_html({**info, "commit": "abc1234", "mode": "full"}, "../book/execution.html")
    assert 'Built 2026-03-01 10:00 UTC from commit <code>abc1234</code>, <a href="../book/execution.html">full</a> mode' in line
    assert "torch " in line and "<script" not in ext.provenance_html({**info, "commit": "<script>"})


def test_mode_and_build_date_come_from_the_report_and_the_environment():
    assert ext.report_mode(REPORT) == "quick"
    mixed = {**REPORT, "notebooks": [{**REPORT["notebooks"][0], "mode": "full"}, REPORT["notebooks"][1]]}
    assert ext.report_mode(mixed) == "full+quick"
    assert ext.build_time({"SOURCE_DATE_EPOCH": "1767225600"}).year == 2026
    assert ext.build_time({}).tzinfo == timezone.utc


def test_commit_of_a_checkout(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("no git")
    assert ext.git_commit(tmp_path) == "unknown (no git)"
    git = ["git", "-C", str(tmp_path), "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "f").write_text("1")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    commit = ext.git_commit(tmp_path)
    assert len(commit) >= 7 and "+" not in commit
    (tmp_path / "f").write_text("2")
    assert ext.git_commit(tmp_path) == commit + "+dirty"


def test_execution_page_renders_every_key_the_records_have(tmp_path):
    text = ext.execution_markdown(REPORT)
    assert text.startswith("# Execution report")
    assert "| notebook | mode | seconds | ok | engine |" in text
    assert "| notebooks/01_a | quick | 1.2 | ✓ | engine=resgd 0.3.0 |" in text
    assert "| notebooks/02_b | quick | 2.0 | ✗ **failed** |  |" in text
    assert "ValueError | boom" in text.split("## Failures")[1]  # errors below, unescaped in their code block
    assert "No execution report" in ext.execution_markdown(None)
    assert "at a time" not in text  # one notebook at a time: wall time is the rows' sum
    overlapped = ext.execution_markdown({**REPORT, "jobs": 2})
    assert "up to 2 notebooks at a time, so the rows' seconds add up to 3.2" in overlapped
    page = ext.write_execution_page(tmp_path)  # no report: the page says so
    assert page == tmp_path / "book" / "execution.md" and "No execution report" in page.read_text()
    (tmp_path / "_build").mkdir()
    (tmp_path / "_build" / "execution_report.json").write_text(json.dumps(REPORT))
    assert "engine=resgd 0.3.0" in ext.write_execution_page(tmp_path).read_text()


def doctree(rst: str):
    document = new_document("<test>", get_default_settings(Parser))
    Parser().parse(rst, document)
    return document


def test_figure_alt_text_is_its_caption_when_alt_is_a_path():
    tree = doctree(".. figure:: ../_build/jupyter_execute/a.png\n\n   Loss of each seed, with and\n   without residual.\n\n"
                   ".. figure:: b.png\n   :alt: Hand-written alt\n\n   Caption b.\n\n"
                   ".. image:: c.png\n")
    assert ext.caption_alt_texts(tree) == 1
    alts = [img.get("alt") for img in tree.findall(nodes.image)]
    assert alts == ["Loss of each seed, with and without residual.", "Hand-written alt", None]


def test_caption_mathematics_becomes_plain_text():
    tree = doctree(".. figure:: a.png\n\n   The rate :math:`\\sigma_{\\min}(Z)^2` at :math:`\\mu = c/\\hat L`.\n")
    ext.caption_alt_texts(tree)
    assert next(iter(tree.findall(nodes.image)))["alt"] == "The rate σ_min(Z)^2 at μ = c/L\u0302."
    assert ext.tex_to_text(r"\Phi(T)/\Phi(0) \le 1, \mathrm{rank}(Z)") == "Φ(T)/Φ(0) ≤ 1, rank(Z)"


def test_repository_buttons_follow_the_one_repository_setting():
    launch = {"notebook_interface": "jupyterlab", "binderhub_url": "https://mybinder.org", "colab_url": ""}
    none = ext.repository_buttons({"repository_url": "", "launch_buttons": launch, "use_download_button": True})
    assert (none["use_repository_button"], none["use_issues_button"], none["use_download_button"]) == (False, False, True)
    assert none["launch_buttons"] == {"notebook_interface": "jupyterlab", "binderhub_url": "", "colab_url": ""}
    named = ext.repository_buttons({"repository_url": "https://github.com/a/b", "launch_buttons": launch})
    assert named["use_repository_button"] and named["use_issues_button"] and named["launch_buttons"] == launch
    assert ext.repository_buttons({})["launch_buttons"] == {} and launch["binderhub_url"]  # the input is not changed


@pytest.mark.slow
def test_a_tiny_book_gets_footer_year_report_page_and_alt_text(tmp_path):
    """The extension in a real ``jupyter-book build`` with the book's theme."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (tmp_path / "book").mkdir()
    plt.figure(figsize=(1, 1))
    plt.savefig(tmp_path / "book" / "fig.png")
    plt.close("all")
    (tmp_path / "_config.yml").write_text('title: t\nauthor: "The authors"\ncopyright: "2025"\nonly_build_toc_files: true\n'
                                          'execute:\n  execute_notebooks: "off"\nrepository:\n  url: ""\n'
                                          'launch_buttons:\n  binderhub_url: "https://mybinder.org"\n'
                                          "sphinx:\n  extra_extensions:\n    - resgd.publish.sphinx_ext\n")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/execution\n")
    (tmp_path / "_static").mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "_static" / "resgd.css", tmp_path / "_static")
    (tmp_path / "book" / "intro.md").write_text("# Intro\n\n```{figure} fig.png\n\nA grey square.\n```\n")
    jb = Path(sys.executable).parent / "jupyter-book"
    env_epoch = {"SOURCE_DATE_EPOCH": "1767225600"}  # 2026-01-01
    import os

    out = subprocess.run([str(jb), "build", str(tmp_path), "-W"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, **env_epoch})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    intro = (tmp_path / "_build" / "html" / "book" / "intro.html").read_text()
    assert 'class="resgd-provenance">Built 2026-01-01 00:00 UTC' in intro and 'href="execution.html"' in intro
    assert "© Copyright 2026, The authors." in intro  # not the "2025" typed into _config.yml
    assert 'alt="A grey square."' in intro
    assert intro.count('_static/resgd.css') == 1  # the captions' and the footer's style
    assert intro.count("const THEBE_JS_URL") == 1  # declared twice, it is a console error on every page
    assert intro.count("var togglebuttonSelector") == 1
    assert "github.com" not in intro and "mybinder" not in intro  # no repository named: no button into one
    execution = (tmp_path / "_build" / "html" / "book" / "execution.html").read_text()
    assert "No execution report" in execution
