"""The Python API: punctuate text, or a live stream of ASR words, in-process.

::

    from streampunct import Punctuator, join_texts

    p = Punctuator.load()                          # the shipped model; or Punctuator.load("models/base")
    p.punctuate("hello how are you i am fine")     # 'Hello. How are you? I am fine.'
    s = p.stream(right_context=3, max_delay_ms=2000)
    finals = s.push(["hello", "how", "are", "you"])
    finals += s.end()
    print(join_texts(f.text for f in finals))      # one text: no space for empty texts or before "'s"

:meth:`Punctuator.punctuate` is the ``punctuate`` command's offline decoder
(double-overlap windows over the whole text; the last word ends a sentence).
A stream sees less context than that (its windows end a few words past the
word decided), so for the same words the two differ on a few marks in a hundred
words (2-5% of the marks of 1,000 words in a probe, 2026-11-30).
:meth:`Punctuator.stream` is the server's latency contract without a server:
a :class:`Stream` drives the same sans-I/O
:class:`~streampunct.core.session_protocol.SessionProtocol` a server session
drives, with the same streaming window geometry, the same engine (loaded by
:func:`engines.registry.load_engine`) and the same cached left context
(``stream_cache``, as ``serve --stream-cache``), so for the same words in the
same chunks it gives the server's finals. Every window runs alone, as ``serve
--batch-rows alone`` runs them; the server's default (``exact``) pads windows of
several streams into one call where the engine's rows are independent (the shipped
graphs), which is exact up to rounding: now and then a label of a busy server's
stream differs (docs/server.md, "Batch rows").

Time. A stream has no thread and no timer: it does its work inside the call
that asks for it. Every method takes ``now``, a time in seconds on the
stream's clock (by default :func:`time.monotonic`, the clock the server uses;
``Punctuator.stream(clock=...)`` picks another). Words arrive at the
``now`` of their :meth:`Stream.push`; a word is decidable at the first of:
``right_context`` later words, ``max_delay_ms`` after it arrived, a flush or
the end (:func:`streampunct.core.latency.decidable_times`). A word whose delay
runs out while no call is made is finalized by the next call whose ``now`` is
past its deadline: call :meth:`Stream.poll` at :attr:`Stream.next_deadline`
to get it on time. Its label is the same whenever the call comes: labels
depend on the arrival schedule only. Pass ``now`` explicitly to replay a
recorded schedule (then nothing depends on the wall clock). Time never goes back:
a ``now`` earlier than one already given counts as that one, as the server's
monotonic clock would have it.

Errors: a bad model folder raises :class:`~streampunct.errors.ModelError`
(an engine's own load error is its ``__cause__``), bad input
:class:`~streampunct.errors.InputError`, an engine failure while streaming
:class:`~streampunct.errors.EngineFailedError` (the stream can go on: the
failed window's words are asked for again by the next call, and finals made
before the failure in the failed call are returned by the next one; after a
failed :meth:`Stream.end`, :meth:`Stream.poll` or :meth:`Stream.end` again
finishes the stream; a ``KeyboardInterrupt`` during a model call is raised as it is,
and the stream goes on in the same way). A stream is
not thread-safe; streams of one :class:`Punctuator` may run in different
threads (ONNX Runtime sessions are thread-safe).
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Iterable, Mapping, MappingView, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path, PurePath
from typing import Any

import numpy as np

from engines.base import Engine, EngineError, StreamEngine
from engines.registry import BACKENDS, StreamCacheMode
from streampunct.core.alignment import Aligner
from streampunct.core.decoder import OfflineDecoder
from streampunct.core.engine_call import EngineCall, EngineOutput, run_calls
from streampunct.core.options import (
    OptionError,
    SessionOptions,
    check_bool_option,
    check_options,
    shown,
)
from streampunct.core.session_protocol import SessionProtocol
from streampunct.core.stream_cache import StreamCacheConfig
from streampunct.core.windowing import WindowConfig
from streampunct.core.wire import (
    DEFAULT_LIMITS,
    EndRequest,
    Final,
    FlushRequest,
    HypothesisMessage,
    Partial,
    Word,
    WordsMessage,
    finite_number,
)
from streampunct.errors import EngineFailedError, InputError, ModelError
from streampunct.labels import PARTIAL_MARK_THRESHOLD, check_partial_mark_threshold
from streampunct.model import ModelInfo, load_model_info
from streampunct.text.normalize import (
    Affix,
    is_symbol_word,
    offline_tokens,
    render,
    render_with_symbols,
)
from streampunct.text.written_form import Lexicon, WrittenForms, normalize_lexicon

__all__ = ["Final", "Partial", "Punctuator", "Stream"]


class Punctuator:
    """A model and its engine, loaded once: punctuate texts and streams in-process.

    Build it with :meth:`load` (a model folder) or :meth:`from_engine` (an
    engine you hold). Close it with :meth:`close`, or use it as a context
    manager.

    Attributes:
        name: the model's name (``streampunct.json``'s ``name``).
        info: the model folder's metadata (None for :meth:`from_engine`).
        window: the offline decoder's window geometry.
        stream_window: the streaming windows' geometry (the server's).
        capitalize: the default of :meth:`punctuate` and :meth:`stream`.
    """

    def __init__(self, decoder: OfflineDecoder, *, name: str, capitalize: bool = True,
                 stream_engine: StreamEngine | None = None, stream_cache_tokens: int | None = None,
                 written: WrittenForms | None = None) -> None:
        self._decoder = decoder
        self.written = written if written is not None else WrittenForms()
        self.name = name
        self.capitalize = _bool("capitalize", capitalize)
        self._stream_engine = stream_engine
        self._closed = False
        self._cache_tokens = stream_cache_tokens
        self._has_stream_cache = stream_engine is not None
        self._has_case = decoder.has_case  # as loaded (a closed engine may not say)

    @classmethod
    def load(
        cls,
        model_dir: str | Path | None = None,
        *,
        engine: str = "onnxruntime",
        stream_cache: StreamCacheMode | str = StreamCacheMode.AUTO,
        stream_cache_tokens: int | None = None,
        capitalize: bool = True,
        itn: bool = False,
        lexicon: Iterable[Sequence[str]] = (),
        itn_cache: str | Path | None = None,
        **engine_options: Any,
    ) -> Punctuator:
        """Load a model folder (None: the shipped ``models/default``, or ``$STREAMPUNCT_MODEL``).

        Args:
            engine: the engine backend (``onnxruntime``, ``tensorrt``), as ``serve --engine``.
            stream_cache: cached left context for streams, as ``serve --stream-cache``:
                ``auto`` where the folder has a streaming graph (and does not switch it
                off) and the engine is ONNX Runtime, ``on`` (required), ``off``.
            stream_cache_tokens: cached tokens per stream, as ``serve --stream-cache-tokens``
                (None: the folder's ``stream_cache_tokens``).
            capitalize: the default for :meth:`punctuate` and :meth:`stream` (True
                here; the server's sessions default to False): sentence starts and
                "I", and the learned case of a model with a truecasing head.
            itn: load the ITN grammars (the ``itn`` extra; compiled once into
                ``itn_cache``, default ``~/.cache/streampunct/itn``): numbers, dates,
                times and money written as digits and symbols by default.
            lexicon: ``(spoken, written)`` pairs applied in every text, as ``serve --lexicon``.
            engine_options: the backend's options (e.g. ``intra_op_threads=1``).

        A relative ``model_dir`` is a folder of the current one, taken whole (``info.path`` and
        the errors name it absolute): ``Path("")`` is ``Path(".")``, the current folder.
        """
        if not isinstance(engine, str) or engine not in BACKENDS:
            raise InputError(f"engine must be one of {', '.join(BACKENDS)}, not {shown(engine)}")
        try:
            stream_cache = StreamCacheMode(stream_cache)
        except ValueError:
            raise InputError(f"stream_cache must be one of {', '.join(StreamCacheMode)}, "
                             f"not {shown(stream_cache)}") from None
        capitalize = _bool("capitalize", capitalize)
        stream_cache_tokens = _cache_tokens(stream_cache_tokens)
        written = written_forms(itn=_bool("itn", itn), lexicon=lexicon, itn_cache=itn_cache)
        if isinstance(model_dir, str) and not model_dir.strip():  # Path("") would be the current folder
            raise InputError("model_dir is empty: give a model folder, or None for the shipped model")
        if isinstance(model_dir, str | PurePath):
            folder = Path(model_dir).expanduser()
            if not folder.is_absolute() and folder.is_dir():  # "." (Path("")) names the folder it is
                model_dir = folder.absolute()
        info = load_model_info(model_dir)
        try:
            decoder = OfflineDecoder.from_model_dir(info.path, engine=engine, **engine_options)
        except ModelError:
            raise
        except EngineError as e:
            raise ModelError(f"cannot load the {engine} engine for {info.path}: {e}") from e
        try:
            stream_engine = decoder.stream_engine(stream_cache, **engine_options)
        except BaseException as e:
            decoder.close()
            if not isinstance(e, EngineError):
                raise
            raise ModelError(f"cannot load the streaming graph of {info.path}: {e}") from e
        if stream_engine is not None and stream_cache_tokens is None:
            stream_cache_tokens = stream_engine.cache_tokens  # the folder's stream_cache_tokens
        return cls(decoder, name=info.name, capitalize=capitalize, stream_engine=stream_engine,
                   stream_cache_tokens=stream_cache_tokens, written=written)

    @classmethod
    def from_engine(
        cls,
        engine: Engine,
        aligner: Aligner,
        *,
        window: WindowConfig | None = None,
        stream_window: WindowConfig | None = None,
        stream_engine: StreamEngine | None = None,
        stream_cache_tokens: int | None = None,
        name: str = "custom",
        capitalize: bool = True,
        written: WrittenForms | None = None,
        case_margin: float = 0.0,
    ) -> Punctuator:
        """A punctuator over an engine you built (the Engine protocol, :class:`engines.base.Engine`:
        ``infer``, ``infer_heads`` and the declared ``name``, ``has_case`` and
        ``rows_independent``; derive from :class:`engines.base.EngineBase` for their defaults).

        ``stream_engine``: a streaming graph's engine (``infer_stream``,
        ``stream_shape``) for cached left context in streams, keeping
        ``stream_cache_tokens`` tokens (None: the streaming window's left context).
        ``written``: the lexicon and ITN grammars (:func:`written_forms`).
        ``case_margin``: the truecasing head's margin for capitals
        (:func:`streampunct.labels.case_classes`; a model folder's is its ``case_margin``).
        """
        missing = [a for a in ("infer", *Engine.__annotations__) if not hasattr(engine, a)]  # the declared ones
        if missing:
            raise InputError(f"the engine ({type(engine).__name__}) does not declare {', '.join(missing)} "
                             "(the Engine protocol: derive from engines.base.EngineBase for the defaults)")
        if stream_engine is not None:
            missing = [a for a in ("infer_stream", "stream_shape") if not hasattr(stream_engine, a)]
            if missing:
                raise InputError(f"the stream engine ({type(stream_engine).__name__}) does not declare "
                                 f"{', '.join(missing)} (the StreamEngine protocol: derive from "
                                 "engines.base.StreamEngineBase)")
        if not isinstance(aligner, Aligner):
            raise InputError(f"aligner must be a streampunct.core.alignment.Aligner (Aligner.from_file of "
                             f"the model's tokenizer.json), not {type(aligner).__name__}")
        for arg, value in (("window", window), ("stream_window", stream_window)):
            if value is not None and not isinstance(value, WindowConfig):
                raise InputError(f"{arg} must be a streampunct.core.windowing.WindowConfig or None, "
                                 f"not {type(value).__name__}")
        if written is not None and not isinstance(written, WrittenForms):
            raise InputError(f"written must be a WrittenForms (streampunct.api.written_forms) or None, "
                             f"not {type(written).__name__}")
        if not finite_number(case_margin) or case_margin < 0:
            raise InputError(f"case_margin must be a finite number >= 0, not {shown(case_margin)}")
        window = window or WindowConfig()
        decoder = OfflineDecoder(engine, aligner, window, stream_window=stream_window or window, case_margin=case_margin)
        stream_cache_tokens = _cache_tokens(stream_cache_tokens)
        return cls(decoder, name=name, capitalize=capitalize, stream_engine=stream_engine,
                   stream_cache_tokens=stream_cache_tokens, written=written)

    @property
    def info(self) -> ModelInfo | None:
        return self._decoder.info

    @property
    def window(self) -> WindowConfig:
        return self._decoder.window

    @property
    def stream_window(self) -> WindowConfig:
        return self._decoder.stream_window

    @property
    def has_case(self) -> bool:
        """The model has a truecasing head (``capitalize`` then writes names and acronyms too)."""
        return self._has_case

    @property
    def stream_cache(self) -> bool:
        """Streams run with cached left context (a streaming graph is loaded)."""
        return self._has_stream_cache

    def punctuate(self, text: str | Sequence[str], *, capitalize: bool | None = None,
                  itn: bool | None = None) -> str:
        """Punctuate a whole text (a string, or a list of words) with the offline decoder.

        A list's item is one word, as a server's ``words`` item is (inner whitespace
        removed). A string is one segment, its line breaks read as spaces (the
        ``punctuate`` command reads each line as a segment: punctuate the lines one by one
        for that). Punctuation and case in the input are dropped first; the last word ends a
        sentence. A word is cut to 100 characters, as the server cuts it. Returns ``""`` when the text holds no words. ``capitalize`` (None:
        this punctuator's default) as in :meth:`load`; ``itn`` (None: on when the
        grammars are loaded) writes numbers as digits; the lexicon always applies.
        """
        self._check_open()
        tokens, affixes = offline_tokens(_strings(_items(text, "text")))
        if not tokens:
            return ""
        words = [t for t in tokens if not is_symbol_word(t)]  # symbol words (emoji): not the model's
        capitalize = self.capitalize if capitalize is None else _bool("capitalize", capitalize)
        itn = None if itn is None else _bool("itn", itn)
        formatter = self.written.formatter(itn=self._itn(itn), lexicon=(), capitalize=capitalize)
        labels: list[int] = []
        cases: list[int] | None = None
        try:
            if words and capitalize and self.has_case:
                labels, cases = self._decoder.labels_and_cases(words)
            elif words:
                labels = self._decoder.punctuate(words)
        except Exception as e:
            raise self._failed(e) from e

        def render_words(run: list[str], run_labels: list[int], run_cases: list[int] | None, start: bool,
                         run_affixes: list[Affix] | None) -> str:
            if formatter.active:
                return formatter.render(run, run_labels, run_cases or (), sentence_start=start,
                                        affixes=run_affixes or ())
            return render(run, run_labels, capitalize=capitalize, sentence_start=start, cases=run_cases,
                          affixes=run_affixes)

        return render_with_symbols(tokens, labels, render_words, cases=cases, affixes=affixes)

    def stream(
        self,
        *,
        right_context: int | None = None,
        max_delay_ms: int | None = None,
        capitalize: bool | None = None,
        partials: bool = False,
        clock: Callable[[], float] = time.monotonic,
        itn: bool | None = None,
        lexicon: Iterable[Sequence[str]] = (),
        partial_mark_threshold: float = PARTIAL_MARK_THRESHOLD,
    ) -> Stream:
        """A new stream with the server's session options (None: the server's defaults,
        ``right_context`` 3 and ``max_delay_ms`` 2000, checked against the server's limits,
        0 to 1000 and 0 to 600000, by the options' rules
        (:func:`~streampunct.core.options.check_options`, the messages a server's
        ``bad_request`` carries), an :class:`~streampunct.errors.InputError` outside them;
        ``capitalize``: this punctuator's default). ``partials``: :attr:`Stream.partial` holds the latest
        provisional labels of the words not yet final. ``clock``: the time of a call
        that passes no ``now`` (see the module doc, "Time"). ``itn`` (None: on when the
        grammars are loaded) and ``lexicon`` (pairs over the punctuator's): as a session's
        ``config.itn`` and ``config.lexicon``. ``partial_mark_threshold`` (0 <= it < 1), as
        ``serve --partial-mark-threshold``: :attr:`Stream.partial` shows a word's mark only when
        the model's probability of it is at least this (0: every mark); finals never change;
        a threshold outside [0, 1) raises :class:`~streampunct.errors.InputError`."""
        self._check_open()
        if not callable(clock):
            raise InputError(f"clock must be a function that returns seconds, not {shown(clock)}")
        try:
            threshold = check_partial_mark_threshold(partial_mark_threshold)
        except (ValueError, OverflowError):  # OverflowError: an integer beyond a float's range
            raise InputError(f"partial_mark_threshold must be a number in [0, 1), "
                             f"not {shown(partial_mark_threshold)}") from None
        right_context, max_delay_ms = _plain_int(right_context), _plain_int(max_delay_ms)
        given = {"right_context": right_context, "max_delay_ms": max_delay_ms, "partials": _plain_bool(partials),
                 "capitalize": _plain_bool(capitalize), "itn": _plain_bool(itn), "lexicon": _as_list(lexicon)}
        try:  # the options' rules within the server's limits, as for a session's config message
            checked = check_options({k: v for k, v in given.items() if v is not None}, DEFAULT_LIMITS)
        except OptionError as e:
            raise InputError(e.message) from None
        checked["capitalize"] = checked.get("capitalize", self.capitalize)
        checked["itn"] = self._itn(checked.get("itn"))
        return Stream(self, SessionOptions(**checked), clock, partial_mark_threshold=threshold)

    def _itn(self, itn: bool | None) -> bool:
        if itn is None:
            return self.written.normalizer is not None
        if itn and self.written.normalizer is None:
            raise InputError("itn needs the ITN grammars: Punctuator.load(..., itn=True)")
        return itn

    def close(self) -> None:
        """Release the engines (idempotent). :meth:`punctuate`, :meth:`stream` and the calls of
        its streams then raise :class:`~streampunct.errors.InputError`."""
        self._closed = True
        self._decoder.close()
        self._stream_engine = None

    def _check_open(self) -> None:
        if self._closed:
            raise InputError("this Punctuator is closed (close() was called); load another")

    def _failed(self, error: Exception) -> InputError | EngineFailedError:
        """What a failed model call raises: :class:`InputError` when :meth:`close` ran during it
        (another thread's; the engine went with it), else :class:`EngineFailedError`."""
        if self._closed:
            return InputError("this Punctuator was closed (close() was called) during the call")
        return EngineFailedError(f"inference failed: {type(error).__name__}: {error}")

    def __enter__(self) -> Punctuator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Punctuator {self.name!r} stream_cache={self.stream_cache}>"


class Stream:
    """One stream of ASR words, punctuated as a server session would (module doc).

    Every method returns the finals it produced, in order: :class:`~streampunct.core.wire.Final`
    objects with ``start`` (the stream index of their first word), ``words``
    (``PunctuatedWord``: ``w`` the normalized word, ``p`` its mark, and the
    ``start``/``end`` times given with a :class:`~streampunct.core.wire.Word`) and
    ``text`` (rendered, sentence starts carried across finals). Finals never
    change once returned; together they cover every word pushed, once, in order.
    With ``itn`` or a lexicon, a final's ``text`` may leave out words held for a
    written form that later words may go on with; the final that completes it
    writes them, and a flush or ``end()`` that finds words held writes them in a
    final of no ``words`` (docs/protocol.md, "Across finals"), so the texts joined
    show every word once.

    The server's limits on one ``words`` frame (``too_large``: 1000 words, a word of 256
    characters) do not apply in-process, so "the server's finals" holds for the chunks a
    server takes.

    Attributes:
        options: the session options.
        partial: with ``partials``, the latest provisional labels of the words not
            yet final (and of the hypothesis), else None: None too once a final has
            overtaken it (until the next partial: at a pause, every word final, none
            comes) and once the stream is finished.
    """

    def __init__(self, punctuator: Punctuator, options: SessionOptions, clock: Callable[[], float], *,
                 partial_mark_threshold: float = PARTIAL_MARK_THRESHOLD) -> None:
        self._punctuator = punctuator
        decoder = punctuator._decoder
        stream_engine = punctuator._stream_engine
        # the streaming graph runs every window (whole ones too), as a server's engine does
        self._engine = decoder.engine if stream_engine is None else stream_engine
        self._pad_id = decoder.aligner.pad_id
        self._clock = clock
        self._latest = -math.inf  # the latest ``now`` seen: time never goes back
        cache = None if stream_engine is None else StreamCacheConfig(stream_engine.stream_shape,
                                                                      punctuator._cache_tokens)
        self._protocol = SessionProtocol(aligner=decoder.aligner, window=decoder.stream_window,
                                         defaults=options, model_name=punctuator.name,
                                         written=punctuator.written, case_margin=decoder.case_margin,
                                         stream_cache=cache, partial_mark_threshold=partial_mark_threshold)
        self.partial: Partial | None = None
        self._owed: list[Final] = []  # finals made in a call that then failed: the next call returns them

    @property
    def options(self) -> SessionOptions:
        return self._protocol.options

    @property
    def n_words(self) -> int:
        """Words received."""
        return self._protocol.n_words

    @property
    def n_final(self) -> int:
        """Words finalized."""
        return self._protocol.n_final

    @property
    def ended(self) -> bool:
        """:meth:`end` was called: the stream takes no more words."""
        return self._protocol.end_received

    @property
    def finished(self) -> bool:
        """Every word is final after :meth:`end` (False while an engine failure in
        :meth:`end` left words to finalize: :meth:`poll` or :meth:`end` finishes them)."""
        return self._protocol.finished

    @property
    def next_deadline(self) -> float | None:
        """When (on the stream's clock) the next word becomes final by ``max_delay_ms``,
        if no more words come: call :meth:`poll` then. None: no word waits for its delay."""
        return self._protocol.next_deadline()

    def push(self, words: str | Iterable[str | Word], *, now: float | None = None) -> list[Final]:
        """Committed ASR words (a list, tuple or other ordered iterable of words or
        :class:`~streampunct.core.wire.Word` with times, or a string split on whitespace)
        that arrived at ``now``; the finals that are due. Words that normalize to nothing
        (punctuation) are dropped. A set (or a dict or its view) is refused: it has no word order."""
        items = tuple(_word(w) for w in _items(words, "words"))
        return self._send(WordsMessage(items), now)

    def hypothesis(self, words: str | Iterable[str | Word], *, now: float | None = None) -> list[Final]:
        """The ASR's interim words after the committed ones (replaces the previous
        hypothesis; the next :meth:`push` clears it). They are labeled in
        :attr:`partial` only (with ``partials``), never finalized."""
        items = tuple(_word(w) for w in _items(words, "words"))
        return self._send(HypothesisMessage(items), now)

    def poll(self, *, now: float | None = None) -> list[Final]:
        """The finals due by ``now`` without new words (delay deadlines; after a failed
        :meth:`end`, the rest of the stream)."""
        self._check_open(ending=True)
        return self._drive(self._now(now))

    def flush(self, *, now: float | None = None) -> list[Final]:
        """Finalize every word pushed so far (a pause: no sentence mark is forced)."""
        return self._send(FlushRequest(), now)

    def end(self, *, now: float | None = None) -> list[Final]:
        """The stream ends: every word is finalized, and the last one ends its sentence if it
        was not final already (a final is never revised: with ``right_context`` 0, or past its
        delay, the last word may be final without a mark).
        The stream takes nothing after this (but :meth:`end` or :meth:`poll` again, to
        finish it after an engine failure)."""
        if self._protocol.end_received:
            self._check_open(ending=True)
            return self._drive(self._now(now))
        return self._send(EndRequest(), now)

    # -- internals -----------------------------------------------------------
    def _now(self, now: float | None) -> float:
        value = self._clock() if now is None else now
        seconds = _seconds(value)
        if seconds is None:
            source = "the stream's clock must return" if now is None else "now must be"
            raise InputError(f"{source} a finite number of seconds, not {shown(value)}")
        self._latest = max(self._latest, float(seconds))
        return self._latest

    def _check_open(self, *, ending: bool = False) -> None:
        """Refuse a call on a closed punctuator or an ended stream (``ending``: a call that
        finishes an ended stream, which is refused only once it is finished)."""
        if self._punctuator._closed:
            raise InputError("the stream's Punctuator is closed (close() was called)")
        if self._protocol.finished or (self._protocol.end_received and not ending):
            raise InputError("the stream has ended (end() was called)")

    def _send(self, message: Any, now: float | None) -> list[Final]:
        self._check_open()
        at = self._now(now)
        self._owed += self._collect(self._protocol.receive(message, at))
        return self._drive(at)

    def _drive(self, now: float) -> list[Final]:
        """Run every model call the protocol asks for at ``now`` (one at a time, as a session's
        driver); the finals made, with any a failed call before owed."""
        protocol = self._protocol
        while (call := protocol.next_call(now)) is not None:
            try:
                output = self._run(call)
                messages = protocol.apply(call, output)  # checks the output first (its shape)
            except BaseException as e:
                protocol.abort(call)  # asked for again by the next call (after a Ctrl-C too)
                if not isinstance(e, Exception):
                    raise  # KeyboardInterrupt, SystemExit: as they are
                raise self._punctuator._failed(e) from e
            self._owed += self._collect(messages)
        if protocol.finished:
            self.partial = None
        finals, self._owed = self._owed, []
        return finals

    def _run(self, call: EngineCall) -> EngineOutput:
        """The server's engine call for ``call`` (the batcher's worker, one window alone)."""
        (output,) = run_calls(self._engine, [call], self._pad_id)
        return output

    def _collect(self, messages: Sequence[object]) -> list[Final]:
        finals = []
        for message in messages:
            if isinstance(message, Final):
                finals.append(message)
                if self.partial is not None and message.start + len(message.words) > self.partial.start:
                    self.partial = None  # overtaken: its words are final now (a new one may follow)
            elif isinstance(message, Partial):
                self.partial = message
        return finals


_SET_ITERATOR = type(iter(set()))  # iter() of a set or frozenset: no order either


def _seconds(value: object) -> int | float | None:
    """A time as the wire takes it (:func:`~streampunct.core.wire.finite_number`), with numpy's
    and other real scalars (``numbers.Real``, not bools) as a Python float; None when it is not one."""
    if not isinstance(value, int | float) and isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            value = float(value)
        except (TypeError, ValueError, OverflowError):
            return None
    return value if finite_number(value) else None  # type: ignore[return-value]


def _plain_int(value: object) -> object:
    """An integer of another kind (numpy's ``int64``: ``numbers.Integral``, not a bool) as a
    Python int; anything else as it is, for the options' checks to judge."""
    if not isinstance(value, int | bool) and isinstance(value, numbers.Integral):
        return int(value)
    return value


def _cache_tokens(value: object) -> int | None:
    if value is None:
        return None
    value = _plain_int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"stream_cache_tokens must be None or an int >= 1, not {shown(value)}")
    return value


def _plain_bool(value: object) -> object:
    """numpy's True and False as Python's (as its integers are taken); anything else as it is."""
    return bool(value) if isinstance(value, np.bool_) else value


def _bool(name: str, value: object) -> bool:
    value = _plain_bool(value)
    try:
        return check_bool_option(name, value)
    except OptionError as e:
        raise InputError(e.message) from None


def _word(item: str | Word) -> Word:
    """A word as the wire takes it: a str, or a :class:`Word` whose str ``w`` and times (None or a
    finite number, as a server's ``words`` frame requires) are checked."""
    if isinstance(item, Word):
        if not isinstance(item.w, str):
            raise InputError(f"Word.w must be a str, not {type(item.w).__name__}")
        times = {}
        for name in ("start", "end"):
            value = getattr(item, name)
            seconds = None if value is None else _seconds(value)
            if value is not None and seconds is None:
                raise InputError(f"Word.{name} must be None or a finite number of seconds, not {shown(value)}")
            times[name] = seconds
        if times["start"] is item.start and times["end"] is item.end:
            return item
        return Word(item.w, times["start"], times["end"])
    if not isinstance(item, str):
        raise InputError(f"a word must be a str or a streampunct.core.wire.Word, not {type(item).__name__}")
    return Word(item)


def written_forms(*, itn: bool = False, lexicon: Iterable[Sequence[str]] = (),
                  itn_cache: str | Path | None = None) -> WrittenForms:
    """A lexicon and, with ``itn``, the ITN grammars (loaded now; raises
    :class:`~streampunct.errors.DependencyError` without the ``itn`` extra)."""
    from streampunct.text.itn import load_normalizer

    itn = _bool("itn", itn)  # a bool, as load's: "no" or 0 is not a flag
    pairs = _lexicon(lexicon)
    normalizer = load_normalizer(Path(itn_cache) if itn_cache else None, option="itn_cache") if itn else None
    return WrittenForms(Lexicon(pairs), normalizer)


def _lexicon(pairs: Iterable[Sequence[str]] | None) -> tuple[tuple[str, str], ...]:
    if pairs is None:
        return ()
    if isinstance(pairs, str | bytes | Mapping):
        raise InputError(f"lexicon must be a list of (spoken, written) pairs, not a {type(pairs).__name__}")
    try:
        return normalize_lexicon(list(pairs))
    except TypeError:
        raise InputError(f"lexicon must be a list of (spoken, written) pairs, not {shown(pairs)}") from None
    except ValueError as e:
        raise InputError(str(e)) from None


def _as_list(value: Any) -> Any:
    """An iterable's items as a list (a str, bytes or anything else as it is, for the rule to refuse)."""
    if isinstance(value, list | tuple | str | bytes | bytearray | memoryview):
        return value
    try:
        return list(value)
    except TypeError:
        return value


def _items(words: Any, name: str) -> list[Any]:
    """A string's words (split on whitespace) or an ordered iterable's items; InputError for
    anything else: a set (its iteration order is not the words') and a mapping or its views."""
    if isinstance(words, str):
        return words.split()
    if isinstance(words, Mapping | MappingView):
        raise InputError(f"{name} must be a str or a sequence of words, not a {type(words).__name__}")
    if isinstance(words, AbstractSet | _SET_ITERATOR):
        raise InputError(f"{name} must be a str or a sequence of words (a list or tuple), not a "
                         f"{type(words).__name__}: a set has no order, and words have one")
    if isinstance(words, bytes | bytearray | memoryview):
        raise InputError(f"{name} must be a str, not {type(words).__name__}: bytes are not text, decode them "
                         "first (e.g. data.decode('utf-8'))")
    try:
        items = iter(words)
    except TypeError:
        kind = "None" if words is None else type(words).__name__
        raise InputError(f"{name} must be a str or an iterable of words, not {kind}") from None
    return list(items)


def _strings(words: list[Any]) -> list[str]:
    for w in words:
        if not isinstance(w, str):
            raise InputError(f"a word must be a str, not {type(w).__name__}")
    return words

