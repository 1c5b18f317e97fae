"""Argument types for the command line: numbers in range, refused by argparse before any work starts.

``type=positive_int`` and kin make argparse print ``argument --flag: ...``
and exit with status 2 (a usage error), as for any other malformed argument.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path


def _number(kind: type, ok: Callable[[float], bool], what: str) -> Callable[[str], int | float]:
    noun = "an integer" if kind is int else "a number"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun} {what}, got {text!r}") from None
        if value != value or not ok(value):  # NaN is never in range
            if kind is float and not math.isfinite(value) and not what.startswith(("finite", "in [")):
                raise argparse.ArgumentTypeError(f"must be a finite number {what}, got {text}")
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value

    parse.__name__ = f"{kind.__name__} {what}"
    return parse


positive_int = _number(int, lambda v: v >= 1, ">= 1")
non_negative_int = _number(int, lambda v: v >= 0, ">= 0")
positive_float = _number(float, lambda v: 0 < v < float("inf"), "> 0")
non_negative_float = _number(float, lambda v: 0 <= v < float("inf"), ">= 0")
finite_float = _number(float, math.isfinite, "finite (not nan or inf)")
port = _number(int, lambda v: 0 <= v <= 65535, "between 0 and 65535")
unit_interval = _number(float, lambda v: 0 <= v < 1, "in [0, 1)")


def path_argument(text: str) -> Path:
    """A file or folder argument: not an empty string (``--out "$UNSET"`` would name the current
    folder, where a command that replaces its output would replace what is there)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return Path(text)


def path_text(text: str) -> str:
    """:func:`path_argument` kept as the text given: an output that ``-`` sends to stdout."""
    path_argument(text)
    return text


def int_between(low: int, high: int) -> Callable[[str], int | float]:
    """An integer in ``[low, high]`` (a session option within a server's default limits)."""
    return _number(int, lambda v: low <= v <= high, f"between {low} and {high}")


def choices(modes: type[StrEnum]) -> list[str]:
    """An enum's values as an option's ``choices`` (plain strings: argparse shows them as the
    flag takes them, in its help and in its errors)."""
    return [mode.value for mode in modes]


def lexicon_file(path: str) -> tuple[tuple[str, str], ...]:
    """A lexicon file (one ``spoken<TAB>written`` pair a line, ``#`` comments) as normalized
    pairs (:func:`streampunct.text.written_form.parse_lexicon_tsv`)."""
    from streampunct.errors import InputError
    from streampunct.text.textfile import read_text
    from streampunct.text.written_form import parse_lexicon_tsv

    try:
        return parse_lexicon_tsv(read_text(path), source=path)
    except (InputError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _option_value(text: str) -> object:
    """An ``--engine-option`` value: the text, which the backend converts to its option's type
    (``engines.base.OptionText``: ``providers=A,B`` a list, ``model_version=1`` a string);
    a non-finite number as the float, which no option takes (refused here)."""
    from engines.base import OptionText

    try:
        number = float(text)
    except ValueError:
        return OptionText(text)
    return number if not math.isfinite(number) else OptionText(text)


def engine_option(text: str) -> tuple[str, object]:
    """``--engine-option KEY=VALUE`` (serve, punctuate, evaluate): the backend's option, as a pair."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    parsed = _option_value(value)
    if isinstance(parsed, float) and not math.isfinite(parsed):  # no backend's cost or count is nan/inf
        raise argparse.ArgumentTypeError(f"expected a finite number in {text!r}")
    return key, parsed


def add_engine_option(parser: argparse.ArgumentParser, help: str = (
        "extra backend option (repeatable), as serve takes it: e.g. intra_op_threads=2, or url=HOST:PORT "
        "for --engine triton")) -> None:
    """``--engine-option KEY=VALUE``, repeatable (:func:`engine_option`), into ``engine_option``."""
    parser.add_argument("--engine-option", metavar="KEY=VALUE", type=engine_option, action="append", default=[],
                        help=help)
