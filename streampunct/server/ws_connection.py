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
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Response

logger = logging.getLogger(__name__)


class GuardedConnection(ServerConnection):
    """A :class:`ServerConnection` aborted when its unsent output passes ``max_write_buffer``
    bytes after a read; ``on_abort(buffered)`` is called once when it is.

    Requests that websockets refuses while parsing them, before ``process_request``
    sees them (a request line over 8 KB: 414; a header line over 8 KB or more than
    128 headers: 431; a body, chunked encoding, bytes that are not ASCII, a second
    request behind the first: closed without an answer) are reported to
    ``on_unparsed(connection, error)`` once the handshake is over, and their
    responses carry ``headers`` (``X-Streampunct-Worker``), as every other answer
    does. A connection closed before it sent a whole request (a TCP health
    check) is not reported."""

    def __init__(self, *args: Any, max_write_buffer: int, on_abort: Callable[[int], None] | None = None,
                 on_unparsed: Callable[[GuardedConnection, Exception], None] | None = None,
                 headers: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if max_write_buffer < 1:
            raise ValueError(f"max_write_buffer must be >= 1, got {max_write_buffer}")
        self.max_write_buffer = max_write_buffer
        self._on_abort = on_abort
        self._on_unparsed = on_unparsed
        self.aborted_for_unread_output = False
        if headers:
            reject = self.protocol.reject

            def reject_with_headers(status: Any, text: str) -> Response:
                response = reject(status, text)
                for name, value in headers.items():
                    if name not in response.headers:
                        response.headers[name] = value
                return response

            self.protocol.reject = reject_with_headers  # type: ignore[method-assign]

    async def handshake(self, *args: Any, **kwargs: Any) -> None:
        await super().handshake(*args, **kwargs)
        error = self.protocol.handshake_exc
        if self.request is None and error is not None and self._on_unparsed is not None \
                and not isinstance(error.__cause__, EOFError):
            self._on_unparsed(self, error)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        transport = self.transport
        if self.aborted_for_unread_output or transport.is_closing():
            return
        buffered = transport.get_write_buffer_size()
        if buffered > self.max_write_buffer:
            self.aborted_for_unread_output = True
            logger.warning("%s: client not reading: %d bytes of answers to its frames (pongs) unsent, "
                           "over %d; connection aborted", self.id, buffered, self.max_write_buffer)
            if self._on_abort is not None:
                self._on_abort(buffered)
            transport.abort()


def max_write_buffer(write_limit: int, max_message_bytes: int) -> int:
    """The bound :class:`GuardedConnection` applies: the write limit and four of the largest
    messages (a final echoes a frame's words, with their text), so that no backpressured
    send reaches it."""
    return write_limit + 4 * max_message_bytes
