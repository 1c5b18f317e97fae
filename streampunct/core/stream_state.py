"""Per-stream state of the streaming punctuator: pure, no I/O, no clock.

The caller (the server's session handler, or a test) feeds words with the
current time, asks for the next model call, runs it anywhere it likes and
hands the logits back. The state says which words became final. A word is
*decidable* at the first of: ``right_context`` more words have arrived after
it; ``max_delay_ms`` have passed since it arrived; a flush or the end of the
stream (the contract's one definition is :func:`streampunct.core.latency.decidable_times`;
this state decides the same online, whenever it is asked). Decidable words form a prefix of the stream, and they are finalized
in order, each once.

**Labels depend on the arrival schedule only, never on timing.** The words
that became decidable at one event (one arrival, one delay deadline, one
flush) form a *decision*; each decision is decided by its own windows, with
at least ``window.left`` tokens of left context before its first word (less
only at the stream start) and, as right context, the words that had arrived
by then and nothing later (``right_context`` words, or fewer after a delay
deadline or a flush). Events are told apart by their order, not by the
clock: a loop clock that moves once a millisecond reads one time for a flush
and the words sent right after it, which are still not the flush's. So a server that falls behind, and runs a
decision long after it became due, builds the same window as a simulation
that runs it at once: the same arrival schedule gives the same labels
(given an engine whose rows do not depend on the rest of the batch). Several
words per window come from the schedule (a chunk of words, a flush), not
from how late the server is.

The end of a stream (:meth:`StreamState.end`) ends its sentence: if the last
word was not yet decidable when ``end`` came, its final gets a sentence mark
(see :func:`streampunct.labels.end_of_stream_label`). A flush does not.

One request per stream is in flight at a time; decisions run in order.

A stream may start in the middle (:meth:`StreamState.resume`, the protocol's
``resume``): the last final words before it come back as already-final
left context. When they cover a window's left context (``window.left``
tokens), the windows after the cut are the ones the uninterrupted stream
would have built for the same arrival schedule.

Memory stays bounded on long streams: words well behind the last final (more
than ``KEEP_WORDS`` back, and outside any window's left context) are dropped;
word indices stay global.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engines.base import HeadLogits
from streampunct.core.alignment import Aligner
from streampunct.core.options import SessionOptions
from streampunct.core.windowing import TokenLayout, WindowConfig, select_window
from streampunct.labels import (
    CAPITALIZED,
    CASE_LABELS,
    LABELS,
    LOWER,
    PARTIAL_MARK_THRESHOLD,
    PERIOD,
    QUESTION,
    O,
    case_classes,
    check_case_margin,
    check_partial_mark_threshold,
    end_of_stream_label,
)


@dataclass(frozen=True, eq=False)
class WindowRequest:
    """One model call for one stream.

    Attributes:
        input_ids: int64[T], CLS + content tokens + SEP, unpadded.
        positions: int64[k], index into ``input_ids`` of each word's label token.
        first_word: stream index of the first word the call labels.
        partial: True for provisional labels of the undecided tail.
        hypothesis: (partial requests only) the interim hypothesis words that
            followed the committed words when the request was made.
        hypothesis_from: the labels of ``hypothesis[hypothesis_from:]`` come
            last in ``positions``; earlier hypothesis words did not fit the
            window and get no mark.
        token_start: the stream's global index of the token at
            ``input_ids[1]`` (-1: unknown, a request built by hand).
        decide_from, decide_to: rows of ``input_ids`` from the first decided
            (for a partial: provisional) word's first token to just after the
            last one's last token (what :mod:`streampunct.core.stream_cache` keeps
            of a final request; a partial's new tokens start at ``decide_from``
            when the cache ends just before it).
    """

    input_ids: np.ndarray
    positions: np.ndarray
    first_word: int
    partial: bool
    hypothesis: tuple[str, ...] = ()
    hypothesis_from: int = 0
    token_start: int = -1
    decide_from: int = 0
    decide_to: int = 0

    @property
    def n_words(self) -> int:
        return len(self.positions)


@dataclass(frozen=True)
class Decision:
    """A label for word ``index`` of the stream (label is a class id); ``case``: the
    truecasing head's class (``streampunct.labels.CASE_LABELS``), None without one."""

    index: int
    word: str
    label: int
    case: int | None = None


def hold_back_marks(logits: np.ndarray, labels: np.ndarray, cases: np.ndarray | None,
                    threshold: float) -> tuple[np.ndarray, np.ndarray | None]:
    """A partial's shown labels and case classes: each word's mark (``labels``, the argmax of
    its row of punctuation ``logits``, float[n, C]) where the model's probability of it is at
    least ``threshold``, else ``O``. ``cases`` (the truecasing head's classes, or None) lose
    the capital of a word right after a held-back period or question mark (CAPITALIZED becomes
    LOWER: the head learned sentence-initial capitals, and the sentence is not shown to end).
    Returns ``(labels, cases)`` as new arrays; threshold 0 returns them unchanged. Pure.
    """
    labels = np.asarray(labels)
    if threshold <= 0 or not len(labels):
        return labels, cases
    rows = np.asarray(logits, dtype=np.float64)
    rows = np.exp(rows - rows.max(axis=-1, keepdims=True))
    probability = rows[np.arange(len(labels)), labels] / rows.sum(axis=-1)
    held = (labels != O) & (probability < threshold)
    shown = np.where(held, O, labels)
    if cases is not None:
        cases = np.asarray(cases)
        after = np.zeros(len(labels), dtype=bool)
        after[1:] = held[:-1] & ((labels[:-1] == PERIOD) | (labels[:-1] == QUESTION))
        cases = np.where(after & (cases == CAPITALIZED), LOWER, cases)
    return shown, cases


#: Final words kept behind the last final (for left context and late lookups).
KEEP_WORDS = 1024
#: Compact when this many words could be dropped.
COMPACT_EVERY = 4096


class StreamState:
    """Words, their tokens and timing, and what has been finalized.

    Indices in the API (``Decision.index``, ``first_word``, ``decidable_at``)
    count all words of the stream; internally lists start at ``_base``.
    ``case_margin``: the truecasing head's margin for capitals, applied to finals and
    partials alike (:func:`streampunct.labels.case_classes`; the model folder's ``case_margin``).
    ``partial_mark_threshold``: partials show a provisional word's mark only when the model's
    probability of it is at least this (:func:`hold_back_marks`; 0: every mark); finals are the
    argmax whatever it is. ValueError unless 0 <= it < 1.
    """

    def __init__(self, aligner: Aligner, window: WindowConfig, stream: SessionOptions, *,
                 case_margin: float = 0.0, partial_mark_threshold: float = PARTIAL_MARK_THRESHOLD) -> None:
        self.aligner = aligner
        #: the truecasing head's margin for capitals (:func:`streampunct.labels.case_classes`)
        self.case_margin = check_case_margin(case_margin)
        #: the probability a partial's mark needs to be shown (:func:`hold_back_marks`)
        self.partial_mark_threshold = check_partial_mark_threshold(partial_mark_threshold)
        self.window = window
        self.stream = stream
        self.words: list[str] = []
        self._ids: list[int] = []
        self._layout = TokenLayout([], [], [])
        self._arrival: list[float] = []
        # For the decidable prefix, each word's decision: (when, its number, how many stream
        # words had arrived by then). Decisions are told apart by their order and the count,
        # not the time, bounds their right context: on a coarse clock (a loop whose time
        # moves once a millisecond) words fed right after a flush are not the flush's.
        self._decided: list[tuple[float, int, int]] = []
        self._n_decisions = 0
        self._base = 0  # global index of self.words[0]
        self._token_base = 0  # tokens dropped with those words
        self._requested = 0  # local: words < this are final or in the in-flight request
        self._n_final = 0  # local
        self._in_flight: WindowRequest | None = None
        self._partial_key: tuple[int, int, int] | None = None
        self._flushed: list[tuple[int, int]] = []  # [a, b) stream indices made decidable by flushes
        self._ended = False
        self._mark_last = False  # end() came while the last word was not yet decidable
        self.last_partial: list[Decision] = []
        # Interim hypothesis (see "interim hypothesis" below).
        self._hypothesis: tuple[str, ...] = ()
        self._hypothesis_ids: list[tuple[int, ...]] = []
        self._hypothesis_version = 0
        self.last_hypothesis: list[tuple[str, int]] = []
        # the truecasing head's class of each of them (None: no head, or not labeled)
        self.last_hypothesis_cases: list[int | None] = []

    # -- input ---------------------------------------------------------------
    @property
    def n_words(self) -> int:
        """Words received so far (all of the stream)."""
        return self._base + len(self.words)

    @property
    def n_final(self) -> int:
        """Words finalized so far (a prefix of the stream)."""
        return self._base + self._n_final

    @property
    def in_flight(self) -> WindowRequest | None:
        return self._in_flight

    @property
    def done(self) -> bool:
        return self._n_final == len(self.words)

    @property
    def ended(self) -> bool:
        """True after :meth:`end`: no more words come."""
        return self._ended

    def feed(self, words: Sequence[str], now: float) -> None:
        """Append normalized, non-empty words that arrived at ``now``."""
        if self._ended:
            raise ValueError("the stream has ended; no more words")
        self._advance_by_delay(now)  # deadlines that passed before these words came
        self._append(words, now)
        self._mark_decidable(len(self.words) - self.stream.right_context, now)
        # Also with a request in flight: a stream fed faster than real time always has one.
        if self._n_final - KEEP_WORDS >= COMPACT_EVERY:
            self._compact()

    def _append(self, words: Sequence[str], now: float) -> None:
        """Words (normalized, non-empty) onto the stream's words, tokens and layout."""
        for word in words:
            if not word:
                raise ValueError("empty word (normalize and drop empty words first)")
            ids = self.aligner.word_ids(word)
            self.words.append(word)
            self._ids.extend(ids)
            self._layout.append(len(ids), self.aligner.label_offset(len(ids)))
            self._arrival.append(now)

    def resume(self, start: int, context: Sequence[str], now: float) -> None:
        """Continue a stream at word ``start`` (protocol ``resume``), on a fresh state.

        ``context`` (normalized, non-empty words) are the final words just
        before ``start``: they are held as already final, so they serve as the
        left context of the next windows and are never decided again; the
        next word fed takes index ``start``. Token positions start anew (a
        stream cache starts empty, so the first window after a resume is a
        whole one).
        """
        if self.words or self._base or self._hypothesis or self._ended:
            raise ValueError("resume() needs a fresh stream state")
        if len(context) > start:
            raise ValueError(f"{len(context)} context words, but only {start} come before word {start}")
        self._base = start - len(context)
        self._append(context, now)
        self._mark_decidable(len(self.words), now)
        self._requested = self._n_final = len(context)

    def _compact(self) -> None:
        """Drop old final words that no window can need any more."""
        lay = self._layout
        keep_from = self._n_final - KEEP_WORDS
        if self._in_flight is not None:  # its words are looked up when it comes back
            keep_from = min(keep_from, self._in_flight.first_word - self._base)
        # Never cut into the left context of the next undecided word.
        need = lay.label_pos[self._requested] - self.window.left - 1 if self._requested < len(self.words) else None
        while need is not None and keep_from > 0 and lay.starts[keep_from] > need:
            keep_from -= 1
        if keep_from <= 0:
            return
        tok = lay.starts[keep_from]
        del self.words[:keep_from], self._arrival[:keep_from], self._decided[:keep_from]
        del self._ids[:tok]
        self._layout = type(lay)(
            [x - tok for x in lay.starts[keep_from:]],
            [x - tok for x in lay.ends[keep_from:]],
            [x - tok for x in lay.label_pos[keep_from:]],
        )
        self._base += keep_from
        self._token_base += tok
        self._requested -= keep_from
        self._n_final -= keep_from
        self._flushed = [(a, b) for a, b in self._flushed if b > self._base + self._n_final]

    def flush(self, now: float) -> None:
        """Every word that has arrived becomes decidable now."""
        self._advance_by_delay(now)
        if len(self._decided) < len(self.words):
            self._flushed.append((self._base + len(self._decided), self._base + len(self.words)))
        self._mark_decidable(len(self.words), now)

    def decided_by_flush(self, index: int) -> bool:
        """Did word ``index`` (a stream index) become decidable by a flush or the end (not
        by right context or a delay deadline)? For words not older than the last final."""
        return any(a <= index < b for a, b in self._flushed)

    def end(self, now: float) -> None:
        """The stream ends: a flush, and the last word will get a sentence mark.

        The mark goes to the last word when it was not yet decidable at ``now``
        (its decision is this end), whenever its window runs; a word decided
        earlier (by right context, delay or a flush) keeps its label, so the
        mark does not depend on how fast the server is.
        """
        self._advance_by_delay(now)
        self._mark_last = len(self._decided) < len(self.words)
        self.flush(now)
        self._ended = True

    def _mark_decidable(self, upto: int, when: float) -> None:
        """Words up to ``upto`` (local) are decidable at ``when``: one decision, knowing every
        word fed so far."""
        if len(self._decided) < upto:
            self._n_decisions += 1
        decision = (when, self._n_decisions, self._base + len(self.words))
        while len(self._decided) < upto:
            self._decided.append(decision)

    def _advance_by_delay(self, now: float) -> None:
        delay = self.stream.max_delay_ms / 1000.0
        n = len(self._decided)
        while n < len(self.words) and self._arrival[n] + delay <= now:
            deadline = self._arrival[n] + delay
            if not self._decided or self._decided[-1][0] != deadline:  # words of one arrival: one decision
                self._n_decisions += 1
            # knowing the words fed by the deadline (before this call's words, if any)
            known = self._base + bisect.bisect_right(self._arrival, deadline)
            self._decided.append((deadline, self._n_decisions, known))
            n += 1

    def n_decidable(self, now: float) -> int:
        """How many words (a prefix of the stream) are decidable at ``now``."""
        self._advance_by_delay(now)
        return self._base + len(self._decided)

    def right_context(self, index: int) -> list[str]:
        """The words after ``index`` that had arrived when it became decidable and are not
        final: what its decision saw on the right (``index`` is a just-finalized word)."""
        known = self._decided[self._local(index)][2] - self._base
        return self.words[max(self._local(index) + 1, self._n_final):known]

    def decidable_at(self, index: int) -> float:
        """When word ``index`` (a stream index) became decidable.

        The word must be decidable and not older than the kept final words
        (``KEEP_WORDS`` behind the last final): callers look up words they
        have just finalized.
        """
        return self._decided[self._local(index)][0]

    def arrival(self, index: int) -> float:
        """When word ``index`` (a stream index) arrived."""
        return self._arrival[self._local(index)]

    def _local(self, index: int) -> int:
        local = index - self._base
        if not 0 <= local < len(self.words):
            raise IndexError(
                f"word {index} is not held (held: {self._base}..{self._base + len(self.words) - 1})"
            )
        return local

    def next_deadline(self) -> float | None:
        """When the first not-yet-decidable word becomes decidable by delay."""
        n = len(self._decided)
        if n >= len(self.words):
            return None
        return self._arrival[n] + self.stream.max_delay_ms / 1000.0

    # -- model calls ---------------------------------------------------------
    def next_request(self, now: float, *, partial: bool = False, finals: bool = True) -> WindowRequest | None:
        """The next model call: final work first (unless ``finals`` is false), then (if
        asked) a partial.

        None while a request is in flight or when there is nothing to do.
        """
        if self._in_flight is not None:
            return None
        n_dec = self.n_decidable(now) - self._base
        if finals and self._requested < n_dec:
            # The next decision: the words that became decidable when the first pending one
            # did, with the words that had arrived by then as right context.
            decision = self._decided[self._requested]
            last = bisect.bisect_right(self._decided, decision, self._requested, n_dec) - 1
            n_known = max(decision[2] - self._base, last + 1)
            w = select_window(self._layout, self._requested, last, n_known, self.window)
            request = self._make_request(w.token_start, w.token_end, w.first_word, w.last_word, False)
            self._requested = w.last_word + 1
            self._in_flight = request
            return request
        if partial and (self._requested < len(self.words) or self._hypothesis):
            key = (self.n_final, self.n_words, self._hypothesis_version)
            if key == self._partial_key:
                return None
            request = self._partial_request()
            self._partial_key = key
            self._in_flight = request
            return request
        return None

    def _partial_request(self) -> WindowRequest:
        """Provisional labels for the undecided tail followed by the hypothesis."""
        n = len(self.words)
        lay, ids, lo = self._layout_with_hypothesis()
        total = len(lay)
        first = self._requested - lo
        # Keep the end of the tail if it is longer than one window can hold (its left context
        # counted: it is measured from the first word's label token, so a long first word
        # takes more than ``left`` tokens before the tail).
        while lay.ends[total - 1] - lay.starts[first] > self.window.size - self.window.left and first < total - 1:
            first += 1
        w = select_window(lay, first, total - 1, total, self.window)
        while lay.ends[total - 1] - w.token_start > self.window.size and first < total - 1:
            first += 1
            w = select_window(lay, first, total - 1, total, self.window)
        a, b = w.token_start, lay.ends[total - 1]
        request_ids = np.asarray([self.aligner.cls_id, *ids[a:b], self.aligner.sep_id], dtype=np.int64)
        positions = np.asarray(lay.label_pos[first:total], dtype=np.int64) - a + 1
        base = self._layout.starts[lo] if n else 0  # ``ids`` starts at this token of ``self._ids``
        return WindowRequest(
            request_ids, positions, self._base + min(first + lo, n), True,
            hypothesis=self._hypothesis, hypothesis_from=max(0, first + lo - n),
            token_start=self._token_base + base + a, decide_from=lay.starts[first] - a + 1,
            decide_to=len(request_ids) - 1,
        )

    def _make_request(self, a: int, b: int, first: int, last: int, partial: bool) -> WindowRequest:
        a_ids = self.aligner
        ids = np.empty(b - a + 2, dtype=np.int64)
        ids[0] = a_ids.cls_id
        ids[1:-1] = self._ids[a:b]
        ids[-1] = a_ids.sep_id
        lay = self._layout
        positions = np.asarray(lay.label_pos[first : last + 1], dtype=np.int64) - a + 1
        return WindowRequest(ids, positions, self._base + first, partial, token_start=self._token_base + a,
                             decide_from=lay.starts[first] - a + 1, decide_to=lay.ends[last] - a + 1)

    @staticmethod
    def checked_heads(request: WindowRequest, logits: HeadLogits | np.ndarray) -> HeadLogits:
        """``logits`` as :class:`~engines.base.HeadLogits`; ValueError unless they cover the
        request's tokens with the punctuation classes (and a case head's 4, if any)."""
        heads = logits if isinstance(logits, HeadLogits) else HeadLogits(logits, None)
        punctuation, case = np.asarray(heads.punctuation), heads.case
        if punctuation.ndim != 2 or punctuation.shape[0] < len(request.input_ids):
            raise ValueError(
                f"logits of shape {punctuation.shape} do not cover the request's "
                f"{len(request.input_ids)} tokens"
            )
        if punctuation.shape[1] != len(LABELS):
            raise ValueError(f"punctuation logits have {punctuation.shape[1]} classes, not {len(LABELS)} "
                             "(a truecasing head's logits come apart: HeadLogits)")
        if case is not None and (np.ndim(case) != 2 or np.shape(case)[0] < len(request.input_ids)
                                 or np.shape(case)[1] != len(CASE_LABELS)):
            raise ValueError(f"case logits of shape {np.shape(case)} do not cover the request's "
                             f"{len(request.input_ids)} tokens with {len(CASE_LABELS)} classes")
        return heads

    def apply(self, request: WindowRequest, logits: HeadLogits | np.ndarray) -> list[Decision]:
        """Take the model's logits for ``request``; return new finals.

        ``logits``: over the request's rows, a :class:`~engines.base.HeadLogits`
        (punctuation float32[T, C] and a truecasing head's float32[T, 4], or None), or
        the punctuation logits alone (float32[T, C]).
        For a partial request the provisional labels go to ``last_partial``
        and the return value is empty; with a ``partial_mark_threshold``, they are the
        labels a partial shows (:func:`hold_back_marks`), never used for a final.
        """
        if request is not self._in_flight:
            raise ValueError("apply() got a request that is not in flight for this stream")
        heads = self.checked_heads(request, logits)
        punctuation = heads.punctuation
        self._in_flight = None
        labels = np.argmax(punctuation[request.positions], axis=-1)
        cases = None if heads.case is None else case_classes(heads.case[request.positions], self.case_margin)
        if request.partial and self.partial_mark_threshold > 0:
            labels, cases = hold_back_marks(punctuation[request.positions], labels, cases,
                                            self.partial_mark_threshold)
        first = request.first_word - self._base
        n_committed = len(labels) - (len(request.hypothesis) - request.hypothesis_from)
        decisions = [
            Decision(request.first_word + k, self.words[first + k], int(label),
                     None if cases is None else int(cases[k]))
            for k, label in enumerate(labels[:n_committed])
        ]
        if request.partial:
            hyp_labels = [0] * request.hypothesis_from + [int(x) for x in labels[n_committed:]]
            self.last_hypothesis = list(zip(request.hypothesis, hyp_labels, strict=True))
            self.last_hypothesis_cases = [None] * request.hypothesis_from + (
                [None] * (len(labels) - n_committed) if cases is None else [int(c) for c in cases[n_committed:]])
            self.last_partial = self._whole_tail([d for d in decisions if d.index >= self.n_final])
            return []
        if request.first_word != self.n_final:
            raise AssertionError("finals out of order")  # guarded by one request in flight
        if self._mark_last and decisions[-1].index == self.n_words - 1:
            last = decisions[-1]
            label = end_of_stream_label(last.label, punctuation[request.positions[-1]])
            decisions[-1] = Decision(last.index, last.word, label, last.case)
        self._n_final += len(decisions)
        if self.last_partial and self.last_partial[0].index < self.n_final:
            self.last_partial = [d for d in self.last_partial if d.index >= self.n_final]
        return decisions

    def _whole_tail(self, fresh: list[Decision]) -> list[Decision]:
        """A partial's decisions from the first non-final word on: ``fresh`` (the last window's,
        none finalized meanwhile) after the words of a tail longer than one window, which keep
        the provisional labels an earlier partial gave them (``O`` where none did), so that a
        partial always covers the whole not-yet-final tail (protocol: ``start .. N-1``)."""
        first_fresh = fresh[0].index if fresh else self.n_words
        if first_fresh <= self.n_final:
            return fresh
        earlier = {d.index: d for d in self.last_partial}
        return [earlier.get(i) or Decision(i, self.words[i - self._base], 0)
                for i in range(self.n_final, first_fresh)] + fresh

    def provisional(self) -> tuple[list[Decision], list[tuple[str, int]], list[int | None]]:
        """The not-yet-final tail and the hypothesis with the labels the last partial call
        gave them (``O``, no case, for words it did not see), without a model call: the tail's
        decisions, the hypothesis's (word, label) pairs, and its cases."""
        seen = self.last_hypothesis if len(self.last_hypothesis) == len(self.last_hypothesis_cases) else []
        hypothesis, cases = [], []
        for k, word in enumerate(self._hypothesis):
            same = k < len(seen) and seen[k][0] == word
            hypothesis.append((word, seen[k][1] if same else 0))
            cases.append(self.last_hypothesis_cases[k] if same else None)
        return self._whole_tail([]), hypothesis, cases

    def abort(self, request: WindowRequest) -> None:
        """The model call failed: forget it; its words will be requested again."""
        if request is not self._in_flight:
            return
        self._in_flight = None
        if not request.partial:
            self._requested = request.first_word - self._base
        else:
            self._partial_key = None

    def pending_deadline_gap(self, now: float) -> float:
        """Seconds until the next deadline (``inf`` if none); for timers."""
        deadline = self.next_deadline()
        return math.inf if deadline is None else max(0.0, deadline - now)

    # -- interim hypothesis (issue 14) ----------------------------------------
    # The ASR's interim words after the committed ones. They are labeled in
    # partial requests only and never enter ``words``/``_ids``/``_layout``, so
    # final windows, and therefore finals, are built from committed words alone.
    @property
    def hypothesis(self) -> tuple[str, ...]:
        return self._hypothesis

    def set_hypothesis(self, words: Sequence[str]) -> None:
        """Replace the interim hypothesis (normalized, non-empty words; empty clears it)."""
        if any(not w for w in words):
            raise ValueError("empty word (normalize and drop empty words first)")
        self._hypothesis = tuple(words)
        self._hypothesis_ids = [self.aligner.word_ids(w) for w in words]
        self._hypothesis_version += 1
        if not words:
            self.last_hypothesis, self.last_hypothesis_cases = [], []

    def _layout_with_hypothesis(self) -> tuple[TokenLayout, list[int], int]:
        """Token layout and ids of the words a partial window may use, hypothesis appended.

        Covers committed words from ``lo`` (a window's length before the first
        undecided word, enough for any left context) to the end; positions are
        relative to word ``lo``'s first token. Returns ``(layout, ids, lo)``.
        """
        lay = self._layout
        n = len(self.words)
        lo = 0
        if n:
            want = lay.starts[min(self._requested, n - 1)] - self.window.size
            lo = max(0, bisect.bisect_right(lay.starts, want) - 1)
        base = lay.starts[lo] if n else 0
        local = TokenLayout(
            [x - base for x in lay.starts[lo:]],
            [x - base for x in lay.ends[lo:]],
            [x - base for x in lay.label_pos[lo:]],
        )
        ids = self._ids[base:]
        for word_ids in self._hypothesis_ids:
            ids.extend(word_ids)
            local.append(len(word_ids), self.aligner.label_offset(len(word_ids)))
        return local, ids, lo
