"""With the shipped model: streaming labels agree with the offline OfflineDecoder on test2011."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import numpy as np
import pytest

from streampunct.client.stream_client import StreamClient, Transcript
from streampunct.model import DEFAULT_MODEL_DIR

REPO = Path(__file__).resolve().parents[2]
TEST2011 = REPO / "data" / "iwslt2011" / "test2011"  # shipped with the repository

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_dir() -> Path:
    if not (DEFAULT_MODEL_DIR / "streampunct.json").is_file():
        pytest.skip(f"no trained model at {DEFAULT_MODEL_DIR} yet (it is trained separately)")
    pytest.importorskip("onnxruntime")
    return DEFAULT_MODEL_DIR


async def test_streaming_agrees_with_offline_on_test2011(model_dir):
    if not TEST2011.is_file():
        pytest.skip(f"needs {TEST2011}")
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.model import load_model_info
    from streampunct.server.app import ServerConfig, serve
    from streampunct.server.batcher import BatcherConfig
    from streampunct.text.word_labels import read_word_labels

    words = read_word_labels(TEST2011).words
    info = load_model_info(model_dir)
    punctuator = OfflineDecoder.from_model_dir(model_dir)
    try:
        offline = await asyncio.to_thread(punctuator.punctuate, words)
    finally:
        punctuator.close()

    # right_context in words >= R in tokens (every word has at least one token).
    right_context = info.window.right
    # One session has one window at the engine at a time: no other can join its batch, so
    # waiting for one (max_wait_ms, 5 ms a window by default) would only idle.
    batching = BatcherConfig(max_wait_ms=0)
    server = await serve(ServerConfig(model_dir=model_dir, port=0, batching=batching))
    try:
        await asyncio.wait_for(server.wait_ready(), 120)
        async with await StreamClient.connect(
            server.url, right_context=right_context, max_delay_ms=600_000
        ) as client:
            transcript = Transcript()
            received = asyncio.Event()

            async def receive():
                async for message in client:
                    transcript.apply(message)
                    received.set()

            receiver = asyncio.create_task(receive())
            rng = random.Random(0)
            i = 0
            while i < len(words):
                n = rng.randint(1, 8)
                await client.send_words(words[i : i + n])
                i += n
                if rng.random() < 0.05:  # now and then, the server catches up: all it can decide is final
                    async with asyncio.timeout(120):
                        while transcript.n_final < i - right_context:
                            received.clear()
                            await received.wait()
            await client.end()
            await asyncio.wait_for(receiver, 600)
    finally:
        await server.shutdown()

    assert transcript.words == words
    agreement = float(np.mean(np.asarray(transcript.labels) == np.asarray(offline)))
    print(f"\nstreaming vs offline on test2011 ({len(words)} words, right_context={right_context}, "
          f"window {info.window.to_dict()}): agreement {100 * agreement:.2f}%")
    assert agreement >= 0.97
