"""Corrupt data files not yet covered by test_data_sst2.py / test_data_jena.py: each a
one-line error naming the file, the line and the field, and from the command line exit status 1
(the README: "a problem with the data ... exit status 1"; 2 is for a bad setting).

The GloVe vectors ship as an ``.npz`` table (words, vectors), so its faults are those of that
file: a wrong dimension, text where numbers belong, NaN, a missing key, a duplicated or a missing
word (the last two pass every shape check and are caught by the content checksum).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from resgd.data import DataError, parse_jena_csv, standin_frame
from resgd.data.glove import GLOVE_SUBSET_NAME, load_glove, read_glove_npz
from resgd.data.jena_schema import CANONICAL_HEADER
from resgd.data.sst2 import SHA256, load_sst2, parse_sst2_tsv



def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- SST-2


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


# --------------------------------------------------------------------------- GloVe (.npz)

WORDS = np.array(["a", "b", "c"])


@pytest.mark.parametrize("arrays, pattern", [
    ({"words": WORDS, "vectors": np.ones((3, 49), np.float32)}, r"key 'vectors' has shape \(3, 49\) and dtype float32; expected \(3, 50\) floats"),
    ({"words": WORDS, "vectors": np.full((3, 50), "0.1")}, r"key 'vectors' has shape \(3, 50\) and dtype <U3; expected \(3, 50\) floats"),
    ({"words": WORDS, "vectors": np.where(np.eye(3, 50) > 0, np.nan, 1.0)}, r"key 'vectors' holds NaN or inf values"),
    ({"words": WORDS}, r"no key\(s\) \['vectors'\]; expected keys 'words' and 'vectors'"),
    ({"words": np.arange(3), "vectors": np.ones((3, 50))}, r"key 'words' has dtype int64 and shape \(3,\); expected 1-D strings"),
], ids=["dimension 49", "text vectors", "NaN", "no vectors key", "numbers as words"])
def test_a_malformed_glove_table_names_file_and_key(tmp_path, arrays, pattern):
    path = tmp_path / GLOVE_SUBSET_NAME
    np.savez(path, **arrays)
    with pytest.raises(DataError, match=re_file(path) + pattern) as caught:
        read_glove_npz(path)
    one_line(caught)


def re_file(path: Path) -> str:
    import re

    return re.escape(str(path)) + ": "


@pytest.mark.parametrize("change", ["duplicated word", "missing word"])
def test_a_glove_table_with_a_duplicated_or_missing_word_fails_its_content_checksum(sst2_shared, tmp_path, change):
    """Both pass every shape check; the content checksum (sorted words + vectors) names the file."""
    table = read_glove_npz(sst2_shared / "glove" / GLOVE_SUBSET_NAME)
    words, vectors = table.words.copy(), table.vectors.copy()
    if change == "duplicated word":
        words[1] = words[0]  # the same word twice, with two vectors
    else:
        words, vectors = words[1:], vectors[1:]
    data = tmp_path / "data"
    (data / "glove").mkdir(parents=True)
    path = data / "glove" / GLOVE_SUBSET_NAME
    np.savez(path, words=words, vectors=vectors)
    with pytest.raises(DataError, match=re_file(path) + r"GloVe content sha256 \(sorted words \+ vectors\) is [0-9a-f]{64}, expected") as caught:
        load_glove(set, data_root=data, cache_root=tmp_path / "cache", allow_download=False)
    one_line(caught)


# --------------------------------------------------------------------------- Jena


def jena_text(days: int = 2) -> str:
    frame = standin_frame(days=days, seed=1)
    return CANONICAL_HEADER + "\n" + frame.to_csv(header=False, index=False, float_format="%.2f", lineterminator="\n")


def with_line(text: str, number: int, edit) -> str:
    lines = text.split("\n")
    lines[number - 1] = edit(lines[number - 1])
    return "\n".join(lines)


def decimal_commas(text: str) -> str:
    header, *rows = text.split("\n")
    def german(row: str) -> str:  # a spreadsheet's export with decimal commas: '996,52' for 996.52
        date, _, numbers = row.partition(",")
        return f"{date},{numbers.replace('.', ',')}" if row else row

    return "\n".join([header, *map(german, rows)])


JENA_FAULTS = {
    "byte-order mark": (lambda t: "\ufeff" + t, r"line 1 \(header\), column 1: got '\\ufeff\"Date Time\"', expected 'Date Time'"),
    "UTF-16": (None, r"line 1 \(header\) is not UTF-8 text"),
    "semicolons": (lambda t: t.replace(",", ";"), r"line 1 \(header\), column 1: got 'Date Time;"),
    "decimal commas": (decimal_commas, r"line 2 has 29 comma-separated fields, expected 15 \(written with decimal commas"),
    "two rows swapped": (lambda t: with_line(with_line(t, 4, lambda _: t.split("\n")[4]), 5, lambda _: t.split("\n")[3]),
                         r"line 5, field 'Date Time': got 01\.01\.2009 00:30:00, a timestamp earlier than line 4's \(out of order\)"),
    "ISO dates": (lambda t: with_line(t, 4, lambda line: line.replace("01.01.2009", "2009-01-01")),
                  r"line 4, field 'Date Time': got '2009-01-01 00:30:00', expected a date dd\.mm\.yyyy HH:MM:SS"),
    "two-digit year": (lambda t: with_line(t, 4, lambda line: line.replace(".2009", ".09")),
                       r"line 4, field 'Date Time': got '01\.01\.09 00:30:00', expected a date"),
    "month 13": (lambda t: with_line(t, 4, lambda line: line.replace("01.01.2009", "01.13.2009")),
                 r"line 4, field 'Date Time': got '01\.13\.2009 00:30:00', expected a date"),
    "cut mid-line": (lambda t: t[: t.index("\n", len(t) // 2) + 30], r"line 146, field '[^']+': got an empty field, expected a number"),
    "infinite pressure": (lambda t: with_line(t, 7, lambda line: line.split(",", 1)[0] + ",inf," + line.split(",", 2)[2]),
                          r"line 7, field 'p \(mbar\)': got inf, expected a number"),
}


@pytest.mark.parametrize("fault", list(JENA_FAULTS))
def test_a_malformed_jena_file_names_file_line_and_field(tmp_path, fault):
    edit, pattern = JENA_FAULTS[fault]
    path = tmp_path / "jena.csv"
    text = jena_text()
    if edit is None:  # UTF-16
        path.write_bytes(text.encode("utf-16"))
    else:
        path.write_text(edit(text), encoding="utf-8")
    with pytest.raises(DataError, match=re_file(path) + pattern) as caught:
        parse_jena_csv(path)
    one_line(caught)


def test_windows_line_ends_parse_as_the_same_rows(tmp_path):
    """Not a fault: a file saved with CRLF line ends gives the same rows as with LF."""
    text = jena_text()
    (tmp_path / "lf.csv").write_text(text, encoding="utf-8")
    (tmp_path / "crlf.csv").write_bytes(text.replace("\n", "\r\n").encode())
    assert parse_jena_csv(tmp_path / "crlf.csv").equals(parse_jena_csv(tmp_path / "lf.csv"))


# --------------------------------------------------------------------------- from the command line


def test_a_corrupt_sst2_file_from_the_command_line_is_one_line_and_exit_1(sst2_shared, tmp_path, monkeypatch, capsys):
    """``python -m resgd reproduce --quick --only sst2`` on a data folder whose dev.tsv has a bad
    label: the real part stops before training, one line names the file, line and field."""
    from resgd import cli

    data = real_copy(sst2_shared, tmp_path)
    lines = (sst2_shared / "sst2" / "dev.tsv").read_text(encoding="utf-8").split("\n")
    lines[5] = lines[5].rsplit("\t", 1)[0] + "\tpositive"
    (data / "sst2" / "dev.tsv").unlink()
    (data / "sst2" / "dev.tsv").write_text("\n".join(lines), encoding="utf-8")
    for name, value in {"RESGD_DATA_DIR": data, "RESGD_OFFLINE": 1, "RESGD_CACHE_DIR": tmp_path / "cache"}.items():
        monkeypatch.setenv(name, str(value))
    status = cli.main(["reproduce", "--quick", "--only", "sst2", "--figures-dir", str(tmp_path / "figures"),
                       "--results-dir", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err
    errors = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {data / 'sst2' / 'dev.tsv'}: line 6, field 'label': got 'positive'")
    assert not list((tmp_path / "results").rglob("*.pkl"))  # nothing trained


def test_a_corrupt_jena_file_from_the_command_line_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    from resgd import cli

    data = tmp_path / "data"
    (data / "jena").mkdir(parents=True)
    (data / "jena" / "jena_climate_2009_2016.csv").write_text(decimal_commas(jena_text()), encoding="utf-8")
    for name, value in {"RESGD_DATA_DIR": data, "RESGD_OFFLINE": 1, "RESGD_CACHE_DIR": tmp_path / "cache"}.items():
        monkeypatch.setenv(name, str(value))
    status = cli.main(["reproduce", "--quick", "--only", "jena", "--figures-dir", str(tmp_path / "figures"),
                       "--results-dir", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err
    errors = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and "jena_climate_2009_2016.csv: line 2 has 29 comma-separated fields" in errors[0]
    assert not list((tmp_path / "results").rglob("*.pkl"))
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
