"""The cross-stream batcher with a fake engine: batching, bounds, isolation, threading."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from streampunct.batcher import (
    Batcher,
    BatcherConfig,
    BatchRecord,
    EngineFailedError,
    OverloadedError,
)

PAD = 0


def seq(n: int, fill: int = 5) -> np.ndarray:
    return np.full(n, fill, dtype=np.int64)


async def started(engine, **config) -> tuple[Batcher, list[BatchRecord]]:
    records: list[BatchRecord] = []
    batcher = Batcher(lambda: engine, pad_id=PAD, config=BatcherConfig(**config), on_batch=records.append)
    await batcher.start()
    return batcher, records


async def test_concurrent_requests_share_one_padded_engine_call(fake_engine_cls):
    engine = fake_engine_cls()
    batcher, records = await started(engine, max_batch=8, max_wait_ms=50)
    try:
        lengths = [3, 9, 5, 1, 7]
        results = await asyncio.gather(*(batcher.infer(seq(n, fill=14)) for n in lengths))
    finally:
        await batcher.close()
    assert engine.batch_sizes == [5]
    assert records[0].size == 5 and records[0].tokens == 5 * 9
    for n, logits in zip(lengths, results, strict=True):
        assert logits.shape == (n, 4)
        assert (logits.argmax(-1) == 2).all()  # 14 % 7 == 0 -> PERIOD, row not mixed with padding
    assert engine.closed


async def test_max_batch_splits_and_engine_runs_in_its_own_thread(fake_engine_cls):
    engine = fake_engine_cls()
    batcher, _ = await started(engine, max_batch=4, max_wait_ms=20)
    try:
        await asyncio.gather(*(batcher.infer(seq(4)) for _ in range(10)))
    finally:
        await batcher.close()
    assert engine.batch_sizes == [4, 4, 2]
    assert engine.threads == {t for t in engine.threads if t.startswith("streampunct-engine")}
    assert threading.current_thread().name not in engine.threads


async def test_a_lone_request_waits_at_most_max_wait(fake_engine_cls):
    batcher, _ = await started(fake_engine_cls(), max_batch=32, max_wait_ms=30)
    try:
        t0 = time.perf_counter()
        await batcher.infer(seq(3))
        waited = time.perf_counter() - t0
    finally:
        await batcher.close()
    assert 0.025 <= waited < 0.3


async def test_event_loop_keeps_running_during_inference(fake_engine_cls):
    batcher, _ = await started(fake_engine_cls(delay_s=0.3), max_wait_ms=0)
    ticks = 0

    async def heartbeat():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    beat = asyncio.create_task(heartbeat())
    try:
        await batcher.infer(seq(3))
    finally:
        beat.cancel()
        await batcher.close()
    assert ticks >= 15  # ~30 while the engine slept 0.3 s in its thread


async def test_full_queue_raises_overloaded_then_recovers(fake_engine_cls):
    batcher, _ = await started(fake_engine_cls(delay_s=0.2), max_batch=1, max_wait_ms=0, max_queue=2)
    try:
        first = asyncio.create_task(batcher.infer(seq(2)))
        await asyncio.sleep(0.05)  # first is now in the engine; the queue is empty
        queued = [asyncio.create_task(batcher.infer(seq(2))) for _ in range(2)]
        await asyncio.sleep(0)
        assert batcher.queue_depth == 2
        with pytest.raises(OverloadedError):
            await batcher.infer(seq(2))
        await asyncio.wait_for(batcher.wait_for_capacity(), 2)
        assert batcher.queue_depth < 2
        assert (await batcher.infer(seq(2))).shape == (2, 4)
        await asyncio.gather(first, *queued)
    finally:
        await batcher.close()


async def test_cancelled_request_leaves_the_queue(fake_engine_cls):
    engine = fake_engine_cls(delay_s=0.2)
    batcher, _ = await started(engine, max_batch=1, max_wait_ms=0)
    try:
        busy = asyncio.create_task(batcher.infer(seq(2)))
        await asyncio.sleep(0.05)
        waiting = asyncio.create_task(batcher.infer(seq(2)))
        await asyncio.sleep(0)
        assert batcher.queue_depth == 1
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert batcher.queue_depth == 0
        await busy
    finally:
        await batcher.close()
    assert engine.batch_sizes == [1]  # the cancelled request never reached the engine


async def test_engine_failure_fails_only_the_poisoned_request(fake_engine_cls):
    engine = fake_engine_cls(fail_token=99)
    batcher, records = await started(engine, max_batch=8, max_wait_ms=30)
    try:
        results = await asyncio.gather(
            batcher.infer(seq(3)), batcher.infer(seq(4, fill=99)), batcher.infer(seq(5)),
            return_exceptions=True,
        )
        # The batcher keeps serving after a failure.
        assert (await batcher.infer(seq(2))).shape == (2, 4)
    finally:
        await batcher.close()
    assert isinstance(results[1], EngineFailedError) and isinstance(results[1].__cause__, RuntimeError)
    assert results[0].shape == (3, 4) and results[2].shape == (5, 4)
    assert records[0].size == 3 and records[0].failed == 1


async def test_wrong_logits_shape_is_an_engine_error():
    class Broken:
        def infer(self, input_ids, attention_mask):
            return np.zeros((1, 2, 4), dtype=np.float32)

    batcher, _ = await started(Broken(), max_wait_ms=0)
    try:
        with pytest.raises(EngineFailedError, match="shape"):
            await batcher.infer(seq(5))
    finally:
        await batcher.close()


async def test_warmup_runs_before_ready(fake_engine_cls):
    engine = fake_engine_cls()
    batcher = Batcher(lambda: engine, pad_id=PAD, config=BatcherConfig(max_batch=4), warmup_ids=seq(6))
    assert not batcher.ready
    with pytest.raises(EngineFailedError):
        await batcher.infer(seq(2))
    await batcher.start()
    try:
        assert batcher.ready and engine.batch_sizes == [1, 4]
        assert batcher.engine_name == "fake"
    finally:
        await batcher.close()
    assert not batcher.ready
