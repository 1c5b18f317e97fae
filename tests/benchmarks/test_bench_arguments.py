"""Every numeric option of the benches is checked by argparse (``streampunct.commands.argtypes``):
NaN, inf, 0 or a negative number where it makes no sense is a usage error (status 2, one
``argument --flag: ...`` line), before any server starts or any work is done; the configs
refuse NaN too when built directly."""

from __future__ import annotations

import math

import pytest

from streampunct.cli import build_parser

FGT0 = "must be a finite number > 0, got"
FGE0 = "must be a finite number >= 0, got"
GT0 = "must be > 0, got"
GE0 = "must be >= 0, got"
GE1 = "must be >= 1, got"

# (bench, argv, flag, message): `streampunct bench BENCH ARGV` is refused with
# `argument FLAG: MESSAGE VALUE`
CLI_CASES = [
    ("load", ["--sessions", "1", "--duration", "nan"], "--duration", f"{FGT0} nan"),
    ("load", ["--duration", "inf"], "--duration", f"{FGT0} inf"),
    ("load", ["--duration", "0"], "--duration", f"{GT0} 0"),
    ("load", ["--wps", "nan"], "--wps", f"{FGT0} nan"),
    ("load", ["--wps", "-2.5"], "--wps", f"{GT0} -2.5"),
    ("load", ["--sessions", "10", "0"], "--sessions", f"{GE1} 0"),
    ("load", ["--max-chunk", "0"], "--max-chunk", f"{GE1} 0"),
    ("load", ["--jitter-ms", "-1"], "--jitter-ms", f"{GE0} -1"),
    ("load", ["--jitter-ms", "nan"], "--jitter-ms", f"{FGE0} nan"),
    ("load", ["--prefill", "-1"], "--prefill", f"{GE0} -1"),
    ("load", ["--slo-p95-ms", "nan"], "--slo-p95-ms", f"{FGT0} nan"),
    ("load", ["--target", "0"], "--target", f"{GE1} 0"),
    ("load", ["--max-total-s", "-1"], "--max-total-s", f"{GT0} -1"),
    ("load", ["--refine", "-1"], "--refine", f"{GE0} -1"),
    ("load", ["--client-processes", "-1"], "--client-processes", f"{GE0} -1"),
    # the started server's flags (benchmarks.server_under_test), as serve takes them
    ("load", ["--max-batch", "0"], "--max-batch", f"{GE1} 0"),
    ("load", ["--max-wait-ms", "nan"], "--max-wait-ms", f"{FGE0} nan"),
    ("load", ["--engine-workers", "0"], "--engine-workers", f"{GE1} 0"),
    ("load", ["--workers", "0"], "--workers", f"{GE1} 0"),
    ("load", ["--stream-cache-tokens", "0"], "--stream-cache-tokens", f"{GE1} 0"),
    ("load", ["--right-context", "-1"], "--right-context", f"{GE0} -1"),
    ("load", ["--max-delay-ms", "-1"], "--max-delay-ms", f"{GE0} -1"),
    ("load", ["--itn-workers", "-1"], "--itn-workers", f"{GE0} -1"),
    ("load", ["--fake-batch-ms", "nan"], "--fake-batch-ms", f"{FGE0} nan"),
    ("load", ["--fake-token-us", "-1"], "--fake-token-us", f"{GE0} -1"),
    ("soak", ["--wps", "0"], "--wps", f"{GT0} 0"),
    ("soak", ["--wps", "-1"], "--wps", f"{GT0} -1"),
    ("soak", ["--wps", "nan"], "--wps", f"{FGT0} nan"),
    ("soak", ["--duration", "nan"], "--duration", f"{FGT0} nan"),
    ("soak", ["--session-s", "inf"], "--session-s", f"{FGT0} inf"),
    ("soak", ["--sessions", "0"], "--sessions", f"{GE1} 0"),
    ("soak", ["--sample-s", "0"], "--sample-s", f"{GT0} 0"),
    ("soak", ["--warmup", "nan"], "--warmup", f"{FGE0} nan"),
    ("soak", ["--max-batch", "-3"], "--max-batch", f"{GE1} -3"),
    ("flood", ["--timeout-s", "nan"], "--timeout-s", f"{FGT0} nan"),
    ("flood", ["--idle-s", "nan"], "--idle-s", f"{FGE0} nan"),
    ("flood", ["--idle-s", "-1"], "--idle-s", f"{GE0} -1"),
    ("flood", ["--words", "0"], "--words", f"{GE1} 0"),
    ("flood", ["--message-words", "0"], "--message-words", f"{GE1} 0"),
    ("flood", ["--warmup-words", "-1"], "--warmup-words", f"{GE0} -1"),
    ("hypotheses", ["--duration", "nan"], "--duration", f"{FGT0} nan"),
    ("hypotheses", ["--duration", "inf"], "--duration", f"{FGT0} inf"),
    ("hypotheses", ["--sessions", "0"], "--sessions", f"{GE1} 0"),
    ("hypotheses", ["--max-wait-ms", "-1"], "--max-wait-ms", f"{GE0} -1"),
    ("live", ["--sessions", "0"], "--sessions", f"{GE1} 0"),
    ("live", ["--wps", "nan"], "--wps", f"{FGT0} nan"),
    ("live", ["--right-context", "-2"], "--right-context", f"{GE0} -2"),
    ("triton", ["--model", "m", "--duration", "nan"], "--duration", f"{FGT0} nan"),
    ("triton", ["--model", "m", "--sessions", "20", "0"], "--sessions", f"{GE1} 0"),
    ("triton", ["--model", "m", "--slo-p95-ms", "nan"], "--slo-p95-ms", f"{FGT0} nan"),
    ("triton", ["--model", "m", "--max-total-s", "-1"], "--max-total-s", f"{GT0} -1"),
    ("triton", ["--model", "m", "--triton-max-batch", "0"], "--triton-max-batch", f"{GE1} 0"),
    ("triton", ["--model", "m", "--triton-queue-delay-us", "-1"], "--triton-queue-delay-us", f"{GE0} -1"),
    ("triton", ["--model", "m", "--triton-threads", "0"], "--triton-threads", f"{GE1} 0"),
    ("triton", ["--model", "m", "--local-threads", "0"], "--local-threads", f"{GE1} 0"),
    ("triton", ["--model", "m", "--engine-workers", "0"], "--engine-workers", f"{GE1} 0"),
]


@pytest.mark.parametrize(("bench", "argv", "flag", "message"), CLI_CASES)
def test_a_bench_option_out_of_range_is_a_usage_error(bench, argv, flag, message, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["bench", bench, *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"streampunct bench {bench}: error: argument {flag}: {message}\n" in err


def test_in_range_values_still_parse():
    """The edges each option allows: 0 where 0 means none or off, and the smallest count."""
    args = build_parser().parse_args(["bench", "load", "--sessions", "1", "--duration", "0.5", "--wps", "0.1",
                                      "--max-chunk", "1", "--jitter-ms", "0", "--prefill", "0", "--refine", "0",
                                      "--client-processes", "0", "--max-wait-ms", "0", "--right-context", "0",
                                      "--max-delay-ms", "0", "--itn-workers", "0", "--fake-batch-ms", "0"])
    assert (args.sessions, args.duration, args.jitter_ms, args.prefill, args.client_processes) == ([1], 0.5, 0.0, 0, 0)
    assert (args.max_wait_ms, args.right_context, args.max_delay_ms, args.itn_workers) == (0.0, 0, 0, 0)
    assert build_parser().parse_args(["bench", "soak", "--warmup", "0"]).warmup == 0.0
    assert build_parser().parse_args(["bench", "flood", "--idle-s", "0", "--warmup-words", "0"]).idle_s == 0.0
    triton = build_parser().parse_args(["bench", "triton", "--model", "m", "--sessions", "--nice", "-5",
                                        "--triton-queue-delay-us", "0"])
    assert (triton.sessions, triton.nice, triton.triton_queue_delay_us) == ([], -5, 0)
    assert build_parser().parse_args(["bench", "load", "--seed", "-7"]).seed == -7  # a seed is any integer
    assert build_parser().parse_args(["bench", "accuracy"]).stream_cache == "auto"  # as serve serves
    assert build_parser().parse_args(["bench", "accuracy", "--stream-cache", "off"]).stream_cache == "off"


# -- the benches run as python -m ... --------------------------------------------------------


def _main(module: str):
    import importlib

    return importlib.import_module(f"benchmarks.{module}").main


MAIN_CASES = [
    ("partial_threshold", ["--thresholds", "0", "1"], "--thresholds", "must be in [0, 1), got 1"),
    ("partial_threshold", ["--thresholds", "nan"], "--thresholds", "must be in [0, 1), got nan"),
    ("partial_threshold", ["--thresholds", "-0.1"], "--thresholds", "must be in [0, 1), got -0.1"),
    ("partial_threshold", ["--max-words", "0"], "--max-words", f"{GE1} 0"),
    ("partial_threshold", ["--sessions", "0"], "--sessions", f"{GE1} 0"),
    ("partial_threshold", ["--wps", "nan"], "--wps", f"{FGT0} nan"),
    ("torch_engine_bench", ["--batch-sizes", "1", "0"], "--batch-sizes", f"{GE1} 0"),
    ("torch_engine_bench", ["--seq-len", "0"], "--seq-len", f"{GE1} 0"),
    ("torch_engine_bench", ["--stream-batch-sizes", "-8"], "--stream-batch-sizes", f"{GE1} -8"),
    ("torch_engine_bench", ["--stream-new", "0"], "--stream-new", f"{GE1} 0"),
    ("torch_engine_bench", ["--stream-past", "-1"], "--stream-past", f"{GE0} -1"),
    ("torch_engine_bench", ["--min-seconds", "nan"], "--min-seconds", f"{FGE0} nan"),
    ("int8_accuracy", ["m", "--data", "d", "--skip-lines", "-1"], "--skip-lines", f"{GE0} -1"),
    ("int8_accuracy", ["m", "--data", "d", "--max-words", "0"], "--max-words", f"{GE1} 0"),
    ("int8_accuracy", ["m", "--data", "d", "--threads", "0"], "--threads", f"{GE1} 0"),
    ("cpu_profile", ["stacks.txt", "--cpu-ms-per-word", "nan"], "--cpu-ms-per-word", f"{FGE0} nan"),
    ("cpu_profile", ["stacks.txt", "--cpu-ms-per-word", "-1"], "--cpu-ms-per-word", f"{GE0} -1"),
    ("mark_rate", ["m", "--words", "0"], "--words", f"{GE1} 0"),
    ("compare_models", ["a", "b", "--window", "126", "-1", "20"], "--window", f"{GE0} -1"),
    ("compare_models", ["a", "b", "--window", "0", "40", "20"], "--window", "window size must be >= 1"),
]


@pytest.mark.parametrize(("module", "argv", "flag", "message"), MAIN_CASES)
def test_a_python_m_bench_option_out_of_range_is_a_usage_error(module, argv, flag, message, capsys, monkeypatch):
    if module == "compare_models":  # the window is checked before the validation set is read
        import training.data

        monkeypatch.setattr(training.data, "load_validation_docs", lambda *a, **k: pytest.fail("the bench ran"))
    with pytest.raises(SystemExit) as exc:
        _main(module)(argv)
    assert exc.value.code == 2
    assert f"error: argument {flag}: {message}" in capsys.readouterr().err


# -- the configs, built directly ------------------------------------------------------------

NAN, INF = math.nan, math.inf


def _configs():
    from benchmarks.flood_bench import FloodConfig
    from benchmarks.hypothesis_load import HypothesisLoadConfig
    from benchmarks.live_bench import LiveBenchConfig
    from benchmarks.load_bench import LoadBenchConfig
    from benchmarks.server_under_test import ServerUnderTest
    from benchmarks.soak_bench import SoakConfig

    return [
        (LoadBenchConfig, {"duration_s": NAN}, "duration_s must be a finite number > 0, not nan"),
        (LoadBenchConfig, {"duration_s": INF}, "duration_s must be a finite number > 0, not inf"),
        (LoadBenchConfig, {"words_per_second": NAN}, "words_per_second must be a finite number > 0, not nan"),
        (LoadBenchConfig, {"jitter_ms": NAN}, "jitter_ms must be a finite number >= 0, not nan"),
        (LoadBenchConfig, {"stagger_s": NAN}, "stagger_s must be a finite number >= 0, not nan"),
        (LoadBenchConfig, {"slo_p95_ms": NAN}, "slo_p95_ms must be a finite number > 0, not nan"),
        (LoadBenchConfig, {"max_total_s": -1.0}, "max_total_s must be a finite number > 0, not -1.0"),
        (LoadBenchConfig, {"drain_timeout_s": NAN}, "drain_timeout_s must be a finite number > 0, not nan"),
        (LoadBenchConfig, {"refine_steps": -1}, "refine_steps >= 0"),
        (SoakConfig, {"words_per_second": 0.0}, "words_per_second must be a finite number > 0, not 0.0"),
        (SoakConfig, {"words_per_second": NAN}, "words_per_second must be a finite number > 0, not nan"),
        (SoakConfig, {"duration_s": NAN}, "duration_s must be a finite number > 0, not nan"),
        (SoakConfig, {"session_s": NAN}, "session_s must be a finite number > 0, not nan"),
        (SoakConfig, {"warmup_s": NAN}, "warmup_s must be a finite number >= 0, not nan"),
        (FloodConfig, {"timeout_s": NAN}, "timeout_s must be a finite number > 0, not nan"),
        (FloodConfig, {"idle_s": NAN}, "idle_s must be a finite number >= 0, not nan"),
        (HypothesisLoadConfig, {"duration_s": NAN}, "duration_s must be a finite number > 0, not nan"),
        (HypothesisLoadConfig, {"duration_s": INF}, "duration_s must be a finite number > 0, not inf"),
        (LiveBenchConfig, {"jitter_ms": NAN}, "jitter_ms must be a finite number >= 0, not nan"),
        (LiveBenchConfig, {"words_per_second": NAN}, "words_per_second must be a finite number > 0, not nan"),
        (ServerUnderTest, {"max_wait_ms": NAN}, "max_wait_ms must be a finite number >= 0, not nan"),
        (ServerUnderTest, {"fake_token_us": -1.0}, "fake_token_us must be a finite number >= 0, not -1.0"),
        (ServerUnderTest, {"startup_timeout_s": NAN}, "startup_timeout_s must be a finite number > 0, not nan"),
        (ServerUnderTest, {"max_batch": 0}, "max_batch must be >= 1, not 0"),
    ]


@pytest.mark.parametrize("index", range(len(_configs())))
def test_the_configs_refuse_nan_and_out_of_range_values(index):
    cls, kwargs, message = _configs()[index]
    with pytest.raises(ValueError) as exc:
        cls(**kwargs)
    assert message in str(exc.value)



@pytest.mark.parametrize(("argv", "message"), [
    (["--seq-lens", "64", "100000"],
     "--seq-lens 100000 is longer than the model's 512 positions (at most 512 tokens a row)"),
    (["--seq-lens", "64", "--stream-past", "449"],
     "--seq-lens 64 with --stream-past 449 is 513 tokens, more than the model's 512 positions "
     "(new + cached at most 512)"),
])
def test_an_engine_bench_row_longer_than_the_model_is_one_line_before_any_engine(argv, message, tmp_path, capsys,
                                                                                  monkeypatch):
    import benchmarks.engine_bench as engine_bench
    from streampunct.cli import main

    for name in ("run_engine_bench", "run_stream_bench", "load_engine"):
        monkeypatch.setattr(engine_bench, name, lambda *a, **k: pytest.fail("an engine ran"))
    out = tmp_path / "engine.json"
    assert main(["bench", "engine", *argv, "--out-json", str(out)]) == 2
    assert capsys.readouterr().err == f"streampunct bench: error: {message}\n"
    with pytest.raises(SystemExit) as exc:  # python -m benchmarks.engine_bench: a usage error
        _main("engine_bench")([*argv, "--out-json", str(out)])
    assert exc.value.code == 2 and capsys.readouterr().err.endswith(f": error: {message}\n")
    assert not out.exists()
    # the longest a row can be still runs
    assert engine_bench.too_long([512], None) is None and engine_bench.too_long([64], 448) is None


@pytest.mark.parametrize("bench", ["load", "soak", "flood", "live", "hypotheses", "failover", "itn", "accuracy"])
def test_an_unknown_engine_is_the_bench_s_usage_error_not_the_child_server_s(bench, capsys, monkeypatch):
    """``--engine bogus`` is refused when the bench parses it, in one ``argument --engine`` line
    naming serve's own backends, before any server starts (not the server's usage text after)."""
    import benchmarks.server_under_test as sut
    from engines.registry import BACKENDS
    from streampunct.cli import main

    def never(*_a, **_k):
        pytest.fail("a server was started for an unknown engine")

    monkeypatch.setattr(sut.ServerProcess, "start", never)
    with pytest.raises(SystemExit) as e:
        main(["bench", bench, "--engine", "bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    choices = ", ".join(repr(name) for name in BACKENDS)
    assert err.splitlines()[-1] == (f"streampunct bench {bench}: error: argument --engine: invalid choice: "
                                    f"'bogus' (choose from {choices})")
    assert "streampunct serve" not in err
    assert build_parser().parse_args(["bench", bench, "--engine", "fake"]).engine == "fake"
