"""The pure rules behind bounded memory: the protocol's input backpressure, the state's compaction."""

from __future__ import annotations

import numpy as np
import pytest

from streampunct.core.options import SessionOptions
from streampunct.core.session_protocol import SessionProtocol
from streampunct.core.stream_state import COMPACT_EVERY, KEEP_WORDS, StreamState
from streampunct.core.windowing import WindowConfig
from streampunct.core.wire import (
    ConfigRequest,
    EndRequest,
    Final,
    FlushRequest,
    HypothesisMessage,
    Partial,
    Word,
    WordsMessage,
)
from tests.streampunct.fakes import FakeAligner, fake_infer

WINDOW = WindowConfig(size=24, left=4, right=3)


def words_message(start: int, n: int) -> WordsMessage:
    return WordsMessage(tuple(Word(FakeAligner.word(1 + (k % 3), k)) for k in range(start, start + n)))


def run_one(protocol: SessionProtocol, now: float) -> list:
    """Run the next window, if any (what the session's driver does once)."""
    request = protocol.next_request(now)
    if request is None:
        return []
    ids = request.input_ids[None, :]
    return protocol.apply(request, fake_infer(ids, np.ones_like(ids))[0])


def test_wants_input_until_the_backlog_reaches_the_limit_and_again_once_it_drains():
    p = SessionProtocol(aligner=FakeAligner(), window=WINDOW, max_backlog=10,
                        defaults=SessionOptions(right_context=2, max_delay_ms=600_000))
    assert p.wants_input(0.0) and p.backlog == 0
    p.receive(words_message(0, 8), 0.0)
    assert p.backlog == 8 and p.wants_input(0.0)  # below the limit
    p.receive(words_message(8, 6), 0.0)
    assert p.backlog == 14 and not p.wants_input(0.0)  # 12 words are decidable: drain first
    while not p.wants_input(0.0):
        assert run_one(p, 0.0)
    assert p.backlog < 10 and p.n_final > 0


def test_words_waiting_for_more_input_never_block_reading():
    # right_context above the limit: the words can only become final with more words.
    p = SessionProtocol(aligner=FakeAligner(), window=WINDOW, max_backlog=5,
                        defaults=SessionOptions(right_context=20, max_delay_ms=600_000))
    p.receive(words_message(0, 12), 0.0)
    assert p.backlog == 12 and p.wants_input(0.0)  # nothing in it can drain: read on
    # ...until the delay makes them decidable: then they drain first.
    late = SessionProtocol(aligner=FakeAligner(), window=WINDOW, max_backlog=5,
                           defaults=SessionOptions(right_context=20, max_delay_ms=1000))
    late.receive(words_message(0, 12), 0.0)
    assert late.wants_input(0.5) and not late.wants_input(1.0)
    # A flush makes every word decidable, so it also drains before more input.
    p.receive(FlushRequest(), 1.0)
    assert not p.wants_input(1.0)


def test_no_limit_always_wants_input():
    p = SessionProtocol(aligner=FakeAligner(), window=WINDOW)
    p.receive(words_message(0, 500), 0.0)
    assert p.wants_input(0.0) and p.max_backlog is None
    with pytest.raises(ValueError, match="max_backlog"):
        SessionProtocol(aligner=FakeAligner(), window=WINDOW, max_backlog=0)


def test_a_flooded_protocol_holds_at_most_the_limit_plus_one_message_and_finalizes_all():
    limit, per_message, total = 50, 40, 2000
    p = SessionProtocol(aligner=FakeAligner(), window=WINDOW, max_backlog=limit,
                        defaults=SessionOptions(right_context=2, max_delay_ms=600_000))
    sent, finals, peak = 0, [], 0
    while sent < total:
        if p.wants_input(0.0):  # the reader takes a frame only then
            p.receive(words_message(sent, per_message), 0.0)
            sent += per_message
            peak = max(peak, p.backlog)
        else:
            finals += [m for m in run_one(p, 0.0) if isinstance(m, Final)]
    finals += [m for m in p.finish(0.0) if isinstance(m, Final)]
    while p.state.n_final < total:
        finals += [m for m in run_one(p, 0.0) if isinstance(m, Final)]
    assert limit <= peak <= limit + per_message
    starts = [m.start for m in finals]
    assert starts == sorted(starts) and sum(len(m.words) for m in finals) == total


def test_state_compacts_while_a_request_is_always_in_flight():
    """A stream fed faster than real time always has a request out; its memory must stay bounded."""
    state = StreamState(FakeAligner(), WINDOW, SessionOptions(right_context=2, max_delay_ms=600_000))
    serial, peak_held = 0, 0
    request = None
    for step in range(400):
        state.feed([FakeAligner.word(1 + (k % 3), k) for k in range(serial, serial + 50)], 0.0)
        serial += 50
        peak_held = max(peak_held, len(state.words))
        if step == 0:
            request = state.next_request(0.0)
        # Answer the request that was out during the feed and the next ones, but keep the
        # last one out: the next words arrive while it runs.
        while request is not None:
            ids = request.input_ids[None, :]
            state.apply(request, fake_infer(ids, np.ones_like(ids))[0])
            request = state.next_request(0.0)
            if request is not None and request.first_word + request.n_words >= state.n_decidable(0.0):
                break
    assert state.in_flight is not None
    assert state.n_words == serial and state.n_final > serial - 100
    assert peak_held <= KEEP_WORDS + COMPACT_EVERY + 1000


def test_hypotheses_never_pause_reading_and_the_newest_one_is_answered():
    # Hypotheses that arrive while an earlier one is labeled replace it: each replaced one is
    # answered as it is replaced, without a model call, and the newest is labeled next
    # (protocol.md, "hypothesis"); the labels of the replaced call are dropped.
    p = SessionProtocol(aligner=FakeAligner(), window=WINDOW, defaults=SessionOptions(partials=True))
    p.receive(words_message(0, 3), 0.0)
    first = [Word(FakeAligner.word(2, 90))]
    p.receive(HypothesisMessage(tuple(first)), 0.0)
    in_flight = p.next_request(0.0)
    assert in_flight is not None and in_flight.partial and p.wants_input(0.0)
    answered = []
    for serial in (91, 92):  # two more while the first is labeled
        answered += p.receive(HypothesisMessage((Word(FakeAligner.word(1, serial)),)), 0.0)
        assert p.wants_input(0.0)
    ids = in_flight.input_ids[None, :]
    assert p.apply(in_flight, fake_infer(ids, np.ones_like(ids))[0]) == []
    answered += [m for m in run_one(p, 0.0) if isinstance(m, Partial)]
    assert all(isinstance(m, Partial) for m in answered)
    assert [[w.w for w in m.hypothesis] for m in answered] == [
        [FakeAligner.word(2, 90)], [FakeAligner.word(1, 91)], [FakeAligner.word(1, 92)]]
    assert run_one(p, 0.0) == [] and p.next_request(0.0) is None  # nothing owed any more
    # With partials off a hypothesis is stored and never answered.
    quiet = SessionProtocol(aligner=FakeAligner(), window=WINDOW)
    quiet.receive(HypothesisMessage((Word(FakeAligner.word(1, 1)),)), 0.0)
    assert quiet.wants_input(0.0) and quiet.next_request(0.0) is None


def test_a_config_that_turns_partials_off_drops_an_owed_partial():
    p = SessionProtocol(aligner=FakeAligner(), window=WINDOW, defaults=SessionOptions(partials=True))
    p.receive(HypothesisMessage((Word(FakeAligner.word(1, 1)),)), 0.0)
    p.receive(ConfigRequest(partials=False), 0.0)
    assert p.next_request(0.0) is None
    p.receive(EndRequest(), 0.0)  # nothing owed: end is not deferred for a partial
    assert p.finished and p.end_received


def test_pending_flushes_past_the_limit_hold_the_input_until_their_words_are_final():
    """Each flush is owed a ``flushed`` once its words are final; flushes sent faster than
    windows run pile up, so past MAX_PENDING_FLUSHES the reader waits (their words are
    decidable: they drain), then every flush is answered, in order."""
    from streampunct.core.session_protocol import MAX_PENDING_FLUSHES
    from streampunct.core.wire import Flushed

    p = SessionProtocol(aligner=FakeAligner(), window=WINDOW, max_backlog=100,
                        defaults=SessionOptions(right_context=2, max_delay_ms=600_000))
    p.receive(words_message(0, 3), 0.0)
    out = []
    for _ in range(MAX_PENDING_FLUSHES - 1):
        out += p.receive(FlushRequest(), 0.0)
    assert p.wants_input(0.0)
    out += p.receive(FlushRequest(), 0.0)
    assert not p.wants_input(0.0) and not [m for m in out if isinstance(m, Flushed)]
    while not p.wants_input(0.0):
        out += run_one(p, 0.0)
    flushed = [m for m in out if isinstance(m, Flushed)]
    assert len(flushed) == MAX_PENDING_FLUSHES and {m.upto for m in flushed} == {3}
    # without limits (max_backlog None) the input is never held
    free = SessionProtocol(aligner=FakeAligner(), window=WINDOW, defaults=SessionOptions(right_context=2))
    free.receive(words_message(0, 3), 0.0)
    for _ in range(2 * MAX_PENDING_FLUSHES):
        free.receive(FlushRequest(), 0.0)
    assert free.wants_input(0.0)
