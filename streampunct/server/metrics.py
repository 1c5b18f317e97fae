"""Prometheus metrics of one server, on a registry of its own.

A registry per server (not prometheus-client's global one) lets several
servers live in one process, as they do in the tests.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
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


class _AllocatorCollector(Collector):
    """The process' allocator trims (:data:`streampunct.server.allocator.STATS`), read at each scrape."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        stats = allocator.STATS
        yield CounterMetricFamily(
            "streampunct_allocator_trims", "Times the allocator's free memory was given back (malloc_trim).",
            value=stats.calls)
        yield CounterMetricFamily(
            "streampunct_allocator_trim_seconds", "Wall time of those trims (on an engine worker's thread).",
            value=stats.seconds)


class ServerMetrics:
    """The server's counters, gauges and histograms.

    Attributes:
        sessions: open sessions (gauge); sessions_total: sessions ever opened.
        words_in: words accepted (after normalization); words_finalized: finals sent.
        batch_size: requests per engine call; engine_latency: seconds per engine call.
        finalize_margin: seconds from a word becoming decidable to its final being sent.
        errors: error messages sent, by code; rejected: handshakes refused, by reason.
        queue_depth: requests waiting for the engine.
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
        slow_reader_closes: sessions closed because a send stayed blocked
            longer than the send timeout (the client did not read).
        itn_wait: seconds the text of an ``itn`` session's final or partial
            waited for grammar searches not cached yet (only texts that
            waited; the wait is part of their finalize margin).

    ``streampunct_allocator_trims_total`` and ``..._trim_seconds_total`` count
    the process' allocator trims (:mod:`streampunct.server.allocator`; the batcher's
    ``trim_interval_s``).
    """

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sessions = Gauge("streampunct_sessions", "Open streaming sessions.", registry=r)
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
        for code in ErrorCode:
            self.errors.labels(code=str(code))
        self.rejected = Counter(
            "streampunct_handshakes_rejected", "Handshakes refused, by reason.", ["reason"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "streampunct_queue_depth", "Window requests waiting for the engine.", registry=r
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
        self.backlog = Gauge(
            "streampunct_backlog_words", "Words received and not yet finalized, all sessions.",
            registry=r,
        )
        self.input_paused = Counter(
            "streampunct_input_paused",
            "Times a session stopped reading its socket (backlog limit or full outbox).", registry=r,
        )
        self.slow_reader_closes = Counter(
            "streampunct_slow_reader_closes",
            "Sessions closed (1013) because a send stayed blocked past the send timeout.",
            registry=r,
        )
        self.itn_wait = Histogram(
            "streampunct_itn_wait_seconds",
            "Time a final's or partial's text waited for ITN grammar searches (texts that waited).",
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        r.register(_AllocatorCollector())

    def observe_batch(self, record: BatchRecord) -> None:
        self.batch_size.observe(record.size)
        self.engine_latency.observe(record.seconds)
        self.engine_tokens.inc(record.tokens)

    def observe_window(self, partial: bool, n_tokens: int) -> None:
        """One session window came back from the engine with ``n_tokens`` tokens."""
        kind = WINDOW_KINDS[1] if partial else WINDOW_KINDS[0]
        self.window_tokens.labels(kind=kind).inc(n_tokens)
        self.windows.labels(kind=kind).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
