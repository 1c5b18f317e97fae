"""TensorRT on a real GPU: build fp16 and int8 plans from the shipped model and check
label agreement with ONNX Runtime (>= 99.5%) on validation text.

Skipped unless tensorrt, pycuda and nvidia-modelopt are installed and a CUDA
device is present. Run on a GPU host (see docs/engines.md)::

    pytest -m gpu tests/engines/test_tensorrt_gpu.py -v

The fp16 and Q/DQ graphs derive from an fp32 ``model.onnx``: the folder's own when it
has one, else the float model rebuilt from its quantized graph (the shipped folders,
``engines.build.from_graph``); point ``STREAMPUNCT_TEST_MODEL`` at another folder to test
that one instead of ``models/default``. ``build-engine --backend tensorrt --model
models/default`` (its int8 activations emulated, TF32 off) is checked against the shipped
graph run one window a call.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from .conftest import DEV2012, REPO

pytestmark = pytest.mark.gpu

MODEL_DIR = Path(os.environ.get("STREAMPUNCT_TEST_MODEL", REPO / "models" / "default"))
MIN_AGREEMENT = 0.995


@pytest.fixture(scope="module")
def gpu():
    pytest.importorskip("tensorrt", reason="needs tensorrt")
    pytest.importorskip("pycuda.driver", reason="needs pycuda")
    pytest.importorskip("modelopt.onnx.quantization", reason="needs nvidia-modelopt[onnx]")
    from engines import cuda_ops
    from engines.base import EngineError

    try:
        count = cuda_ops.init()
    except EngineError as e:
        pytest.skip(f"no usable CUDA driver: {e}")
    if count < 1:
        pytest.skip("no CUDA device")
    return cuda_ops.device_info(0)


@pytest.fixture(scope="module")
def workdir(gpu, tmp_path_factory):
    if not (MODEL_DIR / "tokenizer.json").is_file():
        pytest.skip(f"needs {MODEL_DIR / 'tokenizer.json'} (a model folder)")
    folder = tmp_path_factory.mktemp("trt")
    shutil.copyfile(MODEL_DIR / "tokenizer.json", folder / "tokenizer.json")
    if (MODEL_DIR / "model.onnx").is_file():
        for name in ("model.onnx", "model.onnx.json"):
            shutil.copyfile(MODEL_DIR / name, folder / name)
    else:  # a shipped folder keeps only its quantized graph: the float model rebuilt from it
        from engines.build.from_graph import graph_module, source_graph
        from engines.build.onnx_export import export_onnx

        source = graph_module(source_graph(MODEL_DIR), "float")
        export_onnx(source.module, folder / "model.onnx", source_sha256=source.sidecar.source_sha256)
    return folder


@pytest.fixture(scope="module")
def windows(workdir):
    if not DEV2012.is_file():
        pytest.skip(f"needs validation text {DEV2012}")
    from engines.build.parity import ParityWindows
    from streampunct.model import load_model_info
    from streampunct.text.word_labels import read_word_labels

    info = load_model_info(MODEL_DIR)
    aligner = info.aligner()
    words = read_word_labels(DEV2012).words[: 2000 + 64 * 110]
    parity = ParityWindows.of(aligner.offline_windows(words[:2000], info.window))
    calibration = ParityWindows.of(aligner.offline_windows(words[2000:], info.window)).head(64)
    return parity, calibration


@pytest.fixture(scope="module")
def ort_fp32(workdir):
    from engines.ort_engine import OrtEngine

    return OrtEngine(workdir / "model.onnx")


def _build(workdir, windows, precision):
    from engines.build import graph_prep
    from engines.build.tensorrt_build import TrtBuildOptions, build_plan

    _, calibration = windows
    feed = calibration.calibration_feed(len(calibration))
    if precision == "fp16":
        prepared = workdir / "model.fp16.onnx"
        graph_prep.prepare_fp16(workdir / "model.onnx", prepared, feed)
    else:
        prepared = workdir / "model.qdq.onnx"
        graph_prep.prepare_int8_qdq(workdir / "model.onnx", prepared, feed)
    plan = workdir / f"model.{precision}.plan"
    options = TrtBuildOptions(max_batch=32, max_len=256, timing_cache=workdir / "timing.cache")
    return build_plan(prepared, plan, options), plan


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_plan_agrees_with_onnxruntime(workdir, windows, ort_fp32, gpu, precision):
    from engines.build.parity import parity_on_windows
    from engines.tensorrt_engine import TensorRTEngine

    sidecar, plan = _build(workdir, windows, precision)
    assert sidecar.precision == precision
    assert sidecar.build["gpu_name"] == gpu.name
    assert sidecar.build["compute_capability"] == gpu.compute_capability
    assert (workdir / "timing.cache").stat().st_size > 0
    engine = TensorRTEngine(plan)
    try:
        spec = engine.io_spec()
        assert (spec.max_batch, spec.min_len, spec.max_len) == (32, 8, 256)
        report = parity_on_windows(ort_fp32.infer, engine.infer, windows[0], batch_size=32)
        print(f"{precision}: agreement {report.label_agreement:.4f} over {report.n_labels} words, "
              f"max |diff| {report.max_abs_diff:.3g}")
        assert report.label_agreement >= MIN_AGREEMENT
        short = engine.infer(np.array([[101, 2023, 102]]), np.ones((1, 3), np.int64))
        assert short.shape == (1, 3, spec.num_labels)
    finally:
        engine.close()


def test_registry_loads_the_fp16_plan_and_serves_threads(workdir, windows):
    from engines.registry import load_engine

    if not (workdir / "model.fp16.plan").is_file():
        _build(workdir, windows, "fp16")
    engine = load_engine("tensorrt", workdir)
    try:
        assert engine.io_spec().artifact == "model.fp16.plan"
        ids = windows[0].input_ids[:8]
        mask = windows[0].attention_mask[:8]
        expected = engine.infer(ids, mask)
        results: list[np.ndarray] = []
        threads = [threading.Thread(target=lambda: results.append(engine.infer(ids, mask))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 8
        for r in results:
            np.testing.assert_array_equal(r, expected)
    finally:
        engine.close()


def test_plan_for_another_gpu_is_refused(workdir, windows):
    import json

    from engines.base import ArtifactMismatch
    from engines.tensorrt_engine import TensorRTEngine

    if not (workdir / "model.fp16.plan").is_file():
        _build(workdir, windows, "fp16")
    other = workdir / "other.plan"
    shutil.copyfile(workdir / "model.fp16.plan", other)
    data = json.loads((workdir / "model.fp16.plan.json").read_text())
    data["artifact"] = "other.plan"
    data["build"]["gpu_name"] = "Some Other GPU"
    (workdir / "other.plan.json").write_text(json.dumps(data))
    with pytest.raises(ArtifactMismatch, match="GPU: built with 'Some Other GPU'"):
        TensorRTEngine(other)


def test_the_shipped_int8_folder_becomes_a_plan_with_its_labels(gpu, tmp_path, capsys):
    """``build-engine --backend tensorrt --model models/default``: the float32 graph that
    emulates the shipped graph's int8 activations, built with TF32 off, labels as the
    shipped graph's run one window a call (builder parity on dev2012)."""
    from engines.sidecar import read_sidecar
    from streampunct.cli import main

    shipped = REPO / "models" / "default"
    if not (shipped / "model.int8.onnx").is_file() or not DEV2012.is_file():
        pytest.skip("needs models/default and the validation text dev2012")
    out = tmp_path / "default-trt"
    assert main(["build-engine", "--backend", "tensorrt", "--model", str(shipped), "--out", str(out),
                 "--parity-data", str(DEV2012), "--timing-cache", str(tmp_path / "timing.cache")]) == 0
    print(capsys.readouterr().out)
    plan = read_sidecar(out / "model.fp32.plan")
    assert plan.build["tf32"] is False and plan.build["gpu_name"] == gpu.name
    assert plan.parity["source_graph_windows_a_call"] == 1
    assert plan.parity["label_agreement_vs_source_graph"] >= MIN_AGREEMENT
