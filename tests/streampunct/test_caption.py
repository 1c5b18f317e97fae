"""``streampunct caption``: transcript reading, ASR-like chunking, rendering, end to end."""

from __future__ import annotations

import asyncio
import io
import json
import sys

import pytest

from streampunct.caption import CaptionView, _fit, asr_chunks, caption, read_transcript
from streampunct.client import Transcript
from streampunct.errors import InputError
from streampunct.protocol import Final, Partial, PunctuatedWord
from streampunct.text import normalize_words, render
from tests.streampunct.fakes import ended_or_final_before


def test_read_plain_text_and_word_label_files(tmp_path):
    plain = tmp_path / "talk.txt"
    plain.write_text("Hello, world.\nHow are   you?\n")
    assert read_transcript(plain) == ["Hello,", "world.", "How", "are", "you?"]
    labeled = tmp_path / "talk.tsv"
    labeled.write_text("hello\tCOMMA\nworld\tPERIOD\n\nhow\tO\nare\tO\nyou\tQUESTION\n")
    assert read_transcript(labeled) == ["hello", "world", "how", "are", "you"]
    with pytest.raises(InputError):
        read_transcript(tmp_path / "missing.txt")


def test_asr_chunks_keep_order_pace_and_size():
    words = [f"w{i}" for i in range(50)]
    chunks = asr_chunks(words, wps=10, max_chunk=4, seed=3)
    assert [w for _, chunk in chunks for w in chunk] == words
    assert all(1 <= len(chunk) <= 4 for _, chunk in chunks)
    sent = 0
    for at, chunk in chunks:
        sent += len(chunk)
        assert at == pytest.approx(sent / 10)  # committed when its last word was spoken
    assert len({len(c) for _, c in chunks}) > 1
    with pytest.raises(InputError):
        asr_chunks(words, wps=0)


def _transcript(pairs, partial=()):
    t = Transcript()
    t.apply(Final(0, tuple(PunctuatedWord(w, p) for w, p in pairs), ""))
    if partial:
        t.apply(Partial(len(pairs), tuple(PunctuatedWord(w, p) for w, p in partial), ""))
    return t


def test_view_prints_complete_sentences_as_lines():
    out = io.StringIO()
    view = CaptionView(out, live=False, capitalize=True)
    view.update(_transcript([("hello", ","), ("world", "")]))
    assert out.getvalue() == ""
    view.update(_transcript([("hello", ","), ("world", "."), ("how", ""), ("are", "?"), ("so", "")]))
    assert out.getvalue() == "Hello, world. How are?\n"
    view.close(_transcript([("hello", ","), ("world", "."), ("how", ""), ("are", "?"), ("so", "")]))
    assert out.getvalue() == "Hello, world. How are?\nSo\n"


def test_live_view_shows_the_dimmed_tail_on_a_status_line():
    out = io.StringIO()
    view = CaptionView(out, live=True, width=80, capitalize=True)
    view.update(_transcript([("well", ",")], partial=[("maybe", ""), ("not", ".")]))
    text = out.getvalue()
    assert text.startswith("\r\x1b[K") and "Well," in text and "\x1b[2mmaybe not.\x1b[0m" in text


def test_fit_keeps_the_end_of_the_line():
    assert _fit("abc", "de", 10) == ("abc", "de")
    current, tail = _fit("a" * 30, "tail", 20)
    assert len(current) + 1 + len(tail) <= 20 and tail == "tail" and current.startswith("\u2026")
    current, tail = _fit("abc", "t" * 40, 20)
    assert current == "" and len(tail) <= 20


async def test_caption_streams_a_transcript_and_logs_messages(start_server, fake_labels):
    server = await start_server()
    words = "So, this is a test. Is it working? Yes it is working well".split()
    log = io.StringIO()
    out = io.StringIO()
    result = await caption(
        server.url, words, wps=200, max_chunk=3, right_context=2, max_delay_ms=500,
        view=CaptionView(out, live=False, capitalize=True), json_log=log,
    )
    expected = normalize_words(words)
    assert result.transcript.words == expected
    labels = result.transcript.labels
    assert labels in ended_or_final_before(fake_labels(expected))
    assert result.latency.words == len(expected)
    assert result.options.right_context == 2 and result.options.partials
    records = [json.loads(line) for line in log.getvalue().splitlines()]
    sent = [w for r in records if r["dir"] == "send" and r["msg"]["type"] == "words" for w in r["msg"]["words"]]
    assert sent == words
    assert records[0]["msg"]["type"] == "ready" and records[-1]["msg"] == {"type": "end", "words": len(expected)}
    assert {"final", "partial"} <= {r["msg"]["type"] for r in records if r["dir"] == "recv"}
    assert out.getvalue().replace("\n", " ").strip() == render(expected, labels, capitalize=True)


async def test_caption_command_end_to_end(start_server, tmp_path):
    server = await start_server()
    transcript = tmp_path / "talk.tsv"
    transcript.write_text("".join(f"{w}\tO\n" for w in "one two three four five six".split()))
    out = tmp_path / "out.txt"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streampunct.cli", "caption", str(transcript), "--url", server.url,
        "--wps", "100", "--out", str(out), "--right-context", "1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr.decode()
    written = out.read_text().strip()
    assert written.lower().replace(",", "").replace(".", "").replace("?", "").split() == (
        "one two three four five six".split()
    )
    assert "latency" in stderr.decode() and "6 words" in stderr.decode()
    assert stdout.decode().strip()  # captions were shown


async def test_caption_json_mode_and_auth(start_server, tmp_path):
    server = await start_server(auth_token="tok")
    transcript = tmp_path / "talk.txt"
    transcript.write_text("hello there general kenobi")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streampunct.cli", "caption", str(transcript), "--url", server.url,
        "--wps", "100", "--json", "--token", "tok",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr.decode()
    records = [json.loads(line) for line in stdout.decode().splitlines()]
    assert [r["dir"] for r in records].count("send") >= 2
    assert records[-1]["msg"]["type"] == "end"
