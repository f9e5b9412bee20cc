"""The data sets, one record each: every module that loads, sizes, titles, pages or checks a data set
reads it here.

Why: a data set used to be spelled in a dozen modules (five parallel tables of its features, pooling
and task, a branch of the loading if-chain, the presets' sizes, the figures' titles, the pages, the
sentences, the command line's parts), so adding one meant finding them all. To add a data set: write
its loader (a function ``(spec, dtype, **options) -> SupervisedData`` in its own module of
:mod:`resgd.data`), and add here the function that imports and calls it and its :class:`Dataset`;
``tests/test_dataset_registry.py`` fails when a data set's name is written as a string anywhere else in
``src/`` (its loader's modules apart).

A loader is imported when it is called, inside the function here that calls it: importing this module
imports neither torch nor a loader (``python -m resgd --help`` reads the command line's parts here),
and the import is still written out, so the code hash of the run cache
(:func:`resgd.infra.source_hash.compute_modules`) covers every loader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

TASKS = ("regression", "classification")
"""``regression``: a target per token, squared loss; ``classification``: one ±1 label per sample of the
mean-pooled output (accuracy is reported)."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """One data set: how it is loaded, its shape and task, its experiment sizes and its words."""

    name: str
    """The ``DatasetSpec.name``, the glue keys' and figure names' ``<dataset>``; it enters every cache key
    through the configuration: never rename a data set that has stored results."""
    loader: Callable[..., Any]
    """``(spec, dtype, **options) -> SupervisedData``: loads the data a ``DatasetSpec`` names."""
    features: int
    """``d``, each token's dimension (the model's input width)."""
    pooling: str
    """The model's output pooling (``resgd.core.model.POOLINGS``): ``"none"`` per token, ``"mean"`` pooled."""
    task: str
    """One of :data:`TASKS`."""
    title: str
    """Its name in figure titles and on its page."""
    sizes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """``{"quick": {...}, "full": {...}}``: its experiment sizes over the presets' common values
    (:func:`resgd.pipeline.presets.experiments`)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments of its loader that make this data set of a loader's data (the Jena task on the stand-in)."""
    paper: bool = False
    """One of the paper's data sets: it has a page, verdicts and a part of ``python -m resgd reproduce``."""
    short: str = ""
    """Its name in the landing page's sentences ("Jena")."""
    notebook: str = ""
    """Its page (``notebooks/<notebook>.md``, rendered from the experiments template)."""
    what: str = ""
    """Its task in the page's words ("a time series")."""
    standin: str = ""
    """The data set of the same task on the synthetic stand-in (the page's sensitivity row), if any."""
    source: Callable[[], tuple[Any, str]] | None = None
    """``() -> (path or None, why not)``: where its real file is, for a loader that falls back to a
    synthetic stand-in (``python -m resgd reproduce`` says so before the work starts)."""

    @property
    def is_classification(self) -> bool:
        return self.task == "classification"

    def load(self, spec: Any, dtype: Any, **options: Any) -> Any:
        """The data of ``spec`` in ``dtype`` (a ``torch.dtype``), from its loader with its options."""
        return self.loader(spec, dtype, **{**self.options, **options})


# The loaders, each imported when first called (see the module's docstring).


def _jena(spec: Any, dtype: Any, **options: Any) -> Any:
    from .data import jena

    return jena.load_spec(spec, dtype, **options)


def _jena_source() -> tuple[Any, str]:
    from .data import jena

    return jena.jena_source()


def _sst2(spec: Any, dtype: Any, **options: Any) -> Any:
    from .data import sst2

    return sst2.load_spec(spec, dtype, **options)


def _toy(spec: Any, dtype: Any, **options: Any) -> Any:
    from .data import toy

    return toy.toy_data(spec, dtype, **options)


# The paper's data sets' sizes. Jena: January 2009 (667 hours; book/choices.md): 420 training windows of
# 48 h, 105 held out (all of them). depth_N, depth_iterations: the depth sweep's size, smaller than the
# single-layer sweeps' so that its two protocols fit the book's time budget (book/choices.md): N = 32 in
# full mode. Its arms are descriptive (3 seeds); the robustness map decides depth with 8.
_V6_SEEDS = tuple(range(12))
"""Design v6's evaluation seeds (experiments.design.V6_SEEDS: 12 in every deciding arm)."""
_V6_QUICK = {"v6_seeds": (0, 1), "regime_N": 4, "regime_iterations": 50, "own_grid_stride": 8}
"""Design v6 in quick mode: 2 seeds (its verdicts cannot decide; the quick book is a smoke build),
its own-step search on every eighth step of ``design.OWN_GRID`` (1, 1e-2, 1e-4, 1e-6: an unstable probe
and a path that rises still occur, at half the whole decades' probes and paths) and a short regime run."""
_QUICK_SIZES = dict(N=16, iterations=20, seeds=(0, 1), depth_N=16, depth_iterations=20, probe_iterations=10,
                    lhat_iterations=5, record_every=5)
"""The quick smoke build's experiment sizes (both data sets): every arm, β, depth, figure and table of
the full book, at 16 samples and T = 20 (a multiple of 4 · ``record_every``, so that every horizon
T/4, T/2, T falls on a recorded iteration), each L̂ by 5 power-iteration steps (the book's: 20); the
interval arms keep their 8 seeds (the rule needs them)."""

_JENA_SIZES = {
    "quick": dict(n=24, n_test=None, widths={"d_qk": 16, "m": 64}, target_fraction=0.1, **_QUICK_SIZES, **_V6_QUICK),
    "full": dict(N=128, n=24, n_test=None, iterations=1000, seeds=(0, 1, 2), widths={"d_qk": 16, "m": 64},
                 target_fraction=0.1, depth_N=32, depth_iterations=600, v6_seeds=_V6_SEEDS, regime_N=4,
                 regime_iterations=1000),
}
# SST-2's quick held-out set: 128 of the 872 dev sentences (the smoke build's end-of-run metrics on all
# of them cost a third of its page); the full book scores every one.
_SST2_SIZES = {
    "quick": dict(n=16, n_test=128, widths={"d_qk": 16, "m": 64}, target_fraction=0.5, **_QUICK_SIZES, **_V6_QUICK),
    "full": dict(N=128, n=16, n_test=None, iterations=800, seeds=(0, 1, 2), widths={"d_qk": 16, "m": 64},
                 target_fraction=0.5, depth_N=32, depth_iterations=500, v6_seeds=_V6_SEEDS, regime_N=16,
                 regime_iterations=1000),
}
_TOY_SIZES = {
    "quick": dict(N=8, n=4, n_test=8, iterations=20, seeds=(0, 1), widths={"d_qk": 4, "m": 8},
                  depths=(2, 3), lr_grid=(0.3, 0.1, 0.03), probe_iterations=5, depth_N=8, depth_iterations=20),
    "full": dict(N=16, n=4, n_test=8, iterations=40, seeds=(0, 1), widths={"d_qk": 4, "m": 8},
                 depths=(2, 3), lr_grid=(0.3, 0.1, 0.03), probe_iterations=5, depth_N=8, depth_iterations=20),
}

JENA = Dataset(
    name="jena", loader=_jena, features=11, pooling="none", task="regression",
    title="Jena climate", sizes=_JENA_SIZES, paper=True, short="Jena", notebook="04_jena", what="a time series",
    standin="jena_standin", source=_jena_source,
)
SST2 = Dataset(
    name="sst2", loader=_sst2, features=50, pooling="mean", task="classification",
    title="SST-2", sizes=_SST2_SIZES, paper=True, short="SST-2", notebook="05_sst2", what="sentiment classification",
)
TOY = Dataset(name="toy", loader=_toy, features=6, pooling="none", task="regression",
              title="toy data", sizes=_TOY_SIZES)
"""Tiny synthetic data for tests (per-token regression): every code path in seconds, no download."""
TOY_CLS = Dataset(name="toy_cls", loader=_toy, features=6, pooling="mean", task="classification",
                  title="toy data", sizes=_TOY_SIZES)
"""Tiny synthetic data for tests (pooled ±1 labels)."""
JENA_STANDIN = Dataset(
    name="jena_standin", loader=_jena, features=11, pooling="none", task="regression",
    title="Jena task, synthetic stand-in", sizes=_JENA_SIZES, options={"source": "standin"},
)
"""The Jena task on the synthetic stand-in even where real data exist (the sensitivity row beside the
real measurements)."""

_RECORDS: dict[str, Dataset] = {d.name: d for d in (JENA, SST2, TOY, TOY_CLS, JENA_STANDIN)}
"""Every data set, in the order the checks list them."""


def dataset(name: str) -> Dataset:
    """The data set called ``name`` (a KeyError names the known ones)."""
    try:
        return _RECORDS[name]
    except KeyError:
        raise KeyError(f"no data set {name!r}; the data sets are {sorted(_RECORDS)}") from None


def names() -> tuple[str, ...]:
    """Every data set's name (what no module outside this one and the loaders spells)."""
    return tuple(_RECORDS)


def paper() -> tuple[Dataset, ...]:
    """The paper's data sets, in the book's order (each has a page and a part of ``reproduce``)."""
    return tuple(d for d in _RECORDS.values() if d.paper)


def paper_names() -> tuple[str, ...]:
    return tuple(d.name for d in paper())


def title(name: str) -> str:
    """Its title in figures; an unknown name is its own title (a figure of a table from elsewhere)."""
    return _RECORDS[name].title if name in _RECORDS else name


@contextmanager
def registered(*records: Dataset) -> Iterator[None]:
    """While the block runs, ``records`` are data sets too (a test's temporary data set)."""
    clash = [d.name for d in records if d.name in _RECORDS]
    if clash:
        raise ValueError(f"data set(s) {clash} already registered")
    for record in records:
        check(record)
        _RECORDS[record.name] = record
    try:
        yield
    finally:
        for record in records:
            _RECORDS.pop(record.name, None)


def check(record: Dataset) -> None:
    """A record's fields are usable (one line naming the data set and the field when not)."""
    where = f"Dataset {record.name!r}"
    if record.task not in TASKS:
        raise ValueError(f"{where}.task: expected one of {TASKS}, got {record.task!r}")
    if record.pooling not in ("none", "mean"):
        raise ValueError(f"{where}.pooling: expected 'none' or 'mean', got {record.pooling!r}")
    if not callable(record.loader) or (record.source is not None and not callable(record.source)):
        raise ValueError(f"{where}.loader, .source: expected functions, got {record.loader!r}, {record.source!r}")
    if not isinstance(record.features, int) or record.features < 1:
        raise ValueError(f"{where}.features: expected an integer >= 1, got {record.features!r}")
    if record.sizes and set(record.sizes) != {"quick", "full"}:
        raise ValueError(f"{where}.sizes: expected the keys 'quick' and 'full', got {sorted(record.sizes)}")
    if record.standin and record.standin not in _RECORDS:
        raise ValueError(f"{where}.standin: no data set {record.standin!r}")


for _record in _RECORDS.values():
    check(_record)
