"""Prometheus metrics of one server, on a registry of its own.

A registry per server (not prometheus-client's global one) lets several
servers live in one process, as they do in the tests.

The worker processes of ``serve --workers`` write their values to files in
``$PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's multiprocess mode; the
supervisor, :mod:`streampunct.server.workers`, sets it for them), and each
renders the sum over all of them: ``/metrics`` covers the whole server
whichever worker answers (docs/server.md, "Worker processes").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client import values as prometheus_values
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from streampunct.core.wire import ErrorCode
from streampunct.server import allocator
from streampunct.server.batcher import BatchRecord

_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Kinds of windows (``streampunct_window_tokens{kind}``): finals, or provisional labels.
WINDOW_KINDS = ("final", "partial")
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


_TRIMS_HELP = "Times the allocator's free memory was given back (malloc_trim)."
_TRIM_SECONDS_HELP = "Wall time of those trims (on an engine worker's thread)."
#: Seconds between the writes of a worker's live gauges to its file (``serve --workers``).
REFRESH_S = 1.0


class _AllocatorCollector(Collector):
    """The process' allocator trims (:data:`streampunct.server.allocator.STATS`), read at each scrape."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        stats = allocator.STATS
        yield CounterMetricFamily("streampunct_allocator_trims", _TRIMS_HELP, value=stats.calls)
        yield CounterMetricFamily("streampunct_allocator_trim_seconds", _TRIM_SECONDS_HELP, value=stats.seconds)


def values_in_files() -> bool:
    """Whether this process writes its metric values to files (prometheus-client's multiprocess
    mode: ``$PROMETHEUS_MULTIPROC_DIR`` was set when prometheus-client was imported)."""
    return prometheus_values.ValueClass is not prometheus_values.MutexValue and bool(
        os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class _LiveGauge(Gauge):
    """A gauge whose value a function gives (``set_function``): read at each scrape, or, when the
    values live in files (:func:`values_in_files`), written to its file by :meth:`ServerMetrics.refresh`."""

    live: Callable[[], float] | None = None

    def set_function(self, f: Callable[[], float]) -> None:
        self.live = f
        if not values_in_files():
            super().set_function(f)


class ServerMetrics:
    """The server's counters, gauges and histograms.

    Attributes:
        sessions: open sessions (gauge); sessions_total: sessions ever opened.
        words_in: words accepted (after normalization); words_finalized: finals sent.
        batch_size: requests per engine call; engine_latency: seconds per engine call.
        finalize_margin: seconds from a word becoming decidable to its final being sent.
        errors: error messages sent, by code; rejected: handshakes refused, by reason.
        engine_failures: windows the engine failed on (handed to their sessions).
        queue_depth: requests waiting for the engine.
        engine_stalled: 1 while an engine call has run past the stall timeout without
            returning (``serve --engine-stall-timeout-s``; summed over ``--workers``).
        window_tokens, windows: tokens (CLS and SEP included, no padding) and
            windows the engine encoded for sessions, by kind (``final``:
            windows that decide finals; ``partial``: provisional labels).
            ``window_tokens{kind="final"} / words_finalized`` is the
            streaming cost: tokens encoded per finalized word.
        engine_tokens: padded tokens of all engine calls (batch x longest).
        backlog: words received and not yet finalized, all sessions (set by
            the server as a function).
        input_paused: times a session stopped reading (backlog at its limit, or
            its outbox full).
        input_wait: seconds sessions' readers held their input, by ``reason``:
            ``paused`` (as ``input_paused``) or ``throttled`` (as
            ``input_throttled``). Frames wait in the socket meanwhile, and a
            word's finalize margin starts only once it is read.
        slow_reader_closes: sessions closed because a send stayed blocked
            longer than the send timeout (the client did not read).
        idle_closes: sessions closed because their client sent no frame for the idle timeout.
        itn_wait: seconds the text of an ``itn`` session's final or partial
            waited for grammar searches not cached yet (only texts that
            waited; the wait is part of their finalize margin).

    ``streampunct_allocator_trims_total`` and ``..._trim_seconds_total`` count
    the process' allocator trims (:mod:`streampunct.server.allocator`; the batcher's
    ``trim_interval_s``). ``streampunct_worker_info{worker}`` is 1 for each live
    worker process (one with a plain server).

    ``worker``, ``workers``: the process's place among those of ``serve --workers``. With more
    than one and the values in files (:func:`values_in_files`), :meth:`render` sums the files of
    every worker (gauges: those of the live ones), and :meth:`refresh` must run now and then
    (the worker does, every :data:`REFRESH_S`) to write the gauges that functions give.
    """

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, worker: int = 0, workers: int = 1) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.multiprocess = workers > 1 and values_in_files()
        self.sessions = Gauge("streampunct_sessions", "Open streaming sessions.", registry=r,
                              multiprocess_mode="livesum")
        self.connections = Gauge(
            "streampunct_connections", "Open TCP connections, those still in their handshake included.",
            registry=r, multiprocess_mode="livesum")
        self.sessions_total = Counter(
            "streampunct_sessions_opened", "Streaming sessions opened.", registry=r
        )
        self.words_in = Counter(
            "streampunct_words_in", "Words received (after normalization).", registry=r
        )
        self.words_finalized = Counter(
            "streampunct_words_finalized", "Words whose final label was sent.", registry=r
        )
        self.batch_size = Histogram(
            "streampunct_batch_size", "Window requests per engine call.",
            buckets=_BATCH_BUCKETS, registry=r,
        )
        self.engine_latency = Histogram(
            "streampunct_engine_latency_seconds", "Wall time of one engine call.",
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.finalize_margin = Histogram(
            "streampunct_finalize_margin_seconds",
            "Time from a word becoming decidable to its final being sent.",
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.errors = Counter(
            "streampunct_errors", "Error messages sent to clients, by code.", ["code"], registry=r
        )
        self.engine_failures = Counter(
            "streampunct_engine_failures",
            "Windows the engine failed on (each session's error internal and 1011 close).", registry=r,
        )
        for code in ErrorCode:
            self.errors.labels(code=str(code))
        self.rejected = Counter(
            "streampunct_handshakes_rejected", "Handshakes refused, by reason.", ["reason"],
            registry=r,
        )
        self.queue_depth = _LiveGauge(
            "streampunct_queue_depth", "Window requests waiting for the engine.", registry=r,
            multiprocess_mode="livesum",
        )
        self.engine_stalled = _LiveGauge(
            "streampunct_engine_stalled",
            "1 while an engine call has run longer than --engine-stall-timeout-s without returning "
            "(/healthz answers 503 \"stalled\"); with --workers, the workers so stalled.",
            registry=r, multiprocess_mode="livesum",
        )
        self.window_tokens = Counter(
            "streampunct_window_tokens",
            "Tokens of the windows encoded for sessions (CLS/SEP included, unpadded), by kind.",
            ["kind"], registry=r,
        )
        self.windows = Counter(
            "streampunct_windows", "Windows encoded for sessions, by kind.", ["kind"], registry=r
        )
        for kind in WINDOW_KINDS:
            self.window_tokens.labels(kind=kind)
            self.windows.labels(kind=kind)
        self.engine_tokens = Counter(
            "streampunct_engine_tokens", "Padded tokens of all engine calls (batch x longest).",
            registry=r,
        )
        self.backlog = _LiveGauge(
            "streampunct_backlog_words", "Words received and not yet finalized, all sessions.",
            registry=r, multiprocess_mode="livesum",
        )
        self.input_paused = Counter(
            "streampunct_input_paused",
            "Times a session stopped reading its socket (backlog limit or full outbox).", registry=r,
        )
        self.input_wait = Counter(
            "streampunct_input_wait_seconds",
            "Seconds sessions' readers held their input (reason: paused, backlog limit or full outbox; "
            "throttled, --max-frames-per-s); words wait in the socket then, before their margin starts.",
            ["reason"], registry=r,
        )
        for reason in ("paused", "throttled"):
            self.input_wait.labels(reason=reason)
        self.input_throttled = Counter(
            "streampunct_input_throttled",
            "Times a session's reader waited because its client sent frames faster than --max-frames-per-s.",
            registry=r,
        )
        self.slow_reader_closes = Counter(
            "streampunct_slow_reader_closes",
            "Connections closed because their client stopped reading: 1013 when a send stayed blocked "
            "past the send timeout, aborted when answers to its own frames (pongs) piled up unsent.",
            registry=r,
        )
        self.idle_closes = Counter(
            "streampunct_idle_closes",
            "Sessions closed (1001, their words finalized) because their client sent no frame for "
            "--idle-timeout-s.",
            registry=r,
        )
        self.itn_wait = Histogram(
            "streampunct_itn_wait_seconds",
            "Time a final's or partial's text waited for ITN grammar searches (texts that waited).",
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.worker_info = Gauge(
            "streampunct_worker_info", "1 for each live worker process (serve --workers; one without).",
            ["worker"], registry=r, multiprocess_mode="livesum",
        )
        self.worker_info.labels(worker=str(worker)).set(1)
        if self.multiprocess:
            # the allocator's process-wide stats, written to this worker's file by refresh()
            self._trims = Counter("streampunct_allocator_trims", _TRIMS_HELP, registry=r)
            self._trim_seconds = Counter("streampunct_allocator_trim_seconds", _TRIM_SECONDS_HELP, registry=r)
            self._trims_seen = (0, 0.0)
        else:
            r.register(_AllocatorCollector())

    def refresh(self) -> None:
        """Write what functions give to this process's files: the live gauges whenever values
        live in files (a single server started with ``$PROMETHEUS_MULTIPROC_DIR`` set too), the
        allocator's trims with :attr:`multiprocess`."""
        if values_in_files():
            for gauge in (self.queue_depth, self.backlog, self.engine_stalled):
                if gauge.live is not None:
                    gauge.set(gauge.live())
        if not self.multiprocess:
            return
        stats = allocator.STATS
        calls, seconds = self._trims_seen
        if stats.calls > calls:
            self._trims.inc(stats.calls - calls)
            self._trim_seconds.inc(max(0.0, stats.seconds - seconds))
            self._trims_seen = (stats.calls, stats.seconds)

    def observe_batch(self, record: BatchRecord) -> None:
        """A batch's engine calls: the rows and the wall time of each (several calls when
        its windows ran alone), and the tokens they ran."""
        for rows, seconds in record.engine_calls():
            self.batch_size.observe(rows)
            self.engine_latency.observe(seconds)
        self.engine_tokens.inc(record.tokens)
        if record.failed:
            self.engine_failures.inc(record.failed)

    def observe_window(self, partial: bool, n_tokens: int) -> None:
        """One session window came back from the engine with ``n_tokens`` tokens."""
        kind = WINDOW_KINDS[1] if partial else WINDOW_KINDS[0]
        self.window_tokens.labels(kind=kind).inc(n_tokens)
        self.windows.labels(kind=kind).inc()

    def render(self) -> bytes:
        """The Prometheus text: this server's, or with :attr:`multiprocess` that of every worker."""
        self.refresh()
        if not self.multiprocess:
            return generate_latest(self.registry)
        every_worker = CollectorRegistry()
        multiprocess.MultiProcessCollector(every_worker)
        return generate_latest(every_worker)
