"""ONNX Runtime engine: options, interface checks, input validation, errors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from engines.base import ArtifactError, ArtifactMismatch, EngineError, InferenceError
from engines.ort_engine import OrtEngine, OrtOptions, physical_cores


@pytest.fixture
def folder(tiny_export, tmp_path):
    target = tmp_path / "model"
    shutil.copytree(tiny_export.path.parent, target)
    return target


def test_session_settings_are_explicit(folder):
    engine = OrtEngine(folder / "model.onnx", OrtOptions(intra_op_threads=1))
    assert engine.threads == 1
    assert engine._session.get_providers() == ["CPUExecutionProvider"]
    default = OrtEngine(folder / "model.onnx")
    assert default.threads == physical_cores() >= 1
    assert default.options.inter_op_threads == 1
    config = default._session.get_session_options().get_session_config_entry
    assert config("session.intra_op.allow_spinning") == "0"
    spinning = OrtEngine(folder / "model.onnx", OrtOptions(allow_spinning=True))
    assert spinning._session.get_session_options().get_session_config_entry(
        "session.intra_op.allow_spinning") == "1"
    ids, mask = np.array([[2, 10, 11, 3]]), np.ones((1, 4), np.int64)
    np.testing.assert_array_equal(spinning.infer(ids, mask), default.infer(ids, mask))
    assert not default._session.get_session_options().enable_cpu_mem_arena  # off by default
    arena = OrtEngine(folder / "model.onnx", OrtOptions(cpu_mem_arena=True))
    assert arena._session.get_session_options().enable_cpu_mem_arena
    np.testing.assert_array_equal(arena.infer(ids, mask), default.infer(ids, mask))
    assert not default._session.get_session_options().enable_mem_pattern  # off by default
    patterns = OrtEngine(folder / "model.onnx", OrtOptions(mem_pattern=True))
    assert patterns._session.get_session_options().enable_mem_pattern
    np.testing.assert_array_equal(patterns.infer(ids, mask), default.infer(ids, mask))


def test_infer_shapes_and_dtypes(folder):
    engine = OrtEngine(folder / "model.onnx", OrtOptions(intra_op_threads=1))
    ids = np.array([[2, 10, 11, 3], [2, 12, 3, 0]], dtype=np.int32)  # int32 is accepted
    mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0]])
    out = engine.infer(ids, mask)
    assert out.shape == (2, 4, 4) and out.dtype == np.float32
    np.testing.assert_allclose(out, engine.infer(ids.astype(np.int64), mask), atol=0)


@pytest.mark.parametrize(
    ("ids", "mask", "message"),
    [
        (np.zeros((3,), np.int64), np.zeros((3,), np.int64), r"shape \[batch, seq\]"),
        (np.zeros((2, 3), np.int64), np.zeros((2, 4), np.int64), "differs from input_ids shape"),
        (np.zeros((2, 3), np.float32), np.zeros((2, 3), np.int64), "must be an integer array"),
        (np.zeros((0, 3), np.int64), np.zeros((0, 3), np.int64), "both >= 1"),
    ],
)
def test_bad_input_is_an_inference_error(folder, ids, mask, message):
    engine = OrtEngine(folder / "model.onnx", OrtOptions(intra_op_threads=1))
    with pytest.raises(InferenceError, match=message):
        engine.infer(ids, mask)


def test_closed_engine_refuses(folder):
    engine = OrtEngine(folder / "model.onnx", OrtOptions(intra_op_threads=1))
    engine.close()
    engine.close()
    with pytest.raises(InferenceError, match="is closed"):
        engine.infer(np.ones((1, 3), np.int64), np.ones((1, 3), np.int64))


def test_sidecar_interface_mismatch_is_refused(folder):
    path = folder / "model.onnx.json"
    data = json.loads(path.read_text())
    data["inputs"][1]["name"] = "token_type_ids"
    path.write_text(json.dumps(data))
    with pytest.raises(ArtifactMismatch, match="but its sidecar says"):
        OrtEngine(folder / "model.onnx")


def test_replaced_model_file_is_refused(folder, tiny_export):
    (folder / "model.onnx").write_bytes((folder / "model.onnx").read_bytes() + b"\0")
    with pytest.raises(ArtifactMismatch, match="does not match its sidecar"):
        OrtEngine(folder / "model.onnx")


def test_unavailable_provider_is_named(folder):
    with pytest.raises(EngineError, match=r"\['TensorrtExecutionProviderX'\] are not available"):
        OrtEngine(folder / "model.onnx", OrtOptions(providers=("TensorrtExecutionProviderX",)))


def test_missing_artifact(folder):
    with pytest.raises(ArtifactError, match="no ONNX artifact"):
        OrtEngine(folder / "model.int8.onnx")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"intra_op_threads": 0}, "intra_op_threads must be >= 1"),
        ({"inter_op_threads": 0}, "inter_op_threads must be >= 1"),
        ({"providers": ()}, "at least one execution provider"),
        ({"graph_optimization": "max"}, "graph_optimization must be one of"),
    ],
)
def test_options_are_validated(kwargs, message):
    with pytest.raises(EngineError, match=message):
        OrtOptions(**kwargs)
