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

:func:`close_parser` closes the parser once the connection is lost (nothing
steps it after that: websockets fed it the end of stream), which breaks the
cycle, so reference counting frees the protocol right away. The server's
connections (:class:`~streampunct.server.ws_connection.GuardedConnection`)
call it in ``connection_lost``: every connection, sessions as well as health
checks, refusals and abandoned handshakes.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def close_parser(protocol: object) -> None:
    """Finish a closed connection's protocol parser (websockets' sans-I/O ``protocol``), which
    breaks the cycle: call it once nothing feeds the protocol (its connection is lost). A
    handshake that failed keeps its error on the protocol, and the error's traceback holds the
    parser's frames (the protocol again): the tracebacks are dropped, the errors kept."""
    error, seen = getattr(protocol, "handshake_exc", None), 0
    while isinstance(error, BaseException) and seen < 8:
        error.__traceback__ = None
        error, seen = error.__cause__ or error.__context__, seen + 1
    parser = getattr(protocol, "parser", None)
    close = getattr(parser, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:  # a websockets version whose parser does not end quietly: leave it to the collector
        logger.debug("could not close a closed connection's parser", exc_info=True)
