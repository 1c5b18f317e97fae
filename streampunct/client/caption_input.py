"""What ``streampunct caption`` streams: ASR events read from text, JSON lines, Vosk or Whisper output.

Every input becomes a sequence of :class:`AsrEvent`: committed words (sent
as ``words``) or an interim hypothesis (sent as ``hypothesis``), each with
the time it is due, in seconds from the start of the stream.

Formats (``--input-format``; ``auto`` looks at the start: input whose first
non-blank character is ``{`` or ``[`` is read as JSON (or printed Whisper
segments) and its first value names the format, anything else is text; so is
a first JSON value that is a list of neither objects nor strings: "[1] so today"):

* ``text``: plain text, or ``word<TAB>LABEL`` lines (labels ignored); paced
  at ``wps`` words per second in ASR-like chunks. A file is read as
  ``word<TAB>LABEL`` when every non-blank line is one; stdin, which is sent as
  it comes, line by line (:func:`labeled_word`).
* ``words``: JSON lines of word objects ``{"w" or "word": str, "start", "end"}``
  (or lists of them, or of strings). An item holding spaces ("new york") is
  its words, sharing its time, not one word with the spaces removed.
* ``vosk``: Vosk/Kaldi recognizer output (``Result()``, ``PartialResult()``,
  ``FinalResult()`` as they print it):
  ``{"result": [{"word", "start", "end", ...}], "text": ...}`` commits words
  (``{"text": ...}`` alone: words without times),
  ``{"partial": "..."}`` is an interim hypothesis, and
  ``{"alternatives": [{"result" or "text", ...}, ...]}`` (``SetMaxAlternatives``)
  commits its first (best) alternative. An object with none of these is a bad line.
* ``whisper``: Whisper segments, as JSON lines of segments, a JSON list of
  segments, or ``{"segments": [...]}`` (openai-whisper's ``--output_format json``,
  WhisperX's); each segment
  ``{"start", "end", "text", "words": [{"word", "start", "end"}]}``. A segment
  without word timestamps (no ``words``, ``null`` or empty: openai-whisper's
  default, faster-whisper's ``word_timestamps=False``) has its ``text``'s words
  share its time in proportion to their characters. Detected by ``segments``,
  ``words``, or ``text`` with ``start`` or ``end``. Also whisper.cpp's document
  (``-oj``, ``-ojf``: ``{"transcription": [{"offsets": {"from", "to"}, "text"}]}``,
  milliseconds; its ``tokens`` are not read), detected by ``transcription``; and
  segments as the tools print them, one a line (:func:`segment_lines`:
  ``[00:01.000 --> 00:04.000]  text`` of openai-whisper and whisper.cpp, with
  hours when there are any, ``[1.00s -> 4.00s]  text`` of faster-whisper's
  example), detected by the first such line; other lines among them are bad lines
  (openai-whisper's "Detected language" lines: pass it ``--language``, or skip
  them). A segment whose text is a marker alone (whisper.cpp's
  ``[BLANK_AUDIO]``) has no words.

The JSON formats read a stream of JSON values (:class:`JsonStream`), each on
one line or pretty-printed over several; a value is taken as soon as its text
is complete, so a live pipe is not read to its end first.

Files with timestamps are replayed on their own clock (``speed`` times real
time; 0: as fast as possible). From stdin (``-``) events are sent as they
are read, so an ASR process can pipe into the client; stdin is decoded and
checked as a file is (:mod:`streampunct.text.textfile`), and binary data is
refused with the same message.

A JSON value that cannot be read (not JSON, or not the format's shape) is a
:class:`BadLine`, named by file (or ``stdin``), the line it starts on and the
reason; so is a word time that is not a finite number within :data:`MAX_TIME_S`
(``NaN``, ``Infinity``, ``1e308``: Python's json reads them, the server
refuses them). ``on_bad_line`` says what happens then: ``stop`` raises it (the
caller has streamed the values before it, and finalizes them), ``skip``
reports it and goes on with the next value.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import math
import os
import random
import re
import signal
import stat
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from streampunct.core.wire import Word
from streampunct.errors import InputError
from streampunct.text.normalize import normalize_word
from streampunct.text.textfile import read_text, text_lines
from streampunct.text.word_labels import is_word_label_text, parse_word_labels, split_labeled_line

INPUT_FORMATS = ("auto", "text", "words", "vosk", "whisper")
#: Signals that stop a run: taken by the main thread (the caption command's loop), blocked in the
#: input's reader thread.
STOP_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)
#: What to do with a JSON line that cannot be read (``--on-bad-line``).
BAD_LINE_ACTIONS = ("stop", "skip")
#: The largest word time (seconds, either sign) read from JSON input: 2**53 ms (about 285,000
#: years), the largest count of milliseconds a double holds exactly, so that every time read has a
#: subtitle timestamp (:func:`streampunct.client.subtitles._timestamp` counts milliseconds).
MAX_TIME_S = 2**53 / 1000


class BadLine(InputError):
    """A value of JSON input that cannot be read; the message starts with ``FILE:LINE:`` (where it starts)."""


def _check_action(on_bad_line: str) -> None:
    if on_bad_line not in BAD_LINE_ACTIONS:
        raise InputError(f"unknown --on-bad-line action {on_bad_line!r}; one of {', '.join(BAD_LINE_ACTIONS)}")


def labeled_word(line: str) -> str | None:
    """The word of a ``word<TAB>LABEL`` line as :func:`read_transcript` reads it from a file
    (normalized; ``""`` for a word of punctuation only, whose label a file folds into the word
    before), or None when the line is not one."""
    pair = split_labeled_line(line)
    return None if pair is None else normalize_word(pair[0])


def read_transcript(path: str | Path, text: str | None = None) -> list[str]:
    """Words of a transcript: plain text, or ``word<TAB>LABEL`` lines (labels dropped); ``text``:
    the file's text when it was read already (read once: its warnings are said once)."""
    path = Path(path)
    if text is None and not path.exists():
        raise InputError(f"no such transcript file: {path}")
    lines = (read_text(path) if text is None else text).splitlines()  # refuses a directory
    if is_word_label_text(lines, str(path)):
        return parse_word_labels(lines, str(path)).words
    return " ".join(lines).split()


def asr_chunks(
    words: Sequence[str], *, wps: float, max_chunk: int = 4, seed: int = 0
) -> list[tuple[float, list[str]]]:
    """Split words into chunks of 1..max_chunk with the time (s) each is committed.

    Word ``i`` is spoken at ``i / wps``; a chunk is sent when its last word
    has been spoken, as a recognizer commits words in small groups.
    """
    if wps <= 0:
        raise InputError("--wps must be positive")
    if max_chunk < 1:
        raise InputError("--max-chunk must be at least 1")
    rng = random.Random(seed)
    chunks = []
    i = 0
    while i < len(words):
        n = rng.randint(1, max_chunk)
        chunk = list(words[i : i + n])
        i += len(chunk)
        chunks.append((i / wps, chunk))
    return chunks


@dataclasses.dataclass(frozen=True)
class AsrEvent:
    """One thing the recognizer said.

    Attributes:
        at: when to send it, seconds from the start (None: as soon as read).
        words: the words (with times when the recognizer gave them).
        interim: True for an interim hypothesis, False for committed words.
    """

    at: float | None
    words: tuple[Word, ...]
    interim: bool = False


def _time(item: dict[str, Any], name: str, where: str) -> float | None:
    value = item.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where}: '{name}' must be a number")
    try:
        seconds = float(value)
    except OverflowError:  # an integer beyond a double's range
        seconds = math.inf
    if not math.isfinite(seconds) or abs(seconds) > MAX_TIME_S:
        shown = json.dumps(value)  # as JSON writes it: NaN, Infinity
        shown = shown if len(shown) <= 24 else f"{shown[:20]}... ({len(shown)} characters)"
        raise InputError(f"{where}: '{name}' must be a finite number of seconds, |{name}| <= "
                         f"{MAX_TIME_S:.5g}; got {shown}")
    return seconds


def _word(item: Any, where: str) -> tuple[Word, ...]:
    """The words of one word item: one, or for an item holding spaces ("new york"), which the
    server would read as one word with the spaces removed, each of its words, sharing its
    time (:func:`_spread`)."""
    if isinstance(item, str):
        words = item.split()
        return tuple(map(Word, words)) if len(words) > 1 else (Word(item),)
    if not isinstance(item, dict):
        raise InputError(f"{where}: a word must be an object with 'w' or 'word'")
    text = item.get("w", item.get("word"))
    if not isinstance(text, str):
        raise InputError(f"{where}: a word needs a string 'w' or 'word'")
    start, end = _time(item, "start", where), _time(item, "end", where)
    words = text.split()
    return _spread(words, start, end) if len(words) > 1 else (Word(text.strip(), start, end),)


def _words(items: Iterable[Any], where: str) -> tuple[Word, ...]:
    return tuple(w for item in items for w in _word(item, where))



def _due(words: Sequence[Word], previous: float | None) -> float | None:
    """A committed chunk is due when its last word has ended."""
    ends = [w.end if w.end is not None else w.start for w in words]
    known = [t for t in ends if t is not None]
    return max(known) if known else previous


@dataclasses.dataclass(frozen=True)
class JsonValue:
    """One value of a JSON stream.

    Attributes:
        line: the line its text starts on (1-based).
        obj: the value (None when ``error`` is set).
        error: why its text is not JSON, or None.
        first: the first character of its text.
        last: its last line (a bad value: the last line before reading goes on).
    """

    line: int
    obj: Any = None
    error: str | None = None
    first: str = ""
    last: int = 0

    def skipped(self) -> str:
        """What ``--on-bad-line skip`` passes over when this value is bad."""
        return "line skipped" if self.last <= self.line else f"lines {self.line}-{self.last} skipped"


_DECODER = json.JSONDecoder()
_BLANK = re.compile(r"[ \t\n\r]*")


class JsonStream:
    """Concatenated JSON values, each on one line or pretty-printed over several, split as text arrives.

    :meth:`feed` returns every value whose text is complete, as soon as it is
    (a live pipe is not read to its end first); :meth:`close` the rest at the
    end of the input. A value that is not JSON comes back with its ``error``
    once it is known where reading goes on: at the first line after it (or the
    line where a new value cut it off) that is indented no deeper than the bad
    value started and does not start with a closing ``}``, ``]`` or ``,``.
    """

    #: Below this many characters a value is decoded again at every line fed;
    #: above, when its text has doubled (a big document costs linear time).
    SMALL = 1 << 16

    def __init__(self) -> None:
        self._buffer = ""
        self._pending: list[str] = []  # fed text not yet joined to the buffer
        self._pending_size = 0
        self._pos = 0  # where undecoded text starts in the buffer
        self._line = 1  # the line number at _pos
        self._line_start = 0  # where that line starts in the buffer (negative: before it)
        self._tried = 0  # text size at the last decode that found the value incomplete
        self._skip_indent: int | None = None  # after a bad value: skip lines indented deeper
        self._bad_value: JsonValue | None = None  # the bad value being skipped

    def feed(self, text: str) -> list[JsonValue]:
        """The values that ``text`` completes."""
        self._pending.append(text)
        self._pending_size += len(text)
        size = len(self._buffer) - self._pos + self._pending_size
        if self._skip_indent is None and self.SMALL <= size < 2 * self._tried:
            return []
        return self._values(eof=False)

    def close(self) -> list[JsonValue]:
        """The values left at the end of the input (an unfinished one is bad)."""
        return self._values(eof=True)

    def _where(self, pos: int) -> tuple[int, int]:
        """The line number and 0-based column of buffer position ``pos`` (at or after ``_pos``)."""
        newlines = self._buffer.count("\n", self._pos, pos)
        if not newlines:
            return self._line, pos - self._line_start
        return self._line + newlines, pos - self._buffer.rfind("\n", self._pos, pos) - 1

    def _advance(self, pos: int) -> None:
        newlines = self._buffer.count("\n", self._pos, pos)
        if newlines:
            self._line += newlines
            self._line_start = self._buffer.rfind("\n", self._pos, pos) + 1
        self._pos = pos

    def _values(self, *, eof: bool) -> list[JsonValue]:
        if self._pending:
            self._buffer = self._buffer[self._pos:] + "".join(self._pending)
            self._line_start -= self._pos
            self._pos = 0
            self._pending, self._pending_size = [], 0
        buffer, out = self._buffer, []
        while True:
            if self._skip_indent is not None:
                if not self._resync(eof):
                    return out
            if self._bad_value is not None:  # reading goes on after it
                out.append(self._bad_value)
                self._bad_value = None
            start = _BLANK.match(buffer, self._pos).end()
            if start == len(buffer):
                self._advance(start)
                return out
            try:
                obj, end = _DECODER.raw_decode(buffer, start)
            except json.JSONDecodeError as e:
                if not eof and buffer.find("\n", e.pos) < 0:  # cut off by the end of what has come
                    self._advance(start)
                    self._tried = len(buffer) - start
                    return out
                self._bad(start, e.pos, e.msg)
                continue
            except RecursionError:
                self._bad(start, start, "nested too deeply")
                continue
            if not eof and end == len(buffer) and not isinstance(obj, dict | list):
                self._advance(start)  # a number may go on in the next text
                return out
            line, _ = self._where(start)
            last, _ = self._where(end - 1)
            out.append(JsonValue(line, obj, first=buffer[start], last=last))
            self._advance(end)
            self._tried = 0

    def _bad(self, start: int, pos: int, msg: str) -> None:
        """Hold the bad value at ``start`` (its error at ``pos``) and skip past it."""
        buffer, msg = self._buffer, msg.removesuffix(" at")  # "Invalid control character at"
        line, indent = self._where(start)
        line_start = buffer.rfind("\n", 0, pos) + 1
        newline = buffer.find("\n", pos)
        resume = len(buffer) if newline < 0 else newline + 1
        if pos == len(buffer):  # at the end of the input
            error = f"{msg}: the input ends before the value does"
        else:
            if line_start > start and not buffer[line_start:pos].strip():  # the value is cut off by a new line
                resume = line_start  # (which may start the next value)
                while buffer[pos - 1] in " \t\r\n":
                    pos -= 1  # the error is where the value's text ends
            at, column = self._where(pos)
            error = f"{msg} at column {column + 1}" if at == line else f"{msg} at line {at} column {column + 1}"
        self._bad_value = JsonValue(line, error=error, first=buffer[start], last=line)
        self._advance(resume)
        self._skip_indent = indent
        self._tried = 0

    def _resync(self, eof: bool) -> bool:
        """Skip to a line that can start a value (True), or to the end of what has come (False)."""
        buffer, pos = self._buffer, self._pos
        assert self._skip_indent is not None
        while pos < len(buffer):
            newline = buffer.find("\n", pos)
            text = buffer[pos:] if newline < 0 else buffer[pos:newline]
            body = text.lstrip(" \t\r")
            if body and len(text) - len(body) <= self._skip_indent and body[0] not in "}],":
                self._advance(pos)
                self._end_skip(self._line - 1)
                return True
            if newline < 0:
                if eof:
                    pos = len(buffer)
                break  # an unfinished line: its start is seen again with the next text
            pos = newline + 1
        self._advance(pos)
        if eof:
            self._end_skip(self._line - 1 if buffer.endswith("\n") else self._line)
            return True
        return False

    def _end_skip(self, last: int) -> None:
        self._skip_indent = None
        if self._bad_value is not None:
            self._bad_value = dataclasses.replace(self._bad_value, last=max(last, self._bad_value.line))


def json_values(chunks: Iterable[str]) -> Iterator[JsonValue]:
    """The values of JSON text given in chunks (lines, or all of it), each as soon as it is complete."""
    stream = JsonStream()
    for chunk in chunks:
        yield from stream.feed(chunk)
    yield from stream.close()


def detect_format(first: str) -> str:
    """The input format of a transcript from its start (its first JSON value, on one line or several)."""
    if first.lstrip()[:1] not in ("{", "["):
        return "text"
    return _format_of(next(json_values([first])), "input")


def _format_of(value: JsonValue, name: str) -> str:
    """The input format named by the first value of JSON-looking input (``[...`` that is not JSON: text)."""
    if value.error is not None:
        if value.first == "[":  # "[Music] so how are you"
            return "text"
        raise InputError(f"{name}:{value.line}: starts with '{{' but is not JSON ({value.error}); "
                         "for plain text pass --input-format text")
    obj = value.obj
    if isinstance(obj, list):
        if obj and not isinstance(obj[0], dict | str):  # "[1] so today": a text that starts with JSON
            return "text"
        return "whisper" if obj and _is_segment(obj[0]) else "words"
    if not isinstance(obj, dict):
        return "text"
    if "transcription" in obj:  # whisper.cpp's document (-oj), whose "result" is not Vosk's
        return "whisper"
    if "result" in obj or "partial" in obj or "alternatives" in obj or set(obj) == {"text"}:
        return "vosk"
    if "segments" in obj or _is_segment(obj):
        return "whisper"
    if "w" in obj or "word" in obj:
        return "words"
    raise InputError(f"{name}:{value.line}: cannot tell the input format from its first JSON value; "
                     "pass --input-format")


def _is_segment(obj: dict[str, Any]) -> bool:
    """A Whisper segment: with ``words``, or a ``text`` with ``start`` or ``end`` (no word timestamps)."""
    if "w" in obj or "word" in obj:
        return False
    return "words" in obj or ("text" in obj and ("start" in obj or "end" in obj))


#: A segment's text that is a whisper.cpp marker alone (``[BLANK_AUDIO]``, ``[MUSIC]``): no words.
_MARKER = re.compile(r"\s*\[[^\[\]]*\]\s*")


def _segment_times(segment: dict[str, Any], where: str) -> tuple[float | None, float | None]:
    """A segment's ``start`` and ``end`` (seconds); whisper.cpp's (``-oj``) are ``offsets``
    ``{"from", "to"}`` in milliseconds."""
    offsets = segment.get("offsets")
    if "start" in segment or "end" in segment or not isinstance(offsets, dict):
        return _time(segment, "start", where), _time(segment, "end", where)
    start, end = _time(offsets, "from", f"{where}: offsets"), _time(offsets, "to", f"{where}: offsets")
    return (None if start is None else start / 1000), (None if end is None else end / 1000)


def _vosk_events(obj: Any, where: str, previous: float | None) -> list[AsrEvent]:
    if not isinstance(obj, dict):
        raise InputError(f"{where}: a Vosk result must be a JSON object")
    if "partial" in obj:
        text = obj["partial"]
        if not isinstance(text, str):
            raise InputError(f"{where}: 'partial' must be a string")
        return [AsrEvent(previous, tuple(Word(w) for w in text.split()), interim=True)]
    if "alternatives" in obj:  # SetMaxAlternatives: the first is the best
        alternatives = obj["alternatives"]
        if not isinstance(alternatives, list) or not all(isinstance(a, dict) for a in alternatives):
            raise InputError(f"{where}: 'alternatives' must be a list of objects")
        if not alternatives:
            return []
        obj = alternatives[0]
    result = obj.get("result")
    if result is None:
        if "text" not in obj:
            raise InputError(f"{where}: a Vosk result needs 'result', 'text', 'partial' or 'alternatives'")
        text = obj["text"]
        if not isinstance(text, str):
            raise InputError(f"{where}: 'text' must be a string")
        words = tuple(Word(w) for w in text.split())
        return [AsrEvent(previous, words)] if words else []  # {"text": ""}: silence, nothing committed
    if not isinstance(result, list):
        raise InputError(f"{where}: 'result' must be a list of words")
    words = _words(result, where)
    return [AsrEvent(_due(words, previous), words)]


def _spread(tokens: Sequence[str], start: float | None, end: float | None) -> tuple[Word, ...]:
    """The words of a segment without word timestamps: its time shared in proportion to their
    characters, in order (each word within the segment, none before the one before it); a segment
    missing a time, or ending before it starts, gives its words the times it has (so that
    ``caption`` warns of times that go back, as for such a word)."""
    if start is None or end is None or not tokens or end < start:
        return tuple(Word(w, start, end) for w in tokens)
    span, total = max(0.0, end - start), sum(len(w) for w in tokens)
    words, done = [], 0
    for w in tokens:
        begin = start + span * done / total
        done += len(w)
        words.append(Word(w, begin, start + span * done / total))
    return tuple(words)


def _segment_words(segment: Any, where: str) -> tuple[Word, ...]:
    if not isinstance(segment, dict):
        raise InputError(f"{where}: a segment must be a JSON object")
    items = segment.get("words")
    if items is not None and not isinstance(items, list):
        raise InputError(f"{where}: a segment's 'words' must be a list")
    text = segment.get("text", "")
    if not isinstance(text, str):
        raise InputError(f"{where}: a segment's 'text' must be a string")
    if _MARKER.fullmatch(text):  # no speech
        return ()
    if items:
        return _words(items, where)
    return _spread(text.split(), *_segment_times(segment, where))  # its words share its time


_CLOCK = r"(?:\d+:){0,2}\d+(?:[.,]\d+)?"
#: A segment as Whisper tools print it, a line each: openai-whisper's and whisper.cpp's console
#: (``[00:02.000 --> 00:04.500]  text``; whisper.cpp always with hours, ``00:00:02.000``) and
#: faster-whisper's README example (``[2.00s -> 4.50s]  text``).
_SEGMENT_LINE = re.compile(rf"^[ \t]*\[[ \t]*({_CLOCK})s?[ \t]+-{{1,2}}>[ \t]+({_CLOCK})s?[ \t]*\](.*?)\r?$",
                           re.MULTILINE)


def _seconds(clock: str) -> float:
    """Seconds of ``[[HH:]MM:]SS[.mmm]`` (or ``,mmm``)."""
    *whole, seconds = clock.split(":")
    try:
        return sum(int(part) * 60 ** (len(whole) - i) for i, part in enumerate(whole)) + float(
            seconds.replace(",", "."))
    except OverflowError:  # past a float: a time the reader refuses as it refuses Infinity (a bad line)
        return math.inf


def _segment_json(match: re.Match[str]) -> str:
    return json.dumps({"start": _seconds(match[1]), "end": _seconds(match[2]), "text": match[3]})


def segment_lines(text: str) -> str:
    """``text`` with each printed Whisper segment line (:data:`_SEGMENT_LINE`) written as the
    segment it is, a JSON object on the same line, for the Whisper reader."""
    return _SEGMENT_LINE.sub(_segment_json, text) if "[" in text else text


def _parse_object(fmt: str, obj: Any, where: str, previous: float | None,
                  skip_segment: Callable[[str], None] | None = None) -> list[AsrEvent]:
    """The events of one JSON value of ``fmt``. A Whisper value's bad segment raises, or with
    ``skip_segment`` is reported to it and skipped (the value's other segments are kept)."""
    if fmt == "words":
        items = obj if isinstance(obj, list) else [obj]
        words = _words(items, where)
        return [AsrEvent(_due(words, previous), words)]
    if fmt == "vosk":
        return _vosk_events(obj, where, previous)
    if fmt == "whisper":
        segments = obj
        if isinstance(obj, dict) and ("segments" in obj or "transcription" in obj):  # whisper.cpp: transcription
            segments = obj.get("segments", obj.get("transcription"))
        if isinstance(segments, dict):
            segments = [segments]
        if not isinstance(segments, list):
            raise InputError(f"{where}: expected a segment object or a list of segments")
        events = []
        for i, segment in enumerate(segments):
            try:
                words = _segment_words(segment, where if len(segments) == 1 else f"{where}: segment {i + 1}")
            except InputError as e:
                if skip_segment is None:
                    raise
                skip_segment(f"{e}; segment skipped")
                continue
            if words:
                previous = _due(words, previous)
                events.append(AsrEvent(previous, words))
        return events
    raise InputError(f"unknown input format {fmt!r}")


def _value_events(fmt: str, value: JsonValue, name: str, previous: float | None, on_bad_line: str,
                  report: Callable[[str], None] | None) -> list[AsrEvent]:
    """The events of one value of JSON input; a bad value is raised (``stop``) or reported and skipped (``skip``)."""
    where = f"{name}:{value.line}"
    try:
        if value.error is not None:
            raise BadLine(f"{where}: not JSON ({value.error})")
        try:
            return _parse_object(fmt, value.obj, where, previous,
                                 skip_segment=(report or (lambda _: None)) if on_bad_line == "skip" else None)
        except InputError as e:  # JSON of the wrong shape
            raise BadLine(str(e)) from None
    except BadLine as e:
        if on_bad_line == "stop":
            raise
        if report is not None:
            report(f"{e}; {value.skipped()}")
        return []


def _events(values: Iterable[JsonValue], fmt: str, name: str, on_bad_line: str,
            report: Callable[[str], None] | None) -> Iterator[AsrEvent]:
    previous: float | None = None
    for value in values:
        for event in _value_events(fmt, value, name, previous, on_bad_line, report):
            previous = event.at if event.at is not None else previous
            yield event


def text_events(words: Sequence[str], *, wps: float, max_chunk: int, seed: int) -> list[AsrEvent]:
    """Plain words paced at ``wps`` in ASR-like chunks (see :func:`asr_chunks`)."""
    return [AsrEvent(at, tuple(Word(w) for w in chunk)) for at, chunk in asr_chunks(
        words, wps=wps, max_chunk=max_chunk, seed=seed)]


#: A line that opens a JSON object (``{`` alone, as pretty-printed Vosk results start, or ``{"``).
_JSON_OPENING = re.compile(r'[ \t]*\{[ \t]*(?:"|\r?$)')


def _check_no_json_in_text(line: str, where: str) -> None:
    """Under ``auto``, input read as text from its first line (a banner an ASR example prints
    first, say, or Whisper's "Detected language" line) must not go on with JSON results or
    printed Whisper segments: they would be sent as words, timestamps included. InputError."""
    if _JSON_OPENING.match(line):
        raise InputError(f"{where}: opens a JSON value, but the input was taken for plain text from its first "
                         "line; for an ASR's JSON output pass --input-format vosk or whisper (with "
                         "--on-bad-line skip for the lines that are not JSON), or --input-format text to send it "
                         "as text")
    if _SEGMENT_LINE.match(line):
        raise InputError(f"{where}: is a Whisper segment as the tools print it, but the input was taken for plain "
                         "text from its first line; pass --input-format whisper (with --on-bad-line skip for "
                         "lines such as \"Detected language\"), or --input-format text to send it as text")


def read_events(
    source: str, *, input_format: str = "auto", wps: float = 2.5, max_chunk: int = 4, seed: int = 0,
    speed: float = 1.0, on_bad_line: str = "stop", report: Callable[[str], None] | None = None,
) -> list[AsrEvent]:
    """Every event of a file (not stdin), timed for replay; a bad JSON value (:class:`BadLine`) is
    raised before anything is streamed (``stop``), or reported and skipped (``skip``)."""
    _check_action(on_bad_line)
    if input_format not in INPUT_FORMATS:
        raise InputError(f"unknown input format {input_format!r}; one of {', '.join(INPUT_FORMATS)}")
    path = Path(source)
    text = read_text(path)
    fmt = input_format
    values: Iterator[JsonValue] = iter(())
    if fmt == "auto" and text.lstrip()[:1] not in ("{", "["):
        fmt = "text"
    elif fmt != "text":
        values = json_values([segment_lines(text) if fmt in ("auto", "whisper") else text])
        if fmt == "auto":
            first = next(values)
            fmt = _format_of(first, str(path))
            values = itertools.chain([first], values)
    if fmt == "text":
        if input_format == "auto":
            for number, line in enumerate(text.split("\n"), 1):  # numbered as stdin's lines are
                _check_no_json_in_text(line, f"{path}:{number}")
        words = read_transcript(path, text)
        if not words:
            raise InputError(f"{source}: no words")
        return text_events(words, wps=wps, max_chunk=max_chunk, seed=seed)
    events = list(_events(values, fmt, str(path), on_bad_line, report))
    if not any(e.words and not e.interim for e in events):
        raise InputError(f"{source}: no committed words")
    return _scaled(events, speed)


def _scaled(events: list[AsrEvent], speed: float) -> list[AsrEvent]:
    if speed < 0:
        raise InputError("--speed must be >= 0")
    t0 = next((e.at for e in events if e.at is not None), 0.0)
    out = []
    for e in events:
        at = None if e.at is None or speed == 0 else (e.at - t0) / speed
        out.append(AsrEvent(0.0 if at is None else max(0.0, at), e.words, e.interim))
    return out


def is_live_input(path: str) -> bool:
    """Whether ``path`` is read as it is written, as stdin is: ``-``, or a pipe or character device
    given by name (``<(asr ...)``, a named pipe, ``/dev/stdin`` on a pipe or terminal), which has
    no end to read to before the stream starts. (A Unix socket cannot be opened by name.)"""
    if path == "-":
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def _stdin_lines(path: str = "-") -> asyncio.Queue[str | Exception | None]:
    """Lines of stdin (or of the live input ``path``, opened in the reader), read by a daemon
    thread (a blocked read must not keep the process alive), decoded and checked as text files
    are (:func:`streampunct.text.textfile.text_lines`: binary input is refused with the message
    ``punctuate`` gives); None at the end, or the error (:class:`InputError`, the ``OSError`` of
    a failed open or read, or whatever else stopped the reader)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | Exception | None] = asyncio.Queue()

    def put(item: str | Exception | None) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: the stream is over (an interrupted caption)
            raise SystemExit from None  # ends this thread quietly

    def lines() -> Iterator[str]:
        if path == "-":
            yield from text_lines(sys.stdin, "stdin")
            return
        with open(path, "rb") as f:  # a pipe's open waits for its writer: here, not on the loop
            yield from text_lines(f, path)

    def pump() -> None:
        if hasattr(signal, "pthread_sigmask"):  # Ctrl-C and the like are the main thread's (its loop's) to take
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            for line in lines():
                put(line)
        except (InputError, OSError, ValueError) as e:  # ValueError: stdin closed
            put(e if not isinstance(e, ValueError) else OSError(str(e)))
            return
        except Exception as e:  # noqa: BLE001 - whatever it is, the reader waiting on the queue hears of it
            put(e)
            return
        put(None)

    threading.Thread(target=pump, name="caption-stdin", daemon=True).start()
    return queue


async def stdin_events(input_format: str = "auto", max_chunk: int | None = None, *, on_bad_line: str = "stop",
                       report: Callable[[str], None] | None = None, path: str = "-") -> AsyncIterator[AsrEvent]:
    """Events read from stdin as they come (an ASR process piping JSON or text); or from the live
    input ``path`` (:func:`is_live_input`: a pipe or device given by name), read the same way.

    A line of plain text is committed as it is read, in chunks of at most
    ``max_chunk`` words (None: the whole line in one); a ``word<TAB>LABEL`` line
    commits its word alone (:func:`labeled_word`: the label is not sent); a JSON value as soon as
    its text is complete (one line, or pretty-printed over several). A JSON
    value that cannot be read raises :class:`BadLine` (``stop``: the events
    before it have been yielded), or is reported and skipped (``skip``).
    Binary input raises :class:`InputError` (the check of
    :mod:`streampunct.text.textfile`, as for a file) where it is seen.
    """
    if max_chunk is not None and max_chunk < 1:
        raise InputError("--max-chunk must be at least 1")
    _check_action(on_bad_line)

    def text_events(lines: list[str]) -> Iterator[AsrEvent]:
        for line in lines:
            word = labeled_word(line)
            words = tuple(Word(w) for w in line.split()) if word is None else (Word(word),) if word else ()
            step = max_chunk or len(words) or 1
            for i in range(0, len(words), step):
                yield AsrEvent(None, words[i : i + step])

    fmt = None if input_format == "auto" else input_format
    stream = JsonStream()
    held: list[str] = []  # lines read while the format is not known
    start = ""  # the first non-blank character
    previous: float | None = None
    name = "stdin" if path == "-" else path
    lines = _stdin_lines(path)
    number = 0  # of the last line read
    while True:
        line = await lines.get()
        if isinstance(line, Exception):  # binary input, a failed read
            raise line
        if line is not None:
            number += 1
        if fmt == "text":
            if line is None:
                break
            if input_format == "auto":
                _check_no_json_in_text(line, f"{name}:{number}")
            for event in text_events([line]):
                yield event
            continue
        if line is None:
            values = stream.close()
        else:
            values = stream.feed(segment_lines(line) if fmt in (None, "whisper") else line)
        if fmt is None:
            if line is not None:
                held.append(line)
                start = start or line.lstrip()[:1]
            if start and start not in ("{", "["):
                fmt, values = "text", []
            elif values:
                fmt = _format_of(values[0], name)
            if fmt == "text":
                for k, held_line in enumerate(held):
                    _check_no_json_in_text(held_line, f"{name}:{number - len(held) + 1 + k}")
                for event in text_events(held):
                    yield event
            if fmt is not None:
                held = []
        if fmt not in (None, "text"):
            for value in values:
                for event in _value_events(fmt, value, name, previous, on_bad_line, report):
                    previous = event.at if event.at is not None else previous
                    yield AsrEvent(None, event.words, event.interim)
        if line is None:
            break
