"""Resuming a stream (protocol "Resuming a stream"): the codec and the sans-I/O rules."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streampunct.core.options import SessionOptions
from streampunct.core.stream_state import StreamState
from streampunct.core.windowing import WindowConfig
from streampunct.core.wire import (
    MAX_START,
    ConfigApplied,
    ConfigRequest,
    EndRequest,
    Error,
    ErrorCode,
    Final,
    FlushRequest,
    HypothesisMessage,
    Limits,
    ProtocolError,
    PunctuatedWord,
    Ready,
    Resumed,
    ResumeRequest,
    Word,
    WordsMessage,
    decode,
    decode_server,
    encode,
)
from tests.streampunct.fakes import FakeAligner
from tests.streampunct.test_session_protocol import WINDOW, Driver

# -- codec ---------------------------------------------------------------------


def test_resume_round_trips_with_and_without_config():
    context = (PunctuatedWord("so", ""), PunctuatedWord("there", "."))
    for message in (
        ResumeRequest(7, context, ConfigRequest(right_context=2, max_delay_ms=500, partials=True, capitalize=True)),
        ResumeRequest(2, context),
        ResumeRequest(0),
    ):
        assert decode(encode(message)) == message
    wire = json.loads(encode(ResumeRequest(7, context, ConfigRequest(right_context=2))))
    assert wire == {"type": "resume", "start": 7, "context": [{"w": "so", "p": ""}, {"w": "there", "p": "."}],
                    "config": {"right_context": 2}}


def test_resumed_round_trips_and_ready_announces_max_context_words():
    resumed = Resumed(12, SessionOptions(2, 500, True, False))
    assert decode_server(encode(resumed)) == resumed
    assert json.loads(encode(resumed)) == {"type": "resumed", "start": 12, "config": resumed.config.to_json()}
    ready = Ready("s", "m", SessionOptions(), limits=Limits(max_context_words=25))
    assert json.loads(encode(ready))["limits"]["max_context_words"] == 25
    assert decode_server(encode(ready)).limits.max_context_words == 25
    # A server that does not announce it leaves the field out (not null).
    assert "max_context_words" not in json.loads(encode(Ready("s", "m", SessionOptions(), limits=Limits())))["limits"]


def test_resume_context_words_are_kept_as_sent():
    message = decode('{"type": "resume", "start": 3, "context": [{"w": "Hello,", "p": ","}, {"w": "x", "p": "?"}],'
                     ' "extra": 1}')
    assert message == ResumeRequest(3, (PunctuatedWord("Hello,", ","), PunctuatedWord("x", "?")))


GOOD_CONTEXT = '[{"w": "a", "p": ""}]'


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        ('{"type": "resume", "context": []}', "'start' must be an integer"),
        ('{"type": "resume", "start": "3", "context": []}', "'start' must be an integer"),
        ('{"type": "resume", "start": true, "context": []}', "'start' must be an integer"),
        ('{"type": "resume", "start": 2.0, "context": []}', "'start' must be an integer"),
        ('{"type": "resume", "start": null, "context": []}', "'start' must be an integer"),
        ('{"type": "resume", "start": -1, "context": []}', "'start' must be between 0 and"),
        (f'{{"type": "resume", "start": {MAX_START + 1}, "context": []}}', "'start' must be between 0 and"),
        ('{"type": "resume", "start": 3}', "'context' must be a list"),
        ('{"type": "resume", "start": 3, "context": {"w": "a", "p": ""}}', "'context' must be a list"),
        ('{"type": "resume", "start": 3, "context": ["a"]}', "context[0] must be an object"),
        ('{"type": "resume", "start": 3, "context": [{"p": ""}]}', "context[0] must be an object"),
        ('{"type": "resume", "start": 3, "context": [{"w": 1, "p": ""}]}', "context[0] must be an object"),
        ('{"type": "resume", "start": 3, "context": [{"w": "a"}]}', "context[0] must be an object"),
        ('{"type": "resume", "start": 3, "context": [{"w": "a", "p": null}]}', "context[0] must be an object"),
        ('{"type": "resume", "start": 3, "context": [{"w": "a", "p": ""}, {"w": "b", "p": "!"}]}',
         "context[1].p must be one of"),
        ('{"type": "resume", "start": 0, "context": ' + GOOD_CONTEXT + "}", "only 0 words come before"),
        ('{"type": "resume", "start": 1, "context": [], "config": [1]}', "'config' must be an object"),
        ('{"type": "resume", "start": 1, "context": [], "config": null}', "'config' must be an object"),
        ('{"type": "resume", "start": 1, "context": [], "config": {"right_context": -1}}',
         "config: 'right_context' must be between"),
        ('{"type": "resume", "start": 1, "context": [], "config": {"max_delay_ms": "5"}}',
         "config: 'max_delay_ms' must be an integer"),
        ('{"type": "resume", "start": 1, "context": [], "config": {"partials": 1}}',
         "config: 'partials' must be true or false"),
        ('{"type": "resume", "start": 1, "context": [], "config": {"capitalize": null}}',
         "config: 'capitalize' must be true or false"),
    ],
)
def test_malformed_resume_is_a_bad_request(frame, why):
    with pytest.raises(ProtocolError) as info:
        decode(frame)
    assert info.value.code is ErrorCode.BAD_REQUEST
    assert why in info.value.message and info.value.message.startswith("resume: ")


def test_resume_beyond_the_message_limits_is_too_large():
    limits = Limits(max_words_per_message=2, max_word_chars=5)
    many = json.dumps({"type": "resume", "start": 9, "context": [{"w": "a", "p": ""}] * 3})
    long = json.dumps({"type": "resume", "start": 9, "context": [{"w": "abcdef", "p": ""}]})
    for frame, why in ((many, "3 context words; the limit is 2"), (long, "6 characters; the limit is 5")):
        with pytest.raises(ProtocolError) as info:
            decode(frame, limits)
        assert info.value.code is ErrorCode.TOO_LARGE and why in info.value.message


def test_resume_config_goes_through_the_config_validation(monkeypatch):
    """One function validates the options of ``config`` and of ``resume``'s ``config``."""
    import streampunct.core.wire as protocol

    seen = []
    real = protocol.decode_config

    def spy(obj, limits=protocol.DEFAULT_LIMITS):
        seen.append(dict(obj))
        return real(obj, limits)

    monkeypatch.setattr(protocol, "decode_config", spy)
    decode('{"type": "config", "right_context": 1}')
    decode('{"type": "resume", "start": 0, "context": [], "config": {"right_context": 2}}')
    assert seen == [{"type": "config", "right_context": 1}, {"right_context": 2}]


# -- the session rules -----------------------------------------------------------


def ctx(*pairs: tuple[str, str]) -> tuple[PunctuatedWord, ...]:
    return tuple(PunctuatedWord(w, p) for w, p in pairs)


def test_resume_continues_indices_and_announces_its_options():
    driver = Driver(SessionOptions(right_context=1, max_delay_ms=60_000))
    assert driver.out[0].limits.max_context_words == WINDOW.left  # derived from the window
    [resumed] = driver.send(ResumeRequest(40, ctx(("t1x1", ""), ("t1x2", ".")),
                                          ConfigRequest(right_context=0, capitalize=True)))
    assert resumed == Resumed(40, SessionOptions(0, 60_000, False, True))
    [final] = driver.send(WordsMessage((Word("t2x3"), Word("t1x4"))))
    assert isinstance(final, Final) and final.start == 40 and [w.w for w in final.words] == ["t2x3", "t1x4"]
    replies = driver.send(EndRequest())
    assert replies[-1].type == "end" and replies[-1].words == 42


def test_words_past_the_largest_exact_index_are_refused_whole():
    driver = Driver(SessionOptions(right_context=0))
    driver.send(ResumeRequest(MAX_START - 1))
    [error] = driver.send(WordsMessage((Word("t1x1"), Word("t1x2"), Word("t1x3"))))
    assert error == Error(ErrorCode.BAD_REQUEST, f"words: this message would take word indices past {MAX_START}, "
                                                 "the largest exact in JSON; nothing was taken")
    assert driver.protocol.n_words == MAX_START - 1
    [applied] = driver.send(ConfigRequest(right_context=0))  # nothing was taken: options may still change
    assert isinstance(applied, ConfigApplied)
    [final] = driver.send(WordsMessage((Word("t1x1"), Word("t1x2", 1.0, 1.5))))  # up to MAX_START itself
    assert final.start == MAX_START - 1 and [(w.w, w.start) for w in final.words] == [("t1x1", None), ("t1x2", 1.0)]
    [error] = driver.send(WordsMessage((Word("t1x4"),)))
    assert error.code is ErrorCode.BAD_REQUEST and driver.protocol.n_words == MAX_START + 1


@pytest.mark.parametrize(("last_mark", "capital"), [(".", True), ("?", True), (",", False), ("", False)])
def test_sentence_start_casing_continues_from_the_context(last_mark, capital):
    driver = Driver(SessionOptions(right_context=0, capitalize=True))
    driver.send(ResumeRequest(5, ctx(("t1x1", ""), ("t1x2", last_mark))))
    [final] = driver.send(WordsMessage((Word("t1x3"),)))
    assert final.text[0].isupper() is capital, final.text


@pytest.mark.parametrize(("context", "capital"), [
    ((("t1x1", "."), ("\U0001f600", "")), True),   # the emoji normalizes to nothing: "t1x1." ends the context
    ((("t1x1", ""), ("\U0001f600", ".")), False),  # a mark on no word ends no sentence
    ((("", ""),), True),                             # no word at all: a stream's start
])
def test_the_sentence_start_after_a_resume_follows_the_last_word_normalization_keeps(context, capital):
    driver = Driver(SessionOptions(right_context=0, capitalize=True))
    driver.send(ResumeRequest(5, ctx(*context)))
    [final] = driver.send(WordsMessage((Word("t1x3"),)))
    assert final.text[0].isupper() is capital, final.text


def test_resume_without_context_starts_a_sentence():
    driver = Driver(SessionOptions(right_context=0, capitalize=True))
    driver.send(ResumeRequest(5))
    [final] = driver.send(WordsMessage((Word("t1x3"),)))
    assert final.start == 5 and final.text[0].isupper()


@pytest.mark.parametrize("first", [
    WordsMessage((Word("t1x1"),)), WordsMessage(()), ConfigRequest(right_context=2), HypothesisMessage(()),
    FlushRequest(), ResumeRequest(3),
])
def test_resume_is_refused_unless_it_is_the_first_message(first):
    driver = Driver(SessionOptions(right_context=1, partials=True))
    driver.send(first)
    before = (driver.protocol.options, driver.protocol.n_words, driver.protocol.n_final)
    [error] = driver.send(ResumeRequest(9, ctx(("t1x7", "."))))
    assert error == Error(ErrorCode.BAD_REQUEST, "resume is only allowed as the first message of a connection")
    assert (driver.protocol.options, driver.protocol.n_words, driver.protocol.n_final) == before


def test_a_rejected_resume_leaves_the_connection_fresh_and_a_config_may_follow_resume():
    """The contract allows ``config`` before the first ``words``; after a ``resume`` it
    changes the options and keeps the cut (the next word takes ``start``, the context stays)."""
    driver = Driver(SessionOptions(right_context=1, capitalize=True))
    [error] = driver.frame('{"type": "resume", "start": -1, "context": []}')
    assert error.code is ErrorCode.BAD_REQUEST
    [resumed] = driver.frame('{"type": "resume", "start": 4, "context": [{"w": "t1x7", "p": ","}], '
                             '"config": {"right_context": 3}}')
    assert resumed == Resumed(4, SessionOptions(3, 2000, False, True))
    [applied] = driver.frame('{"type": "config", "right_context": 0}')
    assert applied == ConfigApplied(SessionOptions(0, 2000, False, True))
    [final] = driver.send(WordsMessage((Word("t1x3"),)))
    assert final.start == 4 and not final.text[0].isupper()  # after "t1x7,": mid-sentence, as resumed
    assert driver.protocol.n_words == 5
    [refused] = driver.frame('{"type": "config", "right_context": 1}')
    assert refused.code is ErrorCode.BAD_REQUEST and "before the first words" in refused.message
    assert driver.protocol.options.right_context == 0


def test_the_server_uses_at_most_max_context_words():
    """Only the last ``max_context_words`` context words enter the stream (as left context)."""
    driver = Driver(SessionOptions(right_context=0))
    context = ctx(*((f"t1x{k}", "") for k in range(1, 11)))
    driver.send(ResumeRequest(10, context))
    assert driver.protocol.state.words == [w.w for w in context[-WINDOW.left:]]
    # A server that announces a smaller number keeps fewer.
    from streampunct.core.session_protocol import SessionProtocol

    small = SessionProtocol(aligner=FakeAligner(), window=WINDOW, limits=Limits(max_context_words=2))
    assert small.ready().limits.max_context_words == 2
    small.receive(ResumeRequest(10, context), 0.0)
    assert small.state.words == ["t1x9", "t1x10"] and small.n_final == 10


def test_context_words_are_left_context_of_the_first_window():
    driver = Driver(SessionOptions(right_context=0))
    driver.send(ResumeRequest(3, ctx(("t1x1", ""), ("t2x2", ""), ("t1x3", "."))))
    request = driver.protocol.next_request(driver.now)
    assert request is None  # nothing to decide before new words
    driver.protocol.receive(WordsMessage((Word("t1x4"),)), driver.now)
    request = driver.protocol.next_request(driver.now)
    aligner = FakeAligner()
    context_ids = [i for w in ("t1x1", "t2x2", "t1x3") for i in aligner.word_ids(w)]
    assert list(request.input_ids[1:-1]) == [*context_ids, *aligner.word_ids("t1x4")]
    assert request.first_word == 3 and request.n_words == 1  # the context is never decided again


def test_stream_state_resume_needs_a_fresh_state():
    state = StreamState(FakeAligner(), WINDOW, SessionOptions(right_context=1))
    with pytest.raises(ValueError, match="2 context words, but only 1"):
        state.resume(1, ["t1x1", "t1x2"], 0.0)
    state.feed(["t1x1"], 0.0)
    with pytest.raises(ValueError, match="fresh"):
        state.resume(5, [], 0.0)


# -- the property: a stream cut anywhere and resumed ------------------------------


def _vocab_word(n_tokens: int, serial: int) -> str:
    return FakeAligner.word(n_tokens, serial)


@st.composite
def streams(draw):
    """Chunks of FakeAligner words (1-3 tokens), a cut after one chunk, and how many of
    the final messages produced before the cut never reached the client."""
    n_chunks = draw(st.integers(2, 14))
    chunks, serial = [], 0
    for _ in range(n_chunks):
        chunk = []
        for _ in range(draw(st.integers(1, 5))):
            serial += 1
            chunk.append(_vocab_word(draw(st.integers(1, 3)), serial))
        chunks.append(chunk)
    cut = draw(st.integers(0, n_chunks - 1))
    lost = draw(st.integers(0, 2))
    rc = draw(st.integers(0, 4))
    delay = draw(st.sampled_from([None, 1500]))  # None: no delay bound within the stream
    context_words = draw(st.sampled_from([None, 0, 1, 3]))  # None: as many as the server uses
    return chunks, cut, lost, rc, delay, context_words


def _run(driver: Driver, chunks, times) -> None:
    for chunk, t in zip(chunks, times, strict=True):
        driver.send(WordsMessage(tuple(Word(w) for w in chunk)), dt=t - driver.now)


@settings(max_examples=150, deadline=None)
@given(streams())
def test_a_stream_cut_anywhere_and_resumed_delivers_every_word_once(case):
    chunks, cut, lost, rc, delay, context_words = case
    window = WindowConfig(size=24, left=4, right=3)
    options = SessionOptions(right_context=rc, max_delay_ms=delay if delay is not None else 600_000,
                             capitalize=True)
    times = [1.0 * (k + 1) for k in range(len(chunks))]
    words = [w for c in chunks for w in c]

    whole = Driver(options, window)
    _run(whole, chunks, times)
    whole.send(EndRequest(), dt=1.0)
    expected = [(w.w, w.p) for m in whole.of(Final) for w in m.words]
    assert [w for w, _ in expected] == words

    # Connection 1: the chunks up to the cut; the last ``lost`` finals never arrive.
    first = Driver(options, window)
    _run(first, chunks[: cut + 1], times[: cut + 1])
    finals = first.of(Final)
    received = finals[: max(0, len(finals) - lost)]
    got = [(w.w, w.p) for m in received for w in m.words]
    start = len(got)
    keep = window.left if context_words is None else context_words
    context = tuple(PunctuatedWord(w, p) for w, p in got[-keep:]) if keep else ()

    # Connection 2 (another server): resume, send again every word without a final, go on.
    second = Driver(options, window)
    second.advance(first.now)
    [resumed] = second.send(ResumeRequest(start, context, ConfigRequest(rc, options.max_delay_ms, False, True)))
    assert resumed == Resumed(start, options)
    second.send(WordsMessage(tuple(Word(w) for w in words[start : sum(map(len, chunks[: cut + 1]))])))
    _run(second, chunks[cut + 1 :], times[cut + 1 :])
    second.send(EndRequest(), dt=1.0)
    after = second.of(Final)

    # Exactly once, in order, indices continuing.
    assert [m.start for m in after] == [start + sum(len(x.words) for x in after[:k]) for k in range(len(after))]
    delivered = got + [(w.w, w.p) for m in after for w in m.words]
    assert [w for w, _ in delivered] == words
    assert second.out[-1].words == len(words)  # the server's end counts the whole stream
    # Same labels as the uninterrupted stream when nothing was decided twice under another
    # schedule (no final lost, no delay deadline) and the context covers the window's left.
    if lost == 0 and delay is None and (context_words is None or context_words >= min(start, window.left)):
        assert delivered == expected
    # Sentence-start casing continues from the context (none: the stream starts afresh).
    if after:
        opens = not context or context[-1].p in (".", "?")
        assert after[0].text[0].isupper() == opens, after[0].text


def test_resume_carries_every_option_a_config_can():
    """A client resumes with its session's effective options (``SessionOptions.to_json``): they
    go through ``decode_config`` and come back as the same options, new ones (itn, lexicon) too."""
    from dataclasses import fields

    from streampunct.core.wire import decode_config

    defaults = SessionOptions()
    changed = {"right_context": 7, "max_delay_ms": 1234, "partials": True, "capitalize": True, "itn": True,
               "lexicon": (("new york", "New York"),)}
    options = SessionOptions(**{f.name: changed.get(f.name, getattr(defaults, f.name)) for f in fields(defaults)})
    request = ResumeRequest(3, (), decode_config(options.to_json()))
    assert decode(encode(request)).config.apply_to(defaults) == options
