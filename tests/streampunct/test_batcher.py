"""The cross-stream batcher with a fake engine: batching, bounds, isolation, threading."""

from __future__ import annotations

import asyncio
import logging
import threading

import numpy as np
import pytest

from engines.base import EngineBase
from streampunct.core.engine_call import EngineCall
from streampunct.core.stream_cache import StreamCall
from streampunct.core.stream_state import WindowRequest
from streampunct.server.batcher import (
    Batcher,
    BatcherConfig,
    BatchRecord,
    EngineFailedError,
    OverloadedError,
)
from tests.streampunct.fakes import HANDOFF_TIMEOUT, GatedEngine, until
from tests.streampunct.test_stream_cache import SHAPE as STREAM_SHAPE
from tests.streampunct.test_stream_cache import FakeStreamEngine

PAD = 0


def seq(n: int, fill: int = 5) -> np.ndarray:
    return np.full(n, fill, dtype=np.int64)


class Records(list):
    """The batcher's :class:`BatchRecord` s (its ``on_batch``); ``await records.reached(n)``."""

    def __init__(self) -> None:
        super().__init__()
        self._added = asyncio.Event()

    def append(self, record: BatchRecord) -> None:
        super().append(record)
        self._added.set()

    async def reached(self, n: int = 1) -> None:
        """A batch's record may be written after its answers were awaited: wait for it."""
        async with asyncio.timeout(HANDOFF_TIMEOUT):
            while len(self) < n:
                self._added.clear()
                await self._added.wait()


async def started(engine, **config) -> tuple[Batcher, Records]:
    records = Records()
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


async def test_a_lone_request_waits_max_wait_for_company_then_runs_alone(fake_engine_cls):
    # Held for others to join its batch until max_wait_ms has passed on the loop's clock (the
    # batcher's), then run although the batch never filled (a request left waiting for company
    # would time out here).
    engine = fake_engine_cls()
    batcher, records = await started(engine, max_batch=32, max_wait_ms=30)
    loop = asyncio.get_running_loop()
    try:
        t0 = loop.time()
        await asyncio.wait_for(batcher.infer(seq(3)), HANDOFF_TIMEOUT)
        waited = loop.time() - t0
    finally:
        await batcher.close()
    assert waited >= 0.029  # not sent on at once: a lower bound, which no load can break
    assert engine.batch_sizes == [1] and [r.size for r in records] == [1]


async def test_event_loop_keeps_running_during_inference():
    # The engine call blocks in its thread until the test, on the event loop, lets it through:
    # an engine run on the loop's thread would hold the loop, and this test would never get there.
    engine = GatedEngine()
    batcher, _ = await started(engine, max_wait_ms=0)
    try:
        request = asyncio.create_task(batcher.infer(seq(3)))
        await engine.wait_entered(1)
        for _ in range(10):  # the loop goes round while the call is in the engine
            await asyncio.sleep(0)
        assert not request.done() and engine.batch_sizes == []
        engine.release()
        assert (await asyncio.wait_for(request, HANDOFF_TIMEOUT)).shape == (3, 4)
    finally:
        engine.open()
        await batcher.close()
    assert engine.batch_sizes == [1] and threading.current_thread().name not in engine.threads


async def test_full_queue_raises_overloaded_then_recovers():
    engine = GatedEngine()
    batcher, _ = await started(engine, max_batch=1, max_wait_ms=0, max_queue=2)
    try:
        first = asyncio.create_task(batcher.infer(seq(2)))
        await engine.wait_entered(1)  # first is now in the engine; the queue is empty
        queued = [asyncio.create_task(batcher.infer(seq(2))) for _ in range(2)]
        await asyncio.sleep(0)
        assert batcher.queue_depth == 2
        with pytest.raises(OverloadedError):
            await batcher.infer(seq(2))
        capacity = asyncio.create_task(batcher.wait_for_capacity())
        for _ in range(10):
            await asyncio.sleep(0)
        assert not capacity.done()  # no room while the engine holds the first request
        engine.release()  # the first ends; the engine takes the next from the queue
        await asyncio.wait_for(capacity, HANDOFF_TIMEOUT)
        assert batcher.queue_depth < 2
        engine.open()
        assert (await batcher.infer(seq(2))).shape == (2, 4)
        await asyncio.gather(first, *queued)
    finally:
        engine.open()
        await batcher.close()


async def test_a_full_queue_is_logged_once_per_episode_for_all_the_sessions(caplog, monkeypatch):
    import streampunct.server.batcher as batcher_module

    engine = GatedEngine()
    batcher, _ = await started(engine, max_batch=1, max_wait_ms=0, max_queue=1)
    try:
        first = asyncio.create_task(batcher.infer(seq(2)))
        await engine.wait_entered(1)
        queued = asyncio.create_task(batcher.infer(seq(2)))
        await asyncio.sleep(0)
        with caplog.at_level(logging.WARNING, logger="streampunct.server.batcher"):
            for _ in range(20):  # twenty sessions meet the full queue
                with pytest.raises(OverloadedError):
                    await batcher.infer(seq(2))
            warned = [r.getMessage() for r in caplog.records if "queue is full" in r.getMessage()]
            assert warned == ["the engine queue is full (max_queue 1): sessions are told 'overloaded' and their "
                              "words wait; more load than the engine serves within the latency bounds"]
            monkeypatch.setattr(batcher_module, "OVERLOAD_EPISODE_GAP_S", 0.0)  # the next meeting: a new episode
            with pytest.raises(OverloadedError):
                await batcher.infer(seq(2))
            assert sum("queue is full" in r.getMessage() for r in caplog.records) == 2
        engine.open()
        await asyncio.gather(first, queued)
    finally:
        engine.open()
        await batcher.close()


async def test_an_engine_still_building_when_start_is_cancelled_is_closed():
    """A shutdown during loading cancels start(); the engine the factory is still building in
    its thread is closed once built, not dropped (a GPU engine would keep its memory)."""
    building, finish = threading.Event(), threading.Event()
    from engines.fake import FakeEngine

    made: list[FakeEngine] = []
    closed: list[FakeEngine] = []

    class Closing(FakeEngine):
        def close(self) -> None:
            closed.append(self)

    def factory():
        building.set()
        assert finish.wait(HANDOFF_TIMEOUT)
        made.append(Closing())
        return made[-1]

    batcher = Batcher(factory, pad_id=PAD, config=BatcherConfig())
    start = asyncio.create_task(batcher.start())
    assert await asyncio.to_thread(building.wait, HANDOFF_TIMEOUT)
    start.cancel()
    closing = asyncio.create_task(batcher.close())
    finish.set()
    await asyncio.wait_for(closing, HANDOFF_TIMEOUT)
    with pytest.raises(asyncio.CancelledError):
        await start
    assert len(made) == 1 and closed == made


async def test_a_load_that_waits_gives_up_when_the_batcher_closes():
    """An engine whose load waits (Triton not ready yet) waits on :func:`engines.base.load_cancel`:
    closing the batcher (the server's Ctrl-C) ends the wait, instead of holding the shutdown
    for the rest of it."""
    from engines.base import LoadCancelled, load_cancel

    waiting = threading.Event()
    assert not load_cancel().is_set()  # outside a batcher's load: an event never set

    def factory():
        waiting.set()
        if load_cancel().wait(HANDOFF_TIMEOUT):
            raise LoadCancelled("gave up")
        raise AssertionError("the load was not cancelled")

    batcher = Batcher(factory, pad_id=PAD, config=BatcherConfig())
    start = asyncio.create_task(batcher.start())
    assert await asyncio.to_thread(waiting.wait, HANDOFF_TIMEOUT)
    start.cancel()
    await asyncio.wait_for(batcher.close(), HANDOFF_TIMEOUT)
    with pytest.raises(asyncio.CancelledError):
        await start
    # a load that fails on its own (not cancelled) still fails start with its error
    batcher = Batcher(factory, pad_id=PAD, config=BatcherConfig())
    start = asyncio.create_task(batcher.start())
    assert await asyncio.to_thread(waiting.wait, HANDOFF_TIMEOUT)
    closing = asyncio.create_task(batcher.close())
    with pytest.raises(LoadCancelled, match="gave up"):
        await asyncio.wait_for(start, HANDOFF_TIMEOUT)
    await closing


async def test_cancelled_request_leaves_the_queue():
    engine = GatedEngine()
    batcher, _ = await started(engine, max_batch=1, max_wait_ms=0)
    try:
        busy = asyncio.create_task(batcher.infer(seq(2)))
        await engine.wait_entered(1)  # busy holds the engine
        waiting = asyncio.create_task(batcher.infer(seq(2)))
        await asyncio.sleep(0)
        assert batcher.queue_depth == 1
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert batcher.queue_depth == 0
        engine.open()
        await busy
    finally:
        engine.open()
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
    class Broken(EngineBase):
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


# -- several engine workers ----------------------------------------------------------


async def test_workers_each_load_an_engine_and_run_batches_side_by_side():
    engines: list[GatedEngine] = []

    def factory():
        engines.append(GatedEngine())
        engines[-1].release(2)  # its warm-up: alone, then a full batch
        return engines[-1]

    records: list[BatchRecord] = []
    batcher = Batcher(factory, pad_id=PAD, config=BatcherConfig(max_batch=4, max_wait_ms=1, engine_workers=2),
                      warmup_ids=seq(3), on_batch=records.append)
    await batcher.start()
    try:
        assert batcher.engine_workers == 2 and len(engines) == 2
        assert [e.batch_sizes for e in engines] == [[1, 4], [1, 4]]  # each warmed up
        requests = asyncio.gather(*(batcher.infer(seq(2 + k % 3, fill=14)) for k in range(8)))
        # 8 requests, batches of at most 4: both engines hold a batch at the same time (with one
        # engine, or one batch at a time, the second batch never gets in while the first is held).
        for engine in engines:
            await engine.wait_entered(3)
        assert not requests.done()
        for engine in engines:
            engine.open()
        results = await asyncio.wait_for(requests, HANDOFF_TIMEOUT)
    finally:
        for engine in engines:
            engine.open()
        await batcher.close()
    assert sorted(len(e.batch_sizes) for e in engines) == [3, 3]
    assert sum(r.size for r in records) == 8
    assert {t for e in engines for t in e.threads} >= {"streampunct-engine-0_0", "streampunct-engine-1_0"}
    assert all(len(e.threads) == 1 for e in engines)  # each engine stays in its own thread
    for k, logits in enumerate(results):
        assert logits.shape == (2 + k % 3, 4) and (logits.argmax(-1) == 2).all()
    assert all(e.closed for e in engines)


async def test_workers_keep_each_sessions_requests_in_order(fake_engine_cls):
    """A session awaits one window at a time; with workers its answers still come in order."""
    batcher, _ = await started(fake_engine_cls(delay_s=0.01), max_batch=2, max_wait_ms=1, engine_workers=3)
    order: dict[int, list[int]] = {s: [] for s in range(5)}

    async def session(s: int) -> None:
        for k in range(6):
            logits = await batcher.infer(seq(1 + (s + k) % 4, fill=7 * s + k))
            order[s].append(k)
            assert logits.shape[0] == 1 + (s + k) % 4

    try:
        await asyncio.gather(*(session(s) for s in range(5)))
    finally:
        await batcher.close()
    assert all(v == list(range(6)) for v in order.values())


async def test_a_worker_whose_engine_fails_to_load_fails_start_and_closes_the_others(fake_engine_cls):
    made: list = []

    def factory():
        if made:
            raise RuntimeError("no second engine")
        made.append(fake_engine_cls())
        return made[-1]

    batcher = Batcher(factory, pad_id=PAD, config=BatcherConfig(engine_workers=2))
    with pytest.raises(RuntimeError, match="no second engine"):
        await batcher.start()
    assert not batcher.ready and made[0].closed


def test_engine_workers_must_be_positive():
    with pytest.raises(ValueError, match="engine_workers must be an integer >= 1, not 0"):
        BatcherConfig(engine_workers=0)


async def test_close_fails_requests_in_flight_on_any_worker():
    engine = GatedEngine()  # both workers' engine
    batcher, _ = await started(engine, max_batch=1, max_wait_ms=0, engine_workers=2)
    tasks = [asyncio.create_task(batcher.infer(seq(3))) for _ in range(3)]
    await engine.wait_entered(2)
    await asyncio.sleep(0)
    assert batcher.queue_depth == 1  # two at the engines, one waiting
    closing = asyncio.create_task(batcher.close())
    try:
        # Failed at once: the engines still hold their calls (close waits for them to end).
        for task in tasks:
            with pytest.raises(EngineFailedError, match="shutting down"):
                await asyncio.wait_for(task, HANDOFF_TIMEOUT)
        assert not closing.done()
    finally:
        engine.open()
        await asyncio.wait_for(closing, HANDOFF_TIMEOUT)
    assert engine.closed and engine.batch_sizes == [1, 1]  # the waiting one never ran


async def test_a_failing_warm_up_closes_every_engine_once(fake_engine_cls, caplog):
    engines: list = []

    def factory():
        engines.append(fake_engine_cls(fail_token=9))
        return engines[-1]

    batcher = Batcher(factory, pad_id=PAD, config=BatcherConfig(engine_workers=2), warmup_ids=seq(3, fill=9))
    with pytest.raises(RuntimeError, match="injected engine failure"):
        await batcher.start()
    assert not batcher.ready and len(engines) == 2 and all(e.closed for e in engines)
    await batcher.close()  # after a failed start: nothing left to close, nothing logged
    assert "engine close failed" not in caplog.text


# -- how a batch's windows run: padded or alone -----------------------------------------


class BatchScaledEngine(EngineBase):
    """Each row's logits depend on the whole batch, as in an int8 graph with dynamic
    activation quantization: the label of a token is shifted by the largest id in the
    batch (padding included) and by the padded length."""

    name = "batch-scaled"
    rows_independent = False

    def __init__(self) -> None:
        self.batch_sizes: list[int] = []

    def infer(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        self.batch_sizes.append(len(input_ids))
        shift = int(input_ids.max()) + input_ids.shape[1]
        logits = np.zeros((*input_ids.shape, 4), dtype=np.float32)
        np.put_along_axis(logits, ((input_ids + shift) % 4)[..., None], 1.0, axis=-1)
        return logits

    def close(self) -> None:
        pass


def labels_alone(engine: BatchScaledEngine, ids: np.ndarray) -> np.ndarray:
    return engine.infer(ids[None, :], np.ones((1, len(ids)), dtype=np.int64))[0].argmax(-1)


async def test_exact_runs_each_window_alone_when_rows_depend_on_the_batch():
    engine = BatchScaledEngine()
    batcher, records = await started(engine, max_batch=8, max_wait_ms=50, batch_rows="exact")
    windows = [np.arange(3, 3 + n, dtype=np.int64) * k for k, n in [(1, 4), (2, 7), (3, 2), (5, 5)]]
    try:
        assert batcher.rows_alone
        results = await asyncio.gather(*(batcher.infer(w) for w in windows))
        await records.reached(1)
    finally:
        await batcher.close()
    assert engine.batch_sizes == [1, 1, 1, 1]  # one batch of 4, run a window at a time
    assert [r.size for r in records] == [4]
    assert records[0].tokens == 4 + 7 + 2 + 5  # no padding
    reference = BatchScaledEngine()
    for w, logits in zip(windows, results, strict=True):
        assert (logits.argmax(-1) == labels_alone(reference, w)).all()


async def test_padded_rows_change_the_labels_of_such_an_engine():
    # The reason for 'alone': the same windows in one padded call get other labels.
    engine = BatchScaledEngine()
    batcher, records = await started(engine, max_batch=8, max_wait_ms=50, batch_rows="padded")
    windows = [np.arange(3, 3 + n, dtype=np.int64) * k for k, n in [(1, 4), (2, 7), (3, 2), (5, 5)]]
    try:
        assert not batcher.rows_alone
        results = await asyncio.gather(*(batcher.infer(w) for w in windows))
    finally:
        await batcher.close()
    assert engine.batch_sizes == [4] and records[0].tokens == 4 * 7
    reference = BatchScaledEngine()
    assert any((logits.argmax(-1) != labels_alone(reference, w)).any()
               for w, logits in zip(windows, results, strict=True))


async def test_exact_pads_engines_with_independent_rows_and_alone_forces_single_calls(fake_engine_cls):
    for batch_rows, sizes in [("exact", [3]), ("alone", [1, 1, 1])]:
        engine = fake_engine_cls()
        batcher, _ = await started(engine, max_batch=8, max_wait_ms=50, batch_rows=batch_rows)
        try:
            results = await asyncio.gather(*(batcher.infer(seq(n, fill=14)) for n in (2, 6, 4)))
        finally:
            await batcher.close()
        assert engine.batch_sizes[-len(sizes):] == sizes, batch_rows
        assert [r.shape for r in results] == [(2, 4), (6, 4), (4, 4)]


async def test_alone_isolates_a_failing_window_without_a_padded_try(fake_engine_cls):
    engine = fake_engine_cls(fail_token=99)
    batcher, records = await started(engine, max_batch=8, max_wait_ms=50, batch_rows="alone")
    try:
        results = await asyncio.gather(batcher.infer(seq(3)), batcher.infer(seq(3, fill=99)),
                                       batcher.infer(seq(2)), return_exceptions=True)
        await records.reached(1)
    finally:
        await batcher.close()
    assert isinstance(results[1], EngineFailedError)
    assert results[0].shape == (3, 4) and results[2].shape == (2, 4)
    assert engine.batch_sizes == [1, 1, 1] and records[0].failed == 1


async def test_warm_up_skips_the_full_batch_when_rows_run_alone():
    engine = BatchScaledEngine()
    batcher = Batcher(lambda: engine, pad_id=PAD, config=BatcherConfig(max_batch=4, batch_rows="exact"), warmup_ids=seq(6))
    await batcher.start()
    await batcher.close()
    assert engine.batch_sizes == [1]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("field", ["max_wait_ms", "trim_interval_s"])
def test_wait_and_trim_interval_must_be_finite(field, value):
    """NaN passed ``max_wait_ms < 0``: no batch ever closed, and the server hung at shutdown."""
    with pytest.raises(ValueError, match=f"{field} must be a finite number, not {value}"):
        BatcherConfig(**{field: value})


def test_batch_rows_must_be_a_known_mode():
    with pytest.raises(ValueError, match="batch_rows must be one of padded, exact, alone, got 'sometimes'"):
        BatcherConfig(batch_rows="sometimes")


async def test_a_window_run_alone_is_skipped_when_its_session_went_away():
    engine = GatedEngine()
    batcher, records = await started(engine, max_batch=8, max_wait_ms=30, batch_rows="alone")
    done: list[int] = []

    async def ask(k: int) -> None:
        await batcher.infer(seq(3 + k))
        done.append(k)

    try:
        tasks = [asyncio.create_task(ask(k)) for k in range(4)]
        await engine.wait_entered(1)  # the batch of 4 is at the engine, running its first window
        assert batcher.queue_depth == 0 and done == []
        tasks[2].cancel()  # that session goes away before its window's turn
        engine.open()
        await asyncio.gather(*tasks, return_exceptions=True)
        await records.reached(1)
    finally:
        engine.open()
        await batcher.close()
    assert sorted(done) == [0, 1, 3]
    assert engine.batch_sizes == [1, 1, 1]  # the third window never ran
    assert [(r.size, r.tokens) for r in records] == [(3, 3 + 4 + 6)]


def _stream_call(n_new: int, cached: int, fill: int) -> StreamCall:
    """A streaming-graph call of ``n_new`` new tokens against ``cached`` cached ones (0: a full call)."""
    layers, heads, head_dim = STREAM_SHAPE
    ids = np.full(n_new, fill, dtype=np.int64)
    past = np.ones((layers, 2, heads, cached, head_dim), dtype=np.float16)
    return StreamCall(ids, np.arange(n_new, dtype=np.int64), past, 1, None, 0, n_new)


@pytest.mark.parametrize(("batch_rows", "calls"), [("alone", [(1, 4), (1, 7), (1, 2), (1, 5)]),
                                                   ("padded", [(2, 4), (2, 7)])])
async def test_batch_records_give_each_engine_call_its_rows_and_the_tokens_it_ran(batch_rows, calls):
    """The metrics' engine calls: streaming calls each alone (``batch_rows``) are four calls of
    one row and their own lengths, not one call of four rows padded to the longest; padded,
    the full and the cached calls are two engine calls, each padded to its own longest."""
    from streampunct.server.metrics import ServerMetrics

    engine = FakeStreamEngine()
    batcher, records = await started(engine, max_batch=8, max_wait_ms=50, batch_rows=batch_rows)
    work = [_stream_call(4, 0, 11), _stream_call(7, 3, 12), _stream_call(2, 0, 13), _stream_call(5, 3, 14)]
    try:
        await asyncio.gather(*(batcher.run(EngineCall(WindowRequest(c.input_ids, np.asarray([1]), 0, False), c))
                               for c in work))
        await records.reached(1)
    finally:
        await batcher.close()
    assert len(records) == 1 and records[0].size == 4
    assert [rows for rows, _ in records[0].engine_calls()] == [rows for rows, _ in calls]
    assert [(b, t) for b, t, _ in engine.calls[-len(calls):]] == calls  # (rows, new tokens) at the engine
    assert records[0].tokens == sum(rows * longest for rows, longest in calls)
    assert sum(seconds for _, seconds in records[0].engine_calls()) <= records[0].seconds
    metrics = ServerMetrics()
    metrics.observe_batch(records[0])
    get = metrics.registry.get_sample_value
    assert get("streampunct_batch_size_count") == get("streampunct_engine_latency_seconds_count") == len(calls)
    assert get("streampunct_batch_size_sum") == 4
    assert get("streampunct_engine_tokens_total") == records[0].tokens


@pytest.mark.parametrize(("batch_rows", "tokens"), [("alone", 4 + 7 + 2 + 5), ("padded", 2 * 4 + 2 * 7)])
async def test_a_failed_batch_counts_the_tokens_its_calls_would_have_run(batch_rows, tokens):
    """A batch with a failing streaming call is retried one by one; its record counts the
    tokens as the batch's own calls run them: each alone at its length under ``alone``, the
    full and the cached calls each padded to their longest under ``padded``."""

    class Poisoned(FakeStreamEngine):
        def infer_stream(self, inputs):
            if (inputs["input_ids"] == 13).any():
                raise RuntimeError("poisoned row")
            return super().infer_stream(inputs)

    batcher, records = await started(Poisoned(), max_batch=8, max_wait_ms=50, batch_rows=batch_rows)
    work = [_stream_call(4, 0, 11), _stream_call(7, 3, 12), _stream_call(2, 0, 13), _stream_call(5, 3, 14)]
    try:
        results = await asyncio.gather(
            *(batcher.run(EngineCall(WindowRequest(c.input_ids, np.asarray([1]), 0, False), c)) for c in work),
            return_exceptions=True)
        await records.reached(1)
    finally:
        await batcher.close()
    assert [isinstance(r, EngineFailedError) for r in results] == [False, False, True, False]
    assert len(records) == 1 and records[0].size == 4 and records[0].failed == 1
    assert records[0].tokens == tokens


# -- engine health: a failing engine against failing windows ---------------------------


class SwitchedEngine(EngineBase):
    """Fails every call while ``broken`` (a replica whose engine or its server went down)."""

    name = "switched"

    def __init__(self) -> None:
        self.broken = False
        self.calls = 0

    def infer(self, input_ids, attention_mask):
        self.calls += 1
        if self.broken:
            raise RuntimeError("device lost")
        return np.zeros((*input_ids.shape, 4), np.float32)


async def test_an_engine_that_fails_the_warm_up_window_is_failing_until_a_window_works(monkeypatch, caplog):
    import streampunct.server.batcher as batcher_module

    monkeypatch.setattr(batcher_module, "PROBE_INTERVAL_S", 0.02)
    engine = SwitchedEngine()
    records = Records()
    batcher = Batcher(lambda: engine, pad_id=PAD, config=BatcherConfig(max_wait_ms=0), warmup_ids=seq(3),
                      on_batch=records.append)
    await batcher.start()
    try:
        engine.broken = True
        for k in range(batcher_module.PROBE_AFTER_FAILURES):
            with pytest.raises(EngineFailedError, match="device lost"):
                await batcher.infer(seq(4))
            assert not batcher.engine_failing, k  # windows failing alone say nothing yet
        await until(lambda: batcher.engine_failing)
        assert ("engine failing: windows failed in a row, and the warm-up window too (inference failed: "
                "RuntimeError: device lost); /healthz answers 503 until a window succeeds") in caplog.text
        probes = engine.calls
        await until(lambda: engine.calls >= probes + 2)  # probing again while it fails
        assert batcher.engine_failing
        # the failures counted (streampunct_engine_failures_total) are the sessions' windows, not the probe's
        assert sum(r.failed for r in records) == batcher_module.PROBE_AFTER_FAILURES
        engine.broken = False
        await until(lambda: not batcher.engine_failing)  # the next probe works: healthy again
        assert "engine works again" in caplog.text
        assert (await batcher.infer(seq(2))).shape == (2, 4)
    finally:
        await batcher.close()
    # one traceback for the run of failures, then one line each
    failures = [r for r in caplog.records if r.getMessage().startswith("engine failed on a window")]
    assert len(failures) > batcher_module.PROBE_AFTER_FAILURES  # the probe's failures among them
    assert len(failures) >= 5 and [r.exc_info is not None for r in failures[:2]] == [True, False]
    assert "engine failed on a window (2 in a row): RuntimeError: device lost" in caplog.text


async def test_windows_that_fail_on_their_input_leave_the_engine_healthy(fake_engine_cls):
    """A client's poisonous text fails its own windows; the warm-up window still works."""
    engine = fake_engine_cls(fail_token=99)
    batcher = Batcher(lambda: engine, pad_id=PAD, config=BatcherConfig(max_wait_ms=0), warmup_ids=seq(3))
    await batcher.start()
    try:
        import streampunct.server.batcher as batcher_module

        for _ in range(batcher_module.PROBE_AFTER_FAILURES):
            with pytest.raises(EngineFailedError):
                await batcher.infer(seq(4, fill=99))
        calls = len(engine.batch_sizes)
        probe = batcher._probe
        assert probe is not None
        async with asyncio.timeout(HANDOFF_TIMEOUT):
            await probe
        assert len(engine.batch_sizes) == calls + 1 and batcher._failed_in_a_row == 0  # it ran, and worked
        assert not batcher.engine_failing
    finally:
        await batcher.close()


class StreamOnlyBroken(FakeStreamEngine):
    """Whole windows work, streaming calls fail: the graph's cached path is what broke."""

    def infer(self, input_ids, attention_mask):
        return np.zeros((*input_ids.shape, 4), np.float32)

    def infer_stream(self, inputs):
        raise RuntimeError("the cached path is broken")


async def test_the_probe_takes_the_sessions_form_of_window(monkeypatch):
    """Under cached left context sessions send streaming calls: a probe of a whole window
    (which works here) would call a broken engine healthy."""
    import streampunct.server.batcher as batcher_module
    from streampunct.core.stream_cache import StreamShape, whole_call

    monkeypatch.setattr(batcher_module, "PROBE_INTERVAL_S", 0.02)
    engine = StreamOnlyBroken()
    probe = whole_call(seq(5), StreamShape(*STREAM_SHAPE))
    batcher = Batcher(lambda: engine, pad_id=PAD, config=BatcherConfig(max_wait_ms=0), warmup_ids=seq(5), probe=probe)
    await batcher.start()  # the warm-up runs whole windows: it passes
    try:
        for _ in range(batcher_module.PROBE_AFTER_FAILURES):
            with pytest.raises(EngineFailedError, match="cached path"):
                call = whole_call(seq(4), StreamShape(*STREAM_SHAPE))
                await batcher.run(EngineCall(WindowRequest(call.input_ids, np.asarray([1]), 0, False), call))
        await until(lambda: batcher.engine_failing)
    finally:
        await batcher.close()
