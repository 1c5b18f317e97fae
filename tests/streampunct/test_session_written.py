"""Written forms (itn, lexicon) in the session rules and through a real server: what a client
sees in finals and partials, the config answer, refusals and limits."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streampunct.core.options import SessionOptions
from streampunct.core.session_protocol import SessionProtocol
from streampunct.core.windowing import WindowConfig
from streampunct.core.wire import (
    DEFAULT_LIMITS,
    ConfigApplied,
    ConfigRequest,
    EndRequest,
    ErrorCode,
    Final,
    FlushRequest,
    HypothesisMessage,
    Limits,
    Partial,
    ProtocolError,
    PunctuatedWord,
    Resumed,
    ResumeRequest,
    Word,
    WordsMessage,
    decode,
    decode_server,
    encode,
)
from streampunct.labels import COMMA, ID_TO_MARK, PERIOD
from streampunct.text.written_form import Lexicon, Phrase, WrittenForms, normalize_lexicon
from tests.streampunct.written_fakes import NUMBERS, FakeNormalizer, WordAligner, marks_model

WINDOW = WindowConfig(size=24, left=4, right=3)
MARKS = {"today": PERIOD, "ok": PERIOD, "york": COMMA}
SERVER_LEXICON = Lexicon(normalize_lexicon([("new york", "New York"), ("nasa", "NASA")]))


class Driver:
    """A session on a simulated clock with a word-level fake model (labels from ``MARKS``)."""

    def __init__(self, options: SessionOptions, *, written: WrittenForms | None = None,
                 limits: Limits = DEFAULT_LIMITS, defer_written: bool = False) -> None:
        self.aligner = WordAligner()
        self.infer = marks_model(self.aligner, MARKS)
        if written is None:
            written = WrittenForms(SERVER_LEXICON, FakeNormalizer())
        self.protocol = SessionProtocol(aligner=self.aligner, window=WINDOW, defaults=options,
                                        written=written, limits=limits, defer_written=defer_written)
        self.now = 0.0
        self.out: list = []

    def _pump(self) -> None:
        while (request := self.protocol.next_request(self.now)) is not None:
            self.out.extend(self.protocol.apply(request, self.infer(request.input_ids)))

    def send(self, message, dt: float = 0.1) -> list:
        self.now += dt
        first = len(self.out)
        self.out.extend(self.protocol.receive(message, self.now))
        self._pump()
        return self.out[first:]

    def frame(self, obj) -> list:
        first = len(self.out)
        self.out.extend(self.protocol.receive_frame(json.dumps(obj), self.now))
        return self.out[first:]

    def stream(self, text: str, chunk: int = 1) -> None:
        words = text.split()
        for i in range(0, len(words), chunk):
            self.send(WordsMessage(tuple(Word(w) for w in words[i:i + chunk])))
        self.send(EndRequest())

    def finals(self) -> list[Final]:
        return [m for m in self.out if isinstance(m, Final)]


SPEECH = "it costs twenty five dollars today ok we flew to new york on monday ok"


def test_one_word_finals_what_a_client_sees():
    driver = Driver(SessionOptions(right_context=1, max_delay_ms=60_000, itn=True))
    driver.stream(SPEECH)
    texts = [(f.words[0].w, f.text) for f in driver.finals()]
    assert texts[:7] == [("it", "it"), ("costs", "costs"),
                         ("twenty", ""), ("five", ""),  # held: "twenty five" goes on
                         ("dollars", "$25"), ("today", "today."), ("ok", "ok.")]
    # the lexicon phrase across finals: "new" is held, "york" writes "New York,"
    assert texts[10:12] == [("new", ""), ("york", "New York,")]
    assert " ".join(t for _, t in texts if t) == "it costs $25 today. ok. we flew to New York, on monday ok."


def test_words_and_marks_are_the_same_with_itn_and_lexicon_on_and_off():
    finals = {}
    for on in (False, True):
        driver = Driver(SessionOptions(right_context=2, max_delay_ms=60_000, itn=on,
                                       lexicon=(("monday", "Monday"), ("new york", "New York")) if on else ()),
                        written=WrittenForms(normalizer=FakeNormalizer()))
        driver.stream(SPEECH, chunk=3)
        finals[on] = driver.finals()
    assert [(f.start, f.words) for f in finals[True]] == [(f.start, f.words) for f in finals[False]]
    assert " ".join(f.text for f in finals[False]) == (
        "it costs twenty five dollars today. ok. we flew to new york, on monday ok.")
    assert " ".join(f.text for f in finals[True] if f.text) == (
        "it costs $25 today. ok. we flew to New York, on Monday ok.")


def test_phrase_inside_one_final():
    driver = Driver(SessionOptions(right_context=1, max_delay_ms=60_000, itn=True))
    driver.send(WordsMessage(tuple(Word(w) for w in "it costs twenty five dollars today".split())))
    assert [f.text for f in driver.finals()] == ["it costs $25"]
    assert driver.finals()[0].words[-1].w == "dollars"


def test_phrase_at_stream_end_is_written_by_the_last_final():
    driver = Driver(SessionOptions(right_context=1, max_delay_ms=60_000, itn=True))
    driver.stream("it costs twenty five")
    assert [f.text for f in driver.finals()] == ["it", "costs", "", "25."]


class NumberWordsNormalizer(FakeNormalizer):
    """:class:`FakeNormalizer` that names its number words, as the ITN grammars do."""

    number_words = frozenset(NUMBERS)


def test_a_delay_deadline_with_nothing_after_writes_the_phrase_at_once():
    # "twenty" is final by its delay with no word after it: a normalizer that names no number
    # words holds nothing, and "five", which goes on with "20", is written as spoken.
    driver = Driver(SessionOptions(right_context=3, max_delay_ms=1000, itn=True))
    driver.send(WordsMessage((Word("costs"), Word("twenty"))))
    driver.now += 1.5
    driver._pump()
    driver.send(WordsMessage((Word("five"), Word("dollars"))))
    driver.send(EndRequest())
    assert [f.text for f in driver.finals()] == ["costs 20", "five dollars."]


def test_a_number_at_a_delay_deadline_is_held_for_the_words_after_the_pause():
    driver = Driver(SessionOptions(right_context=3, max_delay_ms=1000, itn=True),
                    written=WrittenForms(SERVER_LEXICON, NumberWordsNormalizer()))
    driver.send(WordsMessage((Word("costs"), Word("twenty"))))
    driver.now += 1.5
    driver._pump()
    assert [f.text for f in driver.finals()] == ["costs"]
    driver.send(WordsMessage((Word("five"), Word("dollars"))))
    driver.send(EndRequest())
    assert [f.text for f in driver.finals()] == ["costs", "$25."]


class DateNormalizer(NumberWordsNormalizer):
    """Adds dates as the ITN grammars write them: "march fifth" -> "March 5", and with a year
    "march fifth twenty twenty" -> "March 5, 2020" (one form); with half a year ("march fifth
    twenty") several forms side by side, "March 5 20", as the grammars read an unfinished one."""

    month_words = frozenset(("march",))
    number_words = frozenset(NUMBERS) | {"fifth"}

    def phrases(self, words: Sequence[str], *, first: int = 0, until: int | None = None) -> list[Phrase]:
        out: list[Phrase] = []
        i = 0
        while i < len(words):
            if words[i] == "march" and words[i + 1:i + 2] == ["fifth"]:
                year = 0
                while year < 2 and words[i + 2 + year:i + 3 + year] == ["twenty"]:
                    year += 1
                text = {0: "March 5", 1: "March 5 20", 2: "March 5, 2020"}[year]
                out.append(Phrase(i, i + 2 + year, text, whole=year != 1))
                i += 2 + year
                continue
            j = i
            while j < len(words) and not (words[j] == "march" and words[j + 1:j + 2] == ["fifth"]):
                j += 1
            out += [Phrase(p.start + i, p.end + i, p.text, p.whole) for p in super().phrases(words[i:j])]
            i = j
        return out


@pytest.mark.parametrize("right_context", [0, 1, 2, 3])
def test_a_date_is_written_whole_whatever_the_chunking(right_context):
    """A month is held like a number while a day may follow, and "march fifth," (the comma a
    written date puts there) while a year may: one word a message, any right context."""
    for speech, written in [("we flew on march fifth twenty twenty at noon ok", "March 5, 2020"),
                            ("we met on march fifth at noon ok", "March 5")]:
        driver = Driver(SessionOptions(right_context=right_context, max_delay_ms=60_000, itn=True),
                        written=WrittenForms(SERVER_LEXICON, DateNormalizer()))
        driver.infer = marks_model(driver.aligner, {**MARKS, "fifth": COMMA})
        driver.stream(speech)
        text = " ".join(f.text for f in driver.finals() if f.text)
        assert written in text, (right_context, text)
        assert " ".join(w.w for f in driver.finals() for w in f.words) == speech


class SumsAndTimesNormalizer(NumberWordsNormalizer):
    """Adds two forms the ITN grammars write, found before the plain numbers: "one dollar five"
    -> "$1.05" ("one dollar": "$1"; a form that ends on a number word another may follow) and
    "quarter to nine" -> "8:45" (a two-word opener before the number)."""

    opener_words = frozenset(("quarter",))
    FORMS = {("one", "dollar", "five"): "$1.05", ("one", "dollar"): "$1", ("quarter", "to", "nine"): "8:45"}

    def phrases(self, words: Sequence[str], *, first: int = 0, until: int | None = None) -> list[Phrase]:
        out: list[Phrase] = []
        i = j = 0
        while j < len(words):
            form = next((f for f in self.FORMS if tuple(words[j:j + len(f)]) == f), None)
            if form is None:
                j += 1
                continue
            out += [Phrase(p.start + i, p.end + i, p.text, p.whole) for p in super().phrases(words[i:j])]
            out.append(Phrase(j, j + len(form), self.FORMS[form]))
            i = j = j + len(form)
        return out + [Phrase(p.start + i, p.end + i, p.text, p.whole) for p in super().phrases(words[i:])]


@pytest.mark.parametrize("right_context", [0, 1, 2, 3])
@pytest.mark.parametrize(("speech", "written"), [
    ("it costs one dollar five two of them ok", "it costs $1.05 two of them ok."),
    ("we left at quarter to nine ok", "we left at 8:45 ok."),
])
def test_a_form_is_written_whole_when_numbers_follow_it_or_it_opens_with_two_words(
        right_context, speech, written):
    """Words held from inside a form ("five two" after "one dollar": "$1.05" and "two") are held
    from the form's first word, and "quarter to" is held while a number may follow: one word a
    message, any right context, the finals' texts read as the whole text written in one piece."""
    driver = Driver(SessionOptions(right_context=right_context, max_delay_ms=60_000, itn=True),
                    written=WrittenForms(SERVER_LEXICON, SumsAndTimesNormalizer()))
    driver.stream(speech)
    assert " ".join(f.text for f in driver.finals() if f.text) == written
    assert " ".join(w.w for f in driver.finals() for w in f.words) == speech


@pytest.mark.parametrize("closing", ["flush", "end"])
@pytest.mark.parametrize("defer", [False, True])
def test_words_held_at_a_pause_are_written_by_a_flush_or_the_end_with_no_words_after(closing, defer):
    """A number held at a pause for words that never come ("it costs twenty", a pause, then
    ``flush`` or ``end``): its text comes in a final of no words, before ``flushed`` / ``end``;
    the finals' texts joined show every word once."""
    from streampunct.core.wire import Ended, Flushed, FlushRequest

    options = SessionOptions(right_context=3, max_delay_ms=1000, itn=True)
    driver = Driver(options, written=WrittenForms(SERVER_LEXICON, NumberWordsNormalizer()), defer_written=defer)
    driver.send(WordsMessage((Word("costs"), Word("twenty"))))
    driver.now += 1.5
    driver._pump()
    driver.send(FlushRequest() if closing == "flush" else EndRequest())
    out = _resolved(driver.out)
    finals = [m for m in out if isinstance(m, Final)]
    assert [(f.start, [w.w for w in f.words], f.text) for f in finals] == [
        (0, ["costs", "twenty"], "costs"), (2, [], "20")]
    last = out[-1]
    assert last == (Flushed(2) if closing == "flush" else Ended(2))
    assert out.index(finals[-1]) == len(out) - 2  # the text first, then flushed / end


@pytest.mark.parametrize("defer", [False, True])
def test_a_hand_off_leaves_the_words_held_for_a_phrase_to_the_server_that_resumes(defer):
    """``serve --drain resume``: "new" is final and held for "new york"; the stream goes on
    elsewhere. The hand-off writes nothing: the server that resumes writes "new" with the
    phrase, told by resume's ``held`` or inferring it from the words sent again ("york ..."),
    so a client that knows only the protocol shows "New York" too, not "new" twice."""
    driver = Driver(SessionOptions(right_context=1, max_delay_ms=60_000), defer_written=defer)
    for w in "we flew to new york".split():
        driver.send(WordsMessage((Word(w),)))
    finals = [f for f in _resolved(driver.out) if isinstance(f, Final)]
    assert (finals[-1].start, [w.w for w in finals[-1].words], finals[-1].text) == (3, ["new"], "")
    assert driver.protocol.hand_off() == []
    assert driver.protocol.next_request(driver.now + 100) is None  # nothing more is decided here
    context = tuple(PunctuatedWord(w.w, w.p) for f in finals for w in f.words)
    for held in (finals[-1].held, None):
        resumed = Driver(SessionOptions(right_context=1, max_delay_ms=60_000), defer_written=defer)
        resumed.send(ResumeRequest(len(context), context, ConfigRequest(), held=held))
        resumed.stream("york today")
        shown = [f.text for f in finals + [f for f in _resolved(resumed.out) if isinstance(f, Final)] if f.text]
        assert " ".join(shown) == "we flew to New York, today."


@pytest.mark.parametrize("defer", [False, True])
def test_a_flush_with_nothing_held_sends_no_empty_final(defer):
    from streampunct.core.wire import FlushRequest

    options = SessionOptions(right_context=3, max_delay_ms=1000, itn=True)
    driver = Driver(options, written=WrittenForms(SERVER_LEXICON, NumberWordsNormalizer()), defer_written=defer)
    driver.send(WordsMessage((Word("it"), Word("costs"), Word("twenty"))))
    driver.send(FlushRequest())
    driver.send(EndRequest())
    finals = [m for m in _resolved(driver.out) if isinstance(m, Final)]
    assert all(f.words for f in finals) and " ".join(f.text for f in finals) == "it costs 20"


def test_right_context_0_writes_numbers_and_lexicon_phrases_whatever_the_chunking():
    for chunk in (1, 2, 7):
        driver = Driver(SessionOptions(right_context=0, max_delay_ms=60_000, itn=True),
                        written=WrittenForms(SERVER_LEXICON, NumberWordsNormalizer()))
        driver.stream("it costs twenty five dollars in new york", chunk=chunk)
        assert " ".join(f.text for f in driver.finals() if f.text) == "it costs $25 in New York,", chunk
        # a stream that ends on a number, held with nothing after it: written by the end
        driver = Driver(SessionOptions(right_context=0, max_delay_ms=60_000, itn=True),
                        written=WrittenForms(SERVER_LEXICON, NumberWordsNormalizer()))
        driver.stream("it costs twenty five", chunk=chunk)
        assert " ".join(f.text for f in driver.finals() if f.text) == "it costs 25", chunk


def test_partials_start_with_the_held_words_and_write_their_phrases():
    driver = Driver(SessionOptions(right_context=1, max_delay_ms=60_000, partials=True, itn=True))
    driver.send(WordsMessage((Word("costs"), Word("twenty"), Word("five"))))
    assert [f.text for f in driver.finals()] == ["costs"]  # "twenty" held: "twenty five" goes on
    partial = [m for m in driver.out if isinstance(m, Partial)][-1]
    assert (partial.start, [w.w for w in partial.words], partial.text) == (2, ["five"], "25")
    driver.send(HypothesisMessage((Word("dollars"), Word("today"))))
    partial = [m for m in driver.out if isinstance(m, Partial)][-1]
    assert [w.w for w in partial.hypothesis] == ["dollars", "today"]
    assert partial.text == "$25 today."


@pytest.mark.parametrize("right_context", [0, 1, 2])
@pytest.mark.parametrize("chunk", [1, 3])
def test_a_phrase_repeated_inside_a_longer_one_is_written_after_it(right_context, chunk):
    """"red bull red bull" is one entry, "red bull" another: three in a row are the long one and
    the short one, as offline. The left context after the long one was its last words
    ("bull red bull"), and the words after it were matched as its rest, written as spoken."""
    lexicon = (("red bull", "Red Bull"), ("red bull red bull", "RBRB"))
    driver = Driver(SessionOptions(right_context=right_context, max_delay_ms=60_000, lexicon=lexicon),
                    written=WrittenForms(normalizer=FakeNormalizer()))
    driver.stream("we sang red bull red bull red bull all night long", chunk=chunk)
    assert " ".join(f.text for f in driver.finals() if f.text).rstrip(".") == "we sang RBRB Red Bull all night long"


def test_lexicon_in_partials_and_finals_alike():
    options = SessionOptions(right_context=2, max_delay_ms=60_000, partials=True,
                             lexicon=(("stream punct", "StreamPunct"),))
    driver = Driver(options)
    driver.send(WordsMessage((Word("we"), Word("use"), Word("stream"), Word("punct"))))
    partial = [m for m in driver.out if isinstance(m, Partial)][-1]
    assert partial.text == "StreamPunct"
    driver.send(HypothesisMessage((Word("at"), Word("nasa"))))
    assert [m for m in driver.out if isinstance(m, Partial)][-1].text == "StreamPunct at NASA"
    driver.send(WordsMessage((Word("at"), Word("nasa"))))
    driver.send(EndRequest())
    assert " ".join(f.text for f in driver.finals() if f.text) == "we use StreamPunct at NASA."


def _shown(out: list) -> str:
    """What a caption client shows: the finals' texts joined, then the latest partial's text
    (a partial that a later final overtook shows nothing)."""
    finals = [m for m in out if isinstance(m, Final)]
    partials = [(k, m) for k, m in enumerate(out) if isinstance(m, Partial)]
    last_final = max((k for k, m in enumerate(out) if isinstance(m, Final)), default=-1)
    shown = [f.text for f in finals if f.text]
    if partials and partials[-1][0] > last_final and partials[-1][1].text:
        shown.append(partials[-1][1].text)
    return " ".join(shown)


@pytest.mark.parametrize("itn", [False, True])
def test_at_a_pause_a_partial_shows_the_words_a_final_held(itn):
    # right context 0: each final is decided with nothing after it, so a final that ends in a
    # lexicon phrase's first word holds it for the next final; no model partial follows
    options = SessionOptions(right_context=0, max_delay_ms=60_000, partials=True, itn=itn,
                             lexicon=(("new york", "New York"),))
    driver = Driver(options)
    driver.send(WordsMessage((Word("i"), Word("love"), Word("new"))))
    assert [f.text for f in driver.finals()] == ["i love"]
    partial = driver.out[-1]
    assert isinstance(partial, Partial)
    assert (partial.start, partial.words, partial.hypothesis, partial.text) == (3, (), (), "new")
    assert _shown(driver.out) == "i love new"
    driver.send(WordsMessage((Word("york"), Word("today"))))
    assert [f.text for f in driver.finals()] == ["i love", "New York, today."]
    assert driver.out[-1] == Partial(5, (), "", ())  # nothing held: the old partial is cleared
    assert _shown(driver.out) == "i love New York, today."
    # the same messages when texts are written later, in order (itn sessions on a server)
    deferred = Driver(options, defer_written=True)
    deferred.send(WordsMessage((Word("i"), Word("love"), Word("new"))))
    deferred.send(WordsMessage((Word("york"), Word("today"))))
    assert [m.to_json() for m in _resolved(deferred.out)] == [m.to_json() for m in driver.out]


@pytest.mark.parametrize("defer", [False, True])
def test_a_flush_that_writes_the_held_words_clears_the_partial_that_showed_them(defer):
    """The partial of the pause showed "new" (held for "new york"); the flush writes "new" in a
    final of no words. A client that shows the finals' texts, then the latest partial's when it
    starts at the next word (caption's rule), showed "i love new new": a partial of no words
    and no text now follows that final, before ``flushed``."""
    from streampunct.client.stream_client import Transcript
    from streampunct.core.wire import Flushed, FlushRequest

    options = SessionOptions(right_context=0, max_delay_ms=60_000, partials=True, itn=defer,
                             lexicon=(("new york", "New York"),))
    driver = Driver(options, defer_written=defer)
    driver.send(WordsMessage((Word("i"), Word("love"), Word("new"))))
    driver.send(FlushRequest())
    out = _resolved(driver.out) if defer else driver.out
    assert out[-3:] == [Final(3, (), "new"), Partial(3, (), "", ()), Flushed(3)]
    transcript = Transcript()
    for message in out:
        transcript.apply(message)
    follows = transcript.partial_start == transcript.n_final and transcript.partial_text
    assert " ".join([t for _, _, t in transcript.texts if t] + ([transcript.partial_text] if follows else [])) == (
        "i love new")


@pytest.mark.parametrize("defer", [False, True])
def test_one_partial_shows_the_held_words_when_a_hypothesis_change_waits_too(defer):
    # the hypothesis "i love new" becomes words: the final holds "new", and the partial the
    # cleared hypothesis is owed is the one that shows it (not a second, empty one after it)
    options = SessionOptions(right_context=0, max_delay_ms=60_000, partials=True, itn=defer,
                             lexicon=(("new york", "New York"),))
    driver = Driver(options, defer_written=defer)
    driver.send(HypothesisMessage((Word("i"), Word("love"), Word("new"))))
    driver.send(WordsMessage((Word("i"), Word("love"), Word("new"))))
    out = _resolved(driver.out) if defer else driver.out
    assert _shown(out) == "i love new"
    assert [(m.start, m.text) for m in out if isinstance(m, Partial) and not m.words][-1] == (3, "new")
    # a hypothesis cleared later (nothing left to label) is answered with the held words too
    first = len(driver.out)
    driver.send(HypothesisMessage((Word("york"),)))
    driver.send(HypothesisMessage(()))
    later = _resolved(driver.out[first:]) if defer else driver.out[first:]
    assert _shown(out + later) == "i love new"


def test_no_pause_partial_while_words_or_a_hypothesis_remain_or_at_a_flush():
    options = SessionOptions(right_context=1, max_delay_ms=60_000, partials=True, lexicon=(("new york", "New York"),))
    driver = Driver(options)
    driver.send(WordsMessage((Word("i"), Word("love"), Word("new"))))
    # "new" is not final yet: the model's partial shows it, no partial of no words comes
    assert not [m for m in driver.out if isinstance(m, Partial) and not m.words and not m.hypothesis]
    flushed = driver.send(FlushRequest())
    assert [type(m).__name__ for m in flushed] == ["Final", "Flushed"]  # the flush writes "new" itself
    assert _shown(driver.out) == "i love new"


LONG_LEXICON = (("the united states of america", "the USA"), ("department of motor vehicles", "DMV"))


def send_in_chunks(driver, words: list[str], chunks: list[int]) -> None:
    """``words`` in messages of the sizes in ``chunks`` (repeated), then ``end``."""
    i = 0
    for size in chunks * len(words):
        if i >= len(words):
            break
        driver.send(WordsMessage(tuple(Word(w) for w in words[i:i + size])))
        i += size
    driver.send(EndRequest())


@settings(max_examples=40, deadline=None)
@given(chunks=st.lists(st.integers(1, 5), min_size=1, max_size=12), right_context=st.integers(0, 4))
def test_an_entry_inside_a_longer_one_does_not_break_it(chunks, right_context):
    """With "united states" in the lexicon too, a final whose right context completed the short
    entry wrote the words before it ("the"), so "the united states of america" came out as
    "the U.S. of america" (found by a fuzzer of written forms): the longer entry begun earlier
    is held from its start."""
    lexicon = (*LONG_LEXICON, ("united states", "U.S."))
    words = "one the united states of america and the united states is big ok".split()
    driver = Driver(SessionOptions(right_context=right_context, max_delay_ms=60_000, lexicon=lexicon))
    send_in_chunks(driver, words, chunks)
    assert " ".join(f.text for f in driver.finals() if f.text) == "one the USA and the U.S. is big ok."


@settings(max_examples=40, deadline=None)
@given(chunks=st.lists(st.integers(1, 5), min_size=1, max_size=12), right_context=st.integers(1, 4))
def test_a_lexicon_phrase_longer_than_the_right_context_is_written_whatever_the_chunking(chunks, right_context):
    """The words after a final may complete a lexicon phrase that its own words begin ("the
    united states of" before "america"): those words are held like a number's, so the phrase
    does not depend on how the client cut the words into messages."""
    words = "we drove across the united states of america to the department of motor vehicles ok".split()
    driver = Driver(SessionOptions(right_context=right_context, max_delay_ms=60_000, lexicon=LONG_LEXICON))
    send_in_chunks(driver, words, chunks)
    assert " ".join(f.text for f in driver.finals() if f.text) == (
        "we drove across the USA to the DMV ok.")
    assert [w.w for f in driver.finals() for w in f.words] == words


def test_a_lexicon_prefix_that_does_not_go_on_is_written_as_spoken():
    driver = Driver(SessionOptions(right_context=1, max_delay_ms=60_000, lexicon=LONG_LEXICON))
    driver.stream("the united states of mind ok")
    texts = [f.text for f in driver.finals()]
    # held while "the united states of ..." may go on; "mind" ends it: written as spoken
    assert texts[:4] == ["", "", "", "the united states of"]
    assert " ".join(t for t in texts if t) == "the united states of mind ok."


def test_config_answer_names_itn_and_lexicon():
    driver = Driver(SessionOptions())
    (answer,) = driver.frame({"type": "config", "itn": True, "lexicon": [["Stream  Punct", "StreamPunct"]]})
    assert isinstance(answer, ConfigApplied)
    wire = answer.to_json()["config"]
    assert wire["itn"] is True and wire["lexicon"] == [["stream punct", "StreamPunct"]]


def test_itn_is_ignored_without_grammars_and_the_rest_of_the_config_applies():
    """As the protocol has a server without ``itn`` do: ignored, not named, nothing refused."""
    driver = Driver(SessionOptions(), written=WrittenForms(SERVER_LEXICON))
    (answer,) = driver.frame({"type": "config", "itn": True, "capitalize": True, "lexicon": [["esa", "ESA"]]})
    assert isinstance(answer, ConfigApplied) and "itn" not in answer.to_json()["config"]
    assert driver.protocol.options.itn is False and driver.protocol.options.capitalize
    assert answer.config.lexicon == (("esa", "ESA"),)
    driver = Driver(SessionOptions(), written=WrittenForms(SERVER_LEXICON))
    (resumed,) = driver.frame({"type": "resume", "start": 0, "context": [], "config": {"itn": True, "capitalize": True}})
    assert isinstance(resumed, Resumed) and driver.protocol.options == SessionOptions(capitalize=True)


def test_only_a_server_with_grammars_names_itn_in_the_effective_options():
    """The contract: a server that supports ``itn`` names it in the effective options; one that
    cannot write it (no grammars) leaves it out of ready, config and resumed, lexicon kept."""
    for written, named in ((WrittenForms(SERVER_LEXICON), False), (WrittenForms(SERVER_LEXICON, FakeNormalizer()), True)):
        driver = Driver(SessionOptions(), written=written)
        ready = driver.protocol.ready()
        (answer,) = driver.frame({"type": "config", "lexicon": [["esa", "ESA"]]})
        resumed_driver = Driver(SessionOptions(), written=written)
        (resumed,) = resumed_driver.frame({"type": "resume", "start": 3, "context": []})
        for message in (ready, answer, resumed):
            wire = message.to_json()["config"]
            assert ("itn" in wire) is named and "lexicon" in wire
            # and a client reads it back as it came
            assert decode_server(json.dumps(message.to_json())).to_json() == message.to_json()


@pytest.mark.parametrize(("lexicon", "message"), [
    ("NASA", "'lexicon' must be a list of [spoken, written] string pairs"),
    ([["nasa"]], "'lexicon' must be a list of [spoken, written] string pairs"),
    ([["nasa", 1]], "'lexicon' must be a list of [spoken, written] string pairs"),
    ([["!!", "x"]], "lexicon[0]: the spoken phrase '!!' has no words"),
    ([["a", "b"]] * 4, "'lexicon' has 4 pairs; the limit is 3"),
    ([["a" * 10, "b" * 11]], "'lexicon' has 21 characters; the limit is 20"),
])
def test_malformed_or_oversized_lexicon_is_a_bad_request(lexicon, message):
    driver = Driver(SessionOptions(), limits=Limits(max_lexicon_pairs=3, max_lexicon_chars=20))
    (error,) = driver.frame({"type": "config", "lexicon": lexicon})
    assert (error.code, error.message) == (ErrorCode.BAD_REQUEST, message)
    assert driver.protocol.options.lexicon == ()


def test_ready_announces_the_lexicon_limits():
    limits = Driver(SessionOptions()).protocol.ready().to_json()["limits"]
    assert limits["max_lexicon_pairs"] == Limits.max_lexicon_pairs
    assert limits["max_lexicon_chars"] == Limits.max_lexicon_chars


def test_resume_with_written_options():
    driver = Driver(SessionOptions(right_context=1, max_delay_ms=60_000))
    driver.send(ResumeRequest(5, (), ConfigRequest(itn=True)))
    driver.stream("twenty five dollars today")
    assert [(f.start, f.text) for f in driver.finals()] == [(5, ""), (6, ""), (7, "$25"), (8, "today.")]


def test_a_resume_context_is_the_written_forms_left_context():
    # the context ends with "twenty", which the old connection wrote (held=0): "five dollars" goes
    # on with it ("$25"), so it is written as spoken, not read alone as "$5"
    driver = Driver(SessionOptions(right_context=1, max_delay_ms=60_000))
    context = tuple(PunctuatedWord(w, "") for w in ("it", "costs", "twenty"))
    driver.send(ResumeRequest(3, context, ConfigRequest(itn=True), held=0))
    driver.stream("five dollars today")
    assert " ".join(f.text for f in driver.finals() if f.text) == "five dollars today."
    # not told (a client that knows only the protocol): a final whose right context was "five"
    # held "twenty", so this one writes it with the phrase
    inferred = Driver(SessionOptions(right_context=1, max_delay_ms=60_000))
    inferred.send(ResumeRequest(3, context, ConfigRequest(itn=True)))
    inferred.stream("five dollars today")
    assert " ".join(f.text for f in inferred.finals() if f.text) == "$25 today."
    # words that do not go on with a phrase: nothing held
    other = Driver(SessionOptions(right_context=1, max_delay_ms=60_000))
    other.send(ResumeRequest(3, context, ConfigRequest(itn=True)))
    other.stream("people came today")
    assert " ".join(f.text for f in other.finals() if f.text) == "people came today."


def test_a_final_says_how_many_words_it_left_held_and_a_resume_writes_them():
    """``final.held`` (an extension): "new" is final, its text held for "new york". A connection
    lost then loses it, unless the client passes ``held`` on in ``resume``: the new connection
    holds those context words and writes them first, with the phrase when it completes."""
    driver = Driver(SessionOptions(right_context=1, max_delay_ms=60_000))
    for w in "we flew to new york".split():
        driver.send(WordsMessage((Word(w),)))
    last = driver.finals()[-1]
    assert [w.w for w in last.words] == ["new"] and last.text == "" and last.held == 1
    assert json.loads(encode(last))["held"] == 1
    assert "held" not in json.loads(encode(driver.finals()[0]))  # sent only when not 0
    context = tuple(PunctuatedWord(w.w, w.p) for f in driver.finals() for w in f.words)

    resumed = Driver(SessionOptions(right_context=1, max_delay_ms=60_000))
    resumed.send(ResumeRequest(len(context), context, ConfigRequest(), held=last.held))
    resumed.stream("york today")
    assert " ".join(f.text for f in resumed.finals() if f.text) == "New York, today."
    # held counts the context's words: an item that normalizes to nothing is none
    padded = Driver(SessionOptions(right_context=1, max_delay_ms=60_000))
    padded.send(ResumeRequest(len(context), (*context, PunctuatedWord("...", "")), ConfigRequest(), held=1))
    padded.stream("york today")
    assert " ".join(f.text for f in padded.finals() if f.text) == "New York, today."
    told_none = Driver(SessionOptions(right_context=1, max_delay_ms=60_000))  # held 0: "new" was written
    told_none.send(ResumeRequest(len(context), context, ConfigRequest(), held=0))
    told_none.stream("york today")
    assert " ".join(f.text for f in told_none.finals() if f.text) == "york, today."
    # a client that does not pass it on (it knows only the protocol): inferred from "york"
    plain = Driver(SessionOptions(right_context=1, max_delay_ms=60_000))
    plain.send(ResumeRequest(len(context), context, ConfigRequest()))
    plain.stream("york today")
    assert " ".join(f.text for f in plain.finals() if f.text) == "New York, today."
    assert "held" not in json.loads(encode(ResumeRequest(2, context)))
    assert json.loads(encode(ResumeRequest(2, context, held=0)))["held"] == 0
    assert decode(json.dumps({"type": "resume", "start": 2, "context": []})).held is None
    with pytest.raises(ProtocolError, match="'held' must be an integer from 0 to the 2 context words, not 3"):
        decode(json.dumps({"type": "resume", "start": 2, "context": [{"w": "a", "p": ""}] * 2, "held": 3}))


def test_no_itn_no_lexicon_renders_as_before():
    driver = Driver(SessionOptions(right_context=1, max_delay_ms=60_000, capitalize=True),
                    written=WrittenForms())
    driver.stream("twenty five dollars today new york")
    assert [f.text for f in driver.finals()] == ["Twenty", "five", "dollars", "today.", "New", "york."]
    assert [w.p for f in driver.finals() for w in f.words] == ["", "", "", ".", "", ID_TO_MARK[PERIOD]]


async def test_through_a_server_with_injected_grammars(aligner):
    from streampunct.client.stream_client import StreamClient, Transcript
    from streampunct.server.app import ServerConfig, ServerRuntime, serve
    from tests.streampunct.conftest import TEST_WINDOW, FakeEngine

    config = ServerConfig(host="127.0.0.1", port=0, lexicon=(("new york", "New York"),))
    server = await serve(config, ServerRuntime(FakeEngine, aligner, TEST_WINDOW, "fake", normalizer=FakeNormalizer()))
    try:
        await server.wait_ready()
        client = await StreamClient.connect(server.url, right_context=1, max_delay_ms=60_000, itn=True,
                                            lexicon=[("nasa", "NASA")])
        assert client.options.itn and client.options.lexicon == (("nasa", "NASA"),)
        for word in "nasa paid twenty five dollars in new york".split():
            await client.send_words([word])
        await client.end()
        transcript, texts = Transcript(), []
        async for message in client:
            transcript.apply(message)
            texts += [message.text] if isinstance(message, Final) and message.text else []
        written = " ".join(texts)
        assert written.replace(",", "").replace(".", "").replace("?", "") == "NASA paid $25 in New York"
        assert transcript.words == "nasa paid twenty five dollars in new york".split()
    finally:
        await server.shutdown()


async def test_through_a_server_the_words_held_at_a_pause_are_written_by_a_flush(aligner):
    """The server writes ITN texts off the event loop (deferred): a number held at a pause comes
    with the flush in a final of no words; a flush with nothing held sends none."""
    from streampunct.client.stream_client import StreamClient
    from streampunct.core.wire import Flushed
    from streampunct.server.app import ServerConfig, ServerRuntime, serve
    from tests.streampunct.conftest import TEST_WINDOW, FakeEngine

    config = ServerConfig(host="127.0.0.1", port=0)
    server = await serve(config, ServerRuntime(FakeEngine, aligner, TEST_WINDOW, "fake",
                                               normalizer=NumberWordsNormalizer()))
    try:
        await server.wait_ready()
        client = await StreamClient.connect(server.url, right_context=3, max_delay_ms=100, itn=True)
        await client.send_words(["costs", "twenty"])
        first = await client.recv(timeout=10)  # by the delay deadline, nothing after it: "twenty" held
        assert isinstance(first, Final) and [w.w for w in first.words] == ["costs", "twenty"]
        assert first.text == "costs"
        await client.flush()
        assert await client.recv(timeout=10) == Final(2, (), "20")
        assert await client.recv(timeout=10) == Flushed(2)
        await client.send_words(["ok"])
        await client.flush()
        got = await client.recv(timeout=10)
        assert isinstance(got, Final) and [w.w for w in got.words] == ["ok"]
        assert await client.recv(timeout=10) == Flushed(3)  # no empty final before it
        await client.close()
    finally:
        await server.shutdown()


async def test_a_server_without_grammars_ignores_itn_and_the_client_says_so(aligner):
    """The protocol: a server that does not support ``itn`` ignores it (the rest of the config
    applies) and names no ``itn`` in the effective options; the Python client tells the user."""
    import json

    from websockets.asyncio.client import connect

    from streampunct.client.stream_client import ClientError, StreamClient
    from streampunct.server.app import ServerConfig, ServerRuntime, serve
    from tests.streampunct.conftest import TEST_WINDOW, FakeEngine

    server = await serve(ServerConfig(host="127.0.0.1", port=0), ServerRuntime(FakeEngine, aligner, TEST_WINDOW, "fake"))
    try:
        await server.wait_ready()
        async with connect(server.url) as ws:
            assert "itn" not in json.loads(await ws.recv())["config"]
            await ws.send(json.dumps({"type": "config", "itn": True, "capitalize": True, "right_context": 0}))
            answer = json.loads(await ws.recv())
            assert answer["type"] == "config" and "itn" not in answer["config"]
            assert answer["config"]["capitalize"] is True and answer["config"]["right_context"] == 0
            await ws.send(json.dumps({"type": "words", "words": ["twenty", "five", "dollars"]}))
            await ws.send(json.dumps({"type": "end"}))
            finals = [m for m in map(json.loads, [f async for f in ws]) if m["type"] == "final"]
            assert " ".join(m["text"] for m in finals).startswith("Twenty")  # capitalized, no "$25"
        async with connect(server.url) as ws:  # resume's config alike
            await ws.recv()
            await ws.send(json.dumps({"type": "resume", "start": 2, "context": [{"w": "a", "p": ""}],
                                      "config": {"itn": True, "partials": True}}))
            answer = json.loads(await ws.recv())
            assert answer["type"] == "resumed" and "itn" not in answer["config"] and answer["config"]["partials"]
        with pytest.raises(ClientError, match="itn is not available on this server"):
            await StreamClient.connect(server.url, itn=True)
    finally:
        await server.shutdown()
    from streampunct.server.app import ServerRuntime, StreamServer

    # itn by default needs grammars: refused when the server is built (it knows what was injected)
    with pytest.raises(ValueError, match="itn by default: itn is not available"):
        StreamServer(ServerConfig(session_defaults=SessionOptions(itn=True)), ServerRuntime(FakeEngine, aligner))


def test_frames_of_lexicon_config_round_trip():
    request = ConfigRequest(itn=True, lexicon=(("new york", "New York"),))
    obj = request.to_json()
    assert obj == {"type": "config", "itn": True, "lexicon": [["new york", "New York"]]}


# -- written texts off the event loop (WrittenText, the server's written executor) --------------


def _resolved(out: list) -> list:
    """The protocol's output with every WrittenText resolved, in order (as the server's writer does)."""
    from streampunct.core.session_protocol import WrittenText, nothing_to_send

    resolved = [m.resolve() if isinstance(m, WrittenText) else m for m in out]
    return [m for m in resolved if not nothing_to_send(m)]  # as the server's writer drops them


@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_deferred_texts_are_the_texts_written_at_once(chunk):
    options = SessionOptions(right_context=1, max_delay_ms=60_000, partials=True, itn=True)
    at_once = Driver(options)
    at_once.stream(SPEECH, chunk=chunk)
    deferred = Driver(options, defer_written=True)
    deferred.stream(SPEECH, chunk=chunk)
    assert any(type(m).__name__ == "WrittenText" for m in deferred.out)
    assert [m.to_json() for m in _resolved(deferred.out)] == [m.to_json() for m in at_once.out]


def test_a_discarded_partial_text_keeps_the_order_and_writes_nothing():
    from streampunct.core.session_protocol import WrittenText

    options = SessionOptions(right_context=1, max_delay_ms=60_000, partials=True, itn=True)
    driver = Driver(options, defer_written=True)
    driver.send(WordsMessage((Word("it"), Word("costs"), Word("twenty"))))
    pending = [m for m in driver.out if isinstance(m, WrittenText)]
    kinds = [type(m.message).__name__ for m in pending]
    assert "Partial" in kinds and "Final" in kinds
    first_partial = kinds.index("Partial")
    with pytest.raises(TypeError, match="only a partial"):
        pending[kinds.index("Final")].discard()
    pending[first_partial].discard()  # replaced before it was sent: its words are let go
    out = [m.resolve() for m in pending]  # still resolved in order, the others as written
    assert out[first_partial] == Partial(pending[first_partial].message.start, (), "", ())
    at_once = Driver(options)
    at_once.send(WordsMessage((Word("it"), Word("costs"), Word("twenty"))))
    written = [m for m in at_once.out if isinstance(m, (Final, Partial))]
    assert [m.text for k, m in enumerate(out) if k != first_partial] == \
        [m.text for k, m in enumerate(written) if k != first_partial]


def test_deferred_texts_must_be_resolved_in_order_and_only_itn_sessions_defer():
    from streampunct.core.session_protocol import WrittenText

    options = SessionOptions(right_context=1, max_delay_ms=60_000, itn=True)
    driver = Driver(options)
    driver.protocol = SessionProtocol(aligner=driver.aligner, window=WINDOW, defaults=options,
                                      written=WrittenForms(SERVER_LEXICON, FakeNormalizer()), defer_written=True)
    driver.stream("it costs twenty five dollars")
    pending = [m for m in driver.out if isinstance(m, WrittenText)]
    assert len(pending) >= 2
    with pytest.raises(RuntimeError, match="out of order"):
        pending[1].resolve()
    assert pending[0].resolve().text == "it"
    # a lexicon without itn is written at once: it costs a dictionary lookup a word
    lexicon_only = SessionOptions(right_context=1, max_delay_ms=60_000, lexicon=(("nasa", "NASA"),))
    driver = Driver(lexicon_only)
    driver.protocol = SessionProtocol(aligner=driver.aligner, window=WINDOW, defaults=lexicon_only,
                                      written=WrittenForms(SERVER_LEXICON, FakeNormalizer()), defer_written=True)
    driver.stream("we met nasa")
    assert not any(isinstance(m, WrittenText) for m in driver.out)
    assert " ".join(f.text for f in driver.finals()) == "we met NASA."


def _unmarked(text: str) -> str:
    return text.replace(",", "").replace(".", "").replace("?", "")


class BlockingNormalizer(FakeNormalizer):
    """:class:`FakeNormalizer` that, asked about a run with ``word`` in it, says so (``entered``)
    and waits for ``release`` before answering (the grammars on a long number)."""

    def __init__(self, word: str) -> None:
        super().__init__()
        import threading

        self.word = word
        self.entered = threading.Event()
        self.release = threading.Event()

    def phrases(self, words, *, first=0, until=None):
        if self.word in words:
            self.entered.set()
            assert self.release.wait(30), "never released"
        return super().phrases(words, first=first, until=until)


async def test_a_slow_normalizer_does_not_hold_up_other_sessions(aligner):
    """One itn session's texts wait for its (slow) grammars on a worker thread; meanwhile the
    event loop serves another itn session to its end, and the first one's finals then come
    in order with the texts they would have had."""
    import asyncio

    from streampunct.client.stream_client import StreamClient, Transcript
    from streampunct.server.app import ServerConfig, ServerRuntime, serve
    from tests.streampunct.conftest import TEST_WINDOW, FakeEngine

    normalizer = BlockingNormalizer("million")
    server = await serve(ServerConfig(host="127.0.0.1", port=0),
                         ServerRuntime(FakeEngine, aligner, TEST_WINDOW, "fake", normalizer=normalizer))

    async def session(text: str) -> tuple[Transcript, list[str]]:
        client = await StreamClient.connect(server.url, right_context=1, max_delay_ms=60_000, itn=True)
        for word in text.split():
            await client.send_words([word])
        await client.end()
        transcript, texts = Transcript(), []
        async for message in client:
            transcript.apply(message)
            texts += [message.text] if isinstance(message, Final) else []
        return transcript, texts

    try:
        await server.wait_ready()
        slow = asyncio.create_task(session("it costs twenty million dollars and we pay it today"))
        assert await asyncio.to_thread(normalizer.entered.wait, 30)  # its writer waits for the grammars
        other, other_texts = await session("we paid twenty five dollars for it")  # served to its end meanwhile
        assert other.ended_words == 7
        assert _unmarked(" ".join(t for t in other_texts if t)) == "we paid $25 for it"
        assert not slow.done()
        normalizer.release.set()
        transcript, texts = await slow
        assert transcript.words == "it costs twenty million dollars and we pay it today".split()
        assert _unmarked(" ".join(t for t in texts if t)) == "it costs 20 million dollars and we pay it today"
    finally:
        normalizer.release.set()
        await server.shutdown()


def _itn_waits(server) -> tuple[int, float]:
    """The server's ``streampunct_itn_wait_seconds`` histogram: (count, sum)."""
    from benchmarks.load_metrics import parse_metrics

    samples = parse_metrics(server.metrics.render().decode())
    return (int(samples[("streampunct_itn_wait_seconds_count", ())]),
            samples[("streampunct_itn_wait_seconds_sum", ())])


class AtOnceBlockingNormalizer(BlockingNormalizer):
    """:class:`BlockingNormalizer` that honours ``without_waiting`` as the grammars' normalizers
    do (``answers_at_once``): words with no number word are answered at once, others would
    wait. ``asked`` records every run it was asked about outside ``without_waiting``;
    :meth:`wait_asked` waits (in a thread) until the runs asked so far satisfy a condition."""

    answers_at_once = True

    def __init__(self, word: str) -> None:
        super().__init__(word)
        import threading

        self.asked: list[tuple[str, ...]] = []
        self._asked_more = threading.Condition()

    def wait_asked(self, condition, timeout: float = 30.0) -> bool:
        with self._asked_more:
            return self._asked_more.wait_for(lambda: condition(self.asked), timeout)

    def phrases(self, words, *, first=0, until=None):
        from streampunct.text.written_form import WouldWait, waiting_allowed
        from tests.streampunct.written_fakes import NUMBERS

        if waiting_allowed():
            with self._asked_more:
                self.asked.append(tuple(words))
                self._asked_more.notify_all()
        elif any(w in NUMBERS or w == "million" for w in words):
            raise WouldWait(" ".join(words))
        return super().phrases(words, first=first, until=until)


async def test_number_free_finals_do_not_wait_behind_other_sessions_grammars(aligner):
    """Every thread of the server's written executor is held by a session whose grammars are
    slow (a long number); a session without numbers is still served to its end meanwhile (its
    texts are written in place, never queued behind the grammars), and its words never reach
    the normalizer. Fails when every itn text goes through the executor."""
    import asyncio

    from streampunct.client.stream_client import StreamClient, Transcript
    from streampunct.server.app import ServerConfig, ServerRuntime, serve
    from tests.streampunct.conftest import TEST_WINDOW, FakeEngine

    normalizer = AtOnceBlockingNormalizer("million")
    server = await serve(ServerConfig(host="127.0.0.1", port=0),
                         ServerRuntime(FakeEngine, aligner, TEST_WINDOW, "fake", normalizer=normalizer))

    async def session(text: str) -> tuple[Transcript, list[str]]:
        client = await StreamClient.connect(server.url, right_context=1, max_delay_ms=60_000, itn=True)
        for word in text.split():
            await client.send_words([word])
        await client.end()
        transcript, texts = Transcript(), []
        async for message in client:
            transcript.apply(message)
            texts += [message.text] if isinstance(message, Final) else []
        return transcript, texts

    slow: list[asyncio.Task] = []
    try:
        await server.wait_ready()
        threads = server._written_executor._max_workers
        slow = [asyncio.create_task(session("it costs twenty million dollars and we pay it today"))
                for _ in range(threads + 1)]
        # every thread is waiting for the grammars
        assert await asyncio.to_thread(
            normalizer.wait_asked, lambda asked: sum(1 for words in asked if "million" in words) >= threads)
        waiting_since = asyncio.get_running_loop().time()  # at the latest: `threads` texts wait
        asked, waits_before = len(normalizer.asked), _itn_waits(server)
        other, other_texts = await asyncio.wait_for(session("so we went home and slept until noon"), 10)
        assert other.ended_words == 8
        assert _unmarked(" ".join(t for t in other_texts if t)) == "so we went home and slept until noon"
        assert len(normalizer.asked) == asked  # never reached the normalizer
        assert not any(task.done() for task in slow)
        assert _itn_waits(server) == waits_before  # the number-free texts waited for nothing
        held = asyncio.get_running_loop().time() - waiting_since
        normalizer.release.set()
        for transcript, texts in await asyncio.gather(*slow):
            assert transcript.ended_words == 10
            assert _unmarked(" ".join(t for t in texts if t)) == "it costs 20 million dollars and we pay it today"
        # /metrics: every slow session's "million" text waited, `threads` of them all the while
        waits, seconds = _itn_waits(server)
        assert waits >= waits_before[0] + threads + 1 and seconds >= waits_before[1] + threads * held
    finally:
        normalizer.release.set()
        await asyncio.gather(*slow, return_exceptions=True)
        await server.shutdown()


async def test_a_client_leaving_does_not_cancel_a_search_another_session_shares(aligner):
    """Two sessions wait for the same grammar search (a worker's future, shared by the stretch
    cache) while it is still queued; one client leaves. The other still gets its written text
    and its end: the leaving session's cancellation must not cancel the shared search."""
    import asyncio
    import concurrent.futures
    import json
    import threading

    from websockets.asyncio.client import connect

    from streampunct.server.app import ServerConfig, ServerRuntime, serve
    from streampunct.text import itn
    from streampunct.text.written_form import Phrase
    from tests.streampunct.conftest import TEST_WINDOW, FakeEngine
    from tests.streampunct.fakes import until

    release = threading.Event()

    def search(words):
        if "ninety" in words:
            assert release.wait(30), "never released"
        return tuple(Phrase(i, i + 2, "25", True) for i in range(len(words) - 1)
                     if words[i:i + 2] == ("twenty", "five"))

    pool = concurrent.futures.ThreadPoolExecutor(1)  # one search at a time: later ones stay queued
    fetched = threading.Semaphore(0)

    class SharedSearches:
        answers_at_once = True

        def __init__(self):
            self.cache = itn._StretchCache(search, 64, submit=lambda words: pool.submit(search, words))
            fetch = self.cache.fetch

            def counted(words):
                future = fetch(words)
                fetched.release()
                return future
            self.cache.fetch = counted

        def phrases(self, words, *, first=0, until=None):
            out = []
            for a, b in itn._stretches(words, first, until):
                out += [Phrase(p.start + a, p.end + a, p.text, p.whole) for p in self.cache(tuple(words[a:b]))]
            return out

    server = await serve(ServerConfig(host="127.0.0.1", port=0),
                         ServerRuntime(FakeEngine, aligner, TEST_WINDOW, "fake", normalizer=SharedSearches()))

    async def open_stream(words, last):
        ws = await connect(server.url)
        await ws.recv()  # ready
        await ws.send(json.dumps({"type": "config", "itn": True, "right_context": 0, "max_delay_ms": 600_000}))
        await ws.recv()
        await ws.send(json.dumps({"type": "words", "words": words}))
        await ws.send(json.dumps({"type": last}))
        return ws

    async def fetches(n):
        for _ in range(n):
            assert await asyncio.to_thread(fetched.acquire, True, 30)

    try:
        await server.wait_ready()
        holder = await open_stream(["ninety", "nine"], "end")  # holds the one search worker
        await fetches(1)
        leaving = await open_stream(["twenty", "five"], "flush")  # its search queued behind
        await fetches(1)
        staying = await open_stream(["twenty", "five"], "end")  # shares the queued search
        await fetches(1)
        leaving.transport.abort()
        await until(lambda: len(server.sessions) < 3)  # the leaving one is gone
        release.set()
        messages = []
        async for frame in staying:
            messages.append(json.loads(frame))
        assert [m["type"] for m in messages] == ["final", "end"] and messages[0]["text"] == "25"
        assert staying.close_code == 1000
        await holder.close()
    finally:
        release.set()
        await server.shutdown()
        pool.shutdown(wait=False, cancel_futures=True)


RESUME_PIECES = ["it costs", "twenty five dollars", "seven hundred", "twenty", "today", "ok", "we flew to",
                 "new york", "new", "the united states of america", "the united states", "of", "and", "york",
                 "i", "five", "dollars"]


@settings(max_examples=150, deadline=None)
@given(pieces=st.lists(st.sampled_from(RESUME_PIECES), min_size=1, max_size=10), cut=st.integers(0, 30),
       right_context=st.integers(0, 3), tell=st.booleans(), itn=st.booleans())
def test_a_stream_cut_after_any_final_and_resumed_shows_the_text_of_the_unbroken_one(
        pieces, cut, right_context, tell, itn):
    """A connection lost after the finals up to some word, and the stream resumed on a new one
    (the context: every final word; the rest sent again): the texts of the finals before the
    cut and after it read as those of the unbroken stream, whether the client passes the last
    final's ``held`` on or leaves the server to infer it (a client that knows only the
    protocol), with numbers and lexicon phrases held across the cut."""
    words = " ".join(pieces).split()
    lexicon = (*LONG_LEXICON, ("new york", "New York"), ("united states", "U.S."))
    options = SessionOptions(right_context=right_context, max_delay_ms=60_000, itn=itn, lexicon=lexicon)
    written = WrittenForms(SERVER_LEXICON, NumberWordsNormalizer())
    whole = Driver(options, written=written)
    for w in words:
        whole.send(WordsMessage((Word(w),)))
    whole.send(EndRequest())
    unbroken = " ".join(f.text for f in whole.finals() if f.text)

    before = Driver(options, written=written)
    finals: list[Final] = []
    for w in words:
        before.send(WordsMessage((Word(w),)))
        finals = before.finals()
        if len(finals) > cut:
            break
    finals = finals[:cut + 1] if len(finals) > cut else finals
    context = tuple(PunctuatedWord(x.w, x.p) for f in finals for x in f.words)
    after = Driver(options, written=written)
    held = finals[-1].held if tell and finals else (0 if tell else None)
    after.send(ResumeRequest(len(context), context, ConfigRequest(right_context=right_context, max_delay_ms=60_000,
                                                                  itn=itn, lexicon=lexicon), held=held))
    for w in words[len(context):]:
        after.send(WordsMessage((Word(w),)))
    after.send(EndRequest())
    assert [x.w for f in finals + after.finals() for x in f.words] == words
    assert " ".join(f.text for f in finals + after.finals() if f.text) == unbroken


def test_a_partial_before_the_words_sent_again_does_not_decide_the_held_words():
    """With partials, a hypothesis ("your") may come before the words sent again after a resume
    without ``held``: the held words are inferred from words sent ("york"), not from it."""
    options = SessionOptions(right_context=1, max_delay_ms=60_000, partials=True)
    driver = Driver(options)
    for w in "we flew to new york".split():
        driver.send(WordsMessage((Word(w),)))
    context = tuple(PunctuatedWord(w.w, w.p) for f in driver.finals() for w in f.words)
    assert [w.w for w in context] == ["we", "flew", "to", "new"] and driver.finals()[-1].held == 1
    resumed = Driver(options)
    resumed.send(ResumeRequest(len(context), context, ConfigRequest(right_context=1, partials=True)))
    resumed.send(HypothesisMessage((Word("your"),)))
    resumed.stream("york today")
    assert " ".join(f.text for f in resumed.finals() if f.text) == "New York, today."


@pytest.mark.parametrize("held", [None, 1])
def test_a_held_word_a_flush_wrote_after_a_resume_is_not_held_again_by_a_config(held):
    """Resume (context ending "twenty", held or to infer), ``flush`` (writes "20"), then a
    ``config`` before any word: the new options' renderer carries over what is still held
    (nothing), so "five dollars" is not read with "twenty" again ("$25")."""
    from streampunct.core.wire import FlushRequest

    options = SessionOptions(right_context=3, max_delay_ms=60_000, itn=True)
    driver = Driver(options, written=WrittenForms(SERVER_LEXICON, NumberWordsNormalizer()))
    context = tuple(PunctuatedWord(w, "") for w in ("it", "costs", "twenty"))
    driver.send(ResumeRequest(3, context, ConfigRequest(right_context=3, itn=True), held=held))
    driver.send(FlushRequest())
    driver.send(ConfigRequest(right_context=3, itn=True, capitalize=False))
    driver.stream("five dollars today")
    assert [f.text for f in driver.finals() if f.text] == ["20", "five dollars today."]
