"""Streaming behaviour of a real server: exactly-once finals, the latency contract, load."""

from __future__ import annotations

import asyncio
import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.base import EngineBase
from streampunct.client.stream_client import LatencyTracker, StreamClient, Transcript
from streampunct.core.wire import Final, Flushed
from streampunct.labels import end_of_stream_label
from streampunct.server.batcher import BatcherConfig
from streampunct.text.normalize import normalize_words
from tests.streampunct.fakes import ended_or_final_before

TIMEOUT = 10.0
VOCAB = (
    "the a of and to in is it that you we this was for so but what okay yeah um "
    "hello, world. really? don't it's well-being 'cause --- ... ! Hello WORLD Why "
    "xylophone internationalization supercalifragilistic"
).split()

word = st.one_of(
    st.sampled_from(VOCAB),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12),
)
# A stream: chunks of raw words; after each chunk, maybe a flush.
chunks = st.lists(
    st.tuples(st.lists(word, min_size=0, max_size=12), st.booleans()), min_size=1, max_size=12
)


_shared_servers: dict[int, object] = {}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    stream=chunks,
    right_context=st.integers(0, 6),
    max_delay_ms=st.sampled_from([0, 30, 600_000]),
    partials=st.booleans(),
)
async def test_every_word_is_final_exactly_once_in_order(
    start_server, fake_labels, stream, right_context, max_delay_ms, partials
):
    # Hypothesis runs this body once per example; they share one server per test run.
    server = _shared_servers.get(id(start_server))
    if server is None or not server.ready:
        server = _shared_servers[id(start_server)] = await start_server()
    expected: list[str] = []
    flush_targets: list[int] = []
    async with await StreamClient.connect(
        server.url, right_context=right_context, max_delay_ms=max_delay_ms, partials=partials
    ) as client:
        for raw, flush in stream:
            await client.send_words(raw)
            expected.extend(normalize_words(raw))
            if flush:
                await client.flush()
                flush_targets.append(len(expected))
        await client.end()
        transcript = Transcript()
        flushed = []
        async with asyncio.timeout(TIMEOUT):
            async for message in client:
                transcript.apply(message)  # raises unless finals are contiguous and in order
                if isinstance(message, Flushed):
                    assert transcript.n_final >= message.upto  # its finals came first
                    flushed.append(message.upto)
        assert client.close_code == 1000
    assert transcript.words == expected
    assert transcript.labels in ended_or_final_before(fake_labels(expected))
    assert transcript.ended_words == len(expected)
    assert flushed == flush_targets
    assert not transcript.errors


async def test_right_context_final_comes_once_enough_words_arrived_and_not_earlier(start_server):
    server = await start_server()
    words = [f"w{i}" for i in range(16)]
    async with await StreamClient.connect(server.url, right_context=4, max_delay_ms=600_000) as client:
        transcript = Transcript()
        for sent, w in enumerate(words, start=1):
            await client.send_words([w])
            want = max(0, sent - 4)
            while transcript.n_final < want:
                transcript.apply(await client.recv(timeout=TIMEOUT))
            assert transcript.n_final == want
            # Nothing more may come before the next word is sent.
            try:
                early = await client.recv(timeout=0.05)
            except TimeoutError:
                early = None
            assert early is None, f"after {sent} words got {early}"
        await client.flush()
        while not isinstance(message := await client.recv(timeout=TIMEOUT), Flushed):
            transcript.apply(message)
        assert message.upto == len(words) and transcript.words == words


async def test_slow_sender_gets_each_final_by_its_max_delay_and_not_before(start_server):
    # right_context=20 never decides a word here: only the server's delay timer does, so every
    # word becomes final with no more input (no end), and not before its own max_delay_ms. Each
    # word is sent once the server's partial shows the one before: ten words wait at once, each
    # with its own deadline. (How late after the bound a final comes is a figure for the latency
    # benchmarks; the deadlines' arithmetic is test_stream_state's.)
    server = await start_server()
    max_delay_ms = 300
    words = [f"slow{i}" for i in range(10)]
    loop = asyncio.get_running_loop()
    async with await StreamClient.connect(server.url, right_context=20, max_delay_ms=max_delay_ms,
                                          partials=True) as client:
        tracker = LatencyTracker(client.options)
        transcript = Transcript()

        async def receive_one() -> None:
            message = await client.recv(timeout=TIMEOUT)
            if isinstance(message, Final):
                tracker.final_received(message, loop.time())
            transcript.apply(message)

        for i, w in enumerate(words):
            await client.send_words([w])
            tracker.words_sent([w], loop.time())
            while transcript.n_final + len(transcript.tail) <= i:  # until the server shows it holds w
                await receive_one()
        while transcript.n_final < len(words):
            await receive_one()
    assert transcript.words == words
    latencies = [tracker.final_at[i] - tracker.sent_at[i] for i in range(len(words))]
    assert min(latencies) >= max_delay_ms / 1000 - 0.005


async def test_two_hundred_concurrent_sessions_stay_correct(start_server, fake_engine_cls, fake_labels):
    engine = fake_engine_cls(delay_s=0.002)
    server = await start_server(engine=engine, max_sessions=250, batching=BatcherConfig(max_batch=64))
    rng = random.Random(7)
    streams = [[rng.choice(VOCAB) for _ in range(rng.randint(10, 40))] for _ in range(200)]
    # The senders never pause for a time (they interleave by yielding), so a 200 ms delay seldom
    # decides a word; with 0 ms every word is decided by the delay as soon as it arrives.
    clients = await asyncio.gather(*(
        StreamClient.connect(server.url, right_context=rng.randint(0, 4), max_delay_ms=rng.choice([0, 200]))
        for _ in streams
    ))
    assert len(server.sessions) == 200

    async def run(client, raw, seed):
        local = random.Random(seed)
        i = 0
        while i < len(raw):
            n = local.randint(1, 5)
            await client.send_words(raw[i : i + n])
            i += n
            if local.random() < 0.1:
                await client.flush()
            for _ in range(local.randint(0, 3)):  # let the other senders and the server go on
                await asyncio.sleep(0)
        await client.end()
        transcript = Transcript()
        async for message in client:
            transcript.apply(message)
        return transcript

    transcripts = await asyncio.wait_for(
        asyncio.gather(*(run(c, raw, k) for k, (c, raw) in enumerate(zip(clients, streams, strict=True)))), 60
    )
    for raw, transcript in zip(streams, transcripts, strict=True):
        expected = normalize_words(raw)
        assert transcript.words == expected
        assert transcript.labels in ended_or_final_before(fake_labels(expected))
        assert transcript.ended_words == len(expected) and not transcript.errors
    print(f"\n200 sessions: {len(engine.batch_sizes) - 2} engine calls, "
          f"largest batch {max(engine.batch_sizes[2:])}")


class ContextEngine(EngineBase):
    """A fake model whose labels depend on two tokens of context each side.

    Inside any window that gives a token at least two real neighbours each
    side, its label is the same, so streaming with ``right_context`` >= R must
    reproduce the offline double-overlap decode exactly.
    """

    name = "context-fake"

    def infer(self, input_ids, attention_mask):
        x = input_ids * attention_mask
        padded = np.pad(x, ((0, 0), (2, 2)))
        t = x.shape[1]
        mixed = sum((k + 1) * padded[:, k : k + t] for k in range(5))
        logits = np.zeros((*x.shape, 4), dtype=np.float32)
        np.put_along_axis(logits, (mixed % 4)[..., None], 1.0, axis=-1)
        return logits


async def test_streaming_matches_offline_decode_with_a_context_model(start_server, aligner, test_window):
    from streampunct.core.decoder import decode_offline

    rng = random.Random(11)
    words = normalize_words(rng.choice(VOCAB) for _ in range(800))
    engine = ContextEngine()
    logits = decode_offline(words, aligner, test_window, engine.infer, batch_size=8)
    offline = logits.argmax(-1).tolist()
    # The client ends the stream with its last word pending: it gets a sentence mark.
    offline[-1] = end_of_stream_label(offline[-1], logits[-1])
    server = await start_server(engine=engine)
    async with await StreamClient.connect(
        server.url, right_context=test_window.right, max_delay_ms=600_000
    ) as client:
        i = 0
        while i < len(words):
            n = rng.randint(1, 6)
            await client.send_words(words[i : i + n])
            i += n
        await client.end()
        transcript = Transcript()
        async for message in client:
            transcript.apply(message)
    assert transcript.words == words
    agreement = float(np.mean(np.asarray(transcript.labels) == np.asarray(offline)))
    print(f"\ncontext model, {len(words)} words: streaming/offline agreement {100 * agreement:.2f}%")
    assert agreement == 1.0
