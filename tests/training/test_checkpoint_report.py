"""Checkpoint reports: offline, streaming and case figures of a training checkpoint."""

import pytest

torch = pytest.importorskip("torch")

from training.checkpoint_report import report  # noqa: E402
from training.run import run  # noqa: E402

from .test_train_tiny import tiny_config  # noqa: E402


def test_report_of_a_case_head_checkpoint(tiny_base_model, tiny_data_root, tmp_path):
    result = run(tiny_config(tiny_base_model, tiny_data_root, tmp_path / "r", "optim.max_steps=30",
                             "model.case_head=true", 'data.train=["dev2012", "ted"]'))
    rep = report(result.best_dir, ["dev2010"], [0, 4], data_root_dir=str(tiny_data_root),
                 cache_dir=str(tmp_path / "cache"), device="cpu")
    entry = rep["sources"]["dev2010"]
    assert entry["words"] == 200
    assert entry["offline"]["overall_f1"] == pytest.approx(result.best_f1, abs=0.01)  # same decoder
    assert set(entry["streaming"]) == {"0", "4"}
    assert all(0 < v["overall_f1"] <= 100 for v in entry["streaming"].values())
    assert entry["case"]["words"] == 200 and "non_lower" in entry["case_rules"]
    # --stream-data: streaming only where asked (the simulation is the costly part)
    offline_only = report(result.best_dir, ["dev2010"], [0, 4], data_root_dir=str(tiny_data_root),
                          cache_dir=str(tmp_path / "cache"), device="cpu", stream_sources=["swda_val"])
    assert offline_only["sources"]["dev2010"]["streaming"] == {}
    assert offline_only["sources"]["dev2010"]["offline"] == entry["offline"]
    # --live: the server's default options on a live schedule
    live = report(result.best_dir, ["dev2010"], [], data_root_dir=str(tiny_data_root),
                  cache_dir=str(tmp_path / "cache"), device="cpu", live=True)["sources"]["dev2010"]
    assert live["streaming"] == {} and live["live"]["n_words"] == 200
    assert (live["live"]["right_context"], live["live"]["max_delay_ms"]) == (3, 2000)
