"""Server fixtures: a deterministic fake engine and real servers on port 0 (loopback)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from engines.fake import FakeEngine as _FakeEngine
from engines.fake import fake_labels
from streampunct.core.windowing import WindowConfig

#: Words of the random schedules (:func:`random_schedule`).
SCHEDULE_VOCAB = "the a of and to in is it that you we this was for so but what okay yeah um xylophone".split()


def random_schedule(rng) -> list:
    """20-40 messages of 1-5 words a second apart, an occasional flush, then the end."""
    from streampunct.evaluation.accuracy import Event

    events, t = [], 0.0
    for _ in range(rng.randint(20, 40)):
        t += 1.0
        events.append(Event(t, tuple(rng.choice(SCHEDULE_VOCAB) for _ in range(rng.randint(1, 5)))))
        if rng.random() < 0.1:
            events.append(Event(t, kind="flush"))
    events.append(Event(t + 1.0, kind="end"))
    return events


async def play_schedule(url: str, events: Sequence, right_context: int, **options):
    """Send ``events`` as fast as the socket takes them (no delay bound reached) and
    return the session's :class:`~streampunct.client.stream_client.Transcript`."""
    from streampunct.client.stream_client import StreamClient, Transcript

    client = await StreamClient.connect(url, right_context=right_context, max_delay_ms=600_000, **options)
    for event in events:
        if event.kind == "words":
            await client.send_words(list(event.words))
        elif event.kind == "flush":
            await client.flush()
        else:
            await client.end()
    transcript = Transcript()
    async for message in client:
        transcript.apply(message)
    return transcript


def normalized(events: Sequence) -> list:
    """The schedule as the server sees it: words normalized."""
    from streampunct.evaluation.accuracy import Event
    from streampunct.text.normalize import normalize_words

    return [Event(e.time, tuple(normalize_words(e.words)), e.kind) for e in events]


#: A small window so that streams cross many window boundaries.
TEST_WINDOW = WindowConfig(size=48, left=8, right=6)


fake_label_of_token = fake_labels  # the fake model's label for a token: a pure function of its id


class FakeEngine(_FakeEngine):
    """The one fake engine (:mod:`engines.fake`), with the tests' knobs.

    ``delay_s`` makes each call idle that long (load tests); a batch containing
    ``fail_token`` raises (engine-failure tests). Records every batch size.
    """

    def __init__(self, *, delay_s: float = 0.0, fail_token: int | None = None) -> None:
        super().__init__(batch_ms=delay_s * 1000.0, sleep=True, fail_token=fail_token)


@pytest.fixture
def test_window() -> WindowConfig:
    """The window geometry :func:`start_server` uses by default."""
    return TEST_WINDOW


@pytest.fixture
def fake_engine_cls() -> type[FakeEngine]:
    return FakeEngine


@pytest.fixture
def fake_labels(aligner) -> Callable[[Sequence[str]], list[int]]:
    """The labels the fake engine gives normalized words (context plays no part)."""

    def labels(words: Sequence[str]) -> list[int]:
        out = []
        for word in words:
            ids = aligner.word_ids(word)
            token = np.asarray([ids[aligner.label_offset(len(ids))]], dtype=np.int64)
            out.append(int(fake_label_of_token(token)[0]))
        return out

    return labels


@pytest.fixture
async def start_server(aligner):
    """``await start_server(engine=..., **ServerConfig fields)``: a ready server on port 0."""
    from streampunct.server.app import ServerConfig, ServerRuntime, serve

    servers = []

    async def start(*, engine: object | None = None, window: WindowConfig = TEST_WINDOW, **fields):
        engine = engine if engine is not None else FakeEngine()
        config = ServerConfig(host="127.0.0.1", port=0, **fields)
        server = await serve(config, ServerRuntime(lambda: engine, aligner, window, model_name="fake-model"))
        servers.append(server)
        await server.wait_ready()
        return server

    yield start
    for server in servers:
        await server.shutdown()
