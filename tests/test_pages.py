"""The experiment pages come from one template: both render, differ only where the template says,
and malformed marks are named with their line."""

from __future__ import annotations

from pathlib import Path

import jupytext
import pytest

from resgd.publish import pages

ROOT = Path(__file__).resolve().parents[1]


def test_both_pages_render_from_the_one_template(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / pages.TEMPLATE).write_text((ROOT / pages.TEMPLATE).read_text(encoding="utf-8"), encoding="utf-8")
    written = pages.write_pages(tmp_path)
    assert sorted(p.name for p in written) == ["04_jena.md", "05_sst2.md"]
    jena, sst2 = ((tmp_path / "notebooks" / f"{name}.md").read_text(encoding="utf-8") for name in ("04_jena", "05_sst2"))
    assert "{{" not in jena + sst2 and "<!-- if" not in jena + sst2
    assert "jena-sources" in jena and "jena-sources" not in sst2  # the Jena-only section
    assert 'dataset = "sst2"' in sst2 and "fig-sst2-decide-c" in sst2
    for text in (jena, sst2):
        nb = jupytext.reads(text, fmt="md:myst")
        assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells)
        assert nb.cells[0].source.startswith(pages.NOTICE)
    assert pages.write_pages(tmp_path) == []  # unchanged: nothing rewritten


@pytest.mark.parametrize("text, message", [
    ("<!-- if jena -->\n<!-- if sst2 -->\n", "line 2: a block opens inside"),
    ("<!-- end -->\n", "line 1: '<!-- end -->' closes no block"),
    ("<!-- if jena -->\nx\n", "never closed"),
    ("{{nope}}\n", "unknown mark {{nope}}"),
])
def test_malformed_marks_are_named(text, message):
    with pytest.raises(pages.TemplateError, match=message.replace("{", r"\{").replace("}", r"\}")):
        pages.render(text, pages.PAGES["04_jena"])
