"""The latency contract as one pure function: when each word of a stream becomes decidable.

A word is *decidable* at the first of (``docs/protocol.md``, "Latency
contract"): ``right_context`` more words have arrived after it;
``max_delay_ms`` have passed since it arrived; the client sent ``flush`` or
``end`` after it. :func:`decidable_times` computes that for a whole schedule.
It is the one definition: the client's :class:`~streampunct.client.stream_client.LatencyTracker`
and the load bench measure the finalize margin against it, and
:class:`~streampunct.core.stream_state.StreamState`, which decides the same thing
online as words and flushes come in, is tested to agree with it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def decidable_times(
    arrivals: Sequence[float] | np.ndarray,
    right_context: int,
    max_delay_ms: float,
    flushes: Sequence[tuple[int, float]] = (),
) -> np.ndarray:
    """Seconds at which each word became decidable (float64[n]).

    Args:
        arrivals: when each word arrived (nondecreasing, seconds).
        right_context: words after a word that make it decidable.
        max_delay_ms: the delay bound.
        flushes: ``(words_before, time)`` of each ``flush`` or ``end``: the
            number of words that had arrived when it came, and when.
    """
    if right_context < 0 or max_delay_ms < 0:
        raise ValueError("right_context and max_delay_ms must be >= 0")
    sent = np.asarray(arrivals, dtype=np.float64)
    n = len(sent)
    out = sent + max_delay_ms / 1000.0
    if right_context < n:
        out[: n - right_context] = np.minimum(out[: n - right_context], sent[right_context:])
    # A flush decides every word before it: the first flush after a word bounds it.
    bound = np.full(n, np.inf)
    for upto, when in sorted(flushes, key=lambda f: f[1], reverse=True):
        bound[: min(upto, n)] = when
    return np.minimum(out, bound)
