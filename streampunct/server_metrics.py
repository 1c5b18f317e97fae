"""Prometheus metrics of one server, on a registry of its own.

A registry per server (not prometheus-client's global one) lets several
servers live in one process, as they do in the tests.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from streampunct.batcher import BatchRecord
from streampunct.protocol import ErrorCode

_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ServerMetrics:
    """The server's counters, gauges and histograms.

    Attributes:
        sessions: open sessions (gauge); sessions_total: sessions ever opened.
        words_in: words accepted (after normalization); words_finalized: finals sent.
        batch_size: requests per engine call; engine_latency: seconds per engine call.
        finalize_margin: seconds from a word becoming decidable to its final being sent.
        errors: error messages sent, by code; rejected: handshakes refused, by reason.
        queue_depth: requests waiting for the engine.
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

    def observe_batch(self, record: BatchRecord) -> None:
        self.batch_size.observe(record.size)
        self.engine_latency.observe(record.seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
