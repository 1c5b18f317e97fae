"""Accuracy of a model on a labeled file: offline decoding and simulated streaming.

Streaming is simulated with the real :class:`StreamState`: words arrive one at
a time, every window request is served at once, and ``max_delay_ms`` is
infinite, so a word is decided with exactly ``right_context`` words after it
(the end of the file is a flush). This is the accuracy a live stream gets at
that right context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streampunct.alignment import Aligner
from streampunct.metrics import Report, evaluate
from streampunct.punctuator import InferFn, decode_offline
from streampunct.stream_state import StreamConfig, StreamState
from streampunct.windowing import WindowConfig

_NEVER_MS = 10**12


@dataclass(frozen=True)
class StreamingRun:
    """Labels from a simulated stream and what it cost.

    Attributes:
        labels: one label id per word.
        model_calls: number of window requests served.
        tokens: content tokens sent to the model in all.
        latency_words: per word, how many later words had arrived when it became decidable.
        latency_s: per word, seconds from its arrival to becoming decidable.
    """

    labels: list[int]
    model_calls: int
    tokens: int
    latency_words: list[int]
    latency_s: list[float]


def offline_labels(
    words: Sequence[str], aligner: Aligner, window: WindowConfig, infer: InferFn, *, batch_size: int = 32
) -> list[int]:
    logits = decode_offline(words, aligner, window, infer, batch_size=batch_size)
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
    """Feed ``words`` one by one at ``words_per_second`` and collect the finals."""
    state = StreamState(aligner, window, StreamConfig(right_context, max_delay_ms))
    labels: list[int] = []
    lat_words: list[int] = []
    lat_s: list[float] = []
    calls = tokens = 0

    def drain(now: float) -> None:
        nonlocal calls, tokens
        while (req := state.next_request(now)) is not None:
            ids = req.input_ids[None]
            logits = np.asarray(infer(ids, np.ones_like(ids)))[0]
            calls += 1
            tokens += len(req.input_ids) - 2
            for d in state.apply(req, logits):
                labels.append(d.label)
                became = state.decidable_at(d.index)
                lat_s.append(became - state.arrival(d.index))
                # Words that had arrived by then (arrival k / rate <= became).
                arrived = min(len(words), int(became * words_per_second + 1e-9) + 1)
                lat_words.append(max(0, arrived - 1 - d.index))

    # Between arrivals, wake up at every delay deadline (as the server's timer does).
    for k, word in enumerate(words):
        now = k / words_per_second
        while (deadline := state.next_deadline()) is not None and deadline < now:
            drain(deadline)
        state.feed([word], now)
        drain(now)
    end = len(words) / words_per_second
    while (deadline := state.next_deadline()) is not None and deadline < end:
        drain(deadline)
    state.flush(end)
    drain(end)
    return StreamingRun(labels, calls, tokens, lat_words, lat_s)


def score(gold: Sequence[int], pred: Sequence[int]) -> Report:
    return evaluate(gold, pred)
