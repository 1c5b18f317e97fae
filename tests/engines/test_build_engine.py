"""Model folder builder and the ``streampunct build-engine`` command."""

from __future__ import annotations

import hashlib
import json
import re
import sys
import types

import pytest

from engines.base import EngineError
from engines.build.builder import BuildConfig, build_model_folder
from engines.sidecar import read_sidecar

from .conftest import LABELS, METADATA, write_tiny_tokenizer, write_word_labels


def test_builds_an_int8_folder_with_parity(tmp_path, tiny_module, tiny_windows):
    tok = write_tiny_tokenizer(tmp_path / "src_tokenizer.json")
    report = build_model_folder(
        tiny_module, tmp_path / "out", config=BuildConfig(),
        parity_windows=tiny_windows, copy_files={"tokenizer.json": tok},
        model_metadata={**METADATA, "encoder": "tiny-bert", "artifact": "stale.onnx"},
        parity_source="tiny words",
    )
    out = tmp_path / "out"
    assert report.artifact == out / "model.int8.onnx"
    assert [p.name for p in report.written] == [
        "model.onnx", "model.int8.onnx", "tokenizer.json", "streampunct.json"
    ]
    info = json.loads((out / "streampunct.json").read_text())
    assert info["artifact"] == "model.int8.onnx" and info["encoder"] == "tiny-bert"
    assert info["labels"] == LABELS and info["window"] == METADATA["window"]
    assert info["tokenizer_sha256"] == hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest()
    fp32 = read_sidecar(out / "model.onnx").parity
    assert fp32["reference"] == "torch" and fp32["data"] == "tiny words"
    assert fp32["max_rel_diff"] < 1e-4 and fp32["label_agreement"] == 1.0
    assert fp32["n_labels"] == len(tiny_windows.positions)
    int8 = read_sidecar(out / "model.int8.onnx").parity
    assert int8["label_agreement"] >= 0.99 and int8["label_agreement_vs_onnx_fp32"] >= 0.99
    text = "\n".join(report.summary_lines())
    assert "model.int8.onnx      vs torch" in text and "label agreement" in text
    assert "vs model.onnx (ORT fp32)" in text


def test_without_validation_text_parity_uses_random_ids(tmp_path, tiny_module):
    report = build_model_folder(
        tiny_module, tmp_path / "out", config=BuildConfig(precision="fp32"), model_metadata=METADATA
    )
    assert report.artifact.name == "model.onnx"
    assert report.parity_source == "random token ids"
    assert report.parity["model.onnx"].max_rel_diff < 1e-4


def test_build_config_validation():
    with pytest.raises(EngineError, match="backend must be one of"):
        BuildConfig(backend="torch")
    with pytest.raises(EngineError, match="precision must be one of"):
        BuildConfig(precision="int2")
    with pytest.raises(EngineError, match="int4 .* is an onnxruntime precision"):
        BuildConfig(backend="tensorrt", precision="int4")


def test_builds_an_int4_folder_with_parity(tmp_path, tiny_module, tiny_windows):
    report = build_model_folder(
        tiny_module, tmp_path / "out", config=BuildConfig(precision="int4", quantize_embeddings=True),
        parity_windows=tiny_windows, model_metadata=METADATA, parity_source="tiny words",
    )
    out = tmp_path / "out"
    assert report.artifact == out / "model.int4.onnx"
    assert json.loads((out / "streampunct.json").read_text())["artifact"] == "model.int4.onnx"
    sidecar = read_sidecar(out / "model.int4.onnx")
    assert sidecar.precision == "int4" and sidecar.recipe["int4_matmuls"] == 13
    assert sidecar.parity["label_agreement"] >= 0.97 and sidecar.parity["label_agreement_vs_onnx_fp32"] >= 0.97
    from engines.registry import load_engine

    engine = load_engine("onnxruntime", out)  # what serve --model loads: the artifact streampunct.json names
    try:
        assert engine.path.name == "model.int4.onnx" and engine.sidecar.precision == "int4"
    finally:
        engine.close()


@pytest.fixture
def checkpoint(tmp_path, tiny_module, monkeypatch):
    """A checkpoint folder and a stand-in for training.checkpoint.load_checkpoint."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    write_tiny_tokenizer(ckpt / "tokenizer.json")
    (ckpt / "head.safetensors").write_bytes(b"weights")
    (ckpt / "config.json").write_text("{}")  # the encoder's (read by the stand-in below: not at all)
    (ckpt / "streampunct.json").write_text(json.dumps({**METADATA, "encoder": "tiny-bert", "max_word_tokens": 16}))
    loaded = []

    def load_checkpoint(path):
        loaded.append(path)
        return tiny_module, {"labels": LABELS, "label_position": "last"}

    fake = types.ModuleType("training.checkpoint")
    fake.load_checkpoint = load_checkpoint
    monkeypatch.setitem(sys.modules, "training.checkpoint", fake)
    return ckpt, loaded


def test_cli_builds_folder_and_prints_parity(checkpoint, tmp_path, capsys):
    from streampunct.cli import main

    ckpt, loaded = checkpoint
    words = write_word_labels(tmp_path / "dev.tsv", n_words=300)
    out = tmp_path / "models" / "default"
    rc = main(["build-engine", "--model", str(ckpt), "--out", str(out), "--parity-data", str(words),
               "--parity-lines", "200"])
    assert rc == 0
    assert loaded == [ckpt]
    printed = capsys.readouterr().out
    assert "built onnxruntime int8 from" in printed
    assert f"wrote {out}/ (default artifact: model.int8.onnx)" in printed
    assert "parity on dev.tsv (first 200 words" in printed
    assert "label agreement 100.00% of 200" in printed  # fp32 vs torch
    info = json.loads((out / "streampunct.json").read_text())
    assert info["artifact"] == "model.int8.onnx" and info["max_word_tokens"] == 16
    assert (out / "tokenizer.json").read_bytes() == (ckpt / "tokenizer.json").read_bytes()
    sidecar = read_sidecar(out / "model.int8.onnx")
    assert len(sidecar.source_sha256) == 64
    assert sidecar.source_sha256 == read_sidecar(out / "model.onnx").source_sha256
    # the streaming graph (cached left context) comes with it, from the same checkpoint
    size = (out / "model.stream.int8.onnx").stat().st_size / 1e6
    assert re.search(rf"streaming graph \(cached left context\): {re.escape(str(out))}/model\.stream\.int8\.onnx "
                     rf"\({size:.2f} MB\)\n", printed)
    # and its labels against the folder's graph, both on whole windows, one a call
    agreement = re.search(r"  model\.stream\.int8\.onnx +vs model\.int8\.onnx \(whole windows, one a call\): "
                          r"label agreement ([\d.]+)% of 200\n", printed)
    assert agreement is not None, printed
    assert float(agreement.group(1)) >= 95.0
    assert info["stream_artifact"] == "model.stream.int8.onnx"
    assert read_sidecar(out / "model.stream.int8.onnx").source_sha256 == sidecar.source_sha256


def test_cli_int4_folder_gets_an_int4_streaming_graph(checkpoint, tmp_path, capsys):
    from streampunct.cli import main

    ckpt, _ = checkpoint
    out = tmp_path / "base"
    assert main(["build-engine", "--model", str(ckpt), "--out", str(out), "--precision", "int4"]) == 0
    assert f"streaming graph (cached left context): {out}/model.stream.int4.onnx" in capsys.readouterr().out
    info = json.loads((out / "streampunct.json").read_text())
    assert info["artifact"] == "model.int4.onnx" and info["stream_artifact"] == "model.stream.int4.onnx"
    stream = read_sidecar(out / "model.stream.int4.onnx")
    assert stream.precision == "int4" and stream.recipe["block_size"] == read_sidecar(out / "model.int4.onnx").recipe["block_size"]
    assert main(["build-engine", "--model", str(ckpt), "--out", str(tmp_path / "plain"), "--precision", "int4",
                 "--no-stream-graph"]) == 0
    assert not (tmp_path / "plain" / "model.stream.int4.onnx").exists()


def test_cli_refuses_test_sets(checkpoint, tmp_path, capsys):
    from streampunct.cli import main

    ckpt, _ = checkpoint
    test_file = write_word_labels(tmp_path / "test2011", n_words=10)
    rc = main(["build-engine", "--model", str(ckpt), "--out", str(tmp_path / "o"),
               "--parity-data", str(test_file)])
    assert rc == 2
    assert "test sets are for final evaluation only" in capsys.readouterr().err


def test_cli_says_when_the_model_folder_does_not_exist(tmp_path, capsys):
    """release.sh's build before its train step: the folder is not there, which is not "not a
    checkpoint folder"."""
    from streampunct.cli import main

    (tmp_path / "file").touch()
    for model, what in ((tmp_path / "gone" / "best", "does not exist"),
                        (tmp_path / "file", "is a file, not a checkpoint folder")):
        assert main(["build-engine", "--model", str(model), "--out", str(tmp_path / "o")]) == 2
        assert capsys.readouterr().err.strip() == (
            f"streampunct build-engine: error: --model {model} {what} (a training checkpoint: streampunct train "
            "writes OUT/best; with --backend tensorrt also a built model folder)")


def test_cli_needs_a_tokenizer(checkpoint, tmp_path, capsys):
    from streampunct.cli import main

    ckpt, _ = checkpoint
    (ckpt / "tokenizer.json").unlink()
    rc = main(["build-engine", "--model", str(ckpt), "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "has no tokenizer.json" in capsys.readouterr().err


def test_cli_refuses_to_build_into_its_checkpoint_or_a_file(checkpoint, tmp_path, capsys):
    from streampunct.cli import main

    ckpt, loaded = checkpoint
    before = sorted(p.name for p in ckpt.iterdir())
    assert main(["build-engine", "--model", str(ckpt), "--out", str(ckpt), "--precision", "fp32"]) == 2
    assert capsys.readouterr().err == (f"streampunct build-engine: error: --out {ckpt} is the folder the model is "
                                       "read from: write the built folder elsewhere\n")
    assert main(["build-engine", "--model", str(ckpt), "--out", str(ckpt / "built")]) == 2
    assert capsys.readouterr().err.endswith(f"--out {ckpt / 'built'} is inside the folder the model is read from: "
                                            "write the built folder elsewhere\n")
    (tmp_path / "file").write_text("x")
    assert main(["build-engine", "--model", str(ckpt), "--out", str(tmp_path / "file")]) == 2
    assert capsys.readouterr().err.endswith(f"--out {tmp_path / 'file'} is a file, not a folder\n")
    assert loaded == [] and sorted(p.name for p in ckpt.iterdir()) == before  # nothing loaded, nothing written


def test_cli_names_a_truncated_safetensors_file(checkpoint, tmp_path, capsys, monkeypatch):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    from streampunct.cli import main

    ckpt, _ = checkpoint
    (ckpt / "head.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")  # cut in its header

    def load(path):  # reads the head as training.checkpoint does
        return safetensors_torch.load_file(str(path / "head.safetensors")), {}

    monkeypatch.setattr(sys.modules["training.checkpoint"], "load_checkpoint", load)
    assert main(["build-engine", "--model", str(ckpt), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"streampunct build-engine: error: --model {ckpt}: cannot load the checkpoint "
                          "(SafetensorError: ") and "Traceback" not in err


def test_cli_keeps_the_traceback_of_a_fault(checkpoint, tmp_path, monkeypatch):
    from streampunct.cli import main

    ckpt, _ = checkpoint

    def broken(path):  # a bug, not a damaged file: it must not read as one
        raise KeyError("head")

    monkeypatch.setattr(sys.modules["training.checkpoint"], "load_checkpoint", broken)
    with pytest.raises(KeyError):
        main(["build-engine", "--model", str(ckpt), "--out", str(tmp_path / "o")])


def test_cli_names_a_checkpoint_it_cannot_load(checkpoint, tmp_path, capsys, monkeypatch):
    from streampunct.cli import main

    ckpt, _ = checkpoint

    def damaged(path):  # what transformers raises for a config.json that is not JSON
        raise OSError(f"It looks like the config file at '{path}/config.json' is not a valid JSON file.\nmore")

    monkeypatch.setattr(sys.modules["training.checkpoint"], "load_checkpoint", damaged)
    assert main(["build-engine", "--model", str(ckpt), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == (
        f"streampunct build-engine: error: --model {ckpt}: cannot load the checkpoint (OSError: It looks like the "
        f"config file at '{ckpt}/config.json' is not a valid JSON file.)\n")
    assert not (tmp_path / "o").exists()


def test_cli_refuses_a_built_model_folder(checkpoint, tmp_path, capsys):
    from streampunct.cli import main

    ckpt, loaded = checkpoint
    built = tmp_path / "built"
    built.mkdir()
    for name in ("streampunct.json", "tokenizer.json"):
        (built / name).write_bytes((ckpt / name).read_bytes())
    (built / "model.int8.onnx").write_bytes(b"graph")
    assert main(["build-engine", "--model", str(built), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert (f"{built} is a built model folder (it has streampunct.json and model.int8.onnx), not a training "
            "checkpoint: build-engine needs a checkpoint folder with the encoder") in err
    assert len(err.strip().splitlines()) == 1 and not loaded
    (ckpt / "head.safetensors").unlink()
    assert main(["build-engine", "--model", str(ckpt), "--out", str(tmp_path / "o")]) == 2
    assert "is not a training checkpoint: no head.safetensors" in capsys.readouterr().err


def test_cli_without_training_package_names_the_extra(checkpoint, tmp_path, monkeypatch, capsys):
    from streampunct.cli import main

    ckpt, _ = checkpoint
    monkeypatch.setitem(sys.modules, "training.checkpoint", None)
    words = write_word_labels(tmp_path / "dev.tsv", n_words=50)
    rc = main(["build-engine", "--model", str(ckpt), "--out", str(tmp_path / "o"), "--parity-data", str(words)])
    assert rc == 2
    assert "pip install -e '.[train]' in the streampunct checkout" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--parity-lines", "0"], "argument --parity-lines: must be >= 1, got 0"),
    (["--parity-lines=-5"], "argument --parity-lines: must be >= 1, got -5"),
    (["--max-batch", "0"], "argument --max-batch: must be >= 1, got 0"),
    (["--max-len", "0"], "argument --max-len: must be >= 1, got 0"),
    (["--calibration-windows=-1"], "argument --calibration-windows: must be >= 0, got -1"),
    (["--opset", "9"], "argument --opset: must be at least 14"),
    (["--workspace-gb", "0"], "argument --workspace-gb: must be > 0, got 0"),
])
def test_cli_refuses_bad_numbers_before_any_work(checkpoint, tmp_path, capsys, extra, message):
    from streampunct.cli import main

    ckpt, loaded = checkpoint
    with pytest.raises(SystemExit) as exc:
        main(["build-engine", "--model", str(ckpt), "--out", str(tmp_path / "o"), *extra])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and message in err.strip().splitlines()[-1]  # usage, then one line
    assert not loaded and not (tmp_path / "o").exists()


@pytest.mark.parametrize("extra, message", [
    (["--backend", "tensorrt", "--graph-only", "--max-len", "2"],
     "--max-batch 32 --max-len 2: max_len 2 is below the minimum sequence length 8"),
    (["--backend", "tensorrt", "--graph-only", "--precision", "int4"],
     "--precision int4 (4-bit weights, MatMulNBits) is an onnxruntime precision"),
    (["--backend", "tensorrt", "--precision", "fp32"],
     "--backend tensorrt builds a plan with tensorrt, pycuda, not installed here"),
])
def test_cli_refuses_tensorrt_builds_it_cannot_finish_before_loading(checkpoint, tmp_path, capsys, monkeypatch,
                                                                     extra, message):
    from engines import registry
    from streampunct.cli import main

    monkeypatch.setattr(registry, "is_installed", lambda m: m not in ("tensorrt", "pycuda"))
    ckpt, loaded = checkpoint
    assert main(["build-engine", "--model", str(ckpt), "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not loaded and not (tmp_path / "o").exists()


def test_cli_refuses_validation_text_without_words(checkpoint, tmp_path, capsys):
    from streampunct.cli import main

    ckpt, loaded = checkpoint
    empty = tmp_path / "dev.tsv"
    empty.write_text("\n")
    assert main(["build-engine", "--model", str(ckpt), "--out", str(tmp_path / "o"), "--parity-data",
                 str(empty)]) == 2
    assert f"--parity-data {empty} has no words" in capsys.readouterr().err
    assert not loaded


def test_an_export_failure_is_one_line_with_the_default_opset(tmp_path, tiny_module):
    from engines.base import ExportError
    from engines.build.onnx_export import export_onnx

    with pytest.raises(ExportError) as exc:
        export_onnx(tiny_module, tmp_path / "model.onnx", opset=13)
    message = str(exc.value)
    assert len(message.splitlines()) == 1 and len(message) < 800
    assert message.startswith("torch.onnx.export failed at opset 13: ")
    assert "scaled_dot_product_attention" in message and "(the default opset, 17, exports" in message
