"""The server's WebSocket connection: websockets' own, with a bound on what it writes unasked.

A session's sends wait while the write buffer holds more than ``write_limit``
(its writer's ``send`` drains), but websockets answers control frames itself,
inside ``data_received``, without flow control: a pong for every ping, the
echo of a close. A client that sends pings and reads nothing would make the
server buffer every pong (hundreds of MB a minute from one connection, and
no send of the session blocks, so ``--send-timeout-s`` never fires).

:class:`GuardedConnection` checks the transport's write buffer after each read
and aborts the connection when it holds more than ``max_write_buffer`` bytes:
more than any backpressured send leaves there (the write limit plus one
message), so only a client that does not read what it asks for is cut.

Control frames cost the event loop as data frames do (parsing, the pong),
but neither websockets' queue nor the session's frame rate sees them: one
client sending pings (or unsolicited pongs) as fast as its socket takes them
kept the loop parsing and starved every other session, health checks
included. With ``control_frame_rate``, the pings and pongs a connection
receives go through their own token bucket (:class:`~streampunct.server.rate.FrameRate`,
the session's rate); past it the connection stops reading its socket until
the bucket allows a frame again, as the frame rate holds data frames, and
TCP slows that client alone.
"""

from __future__ import annotations

import asyncio
import http
import logging
from collections.abc import Callable, Mapping
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import InvalidMessage, ProtocolError
from websockets.frames import Frame, Opcode
from websockets.http11 import Response

from streampunct.server.rate import FrameRate
from streampunct.server.ws_release import close_parser

logger = logging.getLogger(__name__)

#: The most bytes a request's head (request line and headers) may take in all. websockets' own
#: limits (8 KB a line, 128 headers) let each connection still in its handshake hold about a
#: megabyte; real handshakes take a few kilobytes (big cookies: tens).
MAX_REQUEST_HEAD_BYTES = 64 * 1024
#: How long a connection refused for its head's size (431) may go on sending before it is closed.
REFUSED_LINGER_S = 2.0


class GuardedConnection(ServerConnection):
    """A :class:`ServerConnection` aborted when its unsent output passes ``max_write_buffer``
    bytes after a read; ``on_abort(buffered)`` is called once when it is.

    Requests that websockets refuses while parsing them, before ``process_request``
    sees them (a request line over 8 KB: 414; a header line over 8 KB or more than
    128 headers, or a head over :data:`MAX_REQUEST_HEAD_BYTES` in all: 431; a body,
    chunked encoding, bytes that are not ASCII, a second request behind the first:
    closed without an answer) are reported to
    ``on_unparsed(connection, error)`` once the handshake is over, and their
    responses carry ``headers`` (``X-Streampunct-Worker``), as every other answer
    does. A connection closed before it sent a whole request (a TCP health
    check) is not reported.

    Bytes behind the request that are not frames (a second HTTP request
    pipelined behind the first) make websockets end the connection while it
    parses them, before the request is answered; its answer could then no
    longer be sent, and websockets logged an internal error with a traceback.
    Such a request is now not answered, and is reported as unparsed ones are."""

    def __init__(self, *args: Any, max_write_buffer: int, on_abort: Callable[[int], None] | None = None,
                 on_unparsed: Callable[[GuardedConnection, Exception], None] | None = None,
                 headers: Mapping[str, str] | None = None, control_frame_rate: float | None = None,
                 on_control_held: Callable[[float], None] | None = None,
                 on_count: Callable[[int], None] | None = None,
                 handshake_timeout_s: float | None = None,
                 on_handshake_timeout: Callable[[GuardedConnection], None] | None = None,
                 live: set[GuardedConnection] | None = None, **kwargs: Any) -> None:
        """``control_frame_rate``: pings and pongs read a second, after a burst of as many
        (None: no limit); ``on_control_held(seconds)`` is called each time reading resumes
        after the connection held its socket for them. ``on_count(+1)`` when the TCP
        connection is made, ``on_count(-1)`` when it is lost; ``on_handshake_timeout(self)``
        when the handshake was cut at ``handshake_timeout_s`` (the server's ``open_timeout``:
        a client that connected and sent no whole request). ``live`` holds the connection from
        its TCP connection to its loss (websockets' ``Server.all_connections`` holds only those
        past the handshake)."""
        super().__init__(*args, **kwargs)
        self._on_count = on_count
        self._live = live
        self._handshake_timeout_s = handshake_timeout_s
        self._on_handshake_timeout = on_handshake_timeout
        self._made_at: float | None = None
        if max_write_buffer < 1:
            raise ValueError(f"max_write_buffer must be >= 1, got {max_write_buffer}")
        self.max_write_buffer = max_write_buffer
        self._on_abort = on_abort
        self._on_unparsed = on_unparsed
        self._unparsed_reported = False
        self._response_sent = False
        self._head_bytes = 0  # read before the request was whole
        self._refused = False  # answered 431 (_refuse_head)
        self._linger: asyncio.TimerHandle | None = None
        self.aborted_for_unread_output = False
        #: the server's session id once a session runs on this connection: its log lines name it
        self.session_id: str | None = None
        self._control_rate = FrameRate(control_frame_rate) if control_frame_rate is not None else None
        self._on_control_held = on_control_held
        self._holds: set[str] = set()  # why reading is paused: "queue" (websockets'), "control"
        self._control_timer: asyncio.TimerHandle | None = None
        self._control_held_at = 0.0
        if headers:
            reject = self.protocol.reject

            def reject_with_headers(status: Any, text: str) -> Response:
                response = reject(status, text)
                for name, value in headers.items():
                    if name not in response.headers:
                        response.headers[name] = value
                return response

            self.protocol.reject = reject_with_headers  # type: ignore[method-assign]
        send_response = self.protocol.send_response

        def send_response_unless_ended(response: Response) -> None:
            if not self.protocol.eof_sent:
                self._response_sent = True
                send_response(response)
                return
            # bytes behind the request ended the connection already: nothing can be sent
            self._report_unparsed(_bytes_behind())
            self.transport.abort()

        self.protocol.send_response = send_response_unless_ended  # type: ignore[method-assign]

    async def handshake(self, *args: Any, **kwargs: Any) -> None:
        try:
            await super().handshake(*args, **kwargs)
        except asyncio.CancelledError:  # websockets' open_timeout cancels it (so does a shutdown)
            timeout = self._handshake_timeout_s
            if (timeout is not None and self._on_handshake_timeout is not None and self._made_at is not None
                    and self.loop.time() - self._made_at >= 0.99 * timeout):
                self._on_handshake_timeout(self)
            raise
        error = self.protocol.handshake_exc
        if self.request is None and error is not None:
            if _bare_lf(error):
                self._report_unparsed(InvalidMessage("a line ends in LF alone (HTTP lines end in CRLF)"))
            elif not isinstance(error.__cause__, EOFError):  # EOF: a TCP health check, not reported
                self._report_unparsed(error)
        elif self.request is not None and not self._response_sent \
                and isinstance(self.protocol.parser_exc, ProtocolError):
            # bytes behind the request failed as frames and ended the connection before its
            # answer went out (a second request behind the first)
            self._report_unparsed(_bytes_behind())

    def _refuse_head(self) -> None:
        """A request head over :data:`MAX_REQUEST_HEAD_BYTES`: answered 431, as websockets answers
        one header line over its limit; what the client still sends is read and dropped until it
        closes, or :data:`REFUSED_LINGER_S` pass."""
        text = f"request head over {MAX_REQUEST_HEAD_BYTES} bytes"
        self._report_unparsed(InvalidMessage(f"a {text}"))
        self._response_sent = True
        self._refused = True  # what comes from now on is read and dropped
        response = self.protocol.reject(http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"{text.capitalize()}.\n")
        transport = self.transport
        transport.write(response.serialize())
        # A lingering close, as web servers do: a client still sending its head would get a
        # reset, which discards the answer, if the socket closed with its bytes unread. So the
        # answer goes out with a FIN, the rest is read and dropped, and the connection closes
        # when the client closes it, or after REFUSED_LINGER_S.
        if transport.can_write_eof():
            transport.write_eof()
        self._linger = self.loop.call_later(REFUSED_LINGER_S, transport.close)

    def _report_unparsed(self, error: Exception) -> None:
        if self._on_unparsed is not None and not self._unparsed_reported:
            self._unparsed_reported = True
            self._on_unparsed(self, error)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._made_at = self.loop.time()
        if self._live is not None:
            self._live.add(self)
        if self._on_count is not None:
            self._on_count(1)
        # websockets' message queue pauses and resumes reading too: the socket is read
        # again only once neither it nor the control frames' rate holds it.
        self.recv_messages.pause = lambda: self._hold("queue")
        self.recv_messages.resume = lambda: self._release("queue")

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self._control_timer is not None:
            self._control_timer.cancel()
            self._control_timer = None
        super().connection_lost(exc)
        if self._live is not None:
            self._live.discard(self)
        if self._on_count is not None:
            self._on_count(-1)
            self._on_count = None
        # the queue's callbacks refer to this connection, and the protocol's parser to the
        # protocol: dropped and closed, so that reference counting frees a closed connection
        # (ws_release.py) without waiting for the cycle collector
        self.recv_messages.pause = self.recv_messages.resume = _nothing
        close_parser(self.protocol)
        for name in ("reject", "send_response"):  # this connection's wrappers, which refer to it
            vars(self.protocol).pop(name, None)

    def _hold(self, reason: str) -> None:
        if not self._holds and not self.transport.is_closing():
            self.transport.pause_reading()
        self._holds.add(reason)

    def _release(self, reason: str) -> None:
        if reason not in self._holds:
            return
        self._holds.discard(reason)
        if not self._holds and not self.transport.is_closing():
            self.transport.resume_reading()

    def _control_released(self) -> None:
        self._control_timer = None
        self._release("control")
        if self._on_control_held is not None:
            self._on_control_held(self.loop.time() - self._control_held_at)

    def process_event(self, event: Any) -> None:
        super().process_event(event)
        if self._control_rate is not None and isinstance(event, Frame) and event.opcode in (Opcode.PING, Opcode.PONG):
            self._control_rate.take(self.loop.time())

    def data_received(self, data: bytes) -> None:
        if self._refused:  # answered 431: the rest of the head is dropped (_refuse_head)
            return
        super().data_received(data)
        transport = self.transport
        if self.aborted_for_unread_output or transport.is_closing():
            return
        if self.request is None and self.protocol.handshake_exc is None:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_REQUEST_HEAD_BYTES:
                self._refuse_head()
                return
        buffered = transport.get_write_buffer_size()
        if buffered > self.max_write_buffer:
            self.aborted_for_unread_output = True
            who = f"session={self.session_id}" if self.session_id else f"connection {self.id}"
            logger.warning("%s: client not reading: %d bytes of answers to its frames (pongs) unsent, "
                           "over %d; connection aborted", who, buffered, self.max_write_buffer)
            if self._on_abort is not None:
                self._on_abort(buffered)
            transport.abort()
            return
        if self._control_rate is not None and self._control_timer is None:
            wait = self._control_rate.wait(self.loop.time())
            if wait > 0:  # past the control frames' rate: read nothing more until it allows one
                self._control_held_at = self.loop.time()
                self._hold("control")
                self._control_timer = self.loop.call_later(wait, self._control_released)


def _bytes_behind() -> InvalidMessage:
    return InvalidMessage("bytes behind the request that are not frames (a second request behind the first)")


def _bare_lf(error: BaseException) -> bool:
    """Whether websockets gave up on a request for a line without CRLF (bare LF endings),
    which it reports as an EOFError, as it does a client that closed before a whole request."""
    cause = error.__cause__
    while cause is not None:
        if isinstance(cause, EOFError) and str(cause) == "line without CRLF":
            return True
        cause = cause.__cause__
    return False


def _nothing() -> None:
    pass


def max_write_buffer(write_limit: int, max_message_bytes: int) -> int:
    """The bound :class:`GuardedConnection` applies: the write limit and four of the largest
    messages (a final echoes a frame's words, with their text), so that no backpressured
    send reaches it."""
    return write_limit + 4 * max_message_bytes
