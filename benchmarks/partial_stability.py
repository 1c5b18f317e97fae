"""Interim stability: how often what a client's partials show for a word changes before its final.

A client shows, for each word, the mark (and written case) of the latest
``partial`` that covered it, until the word's ``final`` replaces it. This
module counts, from the messages one session received (in order):

- ``words_shown``: final words that some partial showed before their final;
- ``last_partial_correct``: of those, the words whose LAST partial showing
  them gave the same mark and written form (case) as their final;
- ``changes``: visible changes: a partial showing a word with another mark or
  form than the previous partial that showed it (``changes_in_partials``),
  plus a final that differs from the last partial that showed the word
  (``changes_at_final``: the user sees it flip too).

:func:`early_marks` counts, of the final marks (``,``, ``.``, ``?``) of shown words, those
the last partial already showed: what holding back a mark in partials costs
(``serve --partial-mark-threshold``; :mod:`benchmarks.partial_threshold`).

Which words a partial shows: ``words`` are indices ``start ..``; those already
final when the partial arrives are dropped (a client drops them too). The
``hypothesis`` words follow the committed ones: hypothesis word ``j`` stands
for index ``start + len(words) + j``, and counts for that index only when it
is the word later finalized there (an ASR that revises its interim words shows
other words, which are not the same word changing its mark). A partial that
does not show a word (a cleared hypothesis) changes nothing for it.

Written forms come from each message's ``text`` (:func:`streampunct.client.stream_client.written_forms`);
with ``capitalize`` off they are the lowercase words and only marks can differ.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from streampunct.client.stream_client import written_forms
from streampunct.core.wire import Final, Partial, PunctuatedWord


@dataclass(frozen=True)
class Stability:
    """Counts over one or more sessions; add them with ``+``."""

    words: int = 0  # final words
    words_shown: int = 0  # final words some partial showed before their final
    last_partial_correct: int = 0  # of those, the last partial equals the final (mark and form)
    changes_in_partials: int = 0
    changes_at_final: int = 0

    def __add__(self, other: Stability) -> Stability:
        return Stability(*(a + b for a, b in zip(self.astuple(), other.astuple(), strict=True)))

    def astuple(self) -> tuple[int, ...]:
        return (self.words, self.words_shown, self.last_partial_correct, self.changes_in_partials,
                self.changes_at_final)

    @property
    def changes(self) -> int:
        return self.changes_in_partials + self.changes_at_final

    @property
    def last_partial_accuracy(self) -> float | None:
        """Percent of shown words whose last partial equals their final (None: none shown)."""
        return 100.0 * self.last_partial_correct / self.words_shown if self.words_shown else None

    @property
    def changes_per_100_words(self) -> float | None:
        return 100.0 * self.changes / self.words if self.words else None

    def to_dict(self) -> dict:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 2)

        return {"words": self.words, "words_shown_in_partials": self.words_shown,
                "last_partial_correct": self.last_partial_correct,
                "last_partial_accuracy": r(self.last_partial_accuracy),
                "changes": self.changes, "changes_in_partials": self.changes_in_partials,
                "changes_at_final": self.changes_at_final,
                "changes_per_100_words": r(self.changes_per_100_words)}


def partial_stability(messages: Iterable[object]) -> Stability:
    """Count :class:`Stability` over one session's messages, in the order received.

    Messages other than ``final`` and ``partial`` are ignored. Finals must be
    contiguous from index 0, as the protocol guarantees.
    """
    words = shown_count = correct = in_partials = at_final = 0
    for event in _walk(messages):
        if event is None:
            in_partials += 1
            continue
        word, form, last = event
        words += 1
        if last is not None:
            shown_count += 1
            if last == (word.p, form):
                correct += 1
            else:
                at_final += 1
    return Stability(words, shown_count, correct, in_partials, at_final)


@dataclass(frozen=True)
class EarlyMarks:
    """Final marks a partial showed in time (what holding back unsure marks costs); add with ``+``.

    ``marks``: final words with a mark (``,``, ``.``, ``?``) that some partial showed before
    their final; ``shown_early``: of those, the words whose last partial showed that same mark
    (case not compared).
    """

    marks: int = 0
    shown_early: int = 0

    def __add__(self, other: EarlyMarks) -> EarlyMarks:
        return EarlyMarks(self.marks + other.marks, self.shown_early + other.shown_early)

    @property
    def share(self) -> float | None:
        """Percent of the final marks (of shown words) that the last partial already showed."""
        return 100.0 * self.shown_early / self.marks if self.marks else None

    def to_dict(self) -> dict:
        share = self.share
        return {"final_marks_shown_in_partials": self.marks, "shown_early": self.shown_early,
                "shown_early_percent": None if share is None else round(share, 2)}


def early_marks(messages: Iterable[object]) -> EarlyMarks:
    """Count :class:`EarlyMarks` over one session's messages, in the order received (as
    :func:`partial_stability`)."""
    marks = early = 0
    for event in _walk(messages):
        if event is None:
            continue
        word, _, last = event
        if last is not None and word.p:
            marks += 1
            early += last[0] == word.p
    return EarlyMarks(marks, early)


def _walk(messages: Iterable[object]) -> Iterator[tuple[PunctuatedWord, str, tuple[str, str] | None] | None]:
    """What a client sees, in order: None for each change in partials; for each final word,
    ``(word, written form, (mark, form) of the last partial that showed it, or None)``."""
    shown: dict[int, tuple[str, str, str]] = {}  # index -> (w, p, written form) last shown
    n_final = 0
    for message in messages:
        if isinstance(message, Final):
            if message.start != n_final:
                raise ValueError(f"final for words from {message.start}, but {n_final} words are final")
            for k, (word, form) in enumerate(zip(message.words, written_forms(message), strict=True)):
                last = shown.pop(message.start + k, None)
                yield word, form, last[1:] if last is not None and last[0] == word.w else None
            n_final += len(message.words)
        elif isinstance(message, Partial):
            span = Final(message.start, tuple(message.words) + tuple(message.hypothesis), message.text)
            forms = written_forms(span)
            for k, (word, form) in enumerate(zip(span.words, forms, strict=True)):
                index = message.start + k
                if index < n_final:
                    continue
                view = (word.w, word.p, form)
                before = shown.get(index)
                if before is not None and before[0] == view[0] and before[1:] != view[1:]:
                    yield None
                shown[index] = view  # another word at this index (a revised hypothesis) starts afresh


def total(parts: Sequence[Stability]) -> Stability:
    out = Stability()
    for part in parts:
        out = out + part
    return out
