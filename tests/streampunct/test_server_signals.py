"""SIGTERM/SIGINT on a real server process: pending words are finalized, then 1001."""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap

import pytest

from streampunct.client import StreamClient, Transcript
from streampunct.protocol import Error

SERVER_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    import numpy as np
    from streampunct.alignment import Aligner
    from streampunct.server import ServerConfig, run_until_signalled

    class Engine:
        name = "fake"
        def infer(self, input_ids, attention_mask):
            logits = np.zeros((*input_ids.shape, 4), dtype=np.float32)
            logits[..., 2] = (input_ids % 7 == 0)
            return logits

    aligner = Aligner.from_file(sys.argv[1])
    config = ServerConfig(port=0)
    asyncio.run(run_until_signalled(
        config, engine_factory=Engine, aligner=aligner, model_name="fake",
        on_ready=lambda server: print(server.port, flush=True),
    ))
    print("stopped", flush=True)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_signal_finalizes_pending_words_then_closes_1001(tmp_path, minilm_tokenizer_path, sig):
    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), str(minilm_tokenizer_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
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
