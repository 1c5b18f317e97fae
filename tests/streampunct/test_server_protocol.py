"""Protocol conformance of a real server on port 0, message by message."""

from __future__ import annotations

import asyncio
import json
import logging

import numpy as np
import pytest
from websockets.exceptions import InvalidStatus

from engines.base import EngineBase
from streampunct.client.stream_client import StreamClient, Transcript
from streampunct.core.wire import (
    ConfigApplied,
    ConfigRequest,
    Ended,
    Error,
    ErrorCode,
    Final,
    Flushed,
    Partial,
    ServerMessage,
    SessionOptions,
)
from streampunct.labels import ID_TO_MARK
from streampunct.text.normalize import normalize_words, render
from tests.streampunct.fakes import GatedEngine, ended, ended_or_final_before, until

TIMEOUT = 5.0
WORDS = "so this is the story of how we came to build a streaming punctuation server for captions".split()


async def read_until(client: StreamClient, kind: str, transcript: Transcript | None = None) -> list[ServerMessage]:
    """Messages up to and including the first of type ``kind``."""
    out = []
    while True:
        message = await client.recv(timeout=TIMEOUT)
        if transcript is not None:
            transcript.apply(message)
        out.append(message)
        if message.type == kind:
            return out


async def finish(client: StreamClient, transcript: Transcript | None = None) -> tuple[Transcript, list]:
    """Send ``end`` and read everything until the server closes."""
    transcript = transcript or Transcript()
    await client.end()
    messages = []
    async with asyncio.timeout(TIMEOUT):
        async for message in client:
            transcript.apply(message)
            messages.append(message)
    return transcript, messages


async def barrier(client: StreamClient) -> None:
    """Round trip: once this returns, the server has handled everything sent before."""
    await client.send_raw('{"type": "ping-barrier"}')
    message = await client.recv(timeout=TIMEOUT)
    assert isinstance(message, Error) and "ping-barrier" in message.message, message


async def http_get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), TIMEOUT)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    parsed = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), parsed, body


# -- ready / config ---------------------------------------------------------------


async def test_ready_then_config_with_effective_values(start_server):
    defaults = SessionOptions(right_context=3, max_delay_ms=900, partials=False, capitalize=False)
    server = await start_server(session_defaults=defaults)
    client = await StreamClient.connect(server.url)
    async with client:
        assert client.ready.protocol == 1 and client.ready.model == "fake-model"
        assert client.ready.session and client.ready.config == defaults
        # the frame limit too, so a client that keeps every announced limit never meets a 1009
        assert client.ready.limits is not None and client.ready.limits.max_message_bytes == 1 << 20
        assert await client.configure(ConfigRequest(right_context=1)) == SessionOptions(1, 900, False, False)
        # Options accumulate over several config messages before the first words.
        assert await client.configure(ConfigRequest(partials=True, capitalize=True)) == SessionOptions(1, 900, True, True)
        await client.send_raw('{"type": "config", "max_delay_ms": 0, "future_option": "x"}')
        reply = await client.recv(timeout=TIMEOUT)
        assert isinstance(reply, ConfigApplied) and reply.config == SessionOptions(1, 0, True, True)


async def test_config_after_words_is_rejected_and_the_stream_goes_on(start_server, fake_labels):
    server = await start_server()
    async with await StreamClient.connect(server.url, right_context=0, max_delay_ms=60_000) as client:
        await client.send_words(WORDS[:4])
        await client.send(ConfigRequest(right_context=5))
        transcript = Transcript()
        messages = await read_until(client, "error", transcript)
        assert messages[-1].code == ErrorCode.BAD_REQUEST and "config" in messages[-1].message
        await client.send_words(WORDS[4:8])
        # right_context is still 0: every word is final without a flush.
        while transcript.n_final < 8:
            transcript.apply(await client.recv(timeout=TIMEOUT))
        transcript, _ = await finish(client, transcript)
    assert transcript.words == WORDS[:8] and transcript.labels == fake_labels(WORDS[:8])
    assert transcript.ended_words == 8


async def test_words_are_normalized_and_echoed(start_server):
    server = await start_server()
    async with await StreamClient.connect(server.url) as client:
        await client.send_raw(json.dumps({"type": "words", "words": [
            "Hello,", {"w": "WORLD!", "start": 0.5, "end": 0.9}, "...", "--", {"w": "it\u2019s"}, "\"Quoted\"",
        ]}))
        transcript, messages = await finish(client)
    assert transcript.words == ["hello", "world", "it's", "quoted"]
    assert messages[-1] == Ended(4)


async def test_the_symbols_around_words_come_back_in_text(start_server):
    """``$1,000``, ``50%`` and ``c++`` keep their symbols in ``text``; ``words`` and the indices
    are those of the normalized words (a word of symbols alone takes none; text shows it)."""
    server = await start_server()
    async with await StreamClient.connect(server.url) as client:
        await client.send_raw(json.dumps({"type": "words", "words": ["Paid", "$1,000,", "👍", "50%", "C++"]}))
        transcript, messages = await finish(client)
    assert transcript.words == ["paid", "1,000", "50", "c"]
    finals = [m for m in messages if isinstance(m, Final)]
    tokens = [t.rstrip(",.?") for f in finals for t in f.text.split()]
    assert tokens == ["paid", "$1,000", "👍", "50%", "c++"]  # the symbol word where it stood
    assert messages[-1] == Ended(4)


async def test_flush_finalizes_everything_before_flushed(start_server, fake_labels):
    server = await start_server()
    async with await StreamClient.connect(server.url, right_context=50, max_delay_ms=600_000) as client:
        transcript = Transcript()
        await client.send_words(WORDS[:5])
        await client.flush()
        messages = await read_until(client, "flushed", transcript)
        assert messages[-1] == Flushed(5)
        assert all(isinstance(m, Final) for m in messages[:-1]) and transcript.n_final == 5
        await client.send_words(WORDS[5:9])
        await client.flush()
        await client.flush()  # nothing new: answered at once, same upto
        messages = await read_until(client, "flushed", transcript)
        assert messages[-1] == Flushed(9) and transcript.n_final == 9
        assert await client.recv(timeout=TIMEOUT) == Flushed(9)
        transcript, messages = await finish(client, transcript)
    assert messages == [Ended(9)]
    assert transcript.words == WORDS[:9] and transcript.labels == fake_labels(WORDS[:9])


async def test_end_sends_the_rest_then_end_and_closes_normally(start_server):
    server = await start_server()
    client = await StreamClient.connect(server.url, right_context=100, max_delay_ms=600_000)
    await client.send_words(WORDS)
    transcript, messages = await finish(client)
    assert transcript.words == WORDS
    assert messages[-1] == Ended(len(WORDS)) and isinstance(messages[-2], Final)
    assert client.close_code == 1000


class QuestionAtNameEngine(EngineBase):
    """Every word O, but the label token of ``name`` leans to a question over a period."""

    name = "question-at-name"

    def __init__(self, aligner) -> None:
        self.name_token = aligner.word_ids("name")[-1]

    def infer(self, input_ids, attention_mask):
        logits = np.zeros((*input_ids.shape, 4), dtype=np.float32)
        logits[..., 0] = 5.0
        logits[input_ids == self.name_token] = [2.0, 0.0, -1.0, 1.0]  # O, COMMA, PERIOD, QUESTION
        return logits

    def close(self) -> None:
        pass


@pytest.mark.parametrize("right_context", [1, 10])
async def test_end_ends_the_sentence_with_the_mark_the_model_prefers(start_server, aligner, right_context):
    server = await start_server(engine=QuestionAtNameEngine(aligner))
    async with await StreamClient.connect(
        server.url, right_context=right_context, max_delay_ms=600_000, capitalize=True
    ) as client:
        await client.send_words("what is your name".split())
        transcript, messages = await finish(client)
    assert transcript.words == ["what", "is", "your", "name"]
    assert [ID_TO_MARK[x] for x in transcript.labels] == ["", "", "", "?"]
    finals = [m for m in messages if isinstance(m, Final)]
    assert finals[-1].words[-1].p == "?" and finals[-1].text.endswith("name?")
    assert messages[-1] == Ended(4)


async def test_flush_does_not_end_the_sentence(start_server, aligner):
    server = await start_server(engine=QuestionAtNameEngine(aligner))
    async with await StreamClient.connect(server.url, right_context=2, max_delay_ms=600_000) as client:
        transcript = Transcript()
        await client.send_words("what is your name".split())
        await client.flush()
        await read_until(client, "flushed", transcript)
        assert transcript.labels == [0, 0, 0, 0]
        transcript, messages = await finish(client, transcript)
    assert messages == [Ended(4)]  # the final word is never revised
    assert transcript.labels == [0, 0, 0, 0]


async def test_partials_cover_the_undecided_tail(start_server, fake_labels):
    server = await start_server()
    async with await StreamClient.connect(server.url, right_context=3, max_delay_ms=600_000, partials=True) as client:
        assert client.options.partials
        transcript = Transcript()
        await client.send_words(WORDS[:6])
        partial = None
        while partial is None or partial.start + len(partial.words) < 6:
            message = await client.recv(timeout=TIMEOUT)
            transcript.apply(message)
            if isinstance(message, Partial):
                partial = message
        assert transcript.n_final == 3 and partial.start == 3
        assert [w.w for w in partial.words] == WORDS[3:6]
        assert [w.p for w in partial.words] == [ID_TO_MARK[x] for x in fake_labels(WORDS[3:6])]
        transcript, _ = await finish(client, transcript)
    assert transcript.words == WORDS[:6] and not transcript.tail


async def test_capitalize_renders_sentences(start_server, fake_labels):
    server = await start_server()
    words = normalize_words(WORDS * 3)
    async with await StreamClient.connect(
        server.url, right_context=1, max_delay_ms=600_000, capitalize=True
    ) as client:
        await client.send_words(words)
        _, messages = await finish(client)
    texts = [m.text for m in messages if isinstance(m, Final)]
    assert " ".join(texts) == render(words, ended(fake_labels(words)), capitalize=True)
    assert texts[0][0].isupper()


async def test_the_root_path_also_streams(start_server):
    server = await start_server()
    async with await StreamClient.connect(f"ws://127.0.0.1:{server.port}/") as client:
        await client.send_words(["hi"])
        transcript, _ = await finish(client)
    assert transcript.words == ["hi"]


# -- bad input --------------------------------------------------------------------


async def test_bad_messages_are_rejected_whole_and_the_stream_continues(start_server, fake_labels):
    server = await start_server()
    good = []
    async with await StreamClient.connect(server.url, right_context=2, max_delay_ms=600_000) as client:
        transcript = Transcript()

        async def send_good(words):
            good.extend(words)
            await client.send_words(words)

        async def expect_error(frame, code):
            await client.send_raw(frame)
            message = (await read_until(client, "error", transcript))[-1]
            assert message.code == code, (frame[:80], message)

        await send_good(WORDS[:3])
        await expect_error("{not json", ErrorCode.BAD_REQUEST)
        await expect_error('{"type": "words", "words": ["ok", 7]}', ErrorCode.BAD_REQUEST)
        await expect_error('{"type": "words", "words": "one two"}', ErrorCode.BAD_REQUEST)
        await expect_error('{"type": "config", "right_context": "2"}', ErrorCode.BAD_REQUEST)
        await expect_error('{"type": "subscribe"}', ErrorCode.BAD_REQUEST)
        await expect_error('{"type": "config", "right_context": 1}', ErrorCode.BAD_REQUEST)  # after words
        await send_good(WORDS[3:6])
        await expect_error(json.dumps({"type": "words", "words": ["w"] * 10_000}), ErrorCode.TOO_LARGE)
        await expect_error(json.dumps({"type": "words", "words": ["a", "x" * 1_000_000]}), ErrorCode.TOO_LARGE)
        await expect_error(b'{"type": "words", "words": ["binary"]}', ErrorCode.BAD_REQUEST)
        # Not JSON, though Python's parser takes them: NaN / Infinity, and integers past its
        # digit limit, even in a field that is ignored; a time beyond a double's range.
        await expect_error('{"type": "words", "words": ["a"], "junk": NaN}', ErrorCode.BAD_REQUEST)
        await expect_error('{"type": "flush", "junk": -Infinity}', ErrorCode.BAD_REQUEST)
        await expect_error('{"type": "flush", "junk": ' + "9" * 5000 + "}", ErrorCode.BAD_REQUEST)
        await expect_error('{"type": "words", "words": [{"w": "a", "start": 1' + "0" * 309 + "}]}",
                           ErrorCode.BAD_REQUEST)
        await send_good(WORDS[6:10])
        transcript, _ = await finish(client, transcript)
    assert transcript.words == good and transcript.labels == ended(fake_labels(good))
    assert transcript.ended_words == len(good)
    text = server.metrics.render().decode()
    assert 'streampunct_errors_total{code="bad_request"} 11.0' in text
    assert 'streampunct_errors_total{code="too_large"} 2.0' in text


async def test_oversize_frame_closes_with_1009(start_server, caplog):
    caplog.set_level(logging.INFO)
    server = await start_server(max_message_bytes=64 * 1024)
    client = await StreamClient.connect(server.url)
    await client.send_words(["kept"])
    await client.send_raw(json.dumps({"type": "words", "words": ["y" * 100] * 700}))
    async with asyncio.timeout(TIMEOUT):
        async for _ in client:
            pass
    assert client.close_code == 1009
    await until(lambda: not server.sessions)
    lines = [r.getMessage() for r in caplog.records if r.name == "streampunct.server.session"]
    assert any("closed 1009 (frame with" in line and "exceeds limit of 65536 bytes) with 0 of 1 words final" in line
               for line in lines), lines
    assert not any("client left" in line for line in lines)


# -- HTTP: health, metrics, auth, limits ----------------------------------------------


async def test_healthz_and_metrics(start_server):
    server = await start_server()
    status, headers, body = await http_get(server.port, "/healthz")
    assert status == 200 and headers["content-type"] == "application/json"
    health = json.loads(body)
    assert health["status"] == "ok" and health["engine"] == "fake" and health["model"] == "fake-model"
    assert health["uptime_s"] >= 0 and health["engine_workers"] == 1
    assert health["batch_rows"] == "padded"
    async with await StreamClient.connect(server.url, right_context=0) as client:
        await client.send_words(WORDS[:5])
        await finish(client)
    status, headers, body = await http_get(server.port, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    text = body.decode()
    for line in (
        "streampunct_words_in_total 5.0",
        "streampunct_words_finalized_total 5.0",
        "streampunct_sessions_opened_total 1.0",
        "streampunct_sessions 0.0",
        'streampunct_errors_total{code="internal"} 0.0',
    ):
        assert line in text, line
    for histogram in ("streampunct_batch_size", "streampunct_engine_latency_seconds",
                      "streampunct_finalize_margin_seconds"):
        assert f"{histogram}_count" in text
    assert "streampunct_finalize_margin_seconds_count 5.0" in text
    status, _, body = await http_get(server.port, "/nope%3Cscript%3E")
    assert status == 404
    assert body == b"no such endpoint; this server answers /v1/stream (WebSocket) and /captions, /healthz, /metrics\n"


async def test_healthz_is_503_until_the_engine_is_warm(aligner, fake_engine_cls):
    import threading

    from streampunct.server.app import ServerConfig, ServerRuntime, serve

    release = threading.Event()
    engine = fake_engine_cls()

    def slow_factory():
        release.wait(TIMEOUT)
        return engine

    server = await serve(ServerConfig(port=0), ServerRuntime(slow_factory, aligner))
    try:
        status, _, body = await http_get(server.port, "/healthz")
        assert status == 503 and json.loads(body)["status"] == "loading"
        with pytest.raises(InvalidStatus) as info:
            await StreamClient.connect(server.url)
        assert info.value.response.status_code == 503
        release.set()
        await asyncio.wait_for(server.wait_ready(), TIMEOUT)
        assert engine.batch_sizes  # warmed up before ready
        assert (await http_get(server.port, "/healthz"))[0] == 200
    finally:
        release.set()
        await server.shutdown()


async def test_auth_token_is_enforced(start_server):
    server = await start_server(auth_token="s3cret")
    for url, token in ((server.url, None), (server.url, "wrong"), (server.url + "?token=nope", None)):
        with pytest.raises(InvalidStatus) as info:
            await StreamClient.connect(url, token=token)
        assert info.value.response.status_code == 401
    async with await StreamClient.connect(server.url, token="s3cret") as client:
        assert client.ready.session
    async with await StreamClient.connect(server.url + "?token=s3cret") as client:
        assert client.ready.session
    assert (await http_get(server.port, "/healthz"))[0] == 200


async def test_session_limit_is_enforced_at_the_handshake(start_server):
    server = await start_server(max_sessions=2)
    first = await StreamClient.connect(server.url)
    second = await StreamClient.connect(server.url)
    with pytest.raises(InvalidStatus) as info:
        await StreamClient.connect(server.url)
    assert info.value.response.status_code == 503
    await first.close()
    await until(lambda: len(server.sessions) < 2)  # the server's side of first is gone
    third = await StreamClient.connect(server.url)
    await second.close()
    await third.close()


async def test_a_slot_is_free_as_soon_as_its_connection_closes(start_server, monkeypatch):
    """A client that closes a session at the limit may open another at once, while the old
    session's handler is still finishing."""
    import asyncio

    from streampunct.server.session import Session

    finished, run = asyncio.Event(), Session.run

    async def lingering(self):
        try:
            await run(self)
        finally:
            await finished.wait()  # the handler still winding down after the close

    monkeypatch.setattr(Session, "run", lingering)
    server = await start_server(max_sessions=1)
    try:
        first = await StreamClient.connect(server.url)
        await first.close()
        second = await StreamClient.connect(server.url)
        assert len(server.sessions) == 2  # first's handler has not finished
        with pytest.raises(InvalidStatus) as info:  # second holds the one slot
            await StreamClient.connect(server.url)
        assert info.value.response.status_code == 503
        await second.close()
    finally:
        finished.set()


# -- failures, shutdown, cleanup --------------------------------------------------------


async def assert_internal_then_1011(client: StreamClient) -> None:
    """Three words sent; the stream then ends with the contract's ``internal`` error and 1011."""
    await client.send_words(WORDS[:3])
    messages = [m async for m in client]
    assert [(m.code, m.message) for m in messages if isinstance(m, Error)] == [
        (ErrorCode.INTERNAL, "internal server error; closing the stream")
    ]
    assert client.close_code == 1011


async def test_a_bug_in_the_session_driver_still_sends_internal_before_1011(start_server, monkeypatch):
    from streampunct.core.session_protocol import SessionProtocol

    def broken(self, request, logits):
        raise RuntimeError("a bug")

    monkeypatch.setattr(SessionProtocol, "apply", broken)
    server = await start_server()
    client = await StreamClient.connect(server.url, right_context=0)
    await assert_internal_then_1011(client)
    assert 'streampunct_errors_total{code="internal"} 1.0' in server.metrics.render().decode()


async def test_a_bug_while_reading_a_frame_still_sends_internal_before_1011(start_server, monkeypatch):
    from streampunct.core.session_protocol import SessionProtocol

    def broken(self, frame, now):
        raise RuntimeError("a bug")

    monkeypatch.setattr(SessionProtocol, "receive_frame", broken)
    server = await start_server()
    client = await StreamClient.connect(server.url)  # no config: the first frame is the words
    await assert_internal_then_1011(client)


async def test_a_bug_while_writing_a_frame_still_sends_internal_before_1011(start_server, monkeypatch):
    import streampunct.server.session as session_module

    encode = session_module.encode_frame

    def broken(message):
        if isinstance(message, Final):
            raise RuntimeError("a bug")
        return encode(message)

    monkeypatch.setattr(session_module, "encode_frame", broken)
    server = await start_server()
    client = await StreamClient.connect(server.url, right_context=0)
    await assert_internal_then_1011(client)


async def test_lone_surrogates_in_words_are_dropped_and_the_stream_goes_on(start_server, fake_labels):
    # JSON's \\udXXX escapes can carry half a surrogate pair, which is not text: it once
    # reached the tokenizer and closed the session with 1011.
    server = await start_server()
    async with await StreamClient.connect(server.url, right_context=1, partials=True) as client:
        await client.send_raw('{"type": "words", "words": ["so", "th\\udc00is", "\\ud800"]}')
        await client.send_raw('{"type": "hypothesis", "words": ["i\\udfffs"]}')
        transcript = Transcript()
        partial = next(m for m in await read_until(client, "partial", transcript) if isinstance(m, Partial))
        assert [w.w for w in partial.hypothesis] == ["is"]
        await client.send_words(["the"])
        transcript, _ = await finish(client, transcript)
    assert not transcript.errors
    assert transcript.words == ["so", "this", "the"] and transcript.labels == ended(fake_labels(["so", "this", "the"]))
    assert client.close_code == 1000


async def test_engine_failure_reaches_only_the_affected_session(start_server, fake_engine_cls, fake_labels, aligner):
    (poison,) = aligner.word_ids("poison")
    server = await start_server(engine=fake_engine_cls(fail_token=poison))
    healthy = await StreamClient.connect(server.url, right_context=1)
    doomed = await StreamClient.connect(server.url, right_context=1)
    await healthy.send_words(WORDS[:6])
    await doomed.send_words(["this", "is", "poison", "for", "the", "engine"])
    messages = [m async for m in doomed]
    errors = [m for m in messages if isinstance(m, Error)]
    assert [e.code for e in errors] == [ErrorCode.INTERNAL]
    assert doomed.close_code == 1011
    await healthy.send_words(WORDS[6:])
    transcript, _ = await finish(healthy)
    assert transcript.words == WORDS and transcript.labels == ended(fake_labels(WORDS)) and not transcript.errors
    assert 'streampunct_errors_total{code="internal"} 1.0' in server.metrics.render().decode()
    assert "streampunct_engine_failures_total 1.0" in server.metrics.render().decode()
    assert not server.batcher.engine_failing  # one client's text, not the engine
    # The server still takes new sessions.
    async with await StreamClient.connect(server.url) as client:
        await client.send_words(["again"])
        assert (await finish(client))[0].words == ["again"]


async def test_healthz_answers_503_while_the_engine_fails_every_window(start_server, fake_engine_cls, aligner,
                                                                      monkeypatch):
    """A replica whose engine fails (a lost device, a Triton server gone) leaves the balancer's
    rotation: its warm-up window fails too. It comes back once a window works again."""
    import streampunct.server.batcher as batcher_module
    from tests.streampunct.test_server_hardening import request

    monkeypatch.setattr(batcher_module, "PROBE_INTERVAL_S", 0.05)
    engine = fake_engine_cls()
    server = await start_server(engine=engine)
    assert (await request(server.port)).status == 200
    engine.fail_token = aligner.cls_id  # in every window
    for _ in range(batcher_module.PROBE_AFTER_FAILURES):
        client = await StreamClient.connect(server.url, right_context=0)
        await client.send_words(["hello"])
        assert [m.code for m in [m async for m in client] if isinstance(m, Error)] == [ErrorCode.INTERNAL]
        assert client.close_code == 1011
    await until(lambda: server.batcher.engine_failing)
    reply = await request(server.port)
    assert reply.status == 503 and json.loads(reply.body)["status"] == "failing"
    with pytest.raises(InvalidStatus) as refused:  # new clients go to another replica
        await StreamClient.connect(server.url)
    assert refused.value.response.status_code == 503
    engine.fail_token = None
    await until(lambda: not server.batcher.engine_failing)
    assert (await request(server.port)).status == 200


async def test_graceful_shutdown_sends_all_pending_finals_then_1001(start_server, fake_labels):
    server = await start_server()
    clients = [await StreamClient.connect(server.url, right_context=100, max_delay_ms=600_000) for _ in range(3)]
    for k, client in enumerate(clients):
        await client.send_words(WORDS[: 5 + k])
        await barrier(client)  # the server has fed the words; none is decidable yet
    shutdown = asyncio.create_task(server.shutdown())
    for k, client in enumerate(clients):
        transcript = Transcript()
        async with asyncio.timeout(TIMEOUT):
            async for message in client:
                transcript.apply(message)
        assert transcript.words == WORDS[: 5 + k]
        assert transcript.labels == fake_labels(WORDS[: 5 + k])
        assert client.close_code == 1001
    await asyncio.wait_for(shutdown, TIMEOUT)
    with pytest.raises(OSError):
        await StreamClient.connect(server.url, open_timeout=1)


async def test_a_client_leaving_mid_stream_leaves_nothing_behind(start_server):
    engine = GatedEngine(open=True)
    server = await start_server(engine=engine)
    engine.close_gate()  # warmed up; from now on the engine holds every call
    warm_up = engine.entered
    loop = asyncio.get_running_loop()
    try:
        for k in range(3):
            client = await StreamClient.connect(server.url, right_context=0, max_delay_ms=200)
            await client.send_words(WORDS)
            if k == 0:
                await engine.wait_entered(warm_up + 1)  # the first session's window is at the engine
            else:  # the engine is held: the next sessions' windows wait in the batcher's queue
                await until(lambda: server.batcher.queue_depth == 1)
            await client.send_words(WORDS)
            client.connection.transport.abort()
            await until(lambda: not server.sessions)
            assert server.batcher.queue_depth == 0
        # Checked at once, the engine still holding the first window: a timer a session left
        # behind is still scheduled (not yet fired and gone).
        assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("session-")]
        timers = [h for h in loop._scheduled if not h.cancelled() and getattr(h._callback, "__name__", "") == "set"]
        assert not timers
        assert "streampunct_sessions 0.0" in server.metrics.render().decode()
    finally:
        engine.open()


async def test_a_shutdown_whose_caller_gave_up_still_finishes_for_the_next(start_server):
    """A timeout around shutdown() cancelled the shutdown itself: every later call waited
    forever, and the engine and its threads were never closed."""
    engine = GatedEngine(open=True)
    server = await start_server(engine=engine)
    engine.close_gate()
    warm_up = engine.entered
    client = await StreamClient.connect(server.url, right_context=0)
    await client.send_words(WORDS[:3])
    await engine.wait_entered(warm_up + 1)  # the session's window is held at the engine
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(server.shutdown(), 0.2)
    assert not server.ready
    engine.open()
    async with asyncio.timeout(TIMEOUT):
        await server.shutdown()
    assert not server.batcher.ready and engine.closed
    await client.close()


async def test_overloaded_is_reported_and_no_word_is_lost(start_server, fake_engine_cls, fake_labels):
    from streampunct.server.batcher import BatcherConfig

    server = await start_server(
        engine=fake_engine_cls(delay_s=0.05), batching=BatcherConfig(max_batch=1, max_wait_ms=0, max_queue=1)
    )
    clients = [await StreamClient.connect(server.url, right_context=0) for _ in range(4)]
    await asyncio.gather(*(c.send_words(WORDS) for c in clients))
    results = await asyncio.gather(*(finish(c) for c in clients))
    codes = [e.code for transcript, _ in results for e in transcript.errors]
    assert ErrorCode.OVERLOADED in codes and set(codes) == {ErrorCode.OVERLOADED}
    for transcript, _ in results:
        assert transcript.words == WORDS and transcript.labels in ended_or_final_before(fake_labels(WORDS))


async def test_overloaded_is_sent_once_per_episode(start_server, fake_engine_cls):
    """Under a queue that stays full, each session hears ``overloaded`` once, not once per window
    (protocol.md: once per overload episode)."""
    from streampunct.server.batcher import BatcherConfig

    server = await start_server(
        engine=fake_engine_cls(delay_s=0.005), batching=BatcherConfig(max_batch=1, max_wait_ms=0, max_queue=2)
    )
    clients = [await StreamClient.connect(server.url, right_context=0) for _ in range(8)]

    async def one_by_one(client):
        for word in WORDS:
            await client.send_words([word])
        return await finish(client)

    results = await asyncio.gather(*(one_by_one(c) for c in clients))
    counts = [len(transcript.errors) for transcript, _ in results]
    assert sum(counts) >= 1 and max(counts) == 1, counts
    assert all(transcript.words == WORDS for transcript, _ in results)


# -- interim hypotheses and word times (issue 14) -------------------------------


async def test_hypotheses_are_punctuated_in_partials_and_never_finalized(start_server, fake_labels):
    server = await start_server()
    async with await StreamClient.connect(
        server.url, right_context=2, max_delay_ms=60_000, partials=True, capitalize=False
    ) as client:
        committed = WORDS[:5]
        await client.send_raw(json.dumps({"type": "words", "words": [
            {"w": w, "start": 0.5 * i, "end": 0.5 * i + 0.4} for i, w in enumerate(committed)
        ]}))
        transcript = Transcript()
        received = await read_until(client, "partial", transcript)
        await client.send_raw(json.dumps({"type": "hypothesis", "words": ["Came", {"w": "to,", "start": 9}]}))
        partial = (await read_until(client, "partial", transcript))[-1]
        assert [w.w for w in partial.hypothesis] == ["came", "to"]
        assert [w.p for w in partial.hypothesis] == [ID_TO_MARK[x] for x in fake_labels(["came", "to"])]
        tail = [w.w for w in partial.words]
        assert tail == committed[partial.start:]
        labels = [ID_TO_MARK.index(w.p) for w in (*partial.words, *partial.hypothesis)]
        assert partial.text == render([*tail, "came", "to"], labels, sentence_start=partial.text[:1].isupper())
        # Malformed hypothesis: bad_request, the stream and its hypothesis stay.
        await client.send_raw('{"type": "hypothesis", "words": [{"w": 1}]}')
        error = (await read_until(client, "error", transcript))[-1]
        assert error.code == ErrorCode.BAD_REQUEST
        await client.send_raw('{"type": "hypothesis", "words": []}')
        cleared = (await read_until(client, "partial", transcript))[-1]
        assert cleared.hypothesis == ()
        transcript, messages = await finish(client, transcript)
    assert transcript.words == committed and transcript.labels == ended(fake_labels(committed))
    finals = [w for m in received + messages if isinstance(m, Final) for w in m.words]
    assert [(w.w, w.start, w.end) for w in finals] == [
        (w, 0.5 * i, 0.5 * i + 0.4) for i, w in enumerate(committed)
    ]
    assert transcript.ended_words == 5


async def test_config_after_a_hypothesis_whose_partial_is_in_flight(start_server, fake_labels):
    # A hypothesis before the first words is labeled at once; a config right after
    # it (allowed: a hypothesis is not words) replaces the stream's options while
    # that partial is in the (slow) engine. It used to close the session with 1011.
    engine = GatedEngine(open=True)
    server = await start_server(engine=engine)
    engine.close_gate()  # warmed up; the next call waits for the test
    warm_up = engine.entered
    async with await StreamClient.connect(server.url, partials=True) as client:
        await client.send_raw(json.dumps({"type": "hypothesis", "words": ["hmm"]}))
        try:
            await engine.wait_entered(warm_up + 1)  # the hypothesis' partial is now in flight
            await client.send_raw(json.dumps({"type": "config", "right_context": 1}))
            transcript = Transcript()
            messages = await read_until(client, "config", transcript)  # applied, the partial still in the engine
            assert not any(isinstance(m, Partial) for m in messages)
        finally:
            engine.open()
        messages += await read_until(client, "partial", transcript)
        assert [w.w for w in messages[-1].hypothesis] == ["hmm"]
        await client.send_words(WORDS[:4])
        transcript, rest = await finish(client, transcript)
    assert not transcript.errors
    assert transcript.words == WORDS[:4] and transcript.labels == ended(fake_labels(WORDS[:4]))
    assert transcript.ended_words == 4 and client.close_code == 1000


async def test_a_hypothesis_right_before_end_is_answered_before_the_end(start_server, fake_engine_cls, fake_labels):
    server = await start_server(engine=fake_engine_cls(delay_s=0.05))
    async with await StreamClient.connect(server.url, right_context=2, max_delay_ms=60_000, partials=True) as client:
        await client.send_words(WORDS[:5])
        await client.send_raw(json.dumps({"type": "hypothesis", "words": ["came", "to"]}))
        transcript, messages = await finish(client)  # end at once, behind the hypothesis
    kinds = [m.type for m in messages]
    assert kinds[-1] == "end" and kinds.count("end") == 1
    last_partial = max(k for k, kind in enumerate(kinds) if kind == "partial")
    assert [w.w for w in messages[last_partial].hypothesis] == ["came", "to"]
    assert transcript.words == WORDS[:5] and transcript.labels == ended(fake_labels(WORDS[:5]))
    assert client.close_code == 1000


async def test_hypotheses_sent_back_to_back_are_answered_in_order_ending_with_the_last(start_server, fake_engine_cls):
    # Ten interim results sent at once while the (slow) engine labels the first: each is
    # answered by its own partial, in order (those replaced before the engine labeled them
    # without a model call), and partials never go back to an older hypothesis.
    server = await start_server(engine=fake_engine_cls(delay_s=0.02))
    hypotheses = [WORDS[: k + 1] for k in range(10)]
    async with await StreamClient.connect(server.url, right_context=2, partials=True) as client:
        await client.send_words(WORDS[:2])
        for h in hypotheses:
            await client.send_raw(json.dumps({"type": "hypothesis", "words": h}))
        answered = []
        while not answered or answered[-1] != hypotheses[-1]:
            message = await client.recv(timeout=TIMEOUT)
            if isinstance(message, Partial) and message.hypothesis:
                answered.append([w.w for w in message.hypothesis])
        transcript, _ = await finish(client)
    assert answered == hypotheses
    assert transcript.words == WORDS[:2] and client.close_code == 1000


async def test_finals_echo_start_and_end_on_the_wire(start_server):
    server = await start_server()
    async with await StreamClient.connect(server.url, right_context=0) as client:
        await client.send_raw(json.dumps({"type": "words", "words": [
            {"w": "so", "start": 1, "end": 1.25}, "this", {"w": "is", "end": 2.5},
        ]}))
        await client.end()
        frames = []
        async with asyncio.timeout(TIMEOUT):
            while True:
                try:
                    frames.append(json.loads(await client.connection.recv()))
                except Exception:
                    break
    words = [w for f in frames if f["type"] == "final" for w in f["words"]]
    assert words == [
        {"w": "so", "p": words[0]["p"], "start": 1, "end": 1.25},
        {"w": "this", "p": words[1]["p"]},
        {"w": "is", "p": words[2]["p"], "end": 2.5},
    ]


def _session_of(server):
    (session,) = server.sessions
    return session


@pytest.mark.parametrize("then", ["bad", "flush"])
async def test_a_hypothesis_behind_a_waiting_flush_is_answered_before_a_later_message(start_server, then):
    """protocol.md: every hypothesis gets its own partial, in order, before the answer to any
    later message. Found by an outside client (2026-12-02): a hypothesis sent while a flush
    waited for its words' finals, then a refused message (or another flush), got its partial
    only after that message's error (or flushed)."""
    engine = GatedEngine(open=True)
    server = await start_server(engine=engine)
    engine.close_gate()
    entered = engine.entered
    try:
        client = await StreamClient.connect(server.url, right_context=5, max_delay_ms=600_000, partials=True)
        await client.send_words(["hello"])
        await client.send_raw('{"type": "flush"}')
        await engine.wait_entered(entered + 1)  # the flush's window is held at the engine
        await client.send_raw(json.dumps({"type": "hypothesis", "words": ["x"]}))
        await client.send_raw('{"type": "bogus"}' if then == "bad" else '{"type": "flush"}')
        session = _session_of(server)
        await until(lambda: len(session.protocol._until) >= 2)  # both wait behind the flush's answer
    finally:
        engine.open()
    _, messages = await finish(client)
    kinds = [m.type for m in messages]
    answered = next(k for k, m in enumerate(messages) if isinstance(m, Partial) and m.hypothesis)
    assert [w.w for w in messages[answered].hypothesis] == ["x"]
    later = "error" if then == "bad" else "flushed"
    first_flushed = kinds.index("flushed")
    assert first_flushed < answered < kinds.index(later, first_flushed + 1), kinds
    assert kinds[-1] == "end" and client.close_code == 1000


async def test_a_burst_of_answers_to_a_reading_client_drops_no_partial(start_server):
    """A partial not sent yet is dropped for a newer one only while the server cannot send (a
    slow reader). Found by an outside client (2026-12-02): a flush's final and flushed and five
    errors queued behind it went out in one burst with a hypothesis's partial, and the partial
    of the words that cleared it, a moment later, dropped it: that hypothesis got no partial."""
    engine = GatedEngine(open=True)
    server = await start_server(engine=engine)
    engine.close_gate()
    entered = engine.entered
    try:
        client = await StreamClient.connect(server.url, partials=True)
        await client.send_words(["a", "b"])
        await client.send_raw('{"type": "flush"}')
        await engine.wait_entered(entered + 1)
        for _ in range(5):
            await client.send_raw("x")  # not JSON: an error, queued behind the flush's answer
        await client.send_raw(json.dumps({"type": "hypothesis", "words": ["c"]}))
        await client.send_words(["c"])
        await client.send_words(["d"])
        session = _session_of(server)
        await until(lambda: session.protocol.n_words == 4)
    finally:
        engine.open()
    transcript, messages = await finish(client)
    hypotheses = [[w.w for w in m.hypothesis] for m in messages if isinstance(m, Partial)]
    assert ["c"] in hypotheses, [m.type for m in messages]
    assert [m.type for m in messages].count("error") == 5
    assert transcript.words == ["a", "b", "c", "d"] and client.close_code == 1000
