"""The JSON of frames: orjson when it is installed, else the standard library's ``json``.

Every frame's JSON goes through here (:mod:`streampunct.core.wire` encodes and
decodes with :func:`dumps` and :func:`loads`), and the fast path never changes
what goes over the wire or how a frame is answered: orjson is used only where
it gives the same JSON values as ``json``, and ``json`` does the rest.

* :func:`dumps`: orjson's UTF-8 bytes parse to the values of
  ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))`` (the text may
  differ: ``1e16`` for ``1e+16``). What orjson refuses (integers past 64 bits,
  lone surrogates, keys that are not strings, subclasses of ``str``, ``int``,
  ``dict`` or ``list``, dataclasses) and output holding ``null`` (orjson writes
  ``null`` for NaN and infinities as well as for None) go to ``json``.
* :func:`loads`: ``json.loads`` takes some frames orjson refuses (NaN,
  Infinity, numbers beyond a double, lone surrogate escapes) and orjson gives
  other values for a few (integers past 64 bits become floats; arrays and
  objects nested deeper than Python's recursion allows parse). A frame with
  a run of 19 digits or more, with more than :data:`MAX_OPENINGS` ``[`` and
  ``{`` (so possibly nested that deep), or that orjson refuses is parsed by
  ``json.loads``, so it gets the same value, or the same error, as before.

Tests swap the standard library in with ``monkeypatch.setattr(codec, "orjson", None)``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

try:
    import orjson
except ImportError:  # the standard library's json does it all
    orjson = None  # type: ignore[assignment]

#: Frames with more ``[`` and ``{`` than this are parsed by ``json``: nesting this deep
#: (orjson takes 1024 levels; ``json`` raises RecursionError near Python's recursion
#: limit, 1000, less the caller's stack) stays ``json``'s to refuse.
MAX_OPENINGS = 512

# Digits to "0", "[" and "{" to "[", everything else to " ": one C pass that finds both.
_DIGITS_AND_OPENINGS = bytes(
    0x30 if 0x30 <= b <= 0x39 else 0x5B if b in (0x5B, 0x7B) else 0x20 for b in range(256)
)
#: Integers of 19 digits and more may be past 64 bits, which orjson reads as floats.
_LONG_NUMBER = b"0" * 19

_DUMPS_OPTIONS = (
    0 if orjson is None
    else orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
)


def name() -> str:
    """The library in use: ``orjson`` or ``json``."""
    return "json" if orjson is None else "orjson"


def dumps(obj: Any) -> str | bytes:
    """``obj`` as compact JSON text, non-ASCII characters unescaped: UTF-8 bytes from orjson, a
    str from ``json`` (send either as a text frame)."""
    if orjson is not None:
        try:
            out = orjson.dumps(obj, option=_DUMPS_OPTIONS)
        except TypeError:  # orjson.JSONEncodeError: what json writes (or refuses) itself
            pass
        else:
            if b"null" not in out:  # None, or a NaN or an infinity that json writes otherwise
                return out
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _orjson_agrees(text: str) -> bool:
    """True when orjson's value for ``text`` (if it takes it) is ``json.loads``'s."""
    mapped = text.encode("utf-8", "surrogatepass").translate(_DIGITS_AND_OPENINGS)
    return _LONG_NUMBER not in mapped and mapped.count(b"[") <= MAX_OPENINGS


def loads(
    text: str,
    *,
    parse_constant: Callable[[str], Any] | None = None,
    parse_int: Callable[[str], Any] | None = None,
) -> Any:
    """The value of the JSON ``text``; raises as ``json.loads`` does (``ValueError``, ``RecursionError``).

    ``parse_constant`` and ``parse_int`` are ``json.loads``'s hooks, called on the frames
    ``json`` parses: orjson parses only frames without NaN or Infinity and whose integers
    have fewer than 19 digits, so ``parse_int`` must give ``int(digits)`` for those.
    """
    if orjson is not None and _orjson_agrees(text):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:  # json's own error (or its value: NaN, a lone surrogate)
            pass
    return json.loads(text, parse_constant=parse_constant, parse_int=parse_int)
