"""``bench itn``: the acceptance set's file, and the bench's scoring through a real server
(a fake engine and a fake normalizer, so that it runs in seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.itn_bench import (
    ItnBenchConfig,
    comparable,
    read_phrases,
    run_itn_bench,
    written_tokens,
)
from streampunct.errors import InputError
from streampunct.server.app import ServerRuntime
from tests.streampunct.conftest import TEST_WINDOW, FakeEngine
from tests.streampunct.written_fakes import FakeNormalizer

DATA = Path(__file__).resolve().parents[2] / "data" / "itn_phrases.tsv"


def test_the_acceptance_set_has_over_200_phrases_in_every_category():
    cases = read_phrases(DATA)
    assert len(cases) >= 200
    categories = {c.category for c in cases}
    assert {"cardinal", "ordinal", "decimal", "percent", "money", "year", "time", "date", "phone"} <= categories
    assert all(c.spoken == c.spoken.lower() and not any(ch.isdigit() for ch in c.spoken) for c in cases)
    assert len({c.spoken for c in cases}) == len(cases)


def test_comparable_sets_the_models_marks_aside():
    assert comparable("It costs $25, at 7 p.m.") == ["It", "costs", "$25", "at", "7", "p.m"]
    assert comparable("It costs $25 at 7 p.m") == comparable("It costs $25, at 7 p.m.")


def test_read_phrases_names_a_bad_line(tmp_path):
    bad = tmp_path / "p.tsv"
    bad.write_text("# comment\nmoney\tfive dollars\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"p.tsv:2: expected category<TAB>spoken<TAB>written"):
        read_phrases(bad)


def test_the_bench_scores_sentences_through_a_server(tmp_path, aligner, caplog):
    caplog.set_level("INFO")
    data = tmp_path / "phrases.tsv"
    # (the fake engine's marks: a period after "it", "dollars", "saw"; none inside the numbers)
    data.write_text("money\tit costs twenty five dollars today\tit costs $25 today\n"
                    "cardinal\twe saw eighty four birds\twe saw 84 birds\n"
                    "cardinal\twe saw forty birds\twe saw 40 bird\n", encoding="utf-8")
    cfg = ItnBenchConfig(data=data, words_per_second=50.0, jitter_ms=0.0, parallel=2, out_dir=tmp_path)
    runtime = ServerRuntime(FakeEngine, aligner, TEST_WINDOW, normalizer=FakeNormalizer())
    result = run_itn_bench(cfg, runtime=runtime, write=False)
    assert (result["sentences"], result["passed"]) == (3, 2)
    assert result["by_category"] == {"money": {"sentences": 1, "passed": 1},
                                     "cardinal": {"sentences": 2, "passed": 1}}
    (failure,) = result["failures"]
    assert failure["expected"] == "we saw 40 bird" and comparable(failure["got"]) == ["we", "saw", "40", "birds"]
    assert result["words_and_marks_identical"] and result["itn_calls"] > 0
    # the offline decoder writes each sentence with the same engine and grammars
    assert result["same_as_offline"] + len(result["unlike_offline"]) == 3
    assert result["same_as_offline_share"] == round(result["same_as_offline"] / 3, 4)
    # the server's sessions (several INFO lines each) stay out of the bench's output
    assert not [r for r in caplog.records if r.name.startswith("streampunct.server") and r.levelname == "INFO"]


def test_written_tokens_set_marks_and_sentence_starts_aside():
    assert written_tokens("It costs $25. Then we left at 7 p.m.") == ["it", "costs", "$25", "then", "we",
                                                                        "left", "at", "7", "p.m"]
    assert written_tokens("it costs $25, then we left on Monday") == written_tokens("It costs $25. Then we "
                                                                                      "left on Monday.")
    assert written_tokens("on monday") != written_tokens("on Monday")


def test_a_missing_data_file_or_an_unusable_grammar_cache_is_one_line(tmp_path):
    """`bench itn --data nofile` said a raw "[Errno 2]"; `--itn-cache FILE` failed in the grammar
    worker with two tracebacks (BrokenProcessPool)."""
    from benchmarks.itn_bench import ItnBenchConfig, read_phrases, run_itn_bench
    from streampunct.errors import InputError

    with pytest.raises(InputError, match=f"^--data {tmp_path / 'nofile'}: no such file$"):
        read_phrases(tmp_path / "nofile")
    pytest.importorskip("pynini", reason="needs the itn extra")
    (tmp_path / "file").write_text("")
    cfg = ItnBenchConfig(itn_cache=tmp_path / "file", out_dir=tmp_path / "out")
    with pytest.raises(InputError, match=f"^--itn-cache {tmp_path / 'file'}: cannot make the folder"):
        run_itn_bench(cfg)
