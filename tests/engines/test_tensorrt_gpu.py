"""TensorRT on a real GPU: build fp16 and int8 plans from the shipped model and check
label agreement with ONNX Runtime (>= 99.5%) on validation text.

Skipped unless tensorrt, pycuda and nvidia-modelopt are installed and a CUDA
device is present. Run on a GPU host (see docs/engines.md)::

    pytest -m gpu tests/engines/test_tensorrt_gpu.py -v

The shipped model folder must hold the fp32 ``model.onnx`` (the fp16 and Q/DQ
graphs derive from it); point ``STREAMPUNCT_TEST_MODEL`` at another folder to
test that one instead of ``models/default``.
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
    for name in ("model.onnx", "model.onnx.json", "tokenizer.json"):
        if not (MODEL_DIR / name).is_file():
            pytest.skip(f"needs {MODEL_DIR / name} (the shipped model's fp32 ONNX, sidecar and tokenizer)")
    folder = tmp_path_factory.mktemp("trt")
    for name in ("model.onnx", "model.onnx.json", "tokenizer.json"):
        shutil.copyfile(MODEL_DIR / name, folder / name)
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
