"""The client resumes by itself (:class:`streampunct.client.stream_client.ResumableStream`, ``streampunct caption``).

Real servers on loopback behind a TCP forwarder (:mod:`tests.streampunct.tcp_proxy`), which
stands in for a load balancer: it sends new connections to the replica the test
chooses and can cut open ones.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from streampunct.client.stream_client import (
    Reconnect,
    ResumableStream,
    ResumeFailed,
    ResumeNotice,
    Transcript,
)
from streampunct.core.wire import Ended, Final, Flushed, Partial, Resumed, ServerMessage
from streampunct.text.normalize import render
from tests.streampunct.conftest import SCHEDULE_VOCAB
from tests.streampunct.fakes import until
from tests.streampunct.tcp_proxy import TcpProxy
from tests.streampunct.test_caption_signals import caption_process

FAST = Reconnect(attempts=5, initial_delay_s=0.01, max_delay_s=0.05)


def vocabulary_words(n: int, shift: int = 0) -> list[str]:
    return [SCHEDULE_VOCAB[(5 * i + shift) % len(SCHEDULE_VOCAB)] for i in range(n)]


class Reader:
    """Iterates a stream in a task; tests wait on what it has received (no polling)."""

    def __init__(self, stream: ResumableStream) -> None:
        self.stream = stream
        self.messages: list[ServerMessage] = []
        self.transcript = Transcript()
        self._changed = asyncio.Condition()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            async for message in self.stream:
                self.messages.append(message)
                self.transcript.apply(message)
                async with self._changed:
                    self._changed.notify_all()
        finally:
            async with self._changed:
                self._changed.notify_all()

    async def until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: predicate() or self.task.done())
        assert predicate(), "the stream ended first"

    async def finish(self, timeout: float = 20.0) -> None:
        await asyncio.wait_for(self.task, timeout)

    async def send_last(self, words: list[str], timeout: float = 20.0) -> None:
        """Send the stream's last ``words``, then ``end``, and wait for the stream to finish."""
        await self.stream.send_words(words)
        await self.stream.end()
        await self.finish(timeout)

    def finals(self) -> list[Final]:
        return [m for m in self.messages if isinstance(m, Final)]


def expected_text(words, fake_labels) -> str:
    labels = fake_labels(words)
    labels[-1] = 2 if labels[-1] in (0, 1) else labels[-1]  # the end of the stream marks its last word
    return render(words, labels, capitalize=True)


def assert_captioned_once(out, stdout: str, words: list[str], fake_labels) -> None:
    """``caption``'s --out and stdout hold every word once, as one stream."""
    expected = expected_text(words, fake_labels)
    assert out.read_text().strip() == expected
    assert stdout.replace("\n", " ").strip() == expected


async def caption_across_a_switch(proxy, server, words, out, switch, *options) -> tuple[int, str, str]:
    """``streampunct caption - --out out`` through ``proxy`` (the balancer): 20 of ``words`` on
    its stdin; once ``server`` holds them, ``await switch()`` (the server goes away, new
    connections go to another), then the rest, and stdin closes. Returns the exit status,
    stdout and stderr."""
    async with caption_process("-", "--url", proxy.url(), "--out", str(out), "--right-context", "3",
                               "--max-delay-ms", "600000", "--max-chunk", "5", *options) as proc:
        proc.stdin.write((" ".join(words[:20]) + "\n").encode())
        await proc.stdin.drain()
        await until(lambda: sum(s.protocol.n_words for s in server.sessions) >= 20)  # the server holds them
        await switch()
        proc.stdin.write((" ".join(words[20:]) + "\n").encode())
        await proc.stdin.drain()
        proc.stdin.close()
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode, stdout.decode(), stderr.decode()


def assert_exactly_once(reader: Reader, words: list[str], fake_labels) -> None:
    finals = reader.finals()
    indices = [f.start + i for f in finals for i in range(len(f.words))]
    assert indices == list(range(len(words)))  # each word once, in order
    assert reader.transcript.words == words and reader.messages[-1] == Ended(len(words))
    # The finals' texts, one after another, are the whole stream written once: captions
    # repeat nothing, lose nothing, and sentence casing goes on across the interruption.
    assert " ".join(f.text for f in finals) == expected_text(words, fake_labels)


async def test_a_drained_server_hands_the_stream_to_another(start_server, fake_labels):
    """``serve --drain resume``: server 1 closes with 1012 at once; the client resumes on
    server 2 with its undecided words, and words sent meanwhile are not lost."""
    server1 = await start_server(drain="resume")
    server2 = await start_server()
    proxy = await TcpProxy(server1.port).start()
    notices: list[ResumeNotice] = []
    words = vocabulary_words(70)
    try:
        stream = await ResumableStream.connect(proxy.url(), right_context=3, max_delay_ms=600_000,
                                               capitalize=True, reconnect=FAST, on_notice=notices.append)
        reader = Reader(stream)
        await stream.send_words(words[:30])
        await reader.until(lambda: reader.transcript.n_final >= 27)  # 27 decidable by right context
        proxy.target = server2.port  # the balancer sends new connections to server 2
        drained = asyncio.create_task(server1.shutdown())
        await stream.send_words(words[30:40])  # while server 1 goes away
        await drained
        await reader.until(lambda: bool(notices))
        await reader.send_last(words[40:])
    finally:
        await proxy.close()
    assert_exactly_once(reader, words, fake_labels)
    [notice] = notices
    assert notice.code == 1012 and notice.start is not None and 27 <= notice.start <= 40
    assert notice.resent == 40 - notice.start  # every word without a final, those sent meanwhile too
    assert "resumed at word" in notice.format() and "close code 1012" in notice.format()
    assert [m for m in reader.messages if isinstance(m, Resumed)] == [Resumed(notice.start, stream.options)]
    assert server2.metrics.words_in._value.get() == 70 - notice.start  # server 2 got only what it had to


async def test_a_dropped_connection_resumes_with_flush_and_hypothesis(start_server, fake_labels):
    """A connection cut without a close frame (1006) resumes on the same server; an
    unanswered flush is answered once, and the hypothesis is sent again."""
    from tests.streampunct.conftest import FakeEngine

    server = await start_server(engine=FakeEngine(delay_s=0.05))
    proxy = await TcpProxy(server.port).start()
    notices: list[ResumeNotice] = []
    words = vocabulary_words(24, shift=3)
    try:
        stream = await ResumableStream.connect(proxy.url(), right_context=4, max_delay_ms=600_000,
                                               capitalize=True, partials=True, reconnect=FAST,
                                               on_notice=notices.append)
        reader = Reader(stream)
        await stream.send_words(words[:12])
        await stream.flush()
        await stream.send_words(words[12:16])
        await stream.send_hypothesis(["interim", "words"])
        assert proxy.drop() == 1
        await reader.until(lambda: bool(notices))

        def hypothesis_answered_after_resume() -> bool:
            after = reader.messages[reader.messages.index(Resumed(notices[0].start, stream.options)):]
            return any(isinstance(m, Partial) and [w.w for w in m.hypothesis] == ["interim", "words"]
                       for m in after)

        await reader.until(hypothesis_answered_after_resume)
        await reader.send_last(words[16:])
    finally:
        await proxy.close()
    assert_exactly_once(reader, words, fake_labels)
    [notice] = notices
    assert notice.code == 1006 and "the connection dropped" in notice.format()
    assert [m.upto for m in reader.messages if isinstance(m, Flushed)] == [12]  # answered once


async def test_going_away_1001_after_finalizing_resumes_with_nothing_to_send_again(start_server, fake_labels):
    server1 = await start_server()  # drain "finalize": every word final, then 1001
    server2 = await start_server()
    proxy = await TcpProxy(server1.port).start()
    notices: list[ResumeNotice] = []
    words = vocabulary_words(20, shift=1)
    try:
        stream = await ResumableStream.connect(proxy.url(), right_context=3, max_delay_ms=600_000,
                                               capitalize=True, reconnect=FAST, on_notice=notices.append)
        reader = Reader(stream)
        await stream.send_words(words[:10])
        await reader.until(lambda: reader.transcript.n_final >= 7)
        proxy.target = server2.port
        await server1.shutdown()
        await reader.until(lambda: bool(notices))
        await reader.send_last(words[10:])
    finally:
        await proxy.close()
    [notice] = notices
    assert notice.code == 1001 and notice.start == 10 and notice.resent == 0
    finals = reader.finals()
    indices = [f.start + i for f in finals for i in range(len(f.words))]
    assert indices == list(range(20)) and reader.transcript.words == words
    # A shutdown flushes: the words before it keep the labels they had, and the text goes on.
    assert " ".join(f.text for f in finals).split()[10:] == expected_text(words, fake_labels).split()[10:]


async def test_after_an_idle_close_owing_nothing_the_stream_comes_back_at_its_next_send(start_server,
                                                                                      fake_labels):
    """A server with --idle-timeout-s closes a silent stream (1001, "idle timeout") after its
    finals. A stream owed nothing does not reconnect into the same timeout over and over (and
    use up its attempts): it resumes when it next sends, and loses nothing."""
    server = await start_server(idle_timeout_s=0.3)
    notices: list[ResumeNotice] = []
    words = vocabulary_words(12)
    stream = await ResumableStream.connect(server.url, right_context=3, max_delay_ms=600_000, capitalize=True,
                                           reconnect=FAST, on_notice=notices.append)
    reader = Reader(stream)
    await stream.send_words(words[:6])
    opened = server.metrics.sessions_total._value.get
    await until(lambda: server.metrics.idle_closes._value.get() >= 1, timeout=10)
    await reader.until(lambda: reader.transcript.n_final == 6)  # finished before the close
    # silent for several timeouts and the attempts' backoff: no new connection is made
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(until(lambda: opened() > 1, timeout=30), 1.5)
    assert not notices and not reader.task.done()
    await reader.send_last(words[6:])
    assert_exactly_once(reader, words, fake_labels)
    [notice] = notices
    assert (notice.code, notice.reason, notice.start, notice.resent) == (1001, "idle timeout", 6, 6)
    assert opened() == 2


async def test_a_resume_fits_the_servers_frame_limit_by_sending_less_context(start_server):
    """A session whose config takes most of a 2 KB frame limit: its resume, config plus the
    window's 8 context words of 40 letters, would be over it (and closed with 1009 at every
    attempt); the client drops the oldest context words until the frame fits."""
    server = await start_server(idle_timeout_s=0.3, max_message_bytes=2048)
    lexicon = [(f"spoken phrase {i}", f"Written{i}") for i in range(55)]  # a config of 1,864 bytes
    words = [f"{'x' * 36}{i:04d}" for i in range(40)]
    notices: list[ResumeNotice] = []
    stream = await ResumableStream.connect(server.url, right_context=3, max_delay_ms=600_000, lexicon=lexicon,
                                           reconnect=FAST, on_notice=notices.append)
    reader = Reader(stream)
    await stream.send_words(words[:30])
    await until(lambda: server.metrics.idle_closes._value.get() >= 1, timeout=10)
    await reader.send_last(words[30:])
    assert reader.transcript.words == words and reader.messages[-1] == Ended(len(words))
    [notice] = notices
    assert (notice.code, notice.start) == (1001, 30)


async def test_reconnect_retries_until_a_server_answers(start_server, fake_labels):
    server = await start_server()
    dead = await start_server()
    dead_port = dead.port
    await dead.shutdown()  # nothing listens there any more
    notices: list[ResumeNotice] = []

    def route(n: int) -> None:
        # connection 2 (the first attempt) goes nowhere; connection 3 reaches the server
        proxy.target = dead_port if n == 2 else server.port

    proxy = await TcpProxy(server.port, on_connect=route).start()
    words = vocabulary_words(12, shift=2)
    try:
        stream = await ResumableStream.connect(proxy.url(), right_context=2, max_delay_ms=600_000,
                                               capitalize=True, reconnect=FAST, on_notice=notices.append)
        reader = Reader(stream)
        await stream.send_words(words[:6])
        await reader.until(lambda: reader.transcript.n_final >= 4)
        proxy.drop()
        await reader.until(lambda: bool(notices))
        await reader.send_last(words[6:])
    finally:
        await proxy.close()
    assert_exactly_once(reader, words, fake_labels)
    assert [(n.attempts, n.start is not None) for n in notices] == [(2, True)]


async def test_a_stream_that_fails_at_every_resume_gives_up(start_server, aligner):
    """An engine that fails on a word closes with 1011 at every resume; with no final in
    between the attempts add up, and the client gives up instead of looping."""
    from tests.streampunct.conftest import FakeEngine

    boom = aligner.word_ids("xylophone")[0]
    server = await start_server(engine=FakeEngine(fail_token=boom))
    notices: list[ResumeNotice] = []
    stream = await ResumableStream.connect(server.url, right_context=0, max_delay_ms=600_000,
                                           reconnect=Reconnect(attempts=3, initial_delay_s=0.01, max_delay_s=0.02),
                                           on_notice=notices.append)
    reader = Reader(stream)
    await stream.send_words(["hello"])
    await reader.until(lambda: reader.transcript.n_final == 1)
    await stream.send_words(["xylophone"])
    with pytest.raises(ResumeFailed) as info:
        await reader.finish()
    assert reader.transcript.words == ["hello"]
    assert [n.code for n in notices] == [1011] * 4 and [n.start for n in notices] == [1, 1, 1, None]
    assert "before any word was finalized" in str(info.value)
    assert stream.pending[0].w == "xylophone"  # kept: nothing is dropped silently


async def test_a_drained_server_leaves_the_words_held_for_a_phrase_to_the_server_that_resumes(start_server):
    """``serve --drain resume`` with a lexicon: "new" is final, its text held for "new york";
    the drained server closes with 1012 and writes nothing more. A client that knows only
    the protocol resumes on another server without ``held``: that server infers it from the
    words sent again ("york ...") and writes "New York", so the texts show every word once."""
    from websockets.asyncio.client import connect as ws_connect

    from streampunct.client.stream_client import StreamClient
    from streampunct.core.wire import decode_server

    server = await start_server(drain="resume")
    options = {"right_context": 1, "max_delay_ms": 600_000}
    client = await StreamClient.connect(server.url, **options, lexicon=[("new york", "New York")])
    await client.send_words("we flew to new york".split())
    finals: list[Final] = []
    while not finals or finals[-1].start + len(finals[-1].words) < 4:
        if isinstance(message := await client.recv(timeout=10), Final):
            finals.append(message)
    assert [w.w for f in finals for w in f.words] == ["we", "flew", "to", "new"]
    written = " ".join(f.text for f in finals if f.text).split()
    assert [t.rstrip(",.?") for t in written] == ["we", "flew", "to"]  # "new": held
    await server.shutdown()
    assert [m async for m in client] == []
    assert client.close_code == 1012
    await client.close()

    other = await start_server()
    async with ws_connect(other.url) as ws:
        await ws.recv()  # ready
        context = [{"w": w.w, "p": w.p} for f in finals for w in f.words]
        await ws.send(json.dumps({"type": "resume", "start": 4, "context": context,
                                  "config": {**options, "lexicon": [["new york", "New York"]]}}))
        assert json.loads(await ws.recv())["type"] == "resumed"
        await ws.send(json.dumps({"type": "words", "words": ["york", "today"]}))
        await ws.send(json.dumps({"type": "end"}))
        after = [m for m in [decode_server(f) async for f in ws] if isinstance(m, Final)]
    assert [w.w for f in after for w in f.words] == ["york", "today"]
    written += " ".join(f.text for f in after if f.text).split()
    assert [t.rstrip(",.?") for t in written] == ["we", "flew", "to", "New", "York", "today"]


async def test_a_resumed_stream_writes_the_words_a_lost_connection_held(start_server):
    """The connection drops while "new" is final but held for "new york": the client passes the
    last final's ``held`` on in ``resume``, and the new connection writes "new" with the phrase,
    so the finals' texts show every word once."""
    server = await start_server()
    proxy = await TcpProxy(server.port).start()
    notices: list[ResumeNotice] = []
    try:
        stream = await ResumableStream.connect(proxy.url(), right_context=1, max_delay_ms=600_000,
                                               lexicon=[("new york", "New York")], reconnect=FAST,
                                               on_notice=notices.append)
        reader = Reader(stream)
        await stream.send_words("we flew to new york".split())
        await reader.until(lambda: stream.n_final >= 4)
        assert reader.finals()[-1].held == 1  # "new": final, its text held
        assert proxy.drop() == 1
        await reader.until(lambda: bool(notices))
        await reader.send_last(["today"])
    finally:
        await proxy.close()
    finals = reader.finals()
    assert [w.w for f in finals for w in f.words] == "we flew to new york today".split()
    written = " ".join(f.text for f in finals if f.text).split()
    assert [t.rstrip(",.?") for t in written] == ["we", "flew", "to", "New", "York", "today"]


async def test_no_resume_with_zero_attempts(start_server):
    server = await start_server(drain="resume")
    stream = await ResumableStream.connect(server.url, right_context=5, reconnect=Reconnect(attempts=0))
    reader = Reader(stream)
    await stream.send_words(["one", "two"])
    await server.shutdown()
    await reader.finish()
    assert stream.close_code == 1012 and stream.notices == []
    assert [w.w for w in stream.pending] == ["one", "two"]


async def test_caption_command_resumes_on_another_server(start_server, tmp_path, fake_labels):
    """``streampunct caption -`` through a balancer: server 1 drains with 1012, the command
    resumes on server 2; --out and stdout hold every word once, stderr says what happened."""
    server1 = await start_server(drain="resume")
    server2 = await start_server()
    out = tmp_path / "out.txt"
    words = vocabulary_words(40, shift=4)

    async def drain() -> None:
        proxy.target = server2.port
        await server1.shutdown()

    async with TcpProxy(server1.port) as proxy:
        rc, stdout, stderr = await caption_across_a_switch(proxy, server1, words, out, drain)
    assert rc == 0, stderr
    resumes = [line for line in stderr.splitlines() if "connection lost" in line]
    assert len(resumes) == 1 and "close code 1012" in resumes[0] and "resumed at word" in resumes[0]
    assert "Traceback" not in stderr
    assert_captioned_once(out, stdout, words, fake_labels)


def test_reconnect_waits_double_up_to_the_cap_with_jitter():
    import random

    policy = Reconnect(attempts=8, initial_delay_s=0.2, max_delay_s=1.0)
    rng = random.Random(0)
    for attempt, whole in [(1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (8, 1.0), (200, 1.0)]:
        waits = [policy.delay(attempt, rng) for _ in range(50)]
        assert all(whole / 2 <= w <= whole for w in waits) and max(waits) - min(waits) > whole / 10
    for bad in ({"attempts": -1}, {"initial_delay_s": -0.1}, {"initial_delay_s": 2.0, "max_delay_s": 1.0}):
        with pytest.raises(ValueError):
            Reconnect(**bad)


def test_a_notice_is_one_line_that_says_what_happened():
    resumed = ResumeNotice(1012, "server restarting", 57, 3, 1, 0.31, "ws://lb/v1/stream")
    assert resumed.format() == ("connection lost (close code 1012: server restarting); resumed at word 57 on "
                                "ws://lb/v1/stream after 1 attempt in 0.3 s, 3 words sent again")
    failed = ResumeNotice(1006, "", None, 0, 10, 31.0, "ws://lb/v1/stream", "cannot connect to ws://lb: refused")
    assert failed.format() == ("connection lost (the connection dropped); could not resume (10 attempts in "
                               "31.0 s): cannot connect to ws://lb: refused")


async def test_a_hypothesis_that_fails_at_every_resume_gives_up_too(start_server, aligner):
    """Every word final, then a hypothesis the engine fails on: nothing is pending, but each
    resumed connection dies at once on the hypothesis sent again, so the attempts add up."""
    from tests.streampunct.conftest import FakeEngine

    boom = aligner.word_ids("xylophone")[0]
    server = await start_server(engine=FakeEngine(fail_token=boom))
    notices: list[ResumeNotice] = []
    stream = await ResumableStream.connect(server.url, right_context=0, max_delay_ms=600_000, partials=True,
                                           reconnect=Reconnect(attempts=3, initial_delay_s=0.01, max_delay_s=0.02),
                                           on_notice=notices.append)
    reader = Reader(stream)
    await stream.send_words(["hello"])
    await reader.until(lambda: reader.transcript.n_final == 1)
    await stream.send_hypothesis(["xylophone"])
    with pytest.raises(ResumeFailed):
        await reader.finish()
    assert len(notices) == 4 and notices[-1].start is None  # three resumes, then it gave up
    assert reader.transcript.words == ["hello"]


async def test_a_server_that_resumes_without_itn_stops_an_itn_stream(start_server, monkeypatch):
    """At the first connection the client refuses a server without ITN for an itn stream; a
    server that resumes the stream without it is refused the same way, not followed silently."""
    import streampunct.client.stream_client as sc

    server = await start_server(drain="resume")
    other = await start_server()
    proxy = await TcpProxy(server.port).start()
    stream = await ResumableStream.connect(proxy.url(), right_context=5, reconnect=FAST)
    # the session asked for itn (as caption --itn does on a server with grammars)
    monkeypatch.setattr(stream, "options", sc.SessionOptions(5, stream.options.max_delay_ms, itn=True))
    reader = Reader(stream)
    await stream.send_words(["twenty", "five"])
    try:
        proxy.target = other.port
        await server.shutdown()
        with pytest.raises(ResumeFailed) as info:
            await reader.finish()
    finally:
        await proxy.close()
    assert "itn is not available on this server" in str(info.value)
    assert str(info.value).endswith("(the server resumed without itn)")


async def test_messages_of_an_unknown_type_are_skipped(start_server):
    """The contract lets a newer server add message types: the clients skip them."""
    import json

    from websockets.asyncio.server import serve as ws_serve

    async def newer_server(ws) -> None:
        await ws.send(json.dumps({"type": "ready", "session": "s", "model": "m", "protocol": 1,
                                  "config": {"right_context": 0, "max_delay_ms": 0, "partials": False,
                                             "capitalize": False}}))
        await ws.recv()
        await ws.send(json.dumps({"type": "stats", "words": 1}))
        await ws.send(json.dumps({"type": "final", "start": 0, "words": [{"w": "hi", "p": "."}], "text": "hi."}))
        await ws.send(json.dumps({"type": "end", "words": 1}))

    async with ws_serve(newer_server, "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        stream = await ResumableStream.connect(f"ws://127.0.0.1:{port}/v1/stream", reconnect=Reconnect(attempts=0))
        reader = Reader(stream)
        await stream.send_words(["hi"])
        await reader.finish()
    assert [m.type for m in reader.messages] == ["final", "end"] and reader.transcript.words == ["hi"]


async def test_symbol_words_are_sent_for_the_text_but_take_no_index(start_server):
    """``send_words(["rock", "&", "roll", "😀"])``: "&" and "😀" go to the server, whose text shows
    them where they stood, but take no index: the words returned, kept until final and sent
    again after a resume are those with one."""
    from streampunct.core.wire import Ended

    server = await start_server()
    stream = await ResumableStream.connect(server.url, right_context=1, max_delay_ms=600_000)
    reader = Reader(stream)
    sent = await stream.send_words(["we", "love", "rock", "&", "roll", "😀"])
    assert [w.w for w in sent] == ["we", "love", "rock", "roll"] and stream.n_sent == 4
    await stream.end()
    await reader.finish()
    assert reader.transcript.words == ["we", "love", "rock", "roll"] and reader.messages[-1] == Ended(4)
    tokens = [t.rstrip(",.?") for f in reader.finals() for t in f.text.split()]
    assert tokens == ["we", "love", "rock", "&", "roll", "😀"]
