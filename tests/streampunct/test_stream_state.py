import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streampunct.core.options import SessionOptions
from streampunct.core.stream_state import StreamState
from streampunct.core.windowing import WindowConfig
from streampunct.labels import PERIOD, QUESTION, O
from tests.streampunct.fakes import FakeAligner, fake_infer, fake_label

WINDOW = WindowConfig(40, 8, 6)


def run_requests(state, now, partial=False):
    """Serve every request the state asks for; return the finals."""
    finals = []
    while (req := state.next_request(now, partial=partial)) is not None:
        logits = fake_infer(req.input_ids[None], np.ones((1, len(req.input_ids)), np.int64))[0]
        assert req.input_ids[0] == FakeAligner.cls_id and req.input_ids[-1] == FakeAligner.sep_id
        assert len(req.input_ids) - 2 <= WINDOW.size
        finals.extend(state.apply(req, logits))
    return finals


events = st.lists(
    st.one_of(
        st.tuples(st.just("words"), st.lists(st.integers(1, 6), min_size=0, max_size=12)),
        st.tuples(st.just("wait"), st.floats(0, 3)),
        st.tuples(st.just("flush"), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(events=events, rc=st.integers(0, 8), delay_ms=st.integers(0, 3000))
def test_every_word_final_once_in_order_never_early(events, rc, delay_ms):
    aligner = FakeAligner()
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=rc, max_delay_ms=delay_ms))
    now = 0.0
    words, arrival, finals = [], [], []
    flushed_upto = 0
    for kind, arg in events:
        if kind == "words":
            new = [aligner.word(n, len(words) + k) for k, n in enumerate(arg)]
            state.feed(new, now)
            words += new
            arrival += [now] * len(new)
        elif kind == "wait":
            now += arg
        else:
            state.flush(now)
            flushed_upto = len(words)
        got = run_requests(state, now)
        for d in got:
            # Never early: right context, delay or flush.
            assert (
                len(words) - 1 - d.index >= rc
                or now - arrival[d.index] >= delay_ms / 1000 - 1e-9
                or d.index < flushed_upto
            )
            assert state.decidable_at(d.index) <= now
        finals += got
        deadline = state.next_deadline()
        if deadline is not None:
            assert deadline > now - 1e-9
    state.flush(now)
    finals += run_requests(state, now)
    assert [d.index for d in finals] == list(range(len(words)))
    assert [d.word for d in finals] == words
    assert [d.label for d in finals] == [fake_label(aligner.word_ids(w)[-1]) for w in words]
    assert state.done and state.next_deadline() is None


def _windows(state, now):
    """Serve every request the state asks for; return each request's tokens."""
    out = []
    while (req := state.next_request(now)) is not None:
        out.append(tuple(req.input_ids))
        state.apply(req, fake_infer(req.input_ids[None], np.ones((1, len(req.input_ids)), np.int64))[0])
    return out


@settings(max_examples=300, deadline=None)
@given(events=events, rc=st.integers(0, 8))
def test_windows_follow_the_order_of_events_not_the_clocks_resolution(events, rc):
    """A coarse clock (a loop whose time moves once a millisecond) reads the same time for
    frames that came one after the other. Without deadlines, the windows are the same as
    with a clock that tells every event apart, however late they are served ("wait"):
    words fed after a flush, or after the words that decided a word, are never its right
    context."""
    aligner = FakeAligner()
    runs = []
    for fine in (True, False):
        state = StreamState(aligner, WINDOW, SessionOptions(right_context=rc, max_delay_ms=10**9))
        windows, n = [], 0
        for k, (kind, arg) in enumerate(events):
            now = float(k) if fine else 0.0
            if kind == "words":
                state.feed([aligner.word(m, n + j) for j, m in enumerate(arg)], now)
                n += len(arg)
            elif kind == "flush":
                state.flush(now)
            else:  # the server gets to the stream's decisions now
                windows += _windows(state, now)
        state.end(float(len(events)) if fine else 0.0)
        runs.append(windows + _windows(state, float(len(events)) if fine else 0.0))
    assert runs[0] == runs[1]


def test_words_after_a_flush_at_the_same_time_are_not_its_right_context():
    aligner = FakeAligner()
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=3, max_delay_ms=2000))
    words = [aligner.word(1, k) for k in range(6)]
    state.feed(words[:3], 5.0)
    state.flush(5.0)
    state.feed(words[3:], 5.0)  # the same clock reading: sent right after the flush
    request = state.next_request(5.0)
    assert request.first_word == 0 and request.n_words == 3
    assert len(request.input_ids) == 2 + sum(len(aligner.word_ids(w)) for w in words[:3])  # nothing after
    state.apply(request, fake_infer(request.input_ids[None], np.ones((1, len(request.input_ids)), np.int64))[0])
    assert state.right_context(2) == []
    assert state.next_request(5.0) is None  # words 3-5 wait for their own right context
    state.end(5.0)
    assert [d.index for d in run_requests(state, 5.0)] == [3, 4, 5]


def test_right_context_makes_words_decidable():
    aligner = FakeAligner()
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=2, max_delay_ms=10_000))
    state.feed([aligner.word(1, 0), aligner.word(2, 1)], 0.0)
    assert state.next_request(0.0) is None
    state.feed([aligner.word(1, 2)], 0.1)
    finals = run_requests(state, 0.1)
    assert [d.index for d in finals] == [0]
    assert state.decidable_at(0) == 0.1


def test_delay_makes_words_decidable_at_deadline():
    aligner = FakeAligner()
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=5, max_delay_ms=300))
    state.feed([aligner.word(1, 0)], 1.0)
    state.feed([aligner.word(1, 1)], 1.2)
    assert state.next_deadline() == pytest.approx(1.3)
    assert run_requests(state, 1.29) == []
    assert [d.index for d in run_requests(state, 1.3)] == [0]
    assert state.decidable_at(0) == pytest.approx(1.3)
    assert state.next_deadline() == pytest.approx(1.5)


def test_decided_by_flush_tells_a_flush_or_end_from_a_deadline_or_right_context():
    aligner = FakeAligner()
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=1, max_delay_ms=300))
    state.feed([aligner.word(1, 0), aligner.word(1, 1)], 0.0)  # word 0 by right context
    state.feed([aligner.word(1, 2)], 1.0)  # word 1 by its deadline (0.3), word 2 by the flush
    assert [d.index for d in run_requests(state, 1.0)] == [0, 1]
    state.flush(1.1)
    assert [d.index for d in run_requests(state, 1.1)] == [2]
    assert [state.decided_by_flush(i) for i in range(3)] == [False, False, True]
    state.feed([aligner.word(1, 3)], 2.0)
    state.end(2.0)
    assert [d.index for d in run_requests(state, 2.0)] == [3]
    assert state.decided_by_flush(3)


def test_one_request_in_flight_and_coalescing():
    aligner = FakeAligner()
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=0, max_delay_ms=0))
    state.feed([aligner.word(1, 0)], 0.0)
    first = state.next_request(0.0)
    assert first is not None and first.n_words == 1
    state.feed([aligner.word(1, k) for k in range(1, 5)], 0.0)
    assert state.next_request(0.0) is None  # one at a time
    state.apply(first, fake_infer(first.input_ids[None], np.ones((1, len(first.input_ids)), np.int64))[0])
    second = state.next_request(0.0)
    assert second.first_word == 1 and second.n_words == 4  # the waiting words coalesce


def test_abort_requeues_words():
    aligner = FakeAligner()
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=0))
    state.feed([aligner.word(1, 0), aligner.word(1, 1)], 0.0)
    req = state.next_request(0.0)
    state.abort(req)
    again = state.next_request(0.0)
    assert again.first_word == 0 and again.n_words == 2
    with pytest.raises(ValueError, match="not in flight"):
        state.apply(req, np.zeros((10, 4), np.float32))


def test_partial_covers_undecided_tail_and_is_replaced():
    aligner = FakeAligner()
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=3, max_delay_ms=10_000))
    state.feed([aligner.word(2, k) for k in range(5)], 0.0)
    finals = run_requests(state, 0.0, partial=True)
    assert [d.index for d in finals] == [0, 1]
    assert [d.index for d in state.last_partial] == [2, 3, 4]
    assert run_requests(state, 0.0, partial=True) == []  # nothing new: no new partial
    state.feed([aligner.word(1, 5)], 0.5)
    finals = run_requests(state, 0.5, partial=True)
    assert [d.index for d in finals] == [2]
    assert [d.index for d in state.last_partial] == [3, 4, 5]


@settings(max_examples=200, deadline=None)
@given(events=events, rc=st.integers(0, 40), delay_ms=st.integers(0, 30_000))
def test_a_partial_covers_the_whole_undecided_tail_however_long(events, rc, delay_ms):
    """protocol.md: a partial is the not-yet-final tail ``start .. N-1``, however long (a large
    right_context and delay make tails longer than one window)."""
    aligner = FakeAligner()
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=rc, max_delay_ms=delay_ms))
    now, n = 0.0, 0
    for kind, arg in events:
        if kind == "words" and arg:
            state.feed([aligner.word(k, n + i) for i, k in enumerate(arg)], now)
            n += len(arg)
        elif kind == "wait":
            now += arg
        elif kind == "flush":
            state.flush(now)
        run_requests(state, now, partial=True)
        if state.last_partial:
            assert [d.index for d in state.last_partial] == list(range(state.n_final, state.n_words))
            assert [d.word for d in state.last_partial] == list(state.words[state.n_final - state._base:])


def test_a_tail_longer_than_one_window_keeps_its_earlier_labels():
    """The words before the last window keep the labels of the partial that last labeled them,
    O where none did (they came in one message longer than a window)."""
    aligner = FakeAligner()
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=1000, max_delay_ms=600_000))
    model = [fake_label(aligner.word_ids(aligner.word(1, k))[0]) for k in range(80)]  # context-free labels
    state.feed([aligner.word(1, k) for k in range(20)], 0.0)
    assert run_requests(state, 0.0, partial=True) == []
    assert [(d.index, d.label) for d in state.last_partial] == list(enumerate(model[:20]))  # one window
    state.feed([aligner.word(1, 20 + k) for k in range(60)], 1.0)  # 80 one-token words: over a window
    assert run_requests(state, 1.0, partial=True) == []
    tail = state.last_partial
    assert [d.index for d in tail] == list(range(80))
    fresh = 80 - (WINDOW.size - WINDOW.left)  # the last window holds size - left tokens of the tail
    assert [d.label for d in tail] == model[:20] + [O] * (fresh - 20) + model[fresh:]


def test_left_context_comes_from_earlier_words():
    aligner = FakeAligner()
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=0))
    words = [aligner.word(1, k) for k in range(30)]
    state.feed(words[:20], 0.0)
    run_requests(state, 0.0)
    state.feed(words[20:], 0.0)
    req = state.next_request(0.0)
    assert req.first_word == 20
    # L=8 tokens of left context before word 20's label token.
    assert req.positions[0] - 1 == 8
    assert req.input_ids[1] == aligner.word_ids(words[12])[0]


def test_feed_rejects_empty_words_and_bad_config():
    state = StreamState(FakeAligner(), WINDOW, SessionOptions())
    with pytest.raises(ValueError, match="empty word"):
        state.feed([""], 0.0)
    with pytest.raises(ValueError):
        SessionOptions(right_context=-1)


@pytest.mark.parametrize("seed", range(5))
def test_long_streams_stay_bounded_and_correct(monkeypatch, seed):
    import random

    import streampunct.core.stream_state as ss

    monkeypatch.setattr(ss, "KEEP_WORDS", 8)
    monkeypatch.setattr(ss, "COMPACT_EVERY", 16)
    rng = random.Random(seed)
    aligner = FakeAligner()
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=rng.randint(0, 5), max_delay_ms=700))
    words, finals, now, peak, arrived = [], [], 0.0, 0, []
    while len(words) < 3000:
        new = [aligner.word(rng.randint(1, 6), len(words) + k) for k in range(rng.randint(1, 9))]
        state.feed(new, now)
        words += new
        arrived += [now] * len(new)
        now += rng.random()
        if rng.random() < 0.05:
            state.flush(now)
        batch = run_requests(state, now)
        # Timing lookups take stream indices, also after old words were dropped.
        for d in batch:
            assert state.arrival(d.index) == arrived[d.index]
            assert arrived[d.index] <= state.decidable_at(d.index) <= now
        finals += batch
        peak = max(peak, len(state.words))
    state.flush(now)
    finals += run_requests(state, now)
    assert [d.index for d in finals] == list(range(len(words)))
    assert [d.word for d in finals] == words
    assert [d.label for d in finals] == [fake_label(aligner.word_ids(w)[-1]) for w in words]
    assert state.n_words == state.n_final == len(words)
    assert peak < 200  # not 3000: old words were dropped
    with pytest.raises(IndexError, match="word 0 is not held"):
        state.arrival(0)


# -- the end of a stream ends a sentence -----------------------------------------

def infer_with_last_row(row):
    """Every word O (by a wide margin) except the label token ``LAST_TOKEN``, which gets ``row``."""

    def infer(input_ids, attention_mask):
        logits = np.zeros(input_ids.shape + (4,), dtype=np.float32)
        logits[..., O] = 5.0
        logits[input_ids == LAST_TOKEN] = row
        return logits

    return infer


#: The label token of the stream's last word in these tests (word serial 3, one token).
LAST_TOKEN = FakeAligner().word_ids(FakeAligner.word(1, 3))[0]


def serve_all(state, now, infer):
    finals = []
    while (req := state.next_request(now)) is not None:
        finals.extend(state.apply(req, infer(req.input_ids[None], np.ones((1, len(req.input_ids)), np.int64))[0]))
    return finals


@pytest.mark.parametrize(
    ("row", "label"),
    [
        ([2.0, 0.0, -1.0, 1.0], QUESTION),  # O wins; question beats period
        ([2.0, 0.0, 1.0, -1.0], PERIOD),  # O wins; period beats question
        ([0.0, 3.0, -1.0, 1.0], QUESTION),  # a comma becomes a sentence mark too
        ([0.0, 0.0, 1.0, 1.0], PERIOD),  # a tie gives a period
        ([0.0, 0.0, 1.0, 3.0], QUESTION),  # the model's own marks are kept
        ([0.0, 0.0, 3.0, 1.0], PERIOD),
    ],
)
def test_end_gives_the_last_word_the_sentence_mark_the_model_prefers(row, label):
    aligner = FakeAligner()
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=2, max_delay_ms=10_000))
    infer = infer_with_last_row(np.asarray(row, dtype=np.float32))
    state.feed([aligner.word(1, k) for k in range(4)], 0.0)
    assert [d.label for d in serve_all(state, 0.0, infer)] == [O, O]
    state.end(0.1)
    finals = serve_all(state, 0.1, infer)
    assert [(d.index, d.label) for d in finals] == [(2, O), (3, label)]
    assert state.ended and state.done
    with pytest.raises(ValueError, match="ended"):
        state.feed([aligner.word(1, 4)], 0.2)


def test_flush_does_not_force_a_mark_and_a_final_word_is_never_revised():
    aligner = FakeAligner()
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=2, max_delay_ms=10_000))
    infer = infer_with_last_row(np.asarray([2.0, 0.0, -1.0, 1.0], dtype=np.float32))
    state.feed([aligner.word(1, k) for k in range(4)], 0.0)
    state.flush(0.0)
    assert [d.label for d in serve_all(state, 0.0, infer)] == [O, O, O, O]
    state.end(0.1)  # nothing pending: the final O of word 3 stays
    assert serve_all(state, 0.1, infer) == [] and state.done


def test_end_marks_the_last_word_only_when_end_decides_it():
    aligner = FakeAligner()
    infer = infer_with_last_row(np.asarray([2.0, 0.0, -1.0, 1.0], dtype=np.float32))
    ones = lambda req: np.ones((1, len(req.input_ids)), np.int64)  # noqa: E731
    # right_context 0: every word is decidable on arrival, before `end` comes; the window
    # may still be at the engine when it does, but the label must not depend on that.
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=0, max_delay_ms=10_000))
    state.feed([aligner.word(1, k) for k in range(4)], 0.0)
    req = state.next_request(0.0)
    assert req.first_word == 0 and req.n_words == 4
    state.end(0.1)
    finals = state.apply(req, infer(req.input_ids[None], ones(req))[0])
    assert [d.label for d in finals] == [O, O, O, O]
    # right_context 2: the last two words wait for `end`, which decides them: the last one
    # gets the sentence mark (here QUESTION: its question logit beats its period logit),
    # even though the first decision is still at the engine when `end` comes.
    state = StreamState(aligner, WINDOW, SessionOptions(right_context=2, max_delay_ms=10_000))
    state.feed([aligner.word(1, k) for k in range(4)], 0.0)
    first = state.next_request(0.0)
    assert first.first_word == 0 and first.n_words == 2
    state.end(0.1)
    labels = [d.label for d in state.apply(first, infer(first.input_ids[None], ones(first))[0])]
    second = state.next_request(0.1)
    assert second.first_word == 2 and second.n_words == 2
    labels += [d.label for d in state.apply(second, infer(second.input_ids[None], ones(second))[0])]
    assert labels == [O, O, O, QUESTION]


