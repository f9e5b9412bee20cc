"""Figures made from a file the loaders did not check against the published one carry a banner on
the figure itself (:func:`resgd.plots.style.banner_text`), as those made from the synthetic
stand-in do; verified real data get none."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # tests only

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from resgd.core.model import ModelConfig  # noqa: E402
from resgd.core.trainer import GDConfig  # noqa: E402
from resgd.data import NOT_CANONICAL_LABELS, load_jena  # noqa: E402
from resgd.data.jena import NOT_CANONICAL_LABEL, REAL_LABEL  # noqa: E402
from resgd.data.spec import DatasetSpec  # noqa: E402
from resgd.data.standin import write_standin_csv  # noqa: E402
from resgd.experiments.configuration import RunConfig  # noqa: E402
from resgd.experiments.results import loss_curves  # noqa: E402
from resgd.experiments.runs import sweep  # noqa: E402
from resgd.plots.experiments import plot_beta_sweep  # noqa: E402
from resgd.plots.style import banner_text  # noqa: E402


@pytest.fixture
def curves_of(tmp_path):
    """Loss curves of two toy runs, relabelled as if trained on data of the given source (the run
    table records ``is_standin`` and ``source_label`` of the data it was trained on)."""
    spec = DatasetSpec("toy", n_train=6, n_tokens=4, n_test=4, seed=0)
    config = RunConfig(spec, ModelConfig(d=6, d_qk=3, m=5, beta=1.0),
                          GDConfig(lr=0.05, iterations=8, reduction="mean", record_every=4))
    table = sweep([config, config.__class__(**{**config.__dict__, "seed": 1})], n_jobs=1, cache_dir=tmp_path / "runs")
    tagged = table.assign(experiment="beta", protocol="common", twin_init="living", beta_ffn=1.0)

    def make(is_standin: bool, label: str):
        return loss_curves(tagged.assign(is_standin=is_standin, source_label=label))

    return make


def texts(fig) -> list[str]:
    return [t.get_text() for t in fig.texts]


def test_a_jena_file_loaded_with_check_canonical_false_is_stamped_on_the_figure(tmp_path, monkeypatch, curves_of):
    monkeypatch.delenv("RESGD_DATA_DIR", raising=False)
    data = tmp_path / "data"
    write_standin_csv(data / "jena" / "jena_climate_2009_2016.csv", days=30)  # Jena format, not the canonical file
    loaded = load_jena(n_tokens=4, n_train=4, n_test=4, data_dir=data, cache_dir=tmp_path / "cache",
                       allow_download=False, check_canonical=False)
    assert not loaded.is_standin and loaded.source_label == NOT_CANONICAL_LABEL
    fig = plot_beta_sweep(curves_of(loaded.is_standin, loaded.source_label), "jena")
    try:
        assert NOT_CANONICAL_LABEL in texts(fig)  # the banner, on the figure itself
    finally:
        plt.close(fig)


def test_verified_real_data_gets_no_banner_and_the_standin_keeps_its_own(curves_of):
    figures = {label: plot_beta_sweep(curves_of(False, label), "jena") for label in (REAL_LABEL, NOT_CANONICAL_LABEL)}
    try:
        real, flagged = texts(figures[REAL_LABEL]), texts(figures[NOT_CANONICAL_LABEL])
    finally:
        for fig in figures.values():
            plt.close(fig)
    # the banner is the one difference beside the source footer, which names each figure's own data
    assert "data: " + REAL_LABEL in real and "data: " + NOT_CANONICAL_LABEL in flagged
    def body(ts):
        return [t for t in ts if not t.startswith("data: ")]

    assert sorted(body(flagged)) == sorted([*body(real), NOT_CANONICAL_LABEL])
    assert banner_text(curves_of(False, REAL_LABEL)) is None
    assert banner_text(curves_of(True, "SYNTHETIC stand-in data (x)")) == "SYNTHETIC stand-in data (x)"


def test_sst2_files_loaded_without_their_checksums_are_labelled_and_stamped(tmp_path, curves_of):
    import numpy as np

    from resgd.data import load_sst2
    from resgd.data.glove import GLOVE_SUBSET_NAME
    from resgd.data.sst2 import NOT_VERIFIED_LABEL

    root = tmp_path / "data"
    (root / "sst2").mkdir(parents=True)
    (root / "glove").mkdir()
    rows = "".join(f"{w} film \t{i % 2}\n" for i, w in enumerate(["good", "bad", "fine", "dull"] * 3))
    for split in ("train", "dev"):
        (root / "sst2" / f"{split}.tsv").write_text("sentence\tlabel\n" + rows, encoding="utf-8")
    np.savez(root / "glove" / GLOVE_SUBSET_NAME, words=np.array(["bad", "dull", "film", "fine", "good"]),
             vectors=np.ones((5, 50), np.float32))
    loaded = load_sst2(n_train=4, n_tokens=4, n_dev=4, data_dir=root, cache_dir=tmp_path / "cache",
                       allow_download=False, verify_checksums=False)
    assert loaded.source_label == NOT_VERIFIED_LABEL and NOT_VERIFIED_LABEL in NOT_CANONICAL_LABELS
    assert banner_text(curves_of(loaded.is_standin, loaded.source_label)) == NOT_VERIFIED_LABEL
