"""``streampunct caption``: transcript reading, ASR-like chunking, rendering, end to end."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streampunct.client.caption import (
    AsrEvent,
    CaptionView,
    _fit,
    asr_chunks,
    caption,
    read_transcript,
)
from streampunct.client.stream_client import StreamClient, Transcript
from streampunct.core.wire import Final, Partial, PunctuatedWord, Word
from streampunct.errors import InputError
from streampunct.labels import ID_TO_MARK
from streampunct.text.normalize import normalize_words, render
from tests.streampunct.fakes import ended, ended_or_final_before, until


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


def _final(start, pairs, text):
    return Final(start, tuple(PunctuatedWord(w, p) for w, p in pairs), text)


def _transcript(pairs, partial=(), partial_text=""):
    t = Transcript()
    t.apply(_final(0, pairs, render([w for w, _ in pairs], [ID_TO_MARK.index(p) for _, p in pairs],
                                    capitalize=True)))
    if partial:
        t.apply(Partial(len(pairs), tuple(PunctuatedWord(w, p) for w, p in partial), partial_text))
    return t


def test_view_prints_complete_sentences_as_lines():
    out = io.StringIO()
    view = CaptionView(out, live=False, capitalize=True)
    t = Transcript()
    t.apply(_final(0, [("hello", ","), ("world", "")], "Hello, world"))
    view.update(t)
    assert out.getvalue() == ""
    t.apply(_final(2, [("again", "."), ("how", ""), ("are", "?"), ("so", "")], "again. How are? So"))
    view.update(t)
    assert out.getvalue() == "Hello, world again. How are?\n"
    view.close(t)
    assert out.getvalue() == "Hello, world again. How are?\nSo\n"


def test_view_shows_the_text_as_sent_with_written_forms_across_finals():
    out = io.StringIO()
    view = CaptionView(out, live=True, width=80, capitalize=True)
    t = Transcript()
    t.apply(_final(0, [("it", ""), ("costs", ""), ("twenty", "")], "It costs"))  # "twenty" held
    t.apply(Partial(3, (PunctuatedWord("five", ""),), "25"))  # the partial starts with the held word
    view.update(t)
    assert out.getvalue().endswith("\r\x1b[KIt costs \x1b[2m25\x1b[0m")
    t.apply(_final(3, [("five", ""), ("dollars", "."), ("at", ""), ("seven", ""), ("p", ""), ("m", ".")],
                   "$25. At 7 p.m."))
    view.update(t)
    assert "\r\x1b[KIt costs $25. At 7 p.m.\n" in out.getvalue()


def test_a_written_form_with_its_own_mark_ends_a_line():
    """A lexicon form ending in "!" takes no period after it ("Yahoo!"): the view still ends the
    sentence there."""
    out = io.StringIO()
    view = CaptionView(out, live=False, capitalize=True)
    t = Transcript()
    t.apply(_final(0, [("i", ""), ("used", ""), ("yahoo", "."), ("then", "")], "I used Yahoo! Then"))
    view.update(t)
    assert out.getvalue() == "I used Yahoo!\n"


def test_live_view_shows_the_dimmed_tail_on_a_status_line():
    out = io.StringIO()
    view = CaptionView(out, live=True, width=80, capitalize=True)
    view.update(_transcript([("well", ",")], partial=[("maybe", ""), ("not", ".")], partial_text="maybe not."))
    text = out.getvalue()
    assert text.startswith("\r\x1b[K") and "Well," in text and "\x1b[2mmaybe not.\x1b[0m" in text


def test_a_final_that_starts_with_a_clitic_joins_the_word_before():
    from streampunct.client.caption import join_texts

    out = io.StringIO()
    view = CaptionView(out, live=False, capitalize=True)
    t = Transcript()
    t.apply(_final(0, [("we", ""), ("saw", ""), ("new", ""), ("york", "")], "We saw New York"))
    t.apply(_final(4, [("'s", ""), ("parks", "."), ("it", "")], "'s parks. It"))
    t.apply(_final(7, [("'s", ""), ("fine", ".")], "'s fine."))
    view.update(t)
    view.close(t)
    assert out.getvalue() == "We saw New York's parks. It's fine.\n"
    texts = [text for _, _, text in t.texts]
    assert join_texts(texts) == "We saw New York's parks. It's fine."  # what --out gets
    assert join_texts(["It ended.", "'s odd", "", "so", "n't"]) == "It ended. 's odd son't"


def test_latency_of_a_run_with_no_final_says_so():
    from streampunct.client.stream_client import LatencyTracker
    from streampunct.core.wire import SessionOptions

    tracker = LatencyTracker(SessionOptions())
    tracker.words_sent(["so", "how"], 1.0)  # interrupted before any final came
    text = tracker.summary().format()
    assert "nan" not in text.lower() and text == "0 words: no final came, no latency measured"


def test_fit_keeps_the_end_of_the_line():
    assert _fit("abc", "de", 10) == ("abc", "de")
    current, tail = _fit("a" * 30, "tail", 20)
    assert len(current) + 1 + len(tail) <= 20 and tail == "tail" and current.startswith("\u2026")
    current, tail = _fit("abc", "t" * 40, 20)
    assert current == "" and len(tail) <= 20


def test_fit_counts_terminal_columns():
    # a CJK character takes two columns: 30 of them are 60 columns, not 30
    current, tail = _fit("\u6c49" * 30, "tail", 20)
    assert tail == "tail" and current == "\u2026" + "\u6c49" * 7  # 1 + 14 + 1 + 4 = 20 columns
    current, tail = _fit("ok", "\u5b57" * 40, 21)
    assert current == "" and tail == "\u2026" + "\u5b57" * 10
    # combining marks take none, and a cut never leaves one without its letter
    assert _fit("e\u0301" * 10, "x", 12) == ("e\u0301" * 10, "x")
    current, _ = _fit("e\u0301" * 10, "x", 8)
    assert current == "\u2026" + "e\u0301" * 5


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
    assert sent == expected  # sent normalized, so that the client counts indices as the server does
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


@pytest.mark.parametrize("text", [b"", b"\n\n", b" ,. \n"])
async def test_stdin_with_no_words_is_refused_as_a_file_is(start_server, tmp_path, text):
    server = await start_server()
    out = tmp_path / "out.txt"
    out.write_text("kept\n")
    rc, _, stderr = await run_cli("-", "--url", server.url, "--out", str(out), stdin=text)
    assert rc == 2 and stderr.strip().splitlines()[-1] == "streampunct caption: error: stdin: no words"
    assert out.read_text() == "kept\n"
    empty = tmp_path / "empty.txt"
    empty.write_bytes(text)
    rc, _, stderr = await run_cli(str(empty), "--url", server.url)
    assert rc == 2 and "no words" in stderr


async def test_a_transcript_of_symbols_alone_is_shown_and_written_as_punctuate_does(start_server, tmp_path):
    """Symbol words take no index: no final has words, but their text shows them."""
    server = await start_server()
    source, out = tmp_path / "e.txt", tmp_path / "e.cap"
    source.write_text("\U0001f389 & \U0001f389\n", encoding="utf-8")
    rc, stdout, stderr = await run_cli(str(source), "--url", server.url, "--out", str(out))
    assert rc == 0, stderr
    assert out.read_text(encoding="utf-8").split() == ["\U0001f389", "&", "\U0001f389"]


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


# -- subtitles, input adapters, errors, early close (issue 14) -----------------------


async def run_cli(*args, stdin: bytes | None = None, timeout: float = 30, env: dict | None = None):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streampunct.cli", "caption", *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(stdin), timeout)
    return proc.returncode, stdout.decode(), stderr.decode()


def _seconds(stamp: str) -> float:
    h, m, s = stamp.replace(",", ".").split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


async def test_caption_vtt_from_timestamped_words_is_valid_and_within_limits(start_server, tmp_path, fake_labels):
    webvtt = pytest.importorskip("webvtt", reason="needs webvtt-py (the dev extra)")
    server = await start_server()
    words = ("so this is the story of how we came to build a streaming punctuation server for live "
             "captions and why it had to be fast enough for real television broadcasts").split()
    source = tmp_path / "asr.jsonl"
    source.write_text("".join(
        json.dumps({"w": w, "start": 5 + 0.6 * i, "end": 5 + 0.6 * i + 0.5}) + "\n" for i, w in enumerate(words)
    ))
    out = tmp_path / "talk.vtt"
    rc, stdout, stderr = await run_cli(
        str(source), "--url", server.url, "--format", "vtt", "--speed", "0", "--out", str(out),
        "--right-context", "1",
    )
    assert rc == 0, stderr
    assert stdout == out.read_text(encoding="utf-8") and stdout.startswith("WEBVTT")
    captions = list(webvtt.read(str(out)))
    text = " ".join(c.text.replace("\n", " ") for c in captions)
    assert text.lower().replace(",", "").replace(".", "").replace("?", "").split() == words
    for c in captions:
        start, end = _seconds(c.start), _seconds(c.end)
        lines = c.text.split("\n")
        assert start < end and end - start <= 7.0 and len(lines) <= 2 and all(len(x) <= 42 for x in lines)
    # Times come from the word timestamps (the stream started at 5 s), not from the clock; the
    # last cue stays until its last word was said, or longer if reading it takes longer.
    assert _seconds(captions[0].start) == pytest.approx(5.0)
    last_word_end = 5 + 0.6 * (len(words) - 1) + 0.5
    last = captions[-1]
    assert _seconds(last.end) == pytest.approx(max(last_word_end, _seconds(last.start) + max(
        1.0, len(last.text.replace("\n", " ")) / 17.0)), abs=1e-3)
    for before, after in zip(captions, captions[1:], strict=False):
        assert _seconds(after.start) >= _seconds(before.end)  # never overlapping
    # Cues break at sentence ends: a cue that ends elsewhere was full (the next word did not fit)
    marks = [ID_TO_MARK[x] for x in fake_labels(words)]
    assert sum(m in (".", "?") for m in marks) >= 2
    for c in captions[:-1]:
        assert c.text.endswith((".", "?")) or len(c.text) > 42, c.text


async def test_caption_srt_from_plain_text_uses_arrival_times(start_server, tmp_path):
    srt = pytest.importorskip("srt", reason="needs srt (the dev extra)")
    server = await start_server()
    source = tmp_path / "talk.txt"
    source.write_text(" ".join(f"word{i % 9}" for i in range(40)), encoding="utf-8")
    rc, stdout, stderr = await run_cli(str(source), "--url", server.url, "--format", "srt", "--wps", "200")
    assert rc == 0, stderr
    subs = list(srt.parse(stdout))
    assert sum(len(s.content.split()) for s in subs) == 40
    # a 0.2 s stream: the cues start when their words were sent, or when the cue before them has
    # been on screen long enough to be read (17 characters a second), but no cue ends more than
    # max_lag_s (1.5 s) after its last word was sent: 280 characters are not shown for 16 s
    assert 0 <= subs[0].start.total_seconds() <= 5
    assert (subs[-1].end - subs[0].start).total_seconds() <= 5
    assert all(s.end > s.start for s in subs)
    assert all(a.end <= b.start for a, b in zip(subs, subs[1:], strict=False))
    assert [s.index for s in subs] == list(range(1, len(subs) + 1))
    assert "warning: " in stderr and "cues are shown under 0.8 s: their words came faster than speech" in stderr


async def test_subtitles_of_text_piped_in_at_once_come_with_a_warning(start_server, tmp_path):
    srt = pytest.importorskip("srt", reason="needs srt (the dev extra)")
    server = await start_server()
    text = ". ".join(" ".join(f"word{(i + j) % 9}" for j in range(8)) for i in range(8)) + "\n"
    rc, stdout, stderr = await run_cli("-", "--url", server.url, "--format", "srt", stdin=text.encode())
    assert rc == 0, stderr
    subs = list(srt.parse(stdout))
    short = sum((s.end - s.start).total_seconds() < 0.8 for s in subs[:-1])
    warning = [line for line in stderr.splitlines() if "cues are shown under 0.8 s" in line]
    assert len(subs) >= 3 and 2 * short > len(subs)
    assert warning == [f"streampunct caption: warning: {short} of {len(subs)} cues are shown under 0.8 s: their "
                       "words came faster than speech, with no end times (plain text is timed by when it was "
                       "sent: stdin as it comes, a named file at --wps); give a text file by name at --wps 2.5, "
                       "or send word times with an end (JSONL)"]
    # JSON words with a start alone, 50 a second: the same warning, which names no input as the cause
    source = tmp_path / "starts.jsonl"
    source.write_text("".join(f'{{"w": "word{i % 9}", "start": {0.02 * i}}}\n' for i in range(64)))
    rc, stdout, stderr = await run_cli(str(source), "--url", server.url, "--format", "srt", "--speed", "0")
    assert rc == 0, stderr
    assert [line.split(": their ")[1] for line in stderr.splitlines() if "cues are shown under" in line] == \
        [warning[0].split(": their ")[1]]
    # paced text, or words with times of their own: no warning
    source = tmp_path / "talk.jsonl"
    source.write_text("".join(f'{{"w": "word{i % 9}", "start": {0.4 * i}, "end": {0.4 * i + 0.3}}}\n'
                              for i in range(40)))
    rc, stdout, stderr = await run_cli(str(source), "--url", server.url, "--format", "srt", "--speed", "0")
    assert rc == 0 and "cues are shown under" not in stderr, stderr


async def test_caption_sends_vosk_partials_as_hypotheses(start_server, tmp_path, fake_labels):
    from streampunct.client.caption_input import read_events

    server = await start_server()
    source = tmp_path / "vosk.jsonl"
    source.write_text("\n".join(json.dumps(x) for x in [
        {"partial": "so how"},
        {"result": [{"word": "so", "start": 0.1, "end": 0.3}, {"word": "how", "start": 0.4, "end": 0.6}]},
        {"partial": "are you"},
        {"result": [{"word": "are", "start": 0.7, "end": 0.8}, {"word": "you", "start": 0.9, "end": 1.2}]},
    ]))
    log = io.StringIO()

    def received_partials() -> list[list[str]]:
        records = [json.loads(line) for line in log.getvalue().splitlines()]
        return [[w["w"] for w in r["msg"]["hypothesis"]] for r in records
                if r["dir"] == "recv" and r["msg"]["type"] == "partial"]

    async def events():
        # After each hypothesis, wait for its partial (as a live recognizer would be slower).
        for event in read_events(str(source), speed=0):
            yield event
            if event.interim:
                said = [w.w for w in event.words]
                await until(lambda said=said: said in received_partials(), timeout=10)

    result = await caption(server.url, events=events(), right_context=5, max_delay_ms=60_000, json_log=log)
    assert result.transcript.words == ["so", "how", "are", "you"]
    assert [(w.start, w.end) for w in result.transcript.final_words] == [
        (0.1, 0.3), (0.4, 0.6), (0.7, 0.8), (0.9, 1.2)]
    records = [json.loads(line) for line in log.getvalue().splitlines()]
    sent = [r["msg"] for r in records if r["dir"] == "send"]
    assert [m["type"] for m in sent] == ["config", "hypothesis", "words", "hypothesis", "words", "end"]
    assert sent[0] == {"type": "config", "right_context": 5, "max_delay_ms": 60_000, "partials": True,
                       "capitalize": True}
    partials = received_partials()
    assert partials.index(["so", "how"]) < partials.index(["are", "you"])


async def test_caption_takes_the_token_from_the_environment_unless_given_even_empty(start_server, tmp_path):
    import os

    server = await start_server(auth_token="s3cret")
    source = tmp_path / "talk.txt"
    source.write_text("hello there\n")
    env = {**os.environ, "STREAMPUNCT_AUTH_TOKEN": "s3cret"}
    rc, stdout, stderr = await run_cli(str(source), "--url", server.url, "--speed", "0", env=env)
    assert rc == 0 and [w.strip(",.?").lower() for w in stdout.split()] == ["hello", "there"], stderr
    rc, _, stderr = await run_cli(str(source), "--url", server.url, "--speed", "0", "--token", "", env=env)
    assert rc != 0 and "HTTP 401: missing or wrong token" in stderr


@pytest.mark.parametrize("case", ["401", "404", "503", "not-ws", "refused", "port-not-a-number",
                                  "port-out-of-range", "broken-ipv6", "no-host", "tls-to-plain"])
async def test_caption_connection_errors_are_one_line(start_server, tmp_path, case):
    source = tmp_path / "talk.txt"
    source.write_text("hello there")
    server = await start_server(auth_token="tok", max_sessions=1)
    url = {"401": server.url, "404": server.url.replace("/v1/stream", "/nope"), "503": server.url,
           "not-ws": server.url.replace("ws://", "http://"), "refused": "ws://127.0.0.1:9/v1/stream",
           # urllib's bare ValueError through websockets (a traceback and status 1 before)
           "port-not-a-number": "ws://127.0.0.1:notaport/v1/stream",
           "port-out-of-range": "ws://127.0.0.1:99999/v1/stream",
           "broken-ipv6": "ws://[::1", "no-host": "ws:///v1/stream",
           "tls-to-plain": server.url.replace("ws://", "wss://")}[case]
    holder = await StreamClient.connect(server.url, token="tok") if case == "503" else None
    try:
        rc, stdout, stderr = await run_cli(str(source), "--url", url, "--token", "" if case == "401" else "tok")
    finally:
        if holder is not None:
            await holder.close()
    assert rc == 2, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    expected = {"401": "HTTP 401", "404": "HTTP 404", "503": "HTTP 503", "not-ws": "not a WebSocket URL",
                "refused": "cannot connect", "port-not-a-number": "not a WebSocket URL: Port could not be cast",
                "port-out-of-range": "not a WebSocket URL: Port out of range",
                "broken-ipv6": "not a WebSocket URL: Invalid IPv6 URL", "no-host": "not a WebSocket URL",
                "tls-to-plain": "is the server serving TLS? (ws:// for one that is not)"}[case]
    assert expected in stderr


async def test_caption_resumes_after_the_servers_idle_timeout_and_loses_nothing(start_server, tmp_path,
                                                                             fake_labels):
    """A pause longer than the server's idle timeout closes the stream with 1001 (its words
    finalized); the client resumes, and the words after the pause follow with no gap."""
    server = await start_server(idle_timeout_s=0.3)
    out = tmp_path / "out.txt"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streampunct.cli", "caption", "-", "--url", server.url, "--out", str(out),
        "--right-context", "3", "--max-delay-ms", "600000",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    first, second = "so this is the story".split(), "of how it all began".split()
    proc.stdin.write((" ".join(first) + "\n").encode())
    await proc.stdin.drain()
    await until(lambda: metric_value(server, "streampunct_idle_closes_total") >= 1, timeout=20)
    proc.stdin.write((" ".join(second) + "\n").encode())
    proc.stdin.close()
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr.decode()
    words = first + second
    assert out.read_text().strip() == render(words, ended(fake_labels(words)), capitalize=True)


async def test_the_json_log_holds_every_message_of_every_connection(start_server):
    """After a resume, --json's log has the new connection's ready, the resume and its answer,
    and the words sent on it: every message as it went, not the client's summary of it."""
    server = await start_server(idle_timeout_s=0.3)
    log = io.StringIO()

    async def events():
        yield AsrEvent(None, (Word("so"), Word("this")))
        await until(lambda: metric_value(server, "streampunct_idle_closes_total") >= 1, timeout=20)
        yield AsrEvent(None, (Word("is"), Word("it")))

    result = await caption(server.url, events=events(), right_context=3, max_delay_ms=60_000, json_log=log)
    assert result.transcript.words == ["so", "this", "is", "it"]
    records = [(r["dir"], r["msg"]["type"]) for r in map(json.loads, log.getvalue().splitlines())]
    assert records[:3] == [("recv", "ready"), ("send", "config"), ("recv", "config")]
    resumed = records.index(("send", "resume"))
    assert records[resumed - 1: resumed + 3] == [("recv", "ready"), ("send", "resume"), ("recv", "resumed"),
                                                 ("send", "words")]
    # "is it" may go out on the closing connection too, and then again after the resume
    assert records.count(("send", "words")) in (2, 3) and records[-1] == ("recv", "end")


def metric_value(server, name: str) -> float:
    return server.metrics.registry.get_sample_value(name) or 0.0


def test_an_unasked_close_is_said_in_words():
    from streampunct.client.caption import close_meaning

    assert close_meaning(1001, "idle timeout") == "its idle timeout: no words for too long"
    assert close_meaning(1001, "server shutting down") == "the server is shutting down"
    assert close_meaning(1011, "internal error") == "close code 1011: internal error"
    assert close_meaning(1013, "") == close_meaning(1013, None) == "close code 1013"


@pytest.mark.parametrize("url", ["ws://127.0.0.1:notaport/v1/stream", "ws://127.0.0.1:99999/v1/stream",
                                 "ws://[::1", "wss://:8765/v1/stream", "ftp://127.0.0.1/v1/stream"])
async def test_open_client_refuses_a_malformed_url_with_a_connect_error(url):
    from streampunct.client.stream_client import ConnectError, open_client

    with pytest.raises(ConnectError, match="is not a WebSocket URL") as info:
        await open_client(url)
    assert not info.value.retryable


async def _three_words_streaming(server, reconnect_attempts: int) -> asyncio.subprocess.Process:
    """A ``caption -`` whose three words the server holds (none final: right context 3)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streampunct.cli", "caption", "-", "--url", server.url,
        "--right-context", "3", "--max-delay-ms", "600000", "--reconnect-attempts", str(reconnect_attempts),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    proc.stdin.write(b"so this is\n")
    await proc.stdin.drain()
    await until(lambda: sum(s.protocol.n_words for s in server.sessions) >= 3, timeout=20)
    return proc


async def test_caption_says_a_dropped_connection_was_lost(start_server, tmp_path):
    """A connection dropped with no close frame (1006) is said to be lost, not closed by the server."""
    server = await start_server()
    proc = await _three_words_streaming(server, 0)
    for session in server.sessions:
        session._ws.transport.abort()  # no close frame
    _, stderr = await asyncio.wait_for(proc.communicate(), 20)
    stderr = stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in stderr
    assert "error: the connection was lost before the stream ended; 0 final words kept, 3 words without a final" \
        in stderr


async def test_a_resume_that_fails_is_explained_once(start_server):
    """The server went away for good: the client's notice says why the resume failed; the
    closing error points to it instead of repeating it."""
    server = await start_server()
    proc = await _three_words_streaming(server, 1)
    await server.shutdown()  # 1001, and nothing listens any more: the resume cannot connect
    _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    stderr = stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in stderr
    assert stderr.count("cannot connect") == 1, stderr
    assert "could not resume (1 attempts in " in stderr
    assert "error: the connection was lost and the stream could not be resumed (above); 3 final words kept" in stderr


async def test_caption_keeps_everything_when_the_server_shuts_down(start_server, tmp_path, fake_labels):
    """Without resuming (--reconnect-attempts 0), a server shutdown ends the stream: what
    came is kept, and the command says why it stopped."""
    server = await start_server()
    out = tmp_path / "out.txt"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streampunct.cli", "caption", "-", "--url", server.url, "--out", str(out),
        "--right-context", "3", "--max-delay-ms", "600000", "--reconnect-attempts", "0",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    words = "so this is the story of how it all began".split()
    proc.stdin.write((" ".join(words) + "\n").encode())
    await proc.stdin.drain()
    # wait until the server holds every word
    await until(lambda: sum(s.protocol.n_words for s in server.sessions) >= len(words), timeout=20)
    await server.shutdown()  # finalizes all words, then closes with 1001
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 20)
    stderr = stderr.decode()
    assert proc.returncode != 0 and "shutting down" in stderr and "Traceback" not in stderr
    expected = render(words, fake_labels(words), capitalize=True)
    assert out.read_text().strip() == expected
    assert stdout.decode().replace("\n", " ").strip() == expected


async def test_a_closed_stdout_keeps_every_final_in_out(start_server, tmp_path):
    """``caption --out FILE ... | head -1``: the reader goes away; as after Ctrl-C the stream is
    ended and --out gets every final (before: status 141 and no --out at all)."""
    import os

    server = await start_server()
    rng = __import__("random").Random(1)
    vocabulary = "so this is the story of how it all began and we go on then again what why maybe".split()
    transcript = tmp_path / "talk.txt"
    transcript.write_text(" ".join(rng.choice(vocabulary) for _ in range(600)) + "\n")
    out = tmp_path / "out.txt"
    read, write = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "streampunct.cli", "caption", str(transcript), "--url", server.url,
            "--wps", "300", "--out", str(out), stdin=asyncio.subprocess.DEVNULL, stdout=write,
            stderr=asyncio.subprocess.PIPE,
        )
    finally:
        os.close(write)
    loop = asyncio.get_running_loop()
    shown = b""
    try:
        while b"\n" not in shown:  # the first caption line, then the reader goes away
            chunk = await asyncio.wait_for(loop.run_in_executor(None, os.read, read, 4096), 30)
            assert chunk, "caption ended before writing a line"
            shown += chunk
    finally:
        os.close(read)
    stderr = (await asyncio.wait_for(proc.stderr.read(), 30)).decode()
    assert await asyncio.wait_for(proc.wait(), 30) == 141, stderr  # 128 + SIGPIPE, as the CLI ends on `| head`
    assert stderr == "", stderr  # quietly
    written = out.read_text().split()
    first = shown.decode().splitlines()[0].split()
    assert len(written) > len(first) and written[:len(first)] == first


@pytest.mark.parametrize(("start", "end", "cue_end"), [(360000.0, 360000.4, "100:00:01,900"),
                                                     (359999.3, 359999.5, "100:00:01,000")])
async def test_srt_of_word_times_at_100_hours_is_refused_before_connecting(start_server, tmp_path, start, end,
                                                                           cue_end):
    """Refused when a cue could end at 100 hours: a word just before it may be shown past it."""
    source = tmp_path / "talk.jsonl"
    source.write_text(f'{{"w": "hello", "start": 1.0, "end": 1.5}}\n{{"w": "there", "start": {start}, "end": {end}}}\n')
    rc, stdout, stderr = await run_cli(str(source), "--url", "ws://127.0.0.1:9/v1/stream", "--format", "srt")
    assert rc == 2 and stdout == "" and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"streampunct caption: error: {source}: a cue may end 1.5 s after the last word time: a time of {cue_end} "
        "cannot be written in SRT (its timestamps end at 99:59:59,999); use --format vtt, or word times counted "
        "from the start of the stream")
    server = await start_server()  # from stdin: refused at the first such cue
    rc, stdout, stderr = await run_cli("-", "--url", server.url, "--format", "srt", stdin=source.read_bytes())
    assert rc == 2 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("streampunct caption: error: subtitle cue ")
    assert "cannot be written in SRT" in stderr


async def test_subtitles_from_word_times_that_go_back_come_with_a_warning(start_server, tmp_path):
    server = await start_server()
    source = tmp_path / "talk.jsonl"
    times = [("so", 1.0), ("we", 1.4), ("met", 5.0), ("in", 2.0), ("paris", 2.5)]  # "in" goes back
    source.write_text("".join(f'{{"w": "{w}", "start": {t}, "end": {t + 0.3}}}\n' for w, t in times))
    # --speed 0: sent at once, not over the 5 s of its word times (which the cues keep all the same)
    rc, stdout, stderr = await run_cli(str(source), "--url", server.url, "--format", "vtt", "--speed", "0")
    assert rc == 0 and "Traceback" not in stderr and stdout.startswith("WEBVTT")
    warnings = [line for line in stderr.splitlines() if "warning" in line]
    assert warnings == ["streampunct caption: warning: word 3 ('in') starts at 2 s, before the word before it "
                        "('met', 5 s): the recognizer's times go back, and cues there may be shown for as "
                        "little as 1 ms"]
    source.write_text('{"w": "so", "start": 5, "end": 1}\n{"w": "we", "start": 6, "end": 6.5}\n')
    rc, _, stderr = await run_cli(str(source), "--url", server.url, "--format", "vtt", "--speed", "0")
    assert rc == 0 and [line for line in stderr.splitlines() if "warning" in line] == [
        "streampunct caption: warning: word 0 ('so') ends at 1 s, before it starts (5 s): the recognizer's "
        "times go back, and cues there may be shown for as little as 1 ms"]
    source.write_text("".join(f'{{"w": "{w}", "start": {t}, "end": {t + 0.3}}}\n' for w, t in sorted(times, key=lambda x: x[1])))
    rc, _, stderr = await run_cli(str(source), "--url", server.url, "--format", "vtt", "--speed", "0")
    assert rc == 0 and "warning" not in stderr


@pytest.mark.parametrize("args", [["--speed", "nan"], ["--speed", "inf"], ["--speed", "-1"],
                                  ["--speed", "-1", "--input-format", "text"],
                                  ["--speed", "nan", "--input-format", "words"],
                                  ["--json", "--format", "vtt"], ["--json", "--format", "srt"],
                                  ["--json", "--format", "jsonl"]])
async def test_bad_speed_and_json_with_subtitles_are_usage_errors(tmp_path, args):
    source = tmp_path / "talk.jsonl"
    source.write_text('{"w": "hello", "start": 0.1, "end": 0.2}\n')
    rc, stdout, stderr = await run_cli(str(source), "--url", "ws://127.0.0.1:9/v1/stream", *args)
    assert rc == 2 and stdout == "" and "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("streampunct caption: error: ")
    assert ("--speed" in last) if args[0] == "--speed" else ("--json goes with --format text only" in last)
    if args[:2] in (["--speed", "nan"], ["--speed", "inf"]):  # why it is refused: not the sign
        assert last.endswith(f"argument --speed: must be a finite number >= 0, got {args[1]}")


# -- message sizes and server errors (CLI audit) -----------------------------------


def test_message_words_split_long_events_and_cut_long_words():
    from streampunct.client.caption import MAX_WORD_CHARS, MAX_WORDS_PER_MESSAGE, message_words
    from streampunct.core.wire import Word

    assert (MAX_WORDS_PER_MESSAGE, MAX_WORD_CHARS) == (1000, 256)  # the server's default limits
    words = [Word(f"w{i}", i, i + 0.5) for i in range(2500)]
    messages = message_words(words)
    assert [len(m) for m in messages] == [1000, 1000, 500]
    assert [w for m in messages for w in m] == words
    [[long]] = message_words([Word("x" * 300, 1.0, 2.0)])
    assert long == Word("x" * 256, 1.0, 2.0)
    assert message_words([]) == []


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.tuples(st.text(alphabet="ab\u00e9\u4e2d\"\\", min_size=1, max_size=40),
                                st.one_of(st.none(), st.floats(0, 1e6))), max_size=60),
       budget=st.integers(60, 2000), hypothesis=st.booleans())
def test_message_words_fit_the_servers_byte_limit(words, budget, hypothesis):
    """With max_message_bytes announced, every frame is at most that many bytes (UTF-8, JSON
    escapes included) unless one word alone is larger, no frame could take the next word, and
    the words come out whole and in order."""
    from streampunct.client.caption import message_words
    from streampunct.core.wire import HypothesisMessage, Limits, Word, WordsMessage, encode

    kind = HypothesisMessage if hypothesis else WordsMessage
    sent = [Word(w, t, None if t is None else t + 1) for w, t in words]
    messages = message_words(sent, Limits(max_words_per_message=25, max_message_bytes=budget), kind)
    assert [w for m in messages for w in m] == sent
    sizes = [len(encode(kind(m)).encode()) for m in messages]
    assert all(size <= budget or len(m) == 1 for size, m in zip(sizes, messages, strict=True))
    for m, following in zip(messages, messages[1:], strict=False):  # greedy: the next word did not fit
        assert len(m) == 25 or len(encode(kind((*m, following[0]))).encode()) > budget


async def test_caption_fits_its_messages_to_the_servers_byte_limit(start_server, tmp_path, fake_labels):
    """A server that announces a 4 KB frame limit gets 120 timed words (about 9 KB in one
    Vosk result) in frames it accepts, and finalizes all of them."""
    server = await start_server(max_message_bytes=4096)
    vosk = tmp_path / "big.jsonl"
    words = [f"word{i}" for i in range(120)]
    vosk.write_text(json.dumps({"result": [{"word": w, "start": i * 0.25, "end": i * 0.25 + 0.2}
                                           for i, w in enumerate(words)]}) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streampunct.cli", "caption", str(vosk), "--url", server.url, "--out", str(out),
        "--speed", "0", "--reconnect-attempts", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr.decode()
    assert out.read_text().strip() == render(words, ended(fake_labels(words)), capitalize=True)


async def test_stdin_lines_are_sent_in_chunks_of_at_most_max_chunk(monkeypatch):
    from streampunct.client.caption_input import stdin_events

    monkeypatch.setattr(sys, "stdin", io.StringIO("a b c d e f g\n\nh\n"))
    events = [e async for e in stdin_events("auto", max_chunk=3)]
    assert [[w.w for w in e.words] for e in events] == [["a", "b", "c"], ["d", "e", "f"], ["g"], ["h"]]


async def test_caption_sends_huge_lines_and_words_within_the_server_limits(start_server):
    from streampunct.client.caption_input import AsrEvent
    from streampunct.core.wire import Word

    server = await start_server()
    words = ["word"] * 2999 + ["y" * 300]
    errors = io.StringIO()
    result = await caption(server.url, events=[AsrEvent(None, tuple(Word(w) for w in words))],
                           right_context=1, max_delay_ms=60_000, errors=errors)
    assert errors.getvalue() == "" and result.transcript.errors == []
    assert result.transcript.n_final == 3000 and result.transcript.words[:2999] == ["word"] * 2999


def _ready_without_limits(monkeypatch):
    """Serve a ``ready`` without ``limits`` (a server that does not send them): the client then
    assumes the default limits, and a stricter server refuses what it sends."""
    from streampunct.core.session_protocol import SessionProtocol
    from streampunct.core.wire import Ready

    monkeypatch.setattr(SessionProtocol, "ready", lambda self: Ready(self.session_id, self.model_name, self.options))


async def test_caption_sends_within_the_limits_the_server_announces(start_server):
    from streampunct.core.wire import Limits

    server = await start_server(limits=Limits(max_words_per_message=2, max_word_chars=5))
    errors = io.StringIO()
    result = await caption(server.url, events=[_event("one two three"), _event("four abcdefgh")],
                           right_context=1, max_delay_ms=60_000, errors=errors)
    assert errors.getvalue() == "" and result.transcript.errors == []
    assert result.transcript.words == ["one", "two", "three", "four", "abcde"]


async def test_caption_reports_every_server_error(start_server, monkeypatch):
    from streampunct.client.caption import lost_words_errors
    from streampunct.core.wire import Limits

    _ready_without_limits(monkeypatch)
    server = await start_server(limits=Limits(max_words_per_message=2))
    errors = io.StringIO()
    result = await caption(server.url, "one two three four five six".split(), wps=1000, max_chunk=1,
                           seed=0, right_context=1, max_delay_ms=60_000, errors=errors)
    assert result.transcript.n_final == 6 and errors.getvalue() == ""  # one word a message: none refused
    result = await caption(server.url, events=[_event("one two three"), _event("four")],
                           right_context=1, max_delay_ms=60_000, errors=errors)
    assert result.transcript.words == ["four"]
    assert errors.getvalue() == "server error too_large: 3 words in one message; the limit is 2\n"
    assert [e.code for e in lost_words_errors(result.transcript)] == ["too_large"]


def _event(text: str):
    from streampunct.client.caption_input import AsrEvent
    from streampunct.core.wire import Word

    return AsrEvent(None, tuple(Word(w) for w in text.split()))


async def test_caption_command_fails_when_the_server_refused_words(start_server, monkeypatch):
    from streampunct.core.wire import Limits
    from streampunct.server.batcher import BatcherConfig

    # One session: its 751 windows go to the engine one at a time, and no other can join their
    # batch, so a batching wait (5 ms a window by default) would only idle.
    server = await start_server(batching=BatcherConfig(max_wait_ms=0))
    rc, stdout, stderr = await run_cli("-", "--url", server.url, "--right-context", "1",
                                       stdin=(" ".join(["word"] * 3000) + "\n").encode())
    assert rc == 0, stderr
    assert "3000 words" in stderr and "latency: right_context 1, max_delay_ms 2000:" in stderr
    _ready_without_limits(monkeypatch)
    strict = await start_server(limits=Limits(max_words_per_message=2))
    rc, stdout, stderr = await run_cli("-", "--url", strict.url, "--max-chunk", "3", stdin=b"a b c d\n")
    assert rc == 1, stderr
    assert "server error too_large: 3 words in one message; the limit is 2" in stderr
    assert "Traceback" not in stderr and [w.strip(".,?").lower() for w in stdout.split()] == ["d"]


# -- a bad line in a live stream on stdin (issue 39) ------------------------------------

VOSK_WITH_A_BAD_LINE = "\n".join([
    json.dumps({"result": [{"word": w, "start": 0.1 * i, "end": 0.1 * i + 0.05} for i, w in enumerate(
        "so this is how".split())]}),
    json.dumps({"partial": "it all"}),
    json.dumps({"result": [{"word": "it"}, {"word": "all"}, {"word": "began"}]}),
    '{"result": [{"word": "with", "start": 1.0',  # cut off: not JSON
    json.dumps({"result": [{"word": "a"}, {"word": "story"}]}),
]) + "\n"


@pytest.mark.parametrize("action", ["stop", "skip"])
async def test_a_bad_stdin_line_is_reported_and_what_was_sent_is_finalized(start_server, tmp_path, fake_labels,
                                                                            action):
    server = await start_server()
    out = tmp_path / "out.txt"
    args = ["-", "--url", server.url, "--out", str(out), "--right-context", "3", "--max-delay-ms", "600000"]
    if action == "skip":
        args += ["--on-bad-line", "skip"]
    rc, stdout, stderr = await run_cli(*args, stdin=VOSK_WITH_A_BAD_LINE.encode())
    assert "Traceback" not in stderr and "close code" not in stderr
    reason = "stdin:4: not JSON (Expecting ',' delimiter at column 42)"
    if action == "stop":
        words = "so this is how it all began".split()
        assert rc == 2
        assert stderr.strip().splitlines() == [
            f"streampunct caption: error: {reason}; stopped reading there: the {len(words)} words sent before it "
            "are final"]
    else:
        words = "so this is how it all began a story".split()
        assert rc == 0, stderr
        assert stderr.splitlines()[0] == f"streampunct caption: {reason}; line skipped"
    # The words still pending when the input stopped (3, at right_context 3) are final too.
    expected = render(words, [*fake_labels(words)[:-1], ended_or_final_before(fake_labels(words))[0][-1]],
                      capitalize=True)
    assert out.read_text().strip() == expected
    assert stdout.replace("\n", " ").strip() == expected


@pytest.mark.parametrize("input_format", ["auto", "vosk"])
async def test_pretty_printed_vosk_on_stdin_is_captioned(start_server, tmp_path, input_format):
    # KaldiRecognizer.Result() / PartialResult() print each object over several lines.
    server = await start_server()
    pretty = "".join(json.dumps(o, indent=2) + "\n" for o in [
        {"partial": "so this"},
        {"result": [{"conf": 1.0, "word": w, "start": 0.1 * i, "end": 0.1 * i + 0.05}
                    for i, w in enumerate("so this is how".split())], "text": "so this is how"},
        {"partial": "it"},
        {"result": [{"word": "it"}, {"word": "began"}], "text": "it began"},
    ])
    out = tmp_path / "out.txt"
    rc, stdout, stderr = await run_cli("-", "--url", server.url, "--out", str(out), "--input-format", input_format,
                                       stdin=pretty.encode())
    assert rc == 0, stderr
    assert [w.strip(".,?").lower() for w in out.read_text().split()] == "so this is how it began".split()


def test_only_errors_that_refuse_a_message_count_as_lost_words():
    """overloaded keeps the words; internal ends the stream, which resumes and sends them again
    (a complete transcript after a resumed engine failure is not a loss)."""
    from streampunct.client.caption import lost_words_errors
    from streampunct.client.stream_client import Transcript
    from streampunct.core.wire import Error, ErrorCode

    transcript = Transcript()
    for code in (ErrorCode.OVERLOADED, ErrorCode.INTERNAL, ErrorCode.BAD_REQUEST, ErrorCode.TOO_LARGE):
        transcript.apply(Error(code, "x"))
    assert [e.code for e in lost_words_errors(transcript)] == ["bad_request", "too_large"]


async def test_a_refused_connection_asks_whether_a_server_runs_there():
    import socket

    from streampunct.client.stream_client import ConnectError, open_client

    with socket.socket() as s:  # a port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectError, match=r"; is a server running there\? \(streampunct serve\)$"):
        await open_client(f"ws://127.0.0.1:{port}/v1/stream")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
async def test_a_full_disk_under_stdout_stops_the_run_and_keeps_out(start_server, tmp_path):
    """``caption ... --out talk.srt > /dev/full``: stdout refuses the first cue; the run stops as at
    a closed pipe, ``--out`` gets what was final by then, and the error is one line, status 1."""
    srt = pytest.importorskip("srt", reason="needs srt (the dev extra)")
    server = await start_server()
    source = tmp_path / "talk.txt"
    source.write_text(" ".join(f"word{i % 9}" for i in range(120)), encoding="utf-8")
    out = tmp_path / "talk.srt"
    out.write_text("old\n", encoding="utf-8")
    with open("/dev/full", "w") as full:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "streampunct.cli", "caption", str(source), "--url", server.url, "--format", "srt",
            "--wps", "100", "--out", str(out), stdout=full, stderr=asyncio.subprocess.PIPE)
        _, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1
    assert stderr.decode().splitlines()[-1] == (
        f"streampunct caption: error: cannot write stdout: No space left on device (--out {out} has what was "
        "final by then)")
    cues = list(srt.parse(out.read_text(encoding="utf-8")))
    assert cues and all(c.content.split() for c in cues)


async def test_an_out_file_over_the_file_size_limit_stays_as_it_was(start_server, tmp_path):
    """``--out`` written as cues come, over ``ulimit -f``: the file keeps what it held, no temporary
    file is left, and the error names it in one line, status 1."""
    resource = pytest.importorskip("resource")
    server = await start_server()
    source = tmp_path / "talk.txt"
    source.write_text(" ".join(f"word{i % 9}" for i in range(400)), encoding="utf-8")
    folder = tmp_path / "subs"
    folder.mkdir()
    out = folder / "talk.srt"
    out.write_text("old\n", encoding="utf-8")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streampunct.cli", "caption", str(source), "--url", server.url, "--format", "srt",
        "--wps", "200", "--out", str(out), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        preexec_fn=limit)
    _, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1
    assert stderr.decode().splitlines()[-1] == f"streampunct caption: error: cannot write {out}: File too large"
    assert out.read_text(encoding="utf-8") == "old\n"
    assert [p.name for p in folder.iterdir()] == ["talk.srt"]


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
async def test_subtitles_of_negative_word_times_are_refused(start_server, tmp_path, fmt):
    """Word times before 0 (an offset clock) cannot be subtitle timestamps: they used to be
    clamped to 0, every cue shown for 1 ms. A file is refused before connecting; from stdin,
    at the first such cue."""
    source = tmp_path / "talk.jsonl"
    source.write_text("".join(f'{{"w": "word{i}", "start": {-100 + 0.4 * i}, "end": {-100 + 0.4 * i + 0.3}}}\n'
                              for i in range(30)))
    rc, stdout, stderr = await run_cli(str(source), "--url", "ws://127.0.0.1:9/v1/stream", "--format", fmt)
    assert (rc, stdout) == (2, "") and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"streampunct caption: error: {source}: word 'word0': a word time of -100 s cannot be written in "
        f"{fmt.upper()} (its timestamps start at 0); send word times counted from the start of the stream")
    server = await start_server()
    rc, stdout, stderr = await run_cli("-", "--url", server.url, "--format", fmt, stdin=source.read_bytes())
    assert rc == 2 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("streampunct caption: error: subtitle cue 1: a word time of -")
    # jsonl cues carry the times as they are
    rc, stdout, stderr = await run_cli(str(source), "--url", server.url, "--format", "jsonl", "--speed", "0")
    assert rc == 0, stderr
