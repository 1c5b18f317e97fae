"""``streampunct caption``: stream a transcript or ASR output to a server; live captions or subtitles."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

NAME = "caption"
HELP = "stream a transcript or ASR output (JSON lines, Vosk, Whisper) to a running server; captions or subtitles"
LOG_LEVEL = "WARNING"  # a filter: stderr carries only what went wrong (and caption's figures)

#: Environment variable read when --token is not given.
TOKEN_ENV = "STREAMPUNCT_AUTH_TOKEN"
FORMATS = ("text", "vtt", "srt", "jsonl")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from streampunct.client.caption_input import BAD_LINE_ACTIONS, INPUT_FORMATS
    from streampunct.client.stream_client import Reconnect
    from streampunct.commands.argtypes import lexicon_file, positive_float, positive_int

    parser.add_argument("transcript", help="input file, or - for stdin (an ASR process piping JSON lines or text)")
    parser.add_argument("--input-format", choices=INPUT_FORMATS, default="auto",
                        help="text (plain or word<TAB>LABEL), words (JSON lines of {w,start,end}), vosk, "
                             "whisper (segments with words); JSON one object a line or pretty-printed over "
                             "several; default: detected from the start (a first '{' or '[' is read as JSON)")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text: live captions on stdout; vtt/srt: subtitles; jsonl: one cue per line "
                             "(default: %(default)s)")
    parser.add_argument("--url", default="ws://127.0.0.1:8765/v1/stream", help="server (default: %(default)s)")
    parser.add_argument("--token", default=None, help=f"bearer token (default: ${TOKEN_ENV} if set)")
    parser.add_argument("--wps", type=positive_float, default=2.5,
                        help="plain text: words per second to send (default: %(default)s)")
    parser.add_argument("--max-chunk", type=positive_int, default=4,
                        help="plain text: words per ASR chunk, drawn from 1..N for a file; from stdin, each "
                             "line is sent in chunks of at most N words (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the chunk sizes (default: %(default)s)")
    parser.add_argument("--speed", type=float, default=1.0,
                        help="files with timestamps: replay at this many times real time, 0 = at once "
                             "(default: %(default)s)")
    parser.add_argument("--right-context", type=int, default=None, help="session right_context (default: server's)")
    parser.add_argument("--max-delay-ms", type=int, default=None, help="session max_delay_ms (default: server's)")
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
    parser.add_argument("--out", metavar="FILE", default=None,
                        help="text: write the final punctuated transcript here; vtt/srt/jsonl: the subtitles "
                             "(also on stdout)")
    parser.add_argument("--json", action="store_true",
                        help="log every message sent and received as JSON lines on stdout (instead of captions)")
    parser.add_argument("--on-bad-line", choices=BAD_LINE_ACTIONS, default="stop",
                        help="a JSON input line (or pretty-printed object) that cannot be read: 'stop' there "
                             "(the words sent before it are finalized, exit status 2) or 'skip' it (reported on "
                             "stderr) "
                             "(default: %(default)s)")
    parser.add_argument("--reconnect-attempts", type=int, default=Reconnect.attempts, metavar="N",
                        help="when the connection drops or the server closes it with 1001/1011/1012/1013, "
                             "reconnect and resume the stream, with up to N attempts and backoff "
                             "(0: never; default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from streampunct.client.caption import (
        InputStopped,
        StreamClosedEarly,
        caption,
        default_view,
        lost_words_errors,
    )
    from streampunct.client.caption_input import read_events, stdin_events
    from streampunct.client.stream_client import Reconnect
    from streampunct.client.subtitles import CueBuilder, SubtitleWriter
    from streampunct.errors import InputError

    if args.reconnect_attempts < 0:
        raise InputError("--reconnect-attempts must be >= 0")

    def report(line: str) -> None:
        print(f"streampunct caption: {line}", file=sys.stderr, flush=True)

    if args.transcript == "-":
        events = stdin_events(args.input_format, max_chunk=args.max_chunk, on_bad_line=args.on_bad_line,
                              report=report)
    else:
        events = read_events(
            args.transcript, input_format=args.input_format, wps=args.wps, max_chunk=args.max_chunk,
            seed=args.seed, speed=args.speed, on_bad_line=args.on_bad_line, report=report,
        )
    out_file = None
    subtitles = None
    view = None
    if args.format != "text":
        out_file = open(args.out, "w", encoding="utf-8") if args.out else None  # noqa: SIM115
        outs = [sys.stdout, out_file] if out_file else [sys.stdout]
        subtitles = SubtitleWriter(args.format, outs, CueBuilder(capitalize=args.capitalize))
    elif not args.json:
        view = default_view(args.capitalize)
    try:
        result = asyncio.run(
            caption(
                args.url, events=events, token=args.token or os.environ.get(TOKEN_ENV) or None,
                right_context=args.right_context, max_delay_ms=args.max_delay_ms,
                partials=args.partials, capitalize=args.capitalize, itn=args.itn, lexicon=args.lexicon, view=view,
                json_log=sys.stdout if args.json and args.format == "text" else None,
                subtitles=subtitles, errors=sys.stderr, reconnect=Reconnect(attempts=args.reconnect_attempts),
            )
        )
        closed_early = None
    except (StreamClosedEarly, InputStopped) as e:
        result, closed_early = e.result, e
    finally:
        if out_file is not None:
            out_file.close()
    if args.out and args.format == "text":
        written = " ".join(text for _, _, text in result.transcript.texts if text)  # the text as the server sent it
        Path(args.out).write_text(written + "\n", encoding="utf-8")
    if closed_early is not None:
        print(f"streampunct caption: error: {closed_early}", file=sys.stderr)
        return 2 if isinstance(closed_early, InputStopped) else 1
    options = result.options
    print(f"latency: right_context {options.right_context}, max_delay_ms {options.max_delay_ms}: "
          f"{result.latency.format()}", file=sys.stderr)
    refused = lost_words_errors(result.transcript)
    if refused:
        print(f"streampunct caption: error: the server answered {len(refused)} error(s) (above); "
              "words it refused are missing from the transcript", file=sys.stderr)
        return 1
    return 0
