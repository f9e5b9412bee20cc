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


def test_the_committed_pages_are_the_templates_render():
    """Binder, GitHub and ``make lab`` open the committed files: they must be what a build renders."""
    template = (ROOT / pages.TEMPLATE).read_text(encoding="utf-8")
    for name, values in pages.PAGES.items():
        committed = (ROOT / "notebooks" / f"{name}.md").read_text(encoding="utf-8")
        assert committed == pages.render(template, values), f"notebooks/{name}.md: run python -m resgd.publish.build (it re-renders)"
        assert not pages.edited_by_hand(committed)


def test_a_template_change_reaches_the_pages_and_a_hand_edit_is_never_overwritten(tmp_path):
    (tmp_path / "notebooks").mkdir()
    template = tmp_path / pages.TEMPLATE
    template.write_text((ROOT / pages.TEMPLATE).read_text(encoding="utf-8"), encoding="utf-8")
    pages.write_pages(tmp_path)
    template.write_text(template.read_text(encoding="utf-8") + "\nA new closing line.\n", encoding="utf-8")
    assert len(pages.write_pages(tmp_path)) == 2  # pristine renders follow the template
    jena = tmp_path / "notebooks" / "04_jena.md"
    assert jena.read_text(encoding="utf-8").endswith("A new closing line.\n")
    edited = jena.read_text(encoding="utf-8").replace("A new closing line.", "A reader's note.")
    jena.write_text(edited, encoding="utf-8")
    template.write_text(template.read_text(encoding="utf-8") + "Another line.\n", encoding="utf-8")
    with pytest.raises(pages.TemplateError, match=r"04_jena\.md: edited by hand .* move your edits there"):
        pages.write_pages(tmp_path)
    assert jena.read_text(encoding="utf-8") == edited  # kept
