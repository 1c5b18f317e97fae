"""Sidecar round trip, validation and checksum checks."""

from __future__ import annotations

import json

import pytest

from engines.base import ArtifactError, ArtifactMismatch, TensorSpec
from engines.sidecar import (
    FORMAT_VERSION,
    Sidecar,
    new_sidecar,
    read_sidecar,
    sha256_file,
    sidecar_path,
    verify_artifact,
    write_sidecar,
)

INPUTS = (
    TensorSpec("input_ids", "int64", ("batch", "sequence")),
    TensorSpec("attention_mask", "int64", ("batch", "sequence")),
)
OUTPUTS = (TensorSpec("logits", "float32", ("batch", "sequence", 4)),)


def _artifact(tmp_path, name="model.int8.onnx", content=b"fake onnx bytes"):
    path = tmp_path / name
    path.write_bytes(content)
    return path


def _sidecar(path, **extra):
    return new_sidecar(
        path, backend="onnxruntime", precision="int8", inputs=INPUTS, outputs=OUTPUTS,
        source_sha256="ab" * 32, **extra,
    )


def test_round_trip_preserves_every_field(tmp_path):
    path = _artifact(tmp_path)
    sidecar = _sidecar(
        path,
        recipe={"method": "quantize_dynamic", "per_channel": True},
        build={"gpu_name": "X", "profiles": [{"input_ids": {"min": [1, 8]}}]},
    ).replace(parity={"label_agreement": 0.99})
    written = write_sidecar(sidecar, path)
    assert written == tmp_path / "model.int8.onnx.json" == sidecar_path(path)
    back = read_sidecar(path)
    assert back == sidecar
    data = json.loads(written.read_text())
    assert data["format_version"] == FORMAT_VERSION
    assert data["artifact"] == "model.int8.onnx"
    # Labels and window are the model's (streampunct.json), not the artifact's.
    assert not {"labels", "label_position", "window"} & data.keys()
    assert data["inputs"][0] == {"name": "input_ids", "dtype": "int64", "shape": ["batch", "sequence"]}
    assert data["outputs"][0]["shape"] == ["batch", "sequence", 4]
    assert data["artifact_sha256"] == sha256_file(path)
    assert data["source_sha256"] == "ab" * 32
    assert "onnxruntime" in data["tool_versions"] and "python" in data["tool_versions"]


def test_io_spec_from_sidecar(tmp_path):
    spec = _sidecar(_artifact(tmp_path)).io_spec(max_batch=4, max_len=64)
    assert spec.num_labels == 4
    assert (spec.max_batch, spec.max_len, spec.min_len) == (4, 64, None)
    assert spec.precision == "int8" and spec.backend == "onnxruntime"


def test_missing_sidecar_says_how_to_fix(tmp_path):
    path = _artifact(tmp_path)
    with pytest.raises(ArtifactError, match="no sidecar model.int8.onnx.json.*build-engine"):
        read_sidecar(path)


def test_missing_keys_are_named(tmp_path):
    path = _artifact(tmp_path)
    data = _sidecar(path).to_dict()
    del data["outputs"], data["source_sha256"]
    sidecar_path(path).write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="lacks required keys: outputs, source_sha256"):
        read_sidecar(path)


def test_version_1_sidecars_are_read_and_their_model_keys_ignored(tmp_path):
    path = _artifact(tmp_path)
    data = _sidecar(path).to_dict() | {
        "format_version": 1, "labels": ["O", "COMMA", "PERIOD", "QUESTION"],
        "label_position": "last", "window": {"size": 126, "left": 40, "right": 20},
    }
    sidecar_path(path).write_text(json.dumps(data))
    back = read_sidecar(path)
    assert back.format_version == 1 and back.source_sha256 == "ab" * 32
    assert "labels" not in back.to_dict()


def test_newer_format_version_is_refused(tmp_path):
    path = _artifact(tmp_path)
    data = _sidecar(path).to_dict()
    data["format_version"] = FORMAT_VERSION + 1
    sidecar_path(path).write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match=f"format_version {FORMAT_VERSION + 1}.*upgrade streampunct"):
        read_sidecar(path)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("format_version", "2", "format_version '2': it must be an integer"),
    ("format_version", True, "format_version True: it must be an integer"),
    ("inputs", "input_ids", "malformed: inputs must be a list of objects .name, dtype, shape., not 'input_ids'"),
    ("outputs", ["logits"], "malformed: outputs must be a list of objects"),
])
def test_mistyped_keys_are_one_line_errors(tmp_path, key, value, message):
    path = _artifact(tmp_path)
    data = _sidecar(path).to_dict() | {key: value}
    sidecar_path(path).write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match=message):
        read_sidecar(path)


def test_sidecar_of_another_artifact_is_refused(tmp_path):
    path = _artifact(tmp_path)
    data = _sidecar(path).to_dict()
    data["artifact"] = "model.onnx"
    sidecar_path(path).write_text(json.dumps(data))
    with pytest.raises(ArtifactMismatch, match="describes 'model.onnx', not 'model.int8.onnx'"):
        read_sidecar(path)


def test_invalid_json_is_an_artifact_error(tmp_path):
    path = _artifact(tmp_path)
    sidecar_path(path).write_text("{not json")
    with pytest.raises(ArtifactError, match="cannot read sidecar"):
        read_sidecar(path)


def test_checksum_detects_a_replaced_file(tmp_path):
    path = _artifact(tmp_path)
    sidecar = _sidecar(path)
    verify_artifact(path, sidecar)
    path.write_bytes(b"another model")
    with pytest.raises(ArtifactMismatch, match="does not match its sidecar"):
        verify_artifact(path, sidecar)


def test_unknown_precision_or_backend_rejected(tmp_path):
    sidecar = _sidecar(_artifact(tmp_path))
    with pytest.raises(ArtifactError, match="precision must be one of"):
        sidecar.replace(precision="int2")
    with pytest.raises(ArtifactError, match="backend must be one of"):
        Sidecar.from_dict({**sidecar.to_dict(), "backend": "openvino"})
