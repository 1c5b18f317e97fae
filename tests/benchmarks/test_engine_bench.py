"""``bench engine`` on a folder that holds only a streaming graph (as ``models/base``): timed
as the server runs it, against the tokens the server's cache keeps, instead of measuring
nothing; ``--stream-past`` still chooses P."""

from __future__ import annotations

import json

import pytest

from benchmarks.engine_bench import implied_stream_past

STREAM = "model.stream.int8.onnx"


def stream_folder(path, **meta):
    """A folder naming a streaming graph (a stand-in file: nothing is loaded) and nothing else."""
    path.mkdir(parents=True)
    (path / STREAM).write_bytes(b"")
    (path / "streampunct.json").write_text(
        json.dumps(
            {
                "labels": ["O", "COMMA", "PERIOD", "QUESTION"],
                "window": {"size": 100, "left": 40, "right": 20},
                "stream_artifact": STREAM,
                **meta,
            }
        )
    )
    return path


def test_the_implied_past_is_what_the_servers_cache_keeps(tmp_path):
    assert implied_stream_past(stream_folder(tmp_path / "a", stream_cache_tokens=37)) == (
        STREAM,
        37,
    )
    # no stream_cache_tokens: the streaming window's left context, as the server's cache
    assert implied_stream_past(stream_folder(tmp_path / "b")) == (STREAM, 40)
    assert implied_stream_past(stream_folder(tmp_path / "c", stream_window={"left": 24})) == (
        STREAM,
        24,
    )
    # more than a window's positions (CLS + 100 + SEP) is never kept
    assert implied_stream_past(stream_folder(tmp_path / "d", stream_cache_tokens=500)) == (
        STREAM,
        102,
    )


def test_no_past_is_implied_where_the_sweep_has_something_to_time(tmp_path):
    whole = stream_folder(tmp_path / "whole", stream_cache_tokens=37)
    (whole / "model.int8.onnx").write_bytes(b"")  # a whole-window artifact: the ordinary sweep
    assert implied_stream_past(whole) is None
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "streampunct.json").write_text(
        json.dumps({"labels": ["O", "COMMA", "PERIOD", "QUESTION"]})
    )
    assert implied_stream_past(plain) is None  # no streaming graph
    assert implied_stream_past(tmp_path / "nothing") is None
    only = stream_folder(tmp_path / "only", stream_cache_tokens=37)
    # the streaming graph runs on onnxruntime
    assert implied_stream_past(only, ["tensorrt"]) is None
    assert implied_stream_past(only, ["tensorrt", "onnxruntime"], ["int8"]) == (STREAM, 37)


@pytest.fixture(scope="module")
def tiny_stream_only(tmp_path_factory):
    """A folder with only a tiny int8 streaming graph (two-head BERT, 64 positions)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("transformers")
    from engines.build.stream_graph import build_stream_artifact
    from tests.engines.conftest import tiny_bert_config, tiny_two_head_model

    torch.set_num_threads(1)
    model = tiny_two_head_model(tmp_path_factory.mktemp("bert"), tiny_bert_config())
    path = tmp_path_factory.mktemp("stream_only") / "model"
    path.mkdir()
    (path / "streampunct.json").write_text(
        json.dumps(
            {
                "labels": ["O", "COMMA", "PERIOD", "QUESTION"],
                "window": {"size": 40, "left": 16, "right": 6},
                "stream_cache_tokens": 12,
            }
        )
    )
    assert (
        build_stream_artifact(model, path, source_sha256="abc", quantize_embeddings=False).name
        == STREAM
    )
    return path


def engine_bench(folder, out, *extra):
    from streampunct.cli import main

    return main(
        [
            "bench",
            "engine",
            "--model",
            str(folder),
            "--backends",
            "onnxruntime",
            "--batch-sizes",
            "1",
            "2",
            "--seq-lens",
            "4",
            "--decode-data",
            "none",
            "--min-seconds",
            "0",
            "--threads",
            "1",
            "--out-json",
            str(out),
            *extra,
        ]
    )


def test_a_folder_with_only_a_streaming_graph_is_timed_as_the_server_runs_it(
    tiny_stream_only, tmp_path, capsys
):
    out = tmp_path / "engine.json"
    assert engine_bench(tiny_stream_only, out, "--precisions", "int8") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        f"{tiny_stream_only} holds only its streaming graph {STREAM}: timing it as the server "
        "runs it, against the 12 tokens its cache keeps (as with --stream-past 12)"
    )
    report = json.loads(out.read_text())
    assert report["benchmark"] == "engine_stream" and report["stream_past_implied"] is True
    assert [(r["batch"], r["new"], r["past"], r["artifact"]) for r in report["results"]] == [
        (1, 4, 12, STREAM),
        (2, 4, 12, STREAM),
    ]


def test_an_explicit_stream_past_still_chooses_p(tiny_stream_only, tmp_path, capsys):
    out = tmp_path / "engine.json"
    assert engine_bench(tiny_stream_only, out, "--stream-past", "5") == 0
    assert "holds only its streaming graph" not in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["stream_past_implied"] is False
    assert {r["past"] for r in report["results"]} == {5}


def test_a_precision_the_streaming_graph_is_not_still_measures_nothing(
    tiny_stream_only, tmp_path, capsys
):
    out = tmp_path / "engine.json"
    assert engine_bench(tiny_stream_only, out, "--precisions", "fp32") == 1
    captured = capsys.readouterr()
    assert "holds only its streaming graph" not in captured.out
    assert (
        captured.err.strip()
        == "error: nothing was measured (every backend and precision was skipped)"
    )
    assert not out.exists()
