"""A loopback TCP forwarder for tests: a stand-in for a load balancer in front of replicas.

New connections go to the current ``target`` port; :meth:`TcpProxy.drop` cuts
every open connection without a close frame (what a client sees when a
replica's host or the network goes away), and :meth:`FreezingProxy.freeze` hangs
them (what a client sees when a replica stops without closing its sockets).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Self


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:target``; start with :meth:`start`, or
    ``async with`` (started on the way in, closed on the way out)."""

    def __init__(self, target: int, on_connect: Callable[[int], None] | None = None) -> None:
        self.target = target
        # called with each connection's number (1, 2, ...) before it is forwarded
        self.on_connect = on_connect
        self.connections = 0  # accepted so far
        self._server: asyncio.Server | None = None
        self._pipes: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> Self:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    def url(self, path: str = "/v1/stream") -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.on_connect is not None:
            self.on_connect(self.connections)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer, up_writer)
        self._pipes.add(pair)
        tasks = [
            asyncio.ensure_future(self._pump(reader, up_writer, writer)),
            asyncio.ensure_future(self._pump(up_reader, writer, up_writer)),
        ]
        self._tasks.update(tasks)
        try:
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self._tasks.difference_update(tasks)
            self._pipes.discard(pair)
            for w in pair:
                w.close()

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        source: asyncio.StreamWriter,
    ) -> None:
        """Copy until EOF, then pass the EOF on (a half close); on a reset, reset both sides."""
        try:
            while data := await reader.read(65536):
                await self._forward(data, writer, source)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (OSError, ConnectionError):
            writer.transport.abort()
            source.transport.abort()

    async def _forward(
        self, data: bytes, writer: asyncio.StreamWriter, source: asyncio.StreamWriter
    ) -> None:
        """Pass on ``data`` read from ``source``'s peer to ``writer`` (subclasses hold it, or
        look at it)."""
        writer.write(data)

    def drop(self) -> int:
        """Cut every open connection (TCP abort, no close frame); returns how many."""
        pipes = list(self._pipes)
        for pair in pipes:
            for w in pair:
                w.transport.abort()
        return len(pipes)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.drop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()


class FreezingProxy(TcpProxy):
    """:class:`TcpProxy` whose :meth:`freeze` stops forwarding, both ways, on every connection open
    then (each side's bytes are read no more: TCP holds the peer), without a close or a reset:
    a replica that hangs. Later connections are forwarded as usual."""

    def __init__(self, target: int) -> None:
        super().__init__(target)
        self._frozen: set[asyncio.StreamWriter] = set()
        self._never = asyncio.Event()  # the frozen pumps wait on it until the proxy is closed

    def freeze(self) -> int:
        """Hang every open connection; returns how many."""
        pipes = list(self._pipes)
        for pair in pipes:
            self._frozen.update(pair)
        return len(pipes)

    async def _forward(
        self, data: bytes, writer: asyncio.StreamWriter, source: asyncio.StreamWriter
    ) -> None:
        if writer in self._frozen or source in self._frozen:
            await self._never.wait()  # cancelled by close()
        writer.write(data)
