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
from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import ServerConnection

logger = logging.getLogger(__name__)


class GuardedConnection(ServerConnection):
    """A :class:`ServerConnection` aborted when its unsent output passes ``max_write_buffer``
    bytes after a read; ``on_abort(buffered)`` is called once when it is."""

    def __init__(self, *args: Any, max_write_buffer: int, on_abort: Callable[[int], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if max_write_buffer < 1:
            raise ValueError(f"max_write_buffer must be >= 1, got {max_write_buffer}")
        self.max_write_buffer = max_write_buffer
        self._on_abort = on_abort
        self.aborted_for_unread_output = False

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
