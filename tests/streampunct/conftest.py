"""Server fixtures: a deterministic fake engine and real servers on port 0 (loopback)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from streampunct.labels import COMMA, PERIOD, QUESTION, O
from streampunct.windowing import WindowConfig

#: A small window so that streams cross many window boundaries.
TEST_WINDOW = WindowConfig(size=48, left=8, right=6)


def fake_label_of_token(token_ids: np.ndarray) -> np.ndarray:
    """The fake model's label for a token: a pure function of its id."""
    labels = np.full(token_ids.shape, O, dtype=np.int64)
    labels[token_ids % 11 == 0] = COMMA
    labels[token_ids % 7 == 0] = PERIOD
    labels[token_ids % 13 == 0] = QUESTION
    return labels


class FakeEngine:
    """Logits from token ids alone, so the right labels are known without a model.

    ``delay_s`` makes each call slow (load tests); a batch containing
    ``fail_token`` raises (engine-failure tests). Records every batch size.
    """

    name = "fake"

    def __init__(self, *, delay_s: float = 0.0, fail_token: int | None = None) -> None:
        self.delay_s = delay_s
        self.fail_token = fail_token
        self.batch_sizes: list[int] = []
        self.threads: set[str] = set()
        self.closed = False

    def infer(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        assert input_ids.dtype == np.int64 and attention_mask.dtype == np.int64
        assert input_ids.shape == attention_mask.shape
        self.threads.add(threading.current_thread().name)
        self.batch_sizes.append(input_ids.shape[0])
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail_token is not None and bool((input_ids == self.fail_token).any()):
            raise RuntimeError("injected engine failure")
        logits = np.zeros((*input_ids.shape, 4), dtype=np.float32)
        np.put_along_axis(logits, fake_label_of_token(input_ids)[..., None], 1.0, axis=-1)
        return logits

    def close(self) -> None:
        self.closed = True


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
    from streampunct.server import ServerConfig, serve

    servers = []

    async def start(*, engine: object | None = None, window: WindowConfig = TEST_WINDOW, **fields):
        engine = engine if engine is not None else FakeEngine()
        config = ServerConfig(host="127.0.0.1", port=0, **fields)
        server = await serve(
            config, engine_factory=lambda: engine, aligner=aligner, window=window, model_name="fake-model"
        )
        servers.append(server)
        await server.wait_ready()
        return server

    yield start
    for server in servers:
        await server.shutdown()
