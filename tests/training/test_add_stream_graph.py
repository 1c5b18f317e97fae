"""``python -m training.add_stream_graph``'s refusals: one line on stderr, exit status 2, no
traceback, before any checkpoint is loaded or graph imported."""

import json

import pytest

import training.checkpoint
import training.onnx_import
from engines.base import TensorSpec
from engines.sidecar import new_sidecar, write_sidecar
from streampunct.errors import ModelError
from training.add_stream_graph import checkpoint_source, main

PROG = "python -m training.add_stream_graph: error: "


def checkpoint(path):
    path.mkdir(parents=True)
    (path / "head.safetensors").write_bytes(b"head")
    return path


def model_folder(path, precision, source="0" * 64, *, sidecar=True):
    """A folder whose artifact (``model.onnx``) has a sidecar of ``precision``."""
    path.mkdir(parents=True)
    name = "model.onnx" if precision == "fp32" else f"model.{precision}.onnx"
    (path / "streampunct.json").write_text(json.dumps({"artifact": name}))
    (path / name).write_bytes(b"graph")
    if sidecar:
        spec = (TensorSpec("input_ids", "int64", ("batch", "seq")),)
        write_sidecar(new_sidecar(path / name, backend="onnxruntime", precision=precision, inputs=spec,
                                  outputs=(TensorSpec("logits", "float32", ("batch", "seq", 4)),),
                                  source_sha256=source), path / name)
    return path


@pytest.fixture
def nothing_loaded(monkeypatch):
    """Fails the test if a checkpoint is loaded or a graph imported."""
    def fail(*a, **k):
        raise AssertionError("loaded")

    monkeypatch.setattr(training.checkpoint, "load_checkpoint", fail)
    monkeypatch.setattr(training.onnx_import, "import_runtime_model", fail)


def refused(capsys, argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith(PROG) and err.count("\n") == 1, err
    return err


def test_an_fp32_folder_is_refused_in_one_line(tmp_path, capsys, nothing_loaded):
    ckpt = checkpoint(tmp_path / "ckpt")
    folder = model_folder(tmp_path / "fp32", "fp32", checkpoint_source(ckpt))  # built from that checkpoint
    err = refused(capsys, [str(ckpt), str(folder)])
    assert f"{folder / 'model.onnx'} is fp32: the streaming graph is built as int8 or int4 only" in err
    assert not (folder / "model.stream.int8.onnx").exists()
    err = refused(capsys, ["--from-graph", str(folder)])
    assert "is fp32: the streaming graph is built as int8 or int4 only" in err


def test_other_refusals_are_one_line_too(tmp_path, capsys, nothing_loaded):
    ckpt = checkpoint(tmp_path / "ckpt")
    err = refused(capsys, [str(ckpt), str(tmp_path)])
    assert f"{tmp_path} is not a model folder (no streampunct.json)" in err
    folder = model_folder(tmp_path / "other", "int8")
    err = refused(capsys, [str(ckpt), str(folder)])
    assert "is not the checkpoint" in err and "source_sha256 differs" in err
    bare = model_folder(tmp_path / "bare", "int8", sidecar=False)
    err = refused(capsys, [str(ckpt), str(bare)])
    assert "no sidecar model.int8.onnx.json" in err  # the engines' ArtifactError


def test_a_graph_of_another_encoder_is_one_line_that_names_base_model(tmp_path, capsys, monkeypatch):
    # the import of a graph that the default encoder's config does not match is a ModelError
    def mismatch(*a, **k):
        raise ModelError(f"{tmp_path}/model.int8.onnx: parameters missing ['encoder.encoder.layer.2.x']")

    monkeypatch.setattr(training.onnx_import, "import_runtime_model", mismatch)
    folder = model_folder(tmp_path / "int8", "int8")
    err = refused(capsys, ["--from-graph", str(folder)])
    assert "parameters missing" in err and "--base-model names the folder whose config it matches" in err
