"""What ``streampunct caption`` streams: ASR events read from text, JSON lines, Vosk or Whisper output.

Every input becomes a sequence of :class:`AsrEvent`: committed words (sent
as ``words``) or an interim hypothesis (sent as ``hypothesis``), each with
the time it is due, in seconds from the start of the stream.

Formats (``--input-format``, ``auto`` looks at the first JSON line):

* ``text``: plain text, or ``word<TAB>LABEL`` lines (labels ignored); paced
  at ``wps`` words per second in ASR-like chunks.
* ``words``: JSON lines of word objects ``{"w" or "word": str, "start", "end"}``.
* ``vosk``: Vosk/Kaldi recognizer output, one JSON object per line:
  ``{"result": [{"word", "start", "end", ...}], "text": ...}`` commits words,
  ``{"partial": "..."}`` is an interim hypothesis.
* ``whisper``: faster-whisper-style segments with word timestamps, as JSON
  lines of segments, a JSON list of segments, or ``{"segments": [...]}``;
  each segment ``{"start", "end", "text", "words": [{"word", "start", "end"}]}``.

Files with timestamps are replayed on their own clock (``speed`` times real
time; 0: as fast as possible). From stdin (``-``) events are sent as they
are read, so an ASR process can pipe into the client.

A JSON line that cannot be read (not JSON, or not the format's shape) is a
:class:`BadLine`, named by file (or ``stdin``), line number and reason.
``on_bad_line`` says what happens then: ``stop`` raises it (the caller has
streamed the lines before it, and finalizes them), ``skip`` reports it and
goes on with the next line.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streampunct.errors import InputError
from streampunct.labels import LABELS
from streampunct.protocol import Word
from streampunct.textfile import read_text

INPUT_FORMATS = ("auto", "text", "words", "vosk", "whisper")
#: What to do with a JSON line that cannot be read (``--on-bad-line``).
BAD_LINE_ACTIONS = ("stop", "skip")


class BadLine(InputError):
    """A line of JSON-lines input that cannot be read; the message starts with ``FILE:LINE:``."""


def _check_action(on_bad_line: str) -> None:
    if on_bad_line not in BAD_LINE_ACTIONS:
        raise InputError(f"unknown --on-bad-line action {on_bad_line!r}; one of {', '.join(BAD_LINE_ACTIONS)}")


def read_transcript(path: str | Path) -> list[str]:
    """Words of a transcript: plain text, or ``word<TAB>LABEL`` lines (labels dropped)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"no such transcript file: {path}")
    lines = read_text(path).splitlines()  # refuses a directory
    filled = [line for line in lines if line.strip()]
    if filled and all(line.rpartition("\t")[2].strip() in LABELS for line in filled):
        from streampunct.data import read_word_labels

        return read_word_labels(path).words
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


@dataclass(frozen=True)
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
    return float(value)


def _word(item: Any, where: str) -> Word:
    if isinstance(item, str):
        return Word(item)
    if not isinstance(item, dict):
        raise InputError(f"{where}: a word must be an object with 'w' or 'word'")
    text = item.get("w", item.get("word"))
    if not isinstance(text, str):
        raise InputError(f"{where}: a word needs a string 'w' or 'word'")
    return Word(text.strip(), _time(item, "start", where), _time(item, "end", where))


def _due(words: Sequence[Word], previous: float | None) -> float | None:
    """A committed chunk is due when its last word has ended."""
    ends = [w.end if w.end is not None else w.start for w in words]
    known = [t for t in ends if t is not None]
    return max(known) if known else previous


def detect_format(first: str) -> str:
    """The input format of a transcript from its first non-empty line."""
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        return "text"
    if isinstance(obj, list):
        return "whisper" if obj and isinstance(obj[0], dict) and "words" in obj[0] else "words"
    if not isinstance(obj, dict):
        return "text"
    if "result" in obj or "partial" in obj or set(obj) == {"text"}:
        return "vosk"
    if "segments" in obj or "words" in obj:
        return "whisper"
    if "w" in obj or "word" in obj:
        return "words"
    raise InputError("cannot tell the input format from its first line; pass --input-format")


def parse_line(fmt: str, line: str, where: str, previous: float | None = None) -> list[AsrEvent]:
    """The events of one JSON line in format ``fmt`` (``words``, ``vosk`` or ``whisper``)."""
    try:
        obj = json.loads(line.rstrip("\r\n"))
    except json.JSONDecodeError as e:
        raise BadLine(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise BadLine(f"{where}: not JSON (nested too deeply)") from None
    try:
        return _parse_object(fmt, obj, where, previous)
    except InputError as e:  # the line is JSON of the wrong shape
        raise BadLine(str(e)) from None


def _parse_object(fmt: str, obj: Any, where: str, previous: float | None) -> list[AsrEvent]:
    if fmt == "words":
        items = obj if isinstance(obj, list) else [obj]
        words = tuple(_word(item, where) for item in items)
        return [AsrEvent(_due(words, previous), words)]
    if fmt == "vosk":
        if not isinstance(obj, dict):
            raise InputError(f"{where}: a Vosk result must be a JSON object")
        if "partial" in obj:
            text = obj["partial"]
            if not isinstance(text, str):
                raise InputError(f"{where}: 'partial' must be a string")
            return [AsrEvent(previous, tuple(Word(w) for w in text.split()), interim=True)]
        result = obj.get("result")
        if result is None:  # {"text": ""}: silence, nothing committed
            text = obj.get("text", "")
            words = tuple(Word(w) for w in text.split()) if isinstance(text, str) else ()
            return [AsrEvent(previous, words)] if words else []
        if not isinstance(result, list):
            raise InputError(f"{where}: 'result' must be a list of words")
        words = tuple(_word(item, where) for item in result)
        return [AsrEvent(_due(words, previous), words)]
    if fmt == "whisper":
        segments = obj.get("segments") if isinstance(obj, dict) and "segments" in obj else obj
        if isinstance(segments, dict):
            segments = [segments]
        if not isinstance(segments, list):
            raise InputError(f"{where}: expected a segment object or a list of segments")
        events = []
        for segment in segments:
            if not isinstance(segment, dict):
                raise InputError(f"{where}: a segment must be a JSON object")
            items = segment.get("words")
            if isinstance(items, list) and items:
                words = tuple(_word(item, where) for item in items)
            else:  # a segment without word timestamps: its words share its times
                text = segment.get("text", "")
                start, end = _time(segment, "start", where), _time(segment, "end", where)
                words = tuple(Word(w, start, end) for w in str(text).split())
            if words:
                previous = _due(words, previous)
                events.append(AsrEvent(previous, words))
        return events
    raise InputError(f"unknown input format {fmt!r}")


def _parse_or_skip(fmt: str, line: str, where: str, previous: float | None, on_bad_line: str,
                   report: Callable[[str], None] | None) -> list[AsrEvent]:
    """:func:`parse_line`, where a bad line is raised (``stop``) or reported and skipped (``skip``)."""
    try:
        return parse_line(fmt, line, where, previous)
    except BadLine as e:
        if on_bad_line == "stop":
            raise
        if report is not None:
            report(f"{e}; line skipped")
        return []


def events_from_lines(lines: Iterable[str], fmt: str, name: str, *, on_bad_line: str = "stop",
                      report: Callable[[str], None] | None = None) -> Iterator[AsrEvent]:
    """Events of JSON-lines input (a whole-file JSON list or object is one "line")."""
    _check_action(on_bad_line)
    previous: float | None = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        for event in _parse_or_skip(fmt, line, f"{name}:{number}", previous, on_bad_line, report):
            previous = event.at if event.at is not None else previous
            yield event


def text_events(words: Sequence[str], *, wps: float, max_chunk: int, seed: int) -> list[AsrEvent]:
    """Plain words paced at ``wps`` in ASR-like chunks (see :func:`asr_chunks`)."""
    return [AsrEvent(at, tuple(Word(w) for w in chunk)) for at, chunk in asr_chunks(
        words, wps=wps, max_chunk=max_chunk, seed=seed)]


def _whole_json(text: str) -> list[str]:
    """A file holding one JSON document (possibly over several lines) as one line."""
    stripped = text.strip()
    if stripped[:1] in "[{":
        try:
            json.loads(stripped)
        except json.JSONDecodeError:
            return text.splitlines()
        return [stripped]
    return text.splitlines()


def read_events(
    source: str, *, input_format: str = "auto", wps: float = 2.5, max_chunk: int = 4, seed: int = 0,
    speed: float = 1.0, on_bad_line: str = "stop", report: Callable[[str], None] | None = None,
) -> list[AsrEvent]:
    """Every event of a file (not stdin), timed for replay; a bad line (:class:`BadLine`) is
    raised before anything is streamed (``stop``), or reported and skipped (``skip``)."""
    _check_action(on_bad_line)
    if input_format not in INPUT_FORMATS:
        raise InputError(f"unknown input format {input_format!r}; one of {', '.join(INPUT_FORMATS)}")
    path = Path(source)
    text = read_text(path)
    lines = _whole_json(text)
    first = next((line for line in lines if line.strip()), "")
    fmt = detect_format(first) if input_format == "auto" else input_format
    if fmt == "text":
        words = read_transcript(path)
        if not words:
            raise InputError(f"{source}: no words")
        return text_events(words, wps=wps, max_chunk=max_chunk, seed=seed)
    events = list(events_from_lines(lines, fmt, str(path), on_bad_line=on_bad_line, report=report))
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


def _stdin_lines() -> asyncio.Queue[str | None]:
    """Lines of stdin, read by a daemon thread (a blocked read must not keep the process alive)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def pump() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(queue.put_nowait, line)
        loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=pump, name="caption-stdin", daemon=True).start()
    return queue


async def stdin_events(input_format: str = "auto", max_chunk: int | None = None, *, on_bad_line: str = "stop",
                       report: Callable[[str], None] | None = None) -> AsyncIterator[AsrEvent]:
    """Events read from stdin as they come (an ASR process piping JSON lines or text).

    A line of plain text is committed as it is read, in chunks of at most
    ``max_chunk`` words (None: the whole line in one). A JSON line that cannot
    be read raises :class:`BadLine` (``stop``: the events before it have been
    yielded), or is reported and skipped (``skip``).
    """
    if max_chunk is not None and max_chunk < 1:
        raise InputError("--max-chunk must be at least 1")
    _check_action(on_bad_line)
    fmt = None if input_format == "auto" else input_format
    previous: float | None = None
    number = 0
    lines = _stdin_lines()
    while (line := await lines.get()) is not None:
        number += 1
        if not line.strip():
            continue
        if fmt is None:
            fmt = detect_format(line)
        if fmt == "text":
            words = tuple(Word(w) for w in line.split())
            step = max_chunk or len(words)
            for i in range(0, len(words), step):
                yield AsrEvent(None, words[i : i + step])
            continue
        for event in _parse_or_skip(fmt, line, f"stdin:{number}", previous, on_bad_line, report):
            previous = event.at if event.at is not None else previous
            yield AsrEvent(None, event.words, event.interim)
