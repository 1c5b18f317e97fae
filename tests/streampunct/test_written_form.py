"""Written forms in the pure core: lexicon matching, phrases and marks, rendering, and the
rule that keeps a written form whole across finals (FinalTexts)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streampunct.labels import CAPITALIZED, COMMA, PERIOD, QUESTION, UPPER
from streampunct.labels import O as NO
from streampunct.text.normalize import render
from streampunct.text.written_form import (
    MAX_HELD_WORDS,
    MAX_LEXICON_PHRASE_WORDS,
    FinalTexts,
    Formatter,
    Lexicon,
    Phrase,
    WrittenForms,
    normalize_lexicon,
    parse_lexicon_tsv,
)
from tests.streampunct.written_fakes import NUMBERS, FakeNormalizer

LEXICON = Lexicon(normalize_lexicon([("new york", "New York"), ("new york city", "NYC"), ("nasa", "NASA"),
                                     ("i phone", "iPhone"), ("stream punct", "StreamPunct")]))


def itn(capitalize: bool = False, lexicon: Lexicon | None = None) -> Formatter:
    return Formatter(lexicon or Lexicon(), FakeNormalizer(), capitalize)


# -- lexicon --------------------------------------------------------------------------------


def test_lexicon_longest_match_first_and_left_to_right():
    words = "i flew from new york city to new york on an i phone".split()
    assert LEXICON.phrases(words) == [Phrase(3, 6, "NYC"), Phrase(7, 9, "New York"), Phrase(11, 13, "iPhone")]


def test_lexicon_layers_session_pairs_override_the_servers():
    server = Lexicon([("nasa", "NASA"), ("new york", "New York")])
    session = Lexicon([("nasa", "Nasa")], base=server)
    assert session.get(("nasa",)) == "Nasa" and session.get(("new", "york")) == "New York"
    assert server.get(("nasa",)) == "NASA" and len(session) == 2


def test_normalize_lexicon_normalizes_spoken_words_and_keeps_the_written_form():
    assert normalize_lexicon([["  New  YORK, ", " New York "], ["i-phone", "iPhone"]]) == (
        ("new york", "New York"), ("i-phone", "iPhone"))


@pytest.mark.parametrize(("pair", "message"), [
    (["...", "x"], "lexicon[0]: the spoken phrase '...' has no words"),
    (["a", "  "], "lexicon[0]: the written form must be printable text"),
    (["a", "x\x07y"], "lexicon[0]: the written form must be printable text"),
    (["a", "x\u202ey"], "lexicon[0]: the written form must be printable text"),  # a bidi control
    (["a", "\u200d"], "lexicon[0]: the written form '\\u200d' shows nothing"),  # a joiner alone
    (["a", "\u0301"], "lexicon[0]: the written form '\u0301' shows nothing"),  # a mark with no letter
    ([" ".join(["w"] * (MAX_LEXICON_PHRASE_WORDS + 1)), "x"],
     f"the spoken phrase has {MAX_LEXICON_PHRASE_WORDS + 1} words; the limit is {MAX_LEXICON_PHRASE_WORDS}"),
    (["a" * 257, "x"], "lexicon[0] is longer than 256 characters"),
    (["a"], "lexicon[0] must be a [spoken, written] pair of strings"),
    # normalizing would store them as another word, which every "c" or "net" would match
    (["c++", "C++"], "lexicon[0]: the spoken word 'c++' would match 'c'; spell it as it is said"),
    (["learn c#", "learn C#"], "lexicon[0]: the spoken word 'c#' would match 'c'"),
    ([".net", ".NET"], "lexicon[0]: the spoken word '.net' would match 'net'"),
    # a stream drops a word of symbols: "c ++" was stored as "c", and "$ five" as "five"
    (["c ++", "C++"], "lexicon[0]: the spoken word '++' is only symbols, which a stream drops; spell it as it is"),
    (["$ five", "$5"], "lexicon[0]: the spoken word '$' is only symbols"),
    (["\U0001f355 pizza", "x"], "lexicon[0]: the spoken word '\U0001f355' is only symbols"),
    (["c \u0301", "C++"], "lexicon[0]: the spoken word '\u0301' shows no letter, which a stream drops"),
])
def test_normalize_lexicon_refuses_bad_pairs(pair, message):
    with pytest.raises(ValueError, match=None) as e:
        normalize_lexicon([pair])
    assert message in str(e.value)


def test_normalize_lexicon_keeps_the_joiners_of_emoji_and_of_persian_and_indic_words():
    forms = [["woman technologist", "👩\u200d💻"], ["i want", "می\u200cخواهم"], ["ksha", "क्\u200dष"]]
    assert normalize_lexicon(forms) == tuple((spoken, written) for spoken, written in forms)


def test_normalize_lexicon_accepts_case_spaces_and_marks_around_words_and_refuses_a_phrase_twice():
    assert normalize_lexicon([['"New York,"', "New York"], ["Don\u2019t", "Do not"], ["a.m.", "a.m."]]) == (
        ("new york", "New York"), ("don't", "Do not"), ("a.m", "a.m."))
    with pytest.raises(ValueError, match=r"^lexicon\[1\]: the spoken phrase 'nasa' is already lexicon\[0\]$"):
        normalize_lexicon([["nasa", "NASA"], ["NASA,", "Nasa"]])
    with pytest.raises(ValueError, match=r"^terms.tsv:3: the spoken phrase 'nasa' is already on line 1$"):
        parse_lexicon_tsv("nasa\tNASA\n\nNasa\tNasa\n", source="terms.tsv")


def test_parse_lexicon_tsv_skips_comments_and_names_the_bad_line():
    text = "# spoken\twritten\n\nnasa\tNASA\nnew york\tNew York\n"
    assert parse_lexicon_tsv(text) == (("nasa", "NASA"), ("new york", "New York"))
    with pytest.raises(ValueError, match=r"terms.tsv:2: expected 'spoken<TAB>written', got 'no tab here'"):
        parse_lexicon_tsv("nasa\tNASA\nno tab here\n", source="terms.tsv")
    with pytest.raises(ValueError, match=r"terms.tsv:1: the spoken phrase '\?' has no words"):
        parse_lexicon_tsv("?\tx\n", source="terms.tsv")


# -- phrases and rendering ------------------------------------------------------------------


def test_phrases_never_span_a_sentence_mark_and_unlabeled_words_count_as_no_mark():
    f = itn()
    words = "it was twenty five dollars".split()
    assert f.phrases(words, [NO] * 5) == [Phrase(2, 5, "$25")]
    assert f.phrases(words, [NO, NO, PERIOD, NO, NO]) == [Phrase(2, 3, "20"), Phrase(3, 5, "$5")]
    assert f.phrases(words, [NO, NO, QUESTION, NO, NO]) == [Phrase(2, 3, "20"), Phrase(3, 5, "$5")]
    assert f.phrases(words, [NO, NO, NO, None, None]) == [Phrase(2, 5, "$25")]


def test_a_whole_written_form_hides_the_models_commas_inside_it():
    f = itn()
    words = "it was twenty five dollars".split()
    labels = [NO, NO, COMMA, NO, PERIOD]
    assert f.phrases(words, labels) == [Phrase(2, 5, "$25")]
    assert f.render(words, labels, sentence_start=False) == "it was $25."


class ListNormalizer:
    """Writes "ten twenty thirty" as three forms side by side (not whole), each word alone as one."""

    def phrases(self, words, *, first=0, until=None):
        digits = {"ten": "10", "twenty": "20", "thirty": "30"}
        if len(words) > 1 and all(w in digits for w in words):
            return [Phrase(0, len(words), " ".join(digits[w] for w in words), whole=False)]
        return [Phrase(i, i + 1, digits[w]) for i, w in enumerate(words) if w in digits]


def test_forms_side_by_side_keep_the_commas_between_them():
    f = Formatter(Lexicon(), ListNormalizer())
    words, labels = ["ten", "twenty", "thirty"], [COMMA, COMMA, PERIOD]
    assert f.render(words, labels, sentence_start=False) == "10, 20, 30."
    assert f.render(words, [NO, NO, PERIOD], sentence_start=False) == "10 20 30."


def test_a_lexicon_phrase_spans_no_comma():
    f = Formatter(LEXICON, FakeNormalizer())
    assert f.phrases(["new", "york"], [COMMA, NO]) == []
    assert f.phrases(["new", "york"], [NO, COMMA]) == [Phrase(0, 2, "New York")]


def test_lexicon_first_then_itn_between_its_matches():
    f = Formatter(Lexicon([("twenty five", "twenty-five")]), FakeNormalizer())
    assert f.phrases("twenty five and thirty two".split(), [NO] * 5) == [
        Phrase(0, 2, "twenty-five"), Phrase(3, 5, "32")]


def test_render_writes_phrases_verbatim_with_the_last_words_mark():
    f = itn(capitalize=True, lexicon=LEXICON)
    words = "i phone costs twenty five dollars in new york".split()
    labels = [NO, NO, NO, NO, NO, COMMA, NO, NO, PERIOD]
    # "iPhone" opens the sentence as written (no capital added); the comma follows "$25".
    assert f.render(words, labels, sentence_start=True) == "iPhone costs $25, in New York."


def test_render_learned_case_outside_phrases_and_no_double_period():
    f = Formatter(Lexicon([("p m", "p.m.")]), None, capitalize=True)
    words = ["see", "nasa", "at", "seven", "p", "m"]
    labels = [NO, NO, NO, NO, NO, PERIOD]
    cases = [CAPITALIZED, UPPER, None, None, None, None]
    assert f.render(words, labels, cases, sentence_start=False) == "See NASA at seven p.m."


def test_a_form_with_its_own_sentence_mark_takes_no_period_after_it():
    f = Formatter(Lexicon([("yahoo", "Yahoo!"), ("who", "Who?")]), None, capitalize=True)
    words = ["i", "used", "yahoo", "then", "yahoo", "and", "who", "is", "it", "who", "is", "it", "who"]
    labels = [NO, NO, PERIOD, NO, COMMA, NO, QUESTION, NO, NO, PERIOD, NO, NO, QUESTION]
    # a period after "!" or "?", and a question mark after "?", are the form's own; a comma stays
    assert f.render(words, labels, sentence_start=True) == "I used Yahoo! Then Yahoo!, and Who? Is it Who? Is it Who?"
    assert f.render(["yahoo"], [QUESTION], sentence_start=True) == "Yahoo!?"


def test_without_lexicon_or_itn_render_is_plain_render():
    f = Formatter(Lexicon(), None, capitalize=True)
    words, labels = ["hello", "i", "do", "n't", "know"], [COMMA, NO, NO, NO, QUESTION]
    assert not f.active
    assert f.render(words, labels, sentence_start=True) == render(words, labels, capitalize=True)


# -- across finals ---------------------------------------------------------------------------


def test_phrase_inside_one_final():
    texts = FinalTexts(itn())
    text = texts.final("it costs twenty five dollars".split(), [NO] * 4 + [COMMA], [], sentence_start=True,
                       context=["we", "said"])
    assert (text, texts.held) == ("it costs $25,", 0)


def test_phrase_across_two_finals_goes_whole_into_the_final_of_its_last_word():
    texts = FinalTexts(itn())
    first = texts.final(["it", "costs", "twenty"], [NO] * 3, [], sentence_start=True,
                        context=["five", "dollars", "today"])
    assert (first, texts.held) == ("it costs", 1)  # "twenty" is held: the phrase goes on
    second = texts.final(["five", "dollars", "today"], [NO, NO, PERIOD], [], sentence_start=False,
                         context=["and"])
    assert (second, texts.held) == ("$25 today.", 0)


def test_phrase_across_three_finals():
    texts = FinalTexts(itn())
    out = [texts.final(["costs", "two"], [NO, NO], [], sentence_start=True, context=["hundred"]),
           texts.final(["hundred"], [NO], [], sentence_start=False, context=["five", "dollars"]),
           texts.final(["five", "dollars"], [NO, PERIOD], [], sentence_start=False, context=[])]
    assert out == ["costs", "", "$205."]


def test_phrase_at_the_end_of_known_words_is_written_at_once():
    # No word after it has arrived (a flush, the end, or a delay deadline): nothing is held,
    # so a phrase that goes on in words arriving later is written in two parts.
    texts = FinalTexts(itn())
    assert texts.final(["it", "costs", "twenty"], [NO, NO, NO], [], sentence_start=True, context=[]) == "it costs 20"
    assert texts.held == 0


class ClockNormalizer:
    """Reads "seven forty five a m" as 7:45 a.m.; without the "m", "seven forty five a" is read
    but left spoken (a phrase with text "", as the grammars' letter serials are)."""

    def phrases(self, words, *, first=0, until=None):
        spoken = "seven forty five a".split()
        for i in range(len(words) - 3):
            if words[i:i + 4] == spoken:
                return [Phrase(i, i + 5, "7:45 a.m.")] if words[i + 4:i + 5] == ["m"] else [Phrase(i, i + 4, "")]
        return []


def test_a_phrase_left_spoken_holds_its_words_and_is_written_as_spoken():
    texts = FinalTexts(Formatter(Lexicon(), ClockNormalizer(), capitalize=True))
    # held while a later word may make it a written form
    assert texts.final(["at", "seven"], [NO, NO], [None, CAPITALIZED], sentence_start=True,
                       context=["forty", "five", "a"]) == "At"
    assert texts.held == 1
    assert texts.final(["forty", "five", "a", "m"], [NO] * 3 + [PERIOD], [], sentence_start=False,
                       context=[]) == "7:45 a.m."
    # never completed: its words as spoken, with their marks, case and sentence capital
    texts = FinalTexts(Formatter(Lexicon(), ClockNormalizer(), capitalize=True))
    assert texts.final(["seven", "forty", "five", "a"], [NO, NO, NO, COMMA], [CAPITALIZED, None, None, UPPER],
                       sentence_start=True, context=["b"]) == "Seven forty five A,"
    assert texts.partial(["seven", "forty", "five", "a"], [NO] * 4, [], sentence_start=True) == "Seven forty five a"


class YearNormalizer:
    """Writes "two thousand and twelve" as a year after "in", as a count anywhere else."""

    def phrases(self, words, *, first=0, until=None):
        out = []
        for i in range(len(words) - 3):
            if words[i:i + 4] == ["two", "thousand", "and", "twelve"]:
                out.append(Phrase(i, i + 4, "2012" if i and words[i - 1] == "in" else "2,012"))
        return out


def test_words_already_written_are_the_next_phrases_left_context():
    texts = FinalTexts(Formatter(Lexicon(), YearNormalizer()))
    assert texts.final(["she", "retired", "in"], [NO] * 3, [], sentence_start=True, context=[]) == "she retired in"
    assert texts.partial(["two", "thousand", "and", "twelve"], [NO, NO, NO, PERIOD], [],
                         sentence_start=False) == "2012."  # the partial as the final will be
    assert texts.final(["two", "thousand", "and", "twelve"], [NO, NO, NO, PERIOD], [], sentence_start=False,
                       context=[]) == "2012."
    # a sentence mark ends the context: no cue across it
    texts = FinalTexts(Formatter(Lexicon(), YearNormalizer()))
    texts.final(["we", "stayed", "in"], [NO, NO, PERIOD], [], sentence_start=True, context=[])
    assert texts.final(["two", "thousand", "and", "twelve"], [NO] * 3 + [PERIOD], [], sentence_start=True,
                       context=[]) == "2,012."


def test_words_that_go_on_with_a_written_form_but_not_as_its_rest_are_written_as_spoken():
    # "twenty" went out alone (a flush); "five dollars" goes on with it ("$25"), so read alone
    # it would move the "$" onto the second part ("20 $5"): it is written as spoken, never as
    # a phrase that rewrites "20"; the phrases after it are written.
    texts = FinalTexts(itn())
    assert texts.final(["it", "costs", "twenty"], [NO] * 3, [], sentence_start=True, context=[]) == "it costs 20"
    assert texts.final(["five", "dollars", "and", "ten", "dollars"], [NO] * 4 + [PERIOD], [],
                       sentence_start=False, context=[]) == "five dollars and $10."


def test_number_words_already_written_are_not_searched_again():
    """A stream's finals pass the last written words as left context; the grammars are asked
    only about stretches of words not yet written (each number word searched once it is written
    would cost a grammar search per final: 44% of the searches of a TED stream)."""

    class Recording(FakeNormalizer):
        def phrases(self, words, *, first=0, until=None):
            seeds = [w for w in words[first:] if w in ("twenty", "five")]
            self.asked.append((tuple(words), first, tuple(seeds)))
            return super().phrases(words) if seeds else []

    normalizer = Recording()
    normalizer.asked = []
    texts = FinalTexts(Formatter(Lexicon(), normalizer))
    words = "it costs twenty dollars and we paid".split()
    finals, asked = [], []
    for k, w in enumerate(words):
        finals.append(texts.final([w], [NO], [], sentence_start=k == 0, context=words[k + 1:k + 3]))
        asked.append(normalizer.asked[-1])
    # "twenty" held, then "$20" before "and" (which may go on with it: "and fifty cents")
    assert [f for f in finals if f] == ["it", "costs", "$20 and", "we", "paid"]
    # once the words after "and" show that nothing goes on, "$20 and" goes out; then the finals
    # pass it as left context, searched by nobody
    assert [len(seeds) for _, _, seeds in asked] == [1, 1, 1, 1, 1, 0, 0]
    assert asked[4] == (("it", "costs", "twenty", "dollars", "and", "we", "paid"), 2, ("twenty",))
    assert normalizer.asked[-2] == (("twenty", "dollars", "and", "we", "paid"), 3, ())


def test_held_words_open_the_partial_and_the_partial_writes_its_phrases():
    texts = FinalTexts(itn(capitalize=True))
    texts.final(["it", "costs", "twenty"], [NO] * 3, [], sentence_start=True, context=["five", "dollars"])
    assert texts.partial(["five", "dollars"], [NO, PERIOD], [], sentence_start=False) == "$25."
    # a partial that does not follow the last final word (words in flight between) starts at its own words
    assert texts.partial(["dollars"], [PERIOD], [], sentence_start=False, follows_finals=False) == "dollars."


def test_held_words_keep_their_sentence_start():
    texts = FinalTexts(itn(capitalize=True))
    assert texts.final(["end", "twenty"], [PERIOD, NO], [], sentence_start=True, context=["one"]) == "End."
    assert texts.final(["one", "was", "it"], [NO, NO, PERIOD], [], sentence_start=False, context=[]) == "21 was it."
    texts = FinalTexts(Formatter(LEXICON, None, capitalize=True))
    assert texts.final(["fine", "stream"], [PERIOD, NO], [], sentence_start=True, context=["punct"]) == "Fine."
    assert texts.final(["punct", "rocks"], [NO, PERIOD], [], sentence_start=False, context=[]) == "StreamPunct rocks."


def test_a_sentence_mark_ends_the_phrase_so_nothing_is_held():
    texts = FinalTexts(itn())
    assert texts.final(["twenty"], [PERIOD], [], sentence_start=True, context=["five", "dollars"]) == "20."
    assert texts.held == 0
    # a comma does not end a number: "twenty," is held for "$25"
    texts = FinalTexts(itn())
    assert texts.final(["twenty"], [COMMA], [], sentence_start=True, context=["five", "dollars"]) == ""
    assert texts.final(["five", "dollars"], [NO, PERIOD], [], sentence_start=False, context=[]) == "$25."


def test_lexicon_phrase_across_finals_and_the_longest_match_wins():
    texts = FinalTexts(Formatter(LEXICON, None))
    assert texts.final(["to", "new"], [NO, NO], [], sentence_start=True, context=["york", "city"]) == "to"
    assert texts.final(["york", "city"], [NO, PERIOD], [], sentence_start=False, context=[]) == "NYC."


def test_a_run_longer_than_the_hold_limit_is_written_as_it_is():
    texts = FinalTexts(itn())
    run = ["twenty"] * (MAX_HELD_WORDS + 1)
    text = texts.final(run, [NO] * len(run), [], sentence_start=True, context=["one"])
    assert texts.held == 0 and text == str(20 * len(run))


def _lowercase_lexicon_formatter() -> Formatter:
    """A lexicon writing phrases in capitals: lowercased, the text is the plain text again."""
    pairs = [("a b", "A B"), ("b c d", "B C D"), ("d", "D"), ("c a", "C A")]
    return Formatter(Lexicon(pairs), None)


@settings(max_examples=300, deadline=None)
@given(
    words=st.lists(st.sampled_from("a b c d e".split()), min_size=1, max_size=30),
    marks=st.lists(st.sampled_from([NO, NO, NO, COMMA, PERIOD]), min_size=30, max_size=30),
    cuts=st.lists(st.integers(1, 6), min_size=30, max_size=30),
    seen=st.lists(st.integers(0, 6), min_size=30, max_size=30),
)
def test_finals_write_every_word_once_in_order_whatever_the_context(words, marks, cuts, seen):
    """Finals of any sizes, each with any part of the words after it as context: the
    concatenated texts hold every word once, in order, with its mark."""
    formatter = _lowercase_lexicon_formatter()
    texts, out, i, k = FinalTexts(formatter), [], 0, 0
    labels = marks[: len(words)]
    while i < len(words):
        j = min(len(words), i + cuts[k])
        context = words[j : j + seen[k]]
        out.append(texts.final(words[i:j], labels[i:j], [], sentence_start=False, context=context))
        i, k = j, k + 1
    out.append(texts.final([], [], [], sentence_start=False, context=[])) if texts.held else None
    assert texts.held == 0
    joined = " ".join(t for t in out if t)
    assert joined.lower() == render(words, labels, sentence_start=False).lower()


@settings(max_examples=300, deadline=None)
@given(
    words=st.lists(st.sampled_from("twenty five one hundred dollars it costs".split()), min_size=1, max_size=25),
    cuts=st.lists(st.integers(1, 5), min_size=25, max_size=25),
)
def test_with_the_whole_rest_as_context_finals_write_what_one_pass_writes(words, cuts):
    """When every final sees the rest of the stream, its written forms are those of the whole
    text written at once: no phrase is cut by a final."""
    formatter = itn()
    labels = [NO] * (len(words) - 1) + [PERIOD]
    texts, out, i, k = FinalTexts(formatter), [], 0, 0
    while i < len(words):
        j = min(len(words), i + cuts[k])
        out.append(texts.final(words[i:j], labels[i:j], [], sentence_start=False, context=words[j:]))
        i, k = j, k + 1
    assert " ".join(t for t in out if t) == formatter.render(words, labels, sentence_start=False)


def test_written_forms_have_itn_with_a_normalizer_only():
    assert not WrittenForms().itn_available
    assert WrittenForms(normalizer=FakeNormalizer()).itn_available
    assert not WrittenForms().formatter(itn=False, lexicon=(), capitalize=True).active
    f = WrittenForms(Lexicon([("nasa", "NASA")])).formatter(itn=False, lexicon=[("esa", "ESA")], capitalize=False)
    assert f.lexicon.get(("nasa",)) == "NASA" and f.lexicon.get(("esa",)) == "ESA"


class TimeNormalizer:
    """The grammars' reading of a spoken time, as NeMo's: "three thirty" -> "3:30", with "p m"
    -> "3:30 p.m.", and "three thirty p" read but left spoken (unfinished)."""

    FORMS = {("three", "thirty", "p", "m"): "3:30 p.m.", ("three", "thirty"): "3:30",
             ("three", "thirty", "p"): ""}

    def phrases(self, words, *, first=0, until=None):
        for i in range(len(words)):
            for spoken, text in sorted(self.FORMS.items(), key=lambda f: -len(f[0])):
                if tuple(words[i:i + len(spoken)]) == spoken:
                    return [Phrase(i, i + len(spoken), text)]
        return []


def time_texts() -> FinalTexts:
    return FinalTexts(Formatter(Lexicon(), TimeNormalizer(), capitalize=True))


def test_a_form_the_next_words_go_on_with_takes_the_rest_of_it():
    """ "3:30" went out at a pause; "p m" then writes "p.m.", so that the texts read as offline."""
    texts = time_texts()
    assert texts.final("we met at three thirty".split(), [NO] * 5, [], sentence_start=True, context=[],
                       paused=True) == "We met at 3:30"
    assert texts.final(["p", "m", "i", "left"], [NO, PERIOD, NO, PERIOD], [UPPER, UPPER, None, None],
                       sentence_start=False, context=[]) == "p.m. I left."


def test_an_unfinished_form_is_held_at_a_pause_and_not_at_a_flush():
    texts = time_texts()
    assert texts.final("we met at three thirty p".split(), [NO] * 6, [], sentence_start=True, context=[],
                       paused=True) == "We met at"
    assert texts.held == 3
    assert texts.final(["m", "i", "left"], [PERIOD, NO, PERIOD], [], sentence_start=False,
                       context=[]) == "3:30 p.m. I left."
    flushed = time_texts()  # a flush or the end (not paused): nothing is held
    assert flushed.final("we met at three thirty p".split(), [NO] * 6, [], sentence_start=True,
                         context=[]) == "We met at three thirty p"
    assert flushed.held == 0


class NumberWordsNormalizer(FakeNormalizer):
    """:class:`FakeNormalizer` that names its number words, as the ITN grammars do."""

    number_words = frozenset([*NUMBERS, "hundred"])


def test_a_number_at_a_pause_is_held_while_later_words_may_go_on_with_it():
    # "twenty" decided at a delay deadline (paused): "five dollars" may still follow
    texts = FinalTexts(Formatter(Lexicon(), NumberWordsNormalizer()))
    assert texts.final(["it", "costs", "twenty"], [NO] * 3, [], sentence_start=True, context=[],
                       paused=True) == "it costs"
    assert texts.final(["five", "dollars"], [NO, PERIOD], [], sentence_start=False, context=[]) == "$25."
    # before "and" in the right context, and with "and" at the final's end
    texts = FinalTexts(Formatter(Lexicon(), NumberWordsNormalizer()))
    assert texts.final(["i", "paid", "two", "hundred"], [NO] * 4, [], sentence_start=True,
                       context=["and"]) == "i paid"
    assert texts.final(["and"], [NO], [], sentence_start=False, context=[], paused=True) == ""
    assert texts.held == 3
    assert texts.final(["then"], [PERIOD], [], sentence_start=False, context=[]) == "200 and then."
    # a marked number, a flush and a number the context does not go on with are not held
    texts = FinalTexts(Formatter(Lexicon(), NumberWordsNormalizer()))
    assert texts.final(["it", "is", "twenty"], [NO, NO, PERIOD], [], sentence_start=True, context=[],
                       paused=True) == "it is 20."
    assert texts.final(["i", "am", "twenty"], [NO] * 3, [], sentence_start=True, context=[]) == "i am 20"
    texts = FinalTexts(Formatter(Lexicon(), NumberWordsNormalizer()))
    assert texts.final(["twenty"], [NO], [], sentence_start=True, context=["people"]) == "20"


def test_a_lexicon_phrase_is_held_at_a_pause_so_right_context_0_does_not_cut_it():
    # right_context 0, one word a message: each final is decided with no word after it
    texts = FinalTexts(Formatter(Lexicon([("i phone", "iPhone")]), None, capitalize=True))
    said = [texts.final([w], [label], [], sentence_start=w == "an", context=[], paused=True)
            for w, label in (("an", NO), ("i", NO), ("phone", PERIOD))]
    assert said == ["An", "", "iPhone."]
