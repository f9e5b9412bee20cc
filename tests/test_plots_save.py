"""``resgd.plots.save_figure``: byte-identical files for identical figures; a full disk named as such."""

from __future__ import annotations

import errno
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from resgd.plots import save_figure  # noqa: E402


@pytest.fixture
def figure():
    fig, ax = plt.subplots()
    ax.plot([0, 1, 2], [1.0, 0.5, 0.2], label="loss")
    ax.set_title("Φ(t) and text, so fonts are embedded")
    ax.legend()
    yield fig
    plt.close(fig)


def test_identical_figures_give_identical_bytes_at_different_times(figure, tmp_path, monkeypatch):
    # matplotlib dates a PDF from SOURCE_DATE_EPOCH when set: two "runs" a long time apart
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    first = {ext: path.read_bytes() for ext, path in save_figure(figure, "f", tmp_path / "a").items()}
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1900000000")
    second = {ext: path.read_bytes() for ext, path in save_figure(figure, "f", tmp_path / "b").items()}
    assert set(first) == {"png", "pdf"}
    for ext in first:
        assert first[ext] == second[ext], f"{ext} differs between identical saves"
    assert b"/CreationDate" not in first["pdf"] and b"/ModDate" not in first["pdf"]
    assert b"tIME" not in first["png"]  # no PNG time chunk either


class FullDisk(io.RawIOBase):
    """A seekable file that takes ``limit`` bytes, then fails as a full disk does (ENOSPC)."""

    def __init__(self, limit: int):
        self.written, self.limit = 0, limit

    def writable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.written

    def write(self, data):
        if self.written + len(data) > self.limit:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.written += len(data)
        return len(data)


def test_a_full_disk_is_reported_as_enospc_not_as_zlib_error(figure, tmp_path, monkeypatch):
    """With the disk full inside a compressed PDF stream, matplotlib's clean-up flushes the stream
    again and raises ``zlib.error: inconsistent stream state``; the real cause must come out."""
    real_savefig = type(figure).savefig

    def savefig_on_full_disk(self, fname, **kwargs):
        if kwargs.get("format") == "pdf":  # the real PDF backend writing to a disk that fills up
            fname = FullDisk(600)
        return real_savefig(self, fname, **kwargs)

    import zlib

    monkeypatch.setattr(type(figure), "savefig", savefig_on_full_disk)
    with pytest.raises(zlib.error):  # what matplotlib itself raises: the fault is real
        figure.savefig(tmp_path / "x.pdf", format="pdf")
    with pytest.raises(OSError) as info:
        save_figure(figure, "f", tmp_path)
    assert info.value.errno == errno.ENOSPC
    assert str(tmp_path / "f.") in str(info.value)  # names the file being written
    assert [p.name for p in tmp_path.iterdir()] == ["f.png"]  # no half-written PDF or temporary left behind


def test_glue_figure_glues_the_saved_png_at_the_inline_size_and_closes_the_figure(figure, tmp_path, monkeypatch):
    import myst_nb

    from resgd.plots import glue_figure, use_style

    use_style()  # figure.dpi 110, savefig.dpi 150
    glued = {}
    monkeypatch.setattr(myst_nb, "glue", lambda key, obj, display=True: glued.update({key: (obj, display)}))
    paths = glue_figure("fig-key", figure, "g", tmp_path)
    image, display = glued["fig-key"]
    assert not display
    assert image.data == paths["png"].read_bytes() and paths["pdf"].is_file()
    png_width = int.from_bytes(image.data[16:20], "big")
    assert image.width == round(png_width * 110 / 150)
    assert not plt.fignum_exists(figure.number)  # closed: a glued figure must not show a second time


@pytest.mark.parametrize("constrained", [False, True])
def test_the_png_is_a_tight_save_and_the_pdf_is_drawn_once_inside_its_box(tmp_path, monkeypatch, constrained):
    import re

    from matplotlib.figure import Figure

    def make():
        fig, ax = plt.subplots(constrained_layout=constrained)
        ax.plot([1, 10, 100], [1.0, 0.1, 0.01], label="β = 1")
        ax.set_yscale("log")
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))  # outside the axes: the tight box must hold it
        return fig

    reference = make()  # what two tight saves gave
    plain, tight_pdf = io.BytesIO(), io.BytesIO()
    reference.savefig(plain, format="png", bbox_inches="tight")
    reference.savefig(tight_pdf, format="pdf", bbox_inches="tight", metadata={"CreationDate": None})
    plt.close(reference)
    fig = make()
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    draws, layouts = [], []
    real_draw, real_layout = Figure.draw, ConstrainedLayoutEngine.execute
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: draws.append(1) or real_draw(self, renderer))
    monkeypatch.setattr(ConstrainedLayoutEngine, "execute", lambda self, f: layouts.append(1) or real_layout(self, f))
    paths = save_figure(fig, "f", tmp_path)
    assert paths["png"].read_bytes() == plain.getvalue()
    if constrained:  # the PDF's save draws with the layout engine off (a placeholder engine: a measuring draw stays)
        assert len(layouts) == 1  # in the PNG's save only (two tight saves: twice)
    else:
        assert len(draws) == 3  # the PNG: measure and render; the PDF: render only (two tight saves: 4)
    assert "get_tightbbox" not in fig.__dict__
    assert (fig.get_layout_engine() is not None and type(fig.get_layout_engine()).__name__ == "ConstrainedLayoutEngine") \
        == constrained  # the layout engine is back

    def media_box(data: bytes) -> list[float]:
        return [float(v) for v in re.search(rb"/MediaBox \[([^\]]*)\]", data).group(1).split()]

    for ours, tight in zip(media_box(paths["pdf"].read_bytes()), media_box(tight_pdf.getvalue())):
        assert abs(ours - tight) < 1.0  # points: the PNG's box, measured at its dpi
    plt.close(fig)
