"""One streaming session: the asyncio pump between a WebSocket and a :class:`SessionProtocol`.

Every protocol rule lives in the sans-I/O :mod:`streampunct.core.session_protocol`
(and the windowing core and stream cache under it); this module only moves
frames, engine calls and time. Three tasks per connection:

* the *reader* hands client frames to the protocol and queues its answers;
* the *driver* asks the protocol for the next model call (the window, with
  its cache plan under cached left context), awaits its output from the
  shared :class:`~streampunct.server.batcher.Batcher`, hands it back to the protocol
  and queues the finals, partials, ``flushed`` and ``end`` that come out;
* the *writer* sends queued messages in the order the protocol produced them
  (so a ``flushed`` can never overtake the finals it covers). With a
  ``written_executor`` in the context, the finals and partials of an ``itn``
  session come from the protocol without their text
  (:class:`~streampunct.core.session_protocol.WrittenText`): the writer writes
  each, one at a time and in order, before sending it, so that the ITN
  grammars never run on the event loop and the session's order and texts are
  what they would be without it. A text that needs no grammar search (no
  number word near its words, or the answer cached) is written in place
  (:meth:`~streampunct.core.session_protocol.WrittenText.resolve_now`); only the
  others go to that executor, so a number-free final never waits behind
  another session's search.

The driver sleeps on an event that the reader sets when input arrives and a
``loop.call_at`` timer sets when the next word's ``max_delay_ms`` runs out:
no polling. When the connection goes, the tasks and the timer are cancelled
and a request still waiting in the batcher's queue is removed, so a session
leaves nothing behind.

Bounded resources (see ``docs/server.md``, "Bounded resources"):

* *input backpressure*: the reader takes the next frame only when the
  protocol wants input (:meth:`SessionProtocol.wants_input`: the backlog of
  unfinalized words is below ``max_backlog_words``) and the outbox has room;
  meanwhile websockets' small incoming queue fills, it stops reading the
  socket, and TCP slows the sender;
* *bounded outbox*: the driver asks for the next window, and the reader for
  the next frame, only while fewer than ``max_outbox_messages`` messages
  wait to be sent; once ``PARTIALS_DROPPED_FROM`` messages wait while the
  writer is held (a send blocked: the client is not reading; or a written
  form still to come), a partial that a newer partial replaces before it was
  sent is dropped from the outbox (each partial replaces the previous one),
  so a client that reads slowly holds a few unsent partials, whatever the
  size of its hypotheses. A burst of answers to a client that reads (a
  flush's finals and the errors queued behind it) drops none;
* *frame rate*: the reader takes at most ``max_frames_per_s`` frames a second
  after a burst of as many, a frame counting once per started 256 characters
  (:mod:`streampunct.server.rate`), so a client sending frames that carry no
  words (which the backlog does not hold) or large frames of costly ones gets
  no more than its share of the event loop; and it lets the loop run other
  work between two frames;
* *slow readers*: a send that stays blocked (the client does not read, so
  the socket's write buffer stays full) for ``send_timeout_s`` closes the
  connection with 1013; closing itself is bounded by ``close_timeout_s``,
  after which the TCP connection is aborted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

import websockets
from websockets.asyncio.server import ServerConnection
from websockets.frames import CloseCode

from streampunct.core.alignment import Aligner
from streampunct.core.options import SessionOptions
from streampunct.core.session_protocol import SessionProtocol, WrittenText, nothing_to_send
from streampunct.core.stream_cache import StreamCacheConfig
from streampunct.core.windowing import WindowConfig
from streampunct.core.wire import (
    IDLE_TIMEOUT_REASON,
    ConfigApplied,
    Error,
    ErrorCode,
    Final,
    Limits,
    Partial,
    Resumed,
    ServerMessage,
    encode_frame,
)
from streampunct.labels import PARTIAL_MARK_THRESHOLD
from streampunct.server.batcher import Batcher, EngineFailedError, OverloadedError
from streampunct.server.metrics import ServerMetrics
from streampunct.server.rate import FrameRate, frame_cost
from streampunct.text.written_form import WouldWait, WrittenForms

logger = logging.getLogger(__name__)

#: The close reason of a session whose words were all final and sent at a shutdown (1001).
SHUTDOWN_REASON = "server shutting down"
#: Grammar searches one text awaits before it is written on the executor instead.
_MAX_FETCHES = 16
#: Messages waiting in the outbox from which a partial not sent yet is dropped for a newer one,
#: while the writer is held: the client is behind (it does not read, or finals ahead wait for their
#: written form). Below it, or with the writer free (a burst the client will read at once), every
#: partial is sent, so that each hypothesis keeps its own; at it a slow reader holds
#: a few unsent partials, each up to a hypothesis of 1000 words, not one per frame it sent.
PARTIALS_DROPPED_FROM = 8


def _loggable(config: SessionOptions) -> dict:
    """A session's options for the log: the lexicon as its size (a client's lexicon may hold
    50,000 characters, and a config may come many times before the first words)."""
    out = config.to_json()
    out["lexicon"] = f"{len(config.lexicon)} pairs"
    return out


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
        max_backlog_words: words received and not yet finalized past which
            the session stops reading (None: no limit).
        max_outbox_messages: messages waiting to be sent past which the
            session stops producing more (reading frames, asking for windows).
        send_timeout_s: a send blocked this long closes the session with 1013
            (None: wait as long as it takes, memory staying bounded).
        idle_timeout_s: a session whose client sends no frame for this long has every
            word it received finalized and is closed with 1001 (None: no timeout).
        max_frames_per_s: frames the reader takes a second after a burst of as many
            (:class:`~streampunct.server.rate.FrameRate`; None: no limit).
        close_timeout_s: longest a close handshake may take before the TCP
            connection is aborted.
        stream_shape: (layers, heads, head_dim) of the streaming graph when
            windows run with cached left context (:mod:`streampunct.core.stream_cache`);
            None: every window encodes its left context.
        stream_cache_tokens: tokens a session's cache keeps (None: the window's left context).
        written: the server's lexicon and ITN grammars (``itn`` and ``lexicon`` options).
        case_margin: the model's margin for its truecasing head's capitals
            (:func:`streampunct.labels.case_classes`; 0: the plain argmax).
        partial_mark_threshold: partials show a provisional word's mark only when the
            model's probability of it is at least this (``serve --partial-mark-threshold``;
            0: every mark).
        written_executor: where the texts of ``itn`` sessions are written (the
            ITN grammars; None: on the event loop, as the protocol decides).
    """

    aligner: Aligner
    window: WindowConfig
    batcher: Batcher
    metrics: ServerMetrics
    limits: Limits
    defaults: SessionOptions
    model_name: str
    max_backlog_words: int | None = 4096
    max_outbox_messages: int = 64
    send_timeout_s: float | None = 30.0
    idle_timeout_s: float | None = None
    max_frames_per_s: float | None = None
    close_timeout_s: float = 10.0
    stream_shape: tuple[int, int, int] | None = None
    stream_cache_tokens: int | None = None
    written: WrittenForms = WrittenForms()
    case_margin: float = 0.0
    written_executor: Executor | None = None
    partial_mark_threshold: float = PARTIAL_MARK_THRESHOLD


class SlowReaderError(Exception):
    """A send stayed blocked past the send timeout: the client does not read."""


class _WritingFailed(Exception):
    """Writing a final's or partial's text on the written executor raised (a bug)."""


async def close_within(connection: ServerConnection, code: int, reason: str, timeout: float) -> None:
    """Close handshake bounded in time: a peer that reads nothing gets its TCP connection aborted.

    (websockets' ``close()`` first waits for the write buffer to drain, with no
    time limit, so a client that stopped reading could hold it forever.)
    """
    try:
        async with asyncio.timeout(timeout):
            await connection.close(code, reason)
    except TimeoutError:
        connection.transport.abort()


class _QueuedPartial:
    """A partial in the outbox; ``superseded`` once a newer partial is queued: then not sent
    (an itn partial's text is still resolved, emptied, to keep the texts' order)."""

    __slots__ = ("item", "superseded")

    def __init__(self, item: Partial | WrittenText) -> None:
        self.item: Partial | WrittenText | None = item
        self.superseded = False

    def supersede(self) -> None:
        self.superseded = True
        if isinstance(self.item, WrittenText):
            self.item.discard()
        else:
            self.item = None  # its words go now, not when the writer reaches it


class _SessionLog(logging.LoggerAdapter):
    def process(self, msg, kwargs):
        kwargs.setdefault("extra", {}).update(self.extra)
        return f"session={self.extra['session']} {msg}", kwargs


class Session:
    """The tasks of one connection around its :class:`SessionProtocol`; :meth:`run` is its whole life."""

    def __init__(self, connection: ServerConnection, context: SessionContext, session_id: str) -> None:
        self.id = session_id
        self._ws = connection
        self._ctx = context
        self._log = _SessionLog(logger, {"session": session_id})
        self.protocol = SessionProtocol(
            aligner=context.aligner, window=context.window, defaults=context.defaults,
            limits=context.limits, session_id=session_id, model_name=context.model_name,
            max_backlog=context.max_backlog_words, written=context.written, case_margin=context.case_margin,
            defer_written=context.written_executor is not None,
            stream_cache=None if context.stream_shape is None
            else StreamCacheConfig(context.stream_shape, context.stream_cache_tokens),
            partial_mark_threshold=context.partial_mark_threshold,
        )
        # (message, decidable times of a final's words) in protocol order; None: all sent.
        # Unbounded as a queue; producers wait for room first (_wait_for_room).
        self._outbox: asyncio.Queue[tuple[ServerMessage | WrittenText, list[float]] | None] = asyncio.Queue()
        self._finish_queued = False
        self._all_sent = asyncio.Event()
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()  # a final was produced or a message sent
        self._stop = asyncio.Event()
        self._handoff = False
        self._timer: asyncio.TimerHandle | None = None
        #: Largest backlog (words not yet finalized) and outbox seen; for tests and logs.
        self.peak_backlog = 0
        self._frame_rate = FrameRate(context.max_frames_per_s) if context.max_frames_per_s else None
        self.peak_outbox = 0
        self._queued_partial: _QueuedPartial | None = None  # the newest partial not sent yet
        # the writer waits on the client (a send blocked: it is not reading) or on a written form
        self._writer_held = False
        self._configs_logged = 0
        self.errors_sent = 0
        self.finals_sent = 0  # words whose final was sent (a drain cut short leaves some queued)
        self._idle_closed = False  # closed for --idle-timeout-s

    @property
    def backlog(self) -> int:
        """Words received and not yet finalized."""
        return self.protocol.backlog

    @property
    def connection(self) -> ServerConnection:
        """The session's WebSocket connection."""
        return self._ws

    @property
    def drained(self) -> bool:
        """Every word received is final and every message is sent: a close now cuts nothing."""
        return (self.protocol.n_final == self.protocol.n_words and self._outbox.empty()
                and not self._writer_held)

    @property
    def connection_open(self) -> bool:
        """The connection is not closing or closed (such a session's slot is free)."""
        return self._ws.state is websockets.protocol.State.OPEN

    def shutdown(self, *, handoff: bool = False) -> None:
        """Ask the session to stop reading and close: by default after finalizing every
        pending word, with 1001; with ``handoff`` at once (messages already produced are
        still sent), with 1012, leaving the undecided words to the client, which
        resumes the stream elsewhere (``serve --drain resume``)."""
        self._handoff = handoff
        self._stop.set()

    # -- lifecycle -----------------------------------------------------------
    async def run(self) -> None:
        """Serve the connection until the client ends or leaves, the engine fails, or shutdown."""
        loop = asyncio.get_running_loop()
        self._emit([self.protocol.ready()])
        writer = asyncio.create_task(self._write(), name=f"session-{self.id}-writer")
        driver = asyncio.create_task(self._drive(), name=f"session-{self.id}-driver")
        reader = asyncio.create_task(self._read(), name=f"session-{self.id}-reader")
        stop = asyncio.create_task(self._stop.wait(), name=f"session-{self.id}-stop")
        all_sent = asyncio.create_task(self._all_sent.wait(), name=f"session-{self.id}-all-sent")
        tasks = [writer, driver, reader, stop, all_sent]

        watching: list[asyncio.Task] = []

        def watch_connection() -> asyncio.Task:
            """Once the reader is done: read and drop the client's frames, so that a closed
            connection ends the session (and the client's close frame is seen at once).
            One such task a session (the later calls return it)."""
            if not watching:
                watching.append(asyncio.create_task(self._discard_frames(), name=f"session-{self.id}-closed"))
                tasks.append(watching[0])
            return watching[0]

        try:
            done, _ = await asyncio.wait({writer, driver, reader, stop}, return_when=asyncio.FIRST_COMPLETED)
            if writer in done:
                await self._writer_stopped(writer)
                return
            if driver in done:
                await self._task_failed(driver, writer)
                return
            if reader in done and reader.exception() is not None:
                await self._task_failed(reader, writer)
                return
            if stop in done and self._handoff:  # whether or not the client has sent end meanwhile
                await self._hand_off(reader, driver, writer, watch_connection)
                return
            if reader not in done:  # shutdown: stop reading, finalize what came in
                reader.cancel()
                await asyncio.wait({reader})
                self._finish_input(loop.time())
            elif not reader.result():
                sent = self._ws.protocol.close_sent  # the close frame this side sent, if any
                if sent is not None and sent.code == CloseCode.MESSAGE_TOO_BIG:  # websockets' frame limit
                    self._log.info("closed 1009 (%s) with %d of %d words final", sent.reason,
                                   self.protocol.n_final, self.protocol.n_words)
                else:
                    self._log.info(
                        "client left with %d of %d words final", self.protocol.n_final, self.protocol.n_words
                    )
                return
            closed = watch_connection()
            while True:  # finishing: the words received are finalized, unless a drain hands off
                waiting = {writer, driver, all_sent, closed} | (set() if stop.done() else {stop})
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if done != {stop}:
                    break
                if self._handoff:  # --drain resume after the client's end: the rest is decided elsewhere
                    await self._hand_off(reader, driver, writer, watch_connection)
                    return
            if writer in done:
                await self._writer_stopped(writer)
            elif driver in done:
                await self._task_failed(driver, writer)
            elif all_sent not in done:  # the connection closed before every word was final
                self._log.info("connection closed with %d of %d words final%s", self.protocol.n_final,
                               self.protocol.n_words, "" if self.protocol.end_received else " (no end received)")
            else:  # every word final: the protocol's close code (1000 after end, 1001 at a shutdown)
                code = CloseCode(self.protocol.close_code)
                if code == CloseCode.NORMAL_CLOSURE:
                    self._log.info("ended after %d words", self.protocol.n_words)
                    await self._close(code)
                elif self._idle_closed:
                    await self._close(code, IDLE_TIMEOUT_REASON)
                else:
                    self._log.info("shutdown: all %d words final, closing", self.protocol.n_final)
                    await self._close(code, SHUTDOWN_REASON)
        except websockets.ConnectionClosed:
            self._log.info("connection closed while finishing")
        finally:
            self._cancel_timer()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _hand_off(self, reader: asyncio.Task, driver: asyncio.Task, writer: asyncio.Task,
                        watch_connection: Callable[[], asyncio.Task]) -> None:
        """Shutdown with ``--drain resume``: stop reading and deciding, send what was produced,
        close with 1012 so that the client resumes with its undecided words elsewhere."""
        reader.cancel()
        driver.cancel()  # a window in flight is aborted (its words stay undecided)
        await asyncio.gather(reader, driver, return_exceptions=True)
        self._emit(self.protocol.hand_off())  # errors still queued; held words are the resuming server's
        self._log.info("shutdown: handing off with %d of %d words final; closing with 1012",
                       self.protocol.n_final, self.protocol.n_words)
        if not await self._outbox_sent(writer, watch_connection()):
            return
        await self._close(CloseCode.SERVICE_RESTART, "server restarting; resume the stream elsewhere")

    async def _outbox_sent(self, writer: asyncio.Task, closed: asyncio.Task | None = None) -> bool:
        """Wait until every queued message is sent (True), or the writer stopped first (False;
        a slow reader, or the connection closed: handled by :meth:`_writer_stopped`), or the
        connection closed first (``closed`` done: False)."""
        sent = asyncio.ensure_future(self._outbox.join())
        await asyncio.wait({sent, writer} | ({closed} if closed is not None else set()),
                           return_when=asyncio.FIRST_COMPLETED)
        if sent.done():
            return True
        sent.cancel()
        if writer.done():
            await self._writer_stopped(writer)
        return False

    async def _discard_frames(self) -> None:
        """Read and drop frames until the connection closes (after ``end``, or once a shutdown
        stopped the reader: the protocol ignores them)."""
        try:
            while True:
                await self._ws.recv()
        except websockets.ConnectionClosed:
            return

    async def _close(self, code: int, reason: str = "") -> None:
        await close_within(self._ws, code, reason, self._ctx.close_timeout_s)

    async def _writer_stopped(self, writer: asyncio.Task) -> None:
        """The writer ended early: the connection closed under it, or the client stopped reading."""
        if writer.cancelled():
            return
        exc = writer.exception()
        if isinstance(exc, SlowReaderError):
            self._ctx.metrics.slow_reader_closes.inc()
            self._log.warning(
                "%s; closing with 1013 (%d of %d words final, %d messages unsent)",
                exc, self.protocol.n_final, self.protocol.n_words, self._outbox.qsize(),
            )
            await self._close(CloseCode.TRY_AGAIN_LATER, str(exc))
        elif isinstance(exc, websockets.ConnectionClosed):
            raise exc
        elif exc is not None:  # as a failed driver: the contract's error, then 1011
            if isinstance(exc, _WritingFailed):
                self._log.error("internal error writing a text", exc_info=exc.__cause__)
            else:
                self._log.error("internal error in the session's writer", exc_info=exc)
            error = Error(ErrorCode.INTERNAL, "internal server error; closing the stream")
            self._ctx.metrics.errors.labels(code=str(error.code)).inc()
            try:
                async with asyncio.timeout(self._ctx.close_timeout_s):
                    await self._ws.send(encode_frame(error), text=True)
            except TimeoutError:
                pass
            await self._close(CloseCode.INTERNAL_ERROR, "internal error")

    async def _task_failed(self, task: asyncio.Task, writer: asyncio.Task) -> None:
        """The driver or the reader stopped with an exception: ``error`` ``internal``, then 1011."""
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, websockets.ConnectionClosed) or exc is None:
            return
        if isinstance(exc, EngineFailedError):
            self._log.error("engine failure: %s", exc)
            detail, reason = "the punctuation engine failed; closing the stream", "engine failure"
        else:  # a bug: the client still gets the contract's error before the 1011 close
            self._log.error("internal error in the session's %s", task.get_name(), exc_info=exc)
            detail, reason = "internal server error; closing the stream", "internal error"
        self._emit([Error(ErrorCode.INTERNAL, detail)])
        if not await self._outbox_sent(writer):
            return
        await self._close(CloseCode.INTERNAL_ERROR, reason)

    def _finish_input(self, now: float) -> None:
        """No more frames will be read (a shutdown, an idle client): every word received is to be
        finalized, and the driver woken to do it."""
        self._emit(self.protocol.finish(now))
        self._wake.set()

    # -- reader --------------------------------------------------------------
    async def _read(self) -> bool:
        """Handle client frames; True once the client sent ``end`` or sent nothing for the idle
        timeout (its words then being finished), False when it left."""
        loop = asyncio.get_running_loop()
        protocol = self.protocol
        while True:
            paused_at = loop.time()
            if await self._wait_for_room(lambda: protocol.wants_input(loop.time()), pausing_input=True):
                self._ctx.metrics.input_wait.labels(reason="paused").inc(loop.time() - paused_at)
            if self._frame_rate is not None and (wait := self._frame_rate.wait(loop.time())) > 0:
                self._ctx.metrics.input_throttled.inc()
                throttled_at = loop.time()
                await asyncio.sleep(wait)  # the frame rate's timer: the client is held by TCP meanwhile
                self._ctx.metrics.input_wait.labels(reason="throttled").inc(loop.time() - throttled_at)
            try:
                async with asyncio.timeout(self._ctx.idle_timeout_s):
                    frame = await self._ws.recv()  # cancelling recv loses no frame
            except websockets.ConnectionClosed:
                return False
            except TimeoutError:  # an idle client: finish as at a shutdown, then close with 1001
                self._idle_closed = True
                self._ctx.metrics.idle_closes.inc()
                self._log.info("no frame for %g s: finalizing %d words and closing", self._ctx.idle_timeout_s,
                               protocol.n_words - protocol.n_final)
                self._finish_input(loop.time())
                return True
            before = protocol.n_received
            cpu_at = time.thread_time()
            self._emit(protocol.receive_frame(frame, loop.time()))
            if self._frame_rate is not None:  # charged by its size or by the loop's CPU it took
                self._frame_rate.take(loop.time(), frame_cost(frame, time.thread_time() - cpu_at))
            if protocol.n_received > before:
                self._ctx.metrics.words_in.inc(protocol.n_received - before)
                self.peak_backlog = max(self.peak_backlog, protocol.backlog)
            self._wake.set()
            if protocol.end_received:
                return True
            # recv() does not suspend while frames wait in websockets' queue (one socket read
            # can hold hundreds): let the other sessions, handshakes and /healthz run between
            # two frames of this one.
            await asyncio.sleep(0)

    def _outbox_has_room(self) -> bool:
        return self._outbox.qsize() < self._ctx.max_outbox_messages

    async def _wait_for_room(
        self, protocol_ready: Callable[[], bool] | None = None, *, pausing_input: bool = False
    ) -> bool:
        """Wait until the outbox has room (and ``protocol_ready()``, when given, is true);
        True when it held the input (``pausing_input``) to wait.

        Woken by ``_progress``, which the driver sets after each window's finals
        and the writer each time it takes a message off the outbox.
        """
        counted = False
        while not (self._outbox_has_room() and (protocol_ready is None or protocol_ready())):
            if pausing_input and not counted:
                counted = True
                self._ctx.metrics.input_paused.inc()
            self._progress.clear()
            await self._progress.wait()
        return counted

    # -- driver --------------------------------------------------------------
    async def _drive(self) -> None:
        loop = asyncio.get_running_loop()
        batcher: Batcher = self._ctx.batcher
        protocol = self.protocol
        while True:
            await self._wake.wait()
            self._wake.clear()
            self._cancel_timer()
            while True:
                await self._wait_for_room()
                call = protocol.next_call(loop.time())
                if call is None:
                    break
                try:
                    output = await batcher.run(call)
                except OverloadedError as e:
                    messages = protocol.overloaded(call, loop.time())
                    if messages:  # the batcher warns once per episode for all the sessions
                        self._log.debug("overloaded: %s", e)
                    self._emit(messages)
                    await batcher.wait_for_capacity()
                    protocol.still_overloaded(loop.time())  # the episode lasts while the session waits
                    continue
                except BaseException:
                    protocol.abort(call)
                    raise
                self._ctx.metrics.observe_window(call.partial, len(call.input_ids))
                self._emit(protocol.apply(call, output))
                self._progress.set()
            deadline = protocol.next_deadline()
            if deadline is not None:
                self._timer = loop.call_at(deadline, self._wake.set)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- writer --------------------------------------------------------------
    def _emit(self, messages: list[ServerMessage | WrittenText]) -> None:
        """Queue the protocol's messages (called right after the protocol produced them)."""
        for item in messages:
            message = item.message if isinstance(item, WrittenText) else item
            decidable = self.protocol.decidable_times(message)
            if isinstance(message, Error):
                self._ctx.metrics.errors.labels(code=str(message.code)).inc()
                self.errors_sent += 1
            elif isinstance(message, ConfigApplied):
                # the first at INFO; a client may send any number before its first words
                self._log.log(logging.DEBUG if self._configs_logged else logging.INFO, "config %s",
                              _loggable(message.config))
                self._configs_logged += 1
            elif isinstance(message, Resumed):
                self._log.info("resumed at word %d, config %s", message.start, _loggable(message.config))
            elif isinstance(message, Partial):
                if (self._queued_partial is not None and self._writer_held
                        and self._outbox.qsize() >= PARTIALS_DROPPED_FROM):
                    self._queued_partial.supersede()
                item = self._queued_partial = _QueuedPartial(item)
            self._outbox.put_nowait((item, decidable))
        if self.protocol.finished and not self._finish_queued:
            self._finish_queued = True
            self._outbox.put_nowait(None)
        self.peak_outbox = max(self.peak_outbox, self._outbox.qsize())

    async def _written(self, text: WrittenText) -> Final | Partial:
        """``text`` written without running the ITN grammars on the event loop.

        Number-free (or cached) texts are written here at once: they never queue behind
        another session's grammar search. A text that needs a search awaits it in the
        normalizer's worker process (no thread waits on it) and is then written from the
        cache; a normalizer without one writes it on the written executor.
        """
        loop = asyncio.get_running_loop()
        waited_from: float | None = None
        try:
            for _ in range(_MAX_FETCHES):
                written = text.resolve_now()
                if not isinstance(written, WouldWait):
                    return written
                if waited_from is None:
                    waited_from = loop.time()
                if written.fetch is None:
                    break
                try:  # shielded: other sessions may await the same search, and this one may go
                    await asyncio.shield(asyncio.wrap_future(written.fetch()))
                except Exception:  # a worker died: the executor's call leaves the words spoken
                    break
            return await loop.run_in_executor(self._ctx.written_executor, text.resolve)
        finally:
            if waited_from is not None:
                self._ctx.metrics.itn_wait.observe(loop.time() - waited_from)

    async def _write(self) -> None:
        """Send queued messages; raises :class:`SlowReaderError` when a send stays blocked."""
        loop = asyncio.get_running_loop()
        metrics = self._ctx.metrics
        timeout = self._ctx.send_timeout_s
        while True:
            item = await self._outbox.get()
            self._progress.set()
            try:
                if item is None:
                    self._all_sent.set()
                    continue
                message, decidable = item
                superseded = False
                if isinstance(message, _QueuedPartial):
                    if self._queued_partial is message:
                        self._queued_partial = None
                    message, superseded = message.item, message.superseded
                    if message is None:
                        continue
                if isinstance(message, WrittenText):  # in order; grammar searches off the event loop
                    self._writer_held = True
                    try:
                        message = await self._written(message)
                    except Exception as e:
                        raise _WritingFailed(str(e)) from e
                    finally:
                        self._writer_held = False
                    if nothing_to_send(message):  # no words held at a flush or the end after all
                        continue
                if superseded:
                    continue
                self._writer_held = True  # seen by others only while the send waits (the client's buffers are full)
                try:
                    async with asyncio.timeout(timeout):
                        await self._ws.send(encode_frame(message), text=True)
                except TimeoutError:
                    raise SlowReaderError(
                        f"client not reading: a send was blocked for {timeout:g}s"
                    ) from None
                finally:
                    self._writer_held = False
                if decidable:
                    sent_at = loop.time()
                    self.finals_sent += len(decidable)
                    metrics.words_finalized.inc(len(decidable))
                    for at in decidable:
                        metrics.finalize_margin.observe(max(0.0, sent_at - at))
            finally:
                self._outbox.task_done()
