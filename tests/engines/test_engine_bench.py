"""The engine speed benchmark and the int8 accuracy report, on the tiny model."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

from benchmarks.engine_bench import BenchSettings, format_table, run_engine_bench
from benchmarks.int8_accuracy import run_int8_accuracy
from engines.build.quantize import quantize_int8_dynamic

FAST = BenchSettings(warmup=1, min_runs=2, max_runs=3, min_seconds=0.0)


@pytest.fixture(scope="module")
def folder(tiny_export, tmp_path_factory):
    target = tmp_path_factory.mktemp("bench") / "model"
    shutil.copytree(tiny_export.path.parent, target)
    quantize_int8_dynamic(target / "model.onnx", target / "model.int8.onnx")
    return target


def test_bench_measures_every_available_cell(folder, tmp_path, capsys):
    out = tmp_path / "bench.json"
    report = run_engine_bench(
        folder, ["onnxruntime", "tensorrt"], ["fp32", "int8", "fp16"], batch_sizes=(1, 2),
        seq_lens=(8, 16), out_json=out, settings=FAST,
        engine_options={"onnxruntime": {"intra_op_threads": 1}},
    )
    cells = {(r["backend"], r["precision"], r["batch"], r["seq_len"]) for r in report["results"]}
    assert cells == {("onnxruntime", p, b, t) for p in ("fp32", "int8") for b in (1, 2) for t in (8, 16)}
    for r in report["results"]:
        assert r["tokens_per_s"] == pytest.approx(r["batch"] * r["seq_len"] / (r["latency_ms_median"] / 1e3))
        assert 2 <= r["runs"] <= 3
        assert r["artifact"] == {"fp32": "model.onnx", "int8": "model.int8.onnx"}[r["precision"]]
    skipped = {(s["backend"], s["precision"]): s["reason"] for s in report["skipped"]}
    assert "no model.fp16.onnx" in skipped[("onnxruntime", "fp16")]
    assert "no model.fp16.plan" in skipped[("tensorrt", "fp16")]
    saved = json.loads(out.read_text())
    assert saved["measured_at"] and "commit" in saved  # as every result file records them
    assert {k: v for k, v in saved.items() if k not in ("measured_at", "commit")} == json.loads(json.dumps(report))
    assert report["engine_options"] == {"onnxruntime": {"intra_op_threads": 1}}
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].split() == ["tokens/s", "1x8", "1x16", "2x8", "2x16"]
    assert "onnxruntime/int8" in printed and "skipped tensorrt/fp16" in printed


def test_format_table_marks_missing_cells():
    table = format_table(
        [{"backend": "onnxruntime", "precision": "int8", "batch": 8, "seq_len": 128, "tokens_per_s": 9500.4}],
        (8,), (128, 256),
    )
    assert table.splitlines()[2].split() == ["onnxruntime/int8", "9500", "-"]


def test_int8_accuracy_report(folder, tiny_words, tmp_path, capsys):
    out = tmp_path / "acc.json"
    report = run_int8_accuracy(folder, tiny_words, max_words=400, threads=1, out_json=out)
    assert report["words"] == 400
    assert report["label_agreement"] >= 0.99
    fp32 = report["model.onnx"]["f1"]["overall"]["f1"]
    int8 = report["model.int8.onnx"]["f1"]["overall"]["f1"]
    assert report["f1_drop"] == pytest.approx(fp32 - int8)
    assert set(report["model.onnx"]["f1"]) == {"COMMA", "PERIOD", "QUESTION", "overall"}
    assert json.loads(out.read_text())["label_agreement"] == report["label_agreement"]
    assert "F1 drop" in capsys.readouterr().out


def test_command_line_options(folder, tmp_path, capsys):
    import argparse

    from benchmarks.engine_bench import add_engine_arguments, run_engine_from_args

    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    out = tmp_path / "engine.json"
    args = parser.parse_args(["--model", str(folder), "--backends", "onnxruntime", "--precisions", "int8",
                              "--batch-sizes", "2", "--seq-lens", "8", "--threads", "1",
                              "--spinning", "--min-seconds", "0", "--decode-data", "none",
                              "--out-json", str(out)])
    assert run_engine_from_args(args, command="streampunct bench engine ...") == 0
    saved = json.loads(out.read_text())
    assert saved["command"] == "streampunct bench engine ..."
    assert [(r["precision"], r["batch"], r["seq_len"]) for r in saved["results"]] == [("int8", 2, 8)]
    assert saved["engine_options"] == {"onnxruntime": {"intra_op_threads": 1, "allow_spinning": True}}
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "engine.png").read_bytes()[:4] == b"\x89PNG"


def test_the_streaming_graph_is_timed_per_call_and_per_row(tmp_path, capsys):
    """``--stream-past``: the shipped streaming graph, rows of new tokens against cached ones."""
    from pathlib import Path

    from benchmarks.engine_bench import run_stream_bench

    shipped = Path(__file__).resolve().parents[2] / "models" / "default"
    if not (shipped / "model.stream.int8.onnx").is_file():
        pytest.skip("no models/default")
    report = run_stream_bench(shipped, (1, 2), (1, 4), 8, engine_options={"intra_op_threads": 1},
                              settings=FAST)
    assert [(r["batch"], r["new"], r["past"]) for r in report["results"]] == [
        (1, 1, 8), (2, 1, 8), (1, 4, 8), (2, 4, 8)]
    for r in report["results"]:
        assert r["artifact"] == "model.stream.int8.onnx" and 2 <= r["runs"] <= 3
        assert r["ms_per_row"] == pytest.approx(r["latency_ms_median"] / r["batch"], abs=1e-3)
    alone = {r["new"]: r["latency_ms_median"] for r in report["results"] if r["batch"] == 1}
    assert all(r["per_row_vs_alone"] == pytest.approx(r["ms_per_row"] / alone[r["new"]], abs=2e-3)
               for r in report["results"])
    assert "2 x   4 new tokens" in capsys.readouterr().out


def test_a_folder_without_a_streaming_graph_is_refused(folder):
    from benchmarks.engine_bench import run_stream_bench
    from engines.base import EngineError

    with pytest.raises(EngineError, match="has no streaming graph"):
        run_stream_bench(folder, (1,), (1,), 4, settings=FAST)


@pytest.mark.parametrize("argv, message", [
    (["--backends", "nope"], "argument --backends: invalid choice: 'nope'"),
    (["--backends", "onnxruntime", "nope"], "argument --backends: invalid choice: 'nope'"),
    (["--precisions", "fp3"], "argument --precisions: invalid choice: 'fp3'"),
    (["--threads", "0"], "argument --threads: must be >= 1, got 0"),
    (["--min-seconds", "-1"], "argument --min-seconds: must be >= 0, got -1"),
    (["--min-seconds", "nan"], "argument --min-seconds: must be a finite number >= 0, got nan"),
    (["--batch-sizes", "1", "0"], "argument --batch-sizes: must be >= 1, got 0"),
    (["--seq-lens", "0"], "argument --seq-lens: must be >= 1, got 0"),
    (["--decode-batch", "0"], "argument --decode-batch: must be >= 1, got 0"),
    (["--stream-past", "-1"], "argument --stream-past: must be >= 0, got -1"),
])
def test_bad_options_are_one_line_usage_errors_before_any_work(argv, message, capsys, monkeypatch):
    import benchmarks.engine_bench as engine_bench
    from streampunct.cli import main

    monkeypatch.setattr(engine_bench, "run_engine_from_args", lambda *a, **k: pytest.fail("the bench ran"))
    with pytest.raises(SystemExit) as exc:
        main(["bench", "engine", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"streampunct bench engine: error: {message}")


def test_a_missing_model_or_decode_file_is_refused_before_the_sweep(folder, tmp_path, capsys, monkeypatch):
    """Both were found out late: a missing folder gave a report of skipped cells and status 0,
    a missing --decode-data exited 2 only after timing every shape."""
    import benchmarks.engine_bench as engine_bench
    from streampunct.cli import main

    monkeypatch.setattr(engine_bench, "run_engine_bench", lambda *a, **k: pytest.fail("the sweep ran"))
    assert main(["bench", "engine", "--model", str(tmp_path / "nomodel")]) == 2
    assert capsys.readouterr().err.strip() == (f"streampunct bench: error: no model folder at "
                                               f"{tmp_path / 'nomodel'}: pass --model DIR")
    assert main(["bench", "engine", "--model", str(folder), "--decode-data", str(tmp_path / "nofile")]) == 2
    assert capsys.readouterr().err.strip() == (f"streampunct bench: error: --decode-data "
                                               f"{tmp_path / 'nofile'}: no such file (none: skip the offline decode)")


def test_a_run_that_measured_nothing_exits_1_and_writes_nothing(tmp_path, capsys):
    """A folder with no artifact of the precision asked for: every cell skipped."""
    from streampunct.cli import main

    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "r" / "engine.json"
    assert main(["bench", "engine", "--model", str(empty), "--backends", "onnxruntime", "--precisions", "int8",
                 "--decode-data", "none", "--min-seconds", "0", "--out-json", str(out)]) == 1
    captured = capsys.readouterr()
    assert "skipped onnxruntime/int8" in captured.out
    assert captured.err.strip() == "error: nothing was measured (every backend and precision was skipped)"
    assert not out.exists()
