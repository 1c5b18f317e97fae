import pytest

from streampunct.core.windowing import WindowConfig
from streampunct.evaluation.accuracy import offline_labels, streaming_labels
from tests.streampunct.fakes import FakeAligner, fake_infer, fake_label

WINDOW = WindowConfig(40, 8, 6)


def words_of(n):
    a = FakeAligner()
    return a, [a.word(1 + k % 3, k) for k in range(n)]


def test_streaming_right_context_latency_in_words_and_seconds():
    aligner, words = words_of(50)
    run = streaming_labels(words, aligner, WINDOW, fake_infer, right_context=2, words_per_second=2.5)
    assert run.labels == [fake_label(aligner.word_ids(w)[-1]) for w in words]
    assert run.latency_words[:48] == [2] * 48
    assert run.latency_s[0] == pytest.approx(0.8)
    assert run.latency_words[-2:] == [1, 0]  # the end of input flushes the last two words
    assert run.latency_s[-1] == pytest.approx(0.4)
    assert run.model_calls == 48 + 1


def test_streaming_delay_bounds_latency():
    aligner, words = words_of(40)
    run = streaming_labels(
        words, aligner, WINDOW, fake_infer, right_context=100, max_delay_ms=500, words_per_second=2.5
    )
    assert run.labels == offline_labels(words, aligner, WINDOW, fake_infer)
    assert max(run.latency_s) == pytest.approx(0.5)
    assert set(run.latency_words[:-2]) == {1}


def test_live_schedule_chunks_words_in_time_and_ends_with_a_flush():
    from streampunct.evaluation.accuracy import live_schedule

    words = [f"w{k}" for k in range(200)]
    events = live_schedule(words, words_per_second=2.5, max_chunk=4, jitter_ms=150, seed=3)
    assert events[-1].kind == "flush" and events[-1].time == events[-2].time
    chunks = events[:-1]
    assert [w for e in chunks for w in e.words] == words
    assert all(1 <= len(e.words) <= 4 for e in chunks)
    assert len({len(e.words) for e in chunks}) == 4
    times = [e.time for e in chunks]
    assert times == sorted(times)
    spoken = 0
    for e in chunks:  # committed after its last word was spoken, within the jitter
        spoken += len(e.words)
        assert spoken / 2.5 <= e.time
    assert chunks[-1].time <= 200 / 2.5 + 0.15
    assert live_schedule(words, seed=3) == events  # seeded
    with pytest.raises(ValueError):
        live_schedule(words, max_chunk=0)


def test_schedule_labels_of_a_live_stream_follow_the_latency_options():
    from streampunct.core.options import SessionOptions
    from streampunct.evaluation.accuracy import Event, live_schedule, schedule_labels

    aligner, words = words_of(120)
    events = live_schedule(words, seed=1)
    labels = schedule_labels(events, aligner, WINDOW, fake_infer, SessionOptions(2, 1500))
    assert labels == [fake_label(aligner.word_ids(w)[-1]) for w in words]  # context-free fake
    # A delay of 0 decides each chunk on arrival; every word still gets exactly one label.
    assert len(schedule_labels(events, aligner, WINDOW, fake_infer, SessionOptions(2, 0))) == len(words)
    with pytest.raises(ValueError, match="unknown event kind"):
        schedule_labels([Event(0.0, kind="pause")], aligner, WINDOW, fake_infer, SessionOptions())
