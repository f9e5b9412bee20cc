"""The book's one plotting style and the one way figures reach disk (PNG + PDF, atomically)."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt
import seaborn as sns

from .. import settings
from ..infra.atomic import write_with
from ..infra.user_errors import FULL_DISK, os_error_in_chain

FIGURES_ENV = "RESGD_FIGURES_DIR"
PALETTE = "colorblind"
BETA_CMAP = "viridis"
BETA_SPAN = (0.0, 0.85)
"""The part of :data:`BETA_CMAP` the β lines use: from dark purple (smallest β) to yellow-green;
the lightest yellow is left out, it does not read on white."""
BETA_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
MARKER_STEP = 0.12
"""Markers on a β line every this fraction of the axes' diagonal (matplotlib's float ``markevery``):
about eight per curve, so the curve stays readable; each β starts at its own offset, so that
coinciding curves still show each marker."""


TICK_PT = 12
"""Tick labels at the axis labels' size (seaborn's notebook context: 11 pt): a log axis' exponent is
drawn at 0.7 of it, 8.4 pt, which keeps it at 8 px or more in a figure up to about 9.4 in wide
scaled into the book's column (at 11 pt, nine figures' exponents read 7.5 to 7.9 px)."""


def use_style() -> None:
    """Seaborn ``whitegrid`` with the colour-blind palette and sizes that read well in the book."""
    sns.set_theme(style="whitegrid", palette=PALETTE, context="notebook")
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "figure.figsize": (6.4, 4.0), "axes.titlesize": "medium",
                         "xtick.labelsize": TICK_PT, "ytick.labelsize": TICK_PT})


def beta_styles(betas) -> dict[float, dict]:
    """One colour and one marker per residual weight β of a figure, by one rule for every figure of
    the book: the β in increasing order take evenly spaced colours of one sequential palette (dark =
    small β) and the markers of :data:`BETA_MARKERS` in turn.

    Why: the β lines of one figure were told apart by colour alone, and neighbouring β got
    near-identical colours; a distinct marker per β separates them in grey print and for colour-blind
    readers. Each value is a dict of
    ``color``, ``marker`` and ``markevery``, ready for ``ax.plot(..., **style)``; a scatter takes
    ``color`` and ``marker`` (:func:`point_style`).
    """
    values = sorted({float(b) for b in betas})
    cmap, (lo, hi) = plt.get_cmap(BETA_CMAP), BETA_SPAN
    n = len(values)
    return {b: {"color": cmap(lo + (hi - lo) * i / max(n - 1, 1)), "marker": BETA_MARKERS[i % len(BETA_MARKERS)],
                "markevery": (round(0.02 * i % MARKER_STEP, 4), MARKER_STEP), "markersize": 5}
            for i, b in enumerate(values)}


def point_style(style: dict) -> dict:
    """A :func:`beta_styles` entry for ``ax.scatter`` (colour and marker only)."""
    return {"color": style["color"], "marker": style["marker"]}


def legend_outside(where, handles=None, labels=None, *, side: str = "right", **options):
    """A legend that covers no data: beside (``side="right"``, top-aligned) or under (``"below"``,
    under its x label) an Axes ``where``, or, for one legend shared by every panel, beside or under a
    Figure's panels (with constrained layout the legend takes room of its own; otherwise leave it
    room). ``tight_layout`` makes room for an Axes' legend.

    Why one helper: legends placed with ``loc="best"`` sat on curves and points in dense panels;
    outside the axes they cannot, and every figure places them the same way.
    """
    from matplotlib.figure import Figure

    args = () if handles is None else (handles, labels)
    options = {"frameon": False, "fontsize": "small", **options}
    if isinstance(where, Figure):
        layout = where.get_layout_engine()
        constrained = layout is not None and type(layout).__name__ == "ConstrainedLayoutEngine"
        loc = {"right": "outside right upper", "below": "outside lower center"}[side] if constrained else \
            {"right": "center left", "below": "lower center"}[side]
        return where.legend(*args, loc=loc, **options)
    if side == "right":
        return where.legend(*args, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **options)
    from matplotlib.transforms import ScaledTranslation

    fig = where.figure  # under the axes' tick labels and x label, whatever the layout does to the axes later
    drop = (where.bbox.y0 - where.get_tightbbox(fig.canvas.get_renderer()).y0) / fig.dpi + 0.05  # inches
    return where.legend(*args, loc="upper center", bbox_to_anchor=(0.5, 0.0), borderaxespad=0.0,
                        bbox_transform=where.transAxes + ScaledTranslation(0, -drop, fig.dpi_scale_trans), **options)


def figures_dir(directory: str | os.PathLike | None = None) -> Path:
    """Where figures go: the argument, else ``$RESGD_FIGURES_DIR``, else ``./figures``."""
    return Path(directory) if directory else settings.figures_dir()


FIXED_METADATA = {"png": {}, "pdf": {"CreationDate": None}}
"""Metadata that would change between identical runs is left out (the PDF's creation date; the PNG
has none), so a rebuild gives the same bytes and can be compared byte for byte."""


def save_figure(fig: plt.Figure, name: str, directory: str | os.PathLike | None = None) -> dict[str, Path]:
    """Write ``name.png`` and ``name.pdf`` (byte-identical for an identical figure); returns their paths by extension.

    Why the PDF reuses the PNG's tight box and layout: a tight save draws the figure twice (once to
    measure, once to render) and runs its layout engine each time; the PDF is the same figure, so it
    is drawn once, inside the box the PNG's save measured, with the layout that save left.
    """
    out = figures_dir(directory)
    layout = _Layout(fig)
    try:
        paths = {"png": write_with(out / f"{name}.png", lambda tmp: _savefig(fig, tmp, "png", layout.measure()))}
    finally:
        fig.__dict__.pop("get_tightbbox", None)
    with layout.frozen():
        paths["pdf"] = write_with(out / f"{name}.pdf", lambda tmp: _savefig(fig, tmp, "pdf", layout.box))
    return paths


class _Layout:
    """The tight box a save of ``fig`` measured, and its layout held for the next save. The box is
    matplotlib's own: what :meth:`matplotlib.figure.Figure.get_tightbbox` returned inside the save
    (which alone calls it), padded as the save pads it."""

    def __init__(self, fig: plt.Figure):
        self.fig, self.box = fig, None

    def measure(self) -> str:
        """The ``bbox_inches`` of the first save: "tight", recording the box it finds."""
        fig, measured = self.fig, type(self.fig).get_tightbbox

        def get_tightbbox(*args, **kwargs):
            bbox = measured(fig, *args, **kwargs)
            self.box = bbox.padded(plt.rcParams["savefig.pad_inches"])
            return bbox

        fig.get_tightbbox = get_tightbbox
        return "tight"

    def frozen(self):
        """A context in which a save draws inside the measured box (none measured: "tight" again),
        with the layout engine off: the positions the last save's layout set stay."""
        import contextlib

        self.box = "tight" if self.box is None else self.box
        stack = contextlib.ExitStack()
        engine = self.fig.get_layout_engine()
        if engine is not None and type(engine).__name__ != "PlaceHolderLayoutEngine":
            self.fig.set_layout_engine("none")
            stack.callback(self.fig.set_layout_engine, engine)
        return stack


def glue_figure(key: str, fig: plt.Figure, name: str, directory: str | os.PathLike | None = None) -> dict[str, Path]:
    """In a book notebook: save ``fig`` (:func:`save_figure`), glue the saved PNG under ``key``
    (myst-nb) and close the figure; returns the saved paths.

    Why the saved PNG and not the Figure: gluing the Figure would have the kernel draw it a third
    time (after the PNG and the PDF), about a fifth of a notebook's plotting time. It is shown at
    the size the inline backend would give it (``figure.dpi``), sharper on dense screens.
    """
    from IPython.display import Image
    from myst_nb import glue

    paths = save_figure(fig, name, directory)
    data = paths["png"].read_bytes()
    width = int.from_bytes(data[16:20], "big")  # the PNG header's IHDR width
    dpi, shown = plt.rcParams["savefig.dpi"], plt.rcParams["figure.dpi"]
    scale = shown / dpi if isinstance(dpi, (int, float)) else 1.0  # savefig.dpi may be "figure"
    glue(key, Image(data=data, width=round(width * scale)), display=False)
    plt.close(fig)
    return paths


def _savefig(fig: plt.Figure, path: Path, ext: str, bbox_inches="tight") -> None:
    try:
        fig.savefig(path, format=ext, bbox_inches=bbox_inches, metadata=FIXED_METADATA[ext])
    except Exception as exc:
        # A full disk inside a PDF stream surfaces as zlib.error from matplotlib's clean-up: say what happened.
        full = os_error_in_chain(exc, FULL_DISK)
        if full is None or full is exc:
            raise
        raise OSError(full.errno, full.strerror) from exc


def banner_text(table) -> str | None:
    """The banner of a figure made from ``table`` (rows with ``is_standin`` and ``source_label``):
    the source label of the synthetic stand-in or of a file not checked against the published one
    (:data:`resgd.data.NOT_CANONICAL_LABELS`), else None (verified real data). The one place this
    is decided for the experiments' figures."""
    from ..data import NOT_CANONICAL_LABELS

    if not len(table):
        return None
    flagged = table["is_standin"].fillna(False).astype(bool) if "is_standin" in table else False
    if "source_label" not in table:
        return "SYNTHETIC stand-in data" if bool(flagged.any()) else None
    flagged = flagged | table["source_label"].isin(NOT_CANONICAL_LABELS)
    labels = list(dict.fromkeys(table.loc[flagged, "source_label"].astype(str)))
    return "; ".join(labels) or None


def label_standin(fig: plt.Figure, label: str | None) -> None:
    """Stamp a visible banner on figures made from synthetic stand-in or non-canonical data
    (:func:`banner_text`; no-op for ``None``, verified real data)."""
    if label:
        fig.text(0.5, 0.995, label, ha="center", va="top", fontsize=9, color="darkred",
                 bbox={"facecolor": "mistyrose", "edgecolor": "darkred", "boxstyle": "round,pad=0.2"})


def saved_width_px(fig: plt.Figure) -> int:
    """Width in pixels of the PNG :func:`save_figure` writes for ``fig`` (tight box, ``savefig.dpi``)."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    return int.from_bytes(buffer.getvalue()[16:20], "big")  # the PNG header's IHDR width


COLUMN_PX = 660
"""The narrowest width (CSS px) at which the book shows a wide figure in a 1280-px or a 768-px
browser window (the content column caps it; measured by ``tests/test_browser.py``): the width
:func:`smallest_text_px` reads a figure at by default."""


def smallest_text_px(fig: plt.Figure, page_px: float = COLUMN_PX) -> float:
    """Height in CSS px of the figure's smallest visible text as a reader sees it in the book.

    Why: a figure wider than the content column (``page_px``) is scaled down to fit, so its
    labels shrink with it. :func:`glue_figure` shows the PNG at ``figure.dpi`` pixels per inch;
    the browser then caps the width at ``page_px``. Every non-empty visible text (titles, labels,
    tick labels, legends, annotations, colour bars) counts, each at its smallest glyph: a log axis'
    exponent (``10⁻³`` as mathtext) or a subscript is drawn at 0.7 of its label's size
    (:func:`smallest_glyph_pt`). Legibility wants about 8 px or more.
    """
    from matplotlib.text import Text

    width_px = saved_width_px(fig)  # also draws the figure, so tick labels hold their text
    dpi, shown = plt.rcParams["savefig.dpi"], plt.rcParams["figure.dpi"]
    dpi = fig.dpi if not isinstance(dpi, (int, float)) else dpi
    shown_px = min(width_px * shown / dpi, page_px)
    px_per_inch = shown_px / (width_px / dpi)
    sizes = [smallest_glyph_pt(t) for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and _drawn(t)]
    return min(sizes) / 72 * px_per_inch if sizes else float("inf")


def smallest_glyph_pt(text) -> float:
    """Size in points of the smallest glyph ``text`` draws: its font size, or less where mathtext
    shrinks a part (superscripts such as a log axis' exponents, subscripts: 0.7 per level).

    Why: a tick label's font size says 11 pt while its exponent is drawn at 7.7 pt; measured by the
    font size alone, nine figures passed whose exponents read under 8 px in the book.
    """
    from matplotlib.mathtext import MathTextParser

    size = text.get_fontsize()
    string = text.get_text()
    if text.get_usetex() or not text._preprocess_math(string)[1]:
        return size
    glyphs = MathTextParser("path").parse(string, dpi=72, prop=text.get_fontproperties()).glyphs
    return min((g[1] for g in glyphs), default=size)


def _drawn(text) -> bool:
    """False for a tick label whose tick lies outside its axis' view (matplotlib keeps, but does not draw, it)."""
    if text.axes is None:
        return True
    for axis in (text.axes.xaxis, text.axes.yaxis):
        for tick in axis.majorTicks + axis.minorTicks:
            if text is tick.label1 or text is tick.label2:
                lo, hi = sorted(axis.get_view_interval())
                slack = 1e-9 * (hi - lo)
                return lo - slack <= tick.get_loc() <= hi + slack
    return True
