"""benchmarks.torch_engine_bench: the torch backend's tokens/s and the device record that the GPU
results carry (run here on the CPU with a tiny model)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnx")

from benchmarks.torch_engine_bench import main  # noqa: E402
from tests.engines.conftest import tiny_two_head_model  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from transformers import BertConfig

    from engines.build.builder import BuildConfig, build_model_folder

    torch.set_num_threads(1)
    model = tiny_two_head_model(tmp_path_factory.mktemp("cfg"), BertConfig(
        vocab_size=120, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=160))
    with torch.no_grad():  # no two parameters equal: the exporter would merge them
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    out = tmp_path_factory.mktemp("tiny")
    build_model_folder(model, out, config=BuildConfig(precision="fp32"),
                       model_metadata={"labels": ["O", "COMMA", "PERIOD", "QUESTION"], "stream_cache_tokens": 5})
    return out


def test_it_reports_tokens_per_second_of_whole_and_cached_calls_with_the_device(folder, tmp_path, capsys):
    out = tmp_path / "engine.json"
    assert main(["--model", str(folder), "--device", "cpu", "--batch-sizes", "1", "4", "--seq-len", "16",
                 "--stream-batch-sizes", "2", "--stream-new", "3", "--stream-past", "5",
                 "--min-seconds", "0.05", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["precision"] == "fp32" and report["artifact"] == "model.onnx" and report["encoder"] == "bert"
    assert [(r["batch"], r["seq_len"]) for r in report["whole_windows"]] == [(1, 16), (4, 16)]
    assert [(r["batch"], r["new_tokens"], r["cached_tokens"]) for r in report["cached_calls"]] == [(2, 3, 5)]
    for r in report["whole_windows"] + report["cached_calls"]:
        assert r["tokens_per_s"] > 0 and r["runs"] >= 3 and r["latency_ms_median"] <= r["latency_ms_p90"]
    assert report["device"]["device"] == "cpu" and report["device"]["torch"] == torch.__version__
    assert "in torch fp32 on" in capsys.readouterr().out


def test_annotate_adds_the_device_record_to_other_results(tmp_path):
    load = tmp_path / "load.json"
    load.write_text(json.dumps({"benchmark": "load", "max_sessions_meeting_slo": 3}))
    assert main(["--device", "cpu", "--annotate", str(load)]) == 0
    data = json.loads(load.read_text())
    assert data["max_sessions_meeting_slo"] == 3 and data["device"]["device"] == "cpu"


def test_a_missing_gpu_is_one_line(folder, capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible")
    assert main(["--model", str(folder), "--device", "cuda"]) == 2
    assert "torch sees no CUDA GPU" in capsys.readouterr().err
