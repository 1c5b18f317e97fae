"""``streampunct caption``: stream a transcript or ASR output to a server; live captions or subtitles.

Stopping it: the first SIGINT (Ctrl-C), SIGTERM or SIGHUP stops reading the input and
ends the stream with ``end``; the command waits at most ``--end-timeout-s``
(default :data:`~streampunct.client.caption.END_GRACE_S`, 5 s) for the finals
of every word sent, writes everything final (captions, subtitles, ``--out``)
and exits with 128 + the signal's number: 130 after SIGINT, 143 after SIGTERM,
129 after SIGHUP (the terminal closed: captions on it are a closed stdout,
below; nohup's ignored SIGHUP stays ignored). A second signal stops waiting at
once (the connection is cut, without waiting for the server to answer its
closing); what is final is still written. The ``--out`` file is written whole or
not at all (a temporary file in the same folder, moved over it at the end),
so a crash leaves what was there before, and so does a run stopped before any
word was final.

A signal that comes while the program is still loading (before the CLI runs
``caption``: the first tenths of a second, more on a busy machine) ends it
the same way, quietly, with 130, 143 or 129 (:func:`streampunct.cli.main`
takes the stop signals first; the ``streampunct`` command,
:func:`streampunct.__main__.console`, from before ``streampunct.cli`` loads);
nothing was sent, and ``--out`` is left as it was. Only Python's own start
keeps Python's defaults.

An input that stops mid-stream exits with 2 after writing what was final, as
the first signal does: a bad line (``--on-bad-line stop``: the words sent
before it are finalized first), or, from stdin or a pipe, a word time that
``--format srt``/``vtt`` cannot write (an SRT cue at 100 hours or later, a time
before 0: the cues before it are written, on stdout and to ``--out``, none
after it; when it was the first, ``--out`` is left as it was). A named file
with such times is refused before anything is sent.

Once the run is over (written, or failed), these signals are ignored until the
process exits (:func:`_ignore_stop_signals`): a second Ctrl-C just after the
first, the run having ended in between, changes nothing (no traceback, the
same status). Called in-process (``streampunct.cli.main(argv)``), the caller's
handlers are put back when it returns (:func:`streampunct.cli.run_command`).

A closed stdout (``caption ... | head``) is taken as the first signal is: no
more is written to stdout, the stream is ended (at once when there is no
``--out``), ``--out`` gets everything final, and the command exits quietly
with 141 (128 + SIGPIPE), as the CLI does for a closed pipe.

``--speed`` is a number >= 0 (0: at once), and ``--json`` goes with ``--format
text`` only (it replaces the captions on stdout); anything else is a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import signal
import sys
from typing import TextIO

NAME = "caption"
HELP = "stream a transcript or ASR output (JSON lines, Vosk, Whisper) to a running server; captions or subtitles"
LOG_LEVEL = "WARNING"  # a filter: stderr carries only what went wrong (and caption's figures)

#: Environment variable read when --token is not given.
TOKEN_ENV = "STREAMPUNCT_AUTH_TOKEN"
FORMATS = ("text", "vtt", "srt", "jsonl")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from streampunct.client.caption import END_GRACE_S
    from streampunct.client.caption_input import BAD_LINE_ACTIONS, INPUT_FORMATS
    from streampunct.client.stream_client import SILENCE_TIMEOUT_S, Reconnect
    from streampunct.commands.argtypes import (
        lexicon_file,
        non_negative_float,
        non_negative_int,
        path_text,
        positive_float,
        positive_int,
    )

    parser.add_argument("transcript", type=path_text, help="input file, or - for stdin (an ASR process piping JSON lines or text); "
                                           "a pipe given by name (<(asr ...), a FIFO) is read as it comes, as stdin")
    parser.add_argument("--input-format", choices=INPUT_FORMATS, default="auto",
                        help="text (plain or word<TAB>LABEL), words (JSON lines of {w,start,end}), vosk, "
                             "whisper (segments, with words or without: then a segment's time is shared by "
                             "its words; whisper.cpp's -oj file; printed lines '[00:01.000 --> 00:04.000] text'); "
                             "JSON one object a line or pretty-printed over several; default: detected from the "
                             "start (a first '{' or '[' is read as JSON or printed segments)")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text: live captions on stdout; vtt/srt: subtitles; jsonl: one cue per line "
                             "(default: %(default)s)")
    parser.add_argument("--url", default="ws://127.0.0.1:8765/v1/stream", help="server (default: %(default)s)")
    parser.add_argument("--token", default=None, help=f"bearer token (default: ${TOKEN_ENV} if set; --token '' sends none)")
    parser.add_argument("--wps", type=positive_float, default=2.5,
                        help="plain text: words per second to send (default: %(default)s)")
    parser.add_argument("--max-chunk", type=positive_int, default=4,
                        help="plain text: words per ASR chunk, drawn from 1..N for a file; from stdin, each "
                             "line is sent in chunks of at most N words (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the chunk sizes (default: %(default)s)")
    parser.add_argument("--speed", type=non_negative_float, default=1.0,
                        help="files with timestamps: replay at this many times real time, 0 = at once "
                             "(default: %(default)s)")
    parser.add_argument("--right-context", type=non_negative_int, default=None,
                        help="session right_context (default: server's)")
    parser.add_argument("--max-delay-ms", type=non_negative_int, default=None,
                        help="session max_delay_ms (default: server's)")
    parser.add_argument("--partials", action=argparse.BooleanOptionalAction, default=True,
                        help="show the provisional tail (default: on)")
    parser.add_argument("--capitalize", action=argparse.BooleanOptionalAction, default=True,
                        help="capitalize sentence starts (default: on)")
    parser.add_argument("--itn", action=argparse.BooleanOptionalAction, default=None,
                        help="ask for numbers, dates, times and money as digits (config.itn; the server needs "
                             "its grammars: serve --itn-grammars on) (default: the server's)")
    parser.add_argument("--lexicon", metavar="FILE", type=lexicon_file, default=None,
                        help="spoken phrases and how to write them, one 'spoken<TAB>written' pair a line, "
                             "sent as config.lexicon")
    parser.add_argument("--out", metavar="FILE", type=path_text, default=None,
                        help="text: write the final punctuated transcript here; vtt/srt/jsonl: the subtitles "
                             "(also on stdout)")
    parser.add_argument("--json", action="store_true",
                        help="log every message sent and received as JSON lines on stdout (instead of captions; "
                             "--format text only)")
    parser.add_argument("--on-bad-line", choices=BAD_LINE_ACTIONS, default="stop",
                        help="a JSON input line (or pretty-printed object) that cannot be read: 'stop' there "
                             "(the words sent before it are finalized, exit status 2) or 'skip' it (reported on "
                             "stderr; a Whisper document's bad segment alone) "
                             "(default: %(default)s)")
    parser.add_argument("--end-timeout-s", type=non_negative_float, default=END_GRACE_S, metavar="SECONDS",
                        help="after Ctrl-C or SIGTERM: how long to wait for the finals of the words sent "
                             "before writing what is final and exiting (130 / 143); a second signal stops "
                             "waiting at once (default: %(default)s)")
    parser.add_argument("--reconnect-attempts", type=int, default=Reconnect.attempts, metavar="N",
                        help="when the connection drops or the server closes it with 1001/1011/1012/1013, "
                             "reconnect and resume the stream, with up to N attempts and backoff "
                             "(0: never; default: %(default)s)")
    parser.add_argument("--silence-timeout-s", type=non_negative_float, default=SILENCE_TIMEOUT_S,
                        metavar="SECONDS",
                        help="take the connection for dropped (and resume) when the server has sent nothing "
                             "for this long while it owes finals: past a word's latency bound (its "
                             "right context or max_delay_ms), a flush or the end; a server that hangs "
                             "without closing its socket sends no close (0: never; default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from streampunct.client.caption_input import is_live_input, read_events, stdin_events
    from streampunct.client.stream_client import check_url
    from streampunct.errors import InputError
    from streampunct.text.textfile import STDIN_CLOSED, AtomicTextFile, utf8_stdout

    if args.out == "-":
        raise InputError("--out -: the captions already go to stdout; --out names a file")
    utf8_stdout()  # captions (or --json) go there: UTF-8, and refused at once when it is closed
    if args.reconnect_attempts < 0:
        raise InputError("--reconnect-attempts must be >= 0")
    if args.json and args.format != "text":
        raise InputError(f"--json goes with --format text only (it replaces the captions); "
                         f"--format {args.format} writes subtitles on stdout")
    check_url(args.url)  # a malformed --url: one line, before any input is read

    def report(line: str) -> None:
        try:
            print(f"streampunct caption: {line}", file=sys.stderr, flush=True)
        except OSError as e:  # a terminal that hung up (SIGHUP follows): nobody reads it
            if not _gone(e):
                raise

    if is_live_input(args.transcript):  # stdin, or a pipe given by name (`<(asr ...)`): as it comes
        if args.transcript == "-" and sys.stdin is None:  # started with stdin closed (`caption - <&-`)
            raise InputError(STDIN_CLOSED)
        events = stdin_events(args.input_format, max_chunk=args.max_chunk, on_bad_line=args.on_bad_line,
                              report=report, path=args.transcript)
    else:
        events = read_events(
            args.transcript, input_format=args.input_format, wps=args.wps, max_chunk=args.max_chunk,
            seed=args.seed, speed=args.speed, on_bad_line=args.on_bad_line, report=report,
        )
        if args.format in ("srt", "vtt"):
            _check_subtitle_times(args.transcript, events, args.format)
        if args.format != "text":
            _report_times_going_back(events, report)
    out = AtomicTextFile(args.out) if args.out else None
    blocked: list[set[signal.Signals]] = []  # the signal mask before the run's end blocked the stop signals
    try:
        try:
            code = asyncio.run(_quiet_after(_caption(args, events, out, report), blocked))
        finally:
            _ignore_stop_signals(blocked)
    except BaseException:
        if out is not None:
            out.discard()  # what was at --out stays as it was
        raise
    return code


async def _quiet_after(run, blocked: list[set[signal.Signals]]):
    """``run``'s result; once it is over (written, or failed), the stop signals are blocked
    (the mask they had goes into ``blocked``) until :func:`_ignore_stop_signals`, and the loop's
    handlers are gone (one that came just before is not said as a second signal as it closes)."""
    from streampunct.client.caption_input import STOP_SIGNALS

    try:
        return await run
    finally:
        if hasattr(signal, "pthread_sigmask"):
            blocked.append(signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS))
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


def _ignore_stop_signals(blocked: list[set[signal.Signals]]) -> None:
    """Ignore the stop signals from now until the process exits, then let them in again (one
    that came while they were blocked is dropped).

    The run is over: what is final is written, and all that is left is to exit. A signal that
    came now (a second Ctrl-C a few milliseconds after the first, the run having ended at once)
    would otherwise reach the loop's wakeup pipe as the loop closes it (a traceback), Python's
    own handler once the loop is closed (a ``KeyboardInterrupt`` anywhere on the way out), or,
    as the interpreter finalizes, the default action (a death by SIGINT, not the status said).
    So they are blocked from the end of the run (:func:`_quiet_after`) while the loop closes,
    in the main thread, the one that takes them (the input's reader thread blocks them:
    :func:`streampunct.client.caption_input._stdin_lines`), and ignored before they are let in."""
    from streampunct.client.caption_input import STOP_SIGNALS

    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    if blocked:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked[0])


def _check_subtitle_times(source: str, events, fmt: str) -> None:
    """Refuse a file whose cues ``fmt`` (srt or vtt) cannot write before anything is sent: a word
    time before 0 (subtitle timestamps start there), or for SRT a cue at 100 hours or later (a
    cue ends at most ``max_lag_s`` after its last word:
    :class:`~streampunct.client.subtitles.SubtitleWriter`, so the latest word time plus that
    is checked). From stdin the subtitle writer refuses the first such cue."""
    from streampunct.client.subtitles import CueLimits, negative_time_error, srt_time_error
    from streampunct.errors import InputError

    times = [(t, w.w) for e in events for w in e.words for t in (w.start, w.end) if t is not None]
    earliest = min(times, default=(0.0, ""))
    if (error := negative_time_error(earliest[0], fmt)) is not None:
        raise InputError(f"{source}: word {earliest[1]!r}: {error}")
    if fmt != "srt":
        return
    latest = max((t for t, _ in times), default=0.0)
    lag = CueLimits().max_lag_s
    error = srt_time_error(latest + lag)
    if error:
        raise InputError(f"{source}: a cue may end {lag:g} s after the last word time: {error}")


def _report_times_going_back(events, report) -> None:
    """Say so (once) when a committed word ends before it starts, or starts before the word
    before it: the cues there are placed by those times, and may be shown for as little as 1 ms."""
    previous, n = None, 0
    for event in events:
        if event.interim:
            continue
        for word in event.words:
            why = None
            if word.start is not None and word.end is not None and word.end < word.start:
                why = f"ends at {word.end:g} s, before it starts ({word.start:g} s)"
            elif word.start is not None and previous is not None and word.start < previous.start:
                why = f"starts at {word.start:g} s, before the word before it ({previous.w!r}, {previous.start:g} s)"
            if why is not None:
                report(f"warning: word {n} ({word.w!r}) {why}: the recognizer's times go back, and cues "
                       "there may be shown for as little as 1 ms")
                return
            if word.start is not None:
                previous = word
            n += 1


def _rushed_cues(cues) -> tuple[int, int] | None:
    """``(short, all)`` when most of three or more cues are shown under 0.8 s and no word had an
    end time of its own (plain text, timed by when it arrived, or JSON words with a ``start``
    alone); None otherwise."""
    from streampunct.client.subtitles import cue_stats

    words = [w for cue in cues for w in cue.words]
    if len(cues) < 3 or any(w.end != w.start for w in words):
        return None
    stats = cue_stats(cues)
    return (stats.short, stats.cues) if 2 * stats.short > stats.cues else None


def _isatty(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (OSError, ValueError):
        return False


def _gone(error: OSError) -> bool:
    """Whether a write failed because its reader is gone: a closed pipe (EPIPE), or a terminal
    that hung up (EIO: the kernel turns a hung-up tty's writes into errors before SIGHUP comes)."""
    return isinstance(error, BrokenPipeError) or error.errno == errno.EIO


class _Stdout:
    """Stdout for the run: the first write or flush that finds it closed (``BrokenPipeError``,
    ``| head``, or a terminal that hung up) calls ``on_close`` once; from then on writes go
    nowhere (and file descriptor 1 to /dev/null, so that the flush at exit does not fail again).
    A write the machine refuses (a full disk under ``> file``) does the same and is kept as
    ``error``: the run stops as at a closed pipe, ``--out`` gets what is final, and the
    command says why and exits 1."""

    def __init__(self, stream: TextIO, on_close) -> None:
        self.stream = stream
        self.on_close = on_close
        self.closed_pipe = False
        self.error: OSError | None = None
        #: whether it was a terminal when the run began (a hung-up terminal is none any more)
        self.was_tty = _isatty(stream)

    def close_pipe(self) -> None:
        """Closed from now on (a write found the pipe closed, or the terminal hung up)."""
        if self.closed_pipe:
            return
        self.closed_pipe = True
        from streampunct.text.textfile import to_devnull

        to_devnull(self.stream)
        self.on_close()

    def _failed(self, e: OSError) -> None:
        from streampunct.text.textfile import WRITE_ERRNOS

        if not _gone(e):
            if e.errno not in WRITE_ERRNOS:
                raise e
            e.filename = e.filename or "stdout"
            self.error = e
        self.close_pipe()

    def write(self, text: str) -> int:
        if not self.closed_pipe:
            try:
                self.stream.write(text)
            except OSError as e:
                self._failed(e)
        return len(text)

    def flush(self) -> None:
        if not self.closed_pipe:
            try:
                self.stream.flush()
            except OSError as e:
                self._failed(e)

    def isatty(self) -> bool:
        return not self.closed_pipe and self.was_tty


async def _caption(args: argparse.Namespace, events, out, report) -> int:
    """The run, with SIGINT and SIGTERM ending it (module docstring); ``out`` (an
    :class:`~streampunct.text.textfile.AtomicTextFile`) is committed here, or discarded by the caller."""
    from streampunct.client.caption import (
        InputStopped,
        Interrupt,
        Interrupted,
        StreamClosedEarly,
        caption,
        default_view,
        join_texts,
        lost_words_errors,
    )
    from streampunct.client.stream_client import Reconnect
    from streampunct.client.subtitles import CueBuilder, SubtitleWriter

    loop = asyncio.get_running_loop()
    interrupt = Interrupt(args.end_timeout_s)
    signals: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        if not signals:
            report(f"{sig.name}: ending the stream; waiting up to {args.end_timeout_s:g} s for the last finals "
                   "(again: stop at once)")
        elif len(signals) == 1:
            report(f"{sig.name}: stopping at once; writing what is final")
        signals.append(sig)
        interrupt.stop()

    for sig in (signal.SIGINT, signal.SIGTERM):  # left in place until the loop closes: writing is not cut
        loop.add_signal_handler(sig, on_signal, sig)

    def on_closed_stdout() -> None:  # as a first signal; nothing to wait for without --out
        if interrupt.stopped:  # a signal came first: its wait goes on
            return
        if out is not None:
            interrupt.stop()
        else:
            interrupt.abort()

    stdout = _Stdout(sys.stdout, on_closed_stdout)

    stderr_tty = _isatty(sys.stderr)  # now: once the terminal hangs up, it is no tty any more

    def on_hangup() -> None:
        # The terminal closed (an ssh session, a window): as SIGTERM, but the terminal's streams
        # are gone. Captions on it are closed stdout (nothing to wait for without --out); what
        # goes to a file or a pipe is still written.
        # After a Ctrl-C, say, this is a second signal, which stops at once. A stop that came
        # from the terminal's stdout failing (EIO: the kernel hangs the terminal up first) was
        # this hangup itself.
        second = bool(signals) or (interrupt.stopped and not stdout.was_tty)
        signals.append(signal.SIGHUP)
        if stderr_tty:
            from streampunct.text.textfile import to_devnull

            to_devnull(sys.stderr)
        if stdout.isatty():
            stdout.close_pipe()  # as `| head` does: on_closed_stdout stops the run, or ends it
        if second or not interrupt.stopped:
            interrupt.stop()

    hangup = getattr(signal, "SIGHUP", None)
    if hangup is not None and signal.getsignal(hangup) is not signal.SIG_IGN:  # nohup: ignored, as it asks
        loop.add_signal_handler(hangup, on_hangup)
    subtitles = None
    view = None
    if args.format != "text":
        outs = [stdout, out.file] if out is not None else [stdout]
        phrases = [spoken.split() for spoken, _ in args.lexicon or ()]  # no cue boundary inside one
        subtitles = SubtitleWriter(args.format, outs, CueBuilder(capitalize=args.capitalize, phrases=phrases))
    elif not args.json:
        view = default_view(args.capitalize, stdout)
    closed_early: StreamClosedEarly | InputStopped | None = None
    try:
        result = await caption(
            args.url, events=events, token=(os.environ.get(TOKEN_ENV, "") if args.token is None else args.token).strip() or None,
            right_context=args.right_context, max_delay_ms=args.max_delay_ms,
            partials=args.partials, capitalize=args.capitalize, itn=args.itn, lexicon=args.lexicon, view=view,
            json_log=stdout if args.json else None,
            subtitles=subtitles, errors=sys.stderr, reconnect=Reconnect(attempts=args.reconnect_attempts),
            interrupt=interrupt, silence_timeout_s=args.silence_timeout_s,
        )
    except (StreamClosedEarly, InputStopped) as e:
        result, closed_early = e.result, e
    except Interrupted as e:  # nothing was sent: --out keeps what it held
        if out is not None:
            out.discard()
        if not signals:  # stdout was closed
            return 128 + signal.SIGPIPE
        report(f"{signals[0].name}: {e}")
        return 128 + signals[0]
    stdout.on_close = lambda: None  # the run is over: nothing left to stop
    stdout.flush()  # a closed stdout seen only now is a closed stdout too
    # finals that show something: words, or symbols alone ("🎉 & 🎉": they take no index)
    shown = result.transcript.n_final or any(text for *_, text in result.transcript.texts)
    if (closed_early is None and not result.interrupted and not shown
            and not lost_words_errors(result.transcript)):
        # stdin held no words (a file with none is refused before connecting): as for a file
        if out is not None:
            out.discard()
        print(f"streampunct caption: error: {args.transcript if args.transcript != '-' else 'stdin'}: "
              "no words", file=sys.stderr)
        return 2
    if out is not None and not shown:
        # stopped, cut off or refused before any final: an existing --out keeps what it held
        out.discard()
        report(f"no word was final: --out {args.out} left as it was")
        out = None
    elif (out is not None and isinstance(closed_early, InputStopped) and subtitles is not None
          and not subtitles.cues):
        # the subtitles refused the first cue (its time): nothing to replace --out with
        out.discard()
        report(f"no cue was written: --out {args.out} left as it was")
        out = None
    if out is not None:
        if args.format == "text":
            written = join_texts([text for _, _, text in result.transcript.texts])  # as the server sent it
            out.file.write(written + "\n")
        out.commit()
    if stdout.error is not None:  # a full disk under `> file`: --out has what was final
        from streampunct.text.textfile import write_error_message

        print(f"streampunct caption: error: {write_error_message(stdout.error)}"
              f"{f' (--out {args.out} has what was final by then)' if out is not None else ''}", file=sys.stderr)
        return 1
    if stdout.closed_pipe and not signals:  # `| head`: quietly, as the CLI ends on a closed pipe
        return 128 + signal.SIGPIPE
    if closed_early is not None:  # (a stopped run still says why its subtitles stopped short)
        print(f"streampunct caption: error: {closed_early}", file=sys.stderr)
        if not result.interrupted:
            return 2 if isinstance(closed_early, InputStopped) else 1
    options = result.options
    print(f"latency: right_context {options.right_context}, max_delay_ms {options.max_delay_ms}: "
          f"{result.latency.format()}", file=sys.stderr)
    rushed = _rushed_cues(subtitles.cues) if subtitles is not None and args.format != "jsonl" else None
    if rushed is not None:
        report(f"warning: {rushed[0]} of {rushed[1]} cues are shown under 0.8 s: their words came faster than "
               "speech, with no end times (plain text is timed by when it was sent: stdin as it comes, a named "
               "file at --wps); give a text file by name at --wps 2.5, or send word times with an end (JSONL)")
    refused = lost_words_errors(result.transcript)
    if refused:
        print(f"streampunct caption: error: the server answered {len(refused)} error(s) (above); "
              "words it refused are missing from the transcript", file=sys.stderr)
    if result.interrupted:
        sig = signals[0] if signals else signal.SIGINT
        unfinal = (f"; {result.unfinal} words sent had no final when it stopped (not written)"
                   if result.unfinal else "")
        report(f"interrupted by {sig.name}: {result.transcript.n_final} words final, written{unfinal}")
        return 128 + sig
    return 1 if refused else 0
