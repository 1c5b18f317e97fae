"""``bench live``: parallel live streams through a real server, against the simulation."""

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.live_bench import (
    LIVE_SERVER,
    LiveBenchConfig,
    disagreements,
    run_live_bench,
    segments,
)
from streampunct.model import DEFAULT_MODEL_DIR


def test_segments_cover_the_file_in_order():
    assert segments(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert segments(2, 5) == [(0, 1), (1, 2)]
    spans = segments(12626, 60)
    assert spans[0][0] == 0 and spans[-1][1] == 12626
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert {b - a for a, b in spans} <= {210, 211}
    with pytest.raises(ValueError):
        LiveBenchConfig(sessions=0)


def test_the_result_file_is_named_after_the_data_unless_named():
    assert LiveBenchConfig().result_name == "live_test2011"
    assert LiveBenchConfig(data=Path("data/iwslt2011/test2011asr")).result_name == "live_test2011asr"
    assert LiveBenchConfig(data=Path("cache/swda_val.tsv")).result_name == "live_swda_val"
    assert LiveBenchConfig(data=Path("cache/swda_val.tsv"), name="mine").result_name == "mine"
    cased = Path("../shared/data/cased_spoken/swda_val_cased.txt")
    assert LiveBenchConfig(data=cased, text=True).result_name == "live_swda_val"


def test_punctuated_text_streams_the_words_and_labels_a_tsv_would(tmp_path):
    from benchmarks.live_bench import add_live_arguments, read_live_data

    text = tmp_path / "talk_cased.txt"
    text.write_text("So, what do you think? I think it's great. Really great!\n", encoding="utf-8")
    tsv = tmp_path / "talk.tsv"
    tsv.write_text("so\tCOMMA\nwhat\tO\ndo\tO\nyou\tO\nthink\tQUESTION\ni\tO\nthink\tO\nit\tO\n"
                   "'s\tO\ngreat\tPERIOD\nreally\tO\ngreat\tPERIOD\n", encoding="utf-8")
    p = argparse.ArgumentParser()
    add_live_arguments(p)
    args = p.parse_args(["--text", "--data", str(text)])
    from_text = read_live_data(LiveBenchConfig(data=args.data, text=args.text))
    from_tsv = read_live_data(LiveBenchConfig(data=tsv))
    assert from_text.words == from_tsv.words and from_text.labels == from_tsv.labels


def test_live_streams_through_the_shipped_model_agree_with_the_simulation(tmp_path):
    if not (DEFAULT_MODEL_DIR / "streampunct.json").is_file():
        pytest.skip(f"no model at {DEFAULT_MODEL_DIR}")
    text = ("so what do you think about that . i think it is great , really great . "
            "where do we go from here ? we go home and we rest . ") * 5
    toks = text.split()
    marks = {".": "PERIOD", ",": "COMMA", "?": "QUESTION"}
    rows = [f"{w}\t{marks.get(nxt, 'O')}" for w, nxt in zip(toks, toks[1:] + ["x"], strict=True) if w not in marks]
    data = tmp_path / "small.tsv"
    data.write_text("\n".join(rows) + "\n")
    cfg = LiveBenchConfig(server=replace(LIVE_SERVER, batch_rows="exact"), data=data, sessions=3,
                          words_per_second=40.0, out_dir=tmp_path, name="live_small")
    result = run_live_bench(cfg, command="test")
    assert result["lost_words"] == 0 and result["mismatched_sessions"] == 0
    assert result["n_words"] == len(rows) and result["sessions"] == 3
    # the int8 engine's windows run alone (batch_rows exact) and no delay bound fires at
    # 40 words/s: the server gives exactly the simulation's labels
    assert result["label_agreement"] == 1.0 and result["disagreements"] == []
    assert result["disagreements_total"] == 0
    assert 0 < result["server"]["overall_f1"] <= 100
    saved = json.loads((tmp_path / "live_small.json").read_text())
    assert saved["server"]["overall_f1"] == result["server"]["overall_f1"] and "machine" in saved


def test_disagreements_name_the_words_and_both_labels():
    words = ["so", "what", "now", "then", "ok"]
    assert disagreements(words, [0, 1, 0, 2, 3], [0, 1, 0, 2, 3]) == []
    assert disagreements(words, [0, 1, 0, 2, 3], [0, 0, 0, 3, 3]) == [
        {"index": 1, "word": "what", "server": "COMMA", "simulation": "O"},
        {"index": 3, "word": "then", "server": "PERIOD", "simulation": "QUESTION"},
    ]
    assert len(disagreements(words, [1] * 5, [0] * 5, limit=2)) == 2
    assert len(disagreements(words, [1] * 5, [0] * 5, limit=None)) == 5


def test_hypotheses_come_before_each_chunk_and_never_before_the_previous_event():
    from benchmarks.live_bench import with_hypotheses
    from streampunct.evaluation.accuracy import Event

    events = [Event(0.5, ("a", "b")), Event(0.55, ("c",)), Event(1.0, kind="flush")]
    assert with_hypotheses(events) == [
        Event(0.3, ("a",), "hypothesis"), Event(0.4, ("a", "b"), "hypothesis"), events[0],
        Event(0.5, ("c",), "hypothesis"), Event(0.5, ("c",), "hypothesis"), events[1], events[2],
    ]


def test_live_streams_with_partials_report_their_interim_stability(tmp_path, capsys):
    if not (DEFAULT_MODEL_DIR / "streampunct.json").is_file():
        pytest.skip(f"no model at {DEFAULT_MODEL_DIR}")
    from benchmarks.live_bench import add_live_arguments

    text = "so what do you think about that . i think it is great , really great . where do we go ? " * 3
    toks = text.split()
    marks = {".": "PERIOD", ",": "COMMA", "?": "QUESTION"}
    rows = [f"{w}\t{marks.get(nxt, 'O')}" for w, nxt in zip(toks, toks[1:] + ["x"], strict=True) if w not in marks]
    data = tmp_path / "small.tsv"
    data.write_text("\n".join(rows) + "\n")
    p = argparse.ArgumentParser()
    add_live_arguments(p)
    args = p.parse_args(["--partials", "--capitalize"])
    assert args.partials and args.hypotheses and args.capitalize
    assert not p.parse_args(["--partials", "--no-hypotheses"]).hypotheses
    cfg = LiveBenchConfig(server=replace(LIVE_SERVER, batch_rows="exact"), data=data, sessions=2,
                          words_per_second=20.0, out_dir=tmp_path, name="live_partials", partials=True,
                          capitalize=True)
    result = run_live_bench(cfg, command="test")
    # hypotheses and partials never change finals: the server still gives the simulation's labels
    assert result["lost_words"] == 0 and result["label_agreement"] == 1.0
    stability = result["interim_stability"]
    assert stability["words"] == len(rows)
    # every chunk is shown before it is final (as a hypothesis, then as committed words), but
    # the last chunk (<= 4 words) may be flushed before a partial for it is computed
    assert len(rows) - 4 <= stability["words_shown_in_partials"] <= len(rows)
    assert 0 <= stability["last_partial_accuracy"] <= 100 and stability["changes_per_100_words"] >= 0
    assert "interim: last partial = final for" in capsys.readouterr().out
    saved = json.loads((tmp_path / "live_partials.json").read_text())
    assert saved["interim_stability"] == stability


@pytest.mark.parametrize("argv, message", [
    (["--sessions", "0"], "argument --sessions: must be >= 1, got 0"),
    (["--wps", "-1"], "argument --wps: must be > 0, got -1"),
    (["--wps", "nan"], "argument --wps: must be a finite number > 0, got nan"),
])
def test_bad_sessions_or_speech_rate_are_one_line_usage_errors(argv, message, capsys, monkeypatch):
    """As the other benches: argparse refuses them (exit 2, one line, not a traceback) before any server."""
    import benchmarks.live_bench as live_bench
    from streampunct.cli import main

    monkeypatch.setattr(live_bench, "run_live_bench", lambda *a, **k: pytest.fail("the bench ran"))
    with pytest.raises(SystemExit) as exc:
        main(["bench", "live", "--engine", "fake", *argv])
    assert exc.value.code == 2
    assert capsys.readouterr().err.endswith(f"streampunct bench live: error: {message}\n")
    with pytest.raises(ValueError, match="words_per_second must be a finite number > 0, not nan"):
        LiveBenchConfig(words_per_second=float("nan"))  # the config, built directly


def test_a_run_in_which_every_session_failed_exits_1_before_the_simulation(tmp_path, capsys, monkeypatch):
    import streampunct.core.decoder as decoder
    from streampunct.cli import main

    monkeypatch.setattr(decoder.OfflineDecoder, "from_model_dir",
                        classmethod(lambda *a, **k: pytest.fail("the simulation ran")))
    data = tmp_path / "small.tsv"
    data.write_text("so\tCOMMA\nwhat\tO\ndo\tO\nyou\tQUESTION\nthink\tO\nabout\tPERIOD\n")
    url = "ws://127.0.0.1:9/v1/stream"  # nothing listens
    assert main(["bench", "live", "--url", url, "--engine", "fake", "--data", str(data), "--sessions", "2",
                 "--out-dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"streampunct bench live: error: every session failed (2 tried; ConnectError=2): "
                          f"cannot connect to {url}: ")
    assert err.count("\n") == 1
    assert not (tmp_path / "out" / "live_small.json").exists()


def test_lost_words_exit_1_with_one_line(capsys, monkeypatch):
    import benchmarks.live_bench as live_bench
    from streampunct.cli import main

    result = {"lost_words": 210, "mismatched_sessions": 0, "failed_sessions": 1}
    monkeypatch.setattr(live_bench, "run_live_bench", lambda *a, **k: result)
    assert main(["bench", "live", "--engine", "fake"]) == 1
    assert capsys.readouterr().err == ("streampunct bench live: error: 1 sessions failed, 210 words lost, "
                                       "0 sessions with other words than sent: not scored\n")
    monkeypatch.setattr(live_bench, "run_live_bench", lambda *a, **k: dict(result, lost_words=0, failed_sessions=0))
    assert main(["bench", "live", "--engine", "fake"]) == 0


def test_a_failed_session_is_returned_and_a_bug_keeps_its_traceback(monkeypatch):
    """One session that cannot connect does not end the run (its words count as lost); an error
    that is neither the project's nor an OSError is a bug of the bench and is raised."""
    import asyncio

    import benchmarks.live_bench as live_bench
    from streampunct.client.stream_client import ConnectError

    async def fake(url, events, options, *, partials=False, capitalize=None):
        if events == "refused":
            raise ConnectError("cannot connect")
        if events == "bug":
            raise KeyError("bug")
        return events, []

    monkeypatch.setattr(live_bench, "stream_schedule", fake)
    outcomes = asyncio.run(live_bench._run_sessions("ws://x", ["ok", "refused"], None))
    assert outcomes[0] == ("ok", []) and isinstance(outcomes[1], ConnectError)
    with pytest.raises(KeyError):
        asyncio.run(live_bench._run_sessions("ws://x", ["ok", "bug"], None))


def test_a_malformed_url_is_refused_before_any_session(tmp_path):
    from streampunct.client.stream_client import ConnectError

    cfg = LiveBenchConfig(url="junk", out_dir=tmp_path / "out", data=tmp_path / "missing.tsv")
    with pytest.raises(ConnectError, match=r"^'junk' is not a WebSocket URL \(expected ws://HOST:PORT/v1/stream\)$"):
        run_live_bench(cfg, command="test")
    assert not (tmp_path / "out").exists()  # refused before the data is read or a folder made


def test_a_relative_model_folder_reaches_the_server_and_its_failure_is_one_line(tmp_path):
    # the child server runs in the source tree: a relative --model given here must still name
    # this folder, and a server that cannot start is an error line, not a traceback
    (tmp_path / "m").mkdir()
    (tmp_path / "tiny.tsv").write_text("hello\tO\nworld\tPERIOD\n")
    done = subprocess.run([sys.executable, "-m", "streampunct.cli", "bench", "live", "--model", "m",
                           "--data", "tiny.tsv", "--sessions", "2"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "streampunct bench: error: the server exited with code 2 before it was ready:" in done.stderr
    assert f"{tmp_path / 'm'} is not a streampunct model folder: no streampunct.json" in done.stderr


def test_more_sessions_than_words_is_a_usage_error_naming_the_maximum(tmp_path, capsys, monkeypatch):
    """``--sessions 500`` on a file of 100 words: each session streams its own segment of at least
    one word, so the file holds 100 sessions. The bench refuses (status 2, one line naming the
    maximum and why) before any session or server, rather than run 100 and report them as a run
    of the 500 asked for."""
    import streampunct.core.decoder as decoder
    from benchmarks import live_bench
    from streampunct.cli import main

    monkeypatch.setattr(live_bench, "_run_sessions", lambda *a, **k: pytest.fail(f"{len(a[1])} sessions ran"))
    monkeypatch.setattr(decoder.OfflineDecoder, "from_model_dir",
                        classmethod(lambda *a, **k: pytest.fail("the simulation ran")))
    data = tmp_path / "talk.tsv"
    data.write_text("".join(f"w{k}\t{'PERIOD' if k % 10 == 9 else 'O'}\n" for k in range(100)))
    argv = ["bench", "live", "--url", "ws://127.0.0.1:9/v1/stream", "--engine", "fake", "--data", str(data),
            "--out-dir", str(tmp_path / "out")]
    assert main([*argv, "--sessions", "500"]) == 2
    assert capsys.readouterr().err == (
        f"streampunct bench: error: --sessions 500: {data} has 100 words and each session streams its own "
        "segment of at least one of them, so this file holds at most 100 sessions: pass --sessions 100 or "
        "fewer, or a longer --data\n")
    assert not (tmp_path / "out" / "live_talk.json").exists()
    # as many sessions as words is a run of exactly that many (one word each)
    ran = []
    monkeypatch.setattr(live_bench, "_run_sessions", lambda url, schedules, *a, **k: ran.append(len(schedules))
                        or pytest.skip("stop after the sessions' start"))
    with pytest.raises(pytest.skip.Exception):
        main([*argv, "--sessions", "100"])
    assert ran == [100]
