"""``streampunct serve --engine fake``: the real server over the fake backend, with no model folder.

The fake backend serves a model of its own (``engines.registry.own_model``): its name and
windows, and a tokenizer (a given folder's, else MiniLM's, else the shipped model's).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from engines.fake import MODEL_META, fake_labels
from streampunct.core.windowing import WindowConfig
from streampunct.errors import ModelError
from streampunct.model import DEFAULT_MODEL_DIR, load_model_info
from tests.streampunct.fakes import ended

REPO = Path(__file__).resolve().parents[2]


def test_the_fake_backend_serves_its_own_model_without_a_folder(minilm_tokenizer_path):
    info = load_model_info(backend="fake")
    assert (info.name, info.window, info.stream_window) == ("fake-cost-model", WindowConfig(126, 40, 20),
                                                            WindowConfig(126, 40, 20))
    assert (info.label_position, info.max_word_tokens, info.case_margin, info.stream_cache_auto) == (
        "last", 16, 0.0, False)
    assert info.meta == MODEL_META
    assert info.path == minilm_tokenizer_path.parent  # MiniLM's tokenizer comes first
    assert info.aligner().word_ids("hello") == load_model_info(backend="fake").aligner().word_ids("hello")
    # every other backend still reads the model folder
    if (DEFAULT_MODEL_DIR / "streampunct.json").is_file():
        assert load_model_info(backend="onnxruntime").path == DEFAULT_MODEL_DIR


def test_a_folder_lends_the_fake_model_only_its_tokenizer(tmp_path, minilm_tokenizer_path):
    (tmp_path / "tokenizer.json").write_bytes(minilm_tokenizer_path.read_bytes())
    (tmp_path / "streampunct.json").write_text('{"name": "mine", "window": {"size": 64, "left": 8, "right": 8}}')
    info = load_model_info(tmp_path, backend="fake")
    assert (info.path, info.name, info.window) == (tmp_path, "fake-cost-model", WindowConfig(126, 40, 20))
    assert load_model_info(tmp_path).name == "mine"  # without the backend: the folder's model
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelError, match=r"the fake engine needs a tokenizer: no tokenizer.json in .*empty"):
        load_model_info(empty, backend="fake")


def test_without_minilm_the_fake_model_takes_the_shipped_tokenizer(monkeypatch):
    import engines.fake

    monkeypatch.setattr(engines.fake, "is_installed", lambda module: False)
    if (DEFAULT_MODEL_DIR / "tokenizer.json").is_file():
        assert load_model_info(backend="fake").path == DEFAULT_MODEL_DIR
    else:
        with pytest.raises(ModelError, match="the fake engine needs a tokenizer"):
            load_model_info(backend="fake")


def test_serve_config_reaches_the_fake_engine(minilm_tokenizer_path):
    from streampunct.server.app import ServerConfig, ServerRuntime

    runtime = ServerRuntime.from_model(ServerConfig(engine="fake", engine_options={"token_us": 3, "sleep": True}))
    engine = runtime.engine_factory()
    assert (engine.name, engine.token_us, engine.batch_ms, engine.sleep) == ("fake", 3, 0.0, True)
    assert (runtime.model_name, runtime.window, runtime.stream_shape) == ("fake-cost-model",
                                                                         WindowConfig(126, 40, 20), None)


async def test_serve_engine_fake_starts_and_answers_a_stream(tmp_path, aligner):
    """The command itself, in a child process: ready line, a stream's finals with the fake
    engine's labels, /healthz, and a graceful stop on SIGTERM."""
    from streampunct.client.stream_client import StreamClient, Transcript

    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 (closed in finally)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streampunct.cli", "serve", "--engine", "fake", "--port", "0",
        "--engine-option", "batch_ms=1", "--engine-option", "token_us=2",
        stdout=asyncio.subprocess.PIPE, stderr=log, cwd=REPO,
    )
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        match = re.search(r"serving (\S+) with (\S+) on (ws://\S+)", line)
        assert match, line + (tmp_path / "server.log").read_text()
        assert match.group(1, 2) == ("fake-cost-model", "fake")
        url = match.group(3)
        words = "so we went to the market and bought apples pears and a very large melon today".split()
        transcript = Transcript()
        async with await StreamClient.connect(url, right_context=2, max_delay_ms=600_000) as client:
            await client.send_words(words[:6])
            await client.send_words(words[6:])
            await client.end()
            async with asyncio.timeout(30):
                async for message in client:
                    transcript.apply(message)
        expected = [int(fake_labels(np.asarray(aligner.word_ids(w)))[-1]) for w in words]
        assert transcript.words == words
        assert transcript.labels == ended(expected)
        assert transcript.errors == []

        health_url = url.replace("ws://", "http://").replace("/v1/stream", "/healthz")
        with await asyncio.to_thread(urllib.request.urlopen, health_url, timeout=10) as response:
            health = json.loads(response.read())
        assert (health["status"], health["engine"], health["model"]) == ("ok", "fake", "fake-cost-model")
        # a second request pipelined behind the first: unanswered, and (on the served loop, where
        # the bytes behind end the connection before the first is answered) counted and logged
        port = int(url.split(":")[2].split("/")[0])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        metrics_url = url.replace("ws://", "http://").replace("/v1/stream", "/metrics")
        with await asyncio.to_thread(urllib.request.urlopen, metrics_url, timeout=10) as response:
            assert 'streampunct_handshakes_rejected_total{reason="malformed"} 1.0' in response.read().decode()
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        log.close()
    # what an operator reads: the version and limits at start, which signal stopped it, and when it was done
    text = (tmp_path / "server.log").read_text()
    assert re.search(r"streampunct \d+\.\d+\.\S+\n", text), text
    assert re.search(r"event loop: \w+; frames' JSON: \w+; auth token off; at most \d+ sessions, \d+ bytes a "
                     r"frame; drain: \w+", text), text
    assert "SIGTERM received; shutting down" in text
    assert ": bytes behind the request that are not frames (a second request behind the first)" in text
    assert re.search(r"server closed, \d+\.\ds after the shutdown began", text), text


def test_a_server_stops_once_the_process_that_started_it_is_gone(tmp_path):
    """``STREAMPUNCT_PARENT_PID`` (set by the benches): a bench killed outright (SIGKILL, the OOM
    killer) leaves no server running."""
    import signal
    import subprocess
    import time

    log = tmp_path / "serve.log"
    starter = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys, time\n"
        "env = dict(os.environ, STREAMPUNCT_PARENT_PID=str(os.getpid()))\n"
        f"p = subprocess.Popen([sys.executable, '-m', 'streampunct', 'serve', '--engine', 'fake', '--port', '0'],"
        f" env=env, stdout=open({str(log)!r}, 'w'), stderr=subprocess.STDOUT, cwd={str(REPO)!r})\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n")], stdout=subprocess.PIPE, text=True)
    server = int(starter.stdout.readline())

    def running() -> bool:
        try:
            return Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
        except OSError:
            return False

    deadline = time.monotonic() + 120
    while "serving" not in log.read_text():
        assert time.monotonic() < deadline and running(), log.read_text()
        time.sleep(0.1)
    starter.send_signal(signal.SIGKILL)
    starter.wait()
    deadline = time.monotonic() + 60
    while running():
        assert time.monotonic() < deadline, "the server outlived the process that started it"
        time.sleep(0.1)
    assert "is gone: stopping" in log.read_text()


@pytest.mark.parametrize(("timeout", "signals"), [("1", 1), ("120", 2)])
def test_a_stop_while_the_engine_warms_up_ends_within_the_shutdown_timeout(tmp_path, timeout, signals):
    """The engine's thread cannot be stopped while it loads or warms up (here a warm-up call of a
    minute): SIGTERM ends the server once --shutdown-timeout-s has passed (at least
    app.ENGINE_CLOSE_MIN_S), saying it did not wait, rather than when the warm-up ends; with a
    long timeout, a second SIGTERM ends the wait."""
    import signal
    import subprocess
    import time

    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "streampunct", "serve", "--engine", "fake", "--port", "0",
             "--engine-option", "sleep=true", "--engine-option", "batch_ms=60000", "--shutdown-timeout-s", timeout],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO)

    def wait_for_line(text: str) -> None:
        deadline = time.monotonic() + 60
        while text not in log.read_text():
            assert time.monotonic() < deadline and server.poll() is None, log.read_text()
            time.sleep(0.05)

    try:
        wait_for_line("warming up")  # for a minute from here on
        server.send_signal(signal.SIGTERM)
        if signals == 2:
            wait_for_line("websockets: server closed")  # the listener is closed: now waiting for the engine
            server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0, log.read_text()  # the warm-up alone would take 60 s
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert re.search(r"the engine is still busy \(loading, warming up or running a call\) [0-9.]+s after "
                     r"the shutdown began: not waiting for it", log.read_text())
