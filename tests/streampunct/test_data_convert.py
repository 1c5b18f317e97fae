import gzip
import json

import pytest

from streampunct.errors import InputError
from streampunct.labels import COMMA, LABELS, PERIOD, QUESTION, O
from streampunct.text.convert import text_to_word_labels
from streampunct.text.normalize import render
from streampunct.text.word_labels import iter_ted_talks, read_word_labels, write_word_labels
from tests.conftest import DATA_ROOT, IWSLT, SHIPPED_TEST_DATA, need_file


def names(labels):
    return [LABELS[x] for x in labels]


def test_converter_follows_iwslt_conventions():
    words, labels = text_to_word_labels(
        "Well, I don't know -- it's hard; we've tried: Mr. Smith asked why? Yes!"
    )
    assert words == [
        "well", "i", "do", "n't", "know", "it", "'s", "hard", "we've", "tried",
        "mr", "smith", "asked", "why", "yes",
    ]
    assert names(labels) == [
        "COMMA", "O", "O", "O", "COMMA", "O", "O", "PERIOD", "O", "COMMA",
        "O", "O", "O", "QUESTION", "PERIOD",
    ]


def test_converter_strongest_mark_quotes_and_dashes():
    words, labels = text_to_word_labels('He said, "Really?!" and\u2014well\u2014no...')
    assert words == ["he", "said", "really", "and", "well", "no"]
    assert labels == [O, COMMA, QUESTION, COMMA, COMMA, PERIOD]
    assert text_to_word_labels("") == ([], [])
    assert text_to_word_labels(" ?! ... -- ") == ([], [])
    assert text_to_word_labels("I can't, won't.") == (["i", "ca", "n't", "wo", "n't"], [O, O, COMMA, O, PERIOD])


def test_reader_repairs_quirks_without_losing_labels(tmp_path):
    f = tmp_path / "wl"
    f.write_bytes(
        "hello\tO\nworld\tCOMMA\n\tPERIOD\n\u00e2\u2122?gimme\tO\nsome\tO\n--\tPERIOD\nthere\tQUESTION\n".encode()
    )
    data = read_word_labels(f)
    assert data.words == ["hello", "world", "gimme", "some", "there"]
    assert names(data.labels) == ["O", "PERIOD", "O", "PERIOD", "QUESTION"]
    assert data.folded == 2
    f.write_bytes(b"caf\xe9\tO\n")  # not UTF-8: read as Windows-1252, as punctuate reads it
    assert read_word_labels(f).words == ["caf\u00e9"]


def test_reader_errors_name_the_line(tmp_path):
    f = tmp_path / "bad"
    f.write_text("hello\tO\nworld COMMA\n")
    with pytest.raises(InputError, match=r"bad:2: expected 'word<TAB>LABEL'"):
        read_word_labels(f)
    f.write_text("hello\tEXCL\n")
    with pytest.raises(InputError, match=r"bad:1: unknown label 'EXCL'"):
        read_word_labels(f)
    with pytest.raises(InputError, match="no such file"):
        read_word_labels(tmp_path / "missing")


def test_write_read_round_trip(tmp_path):
    data = read_word_labels(SHIPPED_TEST_DATA / "test2011asr")
    write_word_labels(tmp_path / "out", data)
    again = read_word_labels(tmp_path / "out")
    assert again.words == data.words and again.labels == data.labels


def test_shipped_test_sets_have_published_counts():
    ref = read_word_labels(SHIPPED_TEST_DATA / "test2011")
    assert len(ref) == 12626
    assert ref.label_counts() == {"O": 10943, "COMMA": 830, "PERIOD": 807, "QUESTION": 46}
    asr = read_word_labels(SHIPPED_TEST_DATA / "test2011asr")
    assert asr.label_counts() == {"O": 11180, "COMMA": 798, "PERIOD": 809, "QUESTION": 35}


def test_round_trip_labels_text_labels_on_dev2012_is_lossless():
    data = read_word_labels(need_file(IWSLT / "dev2012"))
    assert data.folded == 10 + 166 + 6  # empty words, free-standing "--", lone symbols
    # dev2012 holds a few contractions written as one word (mojibake "weâ€™re"), so
    # the round trip keeps the file's own tokenization.
    text = render(data.words, data.labels, join_clitics=False)
    words, labels = text_to_word_labels(text, split_contractions=False)
    assert words == data.words
    assert labels == data.labels
    # With the default (readable) rendering only those joined words differ.
    words2, labels2 = text_to_word_labels(render(data.words, data.labels))
    assert 0 < len(words2) - len(words) < 100


def test_convert_dev2010_counts():
    text = need_file(DATA_ROOT / "cased_spoken" / "ted_iwslt_dev2010_cased.txt").read_text()
    words, labels = text_to_word_labels(text)
    counts = {name: names(labels).count(name) for name in LABELS}
    # Reported in docs/data.md.
    assert len(words) == sum(counts.values())
    assert counts["PERIOD"] > 800 and counts["COMMA"] > 900 and counts["QUESTION"] > 40


def test_iter_ted_talks(tmp_path):
    f = tmp_path / "t.jsonl.gz"
    with gzip.open(f, "wt") as g:
        g.write(json.dumps({"id": "a", "text": "Hi there."}) + "\n\n")
        g.write(json.dumps({"id": "b", "text": "Why?"}) + "\n")
    assert list(iter_ted_talks(f)) == [("a", "Hi there."), ("b", "Why?")]
    with gzip.open(f, "wt") as g:
        g.write('{"nope": 1}\n')
    with pytest.raises(InputError, match="not a talk record"):
        list(iter_ted_talks(f))


def test_ted_collection_converts():
    path = need_file(DATA_ROOT / "ted_talks" / "ted.jsonl.gz")
    talk_id, text = next(iter_ted_talks(path))
    words, labels = text_to_word_labels(text)
    assert len(words) > 100
    assert PERIOD in labels and COMMA in labels


def test_case_classes_of_the_written_words():
    from streampunct.labels import CAPITALIZED, LOWER, MIXED, UPPER, case_class
    from streampunct.text.convert import text_to_word_labels, text_to_word_labels_cased

    words, labels, cases = text_to_word_labels_cased("Hello, NASA said I don't own an iPhone. What's up?")
    assert words == ["hello", "nasa", "said", "i", "do", "n't", "own", "an", "iphone", "what", "'s", "up"]
    assert cases == [CAPITALIZED, UPPER, LOWER, CAPITALIZED, LOWER, LOWER, LOWER, LOWER, MIXED,
                     CAPITALIZED, LOWER, LOWER]
    assert (words, labels) == text_to_word_labels("Hello, NASA said I don't own an iPhone. What's up?")
    assert [case_class(w) for w in ("", "42", "A", "McDonald", "U.S.")] == [LOWER, LOWER, CAPITALIZED, MIXED, UPPER]
