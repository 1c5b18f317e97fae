import pytest

from streampunct.labels import COMMA, LABELS, PERIOD, QUESTION, O, label_id, strongest
from streampunct.text import MAX_WORD_CHARS, normalize_word, normalize_words, render


def test_label_ids_in_fixed_order():
    assert LABELS == ("O", "COMMA", "PERIOD", "QUESTION")
    assert [label_id(n) for n in LABELS] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="expected one of O, COMMA"):
        label_id("EXCLAMATION")


def test_strongest_mark_wins():
    assert strongest(COMMA, PERIOD) == PERIOD
    assert strongest(QUESTION, PERIOD) == QUESTION
    assert strongest(O, COMMA) == COMMA


@pytest.mark.parametrize(
    "raw, norm",
    [
        ("Hello,", "hello"),
        ("don't", "don't"),
        ("well-being!", "well-being"),
        ("'s", "'s"),
        ("n't", "n't"),
        ('"quoted"', "quoted"),
        ("--", ""),
        ("?!", ""),
        ("U.S.", "u.s"),
        ("it\u2019s", "it's"),
        ("\u00e2\u2122?\u00e2\u2122?gimme", "gimme"),
        ("it\u00e2\u20ac\u2122s", "it's"),
        ("10,000", "10,000"),
        ("  Spaced  ", "spaced"),
    ],
)
def test_normalize_word(raw, norm):
    assert normalize_word(raw) == norm


def test_normalize_words_drops_empty_and_cuts_huge_words():
    assert normalize_words(["Hi,", "--", "there."]) == ["hi", "there"]
    assert len(normalize_word("a" * 100_000)) == MAX_WORD_CHARS


def test_render_marks_and_capitalization():
    words = ["i", "do", "n't", "know", "what", "i", "'m", "doing", "really"]
    labels = [O, O, O, COMMA, O, O, O, QUESTION, PERIOD]
    assert render(words, labels) == "i don't know, what i'm doing? really."
    assert render(words, labels, capitalize=True) == "I don't know, what I'm doing? Really."
    assert render(["and", "so"], [O, PERIOD], capitalize=True, sentence_start=False) == "and so."


def test_render_rejects_length_mismatch():
    with pytest.raises(ValueError, match="2 words but 1 labels"):
        render(["a", "b"], [O])
