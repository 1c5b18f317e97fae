"""``streampunct punctuate``: punctuate a text file (or stdin) offline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streampunct.errors import InputError

NAME = "punctuate"
HELP = "punctuate a transcript (plain text, or a word<TAB>LABEL file) with the offline decoder"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", nargs="?", default="-", help="text file, or - for stdin (default)")
    p.add_argument("--model", type=Path, default=None, help="model folder (default: the shipped model)")
    p.add_argument("--engine", default="onnxruntime", help="engine backend (default: onnxruntime)")
    p.add_argument("--capitalize", action="store_true", help="capitalize sentence starts and 'I'")
    p.add_argument("--out", type=Path, default=None, help="write here instead of stdout")


def read_transcript_words(source: str) -> list[str]:
    """Words of a plain-text or ``word<TAB>LABEL`` transcript, normalized.

    Undecodable bytes are replaced; raises InputError when nothing is left.
    """
    from streampunct.text import normalize_words

    if source == "-":
        raw = sys.stdin.buffer.read()
    else:
        path = Path(source)
        if not path.exists() or path.is_dir():
            raise InputError(f"no such file: {path}")
        raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    lines = text.splitlines()
    if lines and all("\t" in line for line in lines if line.strip()):
        tokens = [line.rpartition("\t")[0] for line in lines if line.strip()]
    else:
        tokens = text.split()
    words = normalize_words(tokens)
    if not words:
        raise InputError("no words in the input (it is empty or holds only punctuation)")
    return words


def run(args: argparse.Namespace) -> int:
    from streampunct.punctuator import Punctuator
    from streampunct.text import render

    words = read_transcript_words(args.input)
    punctuator = Punctuator.from_model_dir(args.model, engine=args.engine)
    try:
        text = render(words, punctuator.punctuate(words), capitalize=args.capitalize)
    finally:
        punctuator.close()
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return 0
