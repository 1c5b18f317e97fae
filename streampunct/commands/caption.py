"""``streampunct caption``: stream a transcript to a server and show live captions."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

NAME = "caption"
HELP = "stream a transcript to a running server at a given pace and show live captions"

#: Environment variable read when --token is not given.
TOKEN_ENV = "STREAMPUNCT_AUTH_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("transcript", help="plain text file, or a word<TAB>LABEL file (labels are ignored)")
    parser.add_argument("--url", default="ws://127.0.0.1:8765/v1/stream", help="server (default: %(default)s)")
    parser.add_argument("--token", default=None, help=f"bearer token (default: ${TOKEN_ENV} if set)")
    parser.add_argument("--wps", type=float, default=2.5, help="words per second to send (default: %(default)s)")
    parser.add_argument("--max-chunk", type=int, default=4,
                        help="words per ASR chunk, drawn from 1..N (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the chunk sizes (default: %(default)s)")
    parser.add_argument("--right-context", type=int, default=None, help="session right_context (default: server's)")
    parser.add_argument("--max-delay-ms", type=int, default=None, help="session max_delay_ms (default: server's)")
    parser.add_argument("--partials", action=argparse.BooleanOptionalAction, default=True,
                        help="show the provisional tail (default: on)")
    parser.add_argument("--capitalize", action=argparse.BooleanOptionalAction, default=True,
                        help="capitalize sentence starts (default: on)")
    parser.add_argument("--out", metavar="FILE", default=None, help="write the final punctuated transcript here")
    parser.add_argument("--json", action="store_true",
                        help="log every message sent and received as JSON lines on stdout (instead of captions)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from streampunct.caption import caption, default_view, read_transcript
    from streampunct.errors import InputError

    words = read_transcript(args.transcript)
    if not words:
        raise InputError(f"{args.transcript}: no words")
    result = asyncio.run(
        caption(
            args.url, words, wps=args.wps, max_chunk=args.max_chunk, seed=args.seed,
            token=args.token or os.environ.get(TOKEN_ENV) or None,
            right_context=args.right_context, max_delay_ms=args.max_delay_ms,
            partials=args.partials, capitalize=args.capitalize,
            view=None if args.json else default_view(args.capitalize),
            json_log=sys.stdout if args.json else None,
        )
    )
    if args.out:
        Path(args.out).write_text(result.transcript.text(capitalize=args.capitalize) + "\n", encoding="utf-8")
    print(f"latency ({result.options.to_json()}): {result.latency.format()}", file=sys.stderr)
    return 0
