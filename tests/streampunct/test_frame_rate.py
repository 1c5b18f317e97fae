"""The session reader's frame rate (streampunct.server.rate.FrameRate) and its use by the server."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect as ws_connect

from streampunct.core.wire import EndRequest, FlushRequest, Word, WordsMessage, encode
from streampunct.server import session as session_module
from streampunct.server.batcher import BatcherConfig
from streampunct.server.rate import FRAME_UNIT_BYTES, FRAME_UNIT_CPU_S, FrameRate, frame_cost
from tests.streampunct.fakes import until


@settings(max_examples=200, deadline=None)
@given(rate=st.sampled_from([1.0, 5.0, 50.0, 200.0]),
       gaps=st.lists(st.floats(min_value=0.0, max_value=0.5), min_size=1, max_size=300))
def test_frames_taken_when_the_bucket_says_never_exceed_the_burst_plus_the_rate(rate, gaps):
    """However a reader that obeys wait() is scheduled, it takes at most burst + rate x elapsed
    frames in any stretch of time, and waits only when the bucket is empty."""
    bucket = FrameRate(rate)
    now, taken = 0.0, []
    for gap in gaps:
        now += gap
        wait = bucket.wait(now)
        assert wait >= 0.0
        now += wait
        assert bucket.wait(now) == pytest.approx(0.0, abs=1e-9)
        bucket.take(now)
        taken.append(now)
    for i in range(len(taken)):
        for j in range(i, len(taken)):
            assert j - i + 1 <= bucket.burst + rate * (taken[j] - taken[i]) + 1e-6


def test_a_burst_is_taken_at_once_then_one_frame_per_interval():
    bucket = FrameRate(10)
    for _ in range(10):
        assert bucket.wait(0.0) == 0.0
        bucket.take(0.0)
    assert bucket.wait(0.0) == pytest.approx(0.1)
    assert bucket.wait(0.05) == pytest.approx(0.05)
    bucket.take(0.1)
    assert bucket.wait(0.1) == pytest.approx(0.1)
    assert bucket.wait(10.0) == 0.0  # refilled, never above the burst
    for _ in range(10):
        bucket.take(10.0)
    assert bucket.wait(10.0) > 0


def test_a_frame_counts_once_per_started_unit_of_its_text():
    assert [frame_cost(x) for x in ("", "x", "x" * FRAME_UNIT_BYTES, "x" * (FRAME_UNIT_BYTES + 1), b"x" * 1000)] == [
        1, 1, 1, 2, 4]
    bucket = FrameRate(10)
    bucket.take(0.0, frame_cost("x" * 40 * FRAME_UNIT_BYTES))  # 40 frames' worth: 30 past the burst
    assert bucket.wait(0.0) == pytest.approx(3.1)  # back at one frame after (1 - -30) / 10 s
    assert bucket.wait(3.1) == pytest.approx(0.0)


def test_a_frame_counts_by_the_cpu_it_took_when_that_is_more_than_its_text():
    small = "x" * 10
    assert frame_cost(small, 0.0) == 1
    assert frame_cost(small, FRAME_UNIT_CPU_S / 2) == 1  # a real-time frame: once
    assert frame_cost(small, FRAME_UNIT_CPU_S * 1.5) == 2
    assert frame_cost(small, 0.25) == round(0.25 / FRAME_UNIT_CPU_S)  # 250 ms of the loop
    big = "x" * 40 * FRAME_UNIT_BYTES
    assert frame_cost(big, FRAME_UNIT_CPU_S) == 40  # its text costs more
    assert frame_cost(small, float("nan")) == frame_cost(small, -1.0) == 1


@pytest.mark.parametrize("rate", [0, -1, float("nan"), float("inf")])
def test_a_rate_that_is_not_a_positive_number_is_refused(rate):
    with pytest.raises(ValueError, match="rate must be a finite number > 0"):
        FrameRate(rate)


async def test_a_client_flooding_frames_is_read_at_the_rate_and_loses_nothing(start_server):
    """300 frames as fast as the socket takes them, 100 a second allowed: the reader waits
    (counted), every flush is answered in order, and the end comes after all of them."""
    server = await start_server(max_frames_per_s=100.0)
    started = time.monotonic()
    # no keepalive pings: a throttled reader answers none (protocol.md), and on a loaded host
    # the client's ping timeout could end the connection before the flood is read
    async with ws_connect(server.url, ping_interval=None) as ws:
        await ws.recv()  # ready
        await ws.send(encode(WordsMessage((Word("hello"),))))
        for _ in range(299):
            await ws.send(encode(FlushRequest()))
        await ws.send(encode(EndRequest()))
        flushed = 0
        # about 3 s of reading at the rate; two test suites sharing 2 cores once took over 60
        async with asyncio.timeout(180):
            async for frame in ws:
                if '"flushed"' in frame:
                    flushed += 1
    elapsed = time.monotonic() - started
    metric = server.metrics.registry.get_sample_value("streampunct_input_throttled_total")
    assert flushed == 299 and metric and metric >= 1
    # 301 frames, 100 a burst and 100 a second after it: the reader held them up to 2 s
    # in all, which the wait counter shows (the time those frames sat in the socket)
    waited = server.metrics.registry.get_sample_value("streampunct_input_wait_seconds_total",
                                                      {"reason": "throttled"})
    assert 1.2 <= waited <= elapsed
    # the throttled waits are not counted as pauses (a burst's answers may fill the outbox for
    # a moment: a few ms at most)
    assert server.metrics.registry.get_sample_value("streampunct_input_wait_seconds_total",
                                                    {"reason": "paused"}) < 0.05
    await until(lambda: not server.sessions)


async def test_no_limit_reads_without_waiting(start_server):
    server = await start_server(max_frames_per_s=None)
    async with ws_connect(server.url) as ws:
        await ws.recv()
        for _ in range(500):
            await ws.send(encode(FlushRequest()))
        await ws.send(encode(EndRequest()))
        async with asyncio.timeout(60):
            async for _ in ws:
                pass
    assert not server.metrics.registry.get_sample_value("streampunct_input_throttled_total")


async def test_large_frames_count_by_their_size(start_server):
    """Five frames of about 13 KB (1000 words each): 51 frames' worth each at 100 a second and a
    burst of 100, so the reader waits about 1.5 s in all, where five small frames would not wait."""
    # One session: its windows go to the engine one at a time (about 900 of them), and no other
    # can join their batch, so a batching wait (5 ms a window by default) would only idle.
    server = await start_server(max_frames_per_s=100.0, batching=BatcherConfig(max_wait_ms=0))
    frame = encode(WordsMessage(tuple(Word(f"w{k:09d}") for k in range(1000))))
    assert 50 <= frame_cost(frame) <= 60
    # no keepalive pings: a reader paused (throttled, or its backlog full) answers none, and on
    # a loaded host the client's ping timeout ended the connection once (CI, 2026-12-02)
    async with ws_connect(server.url, ping_interval=None) as ws:
        await ws.recv()  # ready
        for _ in range(5):
            await ws.send(frame)
        await ws.send(encode(EndRequest()))
        async with asyncio.timeout(60):
            words = sum(frame.count('"w"') for frame in [f async for f in ws] if '"final"' in frame)
    assert words == 5000
    waited = server.metrics.registry.get_sample_value("streampunct_input_wait_seconds_total",
                                                      {"reason": "throttled"})
    assert waited >= 1.0


async def test_the_loop_runs_other_work_between_two_queued_frames(start_server):
    """Frames that one socket read brought in are queued, and recv() takes them without
    suspending: the reader lets other tasks run between two frames (a ticker sees the count of
    words received grow one frame at a time, not jump over the burst)."""
    server = await start_server(max_frames_per_s=None)
    seen: list[int] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            session = next(iter(server.sessions), None)
            if session is not None:
                seen.append(session.protocol.n_received)
            await asyncio.sleep(0)

    async with ws_connect(server.url) as ws:
        await ws.recv()  # ready
        task = asyncio.create_task(ticker())
        for k in range(300):  # written at once: the server reads them in one or a few reads
            ws.protocol.send_text(encode(WordsMessage((Word(f"w{k}"),))).encode())
        for data in ws.protocol.data_to_send():
            ws.transport.write(data)
        await until(lambda: seen and seen[-1] == 300)
        stop.set()
        await task
        await ws.send(encode(EndRequest()))
        async with asyncio.timeout(60):
            async for _ in ws:
                pass
    assert len(set(seen)) >= 100  # without the pause, a handful of values (one per socket read)


async def test_the_server_does_not_negotiate_compression(start_server):
    """A client offering permessage-deflate (websockets' client does by default) gets plain
    frames: a compressed frame could inflate 1000 times past the queue's bounds."""
    server = await start_server()
    async with ws_connect(server.url) as ws:
        assert "permessage-deflate" in ws.request.headers.get("Sec-WebSocket-Extensions", "")
        assert ws.response.headers.get("Sec-WebSocket-Extensions") is None
        assert ws.protocol.extensions == []
        await ws.recv()  # ready


async def test_small_frames_that_take_the_loop_long_count_by_that_time(start_server, monkeypatch):
    """Handling each frame is made to take 20 ms of the loop's CPU (the reader's thread clock,
    faked): at 1000 frames a second, 21 such frames count as 4,200 and are read over about 3 s
    after the burst, where the same frames at 0.2 ms each (42 in all) fit the burst."""

    class Clock:
        step = 0.020
        now = 0.0

        def thread_time(self) -> float:  # read before and after each frame is handled
            self.now += self.step
            return self.now

    clock = Clock()
    monkeypatch.setattr(session_module, "time", clock)
    server = await start_server(max_frames_per_s=1000.0)

    async def flushes(n: int) -> float:
        async with ws_connect(server.url) as ws:
            await ws.recv()  # ready
            await ws.send(encode(WordsMessage((Word("hello"),))))
            for _ in range(n - 1):
                await ws.send(encode(FlushRequest()))
            await ws.send(encode(EndRequest()))
            async with asyncio.timeout(60):
                flushed = sum(['"flushed"' in frame async for frame in ws])
        assert flushed == n - 1
        await until(lambda: not server.sessions)
        return server.metrics.registry.get_sample_value("streampunct_input_wait_seconds_total",
                                                        {"reason": "throttled"}) or 0.0

    clock.step = 0.0002
    assert await flushes(20) == 0.0  # 21 frames of 2 units: within the burst of 1000
    clock.step = 0.020
    assert await flushes(20) >= 2.5  # 21 frames of 200 units: (4,200 - 1,000) / 1000 a second
