"""Hostile and careless clients against a real server on port 0 (issue 41): malformed handshakes,
``Host`` and ``Origin``, HTTP methods, handshakes during a drain, invisible characters in words."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import platform
import re
import subprocess
import sys
import threading
import time

import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosedError, InvalidStatus

from streampunct.client.stream_client import StreamClient, Transcript
from streampunct.core.wire import Final
from tests.streampunct.conftest import FakeEngine
from tests.streampunct.fakes import until
from tests.streampunct.test_server_protocol import WORDS
from tests.streampunct.test_text_labels import INVISIBLE

TIMEOUT = 5.0
OTHER_METHODS = ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT")
HTTP_PATHS = ("/healthz", "/metrics", "/captions")


class Reply:
    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1]) if raw else None
        self.headers: dict[str, str] = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            self.headers[key.strip().lower()] = value.strip()


async def request(port: int, method: str = "GET", path: str = "/healthz", headers=(), *,
                  host: str | None = "default", websocket: bool = False, version: str = "HTTP/1.1",
                  body: bytes = b"") -> Reply:
    """One raw HTTP request with exactly these headers (``host=None``: no Host header); the whole reply."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"{method} {path} {version}"]
    if host is not None:
        lines.append(f"Host: {f'127.0.0.1:{port}' if host == 'default' else host}")
    if websocket:
        key = base64.b64encode(os.urandom(16)).decode()
        lines += ["Upgrade: websocket", "Connection: Upgrade", f"Sec-WebSocket-Key: {key}",
                  "Sec-WebSocket-Version: 13"]
    lines += [f"{k}: {v}" for k, v in headers]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    await writer.drain()
    try:
        async with asyncio.timeout(TIMEOUT):
            if not websocket:
                return Reply(await reader.read())
            # A 101 leaves the connection open: read its head only; a refusal ends with the connection.
            try:
                raw = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as e:
                return Reply(e.partial)
            return Reply(raw if Reply(raw).status == 101 else raw + await reader.read())
    finally:
        writer.close()


def rejected(server, reason: str) -> float:
    return server.metrics.registry.get_sample_value("streampunct_handshakes_rejected_total", {"reason": reason})


def refusal_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "streampunct.server.app" and r.getMessage().startswith("refused")]


# -- 1. malformed handshakes ----------------------------------------------------------------


@pytest.mark.parametrize("auth_token", [None, "s3cret"])
async def test_two_authorization_headers_get_400_counted_and_one_log_line(start_server, caplog, auth_token):
    caplog.set_level(logging.INFO)
    server = await start_server(auth_token=auth_token)
    reply = await request(server.port, "GET", "/v1/stream", websocket=True,
                          headers=[("Authorization", "Bearer s3cret"), ("Authorization", "Bearer other")])
    assert reply.status == 400 and b"more than one Authorization header" in reply.body
    assert rejected(server, "malformed") == 1.0
    lines = refusal_lines(caplog)
    assert len(lines) == 1 and "more than one Authorization header (400)" in lines[0].getMessage()
    assert "127.0.0.1:" in lines[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    # The server goes on as before.
    async with await StreamClient.connect(server.url, token=auth_token) as client:
        assert client.ready.session


async def test_a_handshake_over_the_session_limit_gets_503_counted_and_one_log_line(start_server, caplog):
    caplog.set_level(logging.INFO)
    server = await start_server(max_sessions=1)
    async with await StreamClient.connect(server.url):
        reply = await request(server.port, "GET", "/v1/stream", websocket=True)
    assert reply.status == 503 and b"session limit reached (1)" in reply.body
    assert rejected(server, "sessions") == 1.0
    [line] = refusal_lines(caplog)
    assert "refused GET /v1/stream from 127.0.0.1:" in line.getMessage()
    assert line.getMessage().endswith(": session limit reached (1) (503)")


@pytest.mark.parametrize("headers, message", [
    ([("Origin", "http://127.0.0.1"), ("Origin", "http://evil.example")], b"more than one Origin header"),
    ([("Host", "127.0.0.1")], b"more than one Host header"),
])
async def test_duplicate_origin_or_host_headers_get_400(start_server, caplog, headers, message):
    caplog.set_level(logging.INFO)
    server = await start_server()
    reply = await request(server.port, "GET", "/v1/stream", websocket=True, headers=headers)
    assert reply.status == 400 and message in reply.body
    assert rejected(server, "malformed") == 1.0 and len(refusal_lines(caplog)) == 1


@pytest.mark.parametrize("host", ["127.0.0.1:notaport", "127.0.0.1:99999", "[::1", "a:b:c"])
async def test_a_malformed_host_gets_400(start_server, host):
    server = await start_server()
    for path in ("/healthz", "/v1/stream"):
        reply = await request(server.port, "GET", path, host=host, websocket=path != "/healthz")
        assert reply.status == 400 and b"malformed Host header" in reply.body
    assert rejected(server, "malformed") == 2.0


async def test_a_handshake_websockets_refuses_is_counted_and_logged_in_one_line(start_server, caplog):
    caplog.set_level(logging.INFO)
    server = await start_server()
    reply = await request(server.port, "GET", "/v1/stream", headers=[
        ("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Key", "not base64!"),
        ("Sec-WebSocket-Version", "13")])
    assert reply.status == 400 and b"Sec-WebSocket-Key" in reply.body
    plain = await request(server.port, "GET", "/v1/stream")  # a browser opening the stream URL
    assert plain.status == 426
    assert rejected(server, "malformed") == 2.0
    lines = refusal_lines(caplog)
    assert len(lines) == 2 and "Sec-WebSocket-Key" in lines[0].getMessage() and "(426)" in lines[1].getMessage()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def test_rejection_reasons_are_in_the_metrics_from_the_start(start_server):
    server = await start_server()
    text = (await request(server.port, "GET", "/metrics")).body.decode()
    for reason in ("malformed", "host", "method", "origin", "auth", "unavailable", "sessions", "timeout"):
        assert f'streampunct_handshakes_rejected_total{{reason="{reason}"}} 0.0' in text
    assert "\nstreampunct_connections 1.0\n" in text  # the scrape's own connection


# -- 2. Origin -------------------------------------------------------------------------------


async def test_a_browser_handshake_from_another_origin_gets_403(start_server, caplog):
    caplog.set_level(logging.INFO)
    server = await start_server()
    port = server.port
    for origin in ("http://evil.example", f"http://evil.example:{port}", f"http://127.0.0.1:{port + 1}",
                   f"http://127.0.0.10:{port}", "null"):
        reply = await request(port, "GET", "/v1/stream", websocket=True, headers=[("Origin", origin)])
        assert reply.status == 403 and b"not allowed (--allow-origin)" in reply.body, origin
    assert rejected(server, "origin") == 5.0
    assert len(refusal_lines(caplog)) == 5
    with pytest.raises(InvalidStatus) as info:  # through a real WebSocket client too
        await ws_connect(server.url, origin="http://evil.example")
    assert info.value.response.status_code == 403


async def test_the_servers_own_origin_and_clients_without_origin_are_accepted(start_server):
    server = await start_server()
    port = server.port
    for host, origin in ((f"127.0.0.1:{port}", f"http://127.0.0.1:{port}"),
                         (f"localhost:{port}", f"http://localhost:{port}"),
                         (f"LOCALHOST:{port}", f"http://localhost:{port}"),
                         (f"[::1]:{port}", f"http://[::1]:{port}")):
        reply = await request(port, "GET", "/v1/stream", host=host, websocket=True, headers=[("Origin", origin)])
        assert reply.status == 101, (host, origin, reply.raw)
    async with ws_connect(server.url, origin=f"http://127.0.0.1:{port}") as connection:
        assert json.loads(await connection.recv())["type"] == "ready"
    async with await StreamClient.connect(server.url) as client:  # no Origin: ASR gateways, the CLI
        await client.send_words(WORDS[:3])
        await client.end()
        assert [m async for m in client][-1].type == "end"
    assert rejected(server, "origin") == 0.0


async def test_allow_origin_adds_origins_and_star_allows_any(start_server):
    server = await start_server(allow_origins=("https://captions.example", "null"))
    for origin, status in (("https://captions.example", 101), ("HTTPS://Captions.Example:443", 101),
                           ("null", 101), ("https://captions.example:8443", 403), ("http://captions.example", 403)):
        reply = await request(server.port, "GET", "/v1/stream", websocket=True, headers=[("Origin", origin)])
        assert reply.status == status, origin
    anyone = await start_server(allow_origins=("*",))
    reply = await request(anyone.port, "GET", "/v1/stream", websocket=True, headers=[("Origin", "http://x.example")])
    assert reply.status == 101


async def test_origin_is_checked_before_the_token(start_server):
    server = await start_server(auth_token="s3cret")
    reply = await request(server.port, "GET", "/v1/stream?token=s3cret", websocket=True,
                          headers=[("Origin", "http://evil.example")])
    assert reply.status == 403
    reply = await request(server.port, "GET", "/v1/stream?token=wrong", websocket=True,
                          headers=[("Origin", f"http://127.0.0.1:{server.port}")])
    assert reply.status == 401 and reply.headers["www-authenticate"] == "Bearer"
    assert rejected(server, "origin") == 1.0 and rejected(server, "auth") == 1.0


# -- 2. Host ---------------------------------------------------------------------------------


async def test_a_foreign_host_gets_421_on_every_path(start_server, caplog):
    caplog.set_level(logging.INFO)
    server = await start_server()
    for path in (*HTTP_PATHS, "/v1/stream", "/", "/nope"):
        reply = await request(server.port, "GET", path, host=f"rebind.evil.example:{server.port}",
                              websocket=path in ("/v1/stream", "/"))
        assert reply.status == 421 and b"does not answer to the host 'rebind.evil.example'" in reply.body, path
        assert b"streampunct_" not in reply.body and b"status" not in reply.body
    assert rejected(server, "host") == 6.0
    assert len(refusal_lines(caplog)) == 6


async def test_loopback_names_and_no_host_are_accepted_on_loopback(start_server):
    server = await start_server()
    for host in (f"127.0.0.1:{server.port}", "localhost", f"LocalHost.:{server.port}", "[::1]", "127.0.0.1:1"):
        assert (await request(server.port, "GET", "/healthz", host=host)).status == 200, host
    assert (await request(server.port, "GET", "/healthz", host=None, version="HTTP/1.0")).status == 200
    assert rejected(server, "host") == 0.0


async def test_allow_host_adds_names_behind_a_proxy(start_server):
    server = await start_server(allow_hosts=("captions.example.com",))
    assert (await request(server.port, "GET", "/healthz", host="captions.example.com")).status == 200
    assert (await request(server.port, "GET", "/healthz", host="Captions.Example.com:443")).status == 200
    assert (await request(server.port, "GET", "/healthz", host="localhost")).status == 200  # still its own
    assert (await request(server.port, "GET", "/healthz", host="other.example.com")).status == 421
    # A page served through the proxy opens its stream through it: its origin is the proxy's.
    reply = await request(server.port, "GET", "/v1/stream", host="captions.example.com", websocket=True,
                          headers=[("Origin", "https://captions.example.com")])
    assert reply.status == 101
    anyone = await start_server(allow_hosts=("*",))
    assert (await request(anyone.port, "GET", "/healthz", host="whatever.example")).status == 200


# -- 3. methods ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", OTHER_METHODS)
async def test_other_methods_get_405_with_allow(start_server, method):
    server = await start_server()
    for path in HTTP_PATHS:
        reply = await request(server.port, method, path)
        assert reply.status == 405 and reply.headers["allow"] == "GET, HEAD", (method, path)
        assert f"method '{method}' not allowed on {path}".encode() in reply.body
    reply = await request(server.port, method, "/v1/stream", websocket=True)
    assert reply.status == 405 and reply.headers["allow"] == "GET"
    assert rejected(server, "method") == 4.0


async def test_head_gets_the_headers_of_get_and_no_body(start_server):
    server = await start_server()
    for path in (*HTTP_PATHS, "/nope"):
        get = await request(server.port, "GET", path)
        head = await request(server.port, "HEAD", path)
        assert head.status == get.status and head.body == b"", path
        assert head.headers["content-type"] == get.headers["content-type"]
        if path in ("/captions", "/nope"):  # /healthz (uptime) and /metrics move between the two requests
            assert int(head.headers["content-length"]) == len(get.body) > 0
        else:
            assert int(head.headers["content-length"]) > 0
    reply = await request(server.port, "HEAD", "/v1/stream", websocket=True)
    assert reply.status == 405 and reply.headers["allow"] == "GET" and reply.body == b""


async def test_a_request_with_a_body_is_not_served(start_server):
    # websockets' HTTP parser reads no bodies: it closes such a connection without an answer.
    server = await start_server()
    reply = await request(server.port, "POST", "/healthz", headers=[("Content-Length", "2")], body=b"{}")
    assert reply.status is None
    assert (await request(server.port, "POST", "/healthz", headers=[("Content-Length", "0")])).status == 405


# -- 4. drain --------------------------------------------------------------------------------


class GatedEngine(FakeEngine):
    """A fake engine whose calls wait while ``gate`` is clear (set: they run at once)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()

    def infer(self, input_ids, attention_mask):
        if not self.gate.is_set():
            self.waiting.set()
            self.gate.wait(TIMEOUT)
        return super().infer(input_ids, attention_mask)


async def test_handshakes_during_a_drain_get_503_until_the_listener_closes(start_server):
    engine = GatedEngine()
    server = await start_server(engine=engine)
    client = await StreamClient.connect(server.url, right_context=0, max_delay_ms=600_000)
    engine.gate.clear()
    await client.send_words(WORDS[:6])
    assert await asyncio.to_thread(engine.waiting.wait, TIMEOUT)  # a window is at the engine
    shutdown = asyncio.create_task(server.shutdown())
    try:
        health = await request(server.port, "GET", "/healthz")
        assert health.status == 503 and json.loads(health.body)["status"] == "stopping"
        reply = await request(server.port, "GET", "/v1/stream", websocket=True)
        assert reply.status == 503 and b"not serving" in reply.body
        with pytest.raises(InvalidStatus) as info:
            await StreamClient.connect(server.url)
        assert info.value.response.status_code == 503
        assert rejected(server, "unavailable") == 2.0
        assert not shutdown.done()
    finally:
        engine.gate.set()
    finals = [m async for m in client if isinstance(m, Final)]
    assert [w.w for f in finals for w in f.words] == WORDS[:6] and client.close_code == 1001
    await asyncio.wait_for(shutdown, TIMEOUT)
    with pytest.raises(OSError):  # now the listener is closed
        await asyncio.open_connection("127.0.0.1", server.port)


async def test_frames_after_end_do_not_hold_the_close_up(start_server):
    """Frames after ``end`` are ignored, but still read: the client's close frame behind them is
    seen at once, and the session ends long before the close timeout (30 s here)."""
    server = await start_server(close_timeout_s=30.0)
    ws = await ws_connect(server.url)
    await ws.recv()  # ready
    await ws.send(json.dumps({"type": "words", "words": WORDS[:5]}))
    await ws.send(json.dumps({"type": "end"}))
    for word in WORDS[:20]:  # more than websockets queues unread (then it stops reading the socket)
        await ws.send(json.dumps({"type": "words", "words": [word]}))
    async for _ in ws:
        pass
    assert ws.close_code == 1000
    await until(lambda: not server.sessions, timeout=TIMEOUT)


async def test_a_client_leaving_after_end_ends_its_session_while_its_window_waits(start_server):
    """The client sends ``end`` and leaves while its window is queued behind another session's in
    the engine: its session ends with the connection, not when the engine reaches its window."""
    from tests.streampunct.fakes import GatedEngine as CountingGate

    engine = CountingGate(open=True)  # open for the warm-up
    server = await start_server(engine=engine)
    engine.close_gate()
    warm_up = engine.entered
    other = await StreamClient.connect(server.url, right_context=0)
    await other.send_words(["hold"])
    await engine.wait_entered(warm_up + 1)  # the engine is busy with the other session's window
    leaving = await StreamClient.connect(server.url, right_context=5, max_delay_ms=600_000)
    await leaving.send_words(WORDS[:4])
    await leaving.end()
    await until(lambda: server.batcher.queue_depth == 1)  # its window waits for the engine
    await leaving.close()
    await until(lambda: len(server.sessions) == 1, timeout=TIMEOUT)
    assert engine.entered == warm_up + 1 and server.batcher.queue_depth == 0  # its window left the queue
    engine.open()
    await other.close()


# -- 5. invisible characters -----------------------------------------------------------------


async def test_invisible_characters_never_reach_finals(start_server):
    server = await start_server()
    words = [f"ab{c}cd" for c in INVISIBLE.values()] + ["\u202eevil\u202c", "\u200b", "\x00", "ok\u2066\u2069"]
    async with await StreamClient.connect(server.url, right_context=0, capitalize=True) as client:
        await client.send_raw(json.dumps({"type": "words", "words": words}))
        await client.end()
        finals = [m async for m in client if isinstance(m, Final)]
    assert [w.w for f in finals for w in f.words] == ["abcd"] * len(INVISIBLE) + ["evil", "ok"]
    shown = "".join(f.text for f in finals)
    assert shown.replace(" ", "").replace(".", "").replace(",", "").replace("?", "").lower() == \
        "abcd" * len(INVISIBLE) + "evilok"
    assert all(ch.isprintable() for ch in shown)


# -- flags -----------------------------------------------------------------------------------


def test_serve_flags_allow_hosts_and_origins_and_refuse_bad_values_in_one_line():
    from streampunct.cli import build_parser
    from streampunct.commands.serve import build_config
    from streampunct.errors import InputError

    default = build_config(build_parser().parse_args(["serve"]))
    assert default.allow_hosts == () and default.allow_origins == ()
    config = build_config(build_parser().parse_args([
        "serve", "--allow-host", "captions.example.com", "--allow-host", "10.0.0.5",
        "--allow-origin", "https://app.example", "--allow-origin", "*"]))
    assert config.allow_hosts == ("captions.example.com", "10.0.0.5")
    assert config.allow_origins == ("https://app.example", "*")
    with pytest.raises(InputError, match=r"^--allow-host: 'proxy:443' is not a host name or address \(no port\)"):
        build_config(build_parser().parse_args(["serve", "--allow-host", "proxy:443"]))
    with pytest.raises(InputError, match=r"^--allow-origin: 'https://app.example/page' is not an origin"):
        build_config(build_parser().parse_args(["serve", "--allow-origin", "https://app.example/page"]))


# -- 6. memory -------------------------------------------------------------------------------


async def test_the_word_cache_is_bounded_by_word_cache_words(start_server, aligner):
    server = await start_server(word_cache_words=50)
    assert server.aligner.word_cache_size == 50
    words = [f"zqx{k}vbw{k}" for k in range(200)]  # unique, several sub-tokens each
    async with await StreamClient.connect(server.url, right_context=0) as client:
        await client.send_words(words)
        await client.end()
        finals = [w.w for m in [m async for m in client] if isinstance(m, Final) for w in m.words]
    assert finals == words
    assert server.aligner._word_ids.cache_info().currsize == 50


def test_serve_flag_sets_the_word_cache():
    from streampunct.cli import build_parser
    from streampunct.commands.serve import build_config
    from streampunct.errors import InputError

    assert build_config(build_parser().parse_args(["serve"])).word_cache_words == 20_000
    assert build_config(build_parser().parse_args(["serve", "--word-cache-words", "0"])).word_cache_words == 0
    with pytest.raises(InputError, match="^--word-cache-words must be an integer >= 0, not -1$"):
        build_config(build_parser().parse_args(["serve", "--word-cache-words", "-1"]))


def test_cached_words_share_one_int_object_per_token_id(aligner):
    first, second = aligner.word_ids("zqxvbwkj"), aligner.word_ids("vbwkjzqx")
    shared = set(first) & set(second)
    assert shared and all(i > 256 for i in shared)
    for token in shared:
        assert first[first.index(token)] is second[second.index(token)]
    assert aligner.word_ids("zqxvbwkj") == tuple(aligner.tokenizer.encode("zqxvbwkj", add_special_tokens=False).ids)


ARENA_PROBE = """
import ctypes, sys, threading
from streampunct.commands.serve import limit_malloc_arenas
print(limit_malloc_arenas(1), file=sys.stderr)
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
together = threading.Barrier(4)
def allocate():
    together.wait()
    blocks = [libc.malloc(4096) for _ in range(100)]
    together.wait()
threads = [threading.Thread(target=allocate) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
libc.malloc_stats()
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc arenas")
@pytest.mark.parametrize("env_value, applied, arenas", [(None, "True", 1), ("3", "False", 3)])
def test_serve_caps_glibc_malloc_arenas_unless_the_environment_does(env_value, applied, arenas):
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    if env_value is not None:
        env["MALLOC_ARENA_MAX"] = env_value
    done = subprocess.run([sys.executable, "-c", ARENA_PROBE], env=env, capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    lines = done.stderr.splitlines()
    assert done.returncode == 0 and lines[0] == applied, done.stderr
    assert sum(line.startswith("Arena ") for line in lines) == arenas  # 5 without any cap: one per thread


@pytest.mark.parametrize(("argv", "env", "message"), [
    (["--auth-token", ""], None, "--auth-token is empty: give the token"),
    (["--auth-token", "  "], None, "--auth-token is empty"),
    ([], "", "$STREAMPUNCT_AUTH_TOKEN is empty"),
    (["--host", ""], None, "host must name an address (0.0.0.0 or :: for every interface), not ''"),
    (["--auth-token", "two words"], None, "--auth-token holds spaces, control or non-ASCII characters"),
    ([], "t\x01k", "$STREAMPUNCT_AUTH_TOKEN holds spaces, control or non-ASCII characters"),
])
def test_an_empty_token_or_host_is_refused_not_read_as_none_or_everywhere(argv, env, message, monkeypatch):
    """`serve --auth-token "$UNSET"` left the server open; `--host "$UNSET"` bound every interface."""
    from streampunct.cli import build_parser
    from streampunct.commands.serve import TOKEN_ENV, build_config
    from streampunct.errors import InputError

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    if env is not None:
        monkeypatch.setenv(TOKEN_ENV, env)
    with pytest.raises(InputError) as caught:
        build_config(build_parser().parse_args(["serve", *argv]))
    assert message in str(caught.value)
    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    assert build_config(build_parser().parse_args(["serve"])).auth_token == "s3cret"
    assert build_config(build_parser().parse_args(["serve", "--auth-token", "t"])).auth_token == "t"
    # a secret file's trailing newline (which no client could send in a header) is dropped
    monkeypatch.setenv(TOKEN_ENV, "s3cret\n")
    assert build_config(build_parser().parse_args(["serve"])).auth_token == "s3cret"


async def raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data``; the reply's head and body (by Content-Length), or b"" when the server closed
    without one. The client closes the connection after."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        async with asyncio.timeout(TIMEOUT):
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as e:
                return e.partial
            length = int(Reply(head).headers.get("content-length", "0"))
            return head + await reader.readexactly(length)
    finally:
        writer.close()


@pytest.mark.parametrize(("data", "status"), [
    (b"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 414),
    (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello", None),
    (b"GET /h\xffz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", None),
    (b"GET /healthz HTTP/1.1\nHost: 127.0.0.1\n\n", None),  # bare LF: was taken for a client that closed
    # a head over 64 KiB in all, never finished: held about a megabyte a connection until its timeout
    # (now answered 431, as one header line over 8 KB is)
    (b"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(b"X-%d: %s\r\n" % (k, b"a" * 8000)
                                                                    for k in range(9)), 431),
])
async def test_requests_websockets_refuses_unparsed_are_counted_logged_and_name_the_worker(
        start_server, caplog, data, status):
    """Refused before process_request sees them; still one count, one log line, the worker header."""
    caplog.set_level(logging.INFO)
    server = await start_server(workers=2, worker=1)
    reply = await raw_exchange(server.port, data)
    if status is None:
        assert reply == b""  # closed without an answer (websockets' rule)
    else:
        assert Reply(reply).status == status and Reply(reply).headers["x-streampunct-worker"] == "1"
    await until(lambda: rejected(server, "malformed") == 1.0)
    (line,) = [r.getMessage() for r in refusal_lines(caplog)]
    assert line.startswith("refused a request from 127.0.0.1:") and "\n" not in line
    # a connection closed before it sent a request (a TCP health check) is neither counted nor logged
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.close()
    assert (await request(server.port)).status == 200
    assert rejected(server, "malformed") == 1.0 and len(refusal_lines(caplog)) == 1


async def test_an_oversize_head_sent_in_pieces_still_gets_its_431(start_server, caplog):
    """A client still sending its head when the server refuses it: closing with its bytes unread
    would reset the connection and discard the answer; the server reads on (and drops) until the
    client closes, so the 431 arrives."""
    caplog.set_level(logging.INFO)
    server = await start_server()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(b"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for k in range(9):  # 72 KB, 8 KB a write: past the limit
            writer.write(b"X-%d: %s\r\n" % (k, b"a" * 8000))
            await writer.drain()
        async with asyncio.timeout(TIMEOUT):
            first = await reader.readexactly(1)  # the server has answered...
            for k in range(9, 20):  # ...while the client still sends its head
                writer.write(b"X-%d: %s\r\n" % (k, b"a" * 8000))
                await writer.drain()
            head = first + await reader.readuntil(b"\r\n\r\n")
            body = await reader.readexactly(int(Reply(head).headers["content-length"]))
            assert await reader.read() == b""  # then the server's end is closed
    finally:
        writer.close()
    assert Reply(head).status == 431 and body == b"Request head over 65536 bytes.\n"
    await until(lambda: rejected(server, "malformed") == 1.0)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text
    assert (await request(server.port)).status == 200


@pytest.mark.parametrize(("behind", "status"), [
    (b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", None),  # a second request: not frames
    (b"\x00" * 70_000, None),  # a frame no client may send
    (b"X", 200),  # the start of a frame, perhaps: the request is answered
])
async def test_bytes_behind_a_request_that_are_not_frames_end_it_unanswered_and_counted(
        start_server, caplog, behind, status):
    """websockets reads what follows a request as frames at once; when that ended the connection
    before the answer, it logged an internal error with a traceback. Now the request goes
    unanswered, counted and logged as a malformed one, and the server goes on serving."""
    caplog.set_level(logging.INFO)
    server = await start_server()
    reply = await raw_exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + behind)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text
    if status is None:
        assert reply == b""
        await until(lambda: rejected(server, "malformed") == 1.0)
        (line,) = [r.getMessage() for r in refusal_lines(caplog)]
        assert "a second request behind the first" in line
    else:
        assert Reply(reply).status == status and rejected(server, "malformed") == 0.0
    assert (await request(server.port)).status == 200


def _masked_text_frame(text: str) -> bytes:
    data = text.encode()
    assert len(data) < 126
    mask = b"\x01\x02\x03\x04"
    return bytes([0x81, 0x80 | len(data)]) + mask + bytes(b ^ mask[k % 4] for k, b in enumerate(data))


async def test_frames_sent_with_the_handshake_are_read_after_the_101(start_server):
    """A client that sends its first frames before the server's 101 (in the same packet as the
    handshake) loses none of them."""
    server = await start_server()
    frames = (_masked_text_frame(json.dumps({"type": "config", "right_context": 1}))
              + _masked_text_frame(json.dumps({"type": "words", "words": [{"w": "hello"}, {"w": "world"}]}))
              + _masked_text_frame(json.dumps({"type": "end"})))
    handshake = (b"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(handshake + frames)
    await writer.drain()
    try:
        async with asyncio.timeout(TIMEOUT):
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101 ")
            types, words = [], []
            while not types or types[-1] != "end":
                first, size = await reader.readexactly(2)
                assert first == 0x81 and size < 127, (first, size)  # unmasked text frames under 64 KB
                if size == 126:
                    size = int.from_bytes(await reader.readexactly(2), "big")
                message = json.loads(await reader.readexactly(size))
                types.append(message["type"])
                if message["type"] == "final":
                    words += [w["w"] for w in message["words"]]
    finally:
        writer.close()
    assert types[:2] == ["ready", "config"] and types[-1] == "end"
    assert words == ["hello", "world"]


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG])
async def test_health_checks_and_sessions_log_no_websockets_connection_lines_at_info(start_server, caplog, level):
    """A balancer checks /healthz twice a second: at INFO its answers and every connection's
    open/close (websockets' lines) stay out of the log, the server's own session and refusal
    lines stay in; at DEBUG websockets' lines are there too."""
    caplog.set_level(logging.INFO)
    logging.getLogger("streampunct.server.app.websockets").setLevel(level)
    try:
        server = await start_server()
        for _ in range(3):
            assert (await request(server.port, "GET", "/healthz")).status == 200
        assert (await request(server.port, "GET", "/metrics")).status == 200
        assert (await request(server.port, "GET", "/healthz", host="elsewhere.example")).status == 421
        async with ws_connect(f"ws://127.0.0.1:{server.port}/v1/stream") as ws:
            await ws.recv()  # ready
            await ws.send(json.dumps({"type": "words", "words": [{"w": w} for w in WORDS[:5]]}))
            await ws.send(json.dumps({"type": "end"}))
            async for frame in ws:
                if json.loads(frame)["type"] == "end":
                    break
        await until(lambda: any(" closed: " in r.getMessage() and r.name == "streampunct.server.app"
                                for r in caplog.records))
    finally:
        logging.getLogger("streampunct.server.app.websockets").setLevel(logging.NOTSET)
    connection_lines = [r.getMessage() for r in caplog.records if r.name == "streampunct.server.app.websockets"
                        and r.levelno == logging.INFO and not r.getMessage().startswith("server ")]
    own = [r.getMessage() for r in caplog.records if r.name == "streampunct.server.app"]
    assert any(m.startswith("refused") and "421" in m for m in own), own
    # one form of peer address in every line; the close says how the session went
    assert any(re.fullmatch(r"session=\w+ opened from 127\.0\.0\.1:\d+", m) for m in own), own
    assert any(re.fullmatch(r"session=\w+ closed: code 1000, \d+\.\d s, 5 words, 5 finals sent, 0 errors sent", m)
               for m in own), own
    if level == logging.INFO:
        assert connection_lines == []
    else:
        assert connection_lines.count("HTTP response sent (200 OK)") == 4
        assert "connection open" in connection_lines and "connection closed" in connection_lines


@pytest.mark.parametrize("control", [b"\x89", b"\x8a"], ids=["pings", "unsolicited pongs"])
async def test_a_flood_of_pings_is_read_at_the_frame_rate_while_others_are_served(start_server, control):
    """Pings cost the event loop as words do: a client sending them as fast as its socket
    takes them kept the loop parsing, and health checks and other sessions waited seconds.
    A connection's pings and pongs are read at --max-frames-per-s (after a burst of as many):
    past it, its socket is held, that client's next ping is answered only once the rate allows,
    and a health check that comes meanwhile is answered first."""
    server = await start_server(max_frames_per_s=100.0)
    async with ws_connect(server.url, ping_interval=None) as ws:
        await ws.recv()  # ready
        order: list[str] = []

        async def health() -> None:
            assert (await request(server.port, "GET", "/healthz")).status == 200
            order.append("healthz")

        masked_empty_frame = control + b"\x80\x00\x00\x00\x00"
        flooded = time.monotonic()
        ws.transport.write(masked_empty_frame * 300)  # 100 a burst, 200 past the rate: 2 s of it
        checked = asyncio.create_task(health())
        async with asyncio.timeout(TIMEOUT):
            await (await ws.ping())  # read with the flood or after it
            await (await ws.ping())  # read once the rate allows it again
        order.append("pong")
        waited = time.monotonic() - flooded
        await checked
    assert waited >= 1.0
    assert order == ["healthz", "pong"]
    get = server.metrics.registry.get_sample_value
    assert get("streampunct_input_throttled_total") >= 1
    assert get("streampunct_input_wait_seconds_total", {"reason": "throttled"}) >= 1.0


async def test_a_config_is_logged_with_its_lexicon_as_a_size(start_server, caplog):
    """A config may come many times before the first words, each with a lexicon of up to
    50,000 characters: the log line names the lexicon's size, not its pairs, and only the
    first is at INFO (one client's configs grew the log by 200 KB/s)."""
    caplog.set_level(logging.DEBUG)
    server = await start_server()
    lexicon = [[f"name{k}", f"Name-{k}-written"] for k in range(500)]
    async with ws_connect(f"ws://127.0.0.1:{server.port}/v1/stream") as ws:
        await ws.recv()  # ready
        for _ in range(3):
            await ws.send(json.dumps({"type": "config", "lexicon": lexicon}))
            assert json.loads(await ws.recv())["type"] == "config"
    records = [r for r in caplog.records if "config {" in r.getMessage()]
    assert [r.levelno for r in records] == [logging.INFO, logging.DEBUG, logging.DEBUG]
    lines = [r.getMessage() for r in records]
    assert all("'lexicon': '500 pairs'" in line and "Name-7-written" not in line and len(line) < 400
               for line in lines)


async def test_tokens_and_control_characters_stay_out_of_the_log(start_server, caplog):
    """A header websockets' parser refuses is quoted in its error (a token with a stray control
    character); a refused handshake's error may hold bytes that split log lines (NEL, CSI); at
    DEBUG websockets logs request lines and headers: no token and no raw control character
    reaches the log."""
    caplog.set_level(logging.DEBUG)
    logging.getLogger("streampunct.server.app.websockets").setLevel(logging.DEBUG)
    try:
        server = await start_server(auth_token="s3cretTOKEN")
        await raw_exchange(server.port, b"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                        b"Authorization: Bearer s3cretTOKEN\x01\r\n\r\n")
        await raw_exchange(server.port, b"GET /v1/stream?token=s3cretTOKEN HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                        b"Upgrade: web\x85"
                                        b"socket\x9bFORGED\r\nConnection: Upgrade\r\n"
                                        b"Sec-WebSocket-Key: x\r\nSec-WebSocket-Version: 13\r\n\r\n")
        async with ws_connect(f"ws://127.0.0.1:{server.port}/v1/stream?token=s3cretTOKEN") as ws:
            await ws.recv()  # ready
        async with ws_connect(f"ws://127.0.0.1:{server.port}/v1/stream",
                              additional_headers={"Authorization": "Bearer s3cretTOKEN"}) as ws:
            await ws.recv()
        await until(lambda: rejected(server, "malformed") == 2.0)
    finally:
        logging.getLogger("streampunct.server.app.websockets").setLevel(logging.NOTSET)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("streampunct.")]  # not the client's
    assert any("token=<redacted>" in line for line in lines)  # the DEBUG request line, redacted
    assert not [line for line in lines if "s3cret" in line]
    refusals = [line for line in lines if line.startswith("refused")]
    assert len(refusals) == 2
    assert all(line.isprintable() and len(line.splitlines()) == 1 for line in refusals)


def test_serve_raises_its_open_files_limit_to_the_hard_limit():
    """In a child process (the limit is the process's): a soft limit of 256 under a higher hard
    one is raised to the hard one, so idle sockets do not exhaust a low default."""
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"hard limit {hard}: nothing to raise")
    code = ("import resource\n"
            "from streampunct.commands.serve import raise_open_files_limit, MAX_OPEN_FILES\n"
            "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
            "before, after = raise_open_files_limit()\n"
            "want = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else hard\n"
            "print(before, after, resource.getrlimit(resource.RLIMIT_NOFILE)[0] == want)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr
    before, after, applied = done.stdout.split()
    assert before == "256" and int(after) > 256 and applied == "True"


async def test_connections_are_counted_and_idle_ones_cut_at_the_handshake_timeout(start_server, monkeypatch):
    """Every TCP connection counts in streampunct_connections from the moment it is made (one
    that never sends a request holds a descriptor too); one that sends no whole request is cut
    at the handshake timeout and counted as rejected for "timeout"; one its client closes
    first is not."""
    from streampunct.server import app as app_module

    monkeypatch.setattr(app_module, "HANDSHAKE_TIMEOUT_S", 0.5)
    server = await start_server()
    gauge = server.metrics.connections
    assert gauge._value.get() == 0
    idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(3)]
    await until(lambda: gauge._value.get() == 3)
    _, closed_early = idle.pop()
    closed_early.close()
    await until(lambda: gauge._value.get() == 2)
    for reader, _ in idle:  # the server cuts them: EOF
        assert await asyncio.wait_for(reader.read(), 5) == b""
    await until(lambda: rejected(server, "timeout") == 2.0 and gauge._value.get() == 0)
    for _, writer in idle:
        writer.close()
    assert (await request(server.port)).status == 200  # a request in time is served
    assert rejected(server, "timeout") == 2.0


async def test_a_shutdown_cuts_connections_that_sent_no_request_and_finishes_open_sessions(
        start_server, monkeypatch):
    """A browser keeps a spare connection open and a balancer's TCP check sends nothing: a
    shutdown does not wait the handshake timeout for them (an hour here), while an open session
    finalizes its words."""
    from streampunct.server import app as app_module

    monkeypatch.setattr(app_module, "HANDSHAKE_TIMEOUT_S", 3600.0)
    server = await start_server()
    idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
    try:
        await until(lambda: server.metrics.connections._value.get() == 2)
        session = await StreamClient.connect(server.url)
        await session.send_words(["hello", "there"])
        shutdown = asyncio.create_task(server.shutdown())
        for reader, _ in idle:  # cut: EOF or a reset, with no answer
            try:
                assert await asyncio.wait_for(reader.read(), 30) == b""
            except ConnectionResetError:
                pass
        await asyncio.wait_for(asyncio.shield(shutdown), 30)  # the idle ones not waited for
        transcript = Transcript()
        async for message in session:
            transcript.apply(message)
        assert transcript.words == ["hello", "there"]  # the session finalized
    finally:  # a failure must not leave the fixture's shutdown waiting an hour for them
        for _, writer in idle:
            writer.close()


async def test_log_lines_name_the_client_behind_a_trusted_proxy(start_server, caplog):
    """Behind HAProxy every peer is the balancer: with --trusted-proxy its X-Forwarded-For names
    the client; the same header from any other peer is ignored."""
    caplog.set_level(logging.INFO)
    forwarded = [("X-Forwarded-For", "6.6.6.6, 203.0.113.9")]
    trusting = await start_server(trusted_proxies=("127.0.0.1",))
    assert (await request(trusting.port, "GET", "/v1/stream", forwarded, host="evil.example")).status == 421
    reply = await request(trusting.port, "GET", "/v1/stream", forwarded, websocket=True)
    assert reply.status == 101
    await until(lambda: any("opened from" in r.getMessage() for r in caplog.records))
    other = await start_server()
    assert (await request(other.port, "GET", "/v1/stream", forwarded, host="evil.example")).status == 421
    lines = [r.getMessage() for r in caplog.records if r.name == "streampunct.server.app"]
    assert any(re.fullmatch(r"refused GET /v1/stream from 203\.0\.113\.9 via 127\.0\.0\.1:\d+: .* \(421\)", m)
               for m in lines), lines
    assert any(re.fullmatch(r"session=\w+ opened from 203\.0\.113\.9 via 127\.0\.0\.1:\d+", m) for m in lines), lines
    assert any(re.fullmatch(r"refused GET /v1/stream from 127\.0\.0\.1:\d+: .* \(421\)", m) for m in lines), lines
    assert not any("6.6.6.6" in m for m in lines)


def test_a_trusted_proxy_must_be_an_ip_address():
    from streampunct.server.app import ServerConfig

    with pytest.raises(ValueError, match="^trusted_proxies: 'proxy.local' is not an IP address$"):
        ServerConfig(trusted_proxies=("proxy.local",))


def test_serve_names_the_flags_of_bad_proxies_and_cache_lengths(capsys):
    from streampunct.cli import build_parser
    from streampunct.commands.serve import build_config
    from streampunct.errors import InputError

    parser = build_parser()
    with pytest.raises(InputError, match="^--trusted-proxy: 'notanip' is not an IP address$"):
        build_config(parser.parse_args(["serve", "--trusted-proxy", "notanip"]))
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--stream-cache-tokens", "0"])
    assert "argument --stream-cache-tokens: must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("fields, message", [
    ({"port": 70000}, "port must be an integer between 0 and 65535, not 70000"),
    ({"port": -1}, "port must be an integer between 0 and 65535, not -1"),
    ({"max_sessions": float("nan")}, "max_sessions must be an integer >= 1, not nan"),
    ({"max_backlog_words": 2.5}, "max_backlog_words must be an integer >= 1, not 2.5"),
    ({"max_sessions": True}, "max_sessions must be an integer >= 1, not True"),
])
def test_server_config_takes_whole_numbers_in_range(fields, message):
    """A port over 65535 reached bind() as an OverflowError traceback; NaN passed every ``< 1``
    check (NaN as max_queue lifted the queue's bound)."""
    from streampunct.server.app import ServerConfig

    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ServerConfig(**fields)


@pytest.mark.parametrize("fields, message", [
    ({"max_queue": float("nan")}, "max_queue must be an integer >= 1, not nan"),
])
def test_batcher_config_takes_whole_numbers(fields, message):
    from streampunct.server.batcher import BatcherConfig

    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        BatcherConfig(**fields)


@pytest.mark.parametrize("fields, message", [
    ({"max_words_per_message": 0}, "max_words_per_message must be an integer >= 1, not 0"),
    ({"max_context_words": -1}, "max_context_words must be an integer >= 0 or None, not -1"),
])
def test_message_limits_are_checked(fields, message):
    from streampunct.core.wire import Limits

    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Limits(**fields)


def test_the_session_log_gives_the_close_code_the_server_sent_when_the_client_never_answered():
    """A client that stops reading is closed with 1013 and never answers the close: websockets'
    ``close_code`` is then 1006, which the session's log line used to give."""
    from types import SimpleNamespace

    from websockets.exceptions import ProtocolError
    from websockets.frames import Close

    from streampunct.server.app import session_close_code

    def connection(sent, received, received_first, close_code, parser_exc=None):
        protocol = SimpleNamespace(close_sent=sent, close_rcvd=received, close_rcvd_then_sent=received_first,
                                   parser_exc=parser_exc)
        return SimpleNamespace(protocol=protocol, close_code=close_code)

    assert session_close_code(connection(Close(1013, "not reading"), None, None, 1006)) == \
        "1013 (the client did not answer)"
    # ... and sent a bad frame instead of its answer: the close was the server's 1013, not the failure's
    assert session_close_code(connection(Close(1013, "not reading"), None, None, 1006,
                                         ProtocolError("invalid opcode"))) == "1013 (the client did not answer)"
    assert session_close_code(connection(Close(1002, "invalid opcode"), None, None, 1006,
                                         ProtocolError("invalid opcode"))) == "1002 (protocol error)"
    assert session_close_code(connection(Close(1000, ""), Close(1000, ""), False, 1000)) == "1000"
    # the client closed first (its own code; the server echoed it)
    assert session_close_code(connection(Close(4001, ""), Close(4001, "bye"), True, 4001)) == "4001"
    # the connection dropped: no close frame either way
    assert session_close_code(connection(None, None, None, 1006)) == "1006"


@pytest.mark.parametrize("frame, code, why", [
    ("x" * (2 << 20), 1009, "message too big"),  # the brief's 2 MiB text frame (the limit: 1 MiB)
    (b'{"type": "words", "words": ["caf\xe9"]}', 1007, "invalid UTF-8"),  # sent as a text frame
    (None, 1002, "protocol error"),  # an unmasked frame (a client must mask): written on the socket
])
async def test_a_connection_websockets_fails_is_logged_with_why_not_that_the_client_did_not_answer(
        start_server, caplog, frame, code, why):
    """websockets fails the connection on such a frame: it sends its close and reads nothing more,
    so the client's answer (which it sends) is never seen; the log line said the client did not
    answer."""
    caplog.set_level(logging.INFO)
    server = await start_server()
    async with ws_connect(server.url, max_size=None) as ws:
        await ws.recv()  # ready
        if frame is None:
            ws.transport.write(b"\x81\x01a")
        else:
            await ws.send(frame, text=True)
        with pytest.raises(ConnectionClosedError):
            async for _ in ws:
                pass
        assert ws.protocol.close_rcvd.code == code and ws.protocol.close_sent.code == code  # it answered
    await until(lambda: not server.sessions, timeout=TIMEOUT)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "streampunct.server.app" and " closed: " in
               r.getMessage()]
    assert re.fullmatch(rf"session=\w+ closed: code {code} \({why}\), [0-9.]+ s, 0 words, 0 finals sent, "
                        r"0 errors sent", line), line
