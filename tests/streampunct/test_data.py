"""Reading labelled data: punctuated text converted as training converts it."""

import pytest

from streampunct.errors import InputError


def test_read_punctuated_text_converts_like_training(tmp_path):
    from streampunct.labels import COMMA, PERIOD, QUESTION, O
    from streampunct.text.word_labels import read_punctuated_text

    f = tmp_path / "t.txt"
    f.write_text("Hello, world. Is it you? I don't know.\n", encoding="utf-8")
    data = read_punctuated_text(f)
    assert data.words == ["hello", "world", "is", "it", "you", "i", "do", "n't", "know"]
    assert data.labels == [COMMA, PERIOD, O, O, QUESTION, O, O, O, PERIOD]
    with pytest.raises(InputError, match="no such file"):
        read_punctuated_text(tmp_path / "missing.txt")
