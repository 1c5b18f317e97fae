"""Subtitle cues from final words: WebVTT, SRT and JSON lines, written as cues complete.

Cues follow common captioning guidelines: a cue ends at a sentence end, holds
at most ``max_lines`` lines of at most ``max_chars`` characters, and lasts at
most ``max_duration_s``. Word times come from the ASR's timestamps when the
client sent them (finals echo them), otherwise from when each word was sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TextIO

from streampunct.labels import ID_TO_MARK, PERIOD, QUESTION
from streampunct.text import CLITICS, render


@dataclass(frozen=True)
class CueLimits:
    """Attributes:
    max_chars: characters per line.
    max_lines: lines per cue.
    max_duration_s: longest cue.
    min_duration_s: shortest cue (words without duration still show this long).
    """

    max_chars: int = 42
    max_lines: int = 2
    max_duration_s: float = 7.0
    min_duration_s: float = 0.5


@dataclass(frozen=True)
class TimedWord:
    """A final word: ``w`` (normalized, or as the server wrote it: learned case), label id, and
    times in seconds."""

    w: str
    label: int
    start: float
    end: float


@dataclass(frozen=True)
class Cue:
    """One subtitle: ``lines`` shown from ``start`` to ``end`` (seconds)."""

    start: float
    end: float
    lines: tuple[str, ...]
    words: tuple[TimedWord, ...] = field(repr=False)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def wrap(tokens: Iterable[str], width: int) -> list[str]:
    """Greedy line wrap of tokens; a token longer than ``width`` is cut."""
    lines: list[str] = []
    line = ""
    for token in tokens:
        while len(token) > width:
            if line:
                lines.append(line)
                line = ""
            lines.append(token[:width])
            token = token[width:]
        if not token:
            continue
        if not line:
            line = token
        elif len(line) + 1 + len(token) <= width:
            line += " " + token
        else:
            lines.append(line)
            line = token
    if line:
        lines.append(line)
    return lines


class CueBuilder:
    """Folds final words into cues; :meth:`add` returns the cues it completed."""

    def __init__(self, limits: CueLimits = CueLimits(), *, capitalize: bool = True) -> None:
        self.limits = limits
        self.capitalize = capitalize
        self._words: list[TimedWord] = []
        self._tokens: list[str] = []
        self._sentence_start = True
        self._last_end = 0.0  # cues never start before the previous one ended

    def _token(self, word: TimedWord) -> str:
        return render([word.w], [word.label], capitalize=self.capitalize, sentence_start=self._sentence_start)

    def _fits(self, tokens: list[str], start: float, end: float) -> bool:
        limits = self.limits
        return (
            len(wrap(tokens, limits.max_chars)) <= limits.max_lines
            and end - start <= limits.max_duration_s
        )

    def add(self, word: TimedWord) -> list[Cue]:
        out: list[Cue] = []
        token = self._token(word)
        if self._tokens and word.w in CLITICS and not self._tokens[-1].endswith(tuple(ID_TO_MARK[1:])):
            tokens = [*self._tokens[:-1], self._tokens[-1] + token]
        else:
            tokens = [*self._tokens, token]
        if self._words and not self._fits(tokens, self._words[0].start, max(word.end, word.start)):
            out.append(self._close())
            tokens = [token]
        self._words.append(word)
        self._tokens = tokens
        self._sentence_start = word.label in (PERIOD, QUESTION)
        if self._sentence_start:
            out.append(self._close())
        return out

    def close(self) -> list[Cue]:
        """The cue in progress, if any (end of stream)."""
        return [self._close()] if self._words else []

    def _close(self) -> Cue:
        limits = self.limits
        words = tuple(self._words)
        start = max(words[0].start, self._last_end)
        end = max(max(w.end for w in words), start + limits.min_duration_s)
        end = min(end, start + limits.max_duration_s)
        self._last_end = end
        cue = Cue(start, end, tuple(wrap(self._tokens, limits.max_chars)), words)
        self._words, self._tokens = [], []
        return cue


def _timestamp(seconds: float, sep: str) -> str:
    ms = max(0, round(seconds * 1000))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


class SubtitleWriter:
    """Writes cues in one format (``vtt``, ``srt``, ``jsonl``) to some text streams, cue by cue."""

    FORMATS = ("vtt", "srt", "jsonl")

    def __init__(self, fmt: str, outs: list[TextIO], builder: CueBuilder | None = None) -> None:
        if fmt not in self.FORMATS:
            raise ValueError(f"unknown subtitle format {fmt!r}")
        self.format = fmt
        self.outs = outs
        self.builder = builder or CueBuilder()
        self.count = 0
        if fmt == "vtt":
            self._write("WEBVTT\n\n")

    def _write(self, text: str) -> None:
        for out in self.outs:
            out.write(text)
            out.flush()

    def add(self, word: TimedWord) -> None:
        for cue in self.builder.add(word):
            self._cue(cue)

    def close(self) -> None:
        for cue in self.builder.close():
            self._cue(cue)

    def _cue(self, cue: Cue) -> None:
        self.count += 1
        if self.format == "vtt":
            self._write(f"{_timestamp(cue.start, '.')} --> {_timestamp(cue.end, '.')}\n{cue.text}\n\n")
        elif self.format == "srt":
            self._write(f"{self.count}\n{_timestamp(cue.start, ',')} --> {_timestamp(cue.end, ',')}\n{cue.text}\n\n")
        else:
            record = {
                "start": round(cue.start, 3), "end": round(cue.end, 3), "text": " ".join(cue.lines),
                "words": [{"w": w.w, "p": ID_TO_MARK[w.label], "start": w.start, "end": w.end} for w in cue.words],
            }
            self._write(json.dumps(record, ensure_ascii=False) + "\n")
