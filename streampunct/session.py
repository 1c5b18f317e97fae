"""One streaming session: the glue between a WebSocket and a :class:`StreamState`.

The session only decodes, feeds, awaits and encodes; every decision about
which words are final lives in the pure :mod:`streampunct.stream_state`. Two
tasks per connection:

* the *reader* decodes client frames and feeds the state (config, words,
  flush, end), answering protocol errors on the spot;
* the *driver* asks the state for the next window, awaits its logits from the
  shared :class:`~streampunct.batcher.Batcher`, and sends the finals (and
  partials) that come out, then ``flushed`` for each flush they complete.

The driver sleeps on an event that the reader sets when input arrives and a
``loop.call_at`` timer sets when the next word's ``max_delay_ms`` runs out:
no polling. When the connection goes, both tasks are cancelled, the timer is
cancelled and a request still waiting in the batcher's queue is removed, so a
session leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from dataclasses import dataclass

import websockets
from websockets.asyncio.server import ServerConnection
from websockets.frames import CloseCode

from streampunct.alignment import Aligner
from streampunct.batcher import Batcher, EngineError, OverloadedError
from streampunct.labels import ID_TO_MARK, PERIOD, QUESTION
from streampunct.protocol import (
    ConfigApplied,
    ConfigRequest,
    Ended,
    EndRequest,
    Error,
    ErrorCode,
    Final,
    Flushed,
    FlushRequest,
    Limits,
    Partial,
    ProtocolError,
    PunctuatedWord,
    Ready,
    ServerMessage,
    SessionOptions,
    WordsMessage,
    decode,
    encode,
)
from streampunct.server_metrics import ServerMetrics
from streampunct.stream_state import Decision, StreamConfig, StreamState
from streampunct.text import normalize_words, render
from streampunct.windowing import WindowConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionContext:
    """What all sessions of one server share (read-only).

    Attributes:
        aligner: the model's tokenizer alignment.
        window: double-overlap window geometry.
        batcher: the shared engine batcher.
        metrics: the server's metrics.
        limits: per-message limits.
        defaults: session options before a client ``config``.
        model_name: reported in ``ready``.
    """

    aligner: Aligner
    window: WindowConfig
    batcher: Batcher
    metrics: ServerMetrics
    limits: Limits
    defaults: SessionOptions
    model_name: str


class _Until(enum.Enum):
    """What to do once every word up to a target has been sent as final."""

    FLUSHED = "flushed"  # send ``flushed``
    DONE = "done"  # wake whoever waits on ``Session._all_sent`` (end, shutdown)


class _SessionLog(logging.LoggerAdapter):
    def process(self, msg, kwargs):
        kwargs.setdefault("extra", {}).update(self.extra)
        return f"session={self.extra['session']} {msg}", kwargs


class Session:
    """The state and tasks of one connection; :meth:`run` is its whole life."""

    def __init__(self, connection: ServerConnection, context: SessionContext, session_id: str) -> None:
        self.id = session_id
        self._ws = connection
        self._ctx = context
        self._log = _SessionLog(logger, {"session": session_id})
        self.options = context.defaults
        self.state = self._new_state()
        self._words_seen = False
        self._sent = 0  # words whose final has been sent
        self._sentence_start = True  # the next final word opens a sentence
        self._until: deque[tuple[int, _Until]] = deque()
        self._all_sent: asyncio.Event = asyncio.Event()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._overload_reported = False

    def _new_state(self) -> StreamState:
        stream = StreamConfig(self.options.right_context, self.options.max_delay_ms)
        return StreamState(self._ctx.aligner, self._ctx.window, stream)

    def shutdown(self) -> None:
        """Ask the session to stop reading, finalize every pending word and close with 1001."""
        self._stop.set()

    # -- lifecycle -----------------------------------------------------------
    async def run(self) -> None:
        """Serve the connection until the client ends or leaves, the engine fails, or shutdown."""
        loop = asyncio.get_running_loop()
        await self._send(Ready(self.id, self._ctx.model_name, self.options))
        driver = asyncio.create_task(self._drive(), name=f"session-{self.id}-driver")
        reader = asyncio.create_task(self._read(), name=f"session-{self.id}-reader")
        stop = asyncio.create_task(self._stop.wait(), name=f"session-{self.id}-stop")
        all_sent = asyncio.create_task(self._all_sent.wait(), name=f"session-{self.id}-all-sent")
        tasks = (driver, reader, stop, all_sent)
        try:
            done, _ = await asyncio.wait({driver, reader, stop}, return_when=asyncio.FIRST_COMPLETED)
            if driver in done:
                await self._driver_failed(driver)
                return
            shutting_down = reader not in done
            if shutting_down:  # stop reading, finalize what came in
                reader.cancel()
                self._finish_all(loop.time(), end_of_stream=False)
            elif not reader.result():
                self._log.info("client left with %d of %d words final", self._sent, self.state.n_words)
                return
            done, _ = await asyncio.wait({driver, all_sent}, return_when=asyncio.FIRST_COMPLETED)
            if driver in done:
                await self._driver_failed(driver)
            elif shutting_down:
                self._log.info("shutdown: all %d words final, closing", self._sent)
                await self._ws.close(CloseCode.GOING_AWAY, "server shutting down")
            else:
                await self._send(Ended(self.state.n_words))
                self._log.info("ended after %d words", self.state.n_words)
                await self._ws.close(CloseCode.NORMAL_CLOSURE)
        except websockets.ConnectionClosed:
            self._log.info("connection closed while finishing")
        finally:
            self._cancel_timer()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _driver_failed(self, driver: asyncio.Task) -> None:
        exc = driver.exception()
        if isinstance(exc, websockets.ConnectionClosed) or exc is None:
            return
        if isinstance(exc, EngineError):
            self._log.error("engine failure: %s", exc)
            await self._send_error(ErrorCode.INTERNAL, "the punctuation engine failed; closing the stream")
            await self._ws.close(CloseCode.INTERNAL_ERROR, "engine failure")
            return
        raise exc

    def _finish_all(self, now: float, *, end_of_stream: bool) -> None:
        """Every word that has arrived must be finalized; then ``_all_sent`` is set.

        The client's ``end`` ends the stream, so its last word gets a sentence
        mark; a shutdown only flushes (the speech may go on in a new session).
        """
        if end_of_stream:
            self.state.end(now)
        else:
            self.state.flush(now)
        self._until.append((self.state.n_words, _Until.DONE))
        self._wake.set()

    # -- reader --------------------------------------------------------------
    async def _read(self) -> bool:
        """Handle client frames; True once the client sent ``end``, False when it left."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                frame = await self._ws.recv()
            except websockets.ConnectionClosed:
                return False
            try:
                message = decode(frame, self._ctx.limits)
            except ProtocolError as e:
                await self._send_error(e.code, e.message)
                continue
            now = loop.time()
            if isinstance(message, WordsMessage):
                self._words_seen = True
                words = normalize_words(w.w for w in message.words)
                if words:
                    self.state.feed(words, now)
                    self._ctx.metrics.words_in.inc(len(words))
                    self._wake.set()
            elif isinstance(message, ConfigRequest):
                await self._configure(message)
            elif isinstance(message, FlushRequest):
                self.state.flush(now)
                self._until.append((self.state.n_words, _Until.FLUSHED))
                self._wake.set()
            elif isinstance(message, EndRequest):
                self._finish_all(now, end_of_stream=True)
                return True

    async def _configure(self, request: ConfigRequest) -> None:
        if self._words_seen:
            await self._send_error(
                ErrorCode.BAD_REQUEST, "config is only allowed before the first words message"
            )
            return
        self.options = request.apply_to(self.options)
        self.state = self._new_state()
        self._log.info("config %s", self.options.to_json())
        await self._send(ConfigApplied(self.options))

    # -- driver --------------------------------------------------------------
    async def _drive(self) -> None:
        loop = asyncio.get_running_loop()
        batcher: Batcher = self._ctx.batcher
        while True:
            await self._wake.wait()
            self._wake.clear()
            self._cancel_timer()
            await self._settle()
            while (request := self.state.next_request(loop.time(), partial=self.options.partials)) is not None:
                try:
                    logits = await batcher.infer(request.input_ids)
                except OverloadedError as e:
                    self.state.abort(request)
                    await self._report_overload(str(e))
                    await batcher.wait_for_capacity()
                    continue
                except BaseException:
                    self.state.abort(request)
                    raise
                self._overload_reported = False
                decisions = self.state.apply(request, logits)
                if request.partial:
                    await self._send_partial(self.state.last_partial)
                else:
                    await self._send_final(decisions)
                    await self._settle()
            deadline = self.state.next_deadline()
            if deadline is not None:
                self._timer = loop.call_at(deadline, self._wake.set)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def _settle(self) -> None:
        """Answer every flush (and end/shutdown) whose words have all been sent."""
        while self._until and self._until[0][0] <= self._sent:
            target, what = self._until.popleft()
            if what is _Until.FLUSHED:
                await self._send(Flushed(target))
            else:
                self._all_sent.set()

    async def _report_overload(self, detail: str) -> None:
        if not self._overload_reported:
            self._overload_reported = True
            self._log.warning("overloaded: %s", detail)
            await self._send_error(
                ErrorCode.OVERLOADED,
                "the engine queue is full; your words are kept and will be finalized when it drains",
            )

    # -- output --------------------------------------------------------------
    def _rendered(self, decisions: list[Decision], sentence_start: bool) -> tuple[tuple[PunctuatedWord, ...], str]:
        words = [d.word for d in decisions]
        labels = [d.label for d in decisions]
        marked = tuple(PunctuatedWord(d.word, ID_TO_MARK[d.label]) for d in decisions)
        text = render(words, labels, capitalize=self.options.capitalize, sentence_start=sentence_start)
        return marked, text

    async def _send_final(self, decisions: list[Decision]) -> None:
        if not decisions:
            return
        loop = asyncio.get_running_loop()
        words, text = self._rendered(decisions, self._sentence_start)
        await self._send(Final(decisions[0].index, words, text))
        sent_at = loop.time()
        self._sent = decisions[-1].index + 1
        self._sentence_start = decisions[-1].label in (PERIOD, QUESTION)
        metrics = self._ctx.metrics
        metrics.words_finalized.inc(len(decisions))
        for d in decisions:
            metrics.finalize_margin.observe(max(0.0, sent_at - self.state.decidable_at(d.index)))

    async def _send_partial(self, decisions: list[Decision]) -> None:
        if not decisions:
            return
        start = decisions[0].index
        words, text = self._rendered(decisions, self._sentence_start and start == self._sent)
        await self._send(Partial(start, words, text))

    async def _send_error(self, code: ErrorCode, message: str) -> None:
        self._ctx.metrics.errors.labels(code=str(code)).inc()
        await self._send(Error(code, message))

    async def _send(self, message: ServerMessage) -> None:
        await self._ws.send(encode(message))
