"""``bench load``'s sessions on the client side: in the benchmark's own loop, or spread over
several processes (``--client-processes P``).

One asyncio loop drives about a thousand real-time sessions at a quarter of a core
(an H200 host, 2026-11-27); a GPU tier's several thousand need more than one core of
load generator, or the generator's own lag shows up in the margins. With ``P > 1`` the
sessions of a step are dealt round-robin to ``P`` spawned processes. Each connects its
share, then waits for the step's start times (``time.monotonic()``, one clock for every
process of the host), runs its sessions and sends back what it saw; the step is analysed
in the parent as with one loop. Every time a process reports is ``time.monotonic()``:
the standard asyncio loop's ``loop.time()``.

Protocol over each child's pipe, ``(kind, payload)`` pairs: the child sends
``("connected", Connected)``; the parent sends ``("go", (starts, deadline))`` with one
start per connected session of that child; the child sends ``("done", Ran)``, or
``("error", traceback)`` at any point. A child runs its share as :class:`LocalClients`.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Concurrent WebSocket handshakes per client loop.
CONNECT_CONCURRENCY = 32


@contextlib.asynccontextmanager
async def closing_client(client):
    """``client`` (a :class:`~streampunct.client.stream_client.StreamClient`), closed on the way out.
    A bench interrupted (Ctrl-C cancels its tasks) aborts the connection instead of its close
    handshake: a server busy with the session's backlog (a flood) would answer only after the
    client's close timeout, and a session left open would hold the server's shutdown for its
    drain timeout; aborted, the server sees the session gone at once and stops promptly."""
    try:
        yield client
    except asyncio.CancelledError:
        transport = client.connection.transport
        if transport is not None:
            transport.abort()
        raise
    finally:
        await client.close()


@dataclass(frozen=True)
class ClientOptions:
    """What every session of a step asks for and how long it may take to connect."""

    right_context: int
    max_delay_ms: int
    itn: bool = False
    connect_timeout_s: float = 10.0


@dataclass
class Connected:
    """The connect phase of a step: which sessions connected, the failures, how long it took."""

    mask: list[bool]
    errors: Counter = field(default_factory=Counter)
    seconds: float = 0.0


@dataclass
class Ran:
    """The run phase: each connected session's outcome (in session order), the loop lag
    samples of every client loop, and the client CPU seconds of the step (all processes)."""

    outcomes: list[Any]
    lags: list[float]
    cpu_s: float


async def connect_all(url: str, n: int, options: ClientOptions) -> tuple[list[Any], Counter]:
    """``n`` sessions' clients (None for one that failed to connect) and the failures by kind."""
    from streampunct.client.stream_client import StreamClient

    errors: Counter = Counter()
    sem = asyncio.Semaphore(CONNECT_CONCURRENCY)

    async def connect():
        async with sem:
            try:
                return await StreamClient.connect(
                    url, open_timeout=options.connect_timeout_s, right_context=options.right_context,
                    max_delay_ms=options.max_delay_ms, partials=False, itn=options.itn,
                )
            except Exception as e:  # noqa: BLE001 (a refused or failed session is a figure)
                errors[f"connect:{type(e).__name__}"] += 1
                return None

    return list(await asyncio.gather(*(connect() for _ in range(n)))), errors


async def lag_monitor(lags: list[float], stop: asyncio.Event, interval: float = 0.01) -> None:
    """Sample how late this loop wakes up (the load generator's own delay)."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(interval)
        lags.append(loop.time() - t - interval)


@dataclass(frozen=True)
class SessionPlan:
    """What one session sends: its words and chunks ``(seconds after its start, first, end)``."""

    words: tuple[str, ...]
    chunks: tuple[tuple[float, int, int], ...]
    prefill: int


@dataclass
class SessionOutcome:
    """What the client saw of one session (times from ``loop.time()``)."""

    plan: SessionPlan
    sent_at: np.ndarray
    end_at: float | None = None
    finals: list[tuple[float, int, list[str]]] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    ended_words: int | None = None
    close_code: int | None = None
    send_lag: list[float] = field(default_factory=list)

    @property
    def n_sent(self) -> int:
        return int(np.count_nonzero(~np.isnan(self.sent_at)))


async def run_session(client, plan: SessionPlan, start: float, deadline: float) -> SessionOutcome:
    """Stream ``plan`` on ``client`` from loop time ``start``; read until the server closes."""
    from websockets import ConnectionClosed

    from streampunct.core.wire import Ended, Error, Final

    loop = asyncio.get_running_loop()
    out = SessionOutcome(plan, np.full(len(plan.words), np.nan))

    async def send() -> None:
        try:
            for at, a, b in plan.chunks:
                target = start + at
                delay = target - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                now = loop.time()
                out.send_lag.append(now - target)
                out.sent_at[a:b] = now
                await client.send_words(plan.words[a:b])
            out.end_at = loop.time()
            await client.end()
        except ConnectionClosed:
            out.errors["send_on_closed"] += 1

    sender = asyncio.create_task(send())
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                out.errors["drain_timeout"] += 1
                break
            try:
                message = await client.recv(timeout=remaining)
            except ConnectionClosed:
                break
            except TimeoutError:
                out.errors["drain_timeout"] += 1
                break
            except Exception as e:  # a frame the client cannot decode
                out.errors[f"bad_message:{type(e).__name__}"] += 1
                continue
            now = loop.time()
            if isinstance(message, Final):
                out.finals.append((now, message.start, [w.w for w in message.words]))
            elif isinstance(message, Error):
                out.errors[str(message.code)] += 1
            elif isinstance(message, Ended):
                out.ended_words = message.words
    finally:
        if not sender.done():
            sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        try:
            await asyncio.wait_for(client.close(), 2.0)
        except (TimeoutError, Exception):  # noqa: BLE001 (closing is best effort)
            pass
        out.close_code = client.close_code
    if out.close_code not in (None, 1000):
        out.errors[f"close:{out.close_code}"] += 1
    return out


async def run_sessions(clients: Sequence[Any], plans: Sequence[Any], starts: Sequence[float],
                       deadline: float) -> tuple[list[Any], list[float]]:
    """Run each connected client's plan from its start; (outcomes, loop lag samples)."""
    stop = asyncio.Event()
    lags: list[float] = []
    monitor = asyncio.create_task(lag_monitor(lags, stop))
    try:
        outcomes = await asyncio.gather(*(run_session(c, p, s, deadline)
                                          for c, p, s in zip(clients, plans, starts, strict=True)))
    finally:
        stop.set()
        await monitor
    return list(outcomes), lags


class LocalClients:
    """The sessions in the calling loop (one process: ``--client-processes 1``)."""

    processes = 1

    def __init__(self, url: str, plans: Sequence[Any], options: ClientOptions) -> None:
        self.url, self.plans, self.options = url, list(plans), options
        self._clients: list[Any] = []

    async def connect(self) -> Connected:
        t = time.monotonic()
        clients, errors = await connect_all(self.url, len(self.plans), self.options)
        self._clients = clients
        return Connected([c is not None for c in clients], errors, time.monotonic() - t)

    async def run(self, starts: Sequence[float], deadline: float) -> Ran:
        cpu0 = time.process_time()
        pairs = [(c, p) for c, p in zip(self._clients, self.plans, strict=True) if c is not None]
        outcomes, lags = await run_sessions([c for c, _ in pairs], [p for _, p in pairs], starts, deadline)
        return Ran(outcomes, lags, time.process_time() - cpu0)

    def close(self) -> None:
        pass


class ProcessClients:
    """The sessions dealt round-robin to ``processes`` spawned client processes."""

    def __init__(self, url: str, plans: Sequence[Any], options: ClientOptions, processes: int,
                 *, timeout_s: float = 600.0) -> None:
        if processes < 2:
            raise ValueError("ProcessClients needs at least 2 processes (LocalClients runs one)")
        self.processes = min(processes, max(1, len(plans)))
        self.plans, self.timeout_s = list(plans), timeout_s
        ctx = multiprocessing.get_context("spawn")
        self._shares = [list(range(k, len(self.plans), self.processes)) for k in range(self.processes)]
        self._pipes, self._procs = [], []
        for share in self._shares:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_child_main, args=(child, url, [self.plans[i] for i in share], options),
                               daemon=True, name="streampunct-load-client")
            proc.start()
            child.close()
            self._pipes.append(parent)
            self._procs.append(proc)
        self._connected: list[list[int]] = []  # per process: its connected sessions' indexes

    async def _recv(self, k: int, expect: str) -> Any:
        def recv():
            if not self._pipes[k].poll(self.timeout_s):
                raise RuntimeError(f"load client process {k} sent nothing for {self.timeout_s:.0f}s")
            return self._pipes[k].recv()

        try:
            kind, payload = await asyncio.to_thread(recv)
        except EOFError:
            raise RuntimeError(f"load client process {k} exited (code {self._procs[k].exitcode})") from None
        if kind == "error":
            raise RuntimeError(f"load client process {k} failed:\n{payload}")
        if kind != expect:
            raise RuntimeError(f"load client process {k} sent {kind!r}, expected {expect!r}")
        return payload

    async def connect(self) -> Connected:
        joined: list[Connected] = await asyncio.gather(*(self._recv(k, "connected") for k in range(self.processes)))
        mask = [False] * len(self.plans)
        errors: Counter = Counter()
        self._connected = []
        for share, child in zip(self._shares, joined, strict=True):
            self._connected.append([i for i, ok in zip(share, child.mask, strict=True) if ok])
            for i in self._connected[-1]:
                mask[i] = True
            errors.update(child.errors)
        return Connected(mask, errors, max(c.seconds for c in joined))

    async def run(self, starts: Sequence[float], deadline: float) -> Ran:
        """``starts``: one per connected session, in session order, on ``time.monotonic()``."""
        if starts and abs(min(starts) - time.monotonic()) > 60.0:
            raise RuntimeError("start times are not on time.monotonic(): the client processes would not line up")
        connected = sorted(i for mine in self._connected for i in mine)
        start_of = dict(zip(connected, starts, strict=True))
        for pipe, mine in zip(self._pipes, self._connected, strict=True):
            pipe.send(("go", ([start_of[i] for i in mine], deadline)))
        ran: list[Ran] = await asyncio.gather(*(self._recv(k, "done") for k in range(self.processes)))
        outcome_of: dict[int, Any] = {}
        for mine, child in zip(self._connected, ran, strict=True):
            outcome_of.update(zip(mine, child.outcomes, strict=True))
        return Ran([outcome_of[i] for i in connected], [lag for child in ran for lag in child.lags],
                   sum(child.cpu_s for child in ran))

    def close(self) -> None:
        for pipe in self._pipes:
            pipe.close()
        for proc in self._procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)


def _child_main(conn, url: str, plans: list, options: ClientOptions) -> None:
    try:
        asyncio.run(_child(conn, url, plans, options))
    except BaseException:  # noqa: BLE001 (the parent reports it)
        try:
            conn.send(("error", traceback.format_exc()))
        except (BrokenPipeError, OSError):
            pass
    finally:
        conn.close()


async def _child(conn, url: str, plans: list, options: ClientOptions) -> None:
    """One client process: its share of the sessions, run as :class:`LocalClients` runs them."""
    loop = asyncio.get_running_loop()
    if abs(loop.time() - time.monotonic()) > 0.01:
        raise RuntimeError("the client loop's clock is not time.monotonic(): start times would not line up")
    clients = LocalClients(url, plans, options)
    conn.send(("connected", await clients.connect()))
    kind, payload = await asyncio.to_thread(conn.recv)
    if kind != "go":
        raise RuntimeError(f"expected 'go', got {kind!r}")
    starts, deadline = payload
    conn.send(("done", await clients.run(starts, deadline)))


def make_clients(url: str, plans: Sequence[Any], options: ClientOptions, processes: int):
    """:class:`LocalClients` for one process, else :class:`ProcessClients`."""
    if processes < 1:
        raise ValueError(f"client processes must be >= 1, got {processes}")
    return LocalClients(url, plans, options) if processes == 1 else ProcessClients(url, plans, options, processes)
