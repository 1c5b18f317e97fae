"""Reading transcripts: text encodings by byte-order mark, and refusing binary input.

``punctuate`` and ``caption`` read files (or stdin) that come from anywhere:
Windows editors write UTF-8 with a BOM or UTF-16; a wrong path can point at
a binary. Text is decoded by its BOM (UTF-32, UTF-16, UTF-8), otherwise as
UTF-8 with undecodable bytes replaced; input that holds NUL bytes or mostly
control characters is refused with an :class:`~streampunct.errors.InputError`.
"""

from __future__ import annotations

import codecs
import sys
from pathlib import Path

from streampunct.errors import InputError

#: Byte-order marks, longest first (the UTF-32 LE mark starts with the UTF-16 LE one).
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
#: Share of control (or undecodable) characters above which text is taken for binary.
_MAX_CONTROL_SHARE = 0.3
#: Shorter texts are too short to judge by their share of control characters.
_MIN_JUDGED = 32
_TEXT_CONTROLS = frozenset("\t\n\r\f\v")


def decode_text(raw: bytes, name: str = "input") -> str:
    """The text of ``raw``; raises :class:`InputError` for binary data."""
    encoding, skip = "utf-8", 0
    for bom, enc in _BOMS:
        if raw.startswith(bom):
            encoding, skip = enc, len(bom)
            break
    text = raw[skip:].decode(encoding, errors="replace")
    if "\x00" in text:
        raise InputError(f"{name} looks binary (it holds NUL bytes); give a UTF-8 or UTF-16 text file")
    if len(text) >= _MIN_JUDGED:
        odd = sum(1 for ch in text if (ch < " " and ch not in _TEXT_CONTROLS) or ch == "\ufffd")
        if odd > _MAX_CONTROL_SHARE * len(text):
            raise InputError(f"{name} looks binary ({odd} of {len(text)} characters are control "
                             "or undecodable bytes); give a UTF-8 or UTF-16 text file")
    return text


def require_file(path: str | Path) -> Path:
    """``path``, or an :class:`InputError` saying it is missing or a directory."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path} is a directory, not a file")
    if not path.is_file():
        raise InputError(f"no such file: {path}")
    return path


def read_text(source: str | Path) -> str:
    """Decoded text of a file, or of stdin when ``source`` is ``"-"``."""
    if str(source) == "-":
        return decode_text(sys.stdin.buffer.read(), "stdin")
    path = require_file(source)
    return decode_text(path.read_bytes(), str(path))
