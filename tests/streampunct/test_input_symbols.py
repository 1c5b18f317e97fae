"""The symbols around an input word (``$1,000``, ``50%``, ``c++``, ``u.s.``): the model reads the
normalized word, ``words`` keep it, and ``text`` writes the symbols back around it, in the
stream and offline (docs/protocol.md, "Notes on this implementation")."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streampunct.client.stream_client import written_forms
from streampunct.client.subtitles import FinalPieces, TimedWord
from streampunct.core.wire import (
    EndRequest,
    Final,
    FlushRequest,
    HypothesisMessage,
    Partial,
    PunctuatedWord,
    SessionOptions,
    Word,
    WordsMessage,
)
from streampunct.labels import COMMA, ID_TO_MARK, PERIOD, QUESTION, O
from streampunct.model import DEFAULT_MODEL_DIR
from streampunct.text.normalize import (
    NO_AFFIX,
    affix_of,
    normalize_word,
    offline_tokens,
    render,
    render_with_symbols,
    sending_form,
    surface_affixes,
)
from streampunct.text.written_form import Formatter, Lexicon, normalize_lexicon
from tests.streampunct.test_session_protocol import Driver as ProtocolDriver
from tests.streampunct.test_session_written import Driver as WrittenDriver
from tests.streampunct.test_session_written import send_in_chunks
from tests.streampunct.test_symbol_words import Recorder
from tests.streampunct.written_fakes import FakeNormalizer

AFFIX_CASES = [
    ("$1,000", "1,000", ("$", "")),
    ("50%", "50", ("", "%")),
    ("50%,", "50", ("", "%")),  # the mark goes, the symbol stays
    ("c++", "c", ("", "++")),
    ("C#", "c", ("", "#")),
    ("#metoo", "metoo", ("#", "")),
    ("@john", "john", ("@", "")),
    ("great👍", "great", ("", "👍")),
    ("brand™", "brand", ("", "™")),  # as typed, not NFKC's "tm"
    ('"$5,"', "5", ("$", "")),  # quotes and marks around the symbols go
    ("($1,000)", "1,000", ("$", "")),
    ("-5", "5", ("-", "")),  # a minus before a number
    ("-$5", "5", ("-$", "")),
    ("$.99", "99", ("$.", "")),  # and its decimal point
    ("-.5", "5", ("-.", "")),
    (".5%", "5", (".", "%")),
    ("coding👩\u200d💻", "coding", ("", "👩\u200d💻")),  # one emoji, its joiner kept
    ("５０％", "50", ("", "%")),  # a full-width symbol as NFKC writes it
    ("brand™,", "brand", ("", "™")),  # but not "TM"
    ("z" + "1️⃣" * 20, "z", ("", "1️⃣" * 10)),  # whole keycaps, at most 32 characters
    ("Ph.D.", "ph.d", ("", ".")),
    ("U.K.👍", "u.k", ("", ".👍")),
    ("www.example.com.", "www.example.com", NO_AFFIX),  # a sentence's period after a name
    ("u.s.", "u.s", ("", ".")),  # the final dot of letters joined by dots
    ("U.S.,", "u.s", ("", ".")),
    ("e.g.", "e.g", ("", ".")),
    ("hello,", "hello", NO_AFFIX),
    ("end.", "end", NO_AFFIX),  # a sentence's period is a mark, not a dot of the word
    ("3.5.", "3.5", NO_AFFIX),  # digits joined by dots are not letters
    ("-hello", "hello", NO_AFFIX),  # a dash before a letter is a mark
    ("it's", "it's", NO_AFFIX),
    ("$", "", NO_AFFIX),  # only symbols: no word (offline, a symbol word)
    ("👍", "", NO_AFFIX),
    ("...", "", NO_AFFIX),
]


@pytest.mark.parametrize(("raw", "normalized", "affixes"), AFFIX_CASES)
def test_the_symbols_around_a_word(raw, normalized, affixes):
    assert normalize_word(raw) == normalized
    assert surface_affixes(raw) == affixes
    assert sending_form(raw) == (affixes[0] + normalized + affixes[1] if normalized else "")


WORDISH = st.text(st.sampled_from("ab1,.'-$%+#@()\"!?é™👍💻％\u0301\ufe0f\u20e3\u200d ."), max_size=8)


@given(WORDISH)
def test_what_a_client_sends_reads_as_the_word_itself(raw):
    """The server reads a client's ``sending_form`` as it reads the word: the same normalized
    word (so both count indices alike) and the same symbols."""
    sent = sending_form(raw)
    assert normalize_word(sent) == normalize_word(raw)
    if sent:
        assert sending_form(sent) == sent
        if sent != normalize_word(raw):  # (not for odd marks at a word's edges: the word alone)
            assert surface_affixes(sent) == surface_affixes(raw)


@given(WORDISH, st.sampled_from([O, COMMA, PERIOD, QUESTION]))
def test_a_client_finds_the_word_in_the_text_the_server_writes(raw, label):
    word = normalize_word(raw)
    if not word:
        return
    before, after = affix_of(raw, word)  # as the server takes them
    text = render([word], [label], affixes=[(before, after)])
    assert text.startswith(before + word + after)
    final = Final(0, (PunctuatedWord(word, ID_TO_MARK[label]),), text)
    assert written_forms(final) == [(before + word + after).rstrip(",.?")]


def test_render_writes_the_symbols_around_the_word_and_its_mark_after_them():
    words = ["it", "costs", "1,000", "in", "the", "u.s", "c", "50"]
    affixes = [NO_AFFIX, NO_AFFIX, ("$", ""), NO_AFFIX, NO_AFFIX, ("", "."), ("", "++"), ("", "%")]
    labels = [O, O, COMMA, O, O, PERIOD, O, QUESTION]
    assert render(words, labels, capitalize=True, affixes=affixes) == "It costs $1,000, in the u.s. C++ 50%?"
    # a word written verbatim (a written form) keeps its case, and the symbols its caller gives
    assert render(["C"], [O], capitalize=True, affixes=[("", "++")], verbatim=[True]) == "C++"
    assert render(["iPhone"], [PERIOD], capitalize=True, affixes=[("#", "")], verbatim=[True]) == "#iPhone."
    # a clitic joins the word before it when that word has no mark, whatever its symbols
    assert render(["the", "u.s", "'s", "economy"], [O, O, O, PERIOD], capitalize=True,
                  affixes=[NO_AFFIX, ("", "."), NO_AFFIX, NO_AFFIX]) == "The u.s.'s economy."
    assert render(["u.s", "'s"], [PERIOD, O], affixes=[("", "."), NO_AFFIX]) == "u.s. 's"
    with pytest.raises(ValueError, match="1 words but 2 affixes"):
        render(["a"], [O], affixes=[NO_AFFIX, NO_AFFIX])


def _stream(driver, raw_words: list[str]) -> None:
    for w in raw_words:
        driver.send(WordsMessage((Word(w),)))
    driver.send(EndRequest())


def test_a_stream_writes_the_symbols_back_and_keeps_words_and_indices():
    from tests.streampunct.test_session_protocol import Driver

    driver = Driver(SessionOptions(right_context=1, max_delay_ms=60_000))
    raw = ["t1x1", "$t1x2", "t1x3%,", "👍", "t1x4++", "t1x5"]
    _stream(driver, raw)
    finals = driver.of(Final)
    words = [w for f in finals for w in f.words]
    # the symbol-only word takes no index; the others keep their normalized w
    assert [w.w for w in words] == ["t1x1", "t1x2", "t1x3", "t1x4", "t1x5"]
    assert [f.start for f in finals] == list(range(5))
    texts = [f.text for f in finals]
    marks = [w.p for w in words]
    # ... and the text shows it where it stood, before the next word (as offline text does)
    assert texts == [f"t1x1{marks[0]}", f"$t1x2{marks[1]}", f"t1x3%{marks[2]}", f"👍 t1x4++{marks[3]}",
                     f"t1x5{marks[4]}"]


def test_partials_show_the_symbols_of_words_and_of_the_hypothesis():
    from tests.streampunct.test_session_protocol import Driver

    driver = Driver(SessionOptions(right_context=3, max_delay_ms=60_000, partials=True))
    driver.send(WordsMessage((Word("$t1x1"), Word("t1x2"))))
    [partial] = driver.send(HypothesisMessage((Word("#t1x3"), Word("t1x4%"))))
    assert isinstance(partial, Partial)
    assert [w.w for w in partial.words] == ["t1x1", "t1x2"]
    assert [w.w for w in partial.hypothesis] == ["t1x3", "t1x4"]
    tokens = [t.rstrip(",.?") for t in partial.text.split()]
    assert tokens == ["$t1x1", "t1x2", "#t1x3", "t1x4%"]


def test_with_written_forms_the_symbols_stay_outside_phrases():
    driver = WrittenDriver(SessionOptions(right_context=1, max_delay_ms=60_000))
    driver.stream("we paid $100 in new york today")
    text = " ".join(f.text for f in driver.finals() if f.text)
    assert text == "we paid $100 in New York, today."
    assert [w.w for f in driver.finals() for w in f.words][2] == "100"


def test_a_lexicon_phrase_keeps_the_symbols_around_its_words():
    # "c++" with the lexicon's c -> C used to be written "C": the form replaced the symbols
    driver = WrittenDriver(SessionOptions(right_context=1, max_delay_ms=60_000))
    driver.stream("we met at #nasa++ in #new york% today")
    text = " ".join(f.text for f in driver.finals() if f.text)
    assert text == "we met at #NASA++ in #New York%, today."
    assert [w.w for f in driver.finals() for w in f.words][3:7] == ["nasa", "in", "new", "york"]
    # a form that already shows the symbol does not get it twice; inner words' symbols go
    formatter = Formatter(Lexicon(normalize_lexicon([("dollar sign", "$"), ("c sharp", "C#")])),
                          FakeNormalizer(), True)
    words, labels = ["a", "dollar", "sign", "c", "sharp"], [O, O, COMMA, O, PERIOD]
    affixes = [NO_AFFIX, ("$", ""), ("", "%"), ("@", "#"), ("", "#")]
    assert formatter.render(words, labels, affixes=affixes, sentence_start=True) == "A $%, @C#."
    # an abbreviation's dot belongs to the spoken form: "u.s." -> "United States", not "States."
    formatter = Formatter(Lexicon(normalize_lexicon([("u.s", "United States")])), FakeNormalizer(), True)
    tokens, affixes = offline_tokens("the u.s. economy".split())
    assert formatter.render(tokens, [O, O, PERIOD], affixes=affixes, sentence_start=True) == (
        "The United States economy.")


def test_a_client_matches_the_written_symbols_to_their_words():
    final = Final(3, (PunctuatedWord("1,000", ","), PunctuatedWord("c", ""), PunctuatedWord("u.s", ".")),
                  "$1,000, C++ U.S.")
    assert written_forms(final) == ["$1,000", "C++", "U.S"]
    pieces = FinalPieces()
    words = [TimedWord("1,000", COMMA, 0.0, 0.5), TimedWord("c", O, 0.5, 1.0), TimedWord("u.s", PERIOD, 1.0, 1.5)]
    got = pieces.add(words, final.text) + pieces.close()
    assert [(p.text, [w.w for w in p.words], p.written) for p in got] == [
        ("$1,000,", ["1,000"], False), ("C++", ["c"], False), ("U.S.", ["u.s"], False)]


def test_offline_the_symbols_are_written_back_and_the_model_reads_the_words():
    from streampunct.commands.punctuate import punctuate_lines

    tokens, affixes = offline_tokens("I paid $1,000 for C++ 👍 in the U.S.".split())
    assert tokens == ["i", "paid", "1,000", "for", "c", "👍", "in", "the", "u.s"]
    model = Recorder()
    assert punctuate_lines([tokens], model, capitalize=True, affixes=[affixes]) == [
        "I paid $1,000 for c++ 👍 in the u.s."]
    assert model.calls == [["i", "paid", "1,000", "for", "c", "in", "the", "u.s"]]
    with pytest.raises(ValueError, match="1 segments but 0 lists"):
        punctuate_lines([tokens], model, affixes=[])


def test_punctuate_command_keeps_the_symbols(tmp_path, capsys, monkeypatch):
    """``streampunct punctuate`` end to end, with the Recorder as the model."""
    from streampunct.cli import main
    from streampunct.core import decoder

    monkeypatch.setattr(decoder.OfflineDecoder, "from_model_dir", classmethod(lambda cls, *a, **k: _Closing()))
    source = tmp_path / "in.txt"
    source.write_text("it costs $5 or 50% more\nwe use c++\n", encoding="utf-8")
    assert main(["punctuate", str(source)]) == 0
    assert capsys.readouterr().out == "it costs $5 or 50% more.\nwe use c++.\n"


class _Closing(Recorder):
    def close(self) -> None:
        pass


@pytest.mark.skipif(not (DEFAULT_MODEL_DIR / "streampunct.json").is_file(), reason="needs the shipped model")
def test_the_shipped_model_through_the_python_api():
    from streampunct.api import Punctuator

    with Punctuator.load(DEFAULT_MODEL_DIR) as punctuator:
        text = punctuator.punctuate("we paid $1,000 for c++ books at 50% off")
        stream = punctuator.stream(right_context=2)
        finals = stream.push("we paid $1,000 for c++ books at 50% off".split()) + stream.end()
    assert "$1,000" in text and "++" in text and "50%" in text
    assert [w.w for f in finals for w in f.words][2:5] == ["1,000", "for", "c"]
    streamed = " ".join(f.text for f in finals)
    assert "$1,000" in streamed and "++" in streamed and "50%" in streamed


STREAM_SYMBOL_INPUT = ["t1x1", "t1x2", "t1x3", "t1x4", "&", "😀", "%", "+", "°", "t1x7", "$t1x5", "t1x6%"]


@settings(max_examples=80, deadline=None)
@example(raw=["&"] * 9, chunks=[1], right_context=1)  # a run past MAX_SYMBOL_RUN (found in CI)
@given(raw=st.lists(st.sampled_from(STREAM_SYMBOL_INPUT), min_size=1, max_size=20),
       chunks=st.lists(st.integers(1, 4), min_size=1, max_size=6), right_context=st.integers(1, 3))
def test_a_stream_shows_symbol_words_where_offline_text_does(raw, chunks, right_context):
    """Words made only of symbols take no index in a stream, but its ``text`` shows them where
    offline text does (:func:`render_with_symbols`: a unit after the word before it, with that
    word's mark after it; any other before the word after it), whatever the chunking, given
    the same labels. (A currency sign that ends a message is read as a unit: the stream cannot
    see whether a number follows; none here. A run of symbols shows its first MAX_SYMBOL_RUN:
    offline text of the same input with longer runs cut.)"""
    from streampunct.core.session_protocol import MAX_SYMBOL_RUN

    driver = ProtocolDriver(SessionOptions(right_context=right_context, max_delay_ms=60_000))
    send_in_chunks(driver, raw, chunks)
    finals = driver.of(Final)
    shown, run = [], 0
    for w in raw:
        run = 0 if normalize_word(w) else run + 1
        if run <= MAX_SYMBOL_RUN:
            shown.append(w)
    tokens, affixes = offline_tokens(shown)
    labels = [ID_TO_MARK.index(w.p) for f in finals for w in f.words]
    assert [w.w for f in finals for w in f.words] == [t for t in tokens if normalize_word(t)]

    def render_words(words, run_labels, cases, sentence_start, run_affixes):
        return render(words, run_labels, sentence_start=sentence_start, affixes=run_affixes)

    offline = render_with_symbols(tokens, labels, render_words, affixes=affixes)
    assert " ".join(f.text for f in finals if f.text) == offline


def test_a_run_of_symbol_words_shows_its_first_eight_and_holds_no_more():
    """Symbol words take no index and no backlog: a run of them between two words (or before a
    flush) shows its first MAX_SYMBOL_RUN, and units sent one a message after a word that is
    not final yet stop there too, so a client cannot grow the session without bound."""
    from streampunct.core.session_protocol import MAX_SYMBOL_RUN
    from streampunct.core.wire import FlushRequest

    driver = ProtocolDriver(SessionOptions(right_context=1, max_delay_ms=60_000))
    driver.send(WordsMessage((Word("t1x1"), *(Word("😀") for _ in range(20)), Word("t1x2"))))
    for _ in range(50):
        driver.send(WordsMessage((Word("😀"),) * 100))
    assert len(driver.protocol._pending_symbols) == MAX_SYMBOL_RUN
    driver.send(FlushRequest())
    tokens = [t.rstrip(",.?") for f in driver.of(Final) for t in f.text.split()]
    assert tokens == ["t1x1", *["😀"] * MAX_SYMBOL_RUN, "t1x2", *["😀"] * MAX_SYMBOL_RUN]
    units = ProtocolDriver(SessionOptions(right_context=3, max_delay_ms=60_000))
    units.send(WordsMessage((Word("t1x1"),)))
    for _ in range(30):
        units.send(WordsMessage((Word("%"),)))
    units.send(EndRequest())
    assert " ".join(f.text for f in units.of(Final)).rstrip(",.?") == "t1x1 " + " ".join(["%"] * MAX_SYMBOL_RUN)
    # units after a word, then other symbols before the next word: one run, of 8 in all
    mixed = ProtocolDriver(SessionOptions(right_context=3, max_delay_ms=60_000))
    mixed.send(WordsMessage((Word("t1x1"),)))
    for _ in range(MAX_SYMBOL_RUN - 2):
        mixed.send(WordsMessage((Word("%"),)))
    mixed.send(WordsMessage((*(Word("&") for _ in range(MAX_SYMBOL_RUN)), Word("t1x2"))))
    mixed.send(EndRequest())
    tokens = [t.rstrip(",.?") for f in mixed.of(Final) for t in f.text.split()]
    assert tokens == ["t1x1", *["%"] * (MAX_SYMBOL_RUN - 2), "&", "&", "t1x2"]


def test_a_refused_words_message_leaves_no_symbol_behind():
    """A words message refused whole (indices past MAX_START) takes nothing, its symbols too."""
    from streampunct.core.wire import MAX_START, Error, ResumeRequest

    driver = ProtocolDriver(SessionOptions(right_context=1, max_delay_ms=60_000))
    driver.send(ResumeRequest(MAX_START - 1))
    driver.send(WordsMessage((Word("t1x1"), Word("&"))))
    out = driver.send(WordsMessage((Word("#"), Word("t1x2"), Word("t1x3"))))
    assert [m.message.split(";")[0] for m in out if isinstance(m, Error)] == [
        f"words: this message would take word indices past {MAX_START}, the largest exact in JSON"]
    driver.send(EndRequest())
    assert [t.rstrip(",.?") for f in driver.of(Final) for t in f.text.split()] == ["t1x1", "&"]


def test_symbols_at_the_end_go_in_the_last_words_final_when_it_is_still_to_come():
    """Symbols a flush or the end leaves after the words: in the text of the final of the last
    word before them, after its mark, when that final is still to come; in a final of no words
    only when every word was final before them."""
    driver = ProtocolDriver(SessionOptions(right_context=2, max_delay_ms=60_000))
    driver.send(WordsMessage((Word("t1x1"), Word("\U0001f600"))))  # "t1x1" waits for its right context
    driver.send(FlushRequest())
    [final] = driver.of(Final)
    assert [w.w for w in final.words] == ["t1x1"] and final.text.endswith(" \U0001f600")
    assert final.text.split()[0].rstrip(",.?") == "t1x1"
    driver.send(WordsMessage((Word("&"),)))  # every word is final
    driver.send(EndRequest())
    last = driver.of(Final)[-1]
    assert last.words == () and last.start == 1 and last.text == "&"


def test_symbols_sent_after_a_flush_wait_for_the_next_one():
    """Two flushes with no word between: a symbol sent after the first is shown at the second,
    after the first's ``flushed``."""
    from streampunct.core.wire import Flushed, FlushRequest

    driver = ProtocolDriver(SessionOptions(right_context=1, max_delay_ms=60_000))
    driver.send(WordsMessage((Word("t1x1"), Word("&"))))
    driver.send(FlushRequest())
    driver.send(WordsMessage((Word("@"),)))
    driver.send(FlushRequest())
    shown = [(type(m).__name__, m.text.rstrip(",.?") if isinstance(m, Final) else None)
             for m in driver.out if isinstance(m, (Final, Flushed))]
    assert shown == [("Final", "t1x1 &"), ("Flushed", None), ("Final", "@"), ("Flushed", None)]
