"""Cached left context (streampunct.core.stream_cache): which calls a stream makes, what it
keeps, and that the server gives the simulation's labels with it."""

from __future__ import annotations

import asyncio
import json
import random
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streampunct.client.stream_client import StreamClient, Transcript
from streampunct.core.engine_call import StreamCalls, run_calls
from streampunct.core.options import SessionOptions
from streampunct.core.stream_cache import (
    KVCache,
    StreamCall,
    StreamShape,
    new_cache,
    pad_stream_calls,
    run_stream_calls,
)
from streampunct.core.stream_state import StreamState
from streampunct.evaluation.accuracy import Event, _play, schedule_labels
from streampunct.server.batcher import BatcherConfig
from tests.streampunct.conftest import (
    SCHEDULE_VOCAB,
    TEST_WINDOW,
    fake_label_of_token,
    normalized,
    play_schedule,
    random_schedule,
)
from tests.streampunct.fakes import until

VOCAB = SCHEDULE_VOCAB
SHAPE = (1, 1, 2)


class FakeStreamEngine:
    """A streaming graph whose labels depend on the cache: a token's key is its id, its
    value its position, and a row's label is the fake label of its token id plus the sum
    of the keys it attends to (cached and new). Rows are independent of each other."""

    name = "fake-stream"
    stream_shape = SHAPE
    cache_tokens = None  # the streaming window's left context
    rows_independent = True
    has_case = False

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []  # (batch, new tokens, cached tokens)

    def infer_stream(self, inputs):
        ids, pos, mask, past = (inputs[k] for k in ("input_ids", "position_ids", "attention_mask", "past_kv"))
        b, t = ids.shape
        c = past.shape[4]
        self.calls.append((b, t, c))
        keys = np.concatenate([past[0, 0, :, 0, :, 0], ids.astype(np.float32)], axis=1)  # [B, C+T]
        context = (keys * mask).sum(axis=1, keepdims=True).astype(np.int64)
        logits = np.zeros((b, t, 4), dtype=np.float32)
        np.put_along_axis(logits, fake_label_of_token(ids + context)[..., None], 1.0, axis=-1)
        present = np.zeros((1, 2, b, 1, t, 2), dtype=np.float32)
        present[0, 0, :, 0, :, 0] = ids
        present[0, 1, :, 0, :, 0] = pos
        return logits, present

    def infer(self, input_ids, attention_mask):
        b, t = input_ids.shape
        inputs = {"input_ids": input_ids, "position_ids": np.tile(np.arange(t), (b, 1)),
                  "attention_mask": attention_mask, "past_kv": np.zeros((1, 2, b, 1, 0, 2), np.float32)}
        return self.infer_stream(inputs)[0]

    def infer_heads(self, input_ids, attention_mask):
        return self.infer(input_ids, attention_mask), None

    def close(self) -> None:
        pass


def _present_for(call) -> np.ndarray | None:
    """The fake graph's keys (token ids) and values (positions) of the call's kept rows."""
    if call.keep is None:
        return None
    t = len(call.input_ids)
    present = np.zeros((*SHAPE[:1], 2, SHAPE[1], t, SHAPE[2]), dtype=np.float32)
    present[0, 0, 0, :, 0] = call.input_ids
    present[0, 1, 0, :, 0] = call.position_ids
    a, b = call.keep
    return present[:, :, :, a:b]


def _stream(aligner, words, rc=2):
    state = StreamState(aligner, TEST_WINDOW, SessionOptions(right_context=rc, max_delay_ms=10**9))
    cache = new_cache(SHAPE, TEST_WINDOW)
    return state, cache


def _finish(cache, request, call, logits):
    """What the core does with a call's logits: the cache keeps the decided tokens, and the
    logits move to the request's rows."""
    cache.keep(call, _present_for(call))
    return call.request_rows(len(request.input_ids), logits)


def _serve_one(state, cache, now):
    request = state.next_request(now)
    call = cache.plan(request)
    logits = np.zeros((len(call.input_ids), 4), dtype=np.float32)
    state.apply(request, _finish(cache, request, call, logits))
    return request, call


def test_the_first_decision_is_a_full_window_and_later_ones_encode_only_new_tokens(aligner):
    words = ["the", "xylophone", "is", "okay", "and", "so", "we", "um", "what"]
    state, cache = _stream(aligner, words)
    state.feed(words[:4], 0.0)
    request, call = _serve_one(state, cache, 0.0)
    assert call.full and call.past_len == 0
    assert call.input_ids.tolist() == request.input_ids.tolist()
    assert call.position_ids.tolist() == list(range(len(request.input_ids)))
    kept = request.decide_to - 1  # left context and decided words, all cached
    assert cache.tokens == kept

    state.feed(words[4:7], 1.0)
    request, call = _serve_one(state, cache, 1.0)
    assert not call.full and call.past_len == kept
    # CLS, then the request from its first decided token on (no left context)
    assert call.input_ids.tolist() == [request.input_ids[0], *request.input_ids[request.decide_from:]]
    # positions continue those of the cached tokens: the first new one follows the last cached one
    cached_positions = call.past[0, 1, 0, :, 0].astype(int).tolist()
    assert call.position_ids[0] == 0
    assert call.position_ids[1] == cached_positions[-1] + 1
    assert cached_positions == list(range(1, kept + 1))
    assert len(call.input_ids) < len(request.input_ids)


def _second_request(aligner):
    """A stream whose first decision was served, and its second (cached) request."""
    state, cache = _stream(aligner, [])
    state.feed(["the", "a", "of", "and", "to"], 0.0)
    _serve_one(state, cache, 0.0)
    state.feed(["in", "is", "it"], 1.0)
    return state, cache, state.next_request(1.0)


def test_cached_logits_land_on_the_request_rows(aligner):
    _, cache, request = _second_request(aligner)
    call = cache.plan(request)
    logits = np.arange(len(call.input_ids) * 4, dtype=np.float32).reshape(-1, 4)
    out = _finish(cache, request, call, logits)
    assert out.shape == (len(request.input_ids), 4)
    assert not out[: call.new_from].any()  # the left context was not run
    np.testing.assert_array_equal(out[call.new_from :], logits[1:])


def test_plan_changes_nothing_so_an_aborted_call_is_planned_again_the_same(aligner):
    state, cache, request = _second_request(aligner)
    first = cache.plan(request)
    state.abort(request)
    again = cache.plan(state.next_request(1.0))
    assert first.input_ids.tolist() == again.input_ids.tolist()
    assert first.position_ids.tolist() == again.position_ids.tolist()
    assert first.past_len == again.past_len


def test_a_group_that_does_not_follow_the_cache_starts_a_new_base(aligner):
    state, cache = _stream(aligner, [])
    state.feed(["the", "a", "of", "and", "to"], 0.0)
    _serve_one(state, cache, 0.0)
    other = StreamState(aligner, TEST_WINDOW, SessionOptions(right_context=2, max_delay_ms=10**9))
    other.feed(["we", "um", "what", "so"], 0.0)
    call = cache.plan(other.next_request(0.0))  # starts at token 0: not where the cache ends
    assert call.full


def test_partials_encode_only_their_new_tokens_and_leave_the_cache_alone(aligner):
    state, cache = _stream(aligner, [])
    state.feed(["the", "a", "of", "and", "to"], 0.0)
    _serve_one(state, cache, 0.0)
    before = (cache.tokens, cache.full_calls, cache.cached_calls)
    assert before[0] == 3  # "the a of" decided and cached
    state.set_hypothesis(["in"])
    partial = state.next_request(0.0, partial=True)
    assert partial is not None and partial.partial and partial.first_word == 3
    call = cache.plan(partial)
    # a cached call: CLS, the provisional words "and to", the hypothesis "in", SEP
    assert not call.full and call.keep is None and call.past_len == 3
    assert call.input_ids.tolist() == [partial.input_ids[0], *partial.input_ids[partial.decide_from:]]
    assert call.position_ids.tolist() == [0, 4, 5, 6, 7]
    logits = np.arange(len(call.input_ids) * 4, dtype=np.float32).reshape(-1, 4)
    out = _finish(cache, partial, call, logits)
    assert out[partial.positions].tolist() == logits[1 + partial.positions - partial.decide_from].tolist()
    assert (cache.tokens, cache.full_calls, cache.cached_calls) == before  # nothing kept, nothing counted
    # The next final follows the cache as before: the partial changed nothing.
    state.apply(partial, out)
    state.feed(["in", "the"], 1.0)
    final = state.next_request(1.0)
    assert final is not None and not final.partial and not cache.plan(final).full


def test_a_partial_that_does_not_follow_the_cache_runs_whole(aligner):
    state, cache = _stream(aligner, [])
    state.set_hypothesis(["the", "a"])  # nothing decided yet: no cache to follow
    partial = state.next_request(0.0, partial=True)
    call = cache.plan(partial)
    assert call.full and call.keep is None and call.input_ids.tolist() == partial.input_ids.tolist()
    _finish(cache, partial, call, np.zeros((len(call.input_ids), 4), np.float32))
    assert (cache.tokens, cache.full_calls, cache.cached_calls) == (0, 0, 0)


def test_positions_never_pass_a_window_and_the_cache_stays_bounded(aligner):
    state, cache = _stream(aligner, [])
    rng = random.Random(3)
    t = 0.0
    while state.n_final < 400:
        t += 1.0
        state.feed([rng.choice(VOCAB) for _ in range(rng.randint(1, 4))], t)
        while state.in_flight is None and (request := state.next_request(t)) is not None:
            call = cache.plan(request)
            assert call.position_ids.max() < cache.max_positions
            if not call.full:  # the cache holds the last tokens before the new ones
                held = sorted(call.past[0, 1, 0, :, 0].astype(int).tolist())
                first_new = int(call.position_ids[1])
                assert held == list(range(first_new - len(held), first_new))
                assert len(held) == min(cache.capacity, first_new - 1)
            _finish(cache, request, call, np.zeros((len(call.input_ids), 4), np.float32))
            state.apply(request, np.zeros((len(request.input_ids), 4), np.float32))
            assert cache.tokens <= cache.capacity
    assert cache.full_calls >= 2  # new bases were started as positions ran out
    assert cache.cached_calls > 5 * cache.full_calls


def test_a_capacity_past_the_positions_is_the_positions(aligner):
    # every cached token sits before max_positions, so a larger capacity could hold no more:
    # a stream asking for a billion tokens makes the same calls as one asking for the positions,
    # and its buffer is no larger (it was allocated whole: "Unable to allocate 6.98 TiB")
    runs = []
    for capacity in (TEST_WINDOW.size + 2, 10**9):
        state = StreamState(aligner, TEST_WINDOW, SessionOptions(right_context=2, max_delay_ms=10**9))
        cache = new_cache(SHAPE, TEST_WINDOW, capacity)
        rng, t, calls = random.Random(5), 0.0, []
        while state.n_final < 150:
            t += 1.0
            state.feed([rng.choice(VOCAB) for _ in range(rng.randint(1, 4))], t)
            while state.in_flight is None and (request := state.next_request(t)) is not None:
                call = cache.plan(request)
                calls.append((call.input_ids.tolist(), call.position_ids.tolist(), call.past.copy()))
                _finish(cache, request, call, np.zeros((len(call.input_ids), 4), np.float32))
                state.apply(request, np.zeros((len(request.input_ids), 4), np.float32))
        runs.append((calls, cache))
    (small, small_cache), (huge, huge_cache) = runs
    assert huge_cache.capacity == small_cache.capacity == TEST_WINDOW.size + 2
    assert huge_cache._buf.shape == small_cache._buf.shape
    assert max(c[2].shape[3] for c in huge) > TEST_WINDOW.left
    for (ids_a, pos_a, past_a), (ids_b, pos_b, past_b) in zip(small, huge, strict=True):
        assert (ids_a, pos_a) == (ids_b, pos_b)
        np.testing.assert_array_equal(past_a, past_b)


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 12),
       keeps=st.lists(st.tuples(st.booleans(), st.integers(1, 20)), min_size=1, max_size=40))
def test_the_in_place_buffer_holds_what_concatenating_and_trimming_would(capacity, keeps):
    # the rule: after each keep, the last ``capacity`` tokens of (the held tokens, unless the
    # call was full, then the call's decided tokens), oldest first; the buffer only avoids copies
    shape = (2, 3, 4)
    cache = KVCache(StreamShape(*shape), capacity=capacity, max_positions=64)
    ref = np.zeros((shape[0], 2, shape[1], 0, shape[2]), np.float16)
    token = 0
    for full, n in keeps:
        full = full or cache.tokens == 0
        past = cache._no_past if full else cache._kv
        call = StreamCall(np.zeros(n + 2, np.int64), np.arange(n + 2), past, 1, (1, 1 + n), 0, 0)
        kept = np.broadcast_to(np.arange(token, token + n, dtype=np.float16)[None, None, None, :, None],
                               (shape[0], 2, shape[1], n, shape[2])).copy()
        kept[:, 1] *= -1  # keys and values told apart
        token += n
        cache.keep(call, kept)
        ref = kept if full else np.concatenate([ref, kept], axis=3)
        ref = ref[:, :, :, -capacity:]
        assert cache.tokens == ref.shape[3] <= capacity
        np.testing.assert_array_equal(cache._kv, ref)
        assert cache._kv.dtype == np.float16


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="capacity"):
        KVCache(StreamShape(*SHAPE), capacity=0, max_positions=64)
    with pytest.raises(ValueError, match="max_positions"):
        KVCache(StreamShape(*SHAPE), capacity=4, max_positions=4)


def test_padding_puts_cached_tokens_first_and_masks_both_parts(aligner):
    _, cache, request = _second_request(aligner)
    cached = cache.plan(request)
    full = new_cache(SHAPE, TEST_WINDOW).plan(request)
    inputs = pad_stream_calls([cached, full], pad_id=0)
    c_max, t_max = cached.past_len, max(len(cached.input_ids), len(full.input_ids))
    assert inputs["input_ids"].shape == (2, t_max)
    assert inputs["attention_mask"].shape == (2, c_max + t_max)
    assert inputs["attention_mask"][0].tolist() == [1] * c_max + [1] * len(cached.input_ids) + \
        [0] * (t_max - len(cached.input_ids))
    assert inputs["attention_mask"][1, :c_max].sum() == 0
    assert inputs["past_kv"].dtype == np.float16 and inputs["past_kv"].shape[4] == c_max

    shapes = []

    class Recording(FakeStreamEngine):
        def infer_stream(self, inp):
            shapes.append((inp["input_ids"].shape, inp["past_kv"].shape[4]))
            return super().infer_stream(inp)

    out = run_stream_calls(Recording(), [cached, full], pad_id=0)
    assert sorted(shapes) == sorted([((1, len(full.input_ids)), 0), ((1, len(cached.input_ids)), c_max)])
    assert [o[0].punctuation.shape[0] for o in out] == [len(cached.input_ids), len(full.input_ids)]
    assert all(o[0].case is None for o in out)  # no truecasing head


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=40), st.integers(0, 4), st.integers(0, 10**6))
def test_every_word_is_final_once_in_order_with_a_cache(aligner, chunks, rc, seed):
    rng = random.Random(seed)
    events, t = [], 0.0
    for n in chunks:
        t += rng.uniform(0.1, 1.5)
        events.append(Event(t, tuple(rng.choice(VOCAB) for _ in range(n))))
    events.append(Event(t + 1.0, kind="end"))
    engine = FakeStreamEngine()
    state = StreamState(aligner, TEST_WINDOW, SessionOptions(right_context=rc, max_delay_ms=1500))
    finals = []
    _play(StreamCalls(state, new_cache(SHAPE, TEST_WINDOW)), events, lambda call: run_calls(engine, [call], 0)[0],
          lambda ds: finals.extend(d.index for d in ds))
    assert finals == list(range(sum(chunks)))


def test_the_cache_changes_labels_where_the_context_matters(aligner):
    rng = random.Random(2)
    events = [Event(float(k), tuple(rng.choice(VOCAB) for _ in range(3))) for k in range(30)]
    events.append(Event(31.0, kind="end"))
    opts = SessionOptions(right_context=2, max_delay_ms=10**9)
    engine = FakeStreamEngine()
    cached = schedule_labels(events, aligner, TEST_WINDOW, engine.infer, opts, stream_engine=engine)
    whole = schedule_labels(events, aligner, TEST_WINDOW, engine.infer, opts)
    assert len(cached) == len(whole) == 90
    assert cached != whole  # the fake's labels see the keys: the cached path is really taken
    assert any(c > 0 for _, _, c in engine.calls)


async def test_the_server_gives_the_simulations_labels_with_a_cache(start_server, aligner):
    from streampunct.server.app import ServerConfig, ServerRuntime, serve

    class HoldingStreamEngine(FakeStreamEngine):
        """Once ``holding``, keeps its next streaming call (``held_rows`` windows; ``held`` says it
        came) until ``release``."""

        holding, held_rows = False, 0
        held, release = threading.Event(), threading.Event()

        def infer_stream(self, inputs):
            if self.holding and not self.held.is_set():
                self.held_rows = len(inputs["input_ids"])
                self.held.set()
                assert self.release.wait(30), "never released"
            return super().infer_stream(inputs)

    engine = HoldingStreamEngine()
    server = await serve(ServerConfig(host="127.0.0.1", port=0, batching=BatcherConfig(max_batch=64, max_wait_ms=2)),
                         ServerRuntime(lambda: engine, aligner, TEST_WINDOW, "fake-stream", stream_shape=SHAPE))
    try:
        await server.wait_ready()
        engine.holding = True  # warmed up: a stream's window stays in the engine ...
        rng = random.Random(7)
        streams = [(random_schedule(rng), k % 5) for k in range(10)]
        playing = asyncio.gather(*(play_schedule(server.url, e, rc, partials=True) for e, rc in streams))
        assert await asyncio.to_thread(engine.held.wait, 30)
        # ... until every stream has its first window there or queued (one at a time each): the
        # engine then runs them in calls of several windows.
        await until(lambda: engine.held_rows + server.batcher.queue_depth == len(streams))
        engine.release.set()
        transcripts = await asyncio.wait_for(playing, 60)
        assert max(b for b, _, _ in engine.calls) > 1  # windows of several streams shared engine calls
        assert any(c > 0 for _, _, c in engine.calls)
        for (events, rc), transcript in zip(streams, transcripts, strict=True):
            schedule = normalized(events)
            expected = schedule_labels(schedule, aligner, TEST_WINDOW, engine.infer,
                                       SessionOptions(right_context=rc, max_delay_ms=600_000), stream_engine=engine)
            assert transcript.words == [w for e in schedule for w in e.words]
            assert transcript.labels == expected, f"right_context {rc}"
    finally:
        engine.release.set()
        await server.shutdown()


async def test_the_server_keeps_as_many_tokens_as_it_is_told(aligner):
    from streampunct.server.app import ServerConfig, ServerRuntime, serve

    with pytest.raises(ValueError, match="stream_cache_tokens"):
        ServerConfig(stream_cache_tokens=0)
    engine = FakeStreamEngine()
    server = await serve(ServerConfig(host="127.0.0.1", port=0, stream_cache_tokens=5),
                         ServerRuntime(lambda: engine, aligner, TEST_WINDOW, "fake-stream", stream_shape=SHAPE))
    try:
        await server.wait_ready()
        client = await StreamClient.connect(server.url, right_context=1, max_delay_ms=600_000)
        for k in range(30):
            await client.send_words([VOCAB[k % len(VOCAB)], VOCAB[(3 * k) % len(VOCAB)]])
        await client.end()
        transcript = Transcript()
        async for message in client:
            transcript.apply(message)
        assert len(transcript.words) == 60
        cached = [c for _, _, c in engine.calls if c]
        assert cached and max(cached) == 5  # TEST_WINDOW.left would be 8
    finally:
        await server.shutdown()


def test_a_model_folder_can_switch_the_cache_off_for_auto(tmp_path, monkeypatch):
    """``"stream_cache": false`` (training.window_tuning writes it when the tuned cache fails
    its guard): ``auto`` serves and simulates whole windows; ``on`` still uses the graph."""
    from types import SimpleNamespace

    import engines.ort_engine
    import engines.registry
    from engines.base import TensorSpec
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.errors import ModelError
    from streampunct.model import load_model_info
    from streampunct.server.app import ServerConfig, _stream_shape

    past = TensorSpec("past_kv", "float16", (2, 2, "batch", 3, "past", 8))
    monkeypatch.setattr(engines.registry, "read_sidecar", lambda path: SimpleNamespace(inputs=(past,)))
    opened = []
    monkeypatch.setattr(engines.ort_engine, "open_stream_engine", lambda path, options: opened.append(path) or "graph")

    def folder(name, **meta):
        (tmp_path / name).mkdir()
        (tmp_path / name / "streampunct.json").write_text(json.dumps({"stream_artifact": "s.onnx", **meta}))
        return load_model_info(tmp_path / name)

    def punctuator(info):
        return OfflineDecoder(SimpleNamespace(name="onnxruntime"), None, TEST_WINDOW, info=info)

    on, off = folder("on"), folder("off", stream_cache=False)
    assert on.stream_cache_auto and folder("true", stream_cache=True).stream_cache_auto
    assert not off.stream_cache_auto
    assert _stream_shape(ServerConfig(stream_cache="auto"), on) == (2, 3, 8)
    assert _stream_shape(ServerConfig(stream_cache="auto"), off) is None
    assert _stream_shape(ServerConfig(stream_cache="on"), off) == (2, 3, 8)
    assert punctuator(off).stream_engine("auto") is None and not opened
    assert punctuator(off).stream_engine("on") == "graph"
    assert punctuator(on).stream_engine("auto") == "graph" and len(opened) == 2
    with pytest.raises(ModelError, match="stream_cache must be true or false"):
        folder("bad", stream_cache="no")
