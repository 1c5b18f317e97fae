"""SIGTERM/SIGINT on a real server process: pending words are finalized, then 1001."""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap

import pytest

from streampunct.client.stream_client import StreamClient, Transcript
from streampunct.core.wire import Error

SERVER_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    import numpy as np
    from engines.base import EngineBase
    from streampunct.core.alignment import Aligner
    from streampunct.server.app import ServerConfig, ServerRuntime, run_until_signalled

    class Engine(EngineBase):
        name = "fake"
        def infer(self, input_ids, attention_mask):
            logits = np.zeros((*input_ids.shape, 4), dtype=np.float32)
            logits[..., 2] = (input_ids % 7 == 0)
            return logits

    aligner = Aligner.from_file(sys.argv[1])
    config = ServerConfig(port=0)
    asyncio.run(run_until_signalled(
        config, ServerRuntime(Engine, aligner, model_name="fake"),
        on_ready=lambda server: print(server.port, flush=True),
    ))
    print("stopped", flush=True)
    """
)


def _default_stop_signals() -> None:
    """In the child: the stop signals at their defaults, whatever the test runner's (a job in the
    background of a script ignores SIGINT, one under nohup SIGHUP, and children inherit it)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
async def test_signal_finalizes_pending_words_then_closes_1001(tmp_path, minilm_tokenizer_path, sig):
    """SIGHUP (a closed terminal) too: it closed every client with 1011 and cut their words."""
    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), str(minilm_tokenizer_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, preexec_fn=_default_stop_signals,
    )
    try:
        port = int(await asyncio.wait_for(proc.stdout.readline(), 30))
        words = "one two three four five six seven".split()
        client = await StreamClient.connect(f"ws://127.0.0.1:{port}/v1/stream", right_context=100,
                                            max_delay_ms=600_000)
        await client.send_words(words)
        await client.send_raw('{"type": "barrier"}')  # answered once the words are fed
        assert isinstance(await client.recv(timeout=5), Error)
        proc.send_signal(sig)
        transcript = Transcript()
        async with asyncio.timeout(10):
            async for message in client:
                transcript.apply(message)
        assert transcript.words == words
        assert client.close_code == 1001
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        assert (await proc.stdout.read()).decode().strip() == "stopped"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _start_process(script, tokenizer, *extra: str):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), str(tokenizer), *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    port = int(await asyncio.wait_for(proc.stdout.readline(), 30))
    return proc, port


async def test_sigterm_with_drain_resume_hands_streams_to_another_process(tmp_path, minilm_tokenizer_path):
    """Two server processes behind a forwarder: SIGTERM on the first (``--drain resume``)
    closes the stream with 1012 at once, and the client resumes it on the second, which
    never saw it: every word is final exactly once, with the labels of an uninterrupted stream."""
    from streampunct.client.stream_client import Reconnect, ResumableStream
    from tests.streampunct.tcp_proxy import TcpProxy

    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT.replace("ServerConfig(port=0)", "ServerConfig(port=0, drain=sys.argv[2])"))
    first, port1 = await _start_process(script, minilm_tokenizer_path, "resume")
    second, port2 = await _start_process(script, minilm_tokenizer_path, "finalize")
    proxy = await TcpProxy(port1).start()
    words = ("so this is the story of how we came to build a server that never loses a word when one of "
             "its replicas goes away in the middle of a sentence").split()
    try:
        notices = []
        stream = await ResumableStream.connect(proxy.url(), right_context=2, max_delay_ms=600_000, capitalize=True,
                                               reconnect=Reconnect(initial_delay_s=0.01, max_delay_s=0.1),
                                               on_notice=notices.append)
        messages = []
        got_some = asyncio.Event()

        async def read() -> None:
            async for message in stream:
                messages.append(message)
                if stream.n_final >= 8:
                    got_some.set()

        reader = asyncio.create_task(read())
        await stream.send_words(words[:12])
        await asyncio.wait_for(got_some.wait(), 10)
        proxy.target = port2
        first.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(first.wait(), 10) == 0  # process 1 hands off and exits
        await stream.send_words(words[12:])
        await stream.end()
        await asyncio.wait_for(reader, 20)
    finally:
        await proxy.close()
        for proc in (first, second):
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    transcript = Transcript()
    for message in messages:
        transcript.apply(message)
    assert transcript.words == words and transcript.ended_words == len(words)
    [notice] = notices
    assert notice.code == 1012 and 8 <= notice.start <= 12
    # This engine labels each token alone (PERIOD where its id is a multiple of 7), so the labels
    # are the uninterrupted stream's wherever each word was decided; the end marks the last word.
    from streampunct.core.alignment import Aligner

    aligner = Aligner.from_file(minilm_tokenizer_path)
    expected = []
    for word in words:
        ids = aligner.word_ids(word)
        expected.append(2 if ids[aligner.label_offset(len(ids))] % 7 == 0 else 0)
    expected[-1] = 2
    assert transcript.labels == expected


async def test_a_stop_signal_after_the_shutdown_does_not_kill_the_exit(tmp_path, minilm_tokenizer_path):
    """A second SIGTERM that comes once the drain is over (a service manager's second try, Ctrl-C
    twice) found the default action back and killed the process (status -15); it is ignored
    while the stopping process exits."""
    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT.replace("on_ready=lambda server: print(server.port, flush=True),",
                                            "on_ready=lambda server: print(server.port, flush=True),"
                                            " ignore_late_signals=True,")
                      + "sys.stdin.readline()  # exits when told, after the test's late signal\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), str(minilm_tokenizer_path), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, preexec_fn=_default_stop_signals,
    )
    try:
        int(await asyncio.wait_for(proc.stdout.readline(), 30))  # ready
        proc.send_signal(signal.SIGTERM)
        assert (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip() == "stopped"
        proc.send_signal(signal.SIGTERM)  # after the shutdown
        proc.stdin.write(b"\n")
        await proc.stdin.drain()
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
