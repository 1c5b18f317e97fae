"""Free a closed WebSocket connection's protocol state at once, not at the next full garbage collection.

websockets' sans-I/O protocol object keeps its frame parser as a generator
that, once the connection is closed, stays suspended at its last ``yield``;
the generator's frame refers to the protocol, so the protocol, its reader
buffer (and, where compression is negotiated, its permessage-deflate contexts:
tens of KB of malloc'd zlib memory per connection; the server negotiates none
since a deflate bomb inflated 1 KB frames to 1 MB) form a reference cycle that only
Python's cycle collector frees. A long-running server's connections live
through many collections and land in the oldest generation, which CPython
collects only when it has grown by a quarter of what survived the last full
collection: with 50 reconnecting sessions the protocols of all the
connections closed piled up, and glibc's in-use memory with them, 2 MB a
minute for the seven minutes watched (docs/server.md, "Memory that stays").

:func:`release_when_closed` closes the parser once the connection is closed
(nothing steps it after that: websockets stops feeding the protocol at end of
stream), which breaks the cycle, so reference counting frees the protocol
right away.
"""

from __future__ import annotations

import asyncio
import logging

logger = logging.getLogger(__name__)

#: Release tasks not yet done (asyncio keeps only weak references to tasks).
_pending: set[asyncio.Task[None]] = set()


def release_when_closed(connection: object) -> None:
    """Once ``connection`` (a websockets asyncio connection) is closed, finish its protocol's
    parser generator. Call it from the handler; returns at once."""
    wait_closed = getattr(connection, "wait_closed", None)
    if wait_closed is None:
        return
    task = asyncio.ensure_future(_release(connection, wait_closed()))
    _pending.add(task)
    task.add_done_callback(_pending.discard)


async def _release(connection: object, closed: object) -> None:
    await closed  # type: ignore[misc]
    protocol = getattr(connection, "protocol", None)
    parser = getattr(protocol, "parser", None)
    close = getattr(parser, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:  # a websockets version whose parser does not end quietly: leave it to the collector
        logger.debug("could not close a closed connection's parser", exc_info=True)
