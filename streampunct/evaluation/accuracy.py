"""Accuracy of a model on a labeled file: offline decoding and simulated streaming.

Streaming is simulated with the server's own core: a
:class:`~streampunct.core.engine_call.StreamCalls` (the real :class:`StreamState`
and, with a streaming graph, its stream cache) plans every model call and
applies its output, as a server session's protocol does. Words arrive one at
a time, every call is served at once, and ``max_delay_ms`` is infinite, so a
word is decided with exactly ``right_context`` words after it (the end of the
file is a flush). This is the accuracy a live stream gets at that right
context.

The window requests of a simulation never depend on the labels that come
back (the state only counts finals), so :func:`streaming_runs` plays each
stream twice (whole windows; a stream cache's calls depend on its past calls):
first with placeholder logits, to collect every window the stream asks for,
then, once those windows have been run in batches (each distinct window once,
across right contexts), with the real logits, through the same
:meth:`StreamCalls.apply`. The labels are those of :func:`streaming_labels`,
which serves each request as it comes.

``infer`` callables (:data:`~streampunct.core.decoder.InferFn`: an engine's
``infer``, training's torch models) give the punctuation logits, followed by a
truecasing head's where they have one (``Punctuator.infer_all``); their rows
become typed heads once, where they come in (:func:`_heads`).

Scores are the model's own labels: the end of the file is a flush, not an
end of stream, so the sentence mark forced at a stream's end
(:func:`streampunct.labels.end_of_stream_label`) is not applied; the figures
stay comparable with the training scorers and the published ones.
"""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from engines.base import Engine, HeadLogits, StreamEngine
from streampunct.core.alignment import Aligner
from streampunct.core.decoder import InferFn, decode_offline
from streampunct.core.engine_call import EngineCall, EngineOutput, StreamCalls, run_calls
from streampunct.core.options import SessionOptions
from streampunct.core.stream_cache import StreamCacheConfig
from streampunct.core.stream_state import StreamState
from streampunct.core.windowing import WindowConfig, pad_batch
from streampunct.evaluation.scores import Report, evaluate
from streampunct.labels import CASE_LABELS, LABELS

_NEVER_MS = 10**12


@dataclass(frozen=True)
class StreamingRun:
    """Labels from a simulated stream and what it cost.

    Attributes:
        labels: one label id per word.
        model_calls: number of window requests served.
        tokens: content tokens of the windows requested, in all (with a streaming
            engine the tokens encoded are fewer: see streampunct.core.stream_cache).
        latency_words: per word, how many later words had arrived when it became decidable.
        latency_s: per word, seconds from its arrival to becoming decidable.
    """

    labels: list[int]
    model_calls: int
    tokens: int
    latency_words: list[int]
    latency_s: list[float]


def offline_labels(
    words: Sequence[str],
    aligner: Aligner,
    window: WindowConfig,
    infer: InferFn,
    *,
    batch_size: int = 32,
    progress: bool = False,
) -> list[int]:
    """The model's argmax labels from the offline decode (no end-of-stream mark)."""
    logits = decode_offline(words, aligner, window, infer, batch_size=batch_size, progress=progress)
    return [int(x) for x in np.argmax(logits, axis=-1)]


def streaming_labels(
    words: Sequence[str],
    aligner: Aligner,
    window: WindowConfig,
    infer: InferFn,
    *,
    right_context: int,
    max_delay_ms: int = _NEVER_MS,
    words_per_second: float = 2.5,
) -> StreamingRun:
    """Feed ``words`` one by one at ``words_per_second`` and collect the finals.

    One engine call per window request, made when the request comes (as the
    server does for a lone stream). :func:`streaming_runs` gives the same
    labels with far fewer calls.
    """

    calls = _calls(aligner, window, SessionOptions(right_context, max_delay_ms))
    return _simulate(calls, words, _alone(infer), words_per_second)


def streaming_runs(
    words: Sequence[str],
    aligner: Aligner,
    window: WindowConfig,
    infer: InferFn | Sequence[InferFn],
    right_contexts: Sequence[int],
    *,
    max_delay_ms: int = _NEVER_MS,
    words_per_second: float = 2.5,
    batch_size: int = 1,
    progress: bool = False,
    stream_engine: StreamEngine | None = None,
) -> dict[int, StreamingRun]:
    """:func:`streaming_labels` for several right contexts, with batched engine calls.

    Each distinct window (the same tokens asked for at two right contexts,
    or twice in one stream) runs once, in engine calls of up to
    ``batch_size`` windows of similar length. With ``batch_size=1`` every
    window runs alone, as in :func:`streaming_labels`, so the labels are
    identical for any engine. Larger batches pad the windows; that is exact
    for engines whose batch rows are independent (fp32), but NOT for int8
    ONNX models with dynamic quantization, whose activation scales are
    computed over the whole batch: there labels change with the batch
    (docs/server.md, "Batch rows").

    With ``stream_engine`` (a model's streaming graph) every stream runs with
    cached left context, one window at a time, as the server runs it
    (:mod:`streampunct.core.stream_cache`); ``infer`` and ``batch_size`` are unused.

    ``infer`` may also be a sequence of callables, one per worker thread:
    engines of the same artifact (e.g. one single-threaded ONNX Runtime
    session per core). The engine calls are the same (which worker makes one
    does not change its rows), so the labels are those of one worker when the
    engines give the same logits for the same input. ONNX Runtime releases
    the GIL while it runs, so N single-threaded sessions use N cores, and on
    the short windows of a stream they do so better than one session with N
    intra-op threads.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if not right_contexts:  # nothing to simulate: no engine calls, and no empty progress bars
        return {}
    if stream_engine is not None:  # cached left context: each stream's windows depend on its past calls
        return {rc: _simulate(_calls(aligner, window, SessionOptions(rc, max_delay_ms), stream_engine), words,
                              _on(stream_engine, aligner.pad_id), words_per_second)
                for rc in dict.fromkeys(right_contexts)}
    infers = [infer] if callable(infer) else list(infer)
    if not infers:
        raise ValueError("infer must be a callable or a non-empty sequence of callables")
    contexts = list(dict.fromkeys(right_contexts))
    # Pass 1: the pure simulation asks for its windows; answers are placeholders.
    distinct: dict[bytes, int] = {}
    windows: list[np.ndarray] = []
    asked: dict[int, list[int]] = {}
    bar = _bar(len(words) * len(contexts), "planning streams", "word", progress)
    for rc in contexts:
        order = asked[rc] = []

        def record(call: EngineCall, order: list[int] = order) -> EngineOutput:
            ids = call.request.input_ids
            key = ids.tobytes()
            if key not in distinct:
                distinct[key] = len(windows)
                windows.append(ids)
            order.append(distinct[key])
            return EngineOutput(HeadLogits(np.zeros((len(ids), len(LABELS)), dtype=np.float32), None))

        _simulate(_calls(aligner, window, SessionOptions(rc, max_delay_ms)), words, record, words_per_second, bar)
    bar.close()
    logits = _run_windows(windows, infers, aligner.pad_id, batch_size, progress)
    # Pass 2: the same simulation, answered with the real logits, in the same order.
    runs: dict[int, StreamingRun] = {}
    bar = _bar(len(words) * len(contexts), "applying results", "word", progress)
    for rc, order in asked.items():
        calls = _calls(aligner, window, SessionOptions(rc, max_delay_ms))
        runs[rc] = _simulate(calls, words, _replay(windows, logits, order), words_per_second, bar)
    bar.close()
    return runs


def _bar(total: int, desc: str, unit: str, progress: bool) -> tqdm:
    return tqdm(total=total, desc=desc, unit=unit, disable=not progress, file=sys.stderr, leave=False)


def _replay(
    windows: Sequence[np.ndarray], logits: Sequence[np.ndarray], order: Sequence[int]
) -> Callable[[EngineCall], EngineOutput]:
    """Answer a stream's calls with precomputed logits, in the order it asked before."""
    answers: Iterator[int] = iter(order)

    def answer(call: EngineCall) -> EngineOutput:
        k = next(answers)
        if not np.array_equal(windows[k], call.request.input_ids):
            raise AssertionError("the replayed stream asked for other windows")
        return EngineOutput(_heads(logits[k]))

    return answer


def _run_windows(
    windows: Sequence[np.ndarray], infers: Sequence[InferFn], pad_id: int, batch_size: int, progress: bool
) -> list[np.ndarray]:
    """Logits float32[T, C] of each window, run in batches of similar length.

    The batches are fixed before any runs (windows sorted by length, then cut
    into ``batch_size``); with several ``infers`` each worker thread takes the
    next batch with its own engine, so only who runs a batch changes, never
    what a batch holds.
    """
    out: list[np.ndarray] = [np.empty(0)] * len(windows)
    by_length = sorted(range(len(windows)), key=lambda k: len(windows[k]))
    chunks = [by_length[start : start + batch_size] for start in range(0, len(by_length), batch_size)]
    lock = threading.Lock()
    pending = iter(chunks)

    with _bar(len(windows), "streaming windows", "win", progress) as bar:

        def work(infer: InferFn) -> None:
            while True:
                with lock:
                    chunk = next(pending, None)
                if chunk is None:
                    return
                input_ids, mask = pad_batch([windows[k] for k in chunk], pad_id)
                batch = np.asarray(infer(input_ids, mask), dtype=np.float32)
                for row, k in enumerate(chunk):
                    out[k] = batch[row, : len(windows[k])]
                with lock:
                    bar.update(len(chunk))

        if len(infers) == 1:
            work(infers[0])
        else:
            with ThreadPoolExecutor(len(infers), thread_name_prefix="eval-worker") as pool:
                futures = [pool.submit(work, f) for f in infers]
                try:
                    # The first failure stops the others at their next batch.
                    wait(futures, return_when=FIRST_EXCEPTION)
                    for fut in futures:
                        fut.result()
                except BaseException:
                    with lock:
                        pending = iter(())
                    raise
    return out


@dataclass(frozen=True)
class Event:
    """One client message of a stream at ``time`` seconds: words, a flush or the end."""

    time: float
    words: tuple[str, ...] = ()
    kind: str = "words"  # "words", "flush" or "end"


def schedule_labels(
    events: Sequence[Event],
    aligner: Aligner,
    window: WindowConfig,
    infer: InferFn,
    options: SessionOptions,
    *,
    stream_engine: StreamEngine | None = None,
) -> list[int]:
    """The final labels of a stream whose messages arrive on this schedule.

    The server's own rules (:class:`StreamState`), with each window served at
    once. A word's window depends on the schedule only (see
    :mod:`streampunct.core.stream_state`), so a server that serves the same
    schedule, however late, gives the same labels when its engine's rows do
    not depend on the rest of the batch. Words must be normalized.

    With ``stream_engine`` (a model's streaming graph) the windows run with
    cached left context, as the server runs them (:mod:`streampunct.core.stream_cache`).
    """
    return schedule_rows(events, aligner, window, infer, options, stream_engine=stream_engine)[0]


def schedule_rows(
    events: Sequence[Event],
    aligner: Aligner,
    window: WindowConfig,
    infer: InferFn,
    options: SessionOptions,
    *,
    stream_engine: StreamEngine | None = None,
) -> tuple[list[int], np.ndarray]:
    """:func:`schedule_labels`, with each final word's row of the model's logits (float32[n, C],
    in word order: the punctuation logits, then a truecasing head's when ``infer`` gives
    them; a streaming graph with a case head always does). The rows of the words a
    decision finalized come from the window that decided them, as the server takes them."""
    labels: list[int] = []
    rows: list[np.ndarray] = []
    calls = _calls(aligner, window, options, stream_engine)
    serve = _alone(infer) if stream_engine is None else _on(stream_engine, aligner.pad_id)

    def answer(call: EngineCall) -> EngineOutput:
        output = serve(call)
        if not call.partial:  # a final call finalizes every word it labels
            heads = call.heads(output)
            positions = call.request.positions
            punctuation = heads.punctuation[positions]
            rows.append(punctuation if heads.case is None
                        else np.concatenate([punctuation, heads.case[positions]], axis=1))
        return output

    _play(calls, events, answer, lambda decisions: labels.extend(d.label for d in decisions))
    out = np.concatenate(rows) if rows else np.zeros((0, len(LABELS)), dtype=np.float32)
    if len(out) != len(labels):
        raise AssertionError(f"{len(out)} rows for {len(labels)} finals")
    return labels, out


def _calls(aligner: Aligner, window: WindowConfig, options: SessionOptions,
           stream_engine: StreamEngine | None = None) -> StreamCalls:
    """A simulated stream's core: a new stream state and, with ``stream_engine``, its cache
    (``stream_engine.cache_tokens`` tokens, as the server keeps)."""
    cache = None if stream_engine is None else \
        StreamCacheConfig(stream_engine.stream_shape, stream_engine.cache_tokens).new(window)
    return StreamCalls(StreamState(aligner, window, options), cache)


def _on(engine: Engine, pad_id: int) -> Callable[[EngineCall], EngineOutput]:
    """Serve each call at once, alone, on ``engine`` (as the server's batcher runs one)."""
    return lambda call: run_calls(engine, [call], pad_id)[0]


def live_schedule(
    words: Sequence[str],
    *,
    words_per_second: float = 2.5,
    max_chunk: int = 4,
    jitter_ms: float = 150.0,
    seed: int = 0,
) -> list[Event]:
    """A live ASR stream of ``words``: chunks of 1..``max_chunk`` words, each committed
    when its last word has been spoken (word ``k`` at ``(k + 1) / words_per_second``)
    plus up to ``jitter_ms`` (never before the previous chunk); a flush at the end.
    """
    if words_per_second <= 0 or max_chunk < 1 or jitter_ms < 0:
        raise ValueError("words_per_second > 0, max_chunk >= 1 and jitter_ms >= 0 are required")
    rng = random.Random(seed)
    events: list[Event] = []
    i, last_t = 0, 0.0
    while i < len(words):
        j = min(len(words), i + rng.randint(1, max_chunk))
        last_t = max(last_t, j / words_per_second + rng.uniform(0.0, jitter_ms / 1000.0))
        events.append(Event(last_t, tuple(words[i:j])))
        i = j
    events.append(Event(last_t, kind="flush"))
    return events


def _heads(logits: np.ndarray) -> HeadLogits:
    """An ``infer`` callable's rows (float32[T, C]) as typed heads: the punctuation logits,
    and a truecasing head's when the callable gives them after those."""
    logits = np.asarray(logits, dtype=np.float32)
    n = len(LABELS)
    return HeadLogits(logits[:, :n], logits[:, n : n + len(CASE_LABELS)] if logits.shape[1] > n else None)


def _alone(infer: InferFn) -> Callable[[EngineCall], EngineOutput]:
    """Serve each call's whole window by itself, at once (one engine call, no padding)."""

    def serve(call: EngineCall) -> EngineOutput:
        ids = call.request.input_ids[None]
        return EngineOutput(_heads(np.asarray(infer(ids, np.ones_like(ids)))[0]))

    return serve


def _play(
    calls: StreamCalls,
    events: Sequence[Event],
    serve: Callable[[EngineCall], EngineOutput],
    on_finals: Callable[[list], None],
    bar: tqdm | None = None,
) -> tuple[int, int]:
    """Feed ``events`` to ``calls``' stream, waking at every delay deadline between them (as
    the server's timer does); ``serve`` answers each model call at once. Returns
    (model calls, content tokens of their windows); ``bar`` advances by the words of each event."""
    state = calls.state
    n_calls = tokens = 0

    def drain(now: float) -> None:
        nonlocal n_calls, tokens
        while (call := calls.next_call(now)) is not None:
            output = serve(call)
            n_calls += 1
            tokens += len(call.request.input_ids) - 2
            on_finals(calls.apply(call, output))

    for event in events:
        while (deadline := state.next_deadline()) is not None and deadline < event.time:
            drain(deadline)
        if event.kind == "words":
            state.feed(event.words, event.time)
        elif event.kind == "flush":
            state.flush(event.time)
        elif event.kind == "end":
            state.end(event.time)
        else:
            raise ValueError(f"unknown event kind {event.kind!r}")
        drain(event.time)
        if bar is not None:
            bar.update(len(event.words))
    while (deadline := state.next_deadline()) is not None:
        drain(deadline)
    return n_calls, tokens


def _simulate(
    calls: StreamCalls,
    words: Sequence[str],
    serve: Callable[[EngineCall], EngineOutput],
    words_per_second: float,
    bar: tqdm | None = None,
) -> StreamingRun:
    """Feed ``words`` one at a time at ``words_per_second``, then a flush; ``serve``
    answers each model call. ``bar``, if given, advances by one per word fed."""
    state = calls.state
    labels: list[int] = []
    lat_words: list[int] = []
    lat_s: list[float] = []

    def record(decisions: list) -> None:
        for d in decisions:
            labels.append(d.label)
            became = state.decidable_at(d.index)
            lat_s.append(became - state.arrival(d.index))
            # Words that had arrived by then (arrival k / rate <= became).
            arrived = min(len(words), int(became * words_per_second + 1e-9) + 1)
            lat_words.append(max(0, arrived - 1 - d.index))

    events = [Event(k / words_per_second, (word,)) for k, word in enumerate(words)]
    events.append(Event(len(words) / words_per_second, kind="flush"))
    n_calls, tokens = _play(calls, events, serve, record, bar)
    return StreamingRun(labels, n_calls, tokens, lat_words, lat_s)


def score(gold: Sequence[int], pred: Sequence[int]) -> Report:
    return evaluate(gold, pred)
