"""``bench live``: parallel live streams through a real server, against the simulation."""

import json
from pathlib import Path

import pytest

from benchmarks.live_bench import LiveBenchConfig, run_live_bench, segments
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
    cfg = LiveBenchConfig(data=data, sessions=3, words_per_second=40.0, out_dir=tmp_path, name="live_small")
    result = run_live_bench(cfg, command="test")
    assert result["lost_words"] == 0 and result["mismatched_sessions"] == 0
    assert result["n_words"] == len(rows) and result["sessions"] == 3
    # one session per engine call is likely here, so the int8 batch effect rarely moves a label
    assert result["label_agreement"] >= 0.95
    assert 0 < result["server"]["overall_f1"] <= 100
    saved = json.loads((tmp_path / "live_small.json").read_text())
    assert saved["server"]["overall_f1"] == result["server"]["overall_f1"] and "machine" in saved
