"""Cached left context for streaming windows: pure rules, no I/O, no engine.

A streaming window decides a few words with ``window.left`` tokens of left
context before them and their right context after. Without a cache, every
window encodes its left context again, though those tokens were encoded
when their own words were decided: at right context 4 that is most of the
~12 tokens encoded per finalized word. With a streaming graph
(:mod:`engines.build.stream_graph`) a stream keeps, per layer, the attention keys
and values of its last decided tokens, and the next window encodes only its
new tokens (CLS, the words it decides, their right context, SEP), attending
to the cached keys and values in place of the left context.

The rules (:class:`KVCache`), all of them functions of the request sequence,
so the server and the simulation (:mod:`streampunct.evaluation.accuracy`) give the
same labels for the same arrival schedule:

- Every token has an absolute position counted from the stream's current
  *base* (position 1 = the base token; CLS is 0). Cached keys and values keep
  the positions they were computed at, so the new tokens take the positions
  that continue them.
- A *full* call starts a base: the request's own window, positions 0..T-1,
  no cache, exactly the shipped computation. It happens for a stream's first
  decision, when the window's group does not start where the cache ends (a
  decision made after an aborted call, say), and when the new tokens would
  pass ``max_positions`` (the window size the model was trained on), about
  once every 100 tokens.
- Otherwise a *cached* call: the new tokens only, at the positions after the
  cache.
- After either, the keys and values of the decided words are appended and
  the cache keeps its last ``capacity`` tokens: memory per stream is bounded
  (one buffer of ``capacity`` tokens a stream, written in place: no array is
  made per call).
  The capacity is the model folder's ``stream_cache_tokens``, tuned on
  validation (the streaming window's left context when it names none).
  Left context costs a cached call only attention, not its encoding, so it
  can be longer than a whole window's: 60 tokens for the shipped model.
- A partial (provisional) request is served like a final one, a cached call
  when its first provisional token follows the cache (the usual case: the
  first word after the finals) and a full call otherwise, but it keeps
  nothing: the cache holds decided words only. Partials with the interim
  hypothesis then cost their new tokens, not a whole window.

What changes against the shipped windows: the left tokens' keys and values
come from the windows that decided them (they saw their own right context,
not the current window's words). Measured on validation before this became
the default (docs/results.md, "Cached left context").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engines.base import HeadLogits, StreamEngine
from streampunct.core.stream_state import WindowRequest
from streampunct.core.windowing import WindowConfig
from streampunct.labels import CASE_LABELS

#: Storage type of cached keys and values: the streaming graph's past_kv and
#: present_kv (half the memory of float32; the graph casts inside).
CACHE_DTYPE = np.float16


@dataclass(frozen=True)
class StreamShape:
    """The streaming graph's cache layout: layers, attention heads, head size."""

    layers: int
    heads: int
    head_dim: int


@dataclass(frozen=True, eq=False)
class StreamCall:
    """One streaming-graph call for one window request.

    Attributes:
        input_ids: int64[T]: CLS, the new content tokens, SEP.
        position_ids: int64[T].
        past: [L, 2, heads, C, head_dim] cached keys/values (C may be 0), oldest
            first; a view of the stream's cache.
        new_from: row of the request's ``input_ids`` that the call's row 1 is
            (1 for a full call).
        keep: call rows ``[keep[0], keep[1])`` whose keys/values are cached
            afterwards (the decided words); None leaves the cache alone.
        base: global token index at position 1 after this call.
        group_end: global token index just after the decided words.
    """

    input_ids: np.ndarray
    position_ids: np.ndarray
    past: np.ndarray
    new_from: int
    keep: tuple[int, int] | None
    base: int
    group_end: int

    @property
    def full(self) -> bool:
        return self.past.shape[3] == 0

    @property
    def past_len(self) -> int:
        return int(self.past.shape[3])

    def request_rows(self, n: int, rows: np.ndarray) -> np.ndarray:
        """The call's per-token ``rows`` ([T_call, K]) over the ``n`` rows of its request:
        rows of the request before ``new_from`` (its left context, not run) get zeros,
        which no decision reads."""
        if rows.shape[0] < len(self.input_ids):
            raise ValueError(f"the streaming call returned {rows.shape[0]} rows for {len(self.input_ids)} tokens")
        out = np.zeros((n, rows.shape[1]), dtype=np.float32)
        out[self.new_from :] = rows[1 : 1 + n - self.new_from]
        return out


class KVCache:
    """One stream's cached keys/values and the rules that use them (module docstring)."""

    def __init__(self, shape: StreamShape, *, capacity: int, max_positions: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        if max_positions < 8:
            raise ValueError("max_positions must be >= 8")
        self.shape = shape
        # every cached token has a position before ``max_positions`` (a new base starts
        # past it), so a larger capacity could never be used: it is not allocated either
        self.capacity = min(capacity, max_positions)
        self.max_positions = max_positions
        # no cached tokens: the past of every full call (zero-size, so one array serves all)
        self._no_past = _no_past(shape)
        self._kv = self._no_past  # oldest token first, at most ``capacity``: ``_buf``'s first tokens
        self._buf: np.ndarray | None = None  # ``capacity`` tokens, made at the first keep
        self._base = 0  # global token index at position 1
        self._end = -1  # global token index just after the last cached token
        self.full_calls = 0
        self.cached_calls = 0

    @property
    def tokens(self) -> int:
        """Tokens held."""
        return int(self._kv.shape[3])

    def plan(self, request: WindowRequest) -> StreamCall:
        """The call that serves ``request``; changes nothing (see :meth:`keep`)."""
        ids = request.input_ids
        n = len(ids)
        if request.token_start >= 0:
            group = request.token_start + request.decide_from - 1  # global index of the first decided token
            group_end = request.token_start + request.decide_to - 1
            last_pos = group - self._base + 1 + (n - 1 - request.decide_from)  # SEP's position in a cached call
            if self.tokens and self._end == group and last_pos < self.max_positions:
                new = np.empty(n - request.decide_from + 1, dtype=np.int64)
                new[0] = ids[0]
                new[1:] = ids[request.decide_from:]
                pos = np.arange(group - self._base, group - self._base + len(new), dtype=np.int64)
                pos[0] = 0
                if request.partial:  # provisional: nothing is kept
                    return StreamCall(new, pos, self._kv, request.decide_from, None, self._base, self._end)
                keep = (1, 1 + request.decide_to - request.decide_from)
                return StreamCall(new, pos, self._kv, request.decide_from, keep, self._base, group_end)
            if not request.partial:  # a new base
                return StreamCall(ids, np.arange(n, dtype=np.int64), self._no_past, 1, (1, request.decide_to),
                                  request.token_start, group_end)
        # a request with no known position, or a partial that does not follow the cache: whole, nothing kept
        return StreamCall(ids, np.arange(n, dtype=np.int64), self._no_past, 1, None, self._base, self._end)

    def keep(self, call: StreamCall, kept: np.ndarray | None) -> None:
        """After ``call`` ran: keep its decided words' keys/values (``kept``: the call's rows
        ``call.keep``, [L, 2, heads, n, head_dim], as :func:`run_stream_calls` cuts them;
        None when ``call.keep`` is None, and then nothing changes)."""
        if call.keep is None:
            return
        if kept is None or kept.shape[3] != call.keep[1] - call.keep[0]:
            raise ValueError("the kept keys/values do not match the call's decided tokens")
        self._append(kept, restart=call.full)
        self._base = call.base
        self._end = call.group_end
        if call.full:
            self.full_calls += 1
        else:
            self.cached_calls += 1


    def _append(self, kept: np.ndarray, *, restart: bool) -> None:
        """Append ``kept`` ([L, 2, heads, n, head_dim]) after the held tokens (after none when
        ``restart``), keeping the last ``capacity``: the tokens that stay move to the buffer's
        front, the new ones follow. In place, so the views that calls planned before this one
        hold change (none is in flight: a stream has one call at a time)."""
        cap, n = self.capacity, kept.shape[3]
        if self._buf is None:
            shape = self._no_past.shape
            self._buf = np.empty((*shape[:3], cap, shape[4]), dtype=CACHE_DTYPE)
        buf = self._buf
        held = 0 if restart else self.tokens
        stay = min(held, max(cap - n, 0))
        if stay < held:
            buf[:, :, :, :stay] = buf[:, :, :, held - stay : held]  # numpy copies overlaps safely
        new = min(n, cap)
        buf[:, :, :, stay : stay + new] = kept[:, :, :, n - new :]
        self._kv = buf[:, :, :, : stay + new]


def whole_call(ids: np.ndarray, shape: StreamShape) -> StreamCall:
    """A full call of one whole window ``ids`` (CLS ... SEP) that keeps nothing: the streaming
    graph's form of a window with no stream behind it (a server's engine probe)."""
    ids = np.asarray(ids, dtype=np.int64)
    return StreamCall(ids, np.arange(len(ids), dtype=np.int64), _no_past(shape), 1, None, 0, len(ids) - 1)


def _no_past(shape: StreamShape) -> np.ndarray:
    """The past of a full call: no cached tokens."""
    return np.zeros((shape.layers, 2, shape.heads, 0, shape.head_dim), dtype=CACHE_DTYPE)


def pad_stream_calls(calls: Sequence[StreamCall], pad_id: int) -> dict[str, np.ndarray]:
    """The streaming graph's inputs for a batch of calls, padded (keys: the graph's input names).

    Cached keys/values come first in the attention mask, new tokens after
    them; padding is masked out in both.
    """
    if not calls:
        raise ValueError("no calls")
    b = len(calls)
    t = max(len(c.input_ids) for c in calls)
    c_max = max(c.past_len for c in calls)
    shape = calls[0].past.shape
    ids = np.full((b, t), pad_id, dtype=np.int64)
    pos = np.zeros((b, t), dtype=np.int64)
    mask = np.zeros((b, c_max + t), dtype=np.int64)
    past = np.zeros((shape[0], 2, b, shape[2], c_max, shape[4]), dtype=CACHE_DTYPE)
    for k, call in enumerate(calls):
        n, c = len(call.input_ids), call.past_len
        ids[k, :n] = call.input_ids
        pos[k, :n] = call.position_ids
        mask[k, :c] = 1
        mask[k, c_max : c_max + n] = 1
        if c:
            past[:, :, k, :, :c] = call.past
    return {"input_ids": ids, "position_ids": pos, "attention_mask": mask, "past_kv": past}


def run_stream_calls(engine: StreamEngine, calls: Sequence[StreamCall], pad_id: int
                     ) -> list[tuple[HeadLogits, np.ndarray | None]]:
    """Run ``calls`` on ``engine`` (``infer_stream``) in padded engine calls: full calls
    together, cached calls together (a full window padded beside cached ones would make
    them pay its length). Returns, per call, its logits over its rows [T, C] (with the
    truecasing head's apart, when ``engine.has_case``: the graph gives them after the
    punctuation's) and the keys/values to keep (its rows ``call.keep`` as
    ``CACHE_DTYPE``, contiguous; None without ``keep``): cut here, in the engine's
    thread, rather than on the server's event loop."""
    case = engine.has_case
    out: list[tuple[HeadLogits, np.ndarray | None] | None] = [None] * len(calls)
    for full in (True, False):
        group = [k for k, c in enumerate(calls) if c.full == full]
        if not group:
            continue
        logits, present = engine.infer_stream(pad_stream_calls([calls[k] for k in group], pad_id))
        for row, k in enumerate(group):
            call = calls[k]
            kept = None
            if call.keep is not None:
                a, b = call.keep
                kept = np.ascontiguousarray(present[:, :, row, :, a:b], dtype=CACHE_DTYPE)
            rows = logits[row, : len(call.input_ids)]
            heads = HeadLogits(rows[:, : -len(CASE_LABELS)], rows[:, -len(CASE_LABELS) :]) if case \
                else HeadLogits(rows, None)
            out[k] = (heads, kept)
    return out  # type: ignore[return-value]


def new_cache(shape: tuple[int, int, int], window: WindowConfig, capacity: int | None = None) -> KVCache:
    """A stream's cache for a streaming graph of ``shape`` (layers, heads, head_dim): it
    keeps ``capacity`` tokens (the model folder's ``stream_cache_tokens``; None: the
    streaming window's left context) and starts a new base past the positions of a
    whole window (CLS + ``window.size`` tokens + SEP)."""
    return KVCache(StreamShape(*shape), capacity=capacity or window.left, max_positions=window.size + 2)


@dataclass(frozen=True)
class StreamCacheConfig:
    """How a stream's cache is made: the streaming graph's ``shape`` (layers, heads,
    head_dim) and the ``tokens`` each stream keeps (None: the streaming window's left
    context). The core makes one per stream state (:meth:`new`)."""

    shape: tuple[int, int, int]
    tokens: int | None = None

    def new(self, window: WindowConfig) -> KVCache:
        return new_cache(self.shape, window, self.tokens)
