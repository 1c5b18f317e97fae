import pytest

from streampunct.evaluation import offline_labels, streaming_labels
from streampunct.windowing import WindowConfig
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
