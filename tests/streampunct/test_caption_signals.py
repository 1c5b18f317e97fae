"""``streampunct caption`` stopped by a signal: the first SIGINT or SIGTERM ends the stream with
``end``, every word the server finalized is written (captions, subtitles, ``--out``) and the
status is 130 / 143; a second signal (or ``--end-timeout-s`` running out) stops at once and
still writes what is final. ``--out`` is written whole or not at all.

Real signals to a real ``caption`` process, against a real server (the fixtures' server, whose
metrics say what it received and finalized); the tests wait on what the processes announce
(a line on stderr, the server's counts), never on a fixed sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from streampunct.labels import ID_TO_MARK
from streampunct.text.normalize import render
from tests.streampunct.fakes import GatedEngine, ended, until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def metric(server, name: str) -> float:
    return server.metrics.registry.get_sample_value(name) or 0.0


def words_in(server) -> float:
    return metric(server, "streampunct_words_in_total")


def words_finalized(server) -> float:
    return metric(server, "streampunct_words_finalized_total")


async def start_caption(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streampunct.cli", "caption", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


@contextlib.asynccontextmanager
async def caption_process(*args: str):
    """A running ``caption``, killed on the way out if a test left it running."""
    proc = await start_caption(*args)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def stderr_line(proc: asyncio.subprocess.Process, contains: str, timeout: float = 30) -> str:
    """The first line of the process' stderr that holds ``contains`` (the lines before it are dropped)."""
    async with asyncio.timeout(timeout):
        while True:
            line = (await proc.stderr.readline()).decode()
            assert line, f"stderr ended before a line with {contains!r}"
            if contains in line:
                return line


async def finish(proc: asyncio.subprocess.Process, timeout: float = 30) -> tuple[int, str, str]:
    if proc.stdin is not None and not proc.stdin.is_closing():
        proc.stdin.close()
    stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode, stdout.decode(), stderr.decode()


def no_temporary_files(folder) -> bool:
    return not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


async def test_sigint_ends_the_stream_and_writes_every_final_word(start_server, tmp_path, fake_labels):
    """``... | caption - --out t.txt``, Ctrl-C: stdin stays open (the ASR goes on), yet the
    stream ends at once: the words still pending (right context 3, no delay bound) get their
    finals from ``end``, and t.txt holds every word, replacing what it held before."""
    server = await start_server()
    out = tmp_path / "t.txt"
    out.write_text("an older transcript\n")
    async with caption_process("-", "--url", server.url, "--out", str(out), "--right-context", "3",
                               "--max-delay-ms", "600000") as proc:
        words = "so this is the story of how it all began".split()
        proc.stdin.write((" ".join(words) + "\n").encode())
        await proc.stdin.drain()
        await until(lambda: words_in(server) == len(words) and words_finalized(server) == len(words) - 3)
        proc.send_signal(signal.SIGINT)  # the last three words wait for their right context
        rc, stdout, stderr = await finish(proc)
    assert rc == 130, stderr
    assert words_finalized(server) == len(words)
    expected = render(words, ended(fake_labels(words)), capitalize=True)
    assert out.read_text() == expected + "\n"
    assert stdout.replace("\n", " ").strip() == expected
    assert "Traceback" not in stderr and f"interrupted by SIGINT: {len(words)} words final" in stderr
    assert no_temporary_files(tmp_path)


async def test_sigterm_mid_file_finishes_the_subtitles_with_every_final(start_server, tmp_path, fake_labels):
    """``caption talk.txt --format srt --out t.srt``, SIGTERM while the file is being paced out:
    nothing more is read, the words sent are finalized (the last one ends its sentence, so the
    last cue does not stop mid-sentence) and t.srt, like stdout, has every one of them."""
    server = await start_server()
    words = [f"word{i % 13}" for i in range(400)]
    source = tmp_path / "talk.txt"
    source.write_text(" ".join(words) + "\n")
    out = tmp_path / "t.srt"
    async with caption_process(str(source), "--url", server.url, "--format", "srt", "--out", str(out),
                               "--wps", "40", "--right-context", "3", "--max-delay-ms", "600000", "--no-partials") as proc:
        await until(lambda: words_in(server) >= 20)
        proc.send_signal(signal.SIGTERM)
        rc, stdout, stderr = await finish(proc)
    assert rc == 143, stderr
    sent = int(words_in(server))
    assert 20 <= sent < len(words)  # stopped mid-file
    assert words_finalized(server) == sent
    assert stdout == out.read_text(encoding="utf-8")
    cues = [block.split("\n", 2) for block in stdout.strip().split("\n\n")]
    assert [int(index) for index, _, _ in cues] == list(range(1, len(cues) + 1))
    shown = " ".join(text.replace("\n", " ") for _, _, text in cues).split()
    assert [w.strip(".,?").lower() for w in shown] == words[:sent]
    marks = ended(fake_labels(words[:sent]))
    assert shown[-1].endswith(ID_TO_MARK[marks[-1]]) and ID_TO_MARK[marks[-1]] in (".", "?")
    assert f"interrupted by SIGTERM: {sent} words final" in stderr and "Traceback" not in stderr
    assert no_temporary_files(tmp_path)


@pytest.mark.parametrize("how", ["second-sigint", "end-timeout"])
async def test_an_abort_writes_what_is_final_at_once(start_server, tmp_path, fake_labels, how):
    """The server cannot finalize (its engine is held): after Ctrl-C the client waits for the
    finals of ``end``, until a second Ctrl-C (at once, long before ``--end-timeout-s`` 60) or
    ``--end-timeout-s`` (1 s) runs out; either way t.txt holds the words the server did finalize."""
    engine = GatedEngine(open=True)
    server = await start_server(engine=engine)
    out = tmp_path / "t.txt"
    timeout = "60" if how == "second-sigint" else "1"
    async with caption_process("-", "--url", server.url, "--out", str(out), "--right-context", "1",
                               "--max-delay-ms", "600000", "--no-partials", "--end-timeout-s", timeout) as proc:
        try:
            words = "one two three four five six seven eight".split()
            proc.stdin.write(b"one two three four five\n")
            await proc.stdin.drain()
            await until(lambda: words_finalized(server) == 4)  # "five" waits for its right context
            engine.close_gate()
            entered = engine.entered
            proc.stdin.write(b"six seven eight\n")
            await proc.stdin.drain()
            await until(lambda: words_in(server) == len(words))
            await engine.wait_entered(entered + 1)  # deciding "five": held in the engine
            proc.send_signal(signal.SIGINT)
            await stderr_line(proc, "SIGINT: ending the stream")
            started = time.monotonic()
            if how == "second-sigint":
                proc.send_signal(signal.SIGINT)
            rc, stdout, stderr = await finish(proc)
            waited = time.monotonic() - started
        finally:
            engine.open()
    assert rc == 130, stderr
    assert waited < 20  # not the 60 s of --end-timeout-s, nor the engine's hold
    if how == "end-timeout":
        assert waited >= 1.0 - 0.05
    assert words_finalized(server) >= 4
    expected = render(words[:4], fake_labels(words[:4]), capitalize=True)
    assert out.read_text() == expected + "\n"
    assert "interrupted by SIGINT: 4 words final, written; 4 words sent had no final" in stderr
    assert "Traceback" not in stderr
    assert no_temporary_files(tmp_path)


@pytest.mark.parametrize("how", ["signal", "nohup", "hangup", "hangup-stderr-file"])
async def test_sighup_writes_every_final_word_as_sigterm_does(start_server, tmp_path, fake_labels, how):
    """The terminal closed (an ssh session dropped): SIGHUP. It used to kill the client, and
    --out kept its old content while the captions sat in a hidden temporary file. Now it is
    SIGTERM's stop: every word sent is finalized into --out, status 129.

    ``hangup``: a real one. The client leads a session whose controlling terminal (its stdout)
    is a pty, and the pty's other end closes: the kernel makes the terminal's writes fail (EIO)
    and then sends SIGHUP; captions and messages on it go nowhere, the rest is written. Under
    nohup (SIGHUP ignored) it stays ignored: the run goes on to the input's end."""
    import fcntl
    import pty
    import termios

    ignored = how == "nohup"
    hangup = how.startswith("hangup")
    hup = signal.SIG_IGN if ignored else signal.SIG_DFL  # whatever the test runner's own is
    server = await start_server()
    out = tmp_path / "t.txt"
    out.write_text("old notes\n")
    master, terminal = pty.openpty() if hangup else (None, None)
    err_file = open(tmp_path / "stderr.txt", "wb") if how == "hangup-stderr-file" else None

    def child_setup():
        signal.signal(signal.SIGHUP, hup)
        if hangup:  # a session of its own, the pty its controlling terminal (as a login shell's)
            os.setsid()
            fcntl.ioctl(terminal, termios.TIOCSCTTY, 0)

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streampunct.cli", "caption", "-", "--url", server.url, "--out", str(out),
        "--right-context", "3", "--max-delay-ms", "600000",
        stdin=asyncio.subprocess.PIPE, stdout=terminal if hangup else asyncio.subprocess.PIPE,
        stderr=err_file or (terminal if hangup else asyncio.subprocess.PIPE), preexec_fn=child_setup)
    try:
        words = "so this is the story of how it all began".split()
        proc.stdin.write((" ".join(words) + "\n").encode())
        await proc.stdin.drain()
        await until(lambda: words_in(server) == len(words) and words_finalized(server) == len(words) - 3)
        if hangup:
            os.close(terminal)
            os.close(master)  # the terminal goes away
            rc = await asyncio.wait_for(proc.wait(), 30)
            stderr = (tmp_path / "stderr.txt").read_text() if err_file else ""
        else:
            proc.send_signal(signal.SIGHUP)
            rc, _, stderr = await finish(proc)
    finally:
        if err_file:
            err_file.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert rc == (0 if ignored else 129), stderr
    assert words_finalized(server) == len(words)
    assert out.read_text() == render(words, ended(fake_labels(words)), capitalize=True) + "\n"
    if how != "hangup":
        assert ("interrupted by SIGHUP" in stderr) != ignored and "Traceback" not in stderr
    assert no_temporary_files(tmp_path)


@pytest.mark.parametrize("fmt", ["text", "srt"])
async def test_ctrl_c_again_as_the_run_ends_changes_nothing(start_server, tmp_path, fake_labels, fmt):
    """A second Ctrl-C a few milliseconds after the first, when the run (its ``end`` answered at
    once) is already over: SIGINTs, one a millisecond, from the line that says the output is written
    until the process is gone, land as its loop closes and as the interpreter exits. Each is
    ignored: status 130 (not a death by SIGINT), no traceback (the loop's closed wakeup pipe, a
    KeyboardInterrupt), no late "stopping at once", and --out whole."""
    server = await start_server()
    out = tmp_path / f"t.{fmt}"
    async with caption_process("-", "--url", server.url, "--out", str(out), "--format", fmt, "--right-context",
                               "3", "--max-delay-ms", "600000", "--no-partials") as proc:
        words = "so this is the story of how it all began".split()
        proc.stdin.write((" ".join(words) + "\n").encode())
        await proc.stdin.drain()
        await until(lambda: words_in(server) == len(words) and words_finalized(server) == len(words) - 3)
        proc.send_signal(signal.SIGINT)
        written = await stderr_line(proc, "words final, written")
        while proc.returncode is None:
            try:
                os.kill(proc.pid, signal.SIGINT)  # until it is reaped: its exit too
            except ProcessLookupError:
                break
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), 0.001)
        rc, _, stderr = await finish(proc)
    assert f"interrupted by SIGINT: {len(words)} words final" in written
    assert rc == 130, written + stderr
    assert "Traceback" not in stderr and "stopping at once" not in stderr, stderr
    shown = out.read_text(encoding="utf-8")
    if fmt == "text":
        assert shown == render(words, ended(fake_labels(words)), capitalize=True) + "\n"
    else:
        assert [w.strip(".,?").lower() for block in shown.strip().split("\n\n")
                for w in block.split("\n", 2)[2].split()] == words
    assert no_temporary_files(tmp_path)


async def test_a_stop_before_any_final_leaves_the_out_file_as_it_was(start_server, tmp_path):
    """Ctrl-C twice before the server finalized anything (its engine held): --out keeps what it
    held, instead of an empty file (an SRT or text file) or a bare WEBVTT header."""
    engine = GatedEngine(open=True)
    server = await start_server(engine=engine)
    engine.close_gate()  # after the warm-up
    out = tmp_path / "t.vtt"
    out.write_text("WEBVTT\n\n00:00.000 --> 00:01.000\nAn older cue.\n")
    before = out.read_text()
    try:
        async with caption_process("-", "--url", server.url, "--out", str(out), "--format", "vtt",
                                   "--right-context", "1", "--max-delay-ms", "600000", "--no-partials") as proc:
            proc.stdin.write(b"one two three\n")
            await proc.stdin.drain()
            await until(lambda: words_in(server) == 3)
            proc.send_signal(signal.SIGINT)
            await stderr_line(proc, "SIGINT: ending the stream")
            proc.send_signal(signal.SIGINT)
            rc, _, stderr = await finish(proc)
    finally:
        engine.open()
    assert rc == 130, stderr
    assert out.read_text() == before
    assert f"no word was final: --out {out} left as it was" in stderr and "Traceback" not in stderr
    assert no_temporary_files(tmp_path)


async def test_a_pipe_given_by_name_is_streamed_as_it_comes(start_server, tmp_path, fake_labels):
    """``caption <(asr ...)``: a FIFO read as stdin is, line by line, not read to its end (which
    never comes while the ASR runs) before anything is sent."""
    server = await start_server()
    fifo = tmp_path / "asr"
    os.mkfifo(fifo)
    out = tmp_path / "t.txt"
    async with caption_process(str(fifo), "--url", server.url, "--out", str(out), "--right-context", "1",
                               "--max-delay-ms", "600000", "--no-partials") as proc:
        writer = await asyncio.to_thread(open, fifo, "w")  # waits for the client's reader
        try:
            writer.write("hello there how are you\n")
            writer.flush()
            await until(lambda: words_in(server) == 5)  # sent while the pipe is still open
            writer.write("fine thanks\n")
            writer.flush()
        finally:
            writer.close()
        rc, _, stderr = await finish(proc)
    assert rc == 0, stderr
    words = "hello there how are you fine thanks".split()
    assert out.read_text() == render(words, ended(fake_labels(words)), capitalize=True) + "\n"


async def test_a_stop_while_connecting_ends_at_once(tmp_path):
    """A server that took the TCP connection and never answers the handshake (stopped with
    SIGSTOP, say): Ctrl-C ends the run at once, since nothing was sent, instead of waiting
    --end-timeout-s for finals that cannot come."""
    accepted = asyncio.Event()
    held = []

    async def hold(reader, writer):
        held.append(writer)
        accepted.set()

    listener = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    source = tmp_path / "talk.txt"
    source.write_text("hello there\n")
    try:
        async with caption_process(str(source), "--url", f"ws://127.0.0.1:{port}/v1/stream",
                                   "--end-timeout-s", "60") as proc:
            await asyncio.wait_for(accepted.wait(), 30)
            proc.send_signal(signal.SIGINT)
            rc, _, stderr = await finish(proc, timeout=8)  # under websockets' 10 s opening timeout
    finally:
        for writer in held:
            writer.close()
        listener.close()
    assert rc == 130, stderr
    assert "stopped before the connection was up; nothing was sent" in stderr and "Traceback" not in stderr


async def test_a_failed_run_leaves_the_out_file_as_it_was(tmp_path):
    """Nothing to write (the server cannot be reached): --out keeps what it held, no temporary file stays."""
    source = tmp_path / "talk.txt"
    source.write_text("hello there\n")
    for fmt in ("text", "srt"):
        out = tmp_path / f"t.{fmt}"
        out.write_text("a good older file\n")
        proc = await start_caption(str(source), "--url", "ws://127.0.0.1:9/v1/stream", "--format", fmt,
                                   "--out", str(out))
        rc, _, stderr = await finish(proc)
        assert rc == 2 and "cannot connect" in stderr
        assert out.read_text() == "a good older file\n"
    assert no_temporary_files(tmp_path)


def test_the_out_file_is_replaced_whole(tmp_path):
    from streampunct.text.textfile import AtomicTextFile, write_text_atomically

    target = tmp_path / "t.txt"
    target.write_text("old\n")
    os.chmod(target, 0o640)
    out = AtomicTextFile(target)
    out.file.write("new, half")
    out.file.flush()
    assert target.read_text() == "old\n"  # not touched while it is written
    out.discard()
    assert target.read_text() == "old\n" and no_temporary_files(tmp_path)
    write_text_atomically(target, "new\n")
    assert target.read_text() == "new\n" and (target.stat().st_mode & 0o777) == 0o640
    fresh = tmp_path / "fresh.txt"
    write_text_atomically(fresh, "x")
    umask = os.umask(0)
    os.umask(umask)
    assert (fresh.stat().st_mode & 0o777) == 0o666 & ~umask
    assert no_temporary_files(tmp_path)


def test_the_out_file_follows_a_link_and_writes_into_a_fifo(tmp_path):
    """``--out`` through a symbolic link replaces the file it points to (the link stays); a
    FIFO (or a device) cannot be replaced, so what was written goes into it, in one piece."""
    import threading

    from streampunct.text.textfile import AtomicTextFile, write_text_atomically

    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target.name)
    write_text_atomically(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    assert no_temporary_files(tmp_path)

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_text_atomically(fifo, "into the pipe\n")
    reader.join(timeout=30)
    assert got == ["into the pipe\n"] and fifo.is_fifo()
    out = AtomicTextFile(fifo)  # discarded: nothing is written (no reader is needed)
    out.file.write("dropped")
    out.discard()
    assert no_temporary_files(tmp_path)


def test_an_out_file_in_a_missing_folder_is_named_as_asked(tmp_path):
    from streampunct.errors import InputError
    from streampunct.text.textfile import AtomicTextFile

    with pytest.raises(InputError) as info:
        AtomicTextFile(tmp_path / "nowhere" / "x.txt")
    assert str(info.value) == f"cannot write {tmp_path}/nowhere/x.txt: no folder {tmp_path}/nowhere"


@pytest.mark.parametrize("redirect", [">", ">>"])
def test_out_to_dev_stdout_writes_through_the_shells_redirect(tmp_path, redirect):
    """``--out /dev/stdout`` is this process's descriptor: written through, at its offset, so a
    ``>>`` target keeps what it held and a pipe gets the text (neither is replaced nor reopened)."""
    (tmp_path / "in.txt").write_text("hello there\n")
    log = tmp_path / "log"
    log.write_text("header\n")
    script = ("from streampunct.text.textfile import write_text_atomically; "
              "write_text_atomically('/dev/stdout', 'body\\n')")
    cmd = f"{shlex.quote(sys.executable)} -c {shlex.quote(script)} {redirect} {shlex.quote(str(log))}"
    subprocess.run(cmd, shell=True, check=True, cwd=tmp_path)
    assert log.read_text() == ("header\nbody\n" if redirect == ">>" else "body\n")
    piped = subprocess.run(f"{shlex.quote(sys.executable)} -c {shlex.quote(script)} | cat", shell=True,
                           check=True, capture_output=True, text=True)
    assert piped.stdout == "body\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "log"]


def test_an_in_process_caption_leaves_the_callers_stop_signals_as_they_were(tmp_path, capsys):
    """``main([...])`` in-process: the caller goes on, so the stop signals a command ignores for its
    own exit are put back (found in review, 2026-12-02: after an in-process caption, Ctrl-C was
    ignored in the caller and in every process it started later)."""
    import signal

    from streampunct.cli import main

    stops = [s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    before = {s: signal.getsignal(s) for s in stops}
    transcript = tmp_path / "t.txt"
    transcript.write_text("hello world\n")
    try:
        assert main(["caption", str(transcript), "--url", "ws://127.0.0.1:9/v1/stream"]) == 2  # nobody there
        assert {s: signal.getsignal(s) for s in stops} == before
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    assert "cannot connect" in capsys.readouterr().err
