"""The sans-I/O session rules, driven without sockets, clocks or engines."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streampunct.core.options import SessionOptions
from streampunct.core.session_protocol import SessionProtocol
from streampunct.core.windowing import WindowConfig
from streampunct.core.wire import (
    NULL_TIME,
    ConfigApplied,
    Ended,
    EndRequest,
    Error,
    ErrorCode,
    Final,
    Flushed,
    FlushRequest,
    HypothesisMessage,
    Partial,
    Ready,
    Word,
    WordsMessage,
    encode_frame,
)
from streampunct.labels import ID_TO_MARK
from streampunct.text.normalize import render
from tests.streampunct.fakes import FakeAligner

WINDOW = WindowConfig(size=24, left=4, right=3)


def context_infer(input_ids: np.ndarray) -> np.ndarray:
    """A fake model whose label for a token depends on two tokens each side.

    Any token that leaked into a window (a hypothesis word in a final window)
    would change the labels of the words next to it.
    """
    x = np.asarray(input_ids)[None, :]
    padded = np.pad(x, ((0, 0), (2, 2)))
    t = x.shape[1]
    mixed = sum((k + 1) * padded[:, k : k + t] for k in range(5))
    logits = np.zeros((*x.shape, 4), dtype=np.float32)
    np.put_along_axis(logits, (mixed % 4)[..., None], 1.0, axis=-1)
    return logits[0]


class Driver:
    """Runs a :class:`SessionProtocol` to completion after each input, on a simulated clock.

    The max-delay timer is simulated too: before an input at time ``t``, every
    deadline up to ``t`` fires first, as the server's ``loop.call_at`` would.
    """

    def __init__(self, options: SessionOptions, window: WindowConfig = WINDOW) -> None:
        self.protocol = SessionProtocol(aligner=FakeAligner(), window=window, defaults=options)
        self.now = 0.0
        self.out: list = [self.protocol.ready()]

    def _pump(self, now: float) -> None:
        while (request := self.protocol.next_request(now)) is not None:
            self.out.extend(self.protocol.apply(request, context_infer(request.input_ids)))

    def advance(self, to: float) -> None:
        while (deadline := self.protocol.next_deadline()) is not None and deadline <= to:
            self._pump(deadline)
        self.now = to

    def send(self, message, dt: float = 0.0) -> list:
        self.advance(self.now + dt)
        first = len(self.out)
        self.out.extend(self.protocol.receive(message, self.now))
        self._pump(self.now)
        return self.out[first:]

    def frame(self, frame: str, dt: float = 0.0) -> list:
        self.advance(self.now + dt)
        first = len(self.out)
        self.out.extend(self.protocol.receive_frame(frame, self.now))
        self._pump(self.now)
        return self.out[first:]

    def of(self, kind) -> list:
        return [m for m in self.out if isinstance(m, kind)]


def words(*specs: tuple[int, int]) -> list[str]:
    return [FakeAligner.word(n, serial) for n, serial in specs]


def test_ready_first_and_config_only_before_words():
    driver = Driver(SessionOptions(right_context=1))
    assert isinstance(driver.out[0], Ready) and driver.out[0].config == SessionOptions(right_context=1)
    [applied] = driver.frame('{"type": "config", "partials": true, "capitalize": true}')
    assert applied == ConfigApplied(SessionOptions(1, 2000, True, True))
    driver.send(WordsMessage((Word("t1x1"),)))
    [error] = driver.frame('{"type": "config", "right_context": 0}')
    assert isinstance(error, Error) and error.code is ErrorCode.BAD_REQUEST
    assert driver.protocol.options == SessionOptions(1, 2000, True, True)


def test_a_config_while_a_hypothesis_partial_is_in_flight_drops_that_partial():
    # Config is allowed until the first words message, hypotheses included, so a
    # partial of the old options can be in flight when the options change.
    driver = Driver(SessionOptions(right_context=1, partials=True))
    protocol = driver.protocol
    protocol.receive(HypothesisMessage((Word("t1x1"), Word("t2x2"))), 0.0)
    stale = protocol.next_request(0.0)
    assert stale is not None and stale.partial and stale.hypothesis == ("t1x1", "t2x2")
    [applied] = protocol.receive_frame('{"type": "config", "right_context": 2}', 0.0)
    assert applied == ConfigApplied(SessionOptions(2, 2000, True, False))
    assert protocol.apply(stale, context_infer(stale.input_ids)) == []  # stale: dropped, no error
    fresh = protocol.next_request(0.0)
    assert fresh is not None and fresh is not stale and fresh.hypothesis == ("t1x1", "t2x2")
    [partial] = protocol.apply(fresh, context_infer(fresh.input_ids))
    assert isinstance(partial, Partial) and [w.w for w in partial.hypothesis] == ["t1x1", "t2x2"]
    replies = driver.send(WordsMessage((Word("t1x3"), Word("t3x4"))))
    replies += driver.send(EndRequest())
    finals = [w for m in replies if isinstance(m, Final) for w in m.words]
    assert [w.w for w in finals] == ["t1x3", "t3x4"] and replies[-1] == Ended(2)


def test_a_config_that_turns_partials_off_drops_the_partial_in_flight():
    driver = Driver(SessionOptions(right_context=1, partials=True))
    protocol = driver.protocol
    protocol.receive(HypothesisMessage((Word("t1x1"),)), 0.0)
    stale = protocol.next_request(0.0)
    assert stale is not None and stale.partial
    protocol.receive_frame('{"type": "config", "partials": false}', 0.0)
    assert protocol.apply(stale, context_infer(stale.input_ids)) == []
    assert protocol.next_request(0.0) is None


def test_flush_answers_after_its_finals_and_end_closes_normally():
    driver = Driver(SessionOptions(right_context=5, max_delay_ms=60_000))
    driver.send(WordsMessage(tuple(Word(w) for w in words((1, 1), (2, 2), (1, 3)))))
    assert not driver.of(Final)
    replies = driver.send(FlushRequest())
    assert [type(m) for m in replies] == [Final, Flushed] and replies[1] == Flushed(3)
    assert driver.send(FlushRequest()) == [Flushed(3)]  # nothing pending: answered at once
    driver.send(WordsMessage((Word("t1x4"),)))
    replies = driver.send(EndRequest())
    assert [type(m) for m in replies] == [Final, Ended] and replies[-1] == Ended(4)
    assert driver.protocol.finished and driver.protocol.close_code == 1000
    assert driver.frame('{"type": "words", "words": ["late"]}') == []  # ignored after end


@pytest.mark.parametrize("bad", [
    '{"type": "nope"}',  # refused by the decoder
    '{"type": "words", "words": [1]}',
    '{"type": "config", "right_context": 0}',  # refused by the protocol: config after words
    '{"type": "resume", "start": 0, "context": []}',  # resume not first
])
def test_an_error_never_overtakes_the_answer_owed_to_an_earlier_flush(bad):
    """Answers come in the order of the messages they answer: a message refused after a
    ``flush`` (read before that flush's words were run) gets its ``error`` after the flush's
    finals and ``flushed``; the stream goes on as if it had not been sent."""
    protocol = SessionProtocol(aligner=FakeAligner(), window=WINDOW,
                               defaults=SessionOptions(right_context=5, max_delay_ms=60_000))
    def run() -> list:
        out = []
        while (request := protocol.next_request(0.0)) is not None:
            out += protocol.apply(request, context_infer(request.input_ids))
        return out

    out = protocol.receive(WordsMessage(tuple(map(Word, words((1, 1), (2, 2))))), 0.0)
    out += protocol.receive(FlushRequest(), 0.0)
    out += protocol.receive_frame(bad, 0.0)
    out += protocol.receive(WordsMessage((Word("t1x3"),)), 0.0)
    out += protocol.receive_frame(bad, 0.0)  # still behind the flush
    assert out == []
    out += run()
    assert [m.type for m in out] == ["final", "flushed", "error", "error"] and out[1] == Flushed(2)
    assert out[2] == out[3] and out[2].code is ErrorCode.BAD_REQUEST
    [error] = protocol.receive_frame(bad, 0.0)  # no answer owed: at once
    assert error == out[2]
    out = protocol.receive(FlushRequest(), 0.0) + run()
    assert [m.type for m in out] == ["final", "flushed"]
    assert out[0].start == 2 and [w.w for w in out[0].words] == ["t1x3"] and out[1] == Flushed(3)


def _hypotheses_behind_a_refused_message() -> SessionProtocol:
    """Two words, a flush, a refused message, then two hypotheses, all read before the flush's
    words were run: nothing is answered yet."""
    protocol = SessionProtocol(aligner=FakeAligner(), window=WINDOW,
                               defaults=SessionOptions(right_context=5, max_delay_ms=60_000, partials=True))
    out = protocol.receive(WordsMessage(tuple(map(Word, words((1, 1), (2, 2))))), 0.0)
    out += protocol.receive(FlushRequest(), 0.0)
    out += protocol.receive_frame('{"type": "nope"}', 0.0)
    out += protocol.receive(HypothesisMessage((Word("t1x1"),)), 0.0)
    out += protocol.receive(HypothesisMessage((Word("t2x2"),)), 0.0)
    assert out == []
    return protocol


def test_a_hypothesis_after_a_refused_message_is_answered_after_its_error():
    """flush, a refused message, then two hypotheses, all read before the flush's words were
    run: the first hypothesis's partial (made without the model, the second replacing it)
    follows the error, which follows the flush's finals and ``flushed``; it shows no word
    that is final by then."""
    protocol = _hypotheses_behind_a_refused_message()
    out = []
    while (request := protocol.next_request(0.0)) is not None:
        out += protocol.apply(request, context_infer(request.input_ids))
    types = [m.type for m in out]
    assert types[:4] == ["final", "flushed", "error", "partial"], types
    first = out[3]
    assert first.start == 2 and first.words == () and [w.w for w in first.hypothesis] == ["t1x1"]
    later = [m for m in out[4:] if isinstance(m, Partial)]
    assert later and [w.w for w in later[-1].hypothesis] == ["t2x2"]


def test_a_hand_off_sends_the_partial_queued_behind_an_error():
    protocol = _hypotheses_behind_a_refused_message()
    error, partial = protocol.hand_off()
    assert error.code is ErrorCode.BAD_REQUEST and [w.w for w in partial.hypothesis] == ["t1x1"]
    assert partial.start == 0 and [w.w for w in partial.words] == ["t1x1", "t2x2"]  # none final here


def test_a_hand_off_sends_the_errors_queued_behind_a_flush():
    """``serve --drain resume``: the flush is answered where the stream goes on, but the error
    for a message refused behind it is this connection's to send."""
    protocol = SessionProtocol(aligner=FakeAligner(), window=WINDOW,
                               defaults=SessionOptions(right_context=5, max_delay_ms=60_000))
    out = protocol.receive(WordsMessage(tuple(map(Word, words((1, 1), (2, 2))))), 0.0)
    out += protocol.receive(FlushRequest(), 0.0)
    out += protocol.receive_frame('{"type": "config", "right_context": 0}', 0.0)
    assert out == []
    [error] = protocol.hand_off()
    assert error.code is ErrorCode.BAD_REQUEST and "config is only allowed" in error.message
    assert protocol.next_call(0.0) is None


def test_words_sent_right_after_a_flush_are_not_its_right_context():
    """A flush finalizes with the right context that exists. A loop clock that moves once a
    millisecond reads one time for the flush and the words behind it, and a busy server
    reads them all before it runs the flush's window: those words are still not in it."""
    options = SessionOptions(right_context=3, max_delay_ms=2000)
    late, served = SessionProtocol(aligner=FakeAligner(), window=WINDOW, defaults=options), Driver(options)
    first, second = words((1, 1), (2, 2), (1, 3)), words((2, 4), (1, 5), (3, 6))
    frames = [WordsMessage(tuple(map(Word, first))), FlushRequest(), WordsMessage(tuple(map(Word, second))),
              EndRequest()]
    out = [m for frame in frames for m in late.receive(frame, 7.0)]  # one clock reading, nothing served
    while (request := late.next_request(7.0)) is not None:
        out.extend(late.apply(request, context_infer(request.input_ids)))
    for frame in frames:  # the same frames, each served before the next comes
        served.send(frame, dt=0.0001)
    assert [type(m) for m in out] == [Final, Flushed, Final, Ended]
    assert [w.w for w in out[0].words] == first and out[1] == Flushed(3)
    assert out == served.out[1:]  # the same labels as a server that kept up


def test_shutdown_finishes_without_end_message():
    driver = Driver(SessionOptions(right_context=5, max_delay_ms=60_000))
    driver.send(WordsMessage(tuple(Word(w) for w in words((1, 1), (1, 2)))))
    driver.out.extend(driver.protocol.finish(driver.now))
    driver._pump(driver.now)
    assert [m.type for m in driver.out] == ["ready", "final"]
    assert driver.protocol.finished and driver.protocol.close_code == 1001


def test_hypothesis_is_punctuated_in_partials_and_cleared_by_words():
    driver = Driver(SessionOptions(right_context=2, max_delay_ms=60_000, partials=True, capitalize=True))
    committed = words((1, 1), (2, 2), (1, 3), (1, 4))
    driver.send(WordsMessage(tuple(Word(w) for w in committed)))
    interim = words((1, 5), (3, 6))
    [partial] = driver.send(HypothesisMessage(tuple(Word(w.upper() + ",") for w in interim)))
    assert isinstance(partial, Partial)
    assert partial.start == 2 and [w.w for w in partial.words] == committed[2:]
    assert [w.w for w in partial.hypothesis] == interim  # normalized, no index
    assert all(w.p in ID_TO_MARK for w in partial.hypothesis)
    sentence_start = driver.of(Final)[-1].words[-1].p in (".", "?")
    labels = [ID_TO_MARK.index(w.p) for w in (*partial.words, *partial.hypothesis)]
    assert partial.text == render([*committed[2:], *interim], labels, capitalize=True, sentence_start=sentence_start)
    # A new hypothesis replaces the old one and is answered by a partial.
    [partial] = driver.send(HypothesisMessage((Word(interim[0]),)))
    assert [w.w for w in partial.hypothesis] == interim[:1]
    # Every words message clears it.
    replies = driver.send(WordsMessage((Word(interim[0]),)))
    assert [w.w for w in replies[-1].hypothesis] == [] and driver.protocol.state.hypothesis == ()
    # An empty hypothesis with nothing pending still gets its (empty) partial.
    driver.send(FlushRequest())
    driver.send(HypothesisMessage((Word("t1x9"),)))
    [cleared] = driver.send(HypothesisMessage(()))
    assert cleared == Partial(driver.protocol.n_final, (), "", ())


def test_words_that_commit_a_hypothesis_while_its_partial_runs_show_once():
    """``hypothesis [a]``, ``hypothesis [a, b]``, then ``words [a, b]`` while the partial of the
    first runs: each hypothesis is answered by a partial carrying it, in order, at once (no
    model call: the model's labels for [a] come back too late); the late labels are dropped,
    and the next partial shows the committed words once, with no hypothesis."""
    protocol = SessionProtocol(aligner=FakeAligner(), window=WINDOW,
                               defaults=SessionOptions(right_context=2, max_delay_ms=60_000, partials=True))
    a, b = words((1, 1), (1, 2))
    assert protocol.receive(HypothesisMessage((Word(a),)), 0.0) == []
    request = protocol.next_request(0.0)
    assert request is not None and request.partial and request.hypothesis == (a,)
    [first] = protocol.receive(HypothesisMessage((Word(a), Word(b))), 0.1)
    [second] = protocol.receive(WordsMessage((Word(a), Word(b))), 0.2)
    assert [(w.w, w.p) for w in first.hypothesis] == [(a, "")] and first.words == () and first.text == a
    assert [w.w for w in second.hypothesis] == [a, b] and second.words == () and second.start == 0
    assert protocol.apply(request, context_infer(request.input_ids)) == []
    fresh = protocol.next_request(0.2)
    assert fresh is not None and fresh.partial and fresh.hypothesis == ()
    [partial] = protocol.apply(fresh, context_infer(fresh.input_ids))
    assert isinstance(partial, Partial) and [w.w for w in partial.words] == [a, b] and partial.hypothesis == ()
    assert len(partial.text.split()) == 2  # each word once
    assert protocol.next_request(0.2) is None


def test_no_partials_for_hypotheses_when_partials_are_off():
    driver = Driver(SessionOptions(right_context=2, partials=False))
    driver.send(WordsMessage((Word("t1x1"),)))
    assert driver.send(HypothesisMessage((Word("t1x2"),))) == []
    assert driver.send(HypothesisMessage(())) == []


def test_malformed_hypothesis_is_rejected_and_the_stream_is_intact():
    driver = Driver(SessionOptions(right_context=1, partials=True))
    driver.send(WordsMessage((Word("t1x1"),)))
    driver.send(HypothesisMessage((Word("t1x2"),)))
    for frame in (
        '{"type": "hypothesis"}',
        '{"type": "hypothesis", "words": "t1x3"}',
        '{"type": "hypothesis", "words": [{"w": 3}]}',
        '{"type": "hypothesis", "words": [{"w": "t1x3", "start": "0"}]}',
    ):
        [error] = driver.frame(frame)
        assert isinstance(error, Error) and error.code is ErrorCode.BAD_REQUEST
    assert driver.protocol.state.hypothesis == ("t1x2",) and driver.protocol.n_words == 1
    driver.send(WordsMessage((Word("t1x3"),)))
    driver.send(EndRequest())
    assert [w.w for f in driver.of(Final) for w in f.words] == ["t1x1", "t1x3"]


def test_finals_echo_word_times_unchanged():
    """Times come back as sent: numbers as they were (an int stays an int), a ``null`` as
    ``null``, one not sent stays out of the final."""
    driver = Driver(SessionOptions(right_context=0))
    frame = json.dumps({"type": "words", "words": [
        {"w": "t1x1", "start": 1, "end": 1.25}, "t1x2", {"w": "--", "start": 2.0}, {"w": "t1x3", "end": 3.5},
        {"w": "t1x4", "start": None, "end": None}, {"w": "t1x5", "start": None, "end": 0},
    ]})
    driver.frame(frame)
    driver.send(EndRequest())
    finals = [w for f in driver.of(Final) for w in f.words]
    assert [(w.w, w.start, w.end) for w in finals] == [
        ("t1x1", 1, 1.25), ("t1x2", None, None), ("t1x3", None, 3.5), ("t1x4", NULL_TIME, NULL_TIME),
        ("t1x5", NULL_TIME, 0),
    ]
    wire = [x for f in driver.of(Final) for x in f.to_json()["words"]]
    assert wire[0] == {"w": "t1x1", "p": wire[0]["p"], "start": 1, "end": 1.25}
    assert "start" not in wire[1] and "end" not in wire[1] and wire[2] == {"w": "t1x3", "p": wire[2]["p"], "end": 3.5}
    assert wire[3] == {"w": "t1x4", "p": wire[3]["p"], "start": None, "end": None}
    assert wire[4] == {"w": "t1x5", "p": wire[4]["p"], "start": None, "end": 0}
    assert json.loads(encode_frame(driver.of(Final)[-1]))["words"][-1] == wire[4]


# -- property: hypotheses never change finals -----------------------------------

_word = st.tuples(st.integers(1, 3), st.integers(0, 40))
_event = st.one_of(
    st.tuples(st.just("words"), st.lists(_word, max_size=5), st.floats(0, 0.3)),
    st.tuples(st.just("hyp"), st.lists(_word, max_size=6), st.floats(0, 0.3)),
    st.tuples(st.just("flush"), st.just([]), st.floats(0, 0.3)),
)


def _run(events, options: SessionOptions, with_hypotheses: bool, end_at_once: bool = False) -> Driver:
    """``end_at_once``: ``end`` comes right behind the last message, before any model call
    runs for it (a hypothesis' partial is still owed when ``end`` arrives)."""
    driver = Driver(options)
    t = 0.0
    for k, (kind, specs, dt) in enumerate(events):
        if end_at_once and k == len(events) - 1 and (kind != "hyp" or with_hypotheses):
            if kind == "words":
                message = WordsMessage(tuple(Word(w, t + i, t + i + 0.5) for i, w in enumerate(words(*specs))))
            else:
                message = FlushRequest() if kind == "flush" else HypothesisMessage(tuple(Word(w) for w in words(*specs)))
            driver.advance(driver.now + dt)
            driver.out.extend(driver.protocol.receive(message, driver.now))  # no model call yet
            break
        if kind == "words":
            message = WordsMessage(tuple(Word(w, t + i, t + i + 0.5) for i, w in enumerate(words(*specs))))
            driver.send(message, dt)
            t += 1
        elif kind == "flush":
            driver.send(FlushRequest(), dt)
        elif with_hypotheses:
            replies = driver.send(HypothesisMessage(tuple(Word(w) for w in words(*specs))), dt)
            if options.partials:  # answered by a partial carrying exactly this hypothesis
                assert isinstance(replies[-1], Partial), (k, replies)
                assert [w.w for w in replies[-1].hypothesis] == words(*specs)
        else:
            driver.advance(driver.now + dt)  # same clock, no message
    driver.send(EndRequest())
    return driver


_step = st.one_of(
    _event,
    st.tuples(st.sampled_from(["start call", "finish call", "bad"]), st.just([]), st.floats(0, 0.3)),
)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(_step, max_size=30), right_context=st.integers(0, 3),
       max_delay_ms=st.sampled_from([0, 200, 60_000]), capitalize=st.booleans())
# a partial call for the words runs while a hypothesis comes: its labels must not show after it
@example(steps=[("words", [(1, 0)], 0.0), ("start call", [], 0.0), ("hyp", [(1, 0)], 0.0)],
         right_context=1, max_delay_ms=200, capitalize=False)
# ... nor after words that clear it again (the hypothesis is () before and after)
@example(steps=[("words", [(1, 0), (1, 1)], 0.0), ("start call", [], 0.0), ("hyp", [(1, 2)], 0.0),
                ("words", [(1, 2)], 0.0), ("finish call", [], 0.0)],
         right_context=3, max_delay_ms=60_000, capitalize=False)
# hypotheses after a message refused behind a flush: answered after its error
# (and a later change after the partial still queued once the error has gone: found 2026-12-01)
@example(steps=[("words", [(1, 0)], 0.0), ("flush", [], 0.0), ("words", [(1, 0)], 0.0), ("bad", [], 0.0),
                ("flush", [], 0.0), ("hyp", [(1, 0)], 0.0), ("words", [], 0.0), ("start call", [], 0.0),
                ("finish call", [], 0.0), ("words", [], 0.0)], right_context=0, max_delay_ms=0, capitalize=False)
@example(steps=[("words", [(1, 0)], 0.0), ("flush", [], 0.0), ("bad", [], 0.0), ("hyp", [(1, 1)], 0.0),
                ("hyp", [(1, 2)], 0.0)], right_context=0, max_delay_ms=60_000, capitalize=False)
@example(steps=[("words", [(1, 0)], 0.0), ("flush", [], 0.0), ("bad", [], 0.0), ("hyp", [], 0.0),
                ("words", [], 0.0), ("bad", [], 0.0)], right_context=0, max_delay_ms=0, capitalize=False)
# a hypothesis after a flush still waiting for its words, then a message refused or a flush: its
# partial before their answers (found by an outside client, 2026-12-02)
@example(steps=[("words", [(1, 0)], 0.0), ("flush", [], 0.0), ("hyp", [(1, 1)], 0.0), ("bad", [], 0.0)],
         right_context=3, max_delay_ms=60_000, capitalize=False)
@example(steps=[("words", [(1, 0)], 0.0), ("flush", [], 0.0), ("hyp", [(1, 1)], 0.0), ("flush", [], 0.0)],
         right_context=3, max_delay_ms=60_000, capitalize=False)
def test_each_hypothesis_is_answered_by_one_partial_in_order(steps, right_context, max_delay_ms, capitalize):
    """protocol.md: "a new hypothesis is answered by a partial". However the messages and the
    model calls interleave (a call held in flight while hypotheses replace each other), every
    partial carries the hypothesis current when it is sent and the words of the message that
    last replaced one (none goes back to a replaced hypothesis), and a ``hypothesis`` that a
    later message finds unanswered is answered first: the replies to that message (words, a
    flush with none owed before it, a refused message) start with its partial, or, where that
    message's answer waits behind an earlier flush's, it is queued right before it. One that came
    after a message whose error waits behind a flush's answer is answered after that error
    (its partial queued behind it, carrying it)."""
    protocol = SessionProtocol(aligner=FakeAligner(), window=WINDOW,
                               defaults=SessionOptions(right_context, max_delay_ms, True, capitalize))
    now, held, out = 0.0, None, []
    current: tuple[str, ...] = ()  # the hypothesis the client sent last (words clear it)
    owed = False  # a hypothesis change (a hypothesis, words that clear one) still waits for its partial
    floor = 0  # the words received when a message last replaced the hypothesis
    # the answers owed while a flush waits for its words, in order: "flushed" for each flush, None
    # for an error queued behind one, and the hypotheses whose partials were queued behind one
    answers: list[tuple[str, ...] | str | None] = []
    behind = False  # the owed change came after the message of an error still queued

    def partial_queued() -> bool:
        return any(isinstance(x, tuple) for x in answers)

    def take(messages) -> None:
        nonlocal owed
        for m in messages:
            out.append(m)
            if isinstance(m, Error) and answers:
                assert answers.pop(0) is None, f"an error overtook an answer owed before it: {answers}"
            elif isinstance(m, Flushed):
                assert answers and answers.pop(0) == "flushed", f"a flushed overtook an answer owed before it: {m}"
            elif isinstance(m, Partial) and answers and isinstance(answers[0], tuple):  # in its turn
                assert tuple(w.w for w in m.hypothesis) == answers.pop(0)
            elif isinstance(m, Partial):
                assert not partial_queued(), "a partial overtook one queued behind a flush's answer"
                assert tuple(w.w for w in m.hypothesis) == current
                assert m.start + len(m.words) >= floor
                owed = False

    def run_calls() -> None:
        while (request := protocol.next_request(now)) is not None:
            take(protocol.apply(request, context_infer(request.input_ids)))

    for kind, specs, dt in steps:
        now += dt
        if kind == "start call":
            held = held or protocol.next_request(now)
        elif kind == "finish call":
            if held is not None:
                take(protocol.apply(held, context_infer(held.input_ids)))
                held = None
        elif kind == "bad":
            replies = protocol.receive_frame('{"type": "nope"}', now)
            if answers:  # after the flush's answer, and after the partial owed before it
                assert replies == []
                if owed:
                    answers.append(current)
                    owed = False
                answers.append(None)
            else:
                assert [m.type for m in replies] == ["partial"] * owed + ["error"]
            take(replies)
        else:
            message = {"hyp": HypothesisMessage, "words": WordsMessage}.get(kind)
            message = FlushRequest() if message is None else message(tuple(map(Word, words(*specs))))
            replies = protocol.receive(message, now)
            # answered after the error it came behind, or after a partial still queued behind one;
            # before a flush that waits behind an earlier flush's answer, in its turn
            if owed and ((behind and None in answers) or partial_queued() or (kind == "flush" and answers)):
                answers.append(current)
                owed = False
            elif owed:
                assert replies and isinstance(replies[0], Partial)
                take(replies[:1])
                replies = replies[1:]
            if kind == "hyp" or (kind == "words" and current):  # replaces the hypothesis
                current = tuple(words(*specs)) if kind == "hyp" else ()
                owed = True  # words that clear a hypothesis are answered by a partial too
                behind = None in answers
                floor = protocol.n_words
            if kind == "flush":
                answers.append("flushed")
            take(replies)
    if held is not None:
        take(protocol.apply(held, context_infer(held.input_ids)))
    run_calls()
    assert not owed and not answers
    take(protocol.receive(EndRequest(), now))
    run_calls()
    assert isinstance(out[-1], Ended)


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(_event, max_size=25),
    right_context=st.integers(0, 4),
    max_delay_ms=st.sampled_from([0, 100, 400, 60_000]),
    partials=st.booleans(),
)
def test_finals_are_identical_with_and_without_hypotheses(events, right_context, max_delay_ms, partials):
    options = SessionOptions(right_context, max_delay_ms, partials, capitalize=True)
    with_hyp = _run(events, options, with_hypotheses=True)
    without = _run(events, options, with_hypotheses=False)
    assert with_hyp.of(Final) == without.of(Final)
    committed = [w for kind, specs, _ in events if kind == "words" for w in words(*specs)]
    finals = with_hyp.of(Final)
    # Each committed word finalized exactly once, in order, with its times.
    assert [w.w for f in finals for w in f.words] == committed
    position = 0
    for final in finals:
        assert final.start == position
        position += len(final.words)
    assert all(w.start is not None and w.end == w.start + 0.5 for f in finals for w in f.words)
    assert with_hyp.out[-1] == Ended(len(committed))


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(_event, min_size=1, max_size=12),
    right_context=st.integers(0, 4),
    max_delay_ms=st.sampled_from([0, 100, 60_000]),
    partials=st.booleans(),
)
def test_end_right_behind_a_hypothesis_answers_it_first_and_changes_no_final(
    events, right_context, max_delay_ms, partials
):
    options = SessionOptions(right_context, max_delay_ms, partials, capitalize=True)
    with_hyp = _run(events, options, with_hypotheses=True, end_at_once=True)
    without = _run(events, options, with_hypotheses=False, end_at_once=True)
    assert with_hyp.of(Final) == without.of(Final)
    committed = [w for kind, specs, _ in events if kind == "words" for w in words(*specs)]
    assert with_hyp.out[-1] == Ended(len(committed))
    assert [m for m in with_hyp.out if isinstance(m, Ended)] == [with_hyp.out[-1]]
    kind, specs, _ = events[-1]
    partials_out = with_hyp.of(Partial)
    if partials and kind == "hyp":  # "a new hypothesis is answered by a partial", before the end
        assert partials_out and [w.w for w in partials_out[-1].hypothesis] == words(*specs)
    if not partials:
        assert not partials_out


@pytest.mark.parametrize("flush", [True, False])
def test_finals_due_before_end_go_out_before_the_partial_end_waits_for(flush):
    """``end`` right behind a hypothesis waits for that hypothesis's partial, but the words
    already decidable by right context are final first, as without the hypothesis, and the
    partial starts after them. A ``flush`` between them is answered after the hypothesis: its
    partial comes at once (no model call), before the flush's finals, and ``end`` waits for
    nothing."""
    def run(with_hypothesis):
        protocol = SessionProtocol(aligner=FakeAligner(), window=WINDOW,
                                   defaults=SessionOptions(right_context=1, partials=True))
        frames = [WordsMessage(tuple(map(Word, words((1, 1), (2, 2), (1, 3), (2, 4), (1, 5), (1, 6)))))]
        frames += [HypothesisMessage(tuple(map(Word, words((1, 7), (2, 8)))))] if with_hypothesis else []
        frames += [FlushRequest()] if flush else []
        out = [m for frame in [*frames, EndRequest()] for m in protocol.receive(frame, 3.0)]  # one burst
        while (request := protocol.next_request(3.0)) is not None:
            out.extend(protocol.apply(request, context_infer(request.input_ids)))
        return out

    out, plain = run(True), run(False)
    assert [m for m in out if not isinstance(m, Partial)] == plain
    [partial] = [k for k, m in enumerate(out) if isinstance(m, Partial)]
    due = 0 if flush else 5  # without a flush the last word waits for end
    finals_before = [w for m in out[:partial] if isinstance(m, Final) for w in m.words]
    assert len(finals_before) == due and out[partial].start == due
    assert [w.w for w in out[partial].hypothesis] == words((1, 7), (2, 8))
    assert isinstance(out[-1], Ended) and out[-1] == Ended(6)


def test_end_while_a_final_is_in_flight_and_a_cleared_hypothesis_is_owed():
    # The owed partial turns out empty (nothing provisional is left) once the final lands.
    protocol = SessionProtocol(aligner=FakeAligner(), window=WINDOW,
                               defaults=SessionOptions(right_context=0, partials=True))
    protocol.receive(WordsMessage((Word("t1x1"),)), 0.0)
    final_request = protocol.next_request(0.0)
    assert final_request is not None and not final_request.partial
    protocol.receive(HypothesisMessage((Word("t1x2"),)), 0.0)
    protocol.receive(HypothesisMessage(()), 0.0)
    assert protocol.receive(EndRequest(), 0.0) == []  # waits for the final in flight
    replies = protocol.apply(final_request, context_infer(final_request.input_ids))
    assert [type(m) for m in replies] == [Final, Partial, Ended]
    assert replies[1] == Partial(1, (), "", ()) and protocol.finished


def test_overloaded_once_per_episode_and_the_words_are_asked_for_again():
    from streampunct.core.session_protocol import OVERLOAD_EPISODE_GAP_S as GAP
    from streampunct.core.wire import Error, ErrorCode

    protocol = SessionProtocol(aligner=FakeAligner(), window=WINDOW, defaults=SessionOptions(right_context=0))
    protocol.receive(WordsMessage((Word("t1x1"), Word("t2x2"))), 0.0)

    def refused(now):
        call = protocol.next_call(now)
        assert call is not None  # aborted calls' words are requested again
        return protocol.overloaded(call, now)

    first = refused(0.0)
    assert len(first) == 1 and isinstance(first[0], Error) and first[0].code == ErrorCode.OVERLOADED
    assert refused(1.0) == []  # the same episode
    protocol.still_overloaded(1.0 + GAP + 3)  # waited for room that long: still the episode
    assert refused(1.0 + GAP + 4) == []
    assert [m.code for m in refused(1.0 + 3 * GAP)] == [ErrorCode.OVERLOADED]  # a new one
    call = protocol.next_call(30.0)
    assert protocol.apply(call.request, context_infer(call.request.input_ids))  # and the words still come out
