"""Resuming a stream on another server, through real servers on loopback (raw protocol frames).

A stream starts on server 1, its connection is cut, and it goes on on server 2,
which never saw it: every word is finalized exactly once, indices continue,
and sentence-start casing continues from the context the client sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import numpy as np
import pytest

from streampunct.client.stream_client import StreamClient, Transcript
from streampunct.core.wire import (
    ConfigRequest,
    Ended,
    Error,
    ErrorCode,
    Final,
    PunctuatedWord,
    Resumed,
    ResumeRequest,
)
from streampunct.text.normalize import render
from tests.streampunct.conftest import SCHEDULE_VOCAB, TEST_WINDOW

MARKS = ("", ",", ".", "?")


def _words_with_mark_at(fake_labels, k: int, mark: str, n: int) -> list[str]:
    """``n`` vocabulary words whose word ``k`` gets ``mark`` from the fake engine."""
    labels = dict(zip(SCHEDULE_VOCAB, fake_labels(SCHEDULE_VOCAB), strict=True))
    with_mark = [w for w in SCHEDULE_VOCAB if MARKS[labels[w]] == mark]
    if not with_mark:
        pytest.skip(f"no vocabulary word gets {mark!r} from the fake engine")
    words = [SCHEDULE_VOCAB[(3 * i + 1) % len(SCHEDULE_VOCAB)] for i in range(n)]
    words[k] = with_mark[0]
    return words


async def _finals_until(client: StreamClient, n: int) -> list[Final]:
    """Finals until ``n`` words are final."""
    finals: list[Final] = []
    async with asyncio.timeout(10):
        while sum(len(f.words) for f in finals) < n:
            message = await client.recv()
            if isinstance(message, Final):
                finals.append(message)
    return finals


@pytest.mark.parametrize("mark", [".", "?", ",", ""])
async def test_a_stream_resumed_on_a_second_server_is_delivered_once_with_its_casing(
        start_server, fake_labels, mark):
    server1 = await start_server()
    server2 = await start_server()
    k = 30  # the last final word before the cut
    words = _words_with_mark_at(fake_labels, k, mark, 60)
    labels = fake_labels(words)

    # Server 1: words 0..k+2 (right_context 2: 0..k become final), then the connection drops.
    first = await StreamClient.connect(server1.url, right_context=2, max_delay_ms=600_000, capitalize=True)
    await first.send_words(words[: k + 3])
    before = await _finals_until(first, k + 1)
    assert sum(len(f.words) for f in before) == k + 1
    first.connection.transport.abort()

    # Server 2 has never seen the stream: resume from the client's finals.
    got = [w for f in before for w in f.words]
    context = tuple(PunctuatedWord(w.w, w.p) for w in got[-first.ready.limits.max_context_words:])
    second = await StreamClient.connect(server2.url)
    assert second.ready.limits.max_context_words == TEST_WINDOW.left
    await second.send(ResumeRequest(k + 1, context, ConfigRequest(2, 600_000, False, True)))
    resumed = await second.recv(timeout=5)
    assert resumed == Resumed(k + 1, first.options)
    await second.send_words(words[k + 1 :])  # every word without a final, then the rest
    await second.end()
    after: list = []
    async for message in second:
        after.append(message)
    finals = [m for m in after if isinstance(m, Final)]
    assert finals[0].start == k + 1
    delivered = got + [w for f in finals for w in f.words]
    assert [w.w for w in delivered] == words  # each word once, in order
    assert after[-1] == Ended(len(words)) and second.close_code == 1000
    # Casing continues: the first final after the cut opens a sentence exactly when word k ended one.
    assert finals[0].text[0].isupper() is (mark in (".", "?"))
    expected_labels = [*labels[:-1], 2 if labels[-1] in (0, 1) else labels[-1]]  # the end marks the last word
    assert " ".join(f.text for f in [*before, *finals]) == render(words, expected_labels, capitalize=True)
    assert server1.metrics.words_in._value.get() == k + 3


async def test_resume_is_refused_after_other_messages_and_when_malformed(start_server):
    server = await start_server()
    client = await StreamClient.connect(server.url)
    await client.send_raw('{"type": "resume", "start": 2, "context": [{"w": "a", "p": "!"}]}')
    error = await client.recv(timeout=5)
    assert isinstance(error, Error) and error.code is ErrorCode.BAD_REQUEST and "context[0].p" in error.message
    await client.send_words(["hello"])
    await client.send(ResumeRequest(5))
    error = await client.recv(timeout=5)
    assert error == Error(ErrorCode.BAD_REQUEST, "resume is only allowed as the first message of a connection")
    await client.end()
    transcript = Transcript()
    async for message in client:
        transcript.apply(message)
    assert transcript.words == ["hello"] and transcript.ended_words == 1  # the stream went on, unchanged


async def test_after_a_resume_the_cache_misses_once_then_keeps_the_context(aligner, fake_labels):
    """With cached left context the first window after a resume runs whole (its left context
    is the resume's context words), and the windows after it are cached again."""
    from streampunct.server.app import ServerConfig, ServerRuntime, serve
    from tests.streampunct.test_stream_cache import SHAPE, FakeStreamEngine

    class Recording(FakeStreamEngine):
        def __init__(self) -> None:
            super().__init__()
            self.ids: list[np.ndarray] = []

        def infer_stream(self, inputs):
            self.ids.append(inputs["input_ids"].copy())
            return super().infer_stream(inputs)

    engine = Recording()
    server = await serve(ServerConfig(host="127.0.0.1", port=0),
                         ServerRuntime(lambda: engine, aligner, TEST_WINDOW, "fake-stream", stream_shape=SHAPE))
    try:
        await server.wait_ready()
        engine.calls.clear()  # the warm-up's
        engine.ids.clear()
        context = [PunctuatedWord(w, "") for w in ("so", "what", "we", "did", "was")]
        client = await StreamClient.connect(server.url)
        await client.send(ResumeRequest(100, tuple(context), ConfigRequest(right_context=1)))
        assert isinstance(await client.recv(timeout=5), Resumed)
        for k in range(12):
            await client.send_words([SCHEDULE_VOCAB[k % len(SCHEDULE_VOCAB)]])
        await client.end()
        messages = [m async for m in client]
        finals = [m for m in messages if isinstance(m, Final)]
        indices = [f.start + i for f in finals for i in range(len(f.words))]
        assert indices == list(range(100, 112)) and messages[-1] == Ended(112)
        (b0, t0, c0), *rest = engine.calls
        assert c0 == 0  # a miss: the first window runs whole ...
        context_ids = [i for w in context for i in aligner.word_ids(w.w)]
        first_row = [int(x) for x in engine.ids[0][0]]
        assert first_row[1 : 1 + len(context_ids)] == context_ids  # ... with the context as its left context
        assert any(c > 0 for _, _, c in rest)  # then the cache serves again
    finally:
        await server.shutdown()


def test_serve_takes_the_drain_mode():
    from streampunct.cli import build_parser
    from streampunct.commands.serve import build_config
    from streampunct.server.app import ServerConfig

    parser = build_parser()
    assert build_config(parser.parse_args(["serve"])).drain == "finalize"
    assert build_config(parser.parse_args(["serve", "--drain", "resume"])).drain == "resume"
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--drain", "later"])
    with pytest.raises(ValueError, match="drain must be one of finalize, resume, not 'later'"):
        ServerConfig(drain="later")


async def drain_with_a_window_at_the_engine(start_server, last: str, *, read_end_first: bool = False,
                                            **config) -> tuple[list[str], int | None, str | None]:
    """Shut down a server (``config``) while its engine holds one stream's window: 12 words and
    ``last`` (``end`` or ``flush``) sent, no word final yet. The frames the client read after
    that, and its close code and reason."""
    from websockets.asyncio.client import connect as ws_connect
    from websockets.exceptions import ConnectionClosed

    from tests.streampunct.fakes import GatedEngine, until

    engine = GatedEngine(open=True)  # the warm-up passes
    server = await start_server(engine=engine, **config)
    engine.close_gate()
    stopping = None
    frames: list[str] = []
    try:
        async with ws_connect(server.url) as ws:
            await ws.recv()  # ready
            await ws.send(json.dumps({"type": "words", "words": [{"w": w} for w in SCHEDULE_VOCAB[:12]]}))
            await ws.send(json.dumps({"type": last}))
            await engine.wait_entered(1)  # a window is at the engine; no word is final yet
            if read_end_first:  # the session has read the end and only finishes its words
                await until(lambda: all(session.protocol.end_received for session in server.sessions))
            stopping = asyncio.create_task(server.shutdown())
            async with asyncio.timeout(10):
                with contextlib.suppress(ConnectionClosed):
                    async for frame in ws:
                        frames.append(frame)
        return frames, ws.close_code, ws.close_reason
    finally:
        engine.open()
        if stopping is not None:
            await stopping


@pytest.mark.parametrize("read_end_first", [False, True])
async def test_a_resume_drain_hands_off_a_stream_whose_client_already_sent_end(start_server, read_end_first):
    """``--drain resume`` closes every stream with 1012 at once, also one whose client has sent
    ``end`` and waits for the last finals: they are decided where it resumes, not here until
    the shutdown timeout (a 1001 cut partway through them)."""
    frames, code, _ = await drain_with_a_window_at_the_engine(
        start_server, "end", read_end_first=read_end_first, drain="resume", shutdown_timeout_s=30.0)
    assert code == 1012
    assert not any('"final"' in f for f in frames)


async def test_a_drain_cut_short_by_the_shutdown_timeout_says_so_in_its_close_reason(start_server, caplog):
    """A complete drain closes with 1001 "server shutting down"; one that ``shutdown_timeout_s``
    cuts short (the engine still holds the stream's window) closes with 1001 and a reason that
    tells the client its words may not all be final."""
    from streampunct.server.app import DRAIN_CUT_SHORT_REASON

    with caplog.at_level(logging.WARNING, logger="streampunct.server.app"):
        frames, code, reason = await drain_with_a_window_at_the_engine(
            start_server, "flush", shutdown_timeout_s=0.2, close_timeout_s=2.0)
    assert (code, reason) == (1001, DRAIN_CUT_SHORT_REASON)
    assert not any('"final"' in f for f in frames)
    assert any("sessions still open after 0.2s; closing them" in r.getMessage() for r in caplog.records)


async def test_a_second_stop_signal_cuts_the_drain_short(aligner):
    """The first SIGTERM drains (here the engine holds the stream's only window, so the drain
    would wait the whole shutdown timeout, a minute); a second one closes the sessions still
    draining at once, with the reason of a drain cut short, and the server stops without
    waiting for the engine's call."""
    import os
    import signal

    from websockets.asyncio.client import connect as ws_connect
    from websockets.exceptions import ConnectionClosed

    from streampunct.server.app import (
        DRAIN_CUT_SHORT_REASON,
        ServerConfig,
        ServerRuntime,
        run_until_signalled,
    )
    from tests.streampunct.conftest import TEST_WINDOW
    from tests.streampunct.fakes import GatedEngine, until

    engine = GatedEngine(open=True)  # the warm-up passes
    ready: asyncio.Future = asyncio.get_running_loop().create_future()
    config = ServerConfig(host="127.0.0.1", port=0, shutdown_timeout_s=60.0, close_timeout_s=2.0)
    serving = asyncio.create_task(run_until_signalled(
        config, ServerRuntime(lambda: engine, aligner, TEST_WINDOW, model_name="fake-model"),
        on_ready=ready.set_result))
    try:
        server = await asyncio.wait_for(ready, 30)
        engine.close_gate()
        async with ws_connect(server.url) as ws:
            await ws.recv()  # ready
            await ws.send(json.dumps({"type": "words", "words": [{"w": w} for w in SCHEDULE_VOCAB[:12]]}))
            await ws.send(json.dumps({"type": "flush"}))
            await engine.wait_entered(1)  # a window is at the engine; no word is final yet
            os.kill(os.getpid(), signal.SIGTERM)
            await until(lambda: server._shutdown_task is not None)  # draining: the words wait for the engine
            os.kill(os.getpid(), signal.SIGTERM)
            async with asyncio.timeout(10):
                with contextlib.suppress(ConnectionClosed):
                    async for _ in ws:
                        pass
        assert (ws.close_code, ws.close_reason) == (1001, DRAIN_CUT_SHORT_REASON)
        assert await asyncio.wait_for(serving, 15) == signal.SIGTERM
    finally:
        engine.open()
        if not serving.done():
            serving.cancel()


async def test_a_hurried_shutdown_still_closes_an_idle_engine(start_server, caplog):
    """hurry() before the shutdown (a second signal while it starts): the drain is cut at once,
    but an idle engine still gets its close (it is not "still busy", and serve would not exit
    through os._exit), and no session count is claimed for a server that has none."""
    from streampunct.server import app

    app._engine_abandoned.clear()  # (process-wide: an earlier test's gated engine may have set it)
    server = await start_server()
    with caplog.at_level(logging.INFO, logger="streampunct.server.app"):
        server.hurry()
        await server.shutdown()
    assert not server.batcher.engine_busy() and not app.engine_abandoned()
    assert not [r for r in caplog.records if "still busy" in r.getMessage() or "still open" in r.getMessage()]


async def test_a_drain_cut_short_closes_a_session_with_every_word_final_as_a_complete_drain(start_server):
    """At the shutdown timeout (here 0) every session still open is closed with 1001; one whose
    words were all final and sent gets the complete drain's reason, not the one that says its
    words may not all be final (found by an operator's probe, 2026-12-02)."""
    from websockets.asyncio.client import connect as ws_connect
    from websockets.exceptions import ConnectionClosed

    from streampunct.server.app import DRAIN_CUT_SHORT_REASON
    from streampunct.server.session import SHUTDOWN_REASON
    from tests.streampunct.fakes import GatedEngine

    engine = GatedEngine(open=True)  # the warm-up passes
    server = await start_server(engine=engine, shutdown_timeout_s=0.0, close_timeout_s=2.0)
    try:
        async with ws_connect(server.url) as done, ws_connect(server.url) as held:
            await done.recv()
            await held.recv()  # ready
            await done.send(json.dumps({"type": "words", "words": SCHEDULE_VOCAB[:3]}))
            await done.send(json.dumps({"type": "flush"}))
            async with asyncio.timeout(10):
                while json.loads(await done.recv())["type"] != "flushed":
                    pass
            engine.close_gate()
            entered = engine.entered
            await held.send(json.dumps({"type": "words", "words": SCHEDULE_VOCAB[:12]}))
            await held.send(json.dumps({"type": "flush"}))
            await engine.wait_entered(entered + 1)  # its window is at the engine: not final
            stopping = asyncio.create_task(server.shutdown())
            for ws in (done, held):
                async with asyncio.timeout(10):
                    with contextlib.suppress(ConnectionClosed):
                        async for _ in ws:
                            pass
            assert (done.close_code, done.close_reason) == (1001, SHUTDOWN_REASON)
            assert (held.close_code, held.close_reason) == (1001, DRAIN_CUT_SHORT_REASON)
    finally:
        engine.open()
    await stopping
