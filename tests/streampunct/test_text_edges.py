"""Apostrophes and quotes at a word's edges, and the labels of a word<TAB>LABEL file in any case.

A plural possessive's apostrophe (``students'``) is shown after the word; a quote's apostrophes
are dropped, over one word (``'yes'``) or several (``'no way'``); docs/formatting.md,
"Apostrophes and quotes"."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streampunct.api import Punctuator
from streampunct.client.stream_client import written_forms
from streampunct.core.wire import Final, PunctuatedWord
from streampunct.errors import InputError
from streampunct.labels import COMMA, ID_TO_MARK, PERIOD, QUESTION, O
from streampunct.text.normalize import (
    NO_AFFIX,
    affix_of,
    normalize_word,
    offline_tokens,
    render,
    sending_form,
    spelled_pieces,
    split_affixes,
    surface_affixes,
)
from tests.streampunct.conftest import TEST_WINDOW, FakeEngine

# -- 1. a plural possessive keeps its apostrophe ----------------------------------------


@pytest.mark.parametrize(("raw", "word", "affix"), [
    ("students'", "students", ("", "'")),
    ("Jones'", "jones", ("", "'")),
    ("JONES',", "jones", ("", "'")),  # the comma is a mark: the model decides it
    ("parents\u2019.", "parents", ("", "'")),  # a typographic apostrophe
    ("$students'", "students", ("$", "'")),
    ("students'\U0001f44d", "students", ("", "'\U0001f44d")),
    # no possessive: a quoted word, a quote that a word not ending with "s" closes, a clitic
    ("'yes'", "yes", NO_AFFIX),
    ("'bosses'", "bosses", NO_AFFIX),
    ("\u2018yes\u2019", "yes", NO_AFFIX),
    ("way'", "way", NO_AFFIX),
    ("students", "students", NO_AFFIX),
    ("it's", "it's", NO_AFFIX),
    ("'s", "'s", NO_AFFIX),
])
def test_a_plural_possessive_keeps_its_apostrophe_after_the_word(raw, word, affix):
    assert normalize_word(raw) == word  # the model's word: as it was trained, no apostrophe
    assert surface_affixes(raw) == affix and affix_of(raw, word) == affix
    assert sending_form(raw) == affix[0] + word + affix[1]


def test_render_and_offline_text_write_the_possessive_apostrophe():
    tokens, affixes = offline_tokens("the students' books are in the Jones' house".split())
    assert tokens == ["the", "students", "books", "are", "in", "the", "jones", "house"]
    labels = [O] * 7 + [PERIOD]
    assert render(tokens, labels, affixes=affixes) == "the students' books are in the jones' house."
    assert render(tokens, labels, capitalize=True, affixes=affixes) == "The students' books are in the jones' house."
    # a mark after the word goes after the apostrophe
    assert render(["students"], [COMMA], affixes=[("", "'")]) == "students',"


def test_a_client_finds_a_possessive_in_the_text():
    assert split_affixes("Students'") == ("", "Students", "'")
    assert spelled_pieces("Students'", ["students"]) == ["Students'"]
    final = Final(0, (PunctuatedWord("the", ""), PunctuatedWord("students", "")), "The students'")
    assert written_forms(final) == ["The", "students'"]


def test_the_api_writes_a_possessive_offline_and_in_a_stream(aligner):
    punctuator = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    text = punctuator.punctuate("the students' books")
    assert "students'" in text.lower()
    stream = punctuator.stream(right_context=0, max_delay_ms=600_000)
    finals = stream.push(["the", "students'", "books"], now=0.0) + stream.end(now=1.0)
    assert [w.w for f in finals for w in f.words] == ["the", "students", "books"]
    assert "students'" in " ".join(f.text for f in finals).lower()


# -- 2. a quote over several words loses both apostrophes --------------------------------


def test_a_quote_over_several_words_drops_its_opening_apostrophe_too():
    assert [normalize_word(w) for w in "she said 'no way' and then 'yes' again".split()] == [
        "she", "said", "no", "way", "and", "then", "yes", "again"]
    assert [normalize_word(w) for w in ["'no", "\u2018no", "'No,", "''no", "'the", "'Hello"]] == ["no"] * 4 + [
        "the", "hello"]
    tokens, affixes = offline_tokens("she said 'no way'".split())
    assert render(tokens, [O, COMMA, O, PERIOD], affixes=affixes) == "she said, no way."


def test_clitics_elisions_and_years_keep_their_leading_apostrophe():
    kept = ["'s", "'re", "'m", "'ll", "'ve", "'d", "'cause", "'Cause", "'em", "'til", "'bout", "'n", "'tis",
            "'90s", "'99", "\u2019cause", "'em,"]
    assert [normalize_word(w) for w in kept] == [w.lower().replace("\u2019", "'").rstrip(",") for w in kept]


WORDISH = st.text(st.sampled_from("as1,.'\u2019-$%+#\"!?é™👍\u0301 S"), max_size=8)


@given(WORDISH)
def test_apostrophes_keep_what_a_client_sends_read_as_the_word(raw):
    """As ``test_input_symbols``, with the ``s`` of possessives: the server reads a client's
    ``sending_form`` as the word, with the same affixes, and normalization is a fixed point."""
    word = normalize_word(raw)
    assert normalize_word(word) == word
    sent = sending_form(raw)
    assert normalize_word(sent) == word
    if sent:
        assert sending_form(sent) == sent
        if sent != word:
            assert surface_affixes(sent) == surface_affixes(raw)


@given(WORDISH, st.sampled_from([O, COMMA, PERIOD, QUESTION]))
def test_a_client_finds_a_word_with_an_apostrophe_in_the_text(raw, label):
    word = normalize_word(raw)
    if not word:
        return
    before, after = affix_of(raw, word)
    text = render([word], [label], affixes=[(before, after)])
    assert text.startswith(before + word + after)
    final = Final(0, (PunctuatedWord(word, ID_TO_MARK[label]),), text)
    assert written_forms(final) == [(before + word + after).rstrip(",.?")]


# -- 3. a word<TAB>LABEL file's labels in any case ---------------------------------------


@pytest.mark.parametrize("labels", [("comma", "period"), ("Comma", "Period"), ("COMMA", "PERIOD"),
                                    ("o", "question")])
def test_punctuate_reads_a_label_file_whatever_the_case_of_its_labels(tmp_path, labels):
    from streampunct.commands.punctuate import read_transcript_segments
    from streampunct.text.word_labels import read_word_labels

    f = tmp_path / "in.tsv"
    f.write_text(f"hello\t{labels[0]}\nworld\t{labels[1]}\n")
    assert [tokens for tokens, _ in read_transcript_segments(str(f))] == [["hello", "world"]]
    expected = [{"comma": COMMA, "o": O}[labels[0].lower()], {"period": PERIOD, "question": QUESTION}[labels[1].lower()]]
    assert read_word_labels(f).labels == expected


def test_a_label_file_with_an_unknown_label_is_still_an_error(tmp_path):
    from streampunct.commands.punctuate import read_transcript_segments

    f = tmp_path / "in.tsv"
    f.write_text("hello\tcomma\nthere\tcomma\nworld\texclaim\n")
    with pytest.raises(InputError, match="unknown label 'exclaim'"):
        read_transcript_segments(str(f))
    f.write_text("hello\tcomma\nworld\tper\u0131od\n")  # a dotless i: no label in any case
    with pytest.raises(InputError, match="unknown label"):
        read_transcript_segments(str(f))


def test_a_written_form_takes_a_possessive_apostrophe_only_where_it_ends_with_s(aligner):
    """"two dollars' worth" is "$2 worth" (the apostrophe was the spoken plural's), and a form that
    ends with an s keeps it ("the Joneses'")."""
    from streampunct.api import written_forms as api_written_forms
    from streampunct.text.written_form import _form_affix

    assert _form_affix("$2", ("", ""), ("", "'")) == ("", "")
    assert _form_affix("Joneses", ("", ""), ("", "'")) == ("", "'")
    written = api_written_forms(lexicon=[("two dollars", "$2"), ("the joneses", "the Joneses")])
    punctuator = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW, written=written)
    text = punctuator.punctuate("it cost two dollars' worth at the joneses' house")
    assert "$2" in text and "$2'" not in text  # (the fake engine's marks: "$2. Worth")
    assert "the Joneses' house" in text
