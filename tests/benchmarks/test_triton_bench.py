"""``bench triton``: arguments, the report, and a small run against a real Triton server (PyTriton)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks.cli import add_arguments
from benchmarks.triton_bench import (
    TritonBenchConfig,
    config_from_args,
    run_triton_bench,
    summary_text,
)

REPO = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = REPO / "models" / "default"


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(["triton", *argv])


def test_arguments_become_the_config():
    cfg = config_from_args(_parse(["--model", "m", "--sessions", "20", "40", "--two-front-ends", "--no-labels",
                                   "--triton-url", "127.0.0.1:8001", "--slo-p95-ms", "500"]))
    assert cfg == TritonBenchConfig(model_dir=Path("m"), data=None, triton_url="127.0.0.1:8001", sessions=(20, 40),
                                    two_front_ends=True, slo_p95_ms=500.0)
    assert config_from_args(_parse(["--model", "m", "--sessions"])).sessions is None  # no load part


def test_the_summary_shows_both_engines_and_the_label_comparison():
    step = {"sessions": 20, "p95_margin_ms": 80.0, "lost": 0, "duplicated": 0, "batch_mean": 1.5,
            "front_end_cpu_cores": 0.3, "slo_met": True}
    text = summary_text({
        "labels": {"data": "data/iwslt2011/test2011", "n_words": 100, "labels_differ": 0, "cases_differ": 0,
                   "sides": {"local": {"overall_f1": 72.0}, "triton": {"overall_f1": 72.0}}},
        "load_local": {"engine": "onnxruntime", "max_sessions_meeting_slo": 20, "triton_cpu_cores": None,
                       "steps": [step]},
        "load_triton": {"engine": "triton", "max_sessions_meeting_slo": 20, "triton_cpu_cores": 0.8,
                        "steps": [step]},
        "load_two_front_ends": {"steps": [{"sessions": 20, "p95_margin_ms": 90.0, "lost": 0, "duplicated": 0,
                                           "triton_cpu_cores": 0.9}]},
    })
    assert "0 differ" in text and "onnxruntime:" in text and "triton:" in text and "two front ends" in text


@pytest.mark.slow
def test_labels_of_a_short_file_through_triton_equal_the_local_engines(tmp_path):
    pytest.importorskip("tritonclient.grpc")
    from engines.build.triton_pytriton import server_python

    if not (DEFAULT_MODEL / "streampunct.json").is_file():
        pytest.skip(f"no model at {DEFAULT_MODEL}")
    if server_python() is None:
        pytest.skip("no PyTriton environment with numpy < 2 (bash scripts/setup_triton_server.sh)")
    words = ("so what do we do about it i think there are three things we can do first we can measure it "
             "how many of you have ever been to new york").split()
    data = tmp_path / "words.tsv"
    data.write_text("".join(f"{w}\t{'PERIOD' if i % 9 == 8 else 'O'}\n" for i, w in enumerate(words)))
    payload = run_triton_bench(TritonBenchConfig(model_dir=DEFAULT_MODEL, data=data, sessions=None,
                                                 triton_threads=1, local_threads=1, out_dir=tmp_path, name="t"))
    assert payload["labels"]["n_words"] == len(words)
    assert payload["labels"]["labels_differ"] == 0 and payload["labels"]["cases_differ"] == 0
    assert json.loads((tmp_path / "t.json").read_text())["labels"]["labels_differ"] == 0


def test_an_external_triton_that_does_not_answer_is_refused_before_any_work(tmp_path, monkeypatch):
    """--triton-url with nothing listening ran the local engine's labels first, then waited the
    engine's 60 s: now EXTERNAL_READY_S, before anything else."""
    pytest.importorskip("tritonclient.grpc")
    import benchmarks.triton_bench as triton_bench
    from engines.base import ArtifactError
    from engines.build.triton_pytriton import free_port

    monkeypatch.setattr(triton_bench, "EXTERNAL_READY_S", 1.0)
    monkeypatch.setattr(triton_bench, "compare_labels", lambda *a, **k: pytest.fail("the labels ran"))
    url = f"127.0.0.1:{free_port()}"
    cfg = TritonBenchConfig(model_dir=DEFAULT_MODEL, triton_url=url, out_dir=tmp_path)
    with pytest.raises(ArtifactError, match=f"Triton at {url} is not ready after 1 s"):
        run_triton_bench(cfg)
    assert not list(tmp_path.glob("*.json"))
