"""Memory that outlives sessions: nothing per session stays after it closes, and the
allocator's free memory is given back (issue 41, "Memory"; docs/server.md, "Memory that stays")."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import weakref

import numpy as np
import pytest

from streampunct.client.stream_client import StreamClient, Transcript
from streampunct.server import allocator
from streampunct.server.batcher import Batcher, BatcherConfig
from tests.streampunct.conftest import TEST_WINDOW
from tests.streampunct.fakes import until
from tests.streampunct.test_stream_cache import SHAPE, FakeStreamEngine

TIMEOUT = 20.0
WORDS = "the a of and to in is it that you we this was for so but what okay yeah um".split()


def seq(n: int) -> np.ndarray:
    return np.full(n, 5, dtype=np.int64)


class TrimRecorder:
    """A trim function that records the thread it ran in and wakes the test."""

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.loop = asyncio.get_running_loop()
        self.ran = asyncio.Event()

    def __call__(self) -> bool:
        self.threads.append(threading.current_thread().name)
        self.loop.call_soon_threadsafe(self.ran.set)
        return True

    async def reach(self, n: int) -> None:
        """Wait until the trim has run ``n`` times."""
        async with asyncio.timeout(TIMEOUT):
            while len(self.threads) < n:
                self.ran.clear()
                if len(self.threads) < n:
                    await self.ran.wait()


def test_the_allocator_functions_answer_on_any_libc():
    assert isinstance(allocator.trim(), bool)
    figures = allocator.heap_figures()
    if figures is not None:  # glibc 2.33+
        assert set(figures) == {"arena_mb", "in_use_mb", "free_kept_mb", "mmapped_mb"}
        assert figures["in_use_mb"] > 0
    with pytest.raises(ValueError, match="trim_interval_s"):
        BatcherConfig(trim_interval_s=0)


@contextlib.asynccontextmanager
async def trimming_batcher(fake_engine_cls):
    """A started batcher whose trims (every 0.05 s at most) a :class:`TrimRecorder` records."""
    recorder = TrimRecorder()
    batcher = Batcher(lambda: fake_engine_cls(), pad_id=0, trim=recorder,
                      config=BatcherConfig(max_wait_ms=0, trim_interval_s=0.05))
    await batcher.start()
    try:
        yield batcher, recorder
    finally:
        await batcher.close()


async def test_an_idle_engine_trims_once_on_its_worker_thread_and_again_after_new_batches(fake_engine_cls):
    async with trimming_batcher(fake_engine_cls) as (batcher, recorder):
        await batcher.infer(seq(3))
        await recorder.reach(1)  # idle a trim interval after the batch
        await until(lambda: batcher.trims == 1)
        assert recorder.threads == ["streampunct-engine_0"]
        assert batcher._idle_trim_at() is None  # nothing freed since: no more trims while idle
        await batcher.infer(seq(4))
        await recorder.reach(2)
        await until(lambda: batcher.trims == 2)
        assert recorder.threads == ["streampunct-engine_0"] * 2


async def test_memory_freed_outside_the_engine_is_trimmed_without_a_batch(fake_engine_cls):
    # connections that never reach a session (unfinished handshakes of a megabyte each) left
    # their memory with the heaps until a session's batch came: the server says when they go
    async with trimming_batcher(fake_engine_cls) as (batcher, recorder):
        await until(lambda: batcher._idle_trim_at() is None)  # the start's own trim, if any, is done
        n = batcher.trims
        batcher.note_freed()
        await recorder.reach(n + 1)
        await until(lambda: batcher.trims == n + 1)
        assert set(recorder.threads) == {"streampunct-engine_0"} and batcher._idle_trim_at() is None
        batcher.note_freed()
        batcher.note_freed()  # one trim for what was freed since the last
        await recorder.reach(n + 2)
        await until(lambda: batcher.trims == n + 2)
        assert batcher._idle_trim_at() is None and len(recorder.threads) == n + 2


async def test_a_busy_engine_trims_between_batches(fake_engine_cls):
    # Requests follow each other closer than the trim interval: the engine is never idle for it,
    # so the trims are the under-load ones, taken between two batches on the worker's thread.
    recorder = TrimRecorder()
    engine = fake_engine_cls(delay_s=0.01)
    batcher = Batcher(lambda: engine, pad_id=0, trim=recorder,
                      config=BatcherConfig(max_wait_ms=0, trim_interval_s=0.05))
    await batcher.start()
    stop = asyncio.Event()

    async def keep_busy() -> int:
        done = 0
        while not stop.is_set():
            await batcher.infer(seq(3))
            done += 1
        return done

    try:
        busy = asyncio.gather(*(keep_busy() for _ in range(3)))
        await recorder.reach(2)
        stop.set()
        assert min(await busy) > 0
    finally:
        await batcher.close()
    assert batcher.trims >= 2 and set(recorder.threads) == {"streampunct-engine_0"}


async def test_no_trims_when_switched_off(fake_engine_cls):
    recorder = TrimRecorder()
    batcher = Batcher(lambda: fake_engine_cls(), pad_id=0, trim=recorder,
                      config=BatcherConfig(max_wait_ms=0, trim_interval_s=None))
    await batcher.start()
    try:
        await batcher.infer(seq(3))
        assert batcher._idle_trim_at() is None
    finally:
        await batcher.close()
    assert batcher.trims == 0 and recorder.threads == []


def _metric_series(server) -> set[tuple[str, tuple]]:
    """Every (sample name, labels) the server's /metrics has: grows only with per-session labels."""
    return {(s.name, tuple(sorted(s.labels.items())))
            for family in server.metrics.registry.collect() for s in family.samples}


async def _one_session(url: str, k: int, opened: asyncio.Event, release: asyncio.Event) -> Transcript:
    client = await StreamClient.connect(url, right_context=1, max_delay_ms=600_000)
    opened.set()
    await release.wait()
    for j in range(12):
        await client.send_words([WORDS[(k + j) % len(WORDS)], WORDS[(3 * k + j) % len(WORDS)]])
    await client.end()
    transcript = Transcript()
    async for message in client:
        transcript.apply(message)
    return transcript


async def test_nothing_of_a_session_outlives_it(aligner):
    """Rounds of sessions open and close through a real server (cached left context on): after
    each round no Session object is alive, the server's per-session structures are empty, the
    metrics have the series they had, and the batcher holds no request."""
    from streampunct.server.app import ServerConfig, ServerRuntime, serve

    engine = FakeStreamEngine()
    server = await serve(ServerConfig(host="127.0.0.1", port=0,
                                      batching=BatcherConfig(max_wait_ms=1, trim_interval_s=0.05)),
                         ServerRuntime(lambda: engine, aligner, TEST_WINDOW, "fake-stream", stream_shape=SHAPE))
    try:
        await server.wait_ready()
        series = _metric_series(server)
        batcher, n = server.batcher, 6
        for round_ in range(3):
            opened = [asyncio.Event() for _ in range(n)]
            release = asyncio.Event()
            clients = [asyncio.create_task(_one_session(server.url, round_ * n + k, opened[k], release))
                       for k in range(n)]
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in opened)), TIMEOUT)
            await until(lambda: len(server.sessions) == n)
            alive = [weakref.ref(s) for s in server.sessions]
            release.set()
            transcripts = await asyncio.wait_for(asyncio.gather(*clients), TIMEOUT)
            assert all(len(t.words) == 24 for t in transcripts)
            await asyncio.wait_for(server._sessions_gone.wait(), TIMEOUT)
            gc.collect()
            assert [r for r in alive if r() is not None] == []
            assert not server.sessions
            assert _metric_series(server) == series  # no label set per session
            assert not batcher._queue and not batcher._running
            await until(lambda: not batcher._in_flight)
        # the idle engine gives memory back (the trim may already have run while the test looked)
        await until(lambda: batcher.trimmed_since_last_batch)
    finally:
        await server.shutdown()


@pytest.mark.parametrize("worker", [{}, {"workers": 2, "worker": 1}])  # a worker's answers name it
async def test_a_closed_connections_protocol_is_freed_without_the_cycle_collector(aligner, worker):
    """websockets' protocol object and its parser generator form a cycle (with the zlib contexts
    of permessage-deflate, tens of KB a connection); the server breaks it once the connection
    is closed, so the protocol goes by reference counting, not at the next full collection."""
    from websockets.server import ServerProtocol

    from streampunct.server.app import ServerConfig, ServerRuntime, serve

    def server_protocols() -> int:
        return sum(1 for o in gc.get_objects() if type(o) is ServerProtocol)

    engine = FakeStreamEngine()
    server = await serve(ServerConfig(host="127.0.0.1", port=0, **worker),
                         ServerRuntime(lambda: engine, aligner, TEST_WINDOW, "fake-stream", stream_shape=SHAPE))
    gc.collect()
    gc.disable()
    try:
        await server.wait_ready()
        before = server_protocols()
        opened, release = asyncio.Event(), asyncio.Event()
        release.set()
        for k in range(4):
            transcript = await asyncio.wait_for(_one_session(server.url, k, opened, release), TIMEOUT)
            assert len(transcript.words) == 24
        await until(lambda: server_protocols() == before, timeout=10.0)
        # connections that never become sessions: a health check, a refusal, a handshake cut short
        port = server.port
        for raw in (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                    b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                    b"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"):
            for _ in range(3):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(raw)
                await writer.drain()
                if raw.endswith(b"\r\n\r\n"):
                    answer = await asyncio.wait_for(reader.read(), 5)
                    assert answer.startswith(b"HTTP/1.1 "), (raw, answer)
                writer.close()
                await writer.wait_closed()
        await until(lambda: server_protocols() == before and not server._tcp_connections, timeout=10.0)
    finally:
        gc.enable()
        await server.shutdown()
