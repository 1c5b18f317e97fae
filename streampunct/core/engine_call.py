"""A stream's model calls: what the pure core asks an engine for, and what comes back.

:class:`StreamCalls` is the core's one owner of a stream's model calls: a
:class:`~streampunct.core.stream_state.StreamState` and, with cached left context,
the :class:`~streampunct.core.stream_cache.KVCache` of that state (a new state, on
``config`` or ``resume``, gets a new, empty cache with it). It plans each call
(:meth:`StreamCalls.next_call`: an :class:`EngineCall`, the window and its
streaming-graph call) and applies what the engine gave back
(:meth:`StreamCalls.apply`: an :class:`EngineOutput`), which keeps the decided
tokens' keys and values and takes the labels. It is pure (no I/O, no clock, no
engine), and every driver uses it the same way:

* the server: :class:`~streampunct.core.session_protocol.SessionProtocol` holds one
  per stream state, :class:`~streampunct.server.session.Session` hands its calls to
  the :class:`~streampunct.server.batcher.Batcher`;
* the Python API's streams (:mod:`streampunct.api`), through the same
  ``SessionProtocol``;
* the simulations of :mod:`streampunct.evaluation.accuracy` (``evaluate``, ``bench live``).

:func:`run_calls` runs calls on an engine, synchronously, in whatever thread
calls it (a batcher's worker, or the caller's own): whole windows padded into
one engine call, streaming calls through
:func:`~streampunct.core.stream_cache.run_stream_calls`. An engine's outputs are one
typed value from there to the core: :class:`engines.base.HeadLogits`, the
punctuation logits and the truecasing head's (None without one), never one
array of both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from engines.base import Engine, HeadLogits, StreamEngine
from streampunct.core.stream_cache import KVCache, StreamCall, run_stream_calls
from streampunct.core.stream_state import Decision, StreamState, WindowRequest
from streampunct.core.windowing import pad_batch
from streampunct.errors import EngineFailedError


@dataclass(frozen=True, eq=False)
class EngineCall:
    """One model call of one stream.

    Attributes:
        request: the window (its tokens, the words it labels).
        stream: with cached left context, the streaming-graph call that serves
            ``request`` (:meth:`~streampunct.core.stream_cache.KVCache.plan`); None:
            the engine runs the whole window.
    """

    request: WindowRequest
    stream: StreamCall | None = None

    @property
    def partial(self) -> bool:
        return self.request.partial

    @property
    def work(self) -> np.ndarray | StreamCall:
        """What the engine runs (:func:`run_work`): the streaming call, or the window's tokens."""
        return self.request.input_ids if self.stream is None else self.stream

    @property
    def input_ids(self) -> np.ndarray:
        """The tokens the engine encodes: the streaming call's, or the whole window's."""
        return self.request.input_ids if self.stream is None else self.stream.input_ids

    def heads(self, output: EngineOutput) -> HeadLogits:
        """``output``'s logits over the request's rows (a streaming call's rows moved to the
        window's; the left context it did not run gets zeros: no decision reads them).
        Pure: keeps nothing (:meth:`StreamCalls.apply` does)."""
        heads = output.heads
        if self.stream is None:
            return heads
        n = len(self.request.input_ids)
        case = None if heads.case is None else self.stream.request_rows(n, heads.case)
        return HeadLogits(self.stream.request_rows(n, heads.punctuation), case)


@dataclass(frozen=True, eq=False)
class EngineOutput:
    """What an engine gave back for one :class:`EngineCall`.

    Attributes:
        heads: logits over the call's rows (float32[T, C], and [T, 4] from a
            truecasing head, else None), T = ``len(call.input_ids)``.
        kept: a streaming call's keys/values of the tokens its stream keeps
            (:func:`~streampunct.core.stream_cache.run_stream_calls`); None otherwise.
    """

    heads: HeadLogits
    kept: np.ndarray | None = None


class StreamCalls:
    """One stream state's model calls, and its cache of left context (module doc).

    ``cache``: the state's own, new :class:`~streampunct.core.stream_cache.KVCache`
    (:meth:`~streampunct.core.stream_cache.StreamCacheConfig.new`), or None to run
    whole windows.
    """

    def __init__(self, state: StreamState, cache: KVCache | None = None) -> None:
        self.state = state
        self.cache = cache

    def next_call(self, now: float, *, partial: bool = False, finals: bool = True) -> EngineCall | None:
        """The next call (:meth:`StreamState.next_request`, with its cache plan); None when
        there is nothing to do or a call is in flight. Planning changes nothing."""
        request = self.state.next_request(now, partial=partial, finals=finals)
        if request is None:
            return None
        return EngineCall(request, None if self.cache is None else self.cache.plan(request))

    def apply(self, call: EngineCall, output: EngineOutput) -> list[Decision]:
        """Take the engine's ``output`` for ``call``: the cache keeps the decided tokens, the
        state labels the words (:meth:`StreamState.apply`; new finals, or none for a partial)."""
        if call.request is not self.state.in_flight:
            raise ValueError("apply() got a call that is not in flight for this stream")
        heads = self.state.checked_heads(call.request, call.heads(output))  # before the cache keeps any
        if call.stream is not None:
            if self.cache is None:
                raise ValueError("a streaming call for a stream without a cache")
            self.cache.keep(call.stream, output.kept)
        return self.state.apply(call.request, heads)

    def abort(self, call: EngineCall) -> None:
        """The call failed: its words will be asked for again (the cache is unchanged)."""
        self.state.abort(call.request)


def run_calls(engine: Engine, calls: Sequence[EngineCall], pad_id: int) -> list[EngineOutput]:
    """Run ``calls`` on ``engine`` (:func:`run_work` on their :attr:`EngineCall.work`): the
    outputs, in order."""
    return run_work(engine, [c.work for c in calls], pad_id)


def run_work(engine: Engine, work: Sequence[np.ndarray | StreamCall], pad_id: int) -> list[EngineOutput]:
    """Run model calls on ``engine``, all whole windows (token ids int64[T]) or all
    streaming calls: the outputs, in order. Whole windows go in one padded engine call
    (:func:`run_windows`); streaming calls as
    :func:`~streampunct.core.stream_cache.run_stream_calls` groups them."""
    if not work:
        return []
    streams = [w for w in work if isinstance(w, StreamCall)]
    if len(streams) == len(work):
        # streaming calls come only from a stream with a cache, over a StreamEngine
        stream_engine = cast(StreamEngine, engine)
        return [EngineOutput(heads, kept) for heads, kept in run_stream_calls(stream_engine, streams, pad_id)]
    if streams:
        raise ValueError("whole windows and streaming calls run apart")
    return [EngineOutput(heads) for heads in run_windows(engine, work, pad_id)]  # type: ignore[arg-type]


def run_windows(engine: Engine, seqs: Sequence[np.ndarray], pad_id: int) -> list[HeadLogits]:
    """Whole windows (int64[T] each) padded into one engine call: each window's heads over
    its own rows. A truecasing head's logits come from the same run (``infer_heads``)."""
    input_ids, attention_mask = pad_batch(seqs, pad_id)
    if engine.has_case:
        punctuation, case = engine.infer_heads(input_ids, attention_mask)
        punctuation = np.asarray(punctuation)
        case = None if case is None else np.asarray(case)
    else:
        punctuation = np.asarray(engine.infer(input_ids, attention_mask))
        case = None
    if punctuation.ndim != 3 or punctuation.shape[:2] != input_ids.shape:
        raise EngineFailedError(
            f"engine returned logits of shape {punctuation.shape} for inputs {input_ids.shape}"
        )
    if case is not None and (case.ndim != 3 or case.shape[:2] != input_ids.shape):
        raise EngineFailedError(f"engine returned case logits of shape {case.shape} for inputs {input_ids.shape}")
    return [HeadLogits(punctuation[k, : len(seq)], None if case is None else case[k, : len(seq)])
            for k, seq in enumerate(seqs)]
