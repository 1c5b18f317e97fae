"""The streaming punctuation server: WebSocket sessions over one batched engine.

``serve(config)`` starts listening at once and loads the engine in its worker
thread; ``/healthz`` answers 503 until the engine is loaded and warmed up,
then 200. Each WebSocket connection on ``/v1/stream`` (or ``/``) becomes a
:class:`~streampunct.server.session.Session`; all sessions share one
:class:`~streampunct.server.batcher.Batcher`. Handshakes are checked in
``process_request``: health and metrics endpoints, the caption page
(``/captions``), the request policy of :mod:`streampunct.server.http_policy`
(methods, ``Host``, ``Origin``, malformed headers, bearer-token auth), the
session limit (503). :meth:`StreamServer.shutdown` stops accepting,
finalizes and sends every pending word of every session, closes them with
1001 (or, with ``drain="resume"``, closes them with 1012 at once so that
their clients resume elsewhere), then closes the engine.

Tests inject an engine, an aligner and a window instead of a model folder: a
:class:`ServerRuntime` (``serve(config, runtime)``).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import functools
import hashlib
import http
import importlib.resources
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import typing
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

import numpy as np
from websockets import ConnectionClosed
from websockets.asyncio.server import Server, ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.datastructures import Headers
from websockets.exceptions import PayloadTooBig, ProtocolError, TooManyFragments
from websockets.frames import CloseCode
from websockets.http11 import Request, Response
from websockets.protocol import State

from engines.base import Engine
from engines.registry import StreamCacheMode
from streampunct.core import codec
from streampunct.core.alignment import Aligner
from streampunct.core.options import SessionOptions, require_int
from streampunct.core.stream_cache import StreamShape, whole_call
from streampunct.core.windowing import WindowConfig
from streampunct.core.wire import PROTOCOL_VERSION, Limits
from streampunct.errors import InputError, ModelError, StreampunctError
from streampunct.labels import (
    PARTIAL_MARK_THRESHOLD,
    check_case_margin,
    check_partial_mark_threshold,
)
from streampunct.server.batcher import Batcher, BatcherConfig, require_finite
from streampunct.server.event_loop import EventLoop, loop_factory, loop_name, resolve
from streampunct.server.http_policy import (
    HostPolicy,
    Refusal,
    RequestPolicy,
    canonical_host,
    canonical_ip,
    canonical_origin,
    forwarded_client,
    is_header_token,
    redact_tokens,
)
from streampunct.server.metrics import ServerMetrics
from streampunct.server.session import SHUTDOWN_REASON, Session, SessionContext, close_within
from streampunct.server.ws_connection import GuardedConnection, max_write_buffer
from streampunct.text.itn import ProcessNormalizer, load_normalizer
from streampunct.text.itn import available as itn_available
from streampunct.text.written_form import ITN_UNAVAILABLE, Lexicon, Normalizer, WrittenForms

logger = logging.getLogger(__name__)


class ConnectionLogFilter(logging.Filter):
    """Keeps websockets' per-connection INFO lines out of the server's log unless its logger
    is at DEBUG: "connection open"/"closed" and every HTTP answer ("HTTP response sent (200
    OK)" to each health check, twice a second per replica behind the shipped HAProxy
    configuration). The server logs what they would say itself: each session's open and close
    (``session=... opened``) and each refusal (``refused ...``)."""

    NOISE = frozenset(("connection open", "connection closed", "HTTP response sent (%d %s)",
                       "connection rejected (%d %s)"))

    def filter(self, record: logging.LogRecord) -> bool:
        if not (record.levelno != logging.INFO or record.msg not in self.NOISE
                or logging.getLogger(record.name).isEnabledFor(logging.DEBUG)):
            return False
        # at DEBUG, websockets quotes request lines and headers: no token reaches the log
        message = record.getMessage()
        redacted = redact_tokens(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


#: websockets' logger for the server's connections (its listening and closing lines stay at INFO).
websockets_logger = logging.getLogger(f"{__name__}.websockets")
websockets_logger.addFilter(ConnectionLogFilter())

#: The signals that drain a server (and that a --workers supervisor forwards to its workers).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: WebSocket endpoints (the protocol's path, and the root for convenience).
STREAM_PATHS = frozenset({"/v1/stream", "/"})
#: Plain HTTP endpoints.
HTTP_PATHS = frozenset({"/healthz", "/metrics", "/captions"})
#: The body of a 404: what the server does answer.
NOT_FOUND_BODY = ("no such endpoint; this server answers " + ", ".join(sorted(STREAM_PATHS - {"/"}))
                  + " (WebSocket) and " + ", ".join(sorted(HTTP_PATHS)) + "\n")
#: The least ``ServerConfig.worker_hang_timeout_s``: a worker beats 6 times within it, and the
#: supervisor looks once a second.
MIN_WORKER_HANG_TIMEOUT_S = 1.0
#: The response header that names the worker process that answered (``serve --workers``).
WORKER_HEADER = "X-Streampunct-Worker"
#: ``reason`` labels of ``streampunct_handshakes_rejected_total``.
REJECT_REASONS = ("malformed", "host", "method", "origin", "auth", "unavailable", "sessions", "timeout")
#: Seconds a connection has to complete its handshake (websockets' ``open_timeout``).
HANDSHAKE_TIMEOUT_S = 10.0
#: The close reason (1001) of a stream still open when ``shutdown_timeout_s`` ran out: its words
#: may not all be final (a complete drain closes with "server shutting down").
DRAIN_CUT_SHORT_REASON = "server shutting down: drain timed out before every word was final"


class DrainMode(StrEnum):
    """``ServerConfig.drain`` (``serve --drain``): what shutdown does with live streams."""

    FINALIZE = "finalize"
    RESUME = "resume"


class ItnGrammars(StrEnum):
    """``ServerConfig.itn_grammars`` (``serve --itn-grammars``): whether the ITN grammars load at
    startup: ``on`` (required), ``auto`` (when the ``itn`` extra is installed), ``off``."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


#: High-water mark of a connection's write buffer (websockets ``write_limit``):
#: a send waits while more than this is buffered for the socket.
WRITE_LIMIT_BYTES = 32 * 1024


@dataclass(frozen=True)
class ServerConfig:
    """Everything the server is started with; built once at the CLI boundary.

    Attributes:
        model_dir: model folder (None: the shipped ``models/default``). With ``engine="fake"``,
            which serves a model of its own (:func:`streampunct.model.load_model_info`), only
            its tokenizer is used, and none is needed.
        engine: engine backend (``onnxruntime``, ``tensorrt``, ``torch``, ``triton``, ``fake``).
        engine_options: extra keyword options for the backend.
        host, port: where to listen (port 0 picks a free port).
        worker, workers: this process's place among the processes of ``serve --workers``
            (:mod:`streampunct.server.workers` sets them: 0 <= worker < workers). With more
            than one, the listener is bound with ``SO_REUSEPORT`` to the port the supervisor
            chose, answers name their worker (``/healthz``, an ``X-Streampunct-Worker`` header)
            and onnxruntime engines share the cores with the other workers' (docs/server.md,
            "Worker processes").
        batching: cross-stream batching policy (max batch, max wait, queue bound).
        max_sessions: open sessions; more are refused with HTTP 503.
        limits: per-message limits (words per message, word length, option ranges).
        max_message_bytes: WebSocket frame limit; a larger frame closes with 1009.
        auth_token: when set, handshakes must carry it (bearer header or ``?token=``).
        allow_hosts: ``Host`` names answered besides the server's own (``*``: any;
            docs/server.md, "Hosts, origins and methods").
        allow_origins: browser origins whose handshakes are accepted besides the
            server's own (``*``: any; ``null``: pages without one).
        trusted_proxies: IP addresses of proxies whose ``X-Forwarded-For`` names the client
            in log lines (``client via proxy:port``); other peers' headers are ignored.
        word_cache_words: words whose sub-token ids the server keeps (an LRU
            cache; about 130 bytes + 8 per sub-token each; docs/server.md, "Memory").
        session_defaults: session options before a client ``config`` (within ``limits``:
            :meth:`SessionOptions.check <streampunct.core.options.SessionOptions.check>`).
        window: window geometry override (None: the model's).
        shutdown_timeout_s: longest a graceful shutdown waits for sessions to finish.
        max_backlog_words: a session whose words received but not yet
            finalized reach this stops reading its socket until they drain
            (input backpressure; see docs/server.md, "Bounded resources").
        max_outbox_messages: messages a session holds for sending before it
            stops reading and asking for windows.
        send_timeout_s: a send blocked this long (the client does not read)
            closes the session with 1013; None waits as long as it takes.
        idle_timeout_s: a session that receives no frame for this long (pings and pongs
            do not count) has every word it received finalized and is closed with 1001,
            reason ``idle timeout``; a client may resume it. None: no timeout.
        max_frames_per_s: frames a session's reader takes a second, after a burst of as
            many, a frame counting once per started 256 characters or 100 us of the event
            loop's CPU it took (:func:`~streampunct.server.rate.frame_cost`); past it the reader waits and
            TCP slows the client. A connection's pings and pongs have a bucket of their own at
            the same rate (:class:`~streampunct.server.ws_connection.GuardedConnection`). None:
            no limit.
        max_queued_frames: received frames websockets buffers per connection
            before it stops reading the socket (its ``max_queue``).
        ping_interval_s: keepalive pings (None: none). Pongs are never waited
            for: a late pong is what backpressure in either direction causes.
        close_timeout_s: longest a close handshake may take before the TCP
            connection is aborted.
        stream_cache: a :class:`~engines.registry.StreamCacheMode` (a plain string
            becomes its member). ``auto`` (default): streaming windows run with cached
            left context where the model folder has a streaming graph (and
            does not say ``"stream_cache": false``) and the engine runs one
            (onnxruntime, torch; docs/server.md, "Cached left context");
            ``on``: required; ``off``: every window encodes its left context.
        stream_cache_tokens: cached tokens per session (None: the model
            folder's ``stream_cache_tokens``): fewer trade accuracy for capacity.
        drain: a :class:`DrainMode`, what shutdown does with live streams: ``finalize`` (default)
            finalizes every word received, then closes with 1001; ``resume``
            closes with 1012 at once, so that clients resume elsewhere with
            their undecided words (docs/server.md, "Draining").
        itn_grammars: an :class:`ItnGrammars`: the ITN grammars (``itn`` sessions; the ``itn`` extra)
            are loaded at startup: ``on`` (required), ``auto`` (when the extra
            is installed) or ``off`` (a session's ``itn`` is ignored: the ``config`` answer does not name it).
        itn_cache: where the compiled grammars are cached (None:
            :func:`streampunct.text.itn.default_cache_dir`).
        itn_workers: processes that run the loaded grammars
            (:class:`streampunct.text.itn.ProcessNormalizer`); 0: the server's own
            process, where they hold the GIL while they run. Either way the
            texts of ``itn`` sessions are written on worker threads, never on
            the event loop (docs/server.md, "Written forms off the event loop").
        lexicon: the server's lexicon (normalized pairs,
            :func:`streampunct.text.written_form.parse_lexicon_tsv`), under each
            session's own ``lexicon``.
        partial_mark_threshold: partials show a provisional word's mark only when the
            model's probability of it is at least this (0 <= it < 1; 0: every mark; finals
            never change; docs/formatting.md, "Interim stability").
        event_loop: an :class:`~streampunct.server.event_loop.EventLoop`, the loop
            :func:`run_server` makes: ``auto`` (default: uvloop where it is installed, else
            asyncio's), ``uvloop`` (ValueError where it is not) or ``asyncio``. :func:`serve`
            runs on its caller's loop.
    """

    model_dir: Path | None = None
    engine: str = "onnxruntime"
    engine_options: Mapping[str, object] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8765
    worker: int = 0
    workers: int = 1
    batching: BatcherConfig = BatcherConfig()
    max_sessions: int = 256
    limits: Limits = Limits()
    max_message_bytes: int = 1 << 20
    auth_token: str | None = None
    allow_hosts: tuple[str, ...] = ()
    allow_origins: tuple[str, ...] = ()
    trusted_proxies: tuple[str, ...] = ()
    word_cache_words: int = 20_000
    session_defaults: SessionOptions = SessionOptions()
    window: WindowConfig | None = None
    shutdown_timeout_s: float = 10.0
    worker_hang_timeout_s: float | None = 30.0
    max_backlog_words: int = 4096
    max_outbox_messages: int = 64
    send_timeout_s: float | None = 30.0
    idle_timeout_s: float | None = None
    max_frames_per_s: float | None = 1000.0
    max_queued_frames: int = 4
    ping_interval_s: float | None = 20.0
    close_timeout_s: float = 10.0
    stream_cache: StreamCacheMode = StreamCacheMode.AUTO
    stream_cache_tokens: int | None = None
    drain: DrainMode = DrainMode.FINALIZE
    itn_grammars: ItnGrammars = ItnGrammars.OFF
    itn_cache: Path | None = None
    itn_workers: int = 1
    lexicon: tuple[tuple[str, str], ...] = ()
    partial_mark_threshold: float = PARTIAL_MARK_THRESHOLD
    event_loop: EventLoop = EventLoop.AUTO

    def __post_init__(self) -> None:
        try:
            check_partial_mark_threshold(self.partial_mark_threshold)
        except ValueError:
            raise ValueError("partial_mark_threshold must be a number in [0, 1), not "
                             f"{self.partial_mark_threshold!r}") from None
        modes: tuple[tuple[str, type[StrEnum]], ...] = (
            ("itn_grammars", ItnGrammars), ("drain", DrainMode), ("stream_cache", StreamCacheMode),
            ("event_loop", EventLoop))
        for name, kind in modes:
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, kind(value))  # a plain string becomes its member
            except ValueError:
                raise ValueError(f"{name} must be one of {', '.join(kind)}, not {value!r}") from None
        if self.event_loop is EventLoop.UVLOOP:
            resolve(self.event_loop)  # ValueError where uvloop does not import
        self.session_defaults.check(self.limits)
        if not self.host.strip():  # asyncio binds every interface for ""
            raise ValueError(f"host must name an address (0.0.0.0 or :: for every interface), not {self.host!r}")
        if self.auth_token is not None and not self.auth_token.strip():
            raise ValueError("auth_token must not be empty (None: no token)")
        if self.auth_token is not None and not is_header_token(self.auth_token):
            raise ValueError("auth_token must be visible ASCII characters (no spaces or control "
                             "characters, which an Authorization header cannot carry)")
        require_int(self, "port", 0, 65535)
        for name in ("workers", "max_sessions", "max_backlog_words", "max_outbox_messages", "max_queued_frames"):
            require_int(self, name, 1)
        for name in ("worker", "itn_workers", "word_cache_words"):
            require_int(self, name, 0)
        require_int(self, "max_message_bytes", 1024)
        require_int(self, "stream_cache_tokens", 1, optional=True)
        if self.workers < 1 or not 0 <= self.worker < self.workers:
            raise ValueError(f"workers must be >= 1 and 0 <= worker < workers, not worker {self.worker} of "
                             f"{self.workers}")
        for value in self.trusted_proxies:
            if canonical_ip(value) is None:
                raise ValueError(f"trusted_proxies: {value!r} is not an IP address")
        require_finite(self, "send_timeout_s", "ping_interval_s", "close_timeout_s", "shutdown_timeout_s",
                       "max_frames_per_s", "worker_hang_timeout_s", "idle_timeout_s")
        if self.worker_hang_timeout_s is not None and self.worker_hang_timeout_s < MIN_WORKER_HANG_TIMEOUT_S:
            raise ValueError(f"worker_hang_timeout_s must be >= {MIN_WORKER_HANG_TIMEOUT_S:g} (None: never)")
        if self.max_frames_per_s is not None and self.max_frames_per_s <= 0:
            raise ValueError("max_frames_per_s must be > 0 (None: no limit)")
        if self.shutdown_timeout_s < 0:
            raise ValueError("shutdown_timeout_s must be >= 0")
        if self.send_timeout_s is not None and self.send_timeout_s <= 0:
            raise ValueError("send_timeout_s must be > 0 (None: no timeout)")
        if self.idle_timeout_s is not None and self.idle_timeout_s <= 0:
            raise ValueError("idle_timeout_s must be > 0 (None: no timeout)")
        if self.ping_interval_s is not None and self.ping_interval_s <= 0:
            raise ValueError("ping_interval_s must be > 0 (None: no pings)")
        if self.close_timeout_s <= 0:
            raise ValueError("close_timeout_s must be > 0")
        for value in self.allow_hosts:
            if canonical_host(value) is None:
                raise ValueError(f"allow_host: {value!r} is not a host name or address (no port), nor '*'")
        for value in self.allow_origins:
            if canonical_origin(value) is None:
                raise ValueError(f"allow_origin: {value!r} is not an origin (scheme://host[:port]), '*' or 'null'")


@dataclass(frozen=True)
class ServerRuntime:
    """The model-side pieces a server runs with, given to :class:`StreamServer` and :func:`serve`
    in place of a model folder (an engine you built; tests, benchmarks), or read from
    ``config.model_dir`` by :meth:`from_model` (what the server does when given none).

    Attributes:
        engine_factory: makes one engine; called once per engine worker
            (``BatcherConfig.engine_workers``), on its thread.
        aligner: the tokenizer alignment of the engine's model.
        window: the streaming windows' geometry (None: ``ServerConfig.window``, else
            :class:`~streampunct.core.windowing.WindowConfig`'s defaults).
        model_name: the name ``ready`` and ``/healthz`` show.
        stream_shape: (layers, heads, head_dim) of the streaming graph's cache: an engine
            with ``infer_stream`` then runs with cached left context; None: whole windows.
        stream_cache_tokens: tokens a session's cache keeps (None: the streaming window's
            left context; ``ServerConfig.stream_cache_tokens`` overrides it).
        case_margin: the truecasing head's margin for capitals
            (:func:`streampunct.labels.case_classes`; a model folder's ``case_margin``);
            a finite number >= 0 (ValueError otherwise).
        normalizer: the ITN grammars, loaded (None: ``ServerConfig.itn_grammars`` says
            whether the server loads them).
    """

    engine_factory: Callable[[], Engine]
    aligner: Aligner
    window: WindowConfig | None = None
    model_name: str = "custom"
    stream_shape: tuple[int, int, int] | None = None
    stream_cache_tokens: int | None = None
    case_margin: float = 0.0
    normalizer: Normalizer | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "case_margin", check_case_margin(self.case_margin))

    @classmethod
    def from_model(cls, config: ServerConfig) -> ServerRuntime:
        """The runtime of ``config``'s model folder and engine (``model_dir``, ``engine``,
        ``engine_options``, ``stream_cache``, ``window``); the engines load when the server
        starts its workers. Raises :class:`~streampunct.errors.ModelError`."""
        from engines.registry import engine_threads, load_engine, load_stream_engine, physical_cores
        from streampunct.model import load_model_info

        info = load_model_info(config.model_dir, backend=config.engine)
        options = dict(config.engine_options)
        engines = config.batching.engine_workers * config.workers  # of all worker processes
        if engines > 1:
            # N engines side by side share the cores: each gets its part of them (unless the
            # options say otherwise).
            options = engine_threads(config.engine, max(1, physical_cores() // engines)) | options

        shape = _stream_shape(config, info)

        def engine_factory() -> Engine:
            if shape is not None:
                return load_stream_engine(config.engine, info.path, **options)
            return load_engine(config.engine, info.path, **options)

        tokens = info.meta.stream_cache_tokens if shape is not None else None
        # The server only streams: its windows have the streaming geometry.
        return cls(engine_factory, info.aligner(), config.window or info.stream_window, info.name, shape, tokens,
                   info.case_margin)


def _stream_shape(config: ServerConfig, info) -> tuple[int, int, int] | None:
    """The streaming graph's cache shape when this server runs with cached left context
    (the registry decides: :func:`engines.registry.stream_shape`)."""
    from engines.registry import StreamModeError, stream_shape

    try:
        return stream_shape(config.engine, info.path, config.stream_cache, meta=info.meta)
    except StreamModeError as e:
        raise ModelError(str(e)) from e


class StreamServer:
    """A running server; create it with :func:`serve`.

    Attributes:
        config: the :class:`ServerConfig`.
        runtime: the :class:`ServerRuntime` it serves with.
        metrics: its Prometheus metrics.
        sessions: the open sessions (for shutdown and the session limit only;
            each session's state lives in its handler).
    """

    def __init__(self, config: ServerConfig, runtime: ServerRuntime | None = None) -> None:
        """``runtime``: the engine, aligner and the rest (None: ``config``'s model folder,
        :meth:`ServerRuntime.from_model`)."""
        self.config = config
        if runtime is None:
            runtime = ServerRuntime.from_model(config)
        self.runtime = runtime
        normalizer = runtime.normalizer
        self.metrics = ServerMetrics(config.worker, config.workers)
        for reason in REJECT_REASONS:
            self.metrics.rejected.labels(reason=reason)
        self.model_name = runtime.model_name
        self.window = runtime.window or config.window or WindowConfig()
        self.aligner = runtime.aligner
        self.aligner.set_word_cache_size(config.word_cache_words)
        warmup = self._warmup_ids(runtime.aligner, self.window)
        self.batcher = Batcher(
            runtime.engine_factory,
            pad_id=runtime.aligner.pad_id,
            config=config.batching,
            warmup_ids=warmup,
            # the engine probe takes the form of the sessions' windows (they share its batches)
            probe=whole_call(warmup, StreamShape(*runtime.stream_shape)) if runtime.stream_shape else warmup,
            on_batch=self.metrics.observe_batch,
        )
        self.metrics.queue_depth.set_function(lambda: self.batcher.queue_depth)
        self.metrics.engine_stalled.set_function(lambda: float(self.batcher.engine_stalled))
        self.metrics.backlog.set_function(lambda: sum(s.backlog for s in self.sessions))
        self._context = SessionContext(
            aligner=runtime.aligner,
            window=self.window,
            batcher=self.batcher,
            metrics=self.metrics,
            limits=replace(config.limits, max_message_bytes=config.max_message_bytes),  # ready announces it
            defaults=config.session_defaults,
            model_name=runtime.model_name,
            max_backlog_words=config.max_backlog_words,
            max_outbox_messages=config.max_outbox_messages,
            send_timeout_s=config.send_timeout_s,
            idle_timeout_s=config.idle_timeout_s,
            max_frames_per_s=config.max_frames_per_s,
            close_timeout_s=config.close_timeout_s,
            stream_shape=runtime.stream_shape,
            stream_cache_tokens=config.stream_cache_tokens or runtime.stream_cache_tokens,
            written=WrittenForms(Lexicon(config.lexicon), normalizer),
            case_margin=runtime.case_margin,
            partial_mark_threshold=config.partial_mark_threshold,
        )
        # The ITN grammars load with the engine (_load), before the server is ready.
        self._load_itn = normalizer is None and (
            config.itn_grammars == ItnGrammars.ON or (config.itn_grammars == ItnGrammars.AUTO and itn_available())
        )
        if config.session_defaults.itn and normalizer is None and not self._load_itn:
            raise ValueError(f"itn by default: {ITN_UNAVAILABLE}")
        # The texts of itn sessions are written on these threads (Session's writer), off the event loop.
        self._written_executor: concurrent.futures.ThreadPoolExecutor | None = None
        if normalizer is not None or self._load_itn:
            self._written_executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="streampunct-written")
            self._context = replace(self._context, written_executor=self._written_executor)
        self.sessions: set[Session] = set()
        self._ws: Server | None = None
        self._port = config.port
        self._loader: asyncio.Task[None] | None = None
        self._load_error_raised = False  # wait_ready raised the load's error to a caller
        self._started = time.monotonic()
        self._closing = False
        self._shutdown_task: asyncio.Task[None] | None = None
        self._drain_deadline: asyncio.Timeout | None = None  # the drain's, while it waits
        self._hurried_at: float | None = None  # hurry()'s first call: no more waiting for sessions
        self._tcp_connections: set[GuardedConnection] = set()  # every TCP connection, handshake or not
        self._policy: RequestPolicy | None = None  # set once listening (the Host rule needs the bound addresses)
        self._trusted_proxies = frozenset(a for a in map(canonical_ip, config.trusted_proxies) if a)
        self._sessions_gone: asyncio.Event | None = None  # set while no session is open
        self._itn_processes: ProcessNormalizer | None = None

    @staticmethod
    def _warmup_ids(aligner: Aligner, window: WindowConfig) -> np.ndarray:
        word = aligner.word_ids("hello")
        content = (list(word) * (window.size // len(word) + 1))[: window.size]
        return np.asarray([aligner.cls_id, *content, aligner.sep_id], dtype=np.int64)

    # -- lifecycle -----------------------------------------------------------
    async def start(self) -> None:
        """Listen, and load the engine in the background (see :meth:`wait_ready`)."""
        self._sessions_gone = asyncio.Event()
        self._sessions_gone.set()
        try:
            self._ws = await ws_serve(
                self._handle,
                self.config.host,
                self.config.port,
                process_request=self._process_request,
                process_response=self._process_response,
                max_size=self.config.max_message_bytes,
                max_queue=self.config.max_queued_frames,
                # No permessage-deflate: frames are small JSON, and a compressed frame would
                # carry up to 1000x its size past the queue's bounds (one socket read held
                # 1,400 frames of 1 MB each once inflated; docs/server.md, "Bounded resources").
                compression=None,
                write_limit=WRITE_LIMIT_BYTES,
                create_connection=functools.partial(  # type: ignore[arg-type]
                    GuardedConnection,
                    max_write_buffer=max_write_buffer(WRITE_LIMIT_BYTES, self.config.max_message_bytes),
                    on_abort=lambda _: self.metrics.slow_reader_closes.inc(),
                    on_unparsed=self._unparsed,
                    headers={WORKER_HEADER: str(self.config.worker)} if self.config.workers > 1 else None,
                    control_frame_rate=self.config.max_frames_per_s, on_control_held=self._control_held,
                    on_count=self._connections_changed, handshake_timeout_s=HANDSHAKE_TIMEOUT_S,
                    on_handshake_timeout=self._handshake_timed_out, live=self._tcp_connections),
                open_timeout=HANDSHAKE_TIMEOUT_S,
                ping_interval=self.config.ping_interval_s,
                ping_timeout=None,  # see docs/server.md, "Bounded resources": keepalive
                close_timeout=self.config.close_timeout_s,
                logger=websockets_logger,
                # serve --workers: every worker listens on the port (the kernel spreads the connections)
                reuse_port=self.config.workers > 1 or None,
            )
        except OSError as e:
            raise InputError(f"cannot listen on {self.config.host}:{self.config.port}: {e.strerror or e}") from e
        self._port = self._ws.sockets[0].getsockname()[1]
        self._policy = RequestPolicy(
            HostPolicy(self.config.host, frozenset(str(s.getsockname()[0]) for s in self._ws.sockets),
                       frozenset(h for h in map(canonical_host, self.config.allow_hosts) if h)),
            frozenset(o for o in map(canonical_origin, self.config.allow_origins) if o),
            self.config.auth_token,
        )
        logger.info("event loop: %s; frames' JSON: %s; auth token %s; at most %d sessions, "
                    "%d bytes a frame; drain: %s", loop_name(asyncio.get_running_loop()), codec.name(),
                    "required" if self.config.auth_token is not None else "off", self.config.max_sessions,
                    self.config.max_message_bytes, self.config.drain)
        self._loader = asyncio.create_task(self._load(), name="streampunct-engine-loader")

    async def _load(self) -> None:
        t0 = time.perf_counter()
        if self._load_itn:
            normalizer: Normalizer
            if self.config.itn_workers > 0:
                normalizer = ProcessNormalizer(self.config.itn_cache, workers=self.config.itn_workers)
                self._itn_processes = normalizer
                await asyncio.to_thread(normalizer.start)
            else:
                normalizer = await asyncio.to_thread(load_normalizer, self.config.itn_cache)
            self._context = replace(self._context, written=replace(self._context.written, normalizer=normalizer))
            logger.info("ITN grammars loaded in %.2fs (%s)", time.perf_counter() - t0,
                        f"{self.config.itn_workers} worker processes" if self.config.itn_workers
                        else "in the server process")
        try:
            await self.batcher.start()
        except StreampunctError:
            raise
        except Exception as e:
            # Engines raise their own errors (engines.base.EngineError and kin).
            raise ModelError(f"cannot load the {self.config.engine} engine: {e}") from e
        logger.info(
            "engine %s with model %s ready in %.2fs; listening on %s",
            self.batcher.engine_name, self.model_name, time.perf_counter() - t0, self.url,
        )

    async def wait_ready(self) -> None:
        """Wait until the engine is loaded and warmed up; raises what loading raised."""
        assert self._loader is not None, "start() first"
        try:
            await asyncio.shield(self._loader)
        except asyncio.CancelledError:
            raise
        except BaseException:
            self._load_error_raised = True  # the caller reports it (the CLI: its one error line)
            raise

    @property
    def ready(self) -> bool:
        return self.batcher.ready and not self._closing

    @property
    def port(self) -> int:
        """The bound port (the real one when the config asked for port 0)."""
        assert self._ws is not None, "start() first"
        return self._port

    @property
    def url(self) -> str:
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        return f"ws://{host}:{self.port}/v1/stream"

    async def shutdown(self) -> None:
        """Graceful stop: refuse new connections; finalize every pending word and close with 1001,
        or with ``drain="resume"`` close with 1012 at once (clients resume elsewhere). One shutdown
        runs, whoever asked: a caller that is cancelled (a timeout around it) leaves it running,
        and every call returns when it is done."""
        assert self._ws is not None and self._sessions_gone is not None, "start() first"
        self._closing = True  # at once: /healthz and handshakes answer 503 from here on
        if self._shutdown_task is None:
            self._shutdown_task = asyncio.get_running_loop().create_task(self._shutdown(), name="streampunct-shutdown")
        await asyncio.shield(self._shutdown_task)

    def hurry(self) -> None:
        """Cut a shutdown short (a second stop signal): the sessions still draining are closed now
        as at the shutdown timeout (1001, the drain-cut-short reason; a session whose words were all
        final and sent, the plain one), and the engine is not
        waited for (:meth:`_shutdown`)."""
        if self._hurried_at is None:
            self._hurried_at = time.monotonic()
        if self._drain_deadline is not None:
            with contextlib.suppress(RuntimeError):  # it has just expired: the closes have begun
                self._drain_deadline.reschedule(asyncio.get_running_loop().time())

    async def _shutdown(self) -> None:
        assert self._ws is not None and self._sessions_gone is not None
        handoff = self.config.drain == DrainMode.RESUME
        stopping = time.monotonic()
        logger.info("shutting down: %s %d sessions", "handing off" if handoff else "finalizing", len(self.sessions))
        for session in list(self.sessions):
            session.shutdown(handoff=handoff)
        try:
            async with asyncio.timeout(0 if self._hurried_at is not None else self.config.shutdown_timeout_s) as deadline:
                self._drain_deadline = deadline
                # The listener stays open until the sessions are gone, so that handshakes meanwhile
                # get 503 (_process_request) rather than a refused connection; then it closes.
                await self._sessions_gone.wait()
                self._close_listener()
                await self._ws.wait_closed()
        except TimeoutError:
            self._close_listener()
            if self.sessions:
                logger.warning("%d sessions still open after %.1fs; closing them", len(self.sessions),
                               time.monotonic() - stopping if self._hurried_at is not None
                               else self.config.shutdown_timeout_s)
            drained = {s.connection for s in self.sessions if s.drained}  # all final, all sent: nothing cut
            await asyncio.gather(*(  # the reason tells a drain cut short from a complete one
                close_within(c, CloseCode.GOING_AWAY,
                             SHUTDOWN_REASON if c in drained else DRAIN_CUT_SHORT_REASON,
                             self.config.close_timeout_s)
                for c in list(self._ws.connections)
            ))
            await self._ws.wait_closed()
        finally:
            self._drain_deadline = None  # over: hurry() has nothing left to reschedule
        if self._loader is not None and not self._loader.done():
            self._loader.cancel()
        elif (self._loader is not None and not self._loader.cancelled() and self._loader.exception() is not None
              and not self._load_error_raised):
            # a load that failed once the stop had come (run_until_signalled no longer waits on
            # it): the stop ends the server; its error is one line, not asyncio's traceback of a
            # task exception never retrieved
            logger.warning("the engine failed to load while the server stopped: %s", self._loader.exception())
        # An engine still loading, warming up or running a call holds its thread, which nothing
        # can stop (closing it waits behind that): wait for it within the shutdown's time (at
        # least ENGINE_CLOSE_MIN_S), no more.
        until = max(time.monotonic() + ENGINE_CLOSE_MIN_S, stopping + self.config.shutdown_timeout_s)
        closing = asyncio.ensure_future(self.batcher.close())
        waiting = time.monotonic()

        def deadline() -> float:  # a second signal shortens it, to ENGINE_CLOSE_MIN_S of this wait at least
            if self._hurried_at is None:
                return until
            return min(until, max(self._hurried_at, waiting) + ENGINE_CLOSE_MIN_S)

        while time.monotonic() < deadline():
            if not closing.done():
                await asyncio.wait({closing}, timeout=0.05)
            elif self.batcher.engine_busy():
                await asyncio.sleep(0.05)
            else:
                break
        if not closing.done() or self.batcher.engine_busy():
            _engine_abandoned.set()
            logger.warning("the engine is still busy (loading, warming up or running a call) %.1fs after the "
                           "shutdown began: not waiting for it", time.monotonic() - stopping)
        if self._written_executor is not None:
            self._written_executor.shutdown(wait=False, cancel_futures=True)
        if self._itn_processes is not None:
            await asyncio.to_thread(self._itn_processes.close)  # waits for the processes to exit
        logger.info("server closed, %.1fs after the shutdown began", time.monotonic() - stopping)

    def _close_listener(self) -> None:
        """Stop accepting connections and close the server; connections that have not sent a
        request yet (a browser's spare connection, a balancer's TCP check) are cut at once, not
        left to the handshake timeout (their requests would get 503 now anyway)."""
        assert self._ws is not None
        self._ws.server.close()  # no new connections from here on
        for connection in list(self._tcp_connections):
            if connection.protocol.state is State.CONNECTING and connection.request is None:
                connection.transport.abort()
        self._ws.close(close_connections=False)

    async def __aenter__(self) -> StreamServer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    # -- HTTP side of the handshake ------------------------------------------
    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        assert self._policy is not None
        path, _, query = request.path.partition("?")
        stream = True if path in STREAM_PATHS else False if path in HTTP_PATHS else None
        refusal = self._policy.check(request.method, path, query, request.headers, stream=stream,
                                     reached=_local_addresses(connection))
        if refusal is not None:
            response = self._refuse(connection, request, refusal)
        elif stream is None:
            # the endpoints, not the request's path: a response echoes nothing a client sent
            response = connection.respond(http.HTTPStatus.NOT_FOUND, NOT_FOUND_BODY)
        elif path == "/healthz":
            response = self._healthz(connection)
        elif path == "/captions":
            page, policy = _captions_page()
            response = connection.respond(http.HTTPStatus.OK, page)
            _set_content_type(response.headers, "text/html; charset=utf-8")
            # the page's own inline script and style, and WebSockets, nothing else; no framing;
            # its URL may hold ?token=, which no link it follows may send on as the referrer
            response.headers["Content-Security-Policy"] = policy
            response.headers["X-Frame-Options"] = "DENY"
            response.headers["Referrer-Policy"] = "no-referrer"
        elif path == "/metrics":
            response = connection.respond(http.HTTPStatus.OK, self.metrics.render().decode())
            _set_content_type(response.headers, self.metrics.content_type)
        elif self._closing or not self.batcher.ready:
            # While shutting down the listener stays open until the sessions are gone (shutdown()),
            # so that new handshakes get this 503 rather than a refused connection.
            response = self._unavailable(connection, request, "unavailable", "not serving (starting or stopping)")
        elif self.batcher.engine_failing:  # /healthz says "failing": its windows would fail
            response = self._unavailable(connection, request, "unavailable", "not serving (the engine is failing)")
        elif self.batcher.engine_stalled:  # /healthz says "stalled": its windows would wait behind a hung call
            response = self._unavailable(connection, request, "unavailable", "not serving (the engine is stalled)")
        elif self._at_session_limit():
            response = self._unavailable(
                connection, request, "sessions", f"session limit reached ({self.config.max_sessions}"
                + (f" on this worker of {self.config.workers}" if self.config.workers > 1 else "") + ")")
        else:
            return None  # the WebSocket handshake goes on
        if request.method == "HEAD":
            response.body = b""  # Content-Length stays that of the GET
        return response

    def _unavailable(self, connection: ServerConnection, request: Request, reason: str, message: str) -> Response:
        """A stream refused for now (503: starting, stopping, failing, at the session limit): its
        metric, one log line, and the response."""
        self.metrics.rejected.labels(reason=reason).inc()
        logger.info("refused %s %s from %s: %s (503)", _ascii(request.method), _ascii(request.path.partition("?")[0]),
                    self._peer(connection, request), message)
        return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, message + "\n")

    def _refuse(self, connection: ServerConnection, request: Request, refusal: Refusal) -> Response:
        """The response, metric and one log line of a refused request (no traceback: it is the client's doing)."""
        self.metrics.rejected.labels(reason=refusal.reason).inc()
        logger.info("refused %s %s from %s: %s (%d)", _ascii(request.method), _ascii(request.path.partition("?")[0]),
                    self._peer(connection, request), refusal.message, refusal.status)
        response = connection.respond(refusal.status, refusal.message + "\n")
        if refusal.allow is not None:
            response.headers["Allow"] = refusal.allow
        if refusal.status == http.HTTPStatus.UNAUTHORIZED:
            response.headers["WWW-Authenticate"] = "Bearer"
        return response

    def _process_response(self, connection: ServerConnection, request: Request, response: Response) -> None:
        """Counts and logs, in one line, the handshakes websockets itself refused (bad ``Upgrade``,
        ``Sec-WebSocket-Key`` or version, ...): those ``_process_request`` let through. With
        ``serve --workers``, every answer (the 101 of a stream too) names its worker in a header;
        every HTTP answer but the 101 carries ``X-Content-Type-Options: nosniff``."""
        if self.config.workers > 1 and WORKER_HEADER not in response.headers:
            response.headers[WORKER_HEADER] = str(self.config.worker)
        if response.status_code == http.HTTPStatus.SWITCHING_PROTOCOLS:
            return
        response.headers["X-Content-Type-Options"] = "nosniff"
        error = connection.protocol.handshake_exc
        if error is not None:
            self.metrics.rejected.labels(reason="malformed").inc()
            logger.info("refused %s %s from %s: %s (%d)", _ascii(request.method),
                        _ascii(request.path.partition("?")[0]), self._peer(connection, request),
                        _ascii(redact_tokens(str(error)), 200), response.status_code)

    def _handshake_timed_out(self, connection: ServerConnection) -> None:
        """A connection that sent no whole request within the handshake timeout: cut, counted
        (``reason="timeout"``) and logged at DEBUG (idle sockets may come by the thousand)."""
        self.metrics.rejected.labels(reason="timeout").inc()
        logger.debug("dropped a connection from %s: no handshake in %g s", self._peer(connection),
                     HANDSHAKE_TIMEOUT_S)

    def _control_held(self, seconds: float) -> None:
        """A connection held its socket ``seconds`` for its pings and pongs (``--max-frames-per-s``)."""
        self.metrics.input_throttled.inc()
        self.metrics.input_wait.labels(reason="throttled").inc(seconds)

    def _connections_changed(self, delta: int) -> None:
        self.metrics.connections.inc(delta)
        if delta < 0:  # what a connection held (a handshake's buffers) is given back, engine or not
            self.batcher.note_freed()

    def _unparsed(self, connection: ServerConnection, error: Exception) -> None:
        """Counts and logs a request websockets refused while parsing it (414, 431, or closed
        without an answer: a body, bytes that are not ASCII), which ``_process_request`` never saw."""
        self.metrics.rejected.labels(reason="malformed").inc()
        # websockets' parser quotes the line or header it refused, which may hold a token
        cause = f" ({error.__cause__})" if error.__cause__ is not None else ""
        logger.info("refused a request from %s: %s%s", self._peer(connection), _ascii(redact_tokens(str(error))),
                    _ascii(redact_tokens(cause)))

    def _peer(self, connection: ServerConnection, request: Request | None = None) -> str:
        """The peer for a log line; behind a trusted proxy (``trusted_proxies``), the client its
        ``X-Forwarded-For`` names, then ``via`` the proxy."""
        peer = _peer(connection)
        if request is None or not self._trusted_proxies:
            return peer
        address = connection.transport.get_extra_info("peername") if connection.transport else None
        client = forwarded_client(str(address[0]), request.headers.get_all("X-Forwarded-For"),
                                  self._trusted_proxies) if isinstance(address, tuple) and address else None
        return f"{client} via {peer}" if client is not None else peer

    def _healthz(self, connection: ServerConnection) -> Response:
        loader_failed = self._loader is not None and self._loader.done() and (
            self._loader.cancelled() or self._loader.exception() is not None
        )
        if not self.ready:
            status = "failed" if loader_failed else "stopping" if self._closing else "loading"
        else:
            status = "stalled" if self.batcher.engine_stalled else "failing" if self.batcher.engine_failing else "ok"
        stalled_s = self.batcher.stalled_s()
        body = {
            "status": status,
            "engine": self.batcher.engine_name if self.batcher.ready else self.config.engine,
            "model": self.model_name,
            "engine_workers": self.batcher.engine_workers,
            "stream_cache": self._context.stream_shape is not None,
            # how a batch's windows run once the engine is loaded: "padded" or "alone"
            "batch_rows": (("alone" if self.batcher.rows_alone else "padded") if self.batcher.ready
                           else self.config.batching.batch_rows),
            "uptime_s": round(time.monotonic() - self._started, 3),
            "sessions": len(self.sessions),
            # seconds the oldest stalled engine call has run (status "stalled"), else null
            "stalled_s": None if stalled_s is None else round(stalled_s, 3),
            "protocol": PROTOCOL_VERSION,
            # which process answered (serve --workers: each worker answers for itself)
            "worker": self.config.worker,
            "workers": self.config.workers,
            "pid": os.getpid(),
        }
        code = http.HTTPStatus.OK if status == "ok" else http.HTTPStatus.SERVICE_UNAVAILABLE
        response = connection.respond(code, json.dumps(body) + "\n")
        _set_content_type(response.headers, "application/json")
        return response

    # -- WebSocket side ------------------------------------------------------
    def _at_session_limit(self) -> bool:
        """Every session slot is held. A session whose connection is closing or closed holds
        none: its handler is still finishing, but a client that closed one at the limit may
        open another at once (counted only at the limit, so a handshake costs no scan)."""
        if len(self.sessions) < self.config.max_sessions:
            return False
        return sum(1 for s in self.sessions if s.connection_open) >= self.config.max_sessions

    async def _handle(self, connection: ServerConnection) -> None:
        if self._at_session_limit():
            # Lost a race with other handshakes that passed process_request together.
            self.metrics.rejected.labels(reason="sessions").inc()
            logger.info("refused a stream from %s: session limit reached (1013)", self._peer(connection, connection.request))
            await connection.close(CloseCode.TRY_AGAIN_LATER, "session limit reached")
            return
        session = Session(connection, self._context, uuid.uuid4().hex[:12])
        if isinstance(connection, GuardedConnection):
            connection.session_id = session.id  # its own log lines (a pong flood's abort) name the session
        self.sessions.add(session)
        self._sessions_gone.clear()
        self.metrics.sessions.inc()
        self.metrics.sessions_total.inc()
        opened = time.monotonic()
        logger.info("session=%s opened from %s", session.id, self._peer(connection, connection.request),
                    extra={"session": session.id})
        if self._closing:
            session.shutdown(handoff=self.config.drain == DrainMode.RESUME)
        try:
            await session.run()
        except ConnectionClosed:
            pass
        except Exception:
            # The per-connection boundary: one broken session must not take the server down.
            logger.exception("session=%s failed", session.id, extra={"session": session.id})
            await close_within(connection, CloseCode.INTERNAL_ERROR, "internal error", self.config.close_timeout_s)
        finally:
            self.sessions.discard(session)
            if not self.sessions:
                self._sessions_gone.set()
            self.metrics.sessions.dec()
            logger.info("session=%s closed: code %s, %.1f s, %d words, %d finals sent, %d errors sent", session.id,
                        session_close_code(connection), time.monotonic() - opened, session.protocol.n_words,
                        session.finals_sent, session.errors_sent, extra={"session": session.id})


#: How websockets fails a connection on a client's bytes (its frame parser, or its decoding of a
#: text message): the error it keeps, the close code it sends, what the log line says. It reads
#: nothing more then, the client's answer to that close included.
_CLIENT_FAILURES: tuple[tuple[type[Exception], int, str], ...] = (
    (PayloadTooBig, CloseCode.MESSAGE_TOO_BIG, "message too big"),
    (TooManyFragments, CloseCode.MESSAGE_TOO_BIG, "too many fragments"),
    (UnicodeDecodeError, CloseCode.INVALID_DATA, "invalid UTF-8"),
    (ProtocolError, CloseCode.PROTOCOL_ERROR, "protocol error"),
)


def session_close_code(connection) -> str:
    """The close code a session ended with, for its log line: the server's own when it closed
    first, also when the client never answered (websockets' ``close_code`` is then 1006: a
    client that stops reading, closed with 1013, would be logged as 1006); else the client's.
    A close that websockets sent when it failed the connection on the client's bytes (1009,
    1007, 1002) says why instead: websockets reads nothing after it, so whether the client
    answered is not known."""
    protocol = connection.protocol
    sent, received = protocol.close_sent, protocol.close_rcvd
    if sent is not None and not protocol.close_rcvd_then_sent:
        if received is not None:
            return str(sent.code)
        # the parser's error (a frame), or the connection's (a text message's UTF-8)
        for error in (getattr(protocol, "parser_exc", None), getattr(connection, "connection_exc", None)):
            for kind, code, what in _CLIENT_FAILURES:
                if isinstance(error, kind) and sent.code == code:  # the close this failure sent
                    return f"{sent.code} ({what})"
        return f"{sent.code} (the client did not answer)"
    return str(connection.close_code)


@functools.cache
def _captions_page() -> tuple[str, str]:
    """The self-contained live-caption page (package data ``streampunct/server/static/captions.html``)
    and its Content-Security-Policy: its inline ``<script>`` and ``<style>`` by their SHA-256,
    WebSocket connections (to this server, or to another the user confirms), nothing else."""
    page = importlib.resources.files("streampunct.server").joinpath("static/captions.html").read_text(encoding="utf-8")

    def hashes(tag: str) -> str:
        bodies = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.S)
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in bodies)

    policy = (f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; "
              "connect-src ws: wss:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return page, policy


def _local_addresses(connection: ServerConnection) -> tuple[str, ...]:
    """The address the client reached (for the Host rule: the server's own address)."""
    sockname = connection.transport.get_extra_info("sockname") if connection.transport else None
    return (str(sockname[0]),) if isinstance(sockname, tuple) and sockname else ()


def _peer(connection: ServerConnection) -> str:
    peer = connection.transport.get_extra_info("peername") if connection.transport else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"[{peer[0]}]:{peer[1]}" if ":" in str(peer[0]) else f"{peer[0]}:{peer[1]}"
    return "?"


def _ascii(value: str, limit: int = 80) -> str:
    """A client's method or path for a log line: printable ASCII, cut."""
    shown = value.encode("ascii", "backslashreplace").decode()
    shown = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in shown)
    return shown if len(shown) <= limit else shown[:limit] + "..."


def _set_content_type(headers: Headers, value: str) -> None:
    del headers["Content-Type"]
    headers["Content-Type"] = value


#: Seconds a shutdown waits for the engine at least, past ``--shutdown-timeout-s`` (closing an
#: idle engine takes milliseconds; a call that runs may take a batch's time).
ENGINE_CLOSE_MIN_S = 2.0

_engine_abandoned = threading.Event()


def engine_abandoned() -> bool:
    """A shutdown in this process stopped waiting for an engine's thread (:meth:`StreamServer.shutdown`):
    the process must end without joining it (:func:`exit_now`), or it would wait for that load."""
    return _engine_abandoned.is_set()


def exit_now(code: int) -> typing.NoReturn:
    """End this process at once with ``code``, its logs and output flushed, without joining the
    threads an engine still runs in (:func:`engine_abandoned`)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


async def serve(config: ServerConfig, runtime: ServerRuntime | None = None) -> StreamServer:
    """Start a server (listening at once; the engine loads in the background).

    Use ``await server.wait_ready()`` before expecting handshakes to succeed,
    and ``await server.shutdown()`` (or ``async with``) to stop it.
    ``runtime``: an engine and the rest to serve with (:class:`ServerRuntime`; None:
    ``config``'s model folder).
    """
    server = StreamServer(config, runtime)
    await server.start()
    return server


async def run_until_signalled(
    config: ServerConfig,
    runtime: ServerRuntime | None = None,
    *,
    on_ready: Callable[[StreamServer], None] | None = None,
    stop: asyncio.Event | None = None,
    ignore_late_signals: bool = False,
    repeated: Callable[[int], bool] | None = None,
) -> signal.Signals | None:
    """Serve until SIGINT, SIGTERM or SIGHUP, then shut down gracefully (the CLI's main loop);
    the signal that stopped it (None: ``stop`` was set).

    SIGHUP (a closed terminal, a dropped ssh session) drains as SIGTERM does, unless it is
    ignored (``nohup``), and the CLI then exits with 129.
    ``on_ready`` is called once the engine is warm; ``runtime`` as for :func:`serve`.
    ``stop``: an event that, set, shuts down as the signals do (they set it; a worker of
    ``serve --workers`` sets it when its supervisor is gone). A second signal cuts the drain
    short (:meth:`StreamServer.hurry`), unless ``repeated``, given how many stop signals came,
    says they are one stop (a worker of ``serve --workers`` that a service manager signalled
    itself, as its supervisor did). With ``ignore_late_signals`` (a process that exits
    next: :func:`run_server`), once a signal stopped it the stop signals are ignored from its
    return on, so that a late one does not kill the exit; else they are back at their defaults.
    """
    loop = asyncio.get_running_loop()
    stop = stop if stop is not None else asyncio.Event()
    received: list[signal.Signals] = []

    serving: list[StreamServer] = []

    def again() -> bool:
        """Whether the signals received ask twice (a second one: stop waiting for the drain)."""
        return len(received) > 1 and (repeated is None or repeated(len(received)))

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig)
        if again() and serving:
            logger.warning("%s received again: closing the sessions still draining now", sig.name)
            serving[0].hurry()
        elif len(received) > 1:
            logger.info("%s received again, the same stop as the first (sent to every process of the "
                        "service): draining on", sig.name)
        stop.set()

    hangup = getattr(signal, "SIGHUP", None)
    handled = (*STOP_SIGNALS, *([hangup] if hangup is not None and signal.getsignal(hangup) is not signal.SIG_IGN
                                else []))
    for sig in handled:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        server = await serve(config, runtime)
    except BaseException:
        for sig in handled:
            loop.remove_signal_handler(sig)
        raise
    serving.append(server)
    if again():  # signalled twice while it started
        server.hurry()
    try:
        stopped = asyncio.create_task(stop.wait())
        loading = asyncio.ensure_future(server.wait_ready())
        done, _ = await asyncio.wait({stopped, loading}, return_when=asyncio.FIRST_COMPLETED)
        if loading in done:
            loading.result()  # raises if the engine failed to load
            if on_ready is not None:
                on_ready(server)
            await stopped
        else:
            loading.cancel()
        logger.info("%s; shutting down", f"{received[0].name} received" if received else "told to stop")
    finally:
        await server.shutdown()
        for sig in handled:
            loop.remove_signal_handler(sig)  # (back to the default action)
            if received and ignore_late_signals:  # a late one must not kill the rest of the exit
                signal.signal(sig, signal.SIG_IGN)
    return received[0] if received else None


def run_server(
    config: ServerConfig,
    runtime: ServerRuntime | None = None,
    *,
    on_ready: Callable[[StreamServer], None] | None = None,
    stop: asyncio.Event | None = None,
    repeated: Callable[[int], bool] | None = None,
) -> signal.Signals | None:
    """:func:`run_until_signalled` on a new event loop of ``config.event_loop`` (uvloop or
    asyncio's; :mod:`streampunct.server.event_loop`): the one place the server's loop is made.
    The signal that stopped it, as that returns; after one, this process ignores the stop
    signals (it is about to exit: ``serve`` and its workers)."""
    _engine_abandoned.clear()  # this run's
    with asyncio.Runner(loop_factory=loop_factory(config.event_loop)) as runner:
        return runner.run(run_until_signalled(config, runtime, on_ready=on_ready, stop=stop,
                                              ignore_late_signals=True, repeated=repeated))
