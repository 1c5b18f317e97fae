"""The latency contract's one definition, and StreamState deciding the same thing online."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streampunct.core.latency import decidable_times
from streampunct.core.options import SessionOptions
from streampunct.core.stream_state import StreamState
from streampunct.core.windowing import WindowConfig
from tests.streampunct.fakes import FakeAligner


def test_each_trigger_of_the_contract():
    arrivals = [0.0, 0.1, 0.2, 5.0, 5.1, 9.0]
    # right_context 2: word k is decidable when word k + 2 arrives, or 1 s after it arrived.
    assert decidable_times(arrivals, 2, 1000).tolist() == pytest.approx([0.2, 1.1, 1.2, 6.0, 6.1, 10.0])
    # a flush after the first four words (at 5.05) decides them then at the latest
    assert decidable_times(arrivals, 2, 1000, [(4, 5.05)]).tolist() == pytest.approx(
        [0.2, 1.1, 1.2, 5.05, 6.1, 10.0])
    # two flushes: the first one after a word counts
    assert decidable_times(arrivals, 9, 10_000, [(2, 0.15), (6, 9.5)]).tolist() == pytest.approx(
        [0.15, 0.15, 9.5, 9.5, 9.5, 9.5])
    assert decidable_times([], 2, 1000).tolist() == []
    with pytest.raises(ValueError):
        decidable_times(arrivals, -1, 1000)


# A schedule: (gap before the message, words in it, flush after it?)
messages = st.lists(
    st.tuples(st.floats(0.0, 2.0, allow_nan=False), st.integers(0, 5), st.booleans()), min_size=1, max_size=25
)


@settings(max_examples=150, deadline=None)
@given(messages, st.integers(0, 6), st.sampled_from([0, 300, 1000, 10**9]), st.data())
def test_stream_state_decides_online_what_the_contract_says(schedule, right_context, max_delay_ms, data):
    aligner = FakeAligner()
    state = StreamState(aligner, WindowConfig(40, 8, 6), SessionOptions(right_context, max_delay_ms))
    arrivals: list[float] = []
    flushes: list[tuple[int, float]] = []
    now = 0.0
    for gap, n_words, flush in schedule:
        # the caller may ask at any moment in between (the server's timer, a window coming back)
        if data.draw(st.booleans()):
            state.n_decidable(now + gap * data.draw(st.floats(0.0, 1.0)))
        now += gap
        words = [aligner.word(1, len(arrivals) + k) for k in range(n_words)]
        state.feed(words, now)
        arrivals += [now] * n_words
        if flush:
            state.flush(now)
            flushes.append((len(arrivals), now))
    assert state.n_decidable(math.inf) == len(arrivals)
    expected = decidable_times(arrivals, right_context, max_delay_ms, flushes)
    online = np.asarray([state.decidable_at(i) for i in range(len(arrivals))])
    np.testing.assert_allclose(online, expected, rtol=0, atol=1e-9)
