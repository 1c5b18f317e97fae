"""The streaming wire protocol, version 1 (see ``docs/protocol.md``): typed messages.

Every frame is one JSON object with a string ``type``. Client messages are
decoded here, in one place, into frozen dataclasses; anything malformed raises
:class:`ProtocolError` carrying the error ``code`` the server sends back
(``bad_request`` or ``too_large``). Server messages are dataclasses too and
are turned into JSON by :func:`encode` (the server sends :func:`encode_frame`'s
bytes); the client decodes them with :func:`decode_server`. The JSON itself is
:mod:`streampunct.core.codec`'s (orjson when installed, with the standard
library's values and errors). Unknown fields are ignored in both directions, so
new optional fields never break an older peer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

from streampunct.core import codec
from streampunct.core.options import (
    OPTION_NAMES,
    OptionError,
    SessionOptions,
    check_options,
    require_int,
    shown,
)
from streampunct.errors import StreampunctError
from streampunct.text.normalize import normalize_word

#: The ``protocol`` field of ``ready``.
PROTOCOL_VERSION = 1
#: The reason of the 1001 close that ends a session whose client sent nothing for the
#: server's idle timeout (``serve --idle-timeout-s``); a shutdown's 1001 gives another.
IDLE_TIMEOUT_REASON = "idle timeout"


class ErrorCode(StrEnum):
    """The ``code`` of an ``error`` message."""

    BAD_REQUEST = "bad_request"
    TOO_LARGE = "too_large"
    OVERLOADED = "overloaded"
    INTERNAL = "internal"


class ProtocolError(StreampunctError):
    """A message that breaks the protocol; ``code`` is what the server answers with."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message


@dataclass(frozen=True)
class Limits:
    """What one client message may carry (the bounds of the session options among them:
    :class:`~streampunct.core.options.OptionLimits`, checked by
    :func:`~streampunct.core.options.check_option`).

    Attributes:
        max_words_per_message: most words in one ``words`` message.
        max_word_chars: longest word (characters, before normalization).
        max_right_context: largest ``right_context`` a client may ask for.
        max_delay_ms: largest ``max_delay_ms`` a client may ask for.
        max_context_words: most ``resume`` context words the server uses (it
            takes the last ones); None: not announced (a session derives it
            from its window, see :class:`~streampunct.core.session_protocol.SessionProtocol`).
        max_lexicon_pairs: most ``[spoken, written]`` pairs in ``config.lexicon``.
        max_lexicon_chars: most characters in ``config.lexicon``, both sides of
            every pair together.
        max_message_bytes: the largest frame (bytes as sent: UTF-8, after JSON's escapes);
            a larger one closes the connection with 1009, whatever it holds. None: not
            announced.
    """

    max_words_per_message: int = 1000
    max_word_chars: int = 256
    max_right_context: int = 1000
    max_delay_ms: int = 600_000
    max_context_words: int | None = None
    max_lexicon_pairs: int = 1000
    max_lexicon_chars: int = 50_000
    max_message_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_words_per_message", "max_word_chars", "max_lexicon_pairs", "max_lexicon_chars"):
            require_int(self, name, 1)
        for name in ("max_right_context", "max_delay_ms"):
            require_int(self, name, 0)
        require_int(self, "max_context_words", 0, optional=True)
        require_int(self, "max_message_bytes", 1, optional=True)


DEFAULT_LIMITS = Limits()


# -- client -> server ---------------------------------------------------------


class NullTime:
    """A word's time that the client sent as JSON ``null``: a final carries it back as ``null``
    (protocol.md: times are "numbers or null", "carried back unchanged"), where a time not sent
    at all stays out of the final. The one instance is :data:`NULL_TIME`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL_TIME"

    def __reduce__(self) -> str:
        return "NULL_TIME"


NULL_TIME = NullTime()
#: A word's time as the client sent it: a number, ``null`` (:data:`NULL_TIME`), or none (None).
Time = float | NullTime | None


def _time_json(value: float | NullTime) -> float | None:
    return None if value is NULL_TIME else value  # type: ignore[return-value]


@dataclass(frozen=True)
class Word:
    """One ASR word; ``start``/``end`` are optional times in seconds (not used for punctuation),
    :data:`NULL_TIME` for one sent as ``null``."""

    w: str
    start: Time = None
    end: Time = None


@dataclass(frozen=True)
class ConfigRequest:
    """``config``: options to change (None leaves an option as it is)."""

    right_context: int | None = None
    max_delay_ms: int | None = None
    partials: bool | None = None
    capitalize: bool | None = None
    itn: bool | None = None
    #: effective pairs (:func:`streampunct.text.written_form.normalize_lexicon`)
    lexicon: tuple[tuple[str, str], ...] | None = None
    type: str = field(default="config", init=False)

    _OPTIONS = OPTION_NAMES

    def apply_to(self, options: SessionOptions) -> SessionOptions:
        changes = {name: getattr(self, name) for name in self._OPTIONS if getattr(self, name) is not None}
        return replace(options, **changes)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        for name in self._OPTIONS:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.lexicon is not None:
            out["lexicon"] = [list(pair) for pair in self.lexicon]
        return out


@dataclass(frozen=True)
class _WordList:
    words: tuple[Word, ...]

    def to_json(self) -> dict[str, Any]:
        items: list[Any] = []
        for word in self.words:
            if word.start is None and word.end is None:
                items.append(word.w)
            else:
                item: dict[str, Any] = {"w": word.w}
                if word.start is not None:
                    item["start"] = _time_json(word.start)
                if word.end is not None:
                    item["end"] = _time_json(word.end)
                items.append(item)
        return {"type": self.type, "words": items}  # type: ignore[attr-defined]


@dataclass(frozen=True)
class WordsMessage(_WordList):
    """``words``: committed ASR words, in order, as sent (not yet normalized)."""

    type: str = field(default="words", init=False)


@dataclass(frozen=True)
class HypothesisMessage(_WordList):
    """``hypothesis``: the ASR's interim words after the committed ones; replaces the previous one."""

    type: str = field(default="hypothesis", init=False)


@dataclass(frozen=True)
class FlushRequest:
    """``flush``: finalize every pending word now; answered by ``flushed``."""

    type: str = field(default="flush", init=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type}


@dataclass(frozen=True)
class EndRequest:
    """``end``: flush, then the server sends ``end`` and closes with 1000."""

    type: str = field(default="end", init=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type}


#: The largest ``resume`` ``start`` (2**53 - 1: exact in every JSON implementation).
MAX_START = 2**53 - 1

#: The marks a ``resume`` context word may carry (``PunctuatedWord.p``).
MARKS = ("", ",", ".", "?")


@dataclass(frozen=True)
class ResumeRequest:
    """``resume``: continue a stream at word ``start`` on a new connection.

    Attributes:
        start: the index the next word sent takes (the first word without a final).
        context: the last final words before ``start`` (``w``, ``p``), oldest first.
        config: the options of the old connection (None: the server's defaults).
        held: how many of the context's last words no final's text wrote (the last final's
            ``held``, an extension; at most the context's words, items that normalize to
            nothing not counted: :func:`check_resume`): the new connection writes them
            first. None (not sent, as
            by a client that knows only the protocol): the server infers them from the words
            that follow (:meth:`~streampunct.text.written_form.FinalTexts.seed`); this
            project's clients always send it.
    """

    start: int
    context: tuple[PunctuatedWord, ...] = ()
    config: ConfigRequest | None = None
    held: int | None = None
    type: str = field(default="resume", init=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type, "start": self.start, "context": [{"w": x.w, "p": x.p} for x in self.context],
        }
        if self.config is not None:
            out["config"] = {k: v for k, v in self.config.to_json().items() if k != "type"}
        if self.held is not None:
            out["held"] = self.held
        return out


ClientMessage = ConfigRequest | WordsMessage | HypothesisMessage | FlushRequest | EndRequest | ResumeRequest


# -- server -> client ---------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """``ready``; ``limits`` (an extension: optional on the wire) are the server's message limits."""

    session: str
    model: str
    config: SessionOptions
    protocol: int = PROTOCOL_VERSION
    limits: Limits | None = None
    # False: the server has no ITN grammars, and ``config`` on the wire names no ``itn`` (not part
    # of equality: the same options, shown by a server that cannot write them)
    itn_available: bool = field(default=True, compare=False)
    type: str = field(default="ready", init=False)

    def to_json(self) -> dict[str, Any]:
        out = {
            "type": self.type,
            "protocol": self.protocol,
            "session": self.session,
            "model": self.model,
            "config": self.config.to_json(itn_available=self.itn_available),
        }
        if self.limits is not None:
            out["limits"] = {k: v for k, v in asdict(self.limits).items() if v is not None}
        return out


@dataclass(frozen=True)
class ConfigApplied:
    config: SessionOptions
    itn_available: bool = field(default=True, compare=False)  # as Ready's
    type: str = field(default="config", init=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "config": self.config.to_json(itn_available=self.itn_available)}


@dataclass(frozen=True)
class PunctuatedWord:
    """A word as the server normalized it (``w``) and its mark (``p``: "", ",", "." or "?").

    ``start``/``end`` are the client's times for the word, echoed in finals
    when the client sent them (:data:`NULL_TIME` for one sent as ``null``).
    """

    w: str
    p: str
    start: Time = None
    end: Time = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"w": self.w, "p": self.p}
        if self.start is not None:
            out["start"] = _time_json(self.start)
        if self.end is not None:
            out["end"] = _time_json(self.end)
        return out


@dataclass(frozen=True)
class _LabeledSpan:
    """Words ``start .. start+len(words)-1`` with their marks, and ``text`` rendering them."""

    start: int
    words: tuple[PunctuatedWord, ...]
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,  # type: ignore[attr-defined]
            "start": self.start,
            "words": [x.to_json() for x in self.words],
            "text": self.text,
        }


@dataclass(frozen=True)
class Final(_LabeledSpan):
    """Words ``start .. start+len(words)-1`` are final.

    ``held`` (an extension, sent only when not 0): with written forms, how many of the
    stream's last final words no final's ``text`` has written yet (held for a phrase that may
    go on); a client that resumes the stream passes it on in ``resume`` so that the new
    connection writes them (docs/protocol.md, "Resume")."""

    held: int = 0
    type: str = field(default="final", init=False)

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.held:
            out["held"] = self.held
        return out


@dataclass(frozen=True)
class Partial(_LabeledSpan):
    """Provisional labels for the tail ``start .. N-1`` followed by the interim
    ``hypothesis`` (no indices); replaces the previous partial."""

    hypothesis: tuple[PunctuatedWord, ...] = ()
    type: str = field(default="partial", init=False)

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["hypothesis"] = [{"w": x.w, "p": x.p} for x in self.hypothesis]
        return out


@dataclass(frozen=True)
class Resumed:
    """Answer to ``resume``: the next word sent takes index ``start``; ``config``: effective options."""

    start: int
    config: SessionOptions
    itn_available: bool = field(default=True, compare=False)  # as Ready's
    type: str = field(default="resumed", init=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "start": self.start,
                "config": self.config.to_json(itn_available=self.itn_available)}


@dataclass(frozen=True)
class Flushed:
    upto: int
    type: str = field(default="flushed", init=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "upto": self.upto}


@dataclass(frozen=True)
class Ended:
    """The server's ``end``: total words of the stream."""

    words: int
    type: str = field(default="end", init=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "words": self.words}


@dataclass(frozen=True)
class Error:
    """``error``; ``code`` is an :class:`ErrorCode` (a plain string for codes newer than this client)."""

    code: ErrorCode | str
    message: str
    type: str = field(default="error", init=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "code": str(self.code), "message": self.message}


@dataclass(frozen=True)
class Extension:
    """A server message of a type this client does not know: the contract lets servers add
    message types, so clients skip it (:class:`~streampunct.client.stream_client.StreamClient`
    does). ``fields``: the message as sent."""

    type: str
    fields: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return dict(self.fields)


ServerMessage = Ready | ConfigApplied | Resumed | Final | Partial | Flushed | Ended | Error | Extension
Message = ClientMessage | ServerMessage


def encode(message: Message) -> str:
    """One message as the JSON text of a frame."""
    text = codec.dumps(message.to_json())
    return text if isinstance(text, str) else text.decode()


def encode_frame(message: Message) -> str | bytes:
    """One message as the payload of a text frame: :func:`encode`'s text, or its UTF-8 bytes
    (orjson's, not decoded again); send either with ``send(payload, text=True)``."""
    return codec.dumps(message.to_json())


# -- decoding -----------------------------------------------------------------


def _bad(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.BAD_REQUEST, message)


def _no_constant(name: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity`` are not JSON (Python's parser takes them)."""
    raise ValueError(f"{name} is not a JSON value")


def _int(digits: str) -> int:
    """A JSON integer; one past Python's digit limit (``sys.get_int_max_str_digits``) is refused
    in plain words (Python's own message is about its internals)."""
    try:
        return int(digits)
    except ValueError:
        raise _bad("invalid JSON: a number in the frame is too long") from None


def _parse_object(text: str | bytes) -> dict[str, Any]:
    if isinstance(text, bytes | bytearray | memoryview):
        raise _bad("binary frames are not accepted; send JSON in text frames")
    try:
        obj = codec.loads(text, parse_constant=_no_constant, parse_int=_int)
    except RecursionError:  # the decoder's recursion: arrays or objects nested past Python's stack
        raise _bad("invalid JSON: the frame nests too deeply") from None
    except ValueError as e:  # JSONDecodeError, and NaN or Infinity
        raise _bad(f"invalid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise _bad("a message must be a JSON object")
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise _bad("a message needs a string field 'type'")
    return obj


def finite_number(value: object) -> bool:
    """An int or float (not a bool) within a double's range, neither NaN nor infinite: what the
    wire takes as a time, and the Python API as ``now``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond a double's range
        return False


def _optional_time(item: Mapping[str, Any], name: str, index: int) -> Time:
    if name not in item:
        return None
    value = item[name]
    if value is None:
        return NULL_TIME  # carried back as null
    if not finite_number(value):
        raise _bad(f"words[{index}].{name} must be a finite number (within a double's range)")
    return value  # as sent (an int stays an int), so that finals echo it unchanged


def _decode_words(obj: Mapping[str, Any], limits: Limits) -> tuple[Word, ...]:
    raw = obj.get("words")
    if not isinstance(raw, list):
        raise _bad("'words' must be a list of strings or of {\"w\": str} objects")
    if len(raw) > limits.max_words_per_message:
        raise ProtocolError(
            ErrorCode.TOO_LARGE,
            f"{len(raw)} words in one message; the limit is {limits.max_words_per_message}",
        )
    words = []
    for i, item in enumerate(raw):
        if isinstance(item, str):
            word = Word(item)
        elif isinstance(item, dict):
            w = item.get("w")
            if not isinstance(w, str):
                raise _bad(f"words[{i}].w must be a string")
            word = Word(w, _optional_time(item, "start", i), _optional_time(item, "end", i))
        else:
            raise _bad(f"words[{i}] must be a string or an object with a string 'w'")
        if len(word.w) > limits.max_word_chars:
            raise ProtocolError(
                ErrorCode.TOO_LARGE,
                f"words[{i}] has {len(word.w)} characters; the limit is {limits.max_word_chars}",
            )
        words.append(word)
    return tuple(words)


def decode_config(obj: Mapping[str, Any], limits: Limits = DEFAULT_LIMITS) -> ConfigRequest:
    """The options of a ``config`` message, or of ``resume``'s ``config`` object, checked by
    the options' own rules (:func:`streampunct.core.options.check_options`, within ``limits``);
    raises :class:`ProtocolError` (``bad_request``, the rule's message)."""
    try:
        return ConfigRequest(**check_options(obj, limits))
    except OptionError as e:
        if obj.get(e.name, 0) is None:  # a client's serializer that writes unset fields as null
            raise _bad(f"{e.message}, not null (leave '{e.name}' out to keep its value)") from None
        raise _bad(e.message) from None


def decode(text: str | bytes, limits: Limits = DEFAULT_LIMITS) -> ClientMessage:
    """Decode one client frame; raises :class:`ProtocolError` (the whole message is rejected)."""
    obj = _parse_object(text)
    kind = obj["type"]
    if kind == "words":
        return WordsMessage(_decode_words(obj, limits))
    if kind == "hypothesis":
        return HypothesisMessage(_decode_words(obj, limits))
    if kind == "config":
        return decode_config(obj, limits)
    if kind == "resume":
        return _decode_resume(obj, limits)
    if kind == "flush":
        return FlushRequest()
    if kind == "end":
        return EndRequest()
    raise _bad(f"unknown message type {shown(kind)}; expected config, words, hypothesis, flush, end or resume")


def _decode_resume(obj: Mapping[str, Any], limits: Limits) -> ResumeRequest:
    start = obj.get("start")
    if type(start) is not int:
        raise _bad("resume: 'start' must be an integer")
    if not 0 <= start <= MAX_START:
        raise _bad(f"resume: 'start' must be between 0 and {MAX_START}, not {shown(start)}")
    raw = obj.get("context")
    if not isinstance(raw, list):
        raise _bad('resume: \'context\' must be a list of {"w": str, "p": str} objects')
    if len(raw) > limits.max_words_per_message:
        raise ProtocolError(
            ErrorCode.TOO_LARGE,
            f"resume: {len(raw)} context words; the limit is {limits.max_words_per_message}",
        )
    context = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("w"), str) or not isinstance(item.get("p"), str):
            raise _bad(f'resume: context[{i}] must be an object {{"w": str, "p": str}}')
        if item["p"] not in MARKS:
            raise _bad(f"resume: context[{i}].p must be one of \"\", \",\", \".\", \"?\", not {shown(item['p'])}")
        if len(item["w"]) > limits.max_word_chars:
            raise ProtocolError(
                ErrorCode.TOO_LARGE,
                f"resume: context[{i}] has {len(item['w'])} characters; the limit is {limits.max_word_chars}",
            )
        context.append(PunctuatedWord(item["w"], item["p"]))
    config = None
    if "config" in obj:
        if not isinstance(obj["config"], dict):
            raise _bad("resume: 'config' must be an object with the fields of a config message")
        try:
            config = decode_config(obj["config"], limits)
        except ProtocolError as e:
            raise ProtocolError(e.code, f"resume: config: {e.message}") from None
    held = obj.get("held")
    if held is not None and (type(held) is not int or held < 0):
        n = context_word_count(context)
        raise _bad(
            f"resume: 'held' must be an integer from 0 to the {n} context words, not {shown(held)}"
        )
    request = ResumeRequest(start, tuple(context), config, held)
    check_resume(request)
    return request


def context_word_count(context: Sequence[PunctuatedWord]) -> int:
    """How many words a ``resume`` context holds: its items that normalize to a word (one
    that normalizes to nothing, ``"$$$"``, is no word, as in ``words``: it takes no index)."""
    return sum(1 for x in context if normalize_word(x.w))


def check_resume(request: ResumeRequest) -> None:
    """The rules of ``resume`` that count its context's words (:func:`context_word_count`), not
    its items: they come before ``start`` (so no more of them than ``start``), and ``held``
    counts the last of them (so at most as many). Raises :class:`ProtocolError`
    (``bad_request``); the decoder and the session (for a request made in Python) both ask."""
    n = context_word_count(request.context)
    dropped = len(request.context) - n
    note = f"; {dropped} of the context's items normalize to no word and are not counted"
    note = note if dropped else ""
    if n > request.start:
        raise _bad(
            f"resume: {n} context words, but only {request.start} words come before 'start'{note}"
        )
    if request.held is not None and not 0 <= request.held <= n:
        raise _bad(
            f"resume: 'held' must be an integer from 0 to the {n} context words, "
            f"not {shown(request.held)}{note}"
        )


# -- decoding server messages (client side) -------------------------------------


def _field(obj: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = obj.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _bad(f"server message {obj.get('type')!r}: field {name!r} is missing or mistyped")
    return value


def _names_itn(obj: Mapping[str, Any]) -> bool:
    return "itn" in _field(obj, "config", dict)


def _options(obj: Mapping[str, Any]) -> SessionOptions:
    cfg = _field(obj, "config", dict)
    return SessionOptions(
        right_context=int(cfg["right_context"]),
        max_delay_ms=int(cfg["max_delay_ms"]),
        partials=bool(cfg["partials"]),
        capitalize=bool(cfg["capitalize"]),
        # (a server of plain version 1 sends neither)
        itn=bool(cfg.get("itn", False)),
        lexicon=tuple((str(s), str(w)) for s, w in cfg.get("lexicon") or ()),
    )


def _time(item: Mapping[str, Any], name: str) -> float | None:
    value = item.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise TypeError(f"{name} must be a number")
    return value


def _limits(obj: Mapping[str, Any]) -> Limits | None:
    """``ready``'s optional ``limits`` (None when the server does not send them)."""
    raw = obj.get("limits")
    if raw is None:
        return None
    names = [f.name for f in fields(Limits)]
    if not isinstance(raw, dict) or not all(type(raw.get(n)) is int and raw[n] > 0 for n in names[:2]):
        raise TypeError("limits must hold positive integers")
    return Limits(**{n: raw[n] for n in names if type(raw.get(n)) is int})


def _punctuated(items: Sequence[Any]) -> tuple[PunctuatedWord, ...]:
    return tuple(PunctuatedWord(str(x["w"]), str(x["p"]), _time(x, "start"), _time(x, "end")) for x in items)


def decode_server(text: str | bytes) -> ServerMessage:
    """Decode one server frame (used by :mod:`streampunct.client.stream_client`)."""
    obj = _parse_object(text)
    kind = obj["type"]
    try:
        if kind == "final":
            held = obj.get("held", 0)
            return Final(_field(obj, "start", int), _punctuated(_field(obj, "words", list)), _field(obj, "text", str),
                         held if type(held) is int and held > 0 else 0)
        if kind == "partial":
            return Partial(
                _field(obj, "start", int), _punctuated(_field(obj, "words", list)), _field(obj, "text", str),
                _punctuated(obj.get("hypothesis") or ()),
            )
        if kind == "flushed":
            return Flushed(_field(obj, "upto", int))
        if kind == "end":
            return Ended(_field(obj, "words", int))
        if kind == "error":
            code = _field(obj, "code", str)
            known = code in ErrorCode.__members__.values()
            return Error(ErrorCode(code) if known else code, _field(obj, "message", str))
        if kind == "config":
            return ConfigApplied(_options(obj), _names_itn(obj))
        if kind == "resumed":
            return Resumed(_field(obj, "start", int), _options(obj), _names_itn(obj))
        if kind == "ready":
            return Ready(
                _field(obj, "session", str), _field(obj, "model", str), _options(obj), _field(obj, "protocol", int),
                _limits(obj), _names_itn(obj),
            )
    except (KeyError, TypeError, ValueError) as e:
        raise _bad(f"malformed server message {kind!r}: {e}") from None
    return Extension(kind, dict(obj))  # a newer server's message: the contract allows new types
