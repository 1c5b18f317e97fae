import numpy as np
import pytest

from streampunct.core.alignment import Aligner
from streampunct.core.options import SessionOptions
from streampunct.core.stream_state import StreamState
from streampunct.core.windowing import WindowConfig
from streampunct.errors import ModelError


def test_words_tokenize_as_in_context(aligner):
    words = ["the", "puppeteers", "do", "n't", "know"]
    ids, starts, label_pos = aligner.encode_words(words)
    sentence = aligner.tokenizer.encode(" ".join(words), add_special_tokens=False).ids
    assert ids == sentence
    assert starts[0] == 0 and label_pos == [s + len(aligner.word_ids(w)) - 1 for s, w in zip(starts, words, strict=True)]
    assert (aligner.cls_id, aligner.sep_id, aligner.pad_id) == (101, 102, 0)


def test_tokenizer_padding_settings_are_ignored(aligner):
    # The MiniLM tokenizer.json pads to 128 by default; words must come out bare.
    assert len(aligner.word_ids("hello")) == 1


def test_first_subtoken_option(minilm_tokenizer_path):
    first = Aligner.from_file(minilm_tokenizer_path, label_position="first")
    n = len(first.word_ids("puppeteers"))
    assert n > 1 and first.label_offset(n) == 0
    with pytest.raises(ValueError, match="label_position"):
        Aligner.from_file(minilm_tokenizer_path, label_position="middle")


def test_huge_word_is_capped(aligner):
    ids = aligner.word_ids("abc" * 30_000)
    assert 1 <= len(ids) <= aligner.max_word_tokens
    assert aligner.word_ids("supercalifragilisticexpialidocious" * 3)[-1] == aligner.tokenizer.encode(
        "supercalifragilisticexpialidocious" * 3, add_special_tokens=False
    ).ids[-1]


def test_missing_tokenizer(tmp_path):
    with pytest.raises(ModelError, match="no tokenizer at .*tokenizer.json: it does not exist"):
        Aligner.from_file(tmp_path)
    (tmp_path / "tokenizer.json").mkdir()  # named as a folder: the path as it is, said to be a folder
    for given in (tmp_path, tmp_path / "tokenizer.json"):
        with pytest.raises(ModelError) as e:
            Aligner.from_file(given)
        assert str(e.value).startswith(f"no tokenizer at {tmp_path / 'tokenizer.json'}: it is a folder, not a file")


def test_stream_state_with_real_tokenizer(aligner):
    state = StreamState(aligner, WindowConfig(), SessionOptions(right_context=1))
    state.feed(["hello", "world", "again"], 0.0)
    req = state.next_request(0.0)
    assert req.input_ids.tolist()[0] == 101 and req.input_ids.tolist()[-1] == 102
    tokens = aligner.tokenizer.decode(req.input_ids.tolist()[1:-1])
    assert tokens == "hello world again"
    assert req.positions.tolist() == [1, 2]
    out = state.apply(req, np.eye(4, dtype=np.float32)[[0, 2, 1, 0, 0]])
    assert [(d.word, d.label) for d in out] == [("hello", 2), ("world", 1)]
