"""The GloVe vectors' table (:mod:`resgd.data.glove`, an ``.npz`` of words and vectors) when damaged:
a wrong dimension, text where numbers belong, NaN, a missing key (one line naming the file and the
key), a duplicated or a missing word (which pass every shape check and fail the content checksum).
"""

from __future__ import annotations

import numpy as np
import pytest
from fault_helpers import one_line, re_file

from resgd.data import DataError
from resgd.data.glove import GLOVE_SUBSET_NAME, load_glove, read_glove_npz

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
