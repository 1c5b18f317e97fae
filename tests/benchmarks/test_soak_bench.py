"""The soak bench's arithmetic and wiring, the machine record, tokens per word from /metrics."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from benchmarks.common import cpu_features, machine
from benchmarks.server_under_test import ServerUnderTest
from benchmarks.soak_bench import (
    SoakConfig,
    add_soak_arguments,
    config_from_args,
    run_soak_from_args,
)
from benchmarks.soak_report import plot_soak, rss_trend, summary_text

# -- RSS trend -------------------------------------------------------------------------------


def test_rss_trend_fits_the_slope_after_warm_up_only():
    rng = np.random.default_rng(0)
    t = np.arange(0, 3600, 5.0)
    rss = 200.0 + 3.0 * t / 3600 + rng.normal(0, 0.05, t.size)  # 3 MB/h after warm-up
    rss[t < 300] = np.linspace(80, 200, int((t < 300).sum()))  # engine load, caches filling
    trend = rss_trend(list(zip(t, rss, strict=True)), warmup_s=300)
    assert trend["slope_mb_per_h"] == pytest.approx(3.0, abs=0.1)
    assert trend["growth_mb"] == pytest.approx(3.0 * (3595 - 300) / 3600, abs=0.1)
    assert trend["rss_after_warmup_mb"] == pytest.approx(200.25, abs=0.3)
    assert trend["rss_start_mb"] == 80.0 and trend["rss_max_mb"] >= 202.5
    assert trend["samples_after_warmup"] == int((t >= 300).sum()) and trend["residual_mb"] < 0.1


def test_rss_trend_of_a_flat_series_is_zero_and_too_few_samples_give_no_slope():
    flat = rss_trend([(float(s), 150.0) for s in range(0, 100, 5)], warmup_s=20)
    assert flat["slope_mb_per_h"] == pytest.approx(0.0, abs=1e-9) and flat["growth_mb"] == pytest.approx(0.0)
    short = rss_trend([(0.0, 10.0), (5.0, 12.0), (10.0, 12.5)], warmup_s=10)
    assert short["slope_mb_per_h"] is None and short["rss_after_warmup_mb"] == 12.5
    assert rss_trend([], warmup_s=0)["rss_start_mb"] is None


def test_rss_trend_gives_the_slopes_standard_error():
    rng = np.random.default_rng(1)
    t = np.arange(0, 1800, 1.0)
    rss = 220.0 + rng.normal(0, 5.0, t.size)  # flat, with a saw tooth's scatter
    trend = rss_trend(list(zip(t, rss, strict=True)), warmup_s=300)
    hours = t[t >= 300] / 3600
    expected = 5.0 / np.sqrt(np.sum((hours - hours.mean()) ** 2))
    assert trend["slope_se_mb_per_h"] == pytest.approx(expected, rel=0.1)
    assert abs(trend["slope_mb_per_h"]) < 4 * trend["slope_se_mb_per_h"]
    assert rss_trend([(0.0, 1.0), (5.0, 2.0)], warmup_s=0)["slope_se_mb_per_h"] is None  # two points: no scatter


def test_allocator_figures_from_the_metrics_delta():
    from benchmarks.soak_bench import allocator_figures

    delta = {("streampunct_allocator_trims_total", ()): 360.0,
             ("streampunct_allocator_trim_seconds_total", ()): 0.9,
             ("streampunct_words_in_total", ()): 10.0}
    assert allocator_figures(delta) == {"trims": 360.0, "trim_seconds": 0.9, "trim_ms_mean": 2.5}
    assert allocator_figures({})["trim_ms_mean"] is None
    text = summary_text({**payload([(0.0, 1.0), (20.0, 1.0), (40.0, 1.0)]), "allocator": allocator_figures(delta)})
    assert "allocator trims: 360, 2.5 ms each" in text


def payload(samples, warmup_s=10.0) -> dict:
    return {
        "server": {"engine": "fake"},
        "config": {"sessions": 3, "session_s": 10.0},
        "rss": rss_trend(samples, warmup_s),
        "totals": {"sessions_completed": 9, "words_sent": 300,
                   "check": {"lost": 0, "duplicated": 0, "out_of_order": 0, "mismatched": 0, "finalized": 300},
                   "errors": {"close:1011": 1}},
        "samples": samples,
        "wall_s": 60.0,
        "notes": ["a note"],
    }


def test_summary_and_plot(tmp_path):
    samples = [(float(s), 100.0 + s / 60) for s in range(0, 61, 5)]
    p = payload(samples)
    text = summary_text(p)
    assert "9 sessions (3 at a time" in text and "slope +60.00 MB/h" in text
    assert "close:1011=1" in text and "note: a note" in text
    png = plot_soak(p, tmp_path / "soak.png")
    if png is not None:  # matplotlib installed
        assert png.is_file()
    assert "slope - MB/h" in summary_text(payload(samples[:2], warmup_s=100))


# -- configuration and command line ----------------------------------------------------------


def test_soak_config_maps_onto_the_load_bench_session_and_server():
    server = ServerUnderTest(engine="fake", right_context=3, max_batch=8)
    cfg = SoakConfig(server=server, sessions=4, duration_s=60, session_s=10)
    load = cfg.load_config()
    assert load.sessions == (4,) and load.duration_s == 10 and load.right_context == 3
    assert load.server == server
    assert cfg.effective_warmup_s == 12.0 and SoakConfig().effective_warmup_s == 300.0
    with pytest.raises(ValueError, match="shorter"):
        SoakConfig(duration_s=30, session_s=60)


def test_cli_wiring_and_missing_model(tmp_path):
    from streampunct.cli import build_parser
    from streampunct.errors import InputError

    args = build_parser().parse_args(["bench", "soak", "--sessions", "5", "--duration", "90", "--session-s", "15",
                                      "--tracemalloc", "--model", str(tmp_path / "none")])
    cfg = config_from_args(args)
    assert (cfg.sessions, cfg.duration_s, cfg.session_s, cfg.tracemalloc) == (5, 90, 15, True)
    assert cfg.server == ServerUnderTest(model_dir=tmp_path / "none")
    server_args = build_parser().parse_args(["bench", "soak", "--engine", "fake", "--max-batch", "8", "--fake-sleep",
                                             "--right-context", "2", "--engine-option", "a=1", "--engine-option",
                                             "b=2"])
    assert config_from_args(server_args).server == ServerUnderTest(engine="fake", max_batch=8, fake_sleep=True,
                                                                   right_context=2, engine_options=("a=1", "b=2"))
    for flags in (["--batch-rows", "exact"], ["--engine-workers", "2"], ["--profile"], ["--itn-workers", "1"]):
        with pytest.raises(SystemExit):  # server flags that soak does not offer
            build_parser().parse_args(["bench", "soak", *flags])
    with pytest.raises(InputError, match="no model folder"):
        run_soak_from_args(args, command="test")
    p = argparse.ArgumentParser()
    add_soak_arguments(p)
    with pytest.raises(InputError, match="shorter"):
        run_soak_from_args(p.parse_args(["--duration", "10", "--session-s", "20", "--engine", "fake"]))


# -- the machine in every result file --------------------------------------------------------

CPUINFO = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512_vnni amx_int8 aes
processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512_vnni amx_int8 aes
"""


def test_cpu_features_name_the_simd_that_matters():
    f = cpu_features(CPUINFO)
    assert f["model"].startswith("Intel(R) Xeon(R) Platinum 8375C")
    assert f["avx2"] and f["avx512"] and f["vnni"]
    assert f["flags"] == ["amx_int8", "avx", "avx2", "avx512_vnni", "avx512bw", "avx512f", "fma", "sse4_2"]
    plain = cpu_features("model name : Old\nflags : fpu sse4_2 avx\n")
    assert not plain["avx2"] and not plain["avx512"] and not plain["vnni"]
    arm = cpu_features("Features : fp asimd asimddp sve i8mm\n")
    assert arm["flags"] == ["asimd", "asimddp", "i8mm", "sve"] and not arm["avx2"]


def test_machine_record_and_result_files_carry_it(tmp_path):
    from benchmarks.common import write_result

    m = machine()
    assert {"cpu", "cpu_flags", "cores", "physical_cores", "usable_cores", "python", "platform"} <= set(m)
    assert {"avx2", "avx512", "vnni", "flags"} <= set(m["cpu_flags"])
    written = json.loads(write_result("x", {"a": 1}, tmp_path, command="test").read_text())
    assert written["machine"]["cpu_flags"] == m["cpu_flags"] and written["a"] == 1


# -- tokens per finalized word from /metrics -------------------------------------------------


def test_server_figures_report_tokens_per_finalized_word():
    from benchmarks.load_metrics import metrics_delta, parse_metrics, server_figures
    from streampunct.server.batcher import BatchRecord
    from streampunct.server.metrics import ServerMetrics

    metrics = ServerMetrics()
    metrics.observe_window(partial=False, n_tokens=10)
    before = parse_metrics(metrics.render().decode())
    for _ in range(4):
        metrics.observe_window(partial=False, n_tokens=60)  # 4 windows of 60 tokens decide 40 words
    metrics.observe_window(partial=True, n_tokens=40)
    metrics.observe_batch(BatchRecord(size=5, tokens=300, seconds=0.01))
    metrics.words_finalized.inc(40)
    figures = server_figures(metrics_delta(before, parse_metrics(metrics.render().decode())), wall_s=1.0)
    assert figures["window_tokens"] == {"final": 240, "partial": 40, "engine_padded": 300}
    assert figures["final_windows"] == 4
    assert figures["tokens_per_word"] == {"final": 6.0, "with_partials": 7.0, "engine_padded": 7.5}


def test_tracemalloc_growth_report_names_the_growing_line():
    import tracemalloc

    from benchmarks.server_tracemalloc import growth_report

    tracemalloc.start(4)
    try:
        before = tracemalloc.take_snapshot()
        hoard = [bytearray(1024) for _ in range(2000)]  # about 2 MB on this line
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    report = growth_report(before, after, top=5)
    top = report["top_growth"][0]
    assert "test_soak_bench.py:" in top["where"] and "bytearray(1024)" in top["line"]
    assert top["size_diff_kb"] > 1500 and top["count_diff"] >= 2000
    assert report["traced_mb_after"] > report["traced_mb_before"]
    del hoard


def test_tracemalloc_recorder_reports_the_heap_and_a_trim(tmp_path):
    import tracemalloc

    from benchmarks.server_tracemalloc import _Recorder

    out = tmp_path / "growth.json"
    tracemalloc.start(2)
    try:
        recorder = _Recorder(out, trim=True)
        recorder.on_signal(0, None)  # the baseline
        hoard = [bytearray(4096) for _ in range(500)]
        recorder.on_signal(0, None)  # the comparison
    finally:
        tracemalloc.stop()
    del hoard
    report = json.loads(out.read_text())
    native = report["native"]
    assert set(native) == {"before", "after", "trimmed", "after_trim"}
    assert native["after"]["rss_mb"] > 0 and native["after_trim"]["rss_mb"] > 0
    if native["after"]["heap"] is not None:  # glibc
        assert native["after"]["heap"]["in_use_mb"] > 0


def test_engine_options_reach_the_server_command_line(tmp_path):
    from benchmarks.server_under_test import ServerProcess
    from benchmarks.soak_bench import SoakConfig

    cfg = SoakConfig(duration_s=120, server=ServerUnderTest(engine_options=("cpu_mem_arena=false",)))
    argv = ServerProcess(cfg.server, max_sessions=25, workdir=tmp_path).argv
    k = argv.index("--engine-option")
    assert argv[k + 1] == "cpu_mem_arena=false" and "serve" in argv


def test_engine_workers_reach_both_server_command_lines(tmp_path):
    from benchmarks.server_under_test import ServerProcess

    for engine in ("onnxruntime", "fake"):
        argv = ServerProcess(ServerUnderTest(engine=engine, engine_workers=3), max_sessions=5, workdir=tmp_path).argv
        k = argv.index("--engine-workers")
        assert argv[k + 1] == "3"


# -- a soak that measured nothing -------------------------------------------------------------


def test_run_failure_of_a_soak():
    from benchmarks.soak_bench import run_failure

    ok = payload([(0.0, 1.0)])
    assert run_failure(ok) is None
    refused = {**ok, "totals": {"sessions_completed": 0, "words_sent": 0, "check": {"finalized": 0},
                                "errors": {"connect:ConnectionRefusedError": 40}}}
    assert run_failure(refused) == "no session completed (errors connect:ConnectionRefusedError=40)"
    none_tried = {**ok, "totals": {**refused["totals"], "errors": {}}}
    assert run_failure(none_tried) == "no session completed: none started (--duration too short for a session)"
    no_finals = {**ok, "totals": {**ok["totals"], "check": {**ok["totals"]["check"], "finalized": 0},
                                  "errors": {"drain_timeout": 9}}}
    assert run_failure(no_finals) == "every session failed: no word was finalized (errors drain_timeout=9)"


def test_a_soak_in_which_no_session_completed_exits_1(capsys, monkeypatch):
    import benchmarks.soak_bench as soak_bench

    p = argparse.ArgumentParser()
    add_soak_arguments(p)
    args = p.parse_args(["--engine", "fake", "--duration", "60", "--session-s", "10"])
    refused = {**payload([(0.0, 1.0)]), "totals": {"sessions_completed": 0, "words_sent": 0, "errors":
                                                   {"connect:ConnectionRefusedError": 57}, "check": {"finalized": 0}}}
    monkeypatch.setattr(soak_bench, "run_soak_bench", lambda cfg, command=None: refused)
    assert run_soak_from_args(args, command="test") == 1
    assert capsys.readouterr().err == ("streampunct bench soak: error: no session completed "
                                       "(errors connect:ConnectionRefusedError=57)\n")
    monkeypatch.setattr(soak_bench, "run_soak_bench", lambda cfg, command=None: payload([(0.0, 1.0)]))
    assert run_soak_from_args(args, command="test") == 0


@pytest.mark.parametrize(("argv", "got"), [(["--duration", "5"], "--session-s 60, --duration 5"),
                                           (["--duration", "10", "--session-s", "10"], "--session-s 10, --duration 10")])
def test_a_session_longer_than_the_soak_names_the_options(argv, got, capsys, monkeypatch):
    import benchmarks.soak_bench as soak_bench
    from streampunct.cli import main

    monkeypatch.setattr(soak_bench, "run_soak_bench", lambda *a, **k: pytest.fail("the soak ran"))
    assert main(["bench", "soak", "--engine", "fake", *argv]) == 2
    assert capsys.readouterr().err == (f"streampunct bench: error: --session-s must be shorter than --duration "
                                       f"(got {got})\n")


@pytest.mark.parametrize(("argv", "message"), [
    (["--duration", "8", "--session-s", "4"],
     "--duration must be at least 11 s for --session-s 4, or no session may start (got --duration 8)"),
    (["--duration", "60", "--session-s", "10", "--warmup", "60"],
     "--warmup must be shorter than --duration (got --warmup 60, --duration 60)"),
])
def test_a_soak_that_cannot_start_a_session_or_measure_after_warm_up_is_refused(argv, message, capsys,
                                                                                 monkeypatch):
    """Both ran before: the first started no session and wrote its files, the second printed
    'after warm-up (30s) None MB'."""
    import benchmarks.soak_bench as soak_bench
    from streampunct.cli import main

    monkeypatch.setattr(soak_bench, "run_soak_bench", lambda *a, **k: pytest.fail("the soak ran"))
    assert main(["bench", "soak", "--engine", "fake", *argv]) == 2
    assert capsys.readouterr().err == f"streampunct bench: error: {message}\n"
    assert soak_bench.min_duration_s(60) == 18.0 and soak_bench.min_duration_s(4) == 11.0
