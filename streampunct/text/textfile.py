"""Reading transcripts: text encodings by byte-order mark, and refusing binary input.

``punctuate`` and ``caption`` read files (or stdin) that come from anywhere:
Windows editors write UTF-8 with a BOM or UTF-16; a wrong path can point at
a binary; older tools write Latin-1. Text is decoded by its BOM (UTF-32,
UTF-16, UTF-8); without one, as UTF-16 when every other byte is NUL (a
BOM-less UTF-16 file), else as UTF-8, else (not valid UTF-8) as Windows-1252,
the superset of Latin-1 that such files use, with a warning that says so.
Input that still holds NUL bytes or mostly control characters is refused
with an :class:`~streampunct.errors.InputError`.
"""

from __future__ import annotations

import codecs
import logging
import sys
from pathlib import Path

from streampunct.errors import InputError

logger = logging.getLogger(__name__)

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


def _utf16_without_bom(raw: bytes) -> str | None:
    """``utf-16-le``/``-be`` when one byte of (nearly) every pair is NUL, as in UTF-16 text of
    mostly Latin letters; None otherwise."""
    pairs = len(raw) // 2
    if pairs < 2 or len(raw) % 2:
        return None
    high_odd = raw[1::2].count(0) / pairs
    high_even = raw[0::2].count(0) / pairs
    if high_odd >= 0.5 and high_even < 0.05:
        return "utf-16-le"
    if high_even >= 0.5 and high_odd < 0.05:
        return "utf-16-be"
    return None


def _decode_without_bom(raw: bytes, name: str) -> str:
    utf16 = _utf16_without_bom(raw)
    if utf16 is not None:
        return raw.decode(utf16, errors="replace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        if b"\x00" in raw:
            return raw.decode("utf-8", errors="replace")  # binary: refused below
        logger.warning("%s is not UTF-8 (byte 0x%02x at offset %d): read as Windows-1252 (Latin-1)",
                       name, raw[e.start], e.start)
        return raw.decode("cp1252", errors=_LATIN1_FALLBACK)


def _as_latin1(error: UnicodeError) -> tuple[str, int]:
    """Windows-1252 leaves five bytes undefined: Latin-1 reads them (as C1 controls)."""
    assert isinstance(error, UnicodeDecodeError)
    return error.object[error.start:error.end].decode("latin-1"), error.end


_LATIN1_FALLBACK = "streampunct-latin1"
codecs.register_error(_LATIN1_FALLBACK, _as_latin1)


def decode_text(raw: bytes, name: str = "input") -> str:
    """The text of ``raw``; raises :class:`InputError` for binary data."""
    for bom, encoding in _BOMS:
        if raw.startswith(bom):
            text = raw[len(bom):].decode(encoding, errors="replace")
            break
    else:
        text = _decode_without_bom(raw, name)
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
