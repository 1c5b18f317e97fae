"""The side-by-side table of checkpoint reports."""

import json

from training.report_table import table


def _entry(f1: float, streaming: dict[str, float]) -> dict:
    return {"offline": {"overall": {"precision": 60.0, "recall": 50.0, "f1": f1}, "overall_f1": f1},
            "streaming": {rc: {"overall_f1": v} for rc, v in streaming.items()}}


def test_rows_and_columns(tmp_path):
    ckpt = tmp_path / "run_a" / "best"
    ckpt.mkdir(parents=True)
    (ckpt.parent / "metrics.jsonl").write_text(json.dumps({"type": "done", "seconds": 1200.0}) + "\n")
    a = {"checkpoint": str(ckpt), "sources": {"dev2010": _entry(55.5, {"0": 20.0, "4": 50.25}),
                                               "swda_val": _entry(38.0, {})}}
    a["sources"]["dev2010"]["case"] = {"non_lower": {"f1": 80.04}}
    a["sources"]["dev2010"]["case_rules"] = {"non_lower": {"f1": 70.0}}
    b = {"checkpoint": str(tmp_path / "gone" / "best"), "sources": {"dev2010": _entry(54.0, {"0": 30.0})}}
    (tmp_path / "cap_a.json").write_text(json.dumps(a))
    (tmp_path / "cap_b.json").write_text(json.dumps(b))
    lines = table([tmp_path / "cap_a.json", tmp_path / "cap_b.json"]).splitlines()
    assert lines[0] == ("| run | dev2010 offline P/R/F1 | stream rc 0 | stream rc 4 | swda_val offline F1 "
                        "| case non-lower F1 (head / rules) | train time |")
    assert lines[2] == "| `cap_a` | 60.0/50.0/**55.50** | 20.00 | 50.25 | 38.00 | 80.0 / 70.0 | 20 min |"
    assert lines[3] == "| `cap_b` | 60.0/50.0/**54.00** | 30.00 |  |  |  |  |"
