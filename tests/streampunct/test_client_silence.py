"""A server that hangs without closing its socket (``ResumableStream(silence_timeout_s=...)``, ``caption
--silence-timeout-s``).

A replica that is SIGSTOPped, a frozen VM, a host cut off without a reset: the connection stays
open and nothing more comes, no close frame, no reset, and the clients set no ping timeout. Here
a TCP forwarder that stops forwarding the connections it holds
(:class:`~tests.streampunct.tcp_proxy.FreezingProxy`) stands in for such a replica,
deterministically; new connections go to another server, as a balancer sends them.
"""

from __future__ import annotations

import asyncio

import pytest

from streampunct.client.stream_client import Reconnect, ResumableStream, ResumeNotice
from streampunct.core.wire import Ended, Final, Flushed, Resumed
from tests.streampunct.fakes import until
from tests.streampunct.tcp_proxy import FreezingProxy, TcpProxy
from tests.streampunct.test_resume_client import (
    FAST,
    Reader,
    assert_captioned_once,
    assert_exactly_once,
    caption_across_a_switch,
    vocabulary_words,
)

#: The silence timeout of these tests (seconds): short, the engine's and the loop's delays far below it.
SILENCE_S = 0.5


class EndWatchingProxy(TcpProxy):
    """:class:`TcpProxy` that sets :attr:`ended` once the server's ``end`` message has been
    written to the client's socket (server frames are not masked: the JSON shows)."""

    def __init__(self, target: int) -> None:
        super().__init__(target)
        self.ended = asyncio.Event()

    async def _forward(
        self, data: bytes, writer: asyncio.StreamWriter, source: asyncio.StreamWriter
    ) -> None:
        writer.write(data)
        to_client = writer.get_extra_info("sockname")[1] == self.port
        if to_client and b'"type":"end"' in data.replace(b" ", b""):
            self.ended.set()


async def connect(
    url: str, notices: list[ResumeNotice] | None = None, **options
) -> ResumableStream:
    """A stream owed no final by time (a delay bound of 10 minutes) that resumes at once
    (:data:`FAST`) and leaves a connection silent for :data:`SILENCE_S` while it owes finals;
    its notices go to ``notices``; ``options`` add to these or change them."""
    settings = {"max_delay_ms": 600_000, "reconnect": FAST, "silence_timeout_s": SILENCE_S}
    if notices is not None:
        settings["on_notice"] = notices.append
    return await ResumableStream.connect(url, **(settings | options))


async def test_a_replica_that_hangs_is_left_once_it_owes_finals_and_the_stream_resumes_elsewhere(
    start_server, fake_labels
):
    """Server 1 hangs while 3 words wait for right context: it owes nothing (the delay bound is
    10 minutes away), and the stream is not cut, however long nothing comes. Once the words sent
    give them their right context it owes their finals; silent for ``silence_timeout_s`` past
    that, the connection is cut and the stream resumes on server 2, every word once."""
    server1 = await start_server()
    server2 = await start_server()
    notices: list[ResumeNotice] = []
    words = vocabulary_words(40, shift=2)
    async with FreezingProxy(server1.port) as proxy:
        stream = await connect(proxy.url(), notices, right_context=3, capitalize=True)
        reader = Reader(stream)
        await stream.send_words(words[:10])
        await reader.until(lambda: stream.n_final == 7)  # words 7..9 wait for right context
        assert proxy.freeze() == 1
        proxy.target = server2.port  # the balancer sends new connections to server 2
        # nothing owed: several timeouts of silence cut nothing
        with pytest.raises(TimeoutError):
            await reader.until(lambda: bool(notices), timeout=4 * SILENCE_S)
        assert proxy.connections == 1 and not reader.task.done()
        await stream.send_words(words[10:20])  # words 7..16 are owed now; server 1 says nothing
        await reader.until(lambda: bool(notices))
        await reader.send_last(words[20:])
    assert_exactly_once(reader, words, fake_labels)
    [notice] = notices
    assert (notice.code, notice.start, notice.resent, notice.attempts) == (1006, 7, 13, 1)
    assert (
        "no message from the server in" in notice.reason and "while it owed finals" in notice.reason
    )
    assert notice.format().startswith("connection lost (no message from the server in ")
    assert [m for m in reader.messages if isinstance(m, Resumed)] == [Resumed(7, stream.options)]
    assert server2.metrics.words_in._value.get() == 40 - 7  # server 2 got only what it had to
    assert proxy.connections == 2


async def test_an_unanswered_flush_is_owed_at_once_and_answered_once_after_the_resume(start_server):
    """A ``flush`` sent to a replica that hangs is owed at once (the words before it are owed
    their finals too, whatever the delay bound): the stream resumes on server 2, which
    finalizes them and answers the flush, once."""
    server1 = await start_server()
    server2 = await start_server()
    notices: list[ResumeNotice] = []
    words = vocabulary_words(8, shift=1)
    async with FreezingProxy(server1.port) as proxy:
        stream = await connect(proxy.url(), notices, right_context=50)
        reader = Reader(stream)
        await stream.send_words(words[:5])
        proxy.freeze()
        proxy.target = server2.port
        await stream.flush()
        await reader.until(lambda: any(isinstance(m, Flushed) for m in reader.messages))
        await reader.send_last(words[5:])
    assert reader.transcript.words == words
    assert [m.upto for m in reader.messages if isinstance(m, Flushed)] == [5]
    [notice] = notices
    assert (notice.code, notice.start, notice.resent) == (1006, 0, 5)


async def test_a_slow_server_that_keeps_sending_is_not_left(start_server):
    """A server whose engine takes 0.15 s a call, handed 240 words at once (all owed at once,
    right context 0): the last of them waits several timeouts for its final, but finals of the
    words before it come all along, and the stream stays on its connection."""
    from tests.streampunct.conftest import FakeEngine

    server = await start_server(engine=FakeEngine(delay_s=0.15))
    notices: list[ResumeNotice] = []
    words = vocabulary_words(240, shift=5)
    stream = await connect(server.url, notices, right_context=0, capitalize=True, partials=True)
    reader = Reader(stream)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await reader.send_last(words, timeout=60)
    took = loop.time() - began
    assert not notices and server.metrics.sessions_total._value.get() == 1
    finals = reader.finals()
    assert [f.start + i for f in finals for i in range(len(f.words))] == list(range(len(words)))
    assert reader.transcript.words == words and reader.messages[-1] == Ended(len(words))
    assert took > 2 * SILENCE_S and len(finals) > 3  # overdue for longer than the timeout, in steps


async def test_the_caption_command_leaves_a_replica_that_hangs(start_server, tmp_path, fake_labels):
    """``streampunct caption - --silence-timeout-s 0.5`` through a balancer: server 1 hangs with
    words owed (stdin closed: ``end`` sent); the command resumes on server 2 and exits 0 with
    every word once, where it used to wait for server 1 for ever."""
    server1 = await start_server()
    server2 = await start_server()
    out = tmp_path / "out.txt"
    words = vocabulary_words(30, shift=3)

    async def hang() -> None:
        proxy.freeze()
        proxy.target = server2.port

    async with FreezingProxy(server1.port) as proxy:
        rc, stdout, stderr = await caption_across_a_switch(
            proxy, server1, words, out, hang, "--silence-timeout-s", str(SILENCE_S)
        )
    assert rc == 0, stderr
    [resume] = [line for line in stderr.splitlines() if "connection lost" in line]
    assert "no message from the server in" in resume and "resumed at word" in resume
    assert "Traceback" not in stderr
    assert_captioned_once(out, stdout, words, fake_labels)


async def test_a_replica_that_hangs_with_no_reconnects_ends_the_stream(start_server):
    """``Reconnect(attempts=0)``: the stream cut for silence ends (1006, the reason says why)
    instead of waiting; the words without a final are kept."""
    server = await start_server()
    async with FreezingProxy(server.port) as proxy:
        stream = await connect(proxy.url(), right_context=0, reconnect=Reconnect(attempts=0))
        reader = Reader(stream)
        proxy.freeze()
        await stream.send_words(["one", "two"])
        await reader.finish(timeout=10)
    assert stream.close_code == 1006 and "while it owed finals" in (stream.close_reason or "")
    assert [w.w for w in stream.pending] == ["one", "two"] and stream.notices == []


async def test_a_silence_timeout_of_zero_or_none_is_off_and_a_negative_one_is_refused(start_server):
    server = await start_server()
    for off in (0, None):
        stream = await ResumableStream.connect(server.url, silence_timeout_s=off)
        assert stream.silence_timeout_s == 0
        await stream.close()
    with pytest.raises(ValueError, match="silence_timeout_s"):
        await ResumableStream.connect(server.url, silence_timeout_s=-1)


async def test_answers_that_came_while_nothing_iterated_are_taken_and_the_stream_is_not_cut(
    start_server,
):
    """The server answered every word and the ``end`` while the consumer was busy elsewhere, for
    longer than the timeout: those frames are taken first, the server was not silent (the stream
    was cut and resumed: the deadline, past, was looked at before the frames that had come)."""
    server = await start_server()
    notices: list[ResumeNotice] = []
    words = vocabulary_words(5, shift=4)
    stream = await connect(server.url, notices, right_context=0)
    loop = asyncio.get_running_loop()
    await stream.send_words(words)
    await stream.end()
    owed = loop.time()
    await until(lambda: stream.close_code is not None)  # every answer and the close came, unread
    await until(lambda: loop.time() > owed + 2 * SILENCE_S)
    messages = [message async for message in stream]
    assert notices == [] and server.metrics.sessions_total._value.get() == 1
    assert [w.w for m in messages if isinstance(m, Final) for w in m.words] == words
    assert messages[-1] == Ended(len(words)) and stream.close_code == 1000


async def test_answers_still_in_the_socket_when_the_deadline_passed_are_taken_first(start_server):
    """As above, with the answers still in the client's socket, not read by its event loop yet (a
    process stopped, or a loop blocked, past the deadline): the wait that ends at the deadline
    lets the loop read them, and they are taken; only then is a server with nothing sent silent."""
    server = await start_server()
    notices: list[ResumeNotice] = []
    words = vocabulary_words(5, shift=6)
    async with EndWatchingProxy(server.port) as proxy:
        stream = await connect(proxy.url(), notices, right_context=0)
        transport = stream._client.connection.transport
        transport.pause_reading()  # what the server sends stays in the client's socket
        loop = asyncio.get_running_loop()
        await stream.send_words(words)
        await stream.end()
        owed = loop.time()
        await asyncio.wait_for(proxy.ended.wait(), 10)  # the answers are in the socket
        await until(lambda: loop.time() > owed + 2 * SILENCE_S)
        transport.resume_reading()
        messages = [message async for message in stream]
    assert notices == [] and proxy.connections == 1
    assert [w.w for m in messages if isinstance(m, Final) for w in m.words] == words
    assert messages[-1] == Ended(len(words))
