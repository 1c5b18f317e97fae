"""What a reader sees in ``text``: capitals after a word with no mark, and spacing faults.

Used by ``bench live --capitalize`` to compare the stream's finals with the offline decoder on
the same words (docs/results.md, "The stream against offline").

- A *capital after no mark* is a word that starts with an upper-case letter although the word
  before it ends without ``.``, ``?`` or ``!``: a sentence capital where no sentence ended. The
  pronoun "I" (and "I'm", "I've", ...) does not count; names do, on both sides alike, so the
  comparison is stream against offline, not against a gold standard.
- A *spacing fault* is two spaces in a row, a space at either end of a final's ``text``, or a
  space before ``,`` ``.`` ``?`` ``!``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_PRONOUN_I = re.compile(r"^I(?:'(?:m|ve|d|ll|s))?\W*$")
_SENTENCE_END = (".", "?", "!")
_SPACE_FAULT = re.compile(r"  | [,.?!]")


@dataclass(frozen=True)
class TextChecks:
    words: int
    capitals_after_no_mark: int
    spacing_faults: int
    examples: tuple[str, ...] = ()

    @property
    def capitals_per_1000(self) -> float:
        return 1000.0 * self.capitals_after_no_mark / self.words if self.words else 0.0

    def to_dict(self) -> dict:
        return {"words": self.words, "capitals_after_no_mark": self.capitals_after_no_mark,
                "capitals_after_no_mark_per_1000_words": round(self.capitals_per_1000, 3),
                "spacing_faults": self.spacing_faults, "examples": list(self.examples)}


def capitals_after_no_mark(tokens: list[str], limit: int = 10) -> tuple[int, list[str]]:
    """Count of tokens with a sentence capital after a token without a sentence mark, and up
    to ``limit`` examples (the two words)."""
    count, examples = 0, []
    for prev, tok in zip(tokens, tokens[1:], strict=False):
        if tok[:1].isupper() and not prev.endswith(_SENTENCE_END) and not _PRONOUN_I.match(tok):
            count += 1
            if len(examples) < limit:
                examples.append(f"{prev} {tok}")
    return count, examples


def spacing_faults(pieces: Iterable[str]) -> int:
    """Spacing faults in each piece of text (a final's ``text``; or one whole text)."""
    faults = 0
    for piece in pieces:
        if not piece:
            continue
        faults += len(_SPACE_FAULT.findall(piece)) + (piece != piece.strip())
    return faults


def join_pieces(pieces: Iterable[str]) -> str:
    """Texts that follow one another, as a reader sees them: a piece that opens with a clitic
    (``'s``, ``n't``: a final can start with one) joins the word before it."""
    from streampunct.text.normalize import CLITICS

    out = ""
    for piece in pieces:
        if not piece:
            continue
        first = piece.split(" ", 1)[0].rstrip(",.?!").lower()
        out += piece if not out or first in CLITICS else " " + piece
    return out


def check_texts(pieces: Iterable[str]) -> TextChecks:
    """The checks over texts that follow one another (a stream's finals, or offline segments)."""
    pieces = list(pieces)
    tokens = join_pieces(pieces).split()
    count, examples = capitals_after_no_mark(tokens)
    return TextChecks(len(tokens), count, spacing_faults(pieces), tuple(examples))


def capital_positions(tokens: list[str]) -> set[int]:
    """Indices of the tokens :func:`capitals_after_no_mark` counts."""
    return {i + 1 for i, (prev, tok) in enumerate(zip(tokens, tokens[1:], strict=False))
            if tok[:1].isupper() and not prev.endswith(_SENTENCE_END) and not _PRONOUN_I.match(tok)}


def compare_capitals(stream_pieces: Iterable[str], offline_pieces: Iterable[str], limit: int = 10) -> dict | None:
    """Capitals after no mark that only one side writes, word for word (None when the two texts
    do not have the same number of tokens, e.g. with written forms on)."""
    a = join_pieces(stream_pieces).split()
    b = join_pieces(offline_pieces).split()
    if len(a) != len(b):
        return None
    only_stream = sorted(capital_positions(a) - capital_positions(b))
    only_offline = sorted(capital_positions(b) - capital_positions(a))
    n = len(a) or 1
    return {"stream_only": len(only_stream), "offline_only": len(only_offline),
            "stream_only_per_1000_words": round(1000 * len(only_stream) / n, 3),
            "offline_only_per_1000_words": round(1000 * len(only_offline) / n, 3),
            "stream_only_examples": [f"{a[i - 1]} {a[i]} (offline: {b[i - 1]} {b[i]})" for i in only_stream[:limit]]}



def check_sessions(sessions: Iterable[Iterable[str]]) -> TextChecks:
    """:func:`check_texts` of each session's texts apart, summed: a session's first word opens a
    sentence whatever the session before ended with (a stream ends with a flush, whose last
    word takes no forced mark), so no capital is counted across two sessions."""
    parts = [check_texts(texts) for texts in sessions]
    examples = tuple(e for part in parts for e in part.examples)[:10]
    return TextChecks(sum(p.words for p in parts), sum(p.capitals_after_no_mark for p in parts),
                      sum(p.spacing_faults for p in parts), examples)


def compare_capitals_by_session(stream_sessions: Iterable[Iterable[str]], offline_sessions: Iterable[Iterable[str]],
                                limit: int = 10) -> dict | None:
    """:func:`compare_capitals` session by session, summed (None when one session's two texts do
    not have the same number of tokens)."""
    parts = [compare_capitals(a, b, limit) for a, b in zip(stream_sessions, offline_sessions, strict=True)]
    if not parts or any(p is None for p in parts):
        return None
    n = sum(len(join_pieces(a).split()) for a in stream_sessions) or 1
    only_stream, only_offline = sum(p["stream_only"] for p in parts), sum(p["offline_only"] for p in parts)
    return {"stream_only": only_stream, "offline_only": only_offline,
            "stream_only_per_1000_words": round(1000 * only_stream / n, 3),
            "offline_only_per_1000_words": round(1000 * only_offline / n, 3),
            "stream_only_examples": [e for p in parts for e in p["stream_only_examples"]][:limit]}
