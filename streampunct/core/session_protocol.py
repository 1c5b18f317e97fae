"""The protocol rules of one streaming session, without I/O (sans-I/O).

:class:`SessionProtocol` turns client messages into server messages. It never
touches a socket, a clock or an engine: the caller passes the time in,
runs the model calls it asks for (:meth:`SessionProtocol.next_call`: the
window and, with cached left context, its streaming-graph call) wherever it
likes and hands the engine's output back (:meth:`SessionProtocol.apply`),
which keeps the stream cache and labels the words
(:class:`~streampunct.core.engine_call.StreamCalls`, one per stream state). Every
method returns the messages to send, in order; :meth:`SessionProtocol.decidable_times`
says when a final's words became decidable (for latency metrics). The asyncio
pump in :mod:`streampunct.server.session` only moves frames and engine outputs; the
Python API (:mod:`streampunct.api`) drives this class in-process; tests drive
it directly.

Rules kept here (see ``docs/protocol.md``):

* ``config`` only before the first ``words`` message; it restarts the stream
  state with the new options;
* words are normalized; their ``start``/``end`` are echoed in the finals;
* finals are contiguous and rendered with sentence starts carried across
  messages; ``flushed`` after the finals it covers, ``end`` after all;
* the interim ``hypothesis`` follows the committed words in partials only:
  it never takes an index and never changes a final;
* frames after the client's ``end`` are ignored;
* ``resume`` only as the first message: the stream goes on at its ``start``
  with its context words as final left context (at most
  ``limits.max_context_words``, the window's left context by default) and
  sentence-start casing carried on from the last one; its ``config`` is
  validated like ``config``, and ``config`` is refused after it;
* input backpressure: :meth:`SessionProtocol.wants_input` says whether the
  caller may take the next frame (the backlog of words received but not yet
  finalized is below ``max_backlog``, or nothing in it can drain without more
  input);
* written forms with ``itn`` (the slow part: the ITN grammars) may be left to
  the caller: a protocol built with ``defer_written=True`` returns the finals
  and partials of an ``itn`` session as :class:`WrittenText`, everything
  decided but their ``text``, which the caller computes (:meth:`WrittenText.resolve`,
  pure) wherever it likes, one at a time in the order they came.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from engines.base import HeadLogits
from streampunct.core.alignment import Aligner
from streampunct.core.engine_call import EngineCall, EngineOutput, StreamCalls
from streampunct.core.options import SessionOptions
from streampunct.core.stream_cache import StreamCacheConfig
from streampunct.core.stream_state import Decision, StreamState, WindowRequest
from streampunct.core.windowing import WindowConfig
from streampunct.core.wire import (
    DEFAULT_LIMITS,
    MAX_START,
    ClientMessage,
    ConfigApplied,
    ConfigRequest,
    Ended,
    EndRequest,
    Error,
    ErrorCode,
    Final,
    Flushed,
    FlushRequest,
    HypothesisMessage,
    Limits,
    Partial,
    ProtocolError,
    PunctuatedWord,
    Ready,
    Resumed,
    ResumeRequest,
    ServerMessage,
    Time,
    Word,
    WordsMessage,
    check_resume,
    decode,
)
from streampunct.labels import (
    ID_TO_MARK,
    LOWER,
    PARTIAL_MARK_THRESHOLD,
    PERIOD,
    QUESTION,
    check_partial_mark_threshold,
)
from streampunct.text.normalize import (
    NO_AFFIX,
    Affix,
    affix_of,
    normalize_word,
    render,
    symbol_word,
    unit_symbol,
)
from streampunct.text.written_form import (
    INFER_REPLAY_WORDS,
    LEFT_CONTEXT_WORDS,
    FinalTexts,
    WouldWait,
    WrittenForms,
    without_waiting,
)

#: An overload episode of a session ends when none of its calls met a full queue for this
#: long; the next one gets ``overloaded`` again (protocol.md: "once per overload episode").
OVERLOAD_EPISODE_GAP_S = 5.0

#: Flushes waiting for their words past which the protocol takes no more input
#: (:meth:`SessionProtocol.wants_input`, with a ``max_backlog``).
MAX_PENDING_FLUSHES = 64
#: The most symbol words in a row (between two words, or before a flush) that ``text`` shows; the
#: rest are dropped, as they were before symbol words were shown (they take no index, and would
#: otherwise be held without bound: no backlog counts them).
MAX_SYMBOL_RUN = 8


class _Until(enum.Enum):
    """What to do once every word up to a target has been finalized."""

    FLUSHED = "flushed"  # answer a ``flush``
    DONE = "done"  # the stream is over (client ``end``, or server shutdown)
    ERROR = "error"  # an ``error`` for a message after a flush: sent after that flush's answer
    PARTIAL = "partial"  # a hypothesis's partial answered without the model after such an error


class _Owed(NamedTuple):
    """An answer owed once the words before ``target`` are final."""

    target: int
    what: _Until
    #: symbol words a flush or the end left after the words (:meth:`SessionProtocol._place_pending_symbols`)
    symbols: Sequence[str] = ()
    error: Error | None = None  # what ``ERROR`` sends
    #: what ``PARTIAL`` shows: the tail's decisions, the hypothesis's (word, label) pairs and cases
    partial: tuple[Sequence[Decision], Sequence[tuple[str, int]], Sequence[int | None]] | None = None


class WrittenText:
    """A final or partial of an ``itn`` session whose ``text`` is still to be written.

    ``message`` is the message to send, decided in full but for its ``text``
    (``""`` here); :meth:`resolve` writes the text (pure: no I/O, no clock, but
    it runs the ITN grammars, milliseconds to tens of them) and returns the
    message with it (and a final's ``held``). The texts of one session share the words a final held
    back for a phrase (:class:`~streampunct.text.written_form.FinalTexts`), so they
    must be resolved one at a time, each after the one before it returned, in
    the order the protocol returned them (anything else raises
    ``RuntimeError``); where (a worker thread) is the caller's choice. The text
    is the one the protocol would have written at once.
    """

    __slots__ = ("message", "_compute", "_seq", "_order")

    def __init__(self, message: Final | Partial, compute: Callable[[], Final | Partial], seq: int,
                 order: list[int]) -> None:
        self.message = message
        self._compute = compute
        self._seq = seq
        self._order = order  # [next seq to resolve], shared by a session's texts

    def discard(self) -> None:
        """A partial that will not be sent: its :meth:`resolve` (still due, in order) writes
        nothing and the message keeps no words. A final's text may not be discarded: the texts
        after it depend on the words it holds."""
        if not isinstance(self.message, Partial):
            raise TypeError("only a partial's text may be discarded")
        empty = self.message = Partial(self.message.start, (), "", ())
        self._compute = lambda: empty

    def resolve(self) -> Final | Partial:
        if self._order[0] != self._seq:
            raise RuntimeError(f"written text {self._seq} resolved out of order (next: {self._order[0]})")
        written = self._compute()
        self._order[0] += 1
        return written

    def resolve_now(self) -> Final | Partial | WouldWait:
        """:meth:`resolve` when it needs no grammar search (no number word near its words, or
        the normalizer's cache has the answer: microseconds, fit for the event loop); when it
        does, nothing is resolved and the :class:`WouldWait` says which search (its ``fetch``
        starts it elsewhere; ask again when that is done)."""
        try:
            with without_waiting():
                return self.resolve()
        except WouldWait as e:
            return e

    def __repr__(self) -> str:
        return f"WrittenText({self.message!r})"


def nothing_to_send(message: object) -> bool:
    """A final of no words whose text is empty (:meth:`SessionProtocol._held_text` found no
    held words once written): the caller does not send it."""
    return isinstance(message, Final) and not message.words and not message.text


class SessionProtocol:
    """One session's protocol state: options, stream state, flush bookkeeping, rendering.

    Attributes:
        options: the effective session options.
        state: the pure windowing core for the committed words (read-only; a
            ``config`` or ``resume`` replaces it, and its stream cache with it).
        end_received: the client sent ``end`` (later frames are ignored).
        finished: every word is final after ``end`` or :meth:`finish`; the
            caller closes the connection with :attr:`close_code`.
        max_backlog: words received but not yet finalized beyond which
            :meth:`wants_input` turns false (None: no limit).

    ``case_margin``: the model's margin for the truecasing head's capitals
    (:func:`streampunct.labels.case_classes`), for every stream state it builds.
    ``stream_cache``: run the windows with cached left context (each stream state
    gets its own, empty cache; :mod:`streampunct.core.stream_cache`); None: whole windows.
    ``partial_mark_threshold``: partials show a provisional word's mark only when the model's
    probability of it is at least this (:func:`streampunct.core.stream_state.hold_back_marks`; 0:
    every mark, the default); finals never change. ValueError unless 0 <= it < 1.
    ``defer_written``: the finals and partials of a session with ``itn`` come as
    :class:`WrittenText` (their text left to the caller) instead of
    :class:`~streampunct.core.wire.Final` and :class:`~streampunct.core.wire.Partial`.
    """

    def __init__(
        self,
        *,
        aligner: Aligner,
        window: WindowConfig,
        defaults: SessionOptions | None = None,
        limits: Limits = DEFAULT_LIMITS,
        session_id: str = "",
        model_name: str = "",
        max_backlog: int | None = None,
        written: WrittenForms | None = None,
        case_margin: float = 0.0,
        defer_written: bool = False,
        stream_cache: StreamCacheConfig | None = None,
        partial_mark_threshold: float = PARTIAL_MARK_THRESHOLD,
    ) -> None:
        if max_backlog is not None and max_backlog < 1:
            raise ValueError("max_backlog must be >= 1")
        self._aligner = aligner
        self._case_margin = case_margin
        #: the probability a partial's mark needs to be shown
        self.partial_mark_threshold = check_partial_mark_threshold(partial_mark_threshold)
        self._stream_cache = stream_cache
        self.max_backlog = max_backlog
        self._window = window
        if limits.max_context_words is None:
            # A window never looks further back than ``window.left`` tokens (>= 1 token a word).
            limits = replace(limits, max_context_words=window.left)
        self._limits = limits
        self.session_id = session_id
        self.model_name = model_name
        self.options = defaults if defaults is not None else SessionOptions()
        self._calls = self._new_calls()
        self.end_received = False
        self.finished = False
        self._finishing = False  # end or shutdown: no more partials
        self._handed_off = False  # the stream goes on elsewhere: nothing more is decided here
        self._words_seen = False
        self._accepted = False  # a message was accepted (``resume`` must come first)
        self.resumed_at: int | None = None  # ``start`` of an accepted ``resume``
        self._resumed_from: tuple[int, list[str], float] | None = None  # its cut: start, context, time
        self._sent = 0  # words finalized (their final is among the returned messages)
        self._sentence_start = True  # the next final word opens a sentence
        self._until: deque[_Owed] = deque()
        self._times: dict[int, tuple[Time, Time]] = {}  # index -> client's start/end
        # index -> the input's symbols around the word, shown in ``text`` (only words that have some)
        self._affixes: dict[int, Affix] = {}
        self._pending_symbols: list[str] = []  # symbol words waiting for the next word (_words_with_symbols)
        # the hypothesis's words and their symbols (a partial for an older hypothesis shows none)
        self._hypothesis_affixes: tuple[tuple[str, ...], list[Affix]] = ((), [])
        self._partial_owed = False  # a hypothesis change still waits for its partial
        # a hypothesis change (a ``hypothesis``, or ``words`` that cleared one) waits for its partial
        self._hypothesis_owed = False
        # that change came after a message whose error waits behind a flush: its partial follows that error
        self._owed_behind_error = False
        # a partial call whose hypothesis a newer one replaced and that was answered without it
        self._replaced_call: WindowRequest | None = None
        self._last_overload: float | None = None  # when a call of this session last met a full queue
        # ``end`` arrived (at this time) while a partial was owed: the stream ends once it is out
        self._end_at: float | None = None
        # Written forms (itn, lexicon): what the server shares, and this session's renderer
        # for the options it was built for (None: plain rendering).
        self._written = written if written is not None else WrittenForms()
        # the effective options name ``itn`` only where the server can write it
        self._itn_available = self._written.itn_available
        self._texts: FinalTexts | None = None
        self._texts_options: SessionOptions | None = None
        # a resume's context words and labels: the written forms' left context ("in" before
        # "two thousand and twelve": the year 2012)
        self._resumed_written: list[tuple[str, int]] = []
        self._resumed_held: int | None = 0  # of which the last ones no final wrote (resume's ``held``)
        self._defer_written = defer_written
        self._written_seq = 0  # WrittenText handed out
        self._written_order = [0]  # the next one to resolve

    def _new_calls(self) -> StreamCalls:
        """A new stream state for the current options, with a new (empty) cache."""
        state = StreamState(self._aligner, self._window, self.options, case_margin=self._case_margin,
                            partial_mark_threshold=self.partial_mark_threshold)
        cache = None if self._stream_cache is None else self._stream_cache.new(self._window)
        return StreamCalls(state, cache)

    @property
    def state(self) -> StreamState:
        return self._calls.state

    @property
    def close_code(self) -> int:
        """1000 after the client's ``end``, 1001 after a server shutdown (:meth:`finish`)."""
        return 1000 if self.end_received else 1001

    @property
    def n_words(self) -> int:
        return self.state.n_words

    @property
    def n_final(self) -> int:
        return self._sent

    @property
    def n_received(self) -> int:
        """Words received on this connection (the words before a resume's ``start`` not counted)."""
        return self.n_words - (self.resumed_at or 0)

    @property
    def backlog(self) -> int:
        """Words received whose final has not been produced yet."""
        return self.n_words - self._sent

    def wants_input(self, now: float) -> bool:
        """May the caller take the next client frame? (input backpressure)

        False while the backlog is at ``max_backlog`` or above *and* some of it
        can be finalized without more input (words decidable at ``now``, by
        right context, delay or flush, and not final yet): the caller then
        waits for :meth:`apply` to finalize them. Words that wait for more input
        (the last ``right_context`` words) never block reading, so the rule
        cannot stall a stream; the backlog stays within
        ``max(max_backlog, right_context) + one message's words``.

        Also False (with a ``max_backlog``) while :data:`MAX_PENDING_FLUSHES` flushes wait for
        their words: each is owed a ``flushed``, all released in one step once the words are
        final, so a client sending flushes faster than one window's round trip would otherwise
        pile up answers without bound (36,000 in one step, once). Their words are decidable, so
        they drain.
        """
        if self.max_backlog is None:
            return True
        if len(self._until) >= MAX_PENDING_FLUSHES:
            return False
        if self.backlog < self.max_backlog:
            return True
        return self.state.n_decidable(now) <= self._sent

    def ready(self) -> Ready:
        """The first message of the session."""
        return Ready(self.session_id, self.model_name, self.options, limits=self._limits,
                     itn_available=self._itn_available)

    # -- input ---------------------------------------------------------------
    def receive_frame(self, frame: str | bytes, now: float) -> list[ServerMessage | WrittenText]:
        """Decode one client frame and handle it; a malformed frame gets an ``error``."""
        if self.end_received:
            return []
        try:
            message = decode(frame, self._limits)
        except ProtocolError as e:
            return self._refuse(Error(e.code, e.message))
        return self.receive(message, now)

    def _refuse(self, error: Error) -> list[ServerMessage]:
        """``error`` for a message, in the order of the answers: after the ``flushed`` owed to
        an earlier ``flush`` (and the finals before it), so that no answer overtakes one owed
        to an earlier message."""
        out = self._answer_hypothesis_now(queue=True)  # a hypothesis before it first
        if not self._until:
            return [*out, error]
        self._until.append(_Owed(self._until[-1].target, _Until.ERROR, error=error))
        return out

    def receive(self, message: ClientMessage, now: float) -> list[ServerMessage | WrittenText]:
        """Handle one decoded client message that arrived at ``now``."""
        if self.end_received:
            return []
        out = self._receive(message, now)
        if len(out) == 1 and isinstance(out[0], Error):  # a refused message: nothing else changed
            return self._refuse(out[0])
        return out

    def _receive(self, message: ClientMessage, now: float) -> list[ServerMessage | WrittenText]:
        if isinstance(message, ResumeRequest):
            return self._resume(message, now)
        self._accepted = True
        if isinstance(message, WordsMessage):
            return self._words(message, now)
        if isinstance(message, HypothesisMessage):
            out = self._replace_hypothesis()
            taken = [(word, item.w) for item in message.words if (word := normalize_word(item.w))]
            words = [word for word, _ in taken]
            self._hypothesis_affixes = (tuple(words), [affix_of(raw, word) for word, raw in taken])
            self._set_hypothesis(words)
            self._owe_hypothesis()
            return out + self._owed_partial()
        if isinstance(message, ConfigRequest):
            return self._configure(message)
        if isinstance(message, FlushRequest):
            # the partial owed to a hypothesis before it goes first (after an earlier flush's
            # answer, when one is still owed: queued behind it)
            out = self._answer_hypothesis_now(queue=True)
            symbols = self._place_pending_symbols()
            self.state.flush(now)
            self._until.append(_Owed(self.state.n_words, _Until.FLUSHED, symbols))
            return out + self._settle()
        if isinstance(message, EndRequest):
            self.end_received = True
            out = self._owed_partial()  # an empty partial, when that is what is owed
            if self._partial_owed:
                # "a new hypothesis is answered by a partial": that partial comes first, then
                # the stream ends as of now (its finals are the same as without the wait)
                self._end_at = now
                return out
            return out + self.finish(now, end_of_stream=True)
        raise TypeError(f"not a client message: {message!r}")

    def finish(self, now: float, *, end_of_stream: bool = False) -> list[ServerMessage | WrittenText]:
        """Every word that has arrived must be finalized (client ``end`` or server shutdown).

        The client's ``end`` ends the stream, so its last word gets a sentence mark
        (``StreamState.end``); a shutdown only flushes (the speech may go on in a new session).
        """
        if self._end_at is not None:  # the client's end, deferred for a partial
            now, end_of_stream, self._end_at = self._end_at, True, None
        self._finishing = True
        self._partial_owed = False
        symbols = self._place_pending_symbols()
        if end_of_stream:
            self.state.end(now)
        else:
            self.state.flush(now)
        self._until.append(_Owed(self.state.n_words, _Until.DONE, symbols))
        return self._settle()

    def _words(self, message: WordsMessage, now: float) -> list[ServerMessage]:
        forms = [(normalize_word(item.w), item) for item in message.words]
        taken = [(word, item) for word, item in forms if word]
        if len(taken) < len(forms) or self._pending_symbols:
            # what each item shows: its word, or for one that normalizes to nothing its symbols
            shown = [word or symbol_word(item.w) for word, item in forms]
            if self._pending_symbols or any(symbols != word for (word, _), symbols in zip(forms, shown, strict=True)):
                return self._words_with_symbols(forms, shown, taken, now)
        return self._take(taken, now)

    def _take(self, taken: list[tuple[str, Word]], now: float) -> list[ServerMessage]:
        first = self.state.n_words
        if taken and first + len(taken) - 1 > MAX_START:
            # a resume's start near 2**53: indices past it are not exact in every JSON reader
            # (refused as a malformed message is: the stream is as before, a config still allowed)
            return [Error(ErrorCode.BAD_REQUEST, f"words: this message would take word indices past "
                                                 f"{MAX_START}, the largest exact in JSON; nothing was taken")]
        self._words_seen = True
        for k, (word, item) in enumerate(taken):
            if item.start is not None or item.end is not None:
                self._times[first + k] = (item.start, item.end)
            if (affix := affix_of(item.w, word)) is not NO_AFFIX:
                self._affixes[first + k] = affix
        out = self._replace_hypothesis() if self.state.hypothesis else self._answer_hypothesis_now()
        if taken:
            self.state.feed([word for word, _ in taken], now)
        if self.state.hypothesis:  # every words message clears the hypothesis
            self._set_hypothesis([])
            self._owe_hypothesis()  # answered by a partial carrying none
        return out + self._owed_partial()

    def _words_with_symbols(self, forms: list[tuple[str, Word]], shown: list[str], taken: list[tuple[str, Word]],
                            now: float) -> list[ServerMessage]:
        """:meth:`_words` for a message with words made only of symbols ("&", "😀", a "%" or a
        "€" of its own), or after one that ended with such words. They take no index (they
        normalize to nothing: no word for the model or the indices), but ``text`` shows them
        where they stood, as offline text does
        (:func:`~streampunct.text.normalize.render_with_symbols`): a unit after a word
        (:func:`~streampunct.text.normalize.unit_symbol`: "50 %") after that word, with its
        mark after it, when that word is not final yet; any other before the next word
        ("rock & roll", "$ 20"), or, when a flush or the end comes first, in a final of no
        words after those before it (:meth:`_place_pending_symbols`)."""
        first = self.state.n_words
        prefixes: dict[int, list[str]] = {0: list(self._pending_symbols)} if self._pending_symbols else {}
        suffixes: dict[int, list[str]] = {}  # position among the words taken (-1: the word before them)
        after = [""] * len(shown)  # what the next item that shows anything shows
        for i in range(len(shown) - 1, 0, -1):
            after[i - 1] = shown[i] or after[i]
        k = 0  # words taken so far
        for i, ((word, _), symbols) in enumerate(zip(forms, shown, strict=True)):
            if word:
                k += 1
                continue
            if not symbols:
                continue
            before_run = self._affixes.get(first - 1, NO_AFFIX)[1].count(" ") if k == 0 else 0  # earlier units
            if before_run + len(suffixes.get(k - 1, ())) + len(prefixes.get(k, ())) >= MAX_SYMBOL_RUN:
                continue  # a longer run of symbols between two words: its first ones are shown
            last_open = k > 0 or (first > self._sent and not prefixes.get(0))
            if k not in prefixes and last_open and unit_symbol(symbols, after[i]):
                suffixes.setdefault(k - 1, []).append(symbols)
            else:
                prefixes.setdefault(k, []).append(symbols)
        out = self._take(taken, now)
        if taken and self.state.n_words == first:  # refused (indices past MAX_START): nothing taken
            return out
        for k, symbols in suffixes.items():
            self._attach(first + k, after=symbols)
        self._pending_symbols = prefixes.pop(len(taken), [])  # before the next word to come
        for k, symbols in prefixes.items():
            self._attach(first + k, before=symbols)
        return out

    def _attach(self, index: int, *, before: Sequence[str] = (), after: Sequence[str] = ()) -> None:
        """Show ``before`` and ``after`` (symbol words) around word ``index`` in ``text``, at
        most :data:`MAX_SYMBOL_RUN` after it (units that come one a message after a word that
        is not final yet)."""
        a, b = self._affixes.get(index, NO_AFFIX)
        after = after[:max(0, MAX_SYMBOL_RUN - b.count(" "))]
        self._affixes[index] = ("".join(f"{x} " for x in before) + a, b + "".join(f" {x}" for x in after))

    def _place_pending_symbols(self) -> list[str]:
        """At a flush or the end: the symbols waiting for a next word, to be shown after the
        words received so far, in a final of no words once those are final (:meth:`_settle`;
        offline, "ok &" is written "ok. &")."""
        symbols, self._pending_symbols = self._pending_symbols, []
        return symbols

    def _set_hypothesis(self, words: Sequence[str]) -> None:
        self.state.set_hypothesis(words)
        self._partial_owed = self.options.partials

    def _served(self, options: SessionOptions) -> SessionOptions:
        """``options`` as this server serves them: ``itn`` off where it has no grammars. The
        protocol's rule for a server without ``itn``: it ignores the field, and its effective
        options name no ``itn``, which is how a client tells."""
        return options if self._itn_available or not options.itn else replace(options, itn=False)

    def _configure(self, request: ConfigRequest) -> list[ServerMessage]:
        if self._words_seen:
            return [Error(ErrorCode.BAD_REQUEST, "config is only allowed before the first words message")]
        self.options = self._served(request.apply_to(self.options))
        self._partial_owed = self._partial_owed and self.options.partials
        self._hypothesis_owed = self._hypothesis_owed and self.options.partials
        hypothesis = self.state.hypothesis
        self._calls = self._new_calls()
        if self._resumed_from is not None:  # a config between resume and the words: the same cut
            self.state.resume(*self._resumed_from)
        if hypothesis:
            self.state.set_hypothesis(hypothesis)
        return [ConfigApplied(self.options, self._itn_available)]

    def _resume(self, request: ResumeRequest, now: float) -> list[ServerMessage]:
        """Continue a stream at ``request.start``: its context words are final left context."""
        if self._accepted:
            return [Error(ErrorCode.BAD_REQUEST, "resume is only allowed as the first message of a connection")]
        # its words, not its items, count against ``start`` and bound ``held`` (decode asked too)
        try:
            check_resume(request)
        except ProtocolError as e:
            return [Error(e.code, e.message)]
        self._accepted = True
        if request.config is not None:
            self.options = self._served(request.config.apply_to(self.options))
        # the model's left context, and the words no final wrote, whatever the limit; the
        # written forms read those and the words written before them (not told, held None: as
        # many as a held phrase may have)
        keep = max(self._limits.max_context_words or 0, request.held or 0)
        keep_written = max(keep, (INFER_REPLAY_WORDS if request.held is None else request.held) + LEFT_CONTEXT_WORDS)
        # the context's words: items that normalize to nothing are none (and not counted)
        words = [(w, ID_TO_MARK.index(x.p)) for w, x in ((normalize_word(x.w), x) for x in request.context) if w]
        marked = words[-keep_written:] if keep_written else []
        context = [w for w, _ in marked[-keep:]] if keep else []
        self._resumed_written = marked
        # the context's last words no final wrote (the old connection's last ``held``, at most its
        # words: check_resume, and all within ``marked``): written here (None: inferred from the
        # words that follow, by the first text written: FinalTexts.seed)
        self._resumed_held = request.held
        self._calls = self._new_calls()
        self._resumed_from = (request.start, context, now)
        self.state.resume(*self._resumed_from)
        self.resumed_at = self._sent = request.start
        # The context ends a sentence (or there is none: the stream starts afresh). Its last
        # word is the last one normalization keeps, as for the model's context (a word that
        # normalizes to nothing is no word), from all of the context, not only what is kept.
        ends = (ID_TO_MARK[PERIOD], ID_TO_MARK[QUESTION])
        last = next((x for x in reversed(request.context) if normalize_word(x.w)), None)
        self._sentence_start = last is None or last.p in ends
        return [Resumed(request.start, self.options, self._itn_available)]

    # -- model calls ---------------------------------------------------------
    def next_call(self, now: float) -> EngineCall | None:
        """The next model call (finals first, then a partial when partials are on), with its
        cache plan when the protocol has a stream cache; None while one is in flight or
        when there is nothing to do. Run it anywhere (:func:`streampunct.core.engine_call.run_calls`,
        :meth:`streampunct.server.batcher.Batcher.run`), then :meth:`apply` or :meth:`abort` it."""
        if self._handed_off:
            return None
        if self._end_at is not None:
            # The partial owed before ``end``, after the finals already due then (decided by
            # right context or delay before ``end``); the words ``end`` decides wait for it, so
            # that they are grouped and labeled as without the wait (one decision at ``end``).
            return self._calls.next_call(self._end_at, partial=True)
        return self._calls.next_call(now, partial=self.options.partials and not self._finishing)

    def next_request(self, now: float) -> WindowRequest | None:
        """:meth:`next_call`'s window, for a caller that runs whole windows itself and
        applies their logits (a protocol without a stream cache)."""
        if self._stream_cache is not None:
            raise RuntimeError("a protocol with a stream cache plans its calls: use next_call()")
        call = self.next_call(now)
        return None if call is None else call.request

    def next_deadline(self) -> float | None:
        """When the next word becomes final by ``max_delay_ms`` (for the caller's timer)."""
        if self._end_at is not None or self._handed_off:
            return None  # ``end`` decides every word once the owed partial is out
        return self.state.next_deadline()

    def abort(self, call: EngineCall | WindowRequest) -> None:
        """The model call failed; its words will be requested again."""
        self.state.abort(call.request if isinstance(call, EngineCall) else call)

    def overloaded(self, call: EngineCall | WindowRequest, now: float) -> list[ServerMessage]:
        """The call met a full engine queue: it is aborted (its words wait and are requested
        again), and the first call of an overload episode gets ``error`` ``overloaded`` (an
        episode ends when none of the session's calls met a full queue for
        ``OVERLOAD_EPISODE_GAP_S``; the caller extends it with :meth:`still_overloaded` while
        it waits for room)."""
        self.abort(call)
        last, self._last_overload = self._last_overload, now
        if last is not None and now - last < OVERLOAD_EPISODE_GAP_S:
            return []
        return [Error(ErrorCode.OVERLOADED,
                      "the engine queue is full; your words are kept and will be finalized when it drains")]

    def still_overloaded(self, now: float) -> None:
        """The session waited for the engine queue to drain until ``now``: its episode lasts."""
        self._last_overload = now

    def apply(self, call: EngineCall | WindowRequest,
              output: EngineOutput | HeadLogits | np.ndarray) -> list[ServerMessage | WrittenText]:
        """Take the engine's output for a call; the messages it produces.

        ``call`` is an :class:`EngineCall` of :meth:`next_call` and ``output`` its
        :class:`EngineOutput`; or, from a caller that runs whole windows
        (:meth:`next_request`), the :class:`WindowRequest` and its logits (a
        :class:`~engines.base.HeadLogits`, or the punctuation logits float32[T, C]).

        A call of a stream state that a ``config`` has since replaced (a partial
        of a hypothesis sent before the first words: no final can be in flight
        then) is stale: its labels are dropped, and the new state labels the
        hypothesis under the new options.
        """
        if isinstance(call, WindowRequest):
            if not isinstance(output, EngineOutput):
                output = EngineOutput(output if isinstance(output, HeadLogits) else HeadLogits(output, None))
            call = EngineCall(call)
        elif not isinstance(output, EngineOutput):
            raise TypeError("the output of an EngineCall is an EngineOutput")
        request = call.request
        if request.partial and request is not self.state.in_flight:
            return self._owed_partial()  # (a stale final is a bug: StreamCalls.apply raises)
        decisions = self._calls.apply(call, output)
        if request.partial:
            # A partial that comes back after end or shutdown is no longer news.
            out = [] if self._finishing else self._partial(request)
        else:
            out = [self._final(decisions)] if decisions else []
            settled = self._settle(out)
            out += settled or (self._held_partial() if decisions else [])
        return out + self._owed_partial() + self._deferred_end()

    def decidable_times(self, message: ServerMessage | WrittenText) -> list[float]:
        """When each word of a final (or a :class:`WrittenText` of one) became decidable, for
        latency metrics; ``[]`` for any other message. Ask as the message comes out: the
        state keeps the times of its recent finals only."""
        if isinstance(message, WrittenText):
            message = message.message
        if not isinstance(message, Final):
            return []
        return [self.state.decidable_at(message.start + k) for k in range(len(message.words))]

    def _deferred_end(self) -> list[ServerMessage]:
        """The client's ``end``, once the partial it waited for is out."""
        if self._end_at is None or self._partial_owed:
            return []
        return self.finish(self._end_at, end_of_stream=True)

    # -- output --------------------------------------------------------------
    def _render(self, words: Sequence[str], labels: Sequence[int], sentence_start: bool,
                cases: Sequence[int | None] = (), affixes: list[Affix] | None = None) -> str:
        """``cases``: a truecasing head's classes (learned case with ``capitalize``; None or
        missing entries fall back to the rules); ``affixes``: the input's symbols around each word."""
        learned = list(cases) + [None] * (len(words) - len(cases))
        has = any(c is not None for c in learned)
        return render(words, labels, capitalize=self.options.capitalize, sentence_start=sentence_start,
                      cases=[LOWER if c is None else c for c in learned] if has else None, affixes=affixes)

    def _final_texts(self) -> FinalTexts | None:
        """The written-form renderer for the current options (None: plain rendering)."""
        if self._texts_options is not self.options:
            o = self.options
            formatter = self._written.formatter(itn=o.itn, lexicon=o.lexicon, capitalize=o.capitalize)
            if self._texts is not None:  # new options (a config before any word): what is held carries over
                self._resumed_held = self._texts.held_or_unknown
            self._texts = FinalTexts(formatter) if formatter.active else None
            if self._texts is not None and self._resumed_written:
                self._texts.seed([w for w, _ in self._resumed_written], [label for _, label in self._resumed_written],
                                 held=self._resumed_held, right_context=o.right_context)
            self._texts_options = o
        return self._texts

    def _final(self, decisions: list[Decision]) -> Final | WrittenText:
        marked = tuple(
            PunctuatedWord(d.word, ID_TO_MARK[d.label], *self._times.pop(d.index, (None, None)))
            for d in decisions
        )
        words, labels, cases = [d.word for d in decisions], [d.label for d in decisions], [d.case for d in decisions]
        affixes = [self._affixes.pop(d.index, NO_AFFIX) for d in decisions] if self._affixes else None
        texts = self._final_texts()
        sentence_start = self._sentence_start
        self._sent = decisions[-1].index + 1
        self._sentence_start = decisions[-1].label in (PERIOD, QUESTION)
        if texts is None:
            return Final(decisions[0].index, marked, self._render(words, labels, sentence_start, cases, affixes))
        # written forms, whole across finals (streampunct.text.written_form.FinalTexts)
        context = self.state.right_context(decisions[-1].index)
        paused = not context and not self.state.decided_by_flush(decisions[-1].index)
        return self._written_text(Final(decisions[0].index, marked, ""), texts, lambda: texts.final(
            words, labels, cases, sentence_start=sentence_start, context=context, paused=paused,
            affixes=affixes or ()))

    def _written_text(self, message: Final | Partial, texts: FinalTexts,
                      compute: Callable[[], str]) -> Final | Partial | WrittenText:
        """``message`` with its text (a final with the words left held), or a :class:`WrittenText`
        when the caller writes it."""

        def write() -> Final | Partial:
            text = compute()
            return replace(message, text=text, held=texts.held) if isinstance(message, Final) else (
                replace(message, text=text))

        if self._defer_written and texts.formatter.normalizer is not None:
            self._written_seq += 1
            return WrittenText(message, write, self._written_seq - 1, self._written_order)
        return write()

    def _replace_hypothesis(self) -> list[ServerMessage | WrittenText]:
        """A new message replaces the hypothesis: a partial call in flight for it is dropped
        when it comes back (no partial goes back to a replaced hypothesis), and a ``hypothesis``
        the model has not labeled yet gets its partial now (protocol.md: "a new hypothesis is
        answered by a partial"), made without a model call: the tail and that hypothesis with
        the labels the last partial call gave them (none for words it did not see). Labeling
        each would multiply the model's work when the server is busiest."""
        in_flight = self.state.in_flight
        if in_flight is not None and in_flight.partial:
            self._replaced_call = in_flight
        return self._answer_hypothesis_now()

    def _answer_hypothesis_now(self, *, queue: bool = False) -> list[ServerMessage | WrittenText]:
        """The partial owed to the last ``hypothesis``, now and without a model call (see
        :meth:`_replace_hypothesis`), when a later message is to be answered first otherwise;
        nothing when none is owed. The model's partial for it may follow (the state moved on).
        ``queue``: that later message's answer goes behind an earlier flush's (a ``flush``, a
        refused message), so the partial does too when one is owed, ahead of that answer."""
        if not self._hypothesis_owed:
            return []
        self._hypothesis_owed = self._partial_owed = False  # (``end`` need not wait for it)
        provisional = self.state.provisional()
        if self._until and (queue or (self._owed_behind_error and self._error_queued())
                            or self._partial_queued()):
            # answering a later message (a flush, a refused one) that waits behind an earlier
            # flush's answer; or an error for a message before it waits there, or the partial of
            # a hypothesis that came behind one still does: this one follows it
            self._until.append(_Owed(self._until[-1].target, _Until.PARTIAL, partial=provisional))
            return []
        return self._provisional_partial(*provisional)

    def _owe_hypothesis(self) -> None:
        """A hypothesis change (a ``hypothesis``, ``words`` that clear one) is owed its partial."""
        self._hypothesis_owed = self.options.partials
        self._owed_behind_error = self._error_queued()

    def _partial_queued(self) -> bool:
        """A partial waits behind an error (:meth:`_answer_hypothesis_now`): later ones follow it."""
        return any(owed.what is _Until.PARTIAL for owed in self._until)

    def _error_queued(self) -> bool:
        """An ``error`` waits behind a flush's answer (:meth:`_refuse`)."""
        return any(owed.error is not None for owed in self._until)

    def _provisional_partial(self, decisions: Sequence[Decision], hypothesis: Sequence[tuple[str, int]],
                             cases: Sequence[int | None]) -> list[ServerMessage | WrittenText]:
        """The partial of :meth:`StreamState.provisional`'s tail and hypothesis, made without a
        model call: now, or later for one queued behind an error (the words that have become
        final meanwhile left out)."""
        tail = [d for d in decisions if d.index >= self._sent]
        return self._partial_message(tail[0].index if tail else self._sent, tail, hypothesis, cases)

    def _partial(self, request: WindowRequest) -> list[ServerMessage | WrittenText]:
        decisions = self.state.last_partial
        hypothesis, hypothesis_cases = self.state.last_hypothesis, self.state.last_hypothesis_cases
        if request is self._replaced_call:  # its hypothesis was replaced (and answered) meanwhile
            self._replaced_call = None
            return []
        if not decisions and not request.hypothesis and not self._partial_owed:
            return []
        if request.hypothesis == self.state.hypothesis:
            self._partial_owed = self._hypothesis_owed = False
        labeled = len(request.positions) - (len(request.hypothesis) - request.hypothesis_from)
        start = decisions[0].index if decisions else max(self._sent, request.first_word + labeled)
        return self._partial_message(start, decisions, hypothesis, hypothesis_cases)

    def _partial_message(self, start: int, decisions: Sequence[Decision], hypothesis: Sequence[tuple[str, int]],
                         hypothesis_cases: Sequence[int | None]) -> list[ServerMessage | WrittenText]:
        """A partial of the tail's ``decisions`` (from word ``start``) and the hypothesis's
        (word, label) pairs, its text rendered or to be written."""
        words = [d.word for d in decisions] + [w for w, _ in hypothesis]
        labels = [d.label for d in decisions] + [label for _, label in hypothesis]
        texts = self._final_texts()
        sentence_start = self._sentence_start and start == self._sent
        cases = [d.case for d in decisions] + list(hypothesis_cases)  # learned case, the hypothesis's too
        affixes = self._partial_affixes(decisions, [w for w, _ in hypothesis])
        partial = Partial(
            start,
            tuple(PunctuatedWord(d.word, ID_TO_MARK[d.label]) for d in decisions),
            "",
            tuple(PunctuatedWord(w, ID_TO_MARK[label]) for w, label in hypothesis),
        )
        if texts is None:
            return [replace(partial, text=self._render(words, labels, sentence_start, cases, affixes))]
        follows = start == self._sent  # the words a final held back for a phrase come first
        return [self._written_text(partial, texts, lambda: texts.partial(
            words, labels, cases, sentence_start=sentence_start, follows_finals=follows,
            affixes=affixes or ()))]

    def _partial_affixes(self, decisions: Sequence[Decision], hypothesis: list[str]) -> list[Affix] | None:
        """The input's symbols around a partial's words, then its hypothesis's (None: none)."""
        shown, hypothesis_affixes = self._hypothesis_affixes
        hypothesis_affixes = hypothesis_affixes if hypothesis and tuple(hypothesis) == shown else []
        if not self._affixes and not any(a is not NO_AFFIX for a in hypothesis_affixes):
            return None
        return ([self._affixes.get(d.index, NO_AFFIX) for d in decisions]
                + (hypothesis_affixes or [NO_AFFIX] * len(hypothesis)))

    def _owed_partial(self) -> list[ServerMessage | WrittenText]:
        """A partial of no words when a hypothesis was cleared and nothing is left to label
        (:meth:`_idle_partial`).

        Otherwise the partial comes from a model call (:meth:`next_call`).
        """
        if not (self._partial_owed and self._idle()):
            return []
        self._partial_owed = False
        return self._idle_partial()

    def _idle(self) -> bool:
        """Nothing to label: no call in flight, every word final, no hypothesis."""
        state = self.state
        return state.in_flight is None and state.n_final == state.n_words and not state.hypothesis

    def _idle_partial(self) -> list[ServerMessage | WrittenText]:
        """A partial of no words, ``start`` the next word's index; with written forms its text
        is the words a final held for a phrase ("" when none), which no other message shows."""
        self._hypothesis_owed = False
        message = Partial(self._sent, (), "", ())
        texts = self._final_texts()
        if texts is None:
            return [message]
        sentence_start = self._sentence_start
        return [self._written_text(message, texts, lambda: texts.partial(
            [], [], [], sentence_start=sentence_start, follows_finals=True))]

    def hand_off(self) -> list[ServerMessage | WrittenText]:
        """The stream goes on elsewhere (``serve --drain resume``): no more decisions here. The
        words a final held for a phrase are not written here: the server that resumes the
        stream writes them, with the phrase when the words sent again complete it (told by
        resume's ``held``, or inferred from those words: :meth:`FinalTexts.seed`). What is left
        to send: the errors queued behind a flush (the flush is answered where the stream goes on),
        and the partials of hypotheses queued behind them."""
        self._finishing = self._handed_off = True
        self._partial_owed = False
        queued: list[ServerMessage | WrittenText] = []
        for owed in self._until:
            if owed.error is not None:
                queued.append(owed.error)
            elif owed.partial is not None:
                queued += self._provisional_partial(*owed.partial)
        self._until = deque(owed for owed in self._until if owed.error is None and owed.partial is None)
        return queued

    def _held_text(self) -> list[ServerMessage | WrittenText]:
        """At a flush or the end, once every word is final: the text of the words a final held
        at a pause for words that did not come ("it costs twenty", a pause, then ``flush``), as a
        final of no words (``start`` the next word's index): nothing when none are held. A
        deferred text (:class:`WrittenText`) may turn out empty; such a final is not sent
        (:func:`nothing_to_send`)."""
        texts = self._final_texts()
        if texts is None:
            return []
        message = Final(self._sent, (), "")
        sentence_start = self._sentence_start

        def compute() -> str:
            return texts.final([], [], [], sentence_start=sentence_start, context=[], paused=False)

        if self._defer_written and texts.formatter.normalizer is not None:
            return [self._written_text(message, texts, compute)]  # held or not: known once written
        texts.read_seed_at_end()
        return [replace(message, text=compute())] if texts.held else []

    def _held_partial(self) -> list[ServerMessage | WrittenText]:
        """After a final that leaves the stream idle (every word final, no hypothesis, no flush
        or end waiting), in a session with partials and written forms: a partial of no words
        (``start`` the next word's index) whose ``text`` is the words that final held for a
        phrase ("" when none), since no model partial comes to show them: the finals' texts
        joined, then the latest partial's, show every word once at a pause too."""
        if self._final_texts() is None or not self.options.partials or self._finishing or not self._idle():
            return []
        self._partial_owed = False  # it answers a hypothesis change still waiting too
        return self._idle_partial()

    def _settle(self, finals: list[ServerMessage | WrittenText] | None = None) -> list[ServerMessage | WrittenText]:
        """``flushed`` for each flush (and ``end``) whose words have all been finalized, after
        the text of words held at a pause (:meth:`_held_text`).

        Symbol words that a flush or the end left after the words go at the end of the text
        of ``finals``' last, when it is the final of the last word before them ("ok. &"), and
        in a final of no words of their own otherwise (every word was final before them, or
        a written form's text is still to come)."""
        out: list[ServerMessage | WrittenText] = []
        while self._until and self._until[0][0] <= self._sent:
            target, what, symbols, error, partial = self._until.popleft()
            if error is not None:
                out.append(error)
                continue
            if partial is not None:
                out += self._provisional_partial(*partial)
                continue
            held = self._held_text() if what is _Until.FLUSHED or not self.finished else []
            out += held
            last = finals[-1] if finals else None
            if symbols and not held and isinstance(last, Final) and last.words and (
                    last.start + len(last.words) == target):
                finals[-1] = replace(last, text=f"{last.text} {' '.join(symbols)}")  # type: ignore[index]
            elif symbols:  # after every word before them
                out.append(Final(self._sent, (), " ".join(symbols)))
            if held and what is _Until.FLUSHED and self.options.partials and self._idle():
                # the partial shown at the pause carried the held words' text, which that final
                # has just written: a partial of no words replaces it, or a client that shows
                # the finals' texts and then the latest partial's would show those words twice
                out += self._idle_partial()
            if what is _Until.FLUSHED:
                out.append(Flushed(target))
            elif not self.finished:
                self.finished = True
                if self.end_received:
                    out.append(Ended(self.state.n_words))
        return out
