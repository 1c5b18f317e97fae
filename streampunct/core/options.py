"""Session options: one frozen dataclass shared by the wire protocol and the stream state,
and the one place their rules live.

The ``config`` object on the wire, the server's session defaults and the
latency options of :class:`~streampunct.core.stream_state.StreamState` are the same
thing; ``stream_state.SessionOptions`` is another name for this class.

Every rule of an option is checked by :func:`check_option` (or
:func:`check_options`), with the server's limits as a parameter: the wire
decoder (:func:`streampunct.core.wire.decode_config`, a ``bad_request``), the
``serve`` command (its ``--right-context`` and ``--max-delay-ms``), the Python
API (``Punctuator.stream``, an ``InputError``) and :class:`SessionOptions`
itself (no upper bound: it does not know the server's limits) all raise
:class:`OptionError` with the same message for the same value. A message shows a value
by :func:`shown`: short, however long the value (a client's 400-digit ``right_context``
is "an integer of 400 digits").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from streampunct.text.written_form import normalize_lexicon


class OptionLimits(Protocol):
    """The server's bounds of the session options (:class:`streampunct.core.wire.Limits` is one)."""

    @property
    def max_right_context(self) -> int: ...

    @property
    def max_delay_ms(self) -> int: ...

    @property
    def max_lexicon_pairs(self) -> int: ...

    @property
    def max_lexicon_chars(self) -> int: ...


class OptionError(ValueError):
    """A session option that breaks its rule.

    Attributes:
        name: the option (``right_context``, ...).
        message: what is wrong, the same text wherever the rule is checked.
    """

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


#: The most characters of a value that an error message shows (:func:`shown`).
SHOWN_CHARS = 24


def decimal_digits(value: int) -> int:
    """The decimal digits of ``value`` (without its sign), counted without ``str`` (which
    refuses an integer past ``sys.get_int_max_str_digits``, 4300 digits out of the box)."""
    n = abs(value)
    digits = max(1, int(n.bit_length() * math.log10(2)))
    while 10**digits <= n:
        digits += 1
    while digits > 1 and 10 ** (digits - 1) > n:
        digits -= 1
    return digits


def shown(value: object) -> str:
    """``value`` as an error message shows it: its repr, cut after :data:`SHOWN_CHARS`
    characters, and an integer whose repr would be cut by its digit count (a 5000-digit
    int has no repr at all: ``str`` raises past 4300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool):
        digits = decimal_digits(value)
        if digits + (value < 0) > SHOWN_CHARS:
            return f"{'a negative' if value < 0 else 'an'} integer of {digits} digits"
    try:
        text = repr(value)
    except Exception:  # a repr that fails: say what it is
        return f"a {type(value).__name__}"
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


#: The options that are integers from 0 up to a server limit -> the name of that limit.
INT_OPTIONS: Mapping[str, str] = {"right_context": "max_right_context", "max_delay_ms": "max_delay_ms"}
#: The options that are true or false.
BOOL_OPTIONS: tuple[str, ...] = ("partials", "capitalize", "itn")
#: Every option, in the order they are checked (the first broken rule is the one reported).
OPTION_NAMES: tuple[str, ...] = (*INT_OPTIONS, *BOOL_OPTIONS, "lexicon")


def require_int(config: object, name: str, minimum: int, maximum: int | None = None, *,
                optional: bool = False) -> None:
    """ValueError unless ``config``'s field ``name`` is an int (not a bool: ``True`` is 1) in
    ``[minimum, maximum]`` (None when ``optional``). A configuration's own check of its counts,
    sizes and ports: a float NaN passed ``< 1`` tests and lifted the bound it set."""
    value = getattr(config, name)
    if value is None and optional:
        return
    bounds = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum or (
            maximum is not None and value > maximum):
        raise ValueError(f"{name} must be an integer {bounds}{' or None' if optional else ''}, not {shown(value)}")


def check_int_option(name: str, value: object, limits: OptionLimits | None = None) -> int:
    """``value`` of the integer option ``name``: an ``int`` (not a bool) from 0 up to the
    server's limit (``limits``; None: no upper bound)."""
    maximum = None if limits is None else getattr(limits, INT_OPTIONS[name])
    # (a limit is shown as a value is: a server's own limit may be past str's 4300 digits)
    bounds = ">= 0" if maximum is None else f"between 0 and {shown(maximum)}"
    # bool is an int subclass in Python; true/false is not a number on the wire.
    if type(value) is not int:
        raise OptionError(name, f"'{name}' must be an integer {bounds}")
    if value < 0 or (maximum is not None and value > maximum):
        raise OptionError(name, f"'{name}' must be {bounds}, not {shown(value)}")
    return value


def check_bool_option(name: str, value: object) -> bool:
    """``value`` of the option ``name`` that is true or false (a ``bool``, not a number)."""
    if not isinstance(value, bool):
        raise OptionError(name, f"'{name}' must be true or false")
    return value


def check_lexicon(value: object, limits: OptionLimits | None = None) -> tuple[tuple[str, str], ...]:
    """``lexicon``: a list of ``[spoken, written]`` string pairs within the server's limits
    (``limits``; None: no bounds), in its effective form
    (:func:`~streampunct.text.written_form.normalize_lexicon`)."""
    if not isinstance(value, list | tuple) or not all(
        isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in value
    ):
        raise OptionError("lexicon", "'lexicon' must be a list of [spoken, written] string pairs")
    if limits is not None:
        if len(value) > limits.max_lexicon_pairs:
            raise OptionError("lexicon", f"'lexicon' has {len(value)} pairs; the limit is {limits.max_lexicon_pairs}")
        chars = sum(len(x) for p in value for x in p)
        if chars > limits.max_lexicon_chars:
            raise OptionError("lexicon", f"'lexicon' has {chars} characters; the limit is {limits.max_lexicon_chars}")
    try:
        return normalize_lexicon(value)
    except ValueError as e:
        raise OptionError("lexicon", str(e)) from None


def check_option(name: str, value: object, limits: OptionLimits | None = None) -> Any:
    """``value`` of the session option ``name`` checked by its rule, in its effective form;
    raises :class:`OptionError`. ``limits``: the server's (None: no upper bounds)."""
    if name in INT_OPTIONS:
        return check_int_option(name, value, limits)
    if name in BOOL_OPTIONS:
        return check_bool_option(name, value)
    if name == "lexicon":
        return check_lexicon(value, limits)
    raise KeyError(f"no session option {name!r}")


def check_options(values: Mapping[str, Any], limits: OptionLimits | None = None) -> dict[str, Any]:
    """The session options among ``values`` (other keys are ignored), each checked by
    :func:`check_option` in the order of :data:`OPTION_NAMES`."""
    return {name: check_option(name, values[name], limits) for name in OPTION_NAMES if name in values}


@dataclass(frozen=True)
class SessionOptions:
    """Effective options of one session (the ``config`` object on the wire).

    Attributes:
        right_context: words after a word that make it decidable (final).
        max_delay_ms: a word is decidable at the latest this long after it
            arrived, whatever came after it.
        partials: send ``partial`` messages for the undecided tail.
        capitalize: capitalize sentence starts (and "I") in ``text``.
        itn: write numbers, dates, times and money in ``text`` as digits
            and symbols (inverse text normalization; ``streampunct.text.itn``).
        lexicon: the session's ``(spoken, written)`` pairs, spoken as
            normalized words joined by one space
            (:func:`streampunct.text.written_form.normalize_lexicon`); they apply
            over the server's own lexicon.

    Construction checks the types and lower bounds (:func:`check_option` without
    limits, :class:`OptionError`); :meth:`check` checks against a server's limits.
    """

    # Defaults chosen on validation for live use (docs/results.md, "Live use"): a 4-word ASR
    # chunk at 2.5 words/s spans 1.6 s, so a shorter delay bound decides the last words of
    # chunks with no right context.
    right_context: int = 3
    max_delay_ms: int = 2000
    partials: bool = False
    capitalize: bool = False
    itn: bool = False
    lexicon: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for name in INT_OPTIONS:
            check_int_option(name, getattr(self, name))
        for name in BOOL_OPTIONS:
            check_bool_option(name, getattr(self, name))

    def check(self, limits: OptionLimits) -> SessionOptions:
        """These options, with the integers within a server's ``limits`` (raises
        :class:`OptionError`): what a server checks its session defaults with."""
        for name in INT_OPTIONS:
            check_int_option(name, getattr(self, name), limits)
        return self

    def to_json(self, *, itn_available: bool = True) -> dict[str, Any]:
        """The effective options on the wire; ``itn_available`` False (a server without the ITN
        grammars) leaves ``itn`` out: the protocol has a server name only what it supports."""
        out = {
            "right_context": self.right_context,
            "max_delay_ms": self.max_delay_ms,
            "partials": self.partials,
            "capitalize": self.capitalize,
            "itn": self.itn,
            "lexicon": [list(pair) for pair in self.lexicon],
        }
        if not itn_available:
            del out["itn"]
        return out
