"""Offline decode throughput against the raw engine ceiling, measured in one run.

The offline decoder (:func:`streampunct.core.decoder.decode_offline`) runs
double-overlap windows of W tokens that advance by S = W - L - R, so it must
push about W/S times the transcript's tokens through the engine. Its ideal
speed is therefore ``engine tokens/s at [batch, W+2] / (W/S)``. This module
times the engine on full windows and the decoder on a long transcript, with
the same engine and batch size, back to back, and reports their ratio
(target: >= 0.8). The gap is everything the decoder adds: tokenization,
window planning, padding of the last (short) window of a batch, and the
per-word argmax.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from streampunct.core.decoder import decode_offline
from streampunct.core.windowing import TokenLayout, plan_offline


def measure_decode_throughput(
    engine: Any, aligner: Any, window: Any, words: Sequence[str], *, batch_size: int = 32,
    repeats: int = 3,
) -> dict[str, Any]:
    """Decoder words/s and the engine ceiling at the same batch size (best of ``repeats``)."""
    counts = [len(aligner.word_ids(w)) for w in words]
    layout = TokenLayout.from_counts(counts, aligner.label_position)
    windows = plan_offline(layout, window)
    n_tokens = sum(counts)
    run_tokens = sum(w.token_end - w.token_start for w in windows)
    seq = window.size + 2
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 20000, size=(batch_size, seq), dtype=np.int64)
    mask = np.ones_like(ids)
    engine.infer(ids[:1], mask[:1])  # warm-up
    # Engine ceiling: full windows of content tokens per second.
    n_calls = max(1, len(windows) // batch_size)
    best_engine = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n_calls):
            engine.infer(ids, mask)
        best_engine = min(best_engine, (time.perf_counter() - t0) / n_calls)
    ceiling_tok_s = batch_size * window.size / best_engine
    best_decode = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        decode_offline(words, aligner, window, engine.infer, batch_size=batch_size)
        best_decode = min(best_decode, time.perf_counter() - t0)
    overlap = window.size / window.step
    ideal_s = n_tokens * overlap / ceiling_tok_s
    return {
        "words": len(words),
        "tokens": n_tokens,
        "windows": len(windows),
        "window": {"size": window.size, "left": window.left, "right": window.right},
        "batch": batch_size,
        "overlap_factor": round(overlap, 3),
        "actual_overlap_factor": round(run_tokens / n_tokens, 3),
        "engine_ceiling_tokens_per_s": round(ceiling_tok_s, 1),
        "ideal_decode_words_per_s": round(len(words) / ideal_s, 1),
        "decode_words_per_s": round(len(words) / best_decode, 1),
        "ratio_to_ideal": round(ideal_s / best_decode, 3),
    }
