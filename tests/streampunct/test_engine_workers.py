"""Engine workers with the shipped model: each worker's engine gets its share of the cores,
and a stream gets the same finals from one worker or two."""

from __future__ import annotations

import asyncio

import pytest

from streampunct.client.stream_client import StreamClient, Transcript
from streampunct.model import DEFAULT_MODEL_DIR

pytestmark = pytest.mark.slow

TEXT = ("so what do you think about that i think it is great really great where do we go from here "
        "we go home and then we have dinner with my parents who live near the station ") * 8


@pytest.fixture(scope="module")
def model_dir():
    if not (DEFAULT_MODEL_DIR / "streampunct.json").is_file():
        pytest.skip(f"no model at {DEFAULT_MODEL_DIR}")
    pytest.importorskip("onnxruntime")
    return DEFAULT_MODEL_DIR


async def _finals(workers: int, model_dir, words: list[str]) -> tuple[Transcript, list[int]]:
    from streampunct.server.app import ServerConfig, serve
    from streampunct.server.batcher import BatcherConfig

    server = await serve(ServerConfig(model_dir=model_dir, port=0, batching=BatcherConfig(engine_workers=workers)))
    try:
        await asyncio.wait_for(server.wait_ready(), 120)
        threads = [w.engine.threads for w in server.batcher._workers]
        transcript = Transcript()
        async with await StreamClient.connect(server.url, right_context=2, max_delay_ms=60_000) as client:
            for k in range(0, len(words), 3):
                await client.send_words(words[k : k + 3])
            await client.end()
            async for message in client:
                transcript.apply(message)
    finally:
        await server.shutdown()
    return transcript, threads


async def test_two_workers_split_the_cores_and_give_the_same_finals(model_dir):
    from engines.ort_engine import physical_cores

    words = TEXT.split()
    one, threads_one = await _finals(1, model_dir, words)
    two, threads_two = await _finals(2, model_dir, words)
    assert threads_one == [physical_cores()]
    assert threads_two == [max(1, physical_cores() // 2)] * 2
    assert one.words == two.words == words
    # One stream: every batch is one window, and one intra-op thread or two give the same logits.
    assert one.labels == two.labels
    assert len(set(one.labels)) > 1
