"""Bounded resources of a real server: input backpressure, slow readers, keepalive, window cost."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import socket
import struct
import threading

import pytest
from websockets.asyncio.client import connect as ws_connect

from streampunct.client.stream_client import StreamClient, Transcript
from streampunct.core.windowing import WindowConfig
from streampunct.core.wire import (
    ConfigRequest,
    EndRequest,
    Final,
    Flushed,
    HypothesisMessage,
    Partial,
    Word,
    WordsMessage,
    decode_server,
    encode,
)
from streampunct.server.batcher import BatcherConfig
from tests.streampunct.fakes import until

TIMEOUT = 30.0
VOCAB = "so the talk was about water and how we can keep it clean for everyone".split()


def corpus(n: int) -> list[str]:
    return [VOCAB[k % len(VOCAB)] for k in range(n)]


def metric(server, name: str, **labels: str) -> float:
    value = server.metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


def only_session(server):
    """The server's one session: open once its client got ``ready``, which the session sends."""
    (session,) = server.sessions
    return session


# -- input backpressure ------------------------------------------------------------------


async def test_a_flooding_client_is_held_at_the_backlog_limit_and_loses_nothing(start_server, fake_labels):
    limit, per_message, total = 500, 1000, 24_000
    server = await start_server(
        max_backlog_words=limit, batching=BatcherConfig(max_wait_ms=0),
        window=WindowConfig(size=126, left=40, right=20),
    )
    words = corpus(total)
    client = await StreamClient.connect(server.url, right_context=2, max_delay_ms=600_000)
    session = only_session(server)
    transcript = Transcript()

    async def push() -> None:  # as fast as the socket takes them
        for k in range(0, total, per_message):
            await client.send_words(words[k : k + per_message])
        await client.end()

    gauge: list[float] = []  # what /metrics shows while the flood runs: read at each message
    sender = asyncio.create_task(push())
    async with asyncio.timeout(TIMEOUT):
        async for message in client:
            gauge.append(metric(server, "streampunct_backlog_words"))
            transcript.apply(message)  # raises unless finals are contiguous, in order, never repeated
    await sender
    assert len(gauge) > total // per_message and max(gauge) <= limit + per_message
    assert client.close_code == 1000
    assert transcript.words == words and transcript.ended_words == total
    assert transcript.labels[:-1] == fake_labels(words)[:-1]
    # Every 1000-word message overfills a 500-word backlog: the reader had to wait each time,
    # and the backlog never went past the limit plus one message.
    assert limit <= session.peak_backlog <= limit + per_message
    assert metric(server, "streampunct_input_paused_total") >= total // per_message - 1
    paused = server.metrics.registry.get_sample_value("streampunct_input_wait_seconds_total", {"reason": "paused"})
    assert paused > 0
    assert session.peak_outbox <= server.config.max_outbox_messages + 4
    assert metric(server, "streampunct_words_finalized_total") == total


async def test_backpressure_of_one_session_does_not_hold_up_another(start_server):
    server = await start_server(max_backlog_words=200, batching=BatcherConfig(max_wait_ms=0))
    flood = await StreamClient.connect(server.url, right_context=2)
    calm = await StreamClient.connect(server.url, right_context=0)

    async def push() -> None:
        for _ in range(20):
            await flood.send_words(corpus(1000))
        await flood.end()

    async def drain(client) -> Transcript:
        transcript = Transcript()
        async for message in client:
            transcript.apply(message)
        return transcript

    sender = asyncio.create_task(push())
    flood_reader = asyncio.create_task(drain(flood))
    async with asyncio.timeout(TIMEOUT):
        for word in VOCAB:  # each word is final at once (right context 0) while the flood runs
            await calm.send_words([word])
            message = await calm.recv()
            assert isinstance(message, Final) and [w.w for w in message.words] == [word]
        await calm.end()
        await sender
        assert (await flood_reader).ended_words == 20_000


# -- slow readers ----------------------------------------------------------------------------


def tiny_receive_buffer_socket(port: int) -> socket.socket:
    """A client socket whose kernel receive buffer is small, so an unread stream backs up soon."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


def shrink_send_buffer(session) -> None:
    """The server side of the same connection: a small kernel send buffer (a slow network)."""
    sock = session._ws.transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)


async def open_raw(server, **kw):
    """A websockets client that reads nothing after ``ready`` until told (no keepalive of its own)."""
    from streampunct.core.wire import Ready, decode_server

    ws = await ws_connect(server.url, sock=tiny_receive_buffer_socket(server.port), ping_interval=None,
                          max_queue=1, max_size=None, compression=None, **kw)
    assert isinstance(decode_server(await asyncio.wait_for(ws.recv(), TIMEOUT)), Ready)
    session = only_session(server)
    shrink_send_buffer(session)
    return ws, session


async def read_all(ws) -> tuple[Transcript, int | None, str | None]:
    from websockets import ConnectionClosed

    from streampunct.core.wire import decode_server

    transcript = Transcript()
    try:
        while True:
            transcript.apply(decode_server(await ws.recv()))
    except ConnectionClosed:
        pass
    return transcript, ws.close_code, ws.close_reason


async def test_a_client_that_stops_reading_is_closed_with_1013_after_the_send_timeout(start_server):
    server = await start_server(send_timeout_s=0.5, max_backlog_words=300, close_timeout_s=1.0)
    ws, session = await open_raw(server)
    await ws.send(encode(ConfigRequest(right_context=0)))
    words = corpus(200)

    async def push() -> None:
        for _ in range(400):
            await ws.send(encode(WordsMessage(tuple(Word(w) for w in words))))

    sender = asyncio.create_task(push())
    async with asyncio.timeout(TIMEOUT):
        await until(lambda: metric(server, "streampunct_slow_reader_closes_total") >= 1)
        # Memory stayed bounded while the client read nothing.
        assert session.peak_outbox <= server.config.max_outbox_messages + 4
        assert session.peak_backlog <= 300 + 200
        transcript, code, reason = await read_all(ws)  # reading again: what was sent, then the close
    sender.cancel()
    await asyncio.gather(sender, return_exceptions=True)
    assert code == 1013 and "not reading" in reason
    assert 0 < transcript.n_final < 400 * 200  # finals came in order up to where the server gave up
    assert transcript.words == (words * 400)[: transcript.n_final]
    await until(lambda: not server.sessions)


async def test_a_client_that_sends_nothing_for_the_idle_timeout_gets_its_finals_then_1001(start_server, fake_labels):
    """Words held for right context are finalized (no end-of-stream mark: the speech may go on),
    then the session closes with 1001 and the idle timeout's reason, and a resume may continue it."""
    server = await start_server(idle_timeout_s=0.5)
    async with ws_connect(server.url) as ws:
        decode_server(await ws.recv())  # ready
        await ws.send(encode(ConfigRequest(right_context=5, max_delay_ms=600_000)))
        words = corpus(3)
        await ws.send(encode(WordsMessage(tuple(Word(w) for w in words))))
        async with asyncio.timeout(TIMEOUT):
            transcript, code, reason = await read_all(ws)
    assert (code, reason) == (1001, "idle timeout")
    assert transcript.words == words and transcript.labels == fake_labels(words)
    assert transcript.ended_words is None  # no `end`: the client did not end the stream
    assert metric(server, "streampunct_idle_closes_total") == 1
    await until(lambda: not server.sessions)


async def test_a_client_that_sends_more_often_than_the_idle_timeout_is_kept(start_server):
    server = await start_server(idle_timeout_s=1.0)
    async with ws_connect(server.url) as ws:
        decode_server(await ws.recv())  # ready
        for word in corpus(8):  # 1.6 s in all, a frame every 0.2 s (the gaps, not the time, matter)
            await ws.send(encode(WordsMessage((Word(word),))))
            await asyncio.sleep(0.2)
        await ws.send(encode(EndRequest()))
        async with asyncio.timeout(TIMEOUT):
            transcript, code, _ = await read_all(ws)
    assert code == 1000 and transcript.n_final == 8 and transcript.ended_words == 8
    assert metric(server, "streampunct_idle_closes_total") == 0


def ping_flood(port: int, stop: threading.Event) -> str:
    """A client that sends pings and reads nothing (a 4 KB receive buffer); how it ended."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(f"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    ping = struct.pack("!BB", 0x89, 0x80 | 125) + b"\0\0\0\0" + b"x" * 125  # masked (zero mask)
    sock.settimeout(0.2)
    try:
        while not stop.is_set():
            try:
                sock.sendall(ping * 200)
            except TimeoutError:
                pass
        return "stopped"
    except OSError as e:  # reset or broken pipe: the server aborted the connection
        return type(e).__name__
    finally:
        sock.close()


async def test_a_client_that_sends_pings_and_reads_nothing_is_aborted(start_server, caplog):
    """websockets answers each ping itself, without flow control: unread pongs would pile up in
    the server's memory without end. Past the bound the connection is aborted and counted."""
    caplog.set_level(logging.INFO, logger="streampunct")
    server = await start_server(max_message_bytes=1024)
    stop = threading.Event()
    flood = asyncio.create_task(asyncio.to_thread(ping_flood, server.port, stop))
    try:
        async with asyncio.timeout(TIMEOUT):
            # A small kernel send buffer (a slow network): the pongs back up into the server's
            # own buffer within a second, not after megabytes of loopback buffer filled.
            await until(lambda: server.sessions)
            shrink_send_buffer(only_session(server))
            await until(lambda: metric(server, "streampunct_slow_reader_closes_total") >= 1)
            ended = await flood
    finally:
        stop.set()
        await asyncio.gather(flood, return_exceptions=True)
    assert ended in ("ConnectionResetError", "BrokenPipeError")
    await until(lambda: not server.sessions)
    # the abort's line names the session, as its "opened" and "closed" lines do
    opened = [r.getMessage().split()[0] for r in caplog.records if " opened from 127.0.0.1" in r.getMessage()]
    aborts = [r.getMessage() for r in caplog.records if "client not reading" in r.getMessage()]
    assert len(opened) == 1 and len(aborts) == 1 and aborts[0].startswith(f"{opened[0]}: client not reading")
    # a client that reads its pongs is not touched
    async with ws_connect(server.url) as ws:
        for _ in range(200):
            await (await ws.ping(b"x" * 125))
    assert metric(server, "streampunct_slow_reader_closes_total") == 1


async def test_a_partial_replaced_before_it_was_sent_is_dropped_from_the_outbox(start_server, fake_labels):
    """Each partial replaces the previous one: while a client does not read, the partials of its
    new hypotheses are not held one per hypothesis (each echoes its hypothesis: up to 500 KB):
    once PARTIALS_DROPPED_FROM messages wait, an unsent partial is dropped for a newer one. It
    gets those queued before, then the newest, in order; the finals around them all come."""
    from websockets import ConnectionClosed

    from streampunct.server.session import PARTIALS_DROPPED_FROM, _QueuedPartial

    server = await start_server(send_timeout_s=None)
    ws, session = await open_raw(server)
    gate = asyncio.Event()
    send = session._ws.send

    async def held_send(data, **kw):  # the client reads nothing until the gate opens
        await gate.wait()
        await send(data, **kw)

    session._ws.send = held_send
    await ws.send(encode(ConfigRequest(partials=True, right_context=0)))  # its answer waits
    words = corpus(200)
    hypotheses = [words[n : n + 8] for n in range(0, 160, 4)]  # 40 of them
    for k, hypothesis in enumerate(hypotheses):
        if k == 20:  # a final between two partials
            await ws.send(encode(WordsMessage((Word("hello"),))))
        await ws.send(encode(HypothesisMessage(tuple(Word(w) for w in hypothesis))))

    def newest() -> list[str] | None:
        queued = session._queued_partial
        return [w.w for w in queued.item.hypothesis] if queued is not None and queued.item is not None else None

    await until(lambda: newest() == hypotheses[-1] and session.protocol.n_final == 1)
    held = [m for m, _ in (x for x in session._outbox._queue if x is not None)
            if isinstance(m, _QueuedPartial) and m.item is not None]
    assert held[-1] is session._queued_partial and len(held) <= PARTIALS_DROPPED_FROM
    gate.set()
    await ws.send(encode(EndRequest()))
    types, partials = [], []
    async with asyncio.timeout(TIMEOUT):
        try:
            while True:
                message = decode_server(await ws.recv())
                types.append(message.type)
                if isinstance(message, Partial) and message.hypothesis:
                    partials.append([w.w for w in message.hypothesis])
        except ConnectionClosed:
            pass
    assert ws.close_code == 1000 and types[0] == "config" and types[-1] == "end"
    assert partials[-1] == hypotheses[-1] and types.count("final") >= 1
    assert len(partials) == len(held) and partials == sorted(partials, key=hypotheses.index)


async def test_a_paused_reader_is_waited_for_and_never_dropped_by_keepalive(start_server, fake_labels):
    # Pings every 20 ms. Under websockets' own rule (pong within ping_timeout) the keepalive
    # waits for each ping's pong, and drops a client whose pong is late with 1011: it never has
    # two pings unanswered at once. The server's must (it sets no pong timeout), and the
    # connection must stay open while the client reads nothing.
    # One session: its windows go to the engine one at a time (about 600 of them), and no other
    # can join their batch, so a batching wait (5 ms a window by default) would only idle.
    server = await start_server(send_timeout_s=None, ping_interval_s=0.02, max_backlog_words=300,
                                batching=BatcherConfig(max_wait_ms=0))
    ws, session = await open_raw(server)
    await ws.send(encode(ConfigRequest(right_context=0)))
    words = corpus(20_000)

    async def push() -> None:
        for k in range(0, len(words), 500):
            await ws.send(encode(WordsMessage(tuple(Word(w) for w in words[k : k + 500]))))
        await ws.send(encode(EndRequest()))

    sender = asyncio.create_task(push())
    await until(lambda: len(session._ws.pending_pings) >= 2  # pings the client did not answer
                and session._outbox.qsize() >= server.config.max_outbox_messages)  # waiting to send
    assert session.protocol.n_final < len(words)  # the server is held up by the reader, not done
    assert session.peak_outbox <= server.config.max_outbox_messages + 4
    async with asyncio.timeout(TIMEOUT):
        transcript, code, _ = await read_all(ws)
        await sender
    assert code == 1000 and transcript.words == words and transcript.ended_words == len(words)
    assert metric(server, "streampunct_slow_reader_closes_total") == 0


# -- cost of streaming: tokens per finalized word ------------------------------------------


async def test_window_token_counters_move_by_the_tokens_of_a_known_window(start_server, aligner):
    server = await start_server(batching=BatcherConfig(max_wait_ms=0))
    words = ["so", "what", "happened", "next", "internationalization"]
    expected_tokens = 2 + sum(len(aligner.word_ids(w)) for w in words)  # CLS + words + SEP
    async with await StreamClient.connect(server.url, right_context=100, max_delay_ms=600_000) as client:
        await client.send_words(words)
        await client.flush()  # one window: all five words, nothing before them
        async with asyncio.timeout(TIMEOUT):
            messages = [await client.recv(), await client.recv()]
        assert isinstance(messages[0], Final) and isinstance(messages[1], Flushed)
        assert metric(server, "streampunct_window_tokens_total", kind="final") == expected_tokens
        assert metric(server, "streampunct_windows_total", kind="final") == 1
        assert metric(server, "streampunct_window_tokens_total", kind="partial") == 0
        assert metric(server, "streampunct_engine_tokens_total") == expected_tokens  # a batch of one
        assert metric(server, "streampunct_words_finalized_total") == len(words)
        await client.end()


async def test_partial_windows_are_counted_apart(start_server, aligner):
    server = await start_server(batching=BatcherConfig(max_wait_ms=0))
    words = ["hello", "there"]
    async with await StreamClient.connect(server.url, right_context=100, max_delay_ms=600_000,
                                          partials=True) as client:
        await client.send_words(words)
        async with asyncio.timeout(TIMEOUT):
            await client.recv()  # the partial for the undecided tail
        tokens = 2 + sum(len(aligner.word_ids(w)) for w in words)
        assert metric(server, "streampunct_window_tokens_total", kind="partial") == tokens
        assert metric(server, "streampunct_windows_total", kind="partial") == 1
        assert metric(server, "streampunct_window_tokens_total", kind="final") == 0


@pytest.mark.parametrize("field", ["max_backlog_words", "max_outbox_messages", "send_timeout_s"])
def test_server_config_refuses_non_positive_limits(field):
    from streampunct.server.app import ServerConfig

    with pytest.raises(ValueError, match=field):
        ServerConfig(**{field: 0})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("field", ["send_timeout_s", "ping_interval_s", "close_timeout_s", "shutdown_timeout_s",
                                   "worker_hang_timeout_s"])
def test_server_config_refuses_non_finite_timeouts(field, value):
    from streampunct.server.app import ServerConfig

    with pytest.raises(ValueError, match=f"{field} must be a finite number, not {value}"):
        ServerConfig(**{field: value})


def test_server_config_refuses_a_negative_shutdown_timeout():
    from streampunct.server.app import ServerConfig

    assert ServerConfig(shutdown_timeout_s=0).shutdown_timeout_s == 0
    with pytest.raises(ValueError, match="shutdown_timeout_s must be >= 0"):
        ServerConfig(shutdown_timeout_s=-1)


def test_the_worker_hang_timeout_is_positive_or_none_and_0_on_the_command_line_is_never():
    from streampunct.cli import build_parser
    from streampunct.commands.serve import build_config
    from streampunct.server.app import ServerConfig

    for value in (0, -1, 1e-9, 0.99):
        with pytest.raises(ValueError, match=r"^worker_hang_timeout_s must be >= 1 \(None: never\)$"):
            ServerConfig(worker_hang_timeout_s=value)
    assert ServerConfig(worker_hang_timeout_s=1).worker_hang_timeout_s == 1
    assert build_config(build_parser().parse_args(["serve"])).worker_hang_timeout_s == 30.0
    parse = build_parser().parse_args
    assert build_config(parse(["serve", "--worker-hang-timeout-s", "0"])).worker_hang_timeout_s is None
    assert build_config(parse(["serve", "--worker-hang-timeout-s", "2.5"])).worker_hang_timeout_s == 2.5
    from streampunct.errors import InputError

    with pytest.raises(InputError, match=r"^--worker-hang-timeout-s must be at least 1, or 0: never$"):
        build_config(parse(["serve", "--worker-hang-timeout-s", "0.5"]))


def test_serve_flags_set_the_backlog_limit_and_the_send_timeout():
    from streampunct.cli import build_parser
    from streampunct.commands.serve import build_config
    from streampunct.errors import InputError

    default = build_config(build_parser().parse_args(["serve"]))
    assert (default.max_backlog_words, default.send_timeout_s) == (4096, 30.0)
    assert default.ping_interval_s == 20.0 and default.max_queued_frames == 4
    config = build_config(build_parser().parse_args(
        ["serve", "--max-backlog-words", "1000", "--send-timeout-s", "0"]))
    assert (config.max_backlog_words, config.send_timeout_s) == (1000, None)  # 0: wait for any reader
    with pytest.raises(InputError, match="--max-backlog-words must be an integer >= 1, not 0"):
        build_config(build_parser().parse_args(["serve", "--max-backlog-words", "0"]))
    assert build_config(build_parser().parse_args(["serve", "--shutdown-timeout-s", "25"])).shutdown_timeout_s == 25
    assert default.shutdown_timeout_s == 10.0 and default.max_frames_per_s == 1000.0
    assert build_config(build_parser().parse_args(["serve", "--max-frames-per-s", "0"])).max_frames_per_s is None
    with pytest.raises(InputError, match="--shutdown-timeout-s must be >= 0"):
        build_config(build_parser().parse_args(["serve", "--shutdown-timeout-s", "-1"]))
