"""Cross-stream batching: many sessions, one or more engine workers.

Sessions call :meth:`Batcher.run` with one model call
(:class:`~streampunct.core.engine_call.EngineCall`: a window's unpadded token ids,
or its streaming-graph call under cached left context) and await its
:class:`~streampunct.core.engine_call.EngineOutput` (the punctuation and case
logits, typed, and the keys/values a streaming call keeps). A collector task on the event loop waits for an idle
engine worker, then gathers requests from all sessions until the batch holds
``max_batch`` requests or the oldest one has waited ``max_wait_ms``, and
hands the whole batch to that worker: a dedicated single-thread executor
that loads its own engine, warms it up, pads each batch to its longest
sequence and runs one engine call (:func:`~streampunct.core.engine_call.run_work`). The event loop never blocks on
inference. While every worker is busy new requests pile up, so the next
batch is larger: under load the windows of many streams coalesce into fewer
engine calls (each window stays what its stream's schedule makes it: see
:mod:`streampunct.core.stream_state`).

``engine_workers`` > 1 runs that many engines side by side, each on its own
batches. A session has at most one window at the engine at a time, so its
finals keep their order. On CPU, N single-threaded ONNX Runtime sessions
encode the small batches of a streaming server faster than one session with
N intra-op threads (docs/server.md, "Engine workers").

The queue is bounded: when ``max_queue`` requests are waiting, :meth:`Batcher.run`
raises :class:`OverloadedError` at once instead of buffering without limit.
An engine exception fails only the requests that caused it: a failed batch
of several requests is retried one request at a time, so one poisonous window
does not take down the other sessions of its batch.

A failing engine is told from failing windows by a probe: after
``PROBE_AFTER_FAILURES`` windows in a row failed (none succeeded between), the
batcher runs its probe (the warm-up window, known to work, in the form the
sessions' windows take: a streaming call under cached left context) through
the queue. If that fails too, :attr:`Batcher.engine_failing` turns true (``/healthz`` answers 503,
so a balancer stops routing to the replica) and the probe runs again every
``PROBE_INTERVAL_S`` until a window succeeds. Windows that fail on their own
input (a client's poisonous text) leave the probe passing and the health alone.

``batch_rows`` says how a worker runs the windows of a batch. ``padded``:
one call on the windows padded to the longest. ``alone``: one call
per window, at its own length. ``exact`` (the default): alone where the engine says a row's
logits depend on the rest of its batch (:attr:`engines.base.Engine.rows_independent`
false: int8 graphs with dynamic activation quantization, whose scales span the
whole padded batch), padded otherwise (the shipped default's streaming graph has
static activation scales, so its windows are padded: ``training.static_scales``).
With ``exact`` a window's labels never
depend on which other windows, or how much padding, shared its engine call:
the server gives the labels of :func:`streampunct.evaluation.accuracy.schedule_labels`
whatever the load. Running windows alone costs engine time (about a fifth more with
cached left context: windows of a few new tokens share no call; docs/server.md,
"Batch rows").

``trim_interval_s``: memory that the engines and the sessions free stays
with glibc's heaps unless it is given back (:mod:`streampunct.server.allocator`).
The collector hands an idle worker :func:`streampunct.server.allocator.trim` once
every ``trim_interval_s`` while batches run, and once more when the engine has
been idle that long after its last batch, so a server's RSS follows what it
uses rather than the most it ever used (docs/server.md, "Memory that stays").

``stall_timeout_s``: an engine call that never returns (a wedged GPU driver, a
deadlocked library) cannot be stopped, and its windows' sessions wait for it
forever. A batch (or trim) still in its worker's thread ``stall_timeout_s`` after
it was handed there marks the engine stalled (:attr:`Batcher.engine_stalled`; one
log line), so that ``/healthz`` answers 503 and a balancer sends new sessions
elsewhere, until the call returns (one more line). Loading and warming up are not
watched. Nothing is killed: the thread cannot be, and the operator decides
(docs/server.md, "Operations").
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from engines.base import Engine, cancellable_load
from streampunct.core.engine_call import EngineCall, EngineOutput, run_work
from streampunct.core.options import require_int
from streampunct.core.session_protocol import OVERLOAD_EPISODE_GAP_S
from streampunct.core.stream_cache import StreamCall
from streampunct.errors import EngineFailedError, OverloadedError
from streampunct.server import allocator

logger = logging.getLogger(__name__)

#: Windows failed in a row after which the warm-up window probes the engine.
PROBE_AFTER_FAILURES = 3
#: Seconds between probes while the engine fails the warm-up window.
PROBE_INTERVAL_S = 5.0


class BatchRows(StrEnum):
    """How a worker runs a batch's windows (``serve --batch-rows``; see the module docstring)."""

    PADDED = "padded"
    EXACT = "exact"
    ALONE = "alone"


def runs_rows_alone(batch_rows: BatchRows | str, engine: Engine) -> bool:
    """Whether a worker with this ``engine`` runs each window of a batch in its own call."""
    if batch_rows == BatchRows.EXACT:
        return not engine.rows_independent
    return batch_rows == BatchRows.ALONE


def require_finite(config: object, *names: str) -> None:
    """ValueError unless each named field of ``config`` is None or a finite number.

    NaN passes every range check (``nan < 0`` is False) and infinity overflows
    asyncio's timers, so a configuration checks this before its ranges."""
    for name in names:
        value = getattr(config, name)
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, not {value!r}")


@dataclass(frozen=True)
class BatcherConfig:
    """Batching policy.

    Attributes:
        max_batch: most requests in one engine call.
        max_wait_ms: longest a request waits for others to join its batch.
        max_queue: most requests waiting (not yet in the engine); beyond it
            :meth:`Batcher.run` raises :class:`OverloadedError`.
        engine_workers: engines run side by side, each in its own thread on
            its own batches (the engine factory is called once per worker).
        batch_rows: ``padded``, ``exact`` or ``alone``: how a worker runs the
            windows of a batch (module docstring).
        trim_interval_s: seconds between two trims of the allocator's free
            memory (:func:`streampunct.server.allocator.trim`, on an idle worker's
            thread) while batches run; the engine idle this long after a batch
            gets one more. None: never.
        stall_timeout_s: an engine call (a batch, a trim) still running this many seconds
            after it started marks the engine stalled until it returns (module docstring).
            None: never.
    """

    max_batch: int = 32
    max_wait_ms: float = 5.0
    max_queue: int = 1024
    engine_workers: int = 1
    batch_rows: BatchRows = BatchRows.EXACT
    trim_interval_s: float | None = 5.0
    stall_timeout_s: float | None = 30.0

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_queue", "engine_workers"):
            require_int(self, name, 1)
        require_finite(self, "max_wait_ms", "trim_interval_s", "stall_timeout_s")
        if self.max_wait_ms < 0:
            raise ValueError("max_wait_ms must be >= 0")

        try:
            object.__setattr__(self, "batch_rows", BatchRows(self.batch_rows))
        except ValueError:
            raise ValueError(f"batch_rows must be one of {', '.join(BatchRows)}, got {self.batch_rows!r}") from None
        if self.trim_interval_s is not None and self.trim_interval_s <= 0:
            raise ValueError("trim_interval_s must be > 0 (None: no trims)")
        if self.stall_timeout_s is not None and self.stall_timeout_s <= 0:
            raise ValueError("stall_timeout_s must be > 0 (None: never)")


@dataclass(frozen=True)
class BatchRecord:
    """What one engine call did, for metrics.

    Attributes:
        size: requests in the batch.
        tokens: tokens the engine ran: rows x longest sequence of each padded
            call, summed (a window run alone: its length).
        seconds: wall time of the engine call(s), padding included.
        failed: requests of the batch that got an :class:`EngineFailedError`.
        calls: (rows, seconds) of each engine call the batch made (each window
            alone under ``batch_rows``; the full and the cached streaming calls
            apart); empty: one call of ``size`` rows that took ``seconds``.
    """

    size: int
    tokens: int
    seconds: float
    failed: int = 0
    calls: tuple[tuple[int, float], ...] = ()

    def engine_calls(self) -> tuple[tuple[int, float], ...]:
        """(rows, seconds) of each engine call."""
        return self.calls or ((self.size, self.seconds),)


@dataclass(eq=False)
class _Worker:
    """One engine and the thread it lives and runs in."""

    executor: ThreadPoolExecutor
    engine: Engine | None = None
    closed: bool = False
    running: int = 0  # jobs running in its thread now (:meth:`run`)
    stalled_since: float | None = None  # when its stalled call started (the loop's clock; Batcher._watched)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the worker's thread, counted in :attr:`running` while it runs there."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, self._counted, fn, *args)

    def _counted(self, fn: Callable[..., Any], *args: Any) -> Any:
        self.running += 1
        try:
            return fn(*args)
        finally:
            self.running -= 1


@dataclass(eq=False)
class _Pending:
    work: np.ndarray | StreamCall  # a window's token ids, or a streaming-graph call
    future: asyncio.Future
    enqueued: float
    done: bool = field(default=False)
    probe: bool = False  # the engine probe's window (no session's): its failure is not a session's


def _ids(work: np.ndarray | StreamCall) -> np.ndarray:
    return work.input_ids if isinstance(work, StreamCall) else work


def _close_engine(worker: _Worker) -> None:
    """In ``worker``'s thread: close its engine, if it has one."""
    if worker.engine is not None and hasattr(worker.engine, "close"):
        worker.engine.close()


class Batcher:
    """Owns the engines (each in its worker thread) and batches requests from all sessions.

    ``engine_factory`` is called in each worker thread, so engines bound to a
    thread (CUDA contexts) are created where they run. ``warmup_ids`` (one
    token id sequence) is run once per worker, alone and (unless its rows run alone) as a full batch,
    before :attr:`ready` turns true. ``on_batch`` is called on the event loop
    after every batch (its engine calls in :attr:`BatchRecord.calls`). ``trim`` gives the allocator's free memory back
    (default :func:`streampunct.server.allocator.trim`; None where the C library
    cannot): it runs in a worker's thread, see ``BatcherConfig.trim_interval_s``.

    Attributes:
        trims: trims run so far; last_trim_end: when the last one finished (the loop's clock).
        engine_failing: the engine failed the warm-up window after windows failed in a
            row (module docstring); false again once any window succeeds.
        engine_stalled (property): an engine call has run longer than ``stall_timeout_s``
            and not returned yet (module docstring).
    """

    def __init__(
        self,
        engine_factory: Callable[[], Engine],
        *,
        pad_id: int,
        config: BatcherConfig = BatcherConfig(),  # noqa: B008 (frozen, immutable)
        warmup_ids: np.ndarray | None = None,
        probe: np.ndarray | StreamCall | None = None,
        on_batch: Callable[[BatchRecord], None] | None = None,
        trim: Callable[[], object] | None = allocator.trim,
    ) -> None:
        self._engine_factory = engine_factory
        self._pad_id = pad_id
        self.config = config
        self._warmup_ids = warmup_ids
        self._probe_work = probe if probe is not None else warmup_ids
        self._on_batch = on_batch
        self._workers: list[_Worker] = []
        self._idle: asyncio.Queue[_Worker] | None = None
        self._queue: deque[_Pending] = deque()
        self._running: set[_Pending] = set()
        self._in_flight: set[asyncio.Task[None]] = set()
        self._arrived: asyncio.Event | None = None
        self._not_full: asyncio.Event | None = None
        self._collector: asyncio.Task[None] | None = None
        self._closed = False
        self._closing = threading.Event()  # set at close: engines still loading give up their wait
        self._last_full: float | None = None  # when a request last met a full queue (the loop's clock)
        self.ready = False
        if trim is allocator.trim and not allocator.can_trim():
            trim = None  # not glibc
        self._trim = trim if config.trim_interval_s is not None else None
        # Allocator trims (the loop's clock): the next one due under load, whether memory may have
        # been freed since the last one (a batch ran, or the engines loaded), when the last batch ended.
        self._next_trim = 0.0
        self._trim_pending = True
        self._last_batch_end = 0.0
        self.trims = 0
        self.last_trim_end = 0.0
        self.engine_failing = False
        self._failed_in_a_row = 0
        self._probe: asyncio.Task[None] | None = None

    @property
    def trimmed_since_last_batch(self) -> bool:
        """Whether a trim finished after the last batch ended: the idle engine gave its memory back."""
        return self.trims > 0 and self.last_trim_end >= self._last_batch_end

    # -- lifecycle -----------------------------------------------------------
    async def start(self) -> None:
        """Load and warm up the engines in their worker threads, then start batching."""
        loop = asyncio.get_running_loop()
        self._arrived = asyncio.Event()
        self._not_full = asyncio.Event()
        self._not_full.set()
        self._idle = asyncio.Queue()
        for k in range(self.config.engine_workers):
            name = "streampunct-engine" if self.config.engine_workers == 1 else f"streampunct-engine-{k}"
            self._workers.append(_Worker(ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)))
        # One engine after another (loading, then warming up): both need transient
        # memory, and N at once would hold N times that at the peak.
        try:
            for worker in self._workers:
                # built and kept in the worker's thread: an engine whose build outlives a cancelled
                # start is still the worker's, and _close_engines (queued behind it) closes it
                await worker.run(self._build_engine, worker)
            if self._warmup_ids is not None:
                logger.info("engine %s built; warming up", self.engine_name)
                t0 = time.perf_counter()
                seqs = [self._warmup_ids]
                for worker in self._workers:  # one at a time too
                    await self._warm(worker, seqs)
                logger.info("engine %s warmed up in %.3fs (%d worker%s)", self.engine_name,
                            time.perf_counter() - t0, len(self._workers), "s" if len(self._workers) > 1 else "")
        except BaseException:
            self._closing.set()
            await self._close_engines()
            raise
        for worker in self._workers:
            self._idle.put_nowait(worker)
        self._last_batch_end = loop.time()
        self._next_trim = loop.time() + (self.config.trim_interval_s or 0.0)
        self._collector = asyncio.create_task(self._collect(), name="streampunct-batcher")
        self.ready = True

    async def _warm(self, worker: _Worker, seqs: list[np.ndarray]) -> None:
        await worker.run(self._infer_padded, worker.engine, seqs)
        if not runs_rows_alone(self.config.batch_rows, worker.engine):
            await worker.run(self._infer_padded, worker.engine, seqs * self.config.max_batch)

    async def close(self) -> None:
        """Stop batching, fail whatever still waits, close the engines in their threads."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        self.ready = False
        if self._probe is not None:
            self._probe.cancel()
        if self._collector is not None:
            self._collector.cancel()
            try:
                await self._collector
            except asyncio.CancelledError:
                pass
        for item in [*self._running, *self._queue]:
            if not item.future.done():
                item.future.set_exception(EngineFailedError("the server is shutting down"))
        self._queue.clear()
        self._running.clear()
        for task in list(self._in_flight):
            task.cancel()
        if self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)
        await self._close_engines()

    def _build_engine(self, worker: _Worker) -> None:
        """In ``worker``'s thread: build its engine (a load that waits gives up once the batcher
        closes: :func:`engines.base.cancellable_load`)."""
        with cancellable_load(self._closing):
            worker.engine = self._engine_factory()

    async def _close_engines(self) -> None:
        """Close each engine in its own thread (after the batch it may still run, or the build
        still in progress), then the threads."""
        for worker in self._workers:
            if worker.closed:
                continue
            worker.closed = True
            try:
                await worker.run(_close_engine, worker)
            except Exception:
                logger.exception("engine close failed")
            worker.executor.shutdown(wait=False)

    def engine_busy(self) -> bool:
        """An engine's thread still runs a job (a load, a warm-up, a call): nothing can stop it."""
        return any(worker.running for worker in self._workers)

    @property
    def engine_stalled(self) -> bool:
        """An engine call has run longer than ``stall_timeout_s`` and not returned yet."""
        return any(worker.stalled_since is not None for worker in self._workers)

    def stalled_s(self) -> float | None:
        """Seconds the oldest stalled engine call has run (None: none is stalled)."""
        since = [worker.stalled_since for worker in self._workers if worker.stalled_since is not None]
        return asyncio.get_running_loop().time() - min(since) if since else None

    @property
    def engine(self) -> Engine | None:
        """The first worker's engine (all workers run the same artifact)."""
        return self._workers[0].engine if self._workers else None

    @property
    def engine_name(self) -> str:
        """The engine's declared name (empty before the first worker has built its engine)."""
        engine = self.engine
        return "" if engine is None else engine.name

    @property
    def engine_workers(self) -> int:
        return len(self._workers)

    @property
    def rows_alone(self) -> bool:
        """Each window of a batch runs in its own engine call (``batch_rows``, resolved)."""
        return runs_rows_alone(self.config.batch_rows, self.engine)

    @property
    def queue_depth(self) -> int:
        """Requests waiting for the engine (not counting the batch it is running)."""
        return len(self._queue)

    # -- requests ------------------------------------------------------------
    async def run(self, call: EngineCall) -> EngineOutput:
        """The engine's output for one model call: its logits over the call's rows (typed:
        punctuation, and a truecasing head's or None) and, for a streaming-graph call, the
        keys/values its stream keeps (:func:`~streampunct.core.stream_cache.run_stream_calls`).

        Raises :class:`OverloadedError` when the queue is full and
        :class:`EngineFailedError` when the engine fails on this call. Cancelling
        the caller removes the call from the queue.
        """
        return await self._submit(call.work)

    async def infer(self, input_ids: np.ndarray) -> np.ndarray:
        """The punctuation logits float32[T, C] of one unpadded window int64[T] (as :meth:`run`)."""
        return (await self._submit(input_ids)).heads.punctuation

    async def _submit(self, work: np.ndarray | StreamCall, *, probe: bool = False) -> EngineOutput:
        if not self.ready or self._arrived is None or self._not_full is None:
            raise EngineFailedError("the engine is not running")
        if len(self._queue) >= self.config.max_queue:
            self._not_full.clear()
            now = asyncio.get_running_loop().time()
            last, self._last_full = self._last_full, now
            if last is None or now - last >= OVERLOAD_EPISODE_GAP_S:
                # once per episode for the server (as each session gets its error once per episode)
                logger.warning("the engine queue is full (max_queue %d): sessions are told 'overloaded' and "
                               "their words wait; more load than the engine serves within the latency bounds",
                               self.config.max_queue)
            raise OverloadedError(
                f"{len(self._queue)} requests already wait for the engine (max_queue)"
            )
        loop = asyncio.get_running_loop()
        item = _Pending(work, loop.create_future(), loop.time(), probe=probe)
        self._queue.append(item)
        self._arrived.set()
        try:
            return await item.future
        except asyncio.CancelledError:
            if not item.done:
                try:
                    self._queue.remove(item)
                except ValueError:
                    pass
                self._note_capacity()
            raise

    async def wait_for_capacity(self) -> None:
        """Return once the queue has room again."""
        assert self._not_full is not None
        while len(self._queue) >= self.config.max_queue:
            self._not_full.clear()
            await self._not_full.wait()

    def _note_capacity(self) -> None:
        if self._not_full is not None and len(self._queue) < self.config.max_queue:
            self._not_full.set()

    # -- collector (event loop) ----------------------------------------------
    def _idle_trim_at(self) -> float | None:
        """When an idle engine's trim is due (None: no trim pending)."""
        if self._trim is None or not self._trim_pending:
            return None
        return max(self._next_trim, self._last_batch_end + (self.config.trim_interval_s or 0.0))

    def note_freed(self) -> None:
        """Memory was freed outside the engine (a connection went): the allocator is trimmed once
        the interval allows, whether or not a batch comes (connections that never reach a session,
        unfinished handshakes of a megabyte each, left their memory with the heaps)."""
        if self._trim is None or self._trim_pending:
            return
        self._trim_pending = True
        if self._arrived is not None:
            self._arrived.set()  # an idle collector computes the trim's time again

    async def _run_trim(self, worker: _Worker) -> None:
        """Give the allocator's free memory back, on ``worker``'s thread (it holds no batch)."""
        assert self._trim is not None
        loop = asyncio.get_running_loop()
        self._trim_pending = False
        t0 = time.perf_counter()
        try:
            await self._watched(worker, self._trim)
        except Exception:
            logger.exception("allocator trim failed; no more trims")
            self._trim = None
            return
        self.trims += 1
        self.last_trim_end = loop.time()
        self._next_trim = loop.time() + (self.config.trim_interval_s or 0.0)
        logger.debug("allocator trimmed in %.1f ms", (time.perf_counter() - t0) * 1000.0)

    async def _collect(self) -> None:
        assert self._arrived is not None and self._idle is not None
        loop = asyncio.get_running_loop()
        max_wait = self.config.max_wait_ms / 1000.0
        while True:
            worker = await self._idle.get()
            if self._trim is not None and self._trim_pending and loop.time() >= self._next_trim:
                await self._run_trim(worker)  # under load: one every trim_interval_s
            while not self._queue:
                self._arrived.clear()
                trim_at = self._idle_trim_at()
                if trim_at is None:
                    await self._arrived.wait()
                    continue
                try:
                    await asyncio.wait_for(self._arrived.wait(), max(0.0, trim_at - loop.time()))
                except TimeoutError:
                    await self._run_trim(worker)  # idle that long after the last batch
            deadline = self._queue[0].enqueued + max_wait
            while self._queue and len(self._queue) < self.config.max_batch:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), remaining)
                except TimeoutError:
                    break
            batch = []
            while self._queue and len(batch) < self.config.max_batch:
                item = self._queue.popleft()
                item.done = True
                if not item.future.done():
                    batch.append(item)
            self._note_capacity()
            if not batch:
                self._idle.put_nowait(worker)
                continue
            self._running.update(batch)
            task = asyncio.create_task(self._serve(worker, batch), name="streampunct-batch")
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)

    async def _serve(self, worker: _Worker, batch: list[_Pending]) -> None:
        """Run one batch on ``worker``, then give the worker back."""
        try:
            await self._run(worker, batch)
        except asyncio.CancelledError:
            raise
        except Exception:
            # A bug here must not stall every session waiting on the engine.
            logger.exception("batch of %d failed outside the engine", len(batch))
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(EngineFailedError("internal batching error"))
        finally:
            self._running.difference_update(batch)
            self._trim_pending = True
            self._last_batch_end = asyncio.get_running_loop().time()
            if self._idle is not None:
                self._idle.put_nowait(worker)

    async def _run(self, worker: _Worker, batch: list[_Pending]) -> None:
        """One batch: window ids padded into one engine call (or each alone, ``batch_rows``),
        streaming-graph calls as :func:`~streampunct.core.stream_cache.run_stream_calls` groups
        them (:func:`~streampunct.core.engine_call.run_work`); one request at a time when a
        batch of several fails."""
        stream = isinstance(batch[0].work, StreamCall)
        if not stream and len(batch) > 1 and runs_rows_alone(self.config.batch_rows, worker.engine):
            await self._run_alone(worker, batch)
            return
        work = [item.work for item in batch]
        t0 = time.perf_counter()
        results: list = []
        calls: list[tuple[int, int, float]] = []
        try:
            (results, calls), seconds = await self._in_thread(worker, self._infer_batch, worker.engine, work)
        except Exception as exc:
            if len(batch) == 1:
                results = [exc]
            else:
                logger.warning("engine failed on a batch of %d; retrying one by one", len(batch))
                results = await self._watched(worker, self._infer_each, worker.engine, work)
            seconds = time.perf_counter() - t0
        failed = self._answer(batch, results)
        if self._on_batch is not None:
            if calls:
                tokens = sum(t for _, t, _ in calls)
            else:  # failed: as the calls would have run
                tokens = sum(len(g) * max(len(_ids(work[k])) for k in g)
                             for g in self._call_groups(worker.engine, work))
            self._on_batch(BatchRecord(len(batch), tokens, seconds, failed,
                                       tuple((rows, secs) for rows, _, secs in calls)))

    async def _in_thread(self, worker: _Worker, fn: Callable, *args: object) -> tuple:
        """``fn(*args)`` in the worker's thread: (its result, the seconds it ran there). Timed
        in the thread, so the wait for the event loop to take the answers does not count as
        engine time."""

        def timed() -> tuple:
            t0 = time.perf_counter()
            return fn(*args), time.perf_counter() - t0

        return await self._watched(worker, timed)

    async def _watched(self, worker: _Worker, fn: Callable, *args: object) -> Any:
        """``worker.run(fn, *args)`` for a batch or a trim (the worker holds no other job, so it
        starts now), watched: still running ``stall_timeout_s`` later, it marks the engine
        stalled until it returns (module docstring)."""
        bound = self.config.stall_timeout_s
        if bound is None:
            return await worker.run(fn, *args)
        loop = asyncio.get_running_loop()
        timer = loop.call_later(bound, self._stall_seen, worker, loop.time())
        try:
            return await worker.run(fn, *args)
        finally:
            timer.cancel()
            stalled_since, worker.stalled_since = worker.stalled_since, None
            if stalled_since is not None and not self._closed:  # (closing cancels the wait, not the call)
                seconds = loop.time() - stalled_since
                logger.warning("engine call returned after %.1f s; %s", seconds,
                               "another is still stalled" if self.engine_stalled else "the engine is no longer stalled")

    def _stall_seen(self, worker: _Worker, started: float) -> None:
        """(Loop timer) ``worker``'s call has run ``stall_timeout_s``: the engine is stalled."""
        if self._closed:
            return
        worker.stalled_since = started
        logger.error("engine stalled: a call has run for %.1f s without returning (stall timeout %g s); "
                     "/healthz answers 503 \"stalled\" until it returns; %d windows are in or wait for the engine",
                     asyncio.get_running_loop().time() - started, self.config.stall_timeout_s,
                     len(self._queue) + len(self._running))

    async def _run_alone(self, worker: _Worker, batch: list[_Pending]) -> None:
        """One engine call per window, all in one hand-off to the worker thread; windows
        whose session went away meanwhile are not run. The answers come back together:
        handing each to the event loop as it is done (tried) made the loop's work for the
        sessions compete with the worker for the GIL and both cores, and the engine ran
        a third slower under load."""
        (results, calls), seconds = await self._in_thread(worker, self._infer_alone, worker.engine, batch)
        failed = self._answer(batch, results)
        ran = [item for item, result in zip(batch, results, strict=True) if result is not None]
        if self._on_batch is not None and ran:
            tokens = sum(len(_ids(item.work)) for item in ran)
            self._on_batch(BatchRecord(len(ran), tokens, seconds, failed, tuple(calls)))

    def _infer_alone(self, engine: Engine, batch: Sequence[_Pending]
                     ) -> tuple[list[EngineOutput | BaseException | None], list[tuple[int, float]]]:
        """Worker thread: each window in its own call; None for a window whose session
        went away before its turn (a hint read across threads, checked again on the loop).
        Also (1, seconds) of each call made."""
        results: list[EngineOutput | BaseException | None] = []
        calls: list[tuple[int, float]] = []
        for item in batch:
            if item.future.done():
                results.append(None)
                continue
            t0 = time.perf_counter()
            results.append(self._infer_each(engine, [item.work])[0])
            calls.append((1, time.perf_counter() - t0))
        return results, calls

    def _answer(self, batch: Sequence[_Pending], results: Sequence[EngineOutput | BaseException | None]) -> int:
        """Hand each request its output or its engine failure; returns the failures. A
        None result (a window not run) and a request whose session went away meanwhile
        get nothing. The first failure after a success is logged with its traceback, the
        rest of a run of failures in one line each."""
        failed = succeeded = handed = 0  # windows that ran and failed / succeeded; failures handed to a request
        for item, result in zip(batch, results, strict=True):
            if result is None:
                continue
            if isinstance(result, BaseException):
                failed += 1
                if self._failed_in_a_row == 0 and failed == 1:
                    logger.error("engine failed on a window", exc_info=result)
                else:
                    logger.error("engine failed on a window (%d in a row): %s: %s", self._failed_in_a_row + failed,
                                 type(result).__name__, result)
                if item.future.done():
                    continue
                handed += not item.probe
                error = EngineFailedError(f"inference failed: {type(result).__name__}: {result}")
                error.__cause__ = result
                item.future.set_exception(error)
            else:
                succeeded += 1
                if not item.future.done():
                    item.future.set_result(result)
        self._note_results(succeeded, failed)
        return handed

    def _note_results(self, succeeded: int, failed: int) -> None:
        """Engine health after a batch: a success clears it; failures in a row start the probe."""
        if succeeded:
            self._failed_in_a_row = 0
            if self.engine_failing:
                self.engine_failing = False
                logger.warning("engine works again: a window succeeded")
            return
        self._failed_in_a_row += failed
        if (self._failed_in_a_row >= PROBE_AFTER_FAILURES and self._probe is None and not self._closed
                and self._probe_work is not None):
            self._probe = asyncio.create_task(self._probe_engine(), name="streampunct-engine-probe")

    async def _probe_engine(self) -> None:
        """Run the warm-up window until a window succeeds (module docstring)."""
        try:
            while not self._closed and self._failed_in_a_row > 0:
                try:
                    await self._submit(self._probe_work, probe=True)
                except OverloadedError:
                    pass  # windows wait: their answers will tell
                except EngineFailedError as e:
                    if not self._closed and not self.engine_failing:
                        self.engine_failing = True
                        logger.error("engine failing: windows failed in a row, and the warm-up window too (%s); "
                                     "/healthz answers 503 until a window succeeds", e)
                else:
                    return
                await asyncio.sleep(PROBE_INTERVAL_S)
        finally:
            self._probe = None

    # -- worker thread -------------------------------------------------------
    def _infer_padded(self, engine: Engine, seqs: Sequence[np.ndarray]) -> list[EngineOutput]:
        """Worker thread: whole windows in one padded call."""
        return run_work(engine, seqs, self._pad_id)

    def _call_groups(self, engine: Engine, work: Sequence[np.ndarray | StreamCall]) -> list[list[int]]:
        """The engine calls a batch's work makes, as index groups: whole windows in one
        padded call; streaming calls full and cached apart, or each alone when the engine's
        rows depend on their batch (``batch_rows``)."""
        if not isinstance(work[0], StreamCall):
            return [list(range(len(work)))]
        if len(work) > 1 and runs_rows_alone(self.config.batch_rows, engine):
            return [[k] for k in range(len(work))]
        full = [k for k, w in enumerate(work) if w.full]
        cached = [k for k, w in enumerate(work) if not w.full]
        return [g for g in (full, cached) if g]

    def _infer_batch(self, engine: Engine, work: Sequence[np.ndarray | StreamCall]
                     ) -> tuple[list[EngineOutput], list[tuple[int, int, float]]]:
        """Worker thread: a batch's engine calls (whole windows padded together; streaming
        calls as :func:`~streampunct.core.stream_cache.run_stream_calls` groups them, full
        and cached apart, or each alone when the engine's rows depend on their batch:
        ``batch_rows``): the outputs in order, and (rows, tokens, seconds) of each call,
        tokens counted as the call ran them (rows x its longest)."""
        out: list[EngineOutput | None] = [None] * len(work)
        calls: list[tuple[int, int, float]] = []
        for group in self._call_groups(engine, work):
            t0 = time.perf_counter()
            results = run_work(engine, [work[k] for k in group], self._pad_id)
            seconds = time.perf_counter() - t0
            for k, result in zip(group, results, strict=True):
                out[k] = result
            calls.append((len(group), len(group) * max(len(_ids(work[k])) for k in group), seconds))
        return out, calls  # type: ignore[return-value]  # every slot filled

    def _infer_each(self, engine: Engine, work: Sequence[np.ndarray | StreamCall]
                    ) -> list[EngineOutput | BaseException]:
        """Worker thread: each call alone, its failure as its result."""
        out: list[EngineOutput | BaseException] = []
        for w in work:
            try:
                out.append(run_work(engine, [w], self._pad_id)[0])
            except Exception as exc:
                out.append(exc)
        return out
