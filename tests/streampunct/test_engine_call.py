"""The core's model calls (streampunct.core.engine_call): the core plans a call and applies its
output, the stream cache is entered there only (and starts anew with each stream state),
and engine outputs reach the core typed, the case logits apart from the punctuation's."""

from __future__ import annotations

import numpy as np
import pytest

from engines.base import HeadLogits
from engines.fake import FakeEngine, fake_cases
from streampunct.core.engine_call import EngineCall, EngineOutput, StreamCalls, run_calls
from streampunct.core.options import SessionOptions
from streampunct.core.session_protocol import SessionProtocol
from streampunct.core.stream_cache import StreamCacheConfig, run_stream_calls
from streampunct.core.stream_state import StreamState, WindowRequest
from streampunct.core.wire import (
    ConfigRequest,
    EndRequest,
    Final,
    Flushed,
    HypothesisMessage,
    PunctuatedWord,
    ResumeRequest,
    Word,
    WordsMessage,
)
from streampunct.server.batcher import Batcher, BatcherConfig
from tests.streampunct.conftest import SCHEDULE_VOCAB, TEST_WINDOW
from tests.streampunct.test_stream_cache import SHAPE, FakeStreamEngine

VOCAB = SCHEDULE_VOCAB
NO_DELAY = 600_000


class CasedStreamEngine(FakeStreamEngine):
    """:class:`FakeStreamEngine` with a truecasing head: as a streaming graph does, its
    ``infer_stream`` gives the case logits (one-hot :func:`engines.fake.fake_cases` of each
    token) after the punctuation's; ``infer_heads`` gives them apart."""

    has_case = True

    def infer_stream(self, inputs):
        logits, present = super().infer_stream(inputs)
        return np.concatenate([logits, _one_hot(fake_cases(inputs["input_ids"]))], axis=-1), present

    def infer_heads(self, input_ids, attention_mask):
        return HeadLogits(self.infer(input_ids, attention_mask)[..., :4], _one_hot(fake_cases(input_ids)))


def _one_hot(classes: np.ndarray) -> np.ndarray:
    out = np.zeros((*classes.shape, 4), dtype=np.float32)
    np.put_along_axis(out, classes[..., None], 1.0, axis=-1)
    return out


def _protocol(aligner, **options) -> SessionProtocol:
    return SessionProtocol(aligner=aligner, window=TEST_WINDOW, defaults=SessionOptions(**options),
                           stream_cache=StreamCacheConfig(SHAPE))


def _pump(protocol: SessionProtocol, engine, now: float) -> list[EngineCall]:
    """Run every call the protocol asks for at ``now``; the calls, in order."""
    calls = []
    while (call := protocol.next_call(now)) is not None:
        calls.append(call)
        protocol.apply(call, run_calls(engine, [call], 0)[0])
    return calls


def test_a_streaming_graphs_case_logits_come_apart_from_the_punctuations(aligner):
    state = StreamState(aligner, TEST_WINDOW, SessionOptions(right_context=1, max_delay_ms=NO_DELAY))
    calls = StreamCalls(state, StreamCacheConfig(SHAPE).new(TEST_WINDOW))
    state.feed(["the", "a", "of", "and"], 0.0)
    call = calls.next_call(0.0)
    ((heads, kept),) = run_stream_calls(CasedStreamEngine(), [call.stream], pad_id=0)
    assert heads.punctuation.shape == heads.case.shape == (len(call.stream.input_ids), 4)
    np.testing.assert_array_equal(heads.case, _one_hot(fake_cases(call.stream.input_ids)))
    assert kept is not None


def test_the_core_takes_the_truecasing_heads_classes_through_the_cache(aligner):
    """Engine -> core, typed: each final word's case is its label token's, cached calls
    included (the fake's case head looks at the token only)."""
    engine = CasedStreamEngine()
    state = StreamState(aligner, TEST_WINDOW, SessionOptions(right_context=2, max_delay_ms=NO_DELAY))
    calls = StreamCalls(state, StreamCacheConfig(SHAPE).new(TEST_WINDOW))
    words = [VOCAB[(7 * k) % len(VOCAB)] for k in range(40)]
    decisions = []
    for k in range(0, len(words), 3):
        state.feed(words[k:k + 3], float(k))
        while (call := calls.next_call(float(k))) is not None:
            decisions += calls.apply(call, run_calls(engine, [call], 0)[0])
    state.end(100.0)
    while (call := calls.next_call(100.0)) is not None:
        decisions += calls.apply(call, run_calls(engine, [call], 0)[0])
    assert [d.index for d in decisions] == list(range(len(words)))
    assert calls.cache.cached_calls > 0  # the cached path was taken
    label_token = [aligner.word_ids(w)[aligner.label_offset(len(aligner.word_ids(w)))] for w in words]
    assert [d.case for d in decisions] == fake_cases(np.asarray(label_token)).tolist()


def test_each_stream_state_gets_a_new_cache(aligner):
    engine = FakeStreamEngine()
    resumed = _protocol(aligner, right_context=1, max_delay_ms=NO_DELAY)
    resumed.receive(ResumeRequest(40, tuple(PunctuatedWord(w, "") for w in VOCAB[:6])), 0.0)
    ran = []
    for k, word in enumerate(VOCAB[6:12]):
        resumed.receive(WordsMessage((Word(word),)), float(k))
        ran += _pump(resumed, engine, float(k))
    first, *later = ran
    assert first.stream.full and later and not any(c.stream.full for c in later)  # a new base, then cached

    configured = _protocol(aligner, right_context=1, partials=True)
    configured.receive(HypothesisMessage((Word("the"), Word("a"))), 0.0)
    _pump(configured, engine, 0.0)  # a partial: a whole window, kept nowhere
    before = configured._calls
    configured.receive(ConfigRequest(right_context=2), 0.0)
    assert configured._calls is not before and configured._calls.cache is not before.cache
    assert configured._calls.cache.tokens == 0 and configured.state is configured._calls.state


def test_finals_give_their_decidable_times(aligner):
    protocol = _protocol(aligner, right_context=1, max_delay_ms=NO_DELAY)
    engine = FakeStreamEngine()
    finals: list[tuple[Final, list[float]]] = []

    def run(now: float) -> None:
        while (call := protocol.next_call(now)) is not None:
            for m in protocol.apply(call, run_calls(engine, [call], 0)[0]):
                finals.append((m, protocol.decidable_times(m)))

    protocol.receive(WordsMessage((Word("the"), Word("a"))), 1.0)
    run(1.5)
    protocol.receive(WordsMessage((Word("of"),)), 2.0)
    run(2.5)
    protocol.receive(EndRequest(), 3.0)
    run(3.0)
    got = [(m.start, times) for m, times in finals if isinstance(m, Final)]
    assert got == [(0, [1.0]), (1, [2.0]), (2, [3.0])]
    assert protocol.decidable_times(Flushed(3)) == []


def test_a_protocol_with_a_cache_takes_calls_not_bare_windows(aligner):
    protocol = _protocol(aligner, right_context=0)
    protocol.receive(WordsMessage((Word("the"),)), 0.0)
    with pytest.raises(RuntimeError, match="next_call"):
        protocol.next_request(0.0)
    call = protocol.next_call(0.0)
    with pytest.raises(TypeError, match="EngineOutput"):
        protocol.apply(call, np.zeros((len(call.input_ids), 4), np.float32))


def test_glued_logits_are_refused(aligner):
    """Case logits glued after the punctuation's are not taken for punctuation classes."""
    state = StreamState(aligner, TEST_WINDOW, SessionOptions(right_context=0))
    state.feed(["the"], 0.0)
    request = state.next_request(0.0)
    with pytest.raises(ValueError, match="HeadLogits"):
        state.apply(request, np.zeros((len(request.input_ids), 8), np.float32))


async def test_the_batcher_answers_a_call_with_typed_heads():
    batcher = Batcher(lambda: FakeEngine(has_case=True), pad_id=0, config=BatcherConfig(max_wait_ms=1))
    await batcher.start()
    try:
        ids = np.asarray([101, 7, 8, 9, 102], dtype=np.int64)
        call = EngineCall(WindowRequest(ids, np.asarray([1, 2, 3]), 0, False))
        output = await batcher.run(call)
        assert isinstance(output, EngineOutput) and output.kept is None
        assert output.heads.punctuation.shape == output.heads.case.shape == (5, 4)
        np.testing.assert_array_equal(output.heads.case.argmax(-1), fake_cases(ids))
        np.testing.assert_array_equal(await batcher.infer(ids), output.heads.punctuation)
    finally:
        await batcher.close()
