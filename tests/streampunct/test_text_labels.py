import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streampunct.labels import (
    CAPITALIZED,
    COMMA,
    LABELS,
    LOWER,
    MIXED,
    PERIOD,
    QUESTION,
    UPPER,
    O,
    label_id,
    strongest,
)
from streampunct.text.normalize import (
    MAX_WORD_CHARS,
    apply_case,
    drop_invisible,
    normalize_word,
    normalize_words,
    render,
    spelled_pieces,
)


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


#: One character of each class that normalization drops, inside a word.
INVISIBLE = {
    "control (Cc): NUL": "\x00",
    "control (Cc): escape": "\x1b",
    "control (Cc): DEL": "\x7f",
    "control (Cc): C1 NEL": "\x85",
    "bidi: LRM": "\u200e",
    "bidi: RLM": "\u200f",
    "bidi: LRE": "\u202a",
    "bidi: RLO": "\u202e",
    "bidi: LRI": "\u2066",
    "bidi: PDI": "\u2069",
    "bidi: Arabic letter mark": "\u061c",
    "zero-width space": "\u200b",
    "zero-width non-joiner between Latin letters": "\u200c",
    "zero-width joiner between Latin letters": "\u200d",
    "word joiner": "\u2060",
    "byte order mark / ZWNBSP": "\ufeff",
    "soft hyphen": "\u00ad",
    "tag character": "\U000e0041",
    "Hangul filler": "\u3164",
    "halfwidth Hangul filler": "\uffa0",
    "lone surrogate": "\ud83d",
}


@pytest.mark.parametrize("char", INVISIBLE.values(), ids=INVISIBLE.keys())
def test_invisible_characters_are_dropped_inside_and_at_the_edges(char):
    assert normalize_word(f"ab{char}cd") == "abcd"
    assert normalize_word(f"{char}Word{char}") == "word"
    assert normalize_word(char) == ""
    assert normalize_word(f"{char}don't{char}") == "don't"


@pytest.mark.parametrize("marks", ["\u0301", "\ufe0f", "\u20e3", "\u034f", "\U000e0100", "\u0488", "\u0301" * 3])
def test_a_word_of_marks_alone_is_empty(marks):
    # it used to take an index and a mark: "So, \u0301, OK." in a caption
    assert normalize_word(marks) == normalize_word(f"({marks}),") == ""
    if unicodedata.category(marks[0]) != "Me":  # a letter in an enclosing mark is a symbol (a keycap)
        assert normalize_word(f"e{marks}") != ""  # on a letter they stay (NFKC composes what it can)


def test_a_right_to_left_override_cannot_reverse_a_word():
    assert normalize_word("price\u202e0001\u202c") == "price0001"
    assert normalize_word("\u2067evil\u2069") == "evil"


@pytest.mark.parametrize("word", [
    "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",  # Persian: ZWNJ between Arabic letters
    "\u0915\u094d\u200d\u0937",  # Devanagari: ZWJ after a virama
    "\u0915\u094d\u200c\u0937",  # and ZWNJ after a virama
    "na\u00efve", "caf\u00e9", "stra\u00dfe", "\u0436\u0438\u0437\u043d\u044c", "\u6771\u4eac",
])
def test_what_real_words_need_stays(word):
    assert normalize_word(word) == word


def test_joiners_outside_their_scripts_and_in_emoji_are_dropped():
    assert normalize_word("\U0001f468\u200d\U0001f469\u200d\U0001f467") == ""  # an emoji family
    assert normalize_word("a\U0001f468\u200d\U0001f469b") == "a\U0001f468\U0001f469b"
    assert normalize_word("\u0645\u200c") == "\u0645"  # a joiner at the edge
    assert normalize_word("\u0645\u200dx") == "\u0645x"  # ZWJ needs a virama before it


def test_dropping_happens_before_composition_and_case_folding():
    assert normalize_word("e\u200b\u0301") == "\u00e9"  # the accent composes with the letter
    assert normalize_word("HE\u200bLLO") == "hello"
    assert drop_invisible("plain") == "plain" and drop_invisible("na\u00efve") == "na\u00efve"


_JOINERS = "\u200c\u200d"


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=()), max_size=40)
       | st.lists(st.sampled_from(["a", "\u0645", "\u094d", "\u0915", *INVISIBLE.values(), *_JOINERS, " "]),
                  max_size=30).map("".join))
def test_normalized_words_hold_no_invisible_character(raw):
    out = normalize_word(raw)
    for k, ch in enumerate(out):
        assert unicodedata.category(ch) not in ("Cc", "Cs"), (raw, out)
        assert unicodedata.category(ch) != "Cf" or ch in _JOINERS, (raw, out)
        assert ch not in "\u115f\u1160\u3164\uffa0", (raw, out)
        if ch in _JOINERS:  # only after a virama or an Arabic letter
            before = out[k - 1]
            assert unicodedata.combining(before) == 9 or unicodedata.name(before).startswith("ARABIC"), (raw, out)


def test_render_marks_and_capitalization():
    words = ["i", "do", "n't", "know", "what", "i", "'m", "doing", "really"]
    labels = [O, O, O, COMMA, O, O, O, QUESTION, PERIOD]
    assert render(words, labels) == "i don't know, what i'm doing? really."
    assert render(words, labels, capitalize=True) == "I don't know, what I'm doing? Really."
    assert render(["and", "so"], [O, PERIOD], capitalize=True, sentence_start=False) == "and so."


def test_capitals_keep_the_word_and_its_length():
    # a sentence's first letter after a leading apostrophe; title case for a digraph letter
    assert render(["'cause", "it", "works"], [O, O, PERIOD], capitalize=True) == "'Cause it works."
    assert render(["ǆungla", "ok"], [O, PERIOD], capitalize=True) == "ǅungla ok."
    # a first letter whose capital is two letters stays as it is
    assert render(["ßa"], [PERIOD], capitalize=True) == "ßa."
    assert apply_case("'til", CAPITALIZED) == "'Til" and apply_case("straße", UPPER) == "STRASSE"


def test_a_quoted_word_loses_its_opening_quote_and_a_clitic_keeps_its_apostrophe():
    assert [normalize_word(w) for w in ["'yes'", "'yes',", "\u2018quoted\u2019", "''yes'", "'yes,'", "'50%'"]] == [
        "yes", "yes", "quoted", "yes", "yes", "50"]
    assert [normalize_word(w) for w in ["'s", "'cause", "'90s", "'em,", "don't"]] == [
        "'s", "'cause", "'90s", "'em", "don't"]


def test_initialisms_and_possessives_keep_their_conventional_case():
    # a possessive after a word in capitals stays lowercase
    assert apply_case("ibm's", UPPER) == "IBM's" and apply_case("nasa", UPPER) == "NASA"
    # an initialism spelled with dots is written in capitals whatever non-lower class it has
    assert apply_case("u.s.'s", CAPITALIZED) == "U.S.'s" and apply_case("u.n", MIXED) == "U.N"
    assert normalize_word("U.N.") == "u.n"  # its last dot is an affix, written after it: "U.N."
    shown = render(["the", "u.n"], [O, PERIOD], capitalize=True, cases=[LOWER, CAPITALIZED],
                   affixes=[("", ""), ("", ".")])
    assert shown == "The U.N."
    # a possessive after a letter whose capital is longer still matches its word
    assert apply_case("straße's", UPPER) == "STRASSE's" and spelled_pieces("STRASSE's", ["straße's"]) == ["STRASSE's"]
    assert apply_case("u.s.'s", UPPER) == "U.S.'s" and apply_case("u.s.'s", LOWER) == "u.s.'s"
    # a word with one dotted letter is not an initialism; the rule keeps the word's length
    assert apply_case("a.", CAPITALIZED) == "A." and apply_case("'s", UPPER) == "'S"
    words = ["the", "u.k.'s", "envoy"]
    shown = render(words, [O, O, PERIOD], capitalize=True, cases=[LOWER, CAPITALIZED, LOWER])
    assert shown == "The U.K.'s envoy."
    assert spelled_pieces("U.K.'s", words, 1) == ["U.K.'s"]


def test_render_rejects_length_mismatch():
    with pytest.raises(ValueError, match="2 words but 1 labels"):
        render(["a", "b"], [O])


@given(st.lists(st.sampled_from(["a", "b", "-", "'", "\u200c", "\u094d", "\u0915", " ", ".", "\u00e9", "ß", "İ"]),
                min_size=90, max_size=130).map("".join)
       | st.text(alphabet=st.characters(codec="utf-8"), max_size=140))
def test_a_normalized_word_normalizes_to_itself(raw):
    """Clients send words normalized and the server normalizes them again: both must count the
    same words (a cut at 100 characters once left an inner '-' or a joiner at the end)."""
    once = normalize_word(raw)
    assert normalize_word(once) == once and len(once) <= MAX_WORD_CHARS
