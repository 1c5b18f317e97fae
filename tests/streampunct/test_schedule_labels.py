"""Labels depend on the arrival schedule only: the server, however late it runs a
window, gives the labels of the simulation (``evaluation.schedule_labels``)."""

from __future__ import annotations

import asyncio
import random

import numpy as np

from streampunct.client.stream_client import StreamClient, Transcript
from streampunct.core.options import SessionOptions
from streampunct.evaluation.accuracy import schedule_labels
from streampunct.server.batcher import BatcherConfig
from streampunct.text.normalize import normalize_words
from tests.streampunct.conftest import (
    SCHEDULE_VOCAB,
    TEST_WINDOW,
    FakeEngine,
    fake_label_of_token,
    normalized,
    play_schedule,
    random_schedule,
)

VOCAB = SCHEDULE_VOCAB


class WindowDependentEngine(FakeEngine):
    """Each row's labels depend on the whole window (its first token and length), rows
    independent of each other: a word decided in another window may get another label."""

    def infer(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        super().infer(input_ids, attention_mask)  # delay, batch sizes
        return window_logits(input_ids, attention_mask)


def window_logits(input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    shifted = input_ids + attention_mask.sum(axis=1, keepdims=True) + input_ids[:, 1:2]
    logits = np.zeros((*input_ids.shape, 4), dtype=np.float32)
    np.put_along_axis(logits, fake_label_of_token(shifted)[..., None], 1.0, axis=-1)
    return logits


def test_the_window_dependent_engine_depends_on_the_window():
    engine = WindowDependentEngine()
    ids = np.asarray([[1, 40, 41, 42, 2], [1, 39, 40, 41, 2]], dtype=np.int64)
    labels = engine.infer(ids, np.ones_like(ids)).argmax(-1)
    same_token = [labels[0, 1], labels[1, 2]]  # token 40 in two windows
    assert len({int(x) for x in same_token}) == 2


async def test_a_late_server_gives_the_labels_of_the_schedule(start_server, aligner):
    # The engine is slow and the clients send as fast as they can, so the server runs
    # each decision well after it became due, with later words already there.
    engine = WindowDependentEngine(delay_s=0.01)
    server = await start_server(engine=engine, batching=BatcherConfig(max_batch=64, max_wait_ms=2))
    rng = random.Random(11)
    streams = [(random_schedule(rng), k % 5) for k in range(12)]
    transcripts = await asyncio.wait_for(
        asyncio.gather(*(play_schedule(server.url, e, rc) for e, rc in streams)), 60)
    assert max(engine.batch_sizes[2:]) > 1  # windows of several streams shared engine calls
    for (events, rc), transcript in zip(streams, transcripts, strict=True):
        schedule = normalized(events)
        expected = schedule_labels(schedule, aligner, TEST_WINDOW, window_logits,
                                   SessionOptions(right_context=rc, max_delay_ms=600_000))
        assert transcript.words == [w for e in schedule for w in e.words]
        assert transcript.labels == expected, f"right_context {rc}"


async def test_finals_carry_the_learned_case_of_a_truecasing_head(start_server, aligner):
    from engines.fake import FakeEngine as OneFake
    from engines.fake import fake_cases, fake_labels
    from streampunct.labels import LOWER
    from streampunct.text.normalize import render

    server = await start_server(engine=OneFake(has_case=True))
    rng = random.Random(5)
    words = normalize_words(rng.choice([*VOCAB, *(f"w{k}" for k in range(40))]) for _ in range(80))
    client = await StreamClient.connect(server.url, right_context=2, max_delay_ms=600_000, capitalize=True)
    await client.send_words(words)
    await client.flush()
    await client.end()
    texts, transcript = [], Transcript()
    async for message in client:
        transcript.apply(message)
        if getattr(message, "text", None) and type(message).__name__ == "Final":
            texts.append(message.text)
    label_token = [aligner.word_ids(w)[aligner.label_offset(len(aligner.word_ids(w)))] for w in words]
    ids = np.asarray(label_token, dtype=np.int64)
    labels, cases = fake_labels(ids).tolist(), fake_cases(ids).tolist()
    assert transcript.words == words and transcript.labels == labels
    assert any(c != LOWER for c in cases)
    # the head's case where it says "not lowercase", the rules elsewhere (sentence starts, "I")
    assert " ".join(texts) == render(words, labels, capitalize=True, cases=cases)
    assert " ".join(texts) != render(words, labels, capitalize=True)
