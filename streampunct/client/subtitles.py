"""Subtitle cues from final words: WebVTT, SRT and JSON lines, written as cues complete.

Cues follow the conventions broadcasters publish for subtitles (BBC subtitle
guidelines, Netflix timed text style guide):

* **reading speed**: a cue stays on screen at least as long as reading its
  characters takes at ``max_cps`` (17 characters a second), and at least
  ``min_duration_s`` (1 s): its end is moved later than its last word when
  needed, into the gap before the next cue, which then starts no earlier
  than that end (so a cue may start after its first word was spoken: the
  *lag*, which :func:`cue_stats` reports);
* **bounded lag**: speech faster than that reading speed would push every
  later cue later and later; so a cue ends at most ``max_lag_s`` (1.5 s)
  after its last word was spoken, however fast it must then be read (the
  reading speed, then the minimum duration, give way, down to 1 ms on
  screen). With word times that never go back, no cue starts more than
  ``max_lag_s`` after its first word (plus 1 ms for each cue before it with
  no time left at all: words said at one instant, the lag used up), or,
  for a written form said across a pause (below), after its first word
  after the pause;
* **short pieces are merged**: a sentence that ends a cue too short to be
  read in its own speaking time ("Yes.", or "dollars." left over from a long
  sentence) is held and shown with the next sentence when both fit in one
  cue; otherwise it is shown alone, for as long as reading it takes;
* **breaks**: a cue ends at a sentence end when it can; when the words do not
  fit (``max_lines`` lines of ``max_chars``, ``max_duration_s``), the cue is
  cut at the best point in it: a sentence end, then a clause end (comma),
  then before a conjunction, never after an article or a preposition when
  avoidable, and never inside a name (capitalized words side by side that
  are not a sentence start: "New York") or a written form (a number, date,
  money or lexicon phrase the server wrote: "$25", "March 5, 2020");
* **balanced lines**: a cue of two lines is cut near its middle, at a word
  boundary, after punctuation when it can, and not with a last line of one
  word when avoidable;
* **units**: a line break never falls inside a name, a lexicon phrase
  (``phrases``: "Rio de Janeiro") or a written form as the pieces show it
  (inside a written piece, "$3 million"; after one with no mark between, its
  scale or unit written as spoken: "2 million", "10 kilometers"; between a
  month and its day: "March 5"): each is laid out as one word is
  (:func:`units`), and words whose units do not fit a cue's lines make more
  cues. A break before a form ("about | 2 million") is only avoided; a unit
  longer than a line is cut as a long word is (at its best spaces; a word of
  it longer than a line, by characters);
* **a form said across a pause**: the words of a written form, which no cue
  cuts, may be said across a pause longer than a cue lasts
  (``max_duration_s``; "twenty", a pause, "five dollars": "$25"). Its cue
  shows it when it is complete: it starts with the form's words after the
  pause (:func:`said_from`), so that it is neither on screen across the
  pause nor gone when the form ends; the form's words before the pause are
  said with no cue showing them, and the lag bound (and :func:`cue_stats`)
  counts from the words after the pause. Every other rule holds for it.

A cue never shows more than ``max_lines`` lines: a word (or written form) too
long for them alone is cut, with an ellipsis, on the last line (the cue's
words keep it whole).

Streaming: a cue is written as soon as it is complete (its sentence ended,
or the next words do not fit). Words are held only while they may still
join a cue: no cue spans more than ``max_duration_s`` of speech (or, when
one piece alone spans longer, a word given a whole segment's time, no more
than that piece: the piece is not cut off alone for it), and
:meth:`SubtitleWriter.flush` (which the caption client calls when no final
came for that long: a pause) writes what is held.

What a cue shows comes from the finals' ``text`` (:class:`FinalPieces`), so
written forms ("$25", "New York", "iPhone") appear as the server wrote
them; times come from the words' timestamps when the client sent them
(finals echo them), otherwise from when each word was sent. Symbols that
no word took (a transcript of symbols alone, "& ...", or symbols after a
pause with no word after them), which have no time of their own, make the
last cue (cues of ``max_lines`` lines when they fill more, none cut): right
after the cue before (at 0 when none came), for as long as reading it takes,
as the captions show them.
:func:`cue_stats` measures the rules on a list of cues.

Writing: WebVTT cue text escapes ``&``, ``<`` and ``>`` (``&amp;``, ``&lt;``,
``&gt;``, as the W3C WebVTT format asks, which also keeps a ``-->`` in the
text from reading as a timing line). SRT has no escapes: its text is written
as shown; its timestamps have two digits of hours, so a cue that ends at
100 hours or later cannot be written (:data:`SRT_MAX_S`: an
:class:`~streampunct.errors.InputError`; WebVTT has no such limit).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from streampunct.errors import InputError
from streampunct.labels import COMMA, ID_TO_MARK, PERIOD, QUESTION, O
from streampunct.text.normalize import CLITICS, render, spelled_pieces, unit_symbol


@dataclass(frozen=True)
class CueLimits:
    """Attributes:
    max_chars: characters per line.
    max_lines: lines per cue.
    max_duration_s: longest cue (and longest a word is held before its cue is written).
    min_duration_s: shortest time a cue is shown.
    max_cps: reading speed a cue's time on screen allows for at most
        (characters a second, spaces included).
    max_lag_s: latest a cue ends after its last word was spoken (it gives way to
        ``max_cps`` and ``min_duration_s`` when speech is faster than they allow),
        so that no cue starts more than this after its first word (its first word
        after a pause inside a written form: :func:`said_from`).
    """

    max_chars: int = 42
    max_lines: int = 2
    max_duration_s: float = 7.0
    min_duration_s: float = 1.0
    max_cps: float = 17.0
    max_lag_s: float = 1.5

    def __post_init__(self) -> None:
        if self.max_chars < 1 or self.max_lines < 1:
            raise ValueError("max_chars and max_lines must be >= 1")
        if not 0 < self.min_duration_s <= self.max_duration_s:
            raise ValueError("0 < min_duration_s <= max_duration_s")
        if self.max_cps <= 0:
            raise ValueError("max_cps must be > 0")
        if not self.max_lag_s >= 0:
            raise ValueError("max_lag_s must be >= 0")


@dataclass(frozen=True)
class TimedWord:
    """A final word: ``w`` (as spoken and normalized, or written, as the caller has it), label id,
    and times in seconds."""

    w: str
    label: int
    start: float
    end: float


@dataclass(frozen=True)
class Piece:
    """What a cue shows of one or more consecutive words, never cut between cues.

    ``text``: as shown ("Hello,", "it's", "$25", "March 5, 2020");
    ``written``: a written form whose text does not spell its words (ITN, or a
    lexicon phrase such as "N.A.S.A."): no cue break next to it unless a mark
    separates them, and no line break after it (:func:`units`).
    """

    text: str
    words: tuple[TimedWord, ...]
    written: bool = False

    @property
    def start(self) -> float:
        return min(w.start for w in self.words)

    @property
    def end(self) -> float:
        return max(max(w.end, w.start) for w in self.words)

    @property
    def label(self) -> int:
        """The mark after it (its last word's label)."""
        return self.words[-1].label


@dataclass(frozen=True)
class Cue:
    """One subtitle: ``lines`` shown from ``start`` to ``end`` (seconds)."""

    start: float
    end: float
    lines: tuple[str, ...]
    words: tuple[TimedWord, ...] = field(repr=False)
    pieces: tuple[Piece, ...] = field(default=(), repr=False)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def chars(self) -> int:
        """Characters read: the lines joined by a space."""
        return len(" ".join(self.lines))


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


# -- where a cue or a line may break ---------------------------------------------------------

SENTENCE, CLAUSE, PLAIN, NAME, WRITTEN = "sentence", "clause", "plain", "name", "written"

#: A break before these is natural (a new clause starts).
_BREAK_BEFORE = frozenset("and but or so because which who whom whose when where while if although though "
                          "unless until than whether".split())
#: A break after these separates words that belong together (article, preposition, possessive).
_NO_BREAK_AFTER = frozenset("a an the of to in on at for with from by into onto about as my your his her its "
                            "our their this these those i".split())
_PRONOUN_I = frozenset({"i", "i'm", "i've", "i'll", "i'd"})


def _core(text: str) -> str:
    return text.rstrip(",.?!;:")


def _capitalized(piece: Piece) -> bool:
    core = _core(piece.text)
    first = next((ch for ch in core if ch.isalpha()), "")  # "'Cause": its first letter
    return first.isupper() and core.lower() not in _PRONOUN_I


def _shown_mark(piece: Piece) -> int:
    """The mark of a piece's last word as its text shows it: ``O`` where the text does not end
    with it (a written form took it inside: "April" of "April 25," had the model's comma); a
    sentence end where a form ends with its own "!" or "?"."""
    label = piece.label
    if label in (PERIOD, QUESTION) and piece.text.endswith(("!", "?")):
        return label  # a written form's own mark, which takes no period after it ("Yahoo!")
    return label if label != O and piece.text.endswith(ID_TO_MARK[label]) else O


def boundary(a: Piece, b: Piece) -> str:
    """What a break between ``a`` and the piece ``b`` after it would cut: after a ``sentence`` or
    a ``clause`` end (as the text shows it), a ``plain`` point, or (never when avoidable) inside a
    ``name`` or next to a ``written`` form with no mark between."""
    mark = _shown_mark(a)
    if mark in (PERIOD, QUESTION):
        return SENTENCE
    if mark == COMMA:
        return CLAUSE
    if a.written or b.written:
        return WRITTEN
    if _capitalized(a) and _capitalized(b):
        return NAME
    return PLAIN


def _break_bonus(a: Piece, b: Piece, kind: str) -> float:
    """Small preferences among allowed breaks (conjunctions, articles, prepositions)."""
    bonus = 0.0
    if kind == PLAIN and b.words[0].w.lower() in _BREAK_BEFORE:
        bonus += 0.3
    if kind == PLAIN and a.words[-1].w.lower() in _NO_BREAK_AFTER:
        bonus -= 0.5
    return bonus


def phrase_breaks(pieces: Sequence[Piece], phrases: Iterable[Sequence[str]]) -> set[int]:
    """The breaks k (between ``pieces[k - 1]`` and ``pieces[k]``) inside a phrase of ``phrases``
    (spoken word sequences, a lexicon's), matched leftmost-longest over the pieces' words as a
    lexicon is."""
    return _phrase_breaks(pieces, {tuple(p) for p in phrases if len(p) > 1})


def _phrase_breaks(pieces: Sequence[Piece], phrases: set[tuple[str, ...]]) -> set[int]:
    if not phrases:
        return set()
    longest = max(map(len, phrases))
    words, piece_of = [], []
    for k, piece in enumerate(pieces):
        words += [w.w.lower() for w in piece.words]
        piece_of += [k] * len(piece.words)
    inside: set[int] = set()
    i = 0
    while i < len(words):
        sizes = range(min(longest, len(words) - i), 1, -1)
        n = next((n for n in sizes if tuple(words[i : i + n]) in phrases), 0)
        if n:
            inside.update(range(piece_of[i] + 1, piece_of[i + n - 1] + 1))
            i += n
        else:
            i += 1
    return inside


#: Month names: "March" before "5, 2020" is part of the written date.
_MONTHS = frozenset(
    "january february march april may june july august september october november december".split()
)


#: A number as a word shows it ("100", "2.5", "1,000", "$5", "-3"), and the scale or unit words
#: that go with one: "100" / "million dollars" is the break a number the ASR wrote in digits
#: (Whisper does) would otherwise get, where an ITN form's scale is kept with it.
_NUMBER = re.compile(r"[-+$€£¥]?\d[\d,.]*%?")
_SCALES = frozenset("hundred thousand million billion trillion".split())
_SCALES_UNITS = _SCALES | frozenset(
    "percent dollars dollar cents euros pounds yen years year months weeks days hours minutes seconds "
    "miles feet foot inches meters metres kilometers kilometres kilograms kilos tons degrees".split()
)


def _joined(a: Piece, b: Piece) -> bool:
    """No line break between ``a`` and ``b`` (but in a unit longer than a line): inside a name, or
    inside a written form as the pieces show it: after a form with no mark between (its scale or
    unit spells its word: "2 million", "10 kilometers") and between a month and its day ("March
    5"); likewise after a number written in digits and a scale or unit ("100 million dollars").
    Before a form ("about 2 million") a break is only avoided (:func:`_lines`)."""
    kind = boundary(a, b)
    if kind == PLAIN and (_NUMBER.fullmatch(a.text) or a.text.lower() in _SCALES) and _core(
            b.text).lower() in _SCALES_UNITS:  # "100 million dollars": the number, its scale, its unit
        return True
    return kind == NAME or kind == WRITTEN and (a.written or _core(a.text).lower() in _MONTHS)


def units(pieces: Sequence[Piece], inside: Collection[int] = ()) -> list[tuple[int, int]]:
    """The runs ``(i, j)`` of ``pieces[i:j]`` that a cue lays out as one unit, as it does a word
    (:func:`_joined`; ``inside``: the breaks inside a lexicon's phrases, :func:`phrase_breaks`):
    no line break inside one, unless it alone is longer than a line."""
    runs, i = [], 0
    for k in range(1, len(pieces)):
        if k not in inside and not _joined(pieces[k - 1], pieces[k]):
            runs.append((i, k))
            i = k
    if pieces:
        runs.append((i, len(pieces)))
    return runs


def _boxes(pieces: Sequence[Piece], runs: Sequence[tuple[int, int]], width: int) -> list[str]:
    """What a line wrap may not cut: each unit, or the words of one longer than a line."""
    out = []
    for i, j in runs:
        text = " ".join(p.text for p in pieces[i:j])
        out += [text] if len(text) <= width else text.split()
    return out


def line_count(pieces: Sequence[Piece], limits: CueLimits, inside: Collection[int] = ()) -> int:
    """How many lines :func:`layout` needs for ``pieces`` (no unit cut, but one longer than a
    line)."""
    if sum(len(p.text) + 1 for p in pieces) - 1 <= limits.max_chars:
        return 1 if pieces else 0
    return len(wrap(_boxes(pieces, units(pieces, inside), limits.max_chars), limits.max_chars))


def layout(
    pieces: Sequence[Piece], limits: CueLimits, phrases: Iterable[Sequence[str]] = ()
) -> list[str]:
    """The lines of a cue: as few as fit, balanced, cut at the best word boundaries, never inside a
    unit (:func:`units`; ``phrases``: a lexicon's spoken phrases) but one longer than a line; never
    more than ``max_lines`` (:func:`_clip`)."""
    return _clip(_lines(pieces, limits, phrase_breaks(pieces, phrases)), limits)


def _clip(lines: list[str], limits: CueLimits) -> list[str]:
    """At most ``max_lines`` lines: what does not fit (a word too long for a cue, alone in its cue
    as the builder cuts it) is cut, and the last line ends with an ellipsis."""
    if len(lines) <= limits.max_lines:
        return lines
    kept = lines[:limits.max_lines]
    kept[-1] = kept[-1][:limits.max_chars - 1] + "\u2026"
    return kept


def _lines(pieces: Sequence[Piece], limits: CueLimits, inside: Collection[int] = ()) -> list[str]:
    width_max = limits.max_chars
    runs = units(pieces, inside)
    wrapped = wrap(_boxes(pieces, runs, width_max), width_max)
    n_lines = len(wrapped)
    if n_lines <= 1:
        return [" ".join(p.text for p in pieces)] if pieces else []
    if n_lines > limits.max_lines:  # more than a cue shows (a piece of many words): as wrapped
        return wrapped

    def cut_cost(k: int) -> float:  # a break between pieces k-1 and k (characters of imbalance)
        kind = boundary(pieces[k - 1], pieces[k])
        cost = {SENTENCE: -12.0, CLAUSE: -8.0, PLAIN: 0.0, NAME: 60.0, WRITTEN: 60.0}[kind]
        return cost - 15.0 * _break_bonus(pieces[k - 1], pieces[k], kind)

    # The words of the pieces (a word longer than a line cut in lines' lengths, as wrap cuts
    # it), and what a line break before each costs: None where it may not fall (inside a unit
    # no longer than a line); inside a longer unit, more than any imbalance, so that it takes
    # as few as it must.
    hard = 4.0 * width_max * n_lines + 100.0
    tokens: list[str] = []
    costs: list[float | None] = []
    for i, j in runs:
        long = len(" ".join(p.text for p in pieces[i:j])) > width_max
        for k in range(i, j):
            for m, word in enumerate(pieces[k].text.split() or [pieces[k].text]):
                chunks = [word[s : s + width_max] for s in range(0, len(word), width_max)]
                for c, chunk in enumerate(chunks or [word]):
                    if c:
                        costs.append(0.0)  # a full line of a long word before it
                    elif m:
                        costs.append(hard + 60.0 if long else None)  # inside a piece ("$3 million")
                    elif k > i:
                        costs.append(hard + cut_cost(k) if long else None)  # inside a unit
                    else:
                        costs.append(cut_cost(k) if k else 0.0)
                    tokens.append(chunk)
    total = len(" ".join(tokens))
    target = total / n_lines
    n = len(tokens)
    ends = [0]
    for t in tokens:
        ends.append(ends[-1] + len(t) + 1)  # prefix lengths, one space after each token

    def width(i: int, j: int) -> int:  # tokens[i:j] on one line
        return ends[j] - ends[i] - 1

    inf = float("inf")
    # best[l][j]: cost of tokens[:j] in l lines; the last line may not be a single word when avoidable
    best = [[inf] * (n + 1) for _ in range(n_lines + 1)]
    back = [[0] * (n + 1) for _ in range(n_lines + 1)]
    best[0][0] = 0.0
    for lines in range(1, n_lines + 1):
        for j in range(1, n + 1):
            for i in range(j - 1, -1, -1):  # lines that fit: from one token back, until too wide
                if width(i, j) > width_max:
                    break
                cut = costs[i]
                if best[lines - 1][i] == inf or cut is None:
                    continue
                cost = best[lines - 1][i] + abs(width(i, j) - target) + (cut if i else 0.0)
                if lines == n_lines and j == n and j - i == 1 and n > n_lines:
                    cost += 15.0  # a one-word last line
                if cost <= best[lines][j]:  # ties: the earliest break, as i runs backwards
                    best[lines][j], back[lines][j] = cost, i
    if best[n_lines][n] == inf:  # not expected: the wrap above is one such layout
        return wrapped
    out, j = [], n
    for lines in range(n_lines, 0, -1):
        i = back[lines][j]
        out.append(" ".join(tokens[i:j]))
        j = i
    return out[::-1]


# -- cues ---------------------------------------------------------------------------------


def said_from(words: Sequence[TimedWord], pause_s: float) -> float:
    """When ``words`` (one cue's, or one written form's, in order) are said from, as a cue shows
    them: their first word's start; but when there is a pause longer than ``pause_s`` between two
    of them (the words of a written form, which no cue cuts, said across a pause), the start of
    the words after the last such pause: the cue shows them when the form is complete, not
    across the pause."""
    if len(words) == 1:
        return words[0].start
    first, said = 0, -math.inf
    for k, w in enumerate(words):
        if k and w.start - said > pause_s:
            first = k
        said = max(said, w.start, w.end)
    return min(w.start for w in words[first:])


#: The shortest time a cue is shown when it catches up with the speech (``max_lag_s``): one
#: millisecond, the timestamps' step, so that its end still comes after its start.
_MIN_SHOWN_S = 0.001


class CueBuilder:
    """Folds final pieces (or words) into cues; :meth:`add_piece` and :meth:`add` return the
    cues they completed, in order.

    ``capitalize``: sentence capitals for words added with :meth:`add` (pieces
    come written). ``phrases``: spoken phrases (a lexicon's, as word tuples) that no cue
    boundary cuts when another break fits, though their text spells their words ("rio de
    janeiro" -> "Rio de Janeiro").
    """

    def __init__(self, limits: CueLimits = CueLimits(), *, capitalize: bool = True,
                 phrases: Iterable[Sequence[str]] = ()) -> None:
        self.limits = limits
        self.capitalize = capitalize
        self._phrases = {tuple(p) for p in phrases if len(p) > 1}
        self._pending: list[Piece] = []
        self._sentence_start = True
        # cues never start before the previous one ended; none yet, so that word times before 0
        # (an offset clock, which jsonl cues carry as they are) are not pulled to 0
        self._last_end = -math.inf

    @property
    def pending(self) -> int:
        """Pieces held for the cue in progress."""
        return len(self._pending)

    # -- words (rendered here) ---------------------------------------------------------
    def add(self, word: TimedWord) -> list[Cue]:
        """A word rendered with its mark and sentence capitals (clitics join the word before)."""
        token = render([word.w], [word.label], capitalize=self.capitalize, sentence_start=self._sentence_start)
        self._sentence_start = word.label in (PERIOD, QUESTION)
        last = self._pending[-1] if self._pending else None
        if last is not None and word.w in CLITICS and last.label == O:
            self._pending[-1] = Piece(last.text + token, (*last.words, word), last.written)
            return self._settle()
        return self.add_piece(Piece(token, (word,)))

    # -- pieces ------------------------------------------------------------------------
    def add_piece(self, piece: Piece) -> list[Cue]:
        """One piece (:class:`FinalPieces`) at the end of the stream so far; a clitic that a final's
        text began with ("'s" after "there") joins the piece before it."""
        last = self._pending[-1] if self._pending else None
        if (last is not None and not piece.written and len(piece.words) == 1 and piece.words[0].w in CLITICS
                and last.label == O):
            self._pending[-1] = Piece(last.text + piece.text, last.words + piece.words, last.written)
        else:
            self._pending.append(piece)
        return self._settle()

    def close(self) -> list[Cue]:
        """The cue in progress, if any (end of stream)."""
        return self.flush()

    def flush(self) -> list[Cue]:
        """Write what is held now (a pause: no final for as long as a cue lasts)."""
        out = []
        while self._pending:
            out += self._cut(self._forced_break(self._pending) if not self._fits(self._pending) else None)
        return out

    def _settle(self) -> list[Cue]:
        out: list[Cue] = []
        while len(self._pending) > 1 and not self._fits(self._pending):
            out += self._cut(self._forced_break(self._pending))
        if self._pending and not self._fits(self._pending):  # one piece longer than a cue
            out += self._cut(None)
        elif self._pending and self._pending[-1].label in (PERIOD, QUESTION) and not self._short(self._pending):
            out += self._cut(None)
        return out

    def _fits(self, pieces: Sequence[Piece]) -> bool:
        """The pieces fit in one cue: its lines (no unit cut: :func:`units`), and ``max_duration_s``
        of speech (or as long as one of them takes alone: a word given a whole segment's time is
        not cut off alone for it), counted from when they are said (:meth:`_said_from`)."""
        limits = self.limits
        span = pieces[-1].end - self._said_from(pieces[0])
        if span > limits.max_duration_s and span > max(p.end - self._said_from(p) for p in pieces):
            return False
        return line_count(pieces, limits, _phrase_breaks(pieces, self._phrases)) <= limits.max_lines

    def _said_from(self, piece: Piece) -> float:
        """When a cue that starts with ``piece`` may start: :func:`said_from` its words, over a
        pause longer than a cue lasts."""
        return said_from(piece.words, self.limits.max_duration_s)

    def _need(self, chars: int) -> float:
        """How long a cue of ``chars`` characters must be shown."""
        return max(self.limits.min_duration_s, chars / self.limits.max_cps)

    def _short(self, pieces: Sequence[Piece], *, after: float | None = None) -> bool:
        """Too short to be read within its own speech (it would need more time than its words
        took); ``after``: when the cue before it ends (default: the last cue written)."""
        start = max(self._said_from(pieces[0]), self._last_end if after is None else after)
        return start + self._need(len(" ".join(p.text for p in pieces))) > pieces[-1].end

    def _forced_break(self, pieces: Sequence[Piece]) -> int:
        """Where to cut pieces that do not fit: the best k (cue = pieces[:k], 0 < k < len).

        Scored by what the break cuts (a sentence end, then a clause end; never a name, a
        phrase or next to a written form when avoidable: unless the pieces on either side
        cannot share a cue, as a form said across a pause cannot) and by how full the cue is.
        When the last piece ends a sentence, the rest becomes a cue at once: then the two are balanced instead, and a
        rest too short to be read in its own time ("horse." of a long sentence) is avoided.
        """
        capacity = self.limits.max_chars * self.limits.max_lines
        ends_sentence = pieces[-1].label in (PERIOD, QUESTION)
        total = len(" ".join(p.text for p in pieces))
        best, best_score, fallback = 0, float("-inf"), 1
        in_phrases = _phrase_breaks(pieces, self._phrases)
        for k in range(1, len(pieces)):
            if not self._fits(pieces[:k]):
                break
            fallback = k
            a, b = pieces[k - 1], pieces[k]
            kind = boundary(a, b)
            if (kind in (NAME, WRITTEN) or k in in_phrases) and self._fits([a, b]):
                continue
            chars = len(" ".join(p.text for p in pieces[:k]))
            fill = chars / capacity
            score = _break_bonus(a, b, kind)
            if kind == SENTENCE:
                score += 2.0
            elif kind == CLAUSE and fill >= 0.3:
                score += 1.0
            if ends_sentence and self._fits(pieces[k:]):
                score -= abs(2 * chars - total) / capacity  # balanced
                if self._short(pieces[k:], after=pieces[k - 1].end):
                    score -= 1.0
            else:
                score += fill
            if score >= best_score:
                best, best_score = k, score
        return best or fallback  # no allowed break: as much as fits

    def alone(self, tokens: Sequence[str]) -> list[Cue]:
        """The cues of tokens with no word and so no time of their own (:meth:`FinalPieces.unplaced`):
        one after the other from when the last cue ends (at 0 when none came), ``max_lines``
        lines each (every token shown, none cut), each for as long as reading it takes."""
        lines = wrap(tokens, self.limits.max_chars)
        cues = []
        for i in range(0, len(lines), self.limits.max_lines):
            shown = tuple(lines[i : i + self.limits.max_lines])
            start = self._last_end if math.isfinite(self._last_end) else 0.0
            self._last_end = start + self._need(len(" ".join(shown)))
            cues.append(Cue(start, self._last_end, shown, ()))
        return cues

    def _cut(self, k: int | None) -> list[Cue]:
        """Write pending[:k] (all when None) as a cue."""
        pieces = self._pending if k is None else self._pending[:k]
        self._pending = [] if k is None else self._pending[k:]
        limits = self.limits
        lines = _clip(_lines(pieces, limits, _phrase_breaks(pieces, self._phrases)), limits)
        start = max(self._said_from(pieces[0]), self._last_end)
        need = self._need(len(" ".join(lines)))
        end = max(pieces[-1].end, start + need)  # long enough to read
        end = min(end, start + max(limits.max_duration_s, need))
        end = min(end, max(pieces[-1].end + limits.max_lag_s, start + _MIN_SHOWN_S))  # bounded lag
        self._last_end = end
        words = tuple(w for p in pieces for w in p.words)
        return [Cue(start, end, tuple(lines), words, tuple(pieces))]


# -- pieces from the finals' text ---------------------------------------------------------------


def _spells(token: str, words: Sequence[str], j: int) -> int:
    """How many words from ``j`` (lowercase) the token writes (:func:`spelled_pieces`: its
    marks aside, the input's symbols around them: ``$1,000``); 0: none."""
    pieces = spelled_pieces(_core(token), words, j)
    return len(pieces) if pieces else 0


class FinalPieces:
    """The pieces a stream's finals show: their ``text`` matched to their ``words``.

    A final's ``text`` writes its words (and words an earlier final held for a
    phrase), each plain word as one token, clitics joined ("it's"), and
    written forms ("$25", "March 5, 2020", "iPhone") as they came
    (docs/protocol.md, "Written forms"). Tokens that spell words letter for
    letter are matched to them (the most words matched, in order); what lies
    between two matches is a written form: its tokens show its words. Words
    with no token of their own ("dollars" in "$3 million") belong to the form
    before them; tokens with no word (symbols) to the word after them ("& roll"),
    except a unit ("50 %") and what ends the stream's text ("OK. 😀"). The last match of a text stays open until the next final
    (a form may go on), unless :meth:`close` ends the stream.
    """

    def __init__(self) -> None:
        self._tokens: list[str] = []
        self._words: list[TimedWord] = []
        self._held = 0  # the last final's ``held``: its last words, whose text a later final writes

    @property
    def pending(self) -> int:
        """Words whose pieces are not decided yet."""
        return len(self._words)

    def add(self, words: Sequence[TimedWord], text: str, held: int = 0) -> list[Piece]:
        """The pieces that one final (its words, its ``text``, its ``held``) decides."""
        self._words += words
        self._tokens += text.split()
        self._held = held
        return self._take(final=False)

    def close(self) -> list[Piece]:
        """Every piece left (the stream ended); then :meth:`unplaced` has the symbols no word took."""
        return self._take(final=True, closing=True)

    def unplaced(self) -> list[str]:
        """After :meth:`close`: the tokens no word took (taken now, so they are shown once):
        symbols with no word after them whose word before was taken already (:meth:`settle`
        at a pause), or a stream with no word at all (an emoji alone). Until then, tokens with
        no word wait for the next word; empty when every token went with a word."""
        if self._words:
            return []
        tokens, self._tokens = self._tokens, []
        return tokens

    def settle(self) -> list[Piece]:
        """At a pause: every piece the texts so far decide, the last match too; the words the
        last final held for a phrase ("on" | "march", a pause, "fifth") wait for the final
        that writes them, which would show them a second time had they been written as spoken
        now."""
        held = min(self._held, len(self._words))
        kept = self._words[len(self._words) - held:]
        self._words = self._words[: len(self._words) - held]
        out = self._take(final=True)
        self._words += kept
        return out

    def _take(self, *, final: bool, closing: bool = False) -> list[Piece]:
        tokens, words = self._tokens, self._words
        if not tokens and not final:
            return []
        groups = _align(tokens, words, closing=closing)  # (tokens a:b, words c:d, matched)
        if not final:
            # Keep the last match open (a written form may go on in the next text), with the
            # form before it, and the words after the last token (held for a phrase).
            last = max((g for g, (_, _, _, _, matched) in enumerate(groups) if matched), default=None)
            if last is None:
                return []
            keep = last - 1 if last > 0 and not groups[last - 1][4] else last
            groups = groups[:keep]
        out = []
        t_used = w_used = 0
        for a, b, c, d, matched in groups:
            if c == d or a == b:
                break  # a token with no word, or words with no token yet: wait for more
            piece = Piece(" ".join(tokens[a:b]), tuple(words[c:d]), written=not matched)
            if out and matched and d - c == 1 and words[c].w in CLITICS and out[-1].label == O:
                # a clitic that opened a final's text ("I" | "'m") joins the word before it
                piece = Piece(out[-1].text + piece.text, out[-1].words + piece.words, out[-1].written)
                out.pop()
            out.append(piece)
            t_used, w_used = b, d
        self._tokens, self._words = tokens[t_used:], words[w_used:]
        if final and self._words:  # words no text ever wrote (a server that sent none)
            rest = self._words
            out.append(Piece(" ".join(self._tokens) or " ".join(w.w for w in rest), tuple(rest), written=True))
            self._tokens, self._words = [], []
        return out


def _align(tokens: Sequence[str], words: Sequence[TimedWord], *,
           closing: bool = False) -> list[tuple[int, int, int, int, bool]]:
    """Groups ``(token a, b, word c, d, matched)`` covering both in order: matched tokens
    (one token spelling words) and written forms between them; a group with words but no
    token joins the group before it (with that group's written form before it, when it is
    a match: "$3" "million" + "dollars"), a group with a token but no word the one after,
    except a unit of a number and (``closing``: the stream ended) the text's last tokens,
    which join the one before (:func:`_trails`)."""
    n, m = len(tokens), len(words)
    lowered = [w.w.lower() for w in words]
    spell = [[_spells(tokens[i], lowered, j) for j in range(m)] for i in range(n)]
    # best[i][j]: most words matched in tokens[i:], words[j:]
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            k = spell[i][j]
            best[i][j] = max(best[i + 1][j], best[i][j + 1], k + best[i + 1][j + k] if k else 0)
    matches, i, j = [], 0, 0
    while i < n and j < m:
        k = spell[i][j]
        if k and best[i][j] == k + best[i + 1][j + k]:
            matches.append((i, j, k))
            i, j = i + 1, j + k
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    groups: list[list] = []
    ti = wj = 0
    for i, j, k in [*matches, (n, m, 0)]:
        if i > ti or j > wj:
            groups.append([ti, i, wj, j, False])
        if k:
            groups.append([i, i + 1, j, j + k, True])
        ti, wj = i + 1, j + k
    # words without a token join the group before (and its written form); tokens without words
    # the next, except a unit after a number ("50 %") and symbols after the last word ("OK. 😀"),
    # which join the group before
    out: list[list] = []
    for g in groups:
        if g[2] == g[3] and out and out[-1][2] < out[-1][3] and _trails(tokens, g[0], g[1], closing):
            prev = out.pop()
            out.append([prev[0], g[1], prev[2], prev[3], False])
        elif g[0] == g[1] and out:  # words, no token
            prev = out.pop()
            if prev[4] and out and not out[-1][4] and out[-1][2] < out[-1][3]:
                before = out.pop()
                prev = [before[0], prev[1], before[2], prev[3], False]
            out.append([prev[0], g[1], prev[2], g[3], False])
        elif out and out[-1][2] == out[-1][3]:  # the group before had a token but no word
            prev = out.pop()
            out.append([prev[0], g[1], g[2], g[3], False])
        else:
            out.append(g)
    if len(out) > 1 and out[0][0] == out[0][1]:  # words before any token: they join the group after
        first, second = out[0], out[1]
        out[:2] = [[second[0], second[1], first[2], second[3], False]]
    return [tuple(g) for g in out]  # type: ignore[misc]


def _trails(tokens: Sequence[str], a: int, b: int, closing: bool) -> bool:
    """Whether tokens ``a:b``, which write no word, belong to the word before them: they end
    the text of a stream that ended (``closing``; until then what follows decides), or the
    first is a unit of a number (``%``, ``°``, ``5 €``:
    :func:`streampunct.text.normalize.unit_symbol`; not ``$`` before ``20``)."""
    if b >= len(tokens):
        return closing
    return unit_symbol(_core(tokens[a]) or tokens[a], tokens[b])  # a token of text.split(): never empty


# -- writing ------------------------------------------------------------------------------------


#: SRT timestamps have two digits of hours: a cue must end before 100 hours (99:59:59,999).
SRT_MAX_S = 100 * 3600.0


def _timestamp(seconds: float, sep: str) -> str:
    ms = max(0, round(seconds * 1000))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def srt_time_error(seconds: float) -> str | None:
    """Why a time cannot be an SRT timestamp (100 hours or later), or None."""
    if round(seconds * 1000) < SRT_MAX_S * 1000:
        return None
    return (f"a time of {_timestamp(seconds, ',')} cannot be written in SRT (its timestamps end at 99:59:59,999); "
            "use --format vtt, or word times counted from the start of the stream")


def negative_time_error(seconds: float, fmt: str) -> str | None:
    """Why a word time cannot be placed in ``fmt`` subtitles (a time before 0: their
    timestamps start at 00:00:00), or None."""
    if seconds >= 0 or fmt not in ("srt", "vtt"):
        return None
    return (f"a word time of {seconds:g} s cannot be written in {fmt.upper()} (its timestamps start at 0); "
            "send word times counted from the start of the stream")


def vtt_escape(text: str) -> str:
    """Cue text as WebVTT reads it back: ``&``, ``<`` and ``>`` escaped (so a ``-->`` is too)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SubtitleWriter:
    """Writes cues in one format (``vtt``, ``srt``, ``jsonl``) to some text streams, cue by cue.

    Feed it finals (:meth:`add_final`: words and ``text``) or plain words
    (:meth:`add`); ``cues`` keeps every cue written. An SRT cue that ends at 100 hours or
    later raises :class:`~streampunct.errors.InputError` (:func:`srt_time_error`).
    """

    FORMATS = ("vtt", "srt", "jsonl")

    def __init__(self, fmt: str, outs: list[TextIO], builder: CueBuilder | None = None) -> None:
        if fmt not in self.FORMATS:
            raise ValueError(f"unknown subtitle format {fmt!r}")
        self.format = fmt
        self.outs = outs
        self.builder = builder or CueBuilder()
        self.pieces = FinalPieces()
        self.cues: list[Cue] = []
        if fmt == "vtt":
            self._write("WEBVTT\n\n")

    @property
    def count(self) -> int:
        return len(self.cues)

    @property
    def pending(self) -> bool:
        """Words are held for a cue not written yet."""
        return bool(self.builder.pending or self.pieces.pending)

    def _write(self, text: str) -> None:
        for out in self.outs:
            out.write(text)
            out.flush()

    def add(self, word: TimedWord) -> None:
        for cue in self.builder.add(word):
            self._cue(cue)

    def add_final(self, words: Sequence[TimedWord], text: str, held: int = 0) -> None:
        """One final: its words (spoken, with labels and times), its ``text`` and its ``held``
        (how many of the stream's last words a later final's text writes)."""
        for piece in self.pieces.add(words, text, held):
            for cue in self.builder.add_piece(piece):
                self._cue(cue)

    def flush(self) -> None:
        """Write the cue in progress now (the caption client calls it after a pause): the words
        the finals' texts have written; words a final held for a phrase wait for its text."""
        for piece in self.pieces.settle():
            for cue in self.builder.add_piece(piece):
                self._cue(cue)
        for cue in self.builder.flush():
            self._cue(cue)

    def close(self) -> None:
        """The end of the stream: every cue left, then those of the symbols no word took
        (:meth:`CueBuilder.alone`), so that a final shows in the subtitles as in the captions."""
        for piece in self.pieces.close():
            for cue in self.builder.add_piece(piece):
                self._cue(cue)
        for cue in self.builder.close():
            self._cue(cue)
        for cue in self.builder.alone(self.pieces.unplaced()):
            self._cue(cue)

    def _cue(self, cue: Cue) -> None:
        error = srt_time_error(cue.end) if self.format == "srt" else None
        earliest = min((w.start for w in cue.words if w.start is not None), default=0.0)
        error = error or negative_time_error(earliest, self.format)
        if error:
            raise InputError(f"subtitle cue {self.count + 1}: {error}")
        self.cues.append(cue)
        if self.format == "vtt":
            self._write(f"{_timestamp(cue.start, '.')} --> {_timestamp(cue.end, '.')}\n{vtt_escape(cue.text)}\n\n")
        elif self.format == "srt":
            self._write(f"{self.count}\n{_timestamp(cue.start, ',')} --> {_timestamp(cue.end, ',')}\n{cue.text}\n\n")
        else:
            record = {
                "start": round(cue.start, 3), "end": round(cue.end, 3), "text": " ".join(cue.lines),
                "lines": list(cue.lines),
                "words": [{"w": w.w, "p": ID_TO_MARK[w.label], "start": w.start, "end": w.end} for w in cue.words],
                "pieces": [{"text": p.text, "words": len(p.words), **({"written": True} if p.written else {})}
                           for p in cue.pieces],
            }
            self._write(json.dumps(record, ensure_ascii=False) + "\n")


# -- measuring cues --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CueStats:
    """How a list of cues keeps the rules (:func:`cue_stats`).

    Attributes:
        cues: how many.
        short: cues shown less than ``min_s`` (0.8 s), the last one not counted
            (the stream may end there).
        fast: cues read faster than ``max_cps`` (20 characters a second).
        max_cps: the fastest cue's characters a second.
        long_lines: lines longer than ``max_chars``; ``over_lines``: cues with more than ``max_lines``.
        name_breaks: cue boundaries inside a name (capitalized words side by side, no mark
            between, not a sentence start).
        span_breaks: cue boundaries inside the given spans (written forms, lexicon phrases).
        spans: how many spans were checked (those of more than one word).
        one_word_last_lines: cues of two or more lines whose last line is one word.
        lag_p95_s, lag_max_s: how long after its first word was spoken a cue starts (its first
            word after a pause longer than ``limits.max_duration_s`` inside it: :func:`said_from`).
        overlaps: cues that start before the previous one ended (or go back in time).
    """

    cues: int
    short: int
    fast: int
    max_cps: float
    long_lines: int
    over_lines: int
    name_breaks: int
    span_breaks: int
    spans: int
    one_word_last_lines: int
    lag_p95_s: float
    lag_max_s: float
    overlaps: int

    def format(self) -> str:
        def share(k: int) -> str:
            return f"{k} ({100.0 * k / self.cues:.1f}%)" if self.cues else "0"

        return (f"{self.cues} cues; under 0.8 s (but the last): {share(self.short)}; over 20 characters/s: "
                f"{share(self.fast)}, fastest {self.max_cps:.1f}/s; boundaries inside names: {self.name_breaks}, "
                f"inside written forms or lexicon phrases: {self.span_breaks} of {self.spans}; "
                f"one-word last lines: {self.one_word_last_lines}; lines over the limit: {self.long_lines}, "
                f"cues over the line limit: {self.over_lines}; overlapping cues: {self.overlaps}; "
                f"lag p95 {self.lag_p95_s:.2f} s, max {self.lag_max_s:.2f} s")


def cue_stats(cues: Sequence[Cue], spans: Iterable[tuple[int, int]] = (), *, min_s: float = 0.8,
              max_cps: float = 20.0, limits: CueLimits = CueLimits()) -> CueStats:
    """Check ``cues`` against the subtitle rules.

    ``spans``: ``(start, end)`` word indices (over the cues' words in order,
    end excluded) that no cue boundary may cut: written forms, lexicon phrases
    (:func:`phrase_spans`). Names are read from the cues' text.
    """
    short = fast = long_lines = over_lines = name_breaks = one_word = overlaps = 0
    fastest = 0.0
    lags = []
    prev_end = float("-inf")
    boundaries = set()
    n_words = 0
    for i, cue in enumerate(cues):
        if cue.duration < min_s - 1e-9 and i + 1 < len(cues):
            short += 1
        cps = cue.chars / cue.duration if cue.duration > 0 else float("inf")
        fastest = max(fastest, cps)
        fast += cps > max_cps + 1e-9
        long_lines += sum(len(line) > limits.max_chars for line in cue.lines)
        over_lines += len(cue.lines) > limits.max_lines
        one_word += len(cue.lines) > 1 and len(cue.lines[-1].split()) == 1
        overlaps += cue.start < prev_end - 1e-9 or cue.end < cue.start
        prev_end = cue.end
        if cue.words:
            lags.append(max(0.0, cue.start - said_from(cue.words, limits.max_duration_s)))
        n_words += len(cue.words)
        if i + 1 < len(cues):
            boundaries.add(n_words)
            nxt = cues[i + 1]
            a = cue.pieces[-1] if cue.pieces else None
            b = nxt.pieces[0] if nxt.pieces else None
            if a is not None and b is not None and a.label == O and _capitalized(a) and _capitalized(b):
                name_breaks += 1
    checked = [(s, e) for s, e in spans if e - s > 1]
    span_breaks = sum(1 for s, e in checked if any(s < k < e for k in range(s + 1, e) if k in boundaries))
    lags.sort()
    return CueStats(
        cues=len(cues), short=short, fast=fast, max_cps=round(fastest, 2), long_lines=long_lines,
        over_lines=over_lines, name_breaks=name_breaks, span_breaks=span_breaks, spans=len(checked),
        one_word_last_lines=one_word,
        lag_p95_s=round(lags[min(len(lags) - 1, int(0.95 * len(lags)))], 3) if lags else 0.0,
        lag_max_s=round(lags[-1], 3) if lags else 0.0, overlaps=overlaps,
    )


def phrase_spans(words: Sequence[str], labels: Sequence[int], formatter) -> list[tuple[int, int]]:
    """The phrases a :class:`~streampunct.text.written_form.Formatter` (lexicon, ITN) writes over a
    whole stream of spoken ``words`` and their labels, as ``(start, end)`` spans."""
    return [(p.start, p.end) for p in formatter.phrases(list(words), list(labels)) if p.text]


def read_cues_jsonl(lines: Iterable[str], source: str = "cues") -> list[Cue]:
    """Cues from ``caption --format jsonl`` output (a record without pieces: one a word); an
    :class:`~streampunct.errors.InputError` naming ``source`` and the line for one that is not."""
    cues = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            raise InputError(f"{source}:{lineno}: not a cue of caption --format jsonl (a JSON object a line; "
                             "SRT and WebVTT files are not read here)")
        try:
            words = tuple(TimedWord(w["w"], ID_TO_MARK.index(w["p"]), float(w["start"]), float(w["end"]))
                          for w in record["words"])
            shown = record.get("pieces") or [{"text": w.w + ID_TO_MARK[w.label], "words": 1} for w in words]
            pieces, k = [], 0
            for item in shown:
                pieces.append(Piece(item["text"], words[k:k + item["words"]], bool(item.get("written"))))
                k += item["words"]
            cues.append(Cue(float(record["start"]), float(record["end"]),
                            tuple(record.get("lines") or [record["text"]]), words, tuple(pieces)))
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
            what = f"no {e}" if isinstance(e, KeyError) else str(e)
            raise InputError(f"{source}:{lineno}: not a cue of caption --format jsonl ({what})") from None
    return cues


# -- command line: python -m streampunct.client.subtitles CUES.jsonl -----------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Check cues written by ``streampunct caption --format jsonl``: print :func:`cue_stats`."""
    p = argparse.ArgumentParser(prog="python -m streampunct.client.subtitles",
                                description="check subtitle cues (caption --format jsonl) against the rules")
    p.add_argument("cues", help="JSON lines of cues, as caption --format jsonl writes them")
    p.add_argument("--lexicon", metavar="FILE", default=None,
                   help="also check that no cue boundary cuts a phrase of this lexicon (spoken<TAB>written)")
    p.add_argument("--itn", action="store_true",
                   help="also check that no cue boundary cuts a written number, date, time or money phrase "
                        "as the ITN grammars read the cues' words (the itn extra)")
    p.add_argument("--itn-cache", metavar="DIR", default=None, help="where the compiled grammars are cached")
    args = p.parse_args(argv)
    if args.itn_cache is not None and not args.itn_cache.strip():  # as the commands' path arguments
        p.error("argument --itn-cache: expected a path, got an empty string")
    from pathlib import Path

    from streampunct.text.textfile import read_text, split_lines
    from streampunct.text.written_form import Formatter, Lexicon, parse_lexicon_tsv

    try:
        cues = read_cues_jsonl(split_lines(read_text(args.cues)), args.cues)
        pairs = parse_lexicon_tsv(read_text(args.lexicon), source=args.lexicon) if args.lexicon else ()
    except (InputError, ValueError) as e:
        p.error(str(e))
    words = [w for c in cues for w in c.words]
    normalizer = None
    if args.itn:
        from streampunct.text.itn import load_normalizer

        normalizer = load_normalizer(Path(args.itn_cache) if args.itn_cache is not None else None)
    spoken, labels = [w.w.lower() for w in words], [w.label for w in words]
    kinds = {"lexicon phrases": Formatter(Lexicon(pairs)) if pairs else None,
             "written numbers, dates, times, money": Formatter(Lexicon(), normalizer) if normalizer else None}
    spans = {kind: phrase_spans(spoken, labels, f) for kind, f in kinds.items() if f is not None}
    print(cue_stats(cues, [s for found in spans.values() for s in found]).format())
    for kind, found in spans.items():
        stats = cue_stats(cues, found)
        print(f"{kind}: {stats.spans} of more than one word, {stats.span_breaks} cut by a cue boundary")
    return 0


if __name__ == "__main__":
    sys.exit(main())
