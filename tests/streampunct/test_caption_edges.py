"""``streampunct caption`` at its edges: a cue the subtitles cannot hold from a live input, an
abort with a server that no longer answers, and a server that closes with 1013 mid-run.

Against a real server (the fixtures' in-process one); the tests wait on what the code announces
(a message logged, the server's counts), never on a fixed sleep.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import signal
import sys
from pathlib import Path

import pytest

from streampunct.client import caption as caption_module
from streampunct.client.caption import AsrEvent, InputStopped, Interrupt, caption
from streampunct.client.subtitles import CueBuilder, CueLimits, SubtitleWriter
from streampunct.core.wire import Word
from streampunct.text.normalize import render
from tests.streampunct.fakes import ended, until
from tests.streampunct.test_caption_signals import caption_process

SRT_LIMIT = "cannot be written in SRT (its timestamps end at 99:59:59,999)"
OLDER = "an older file\n"  # what --out held before the run


async def run_cli(*args, stdin: bytes | None = None, timeout: float = 30):
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "streampunct.cli",
        "caption",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(stdin), timeout)
    return proc.returncode, stdout.decode(), stderr.decode()


def word_lines(words: list[tuple[str, float]]) -> bytes:
    return "".join(
        json.dumps({"w": w, "start": t, "end": t + 0.3}) + "\n" for w, t in words
    ).encode()


def srt_cues(text: str) -> list[list[str]]:
    return [block.splitlines() for block in text.strip().split("\n\n") if block]


def older_srt(tmp_path) -> Path:
    """``t.srt``, holding a file from before the run."""
    out = tmp_path / "t.srt"
    out.write_text(OLDER)
    return out


async def srt_from_stdin(server, out: Path, words: list[tuple[str, float]]) -> tuple[int, str, str]:
    """``caption - --format srt --out out`` with ``words`` (and their times) on stdin, to its end."""
    srt = ["--format", "srt", "--out", str(out)]
    return await run_cli("-", "--url", server.url, *srt, stdin=word_lines(words))


def says_cue_refused(line: str, written: int) -> bool:
    """Whether ``line`` is caption's error for a cue at 100 hours, after ``written`` cues."""
    head = f"streampunct caption: error: subtitle cue {written + 1}: a time of 100:"
    tail = f"; stopped there: the {written} cues before it are written"
    return line.startswith(head) and line.endswith(tail)


def caption_live(server, *said: AsrEvent, **options):
    """``caption`` (no partials) of a recognizer that says ``said``, then nothing more: the live
    input stays open."""

    async def events():
        for event in said:
            yield event
        await asyncio.Event().wait()  # never set

    return caption(server.url, events=events(), partials=False, **options)


# -- a cue the subtitles cannot hold, from stdin -------------------------------------------------

SPOKEN = [(f"word{i}", 0.5 * i) for i in range(18)]


@pytest.mark.parametrize("where", ["mid-stream", "last-cue"])
async def test_srt_from_stdin_at_100_hours_writes_the_cues_before_it_to_out(
    start_server, tmp_path, where
):
    """``asr | caption - --format srt --out t.srt``, the recognizer's clock reaching 100 hours:
    exit 2 at that cue, as at a bad line, and t.srt gets the cues written before it (what stdout
    showed), not the file it held before. The cue is refused while finals still come
    (mid-stream), or as the stream ends (the last cue)."""
    server = await start_server()
    out = older_srt(tmp_path)
    late = [("late", 360000.0)] + (
        [(f"after{i}", 360001.0 + i) for i in range(6)] if where == "mid-stream" else []
    )
    rc, stdout, stderr = await srt_from_stdin(server, out, SPOKEN + late)
    assert rc == 2 and "Traceback" not in stderr, stderr
    cues = srt_cues(stdout)
    assert cues and all(not cue[1].startswith("100:") for cue in cues)
    last_word = " ".join(line for cue in cues for line in cue[2:]).split()[-1]
    assert re.sub(r"\W", "", last_word).lower() == "word17"  # every cue before the late word
    assert out.read_text() == stdout  # the cues before it, not what the file held
    last = stderr.strip().splitlines()[-1]
    assert says_cue_refused(last, len(cues)) and SRT_LIMIT in last
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


async def test_a_first_cue_the_subtitles_refuse_leaves_out_as_it_was(start_server, tmp_path):
    """From stdin, every word at 100 hours: no cue can be written, so --out keeps what it held."""
    server = await start_server()
    out = older_srt(tmp_path)
    rc, stdout, stderr = await srt_from_stdin(
        server, out, [("late", 360000.0), ("words", 360000.5)]
    )
    assert rc == 2 and "Traceback" not in stderr, stderr
    assert stdout == "" and out.read_text() == OLDER
    lines = stderr.strip().splitlines()
    assert f"streampunct caption: no cue was written: --out {out} left as it was" in lines
    assert says_cue_refused(lines[-1], 0)


async def test_a_cue_refused_after_a_pause_stops_the_run(start_server):
    """The cue in progress is written after a pause (no final for as long as a cue may last):
    refused there, the run stops with what was written, though the input is still open."""
    server = await start_server()
    written = io.StringIO()
    limits = CueLimits(max_duration_s=0.5, min_duration_s=0.1)  # a pause: no final for 0.5 s
    spoken = [(w, 0.04 * i) for i, (w, _) in enumerate(SPOKEN[:6])]
    subtitles = SubtitleWriter("srt", [written], CueBuilder(limits))
    said = (
        AsrEvent(None, tuple(Word(w, start=t, end=t + 0.3) for w, t in spoken)),
        AsrEvent(None, (Word("late", start=360000.0, end=360000.3),)),
    )  # then nothing more
    with pytest.raises(InputStopped) as info:
        async with asyncio.timeout(20):
            await caption_live(server, *said, right_context=0, max_delay_ms=0, subtitles=subtitles)
    n = subtitles.count
    assert str(info.value) == (
        f"subtitle cue {n + 1}: a time of 100:00:00,300 {SRT_LIMIT}; use --format vtt, "
        "or word times counted from the start of the stream; stopped there: the "
        f"{n} cues before it are written"
    )
    assert [w.w for cue in subtitles.cues for w in cue.words] == [w for w, _ in spoken]
    assert info.value.result.transcript.n_final == 7
    assert len(srt_cues(written.getvalue())) == n


# -- an abort with a server that does not answer --------------------------------------------------


def final_words_received(log: io.StringIO) -> int:
    records = [json.loads(line) for line in log.getvalue().splitlines()]
    return sum(
        len(r["msg"]["words"])
        for r in records
        if r["dir"] == "recv" and r["msg"]["type"] == "final"
    )


async def test_an_abort_cuts_a_connection_the_server_no_longer_reads(start_server, monkeypatch):
    """The server stops reading (frozen): after a stop and an abort (Ctrl-C twice) the run
    returns with what was final at once, not when the closing handshake times out (the
    connection's 10 s, or ``ABORT_CLOSE_S``, made 60 s here)."""
    monkeypatch.setattr(caption_module, "ABORT_CLOSE_S", 60.0)
    server = await start_server()
    log = io.StringIO()
    interrupt = Interrupt(grace_s=60)
    said = AsrEvent(None, tuple(Word(w) for w in "so this is the story".split()))
    options = {"right_context": 1, "max_delay_ms": 600_000, "json_log": log, "interrupt": interrupt}
    run = asyncio.ensure_future(caption_live(server, said, **options))  # the input stays open
    sessions = []
    try:
        # "story" waits for its right context
        await until(lambda: final_words_received(log) == 4, timeout=20)
        sessions = list(server.sessions)
        for session in sessions:
            session._ws.transport.pause_reading()  # the close frame is never read, nor answered
        interrupt.stop()
        interrupt.abort()
        # well before the connection's own close timeout (10 s), after which it would cut it itself
        async with asyncio.timeout(5):
            result = await run
    finally:
        if not run.done():
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
        for session in sessions:
            session._ws.transport.resume_reading()
    assert result.interrupted
    assert result.transcript.words == "so this is the".split() and result.unfinal == 1


# -- a server that closes with 1013 mid-run -------------------------------------------------------


@pytest.mark.parametrize("attempts", ["0", "3"])
async def test_a_close_with_1013_mid_run_is_resumed_or_said_with_its_reason(
    start_server, tmp_path, fake_labels, attempts
):
    """The server closes with 1013 (try again later: its reason says why) while words wait for
    their right context: resumed, nothing is lost; without resuming, the error gives the reason."""
    server = await start_server()
    out = tmp_path / "out.txt"
    first, second = "so this is the story of".split(), "how it all began".split()
    options = ["--right-context", "3", "--max-delay-ms", "600000", "--reconnect-attempts", attempts]
    async with caption_process("-", "--url", server.url, "--out", str(out), *options) as proc:
        proc.stdin.write((" ".join(first) + "\n").encode())
        await proc.stdin.drain()
        await until(
            lambda: sum(s.protocol.n_words for s in server.sessions) >= len(first), timeout=20
        )
        for session in list(server.sessions):
            await session._ws.close(1013, "a send was blocked for 30 s: the client stopped reading")
        if attempts != "0":  # resumed: the rest of the input, then its end
            proc.stdin.write((" ".join(second) + "\n").encode())
            proc.stdin.close()
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    stderr = stderr.decode()
    if attempts == "0":
        assert proc.returncode == 1 and "Traceback" not in stderr
        assert (
            stderr.strip()
            .splitlines()[-1]
            .startswith(
                "streampunct caption: error: the server closed the stream early (close code 1013: a send was "
                "blocked for 30 s: the client stopped reading); "
            )
        )
        return
    assert proc.returncode == 0, stderr
    assert (
        "connection lost (close code 1013: a send was blocked for 30 s: the client stopped reading)"
        in stderr
    )
    words = first + second
    assert out.read_text().strip() == render(words, ended(fake_labels(words)), capitalize=True)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
async def test_a_cue_refused_as_a_stopped_run_ends_is_said_and_the_rest_written(
    start_server, tmp_path
):
    """Ctrl-C while the recognizer's last word (at 100 hours) waits for its right context: the
    stop finalizes it, its cue cannot be written; the run still ends as stopped (130), with
    every cue before it in t.srt, and says why the subtitles stop short."""
    server = await start_server()
    out = older_srt(tmp_path)
    srt = ["--format", "srt", "--out", str(out)]
    async with caption_process(
        "-", "--url", server.url, *srt, "--right-context", "3", "--max-delay-ms", "600000"
    ) as proc:
        proc.stdin.write(word_lines([*SPOKEN, ("late", 360000.0)]))
        await proc.stdin.drain()
        words_in = "streampunct_words_in_total"
        await until(
            lambda: (server.metrics.registry.get_sample_value(words_in) or 0) == len(SPOKEN) + 1
        )
        proc.send_signal(signal.SIGINT)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 30)
    stdout, stderr = stdout.decode(), stderr.decode()
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    cues = srt_cues(stdout)
    assert cues and out.read_text() == stdout
    assert re.sub(r"\W", "", cues[-1][-1].split()[-1]).lower() == "word17"
    lines = stderr.strip().splitlines()
    assert any(says_cue_refused(line, len(cues)) for line in lines), stderr
    assert lines[-1].startswith(
        "streampunct caption: interrupted by SIGINT: 19 words final, written"
    )
