"""The TensorRT path without a GPU: profiles, plan compatibility, and the build and
runtime code driven through fakes of ``tensorrt`` and ``engines.cuda_ops``.

The fakes implement only the TensorRT 10 calls the code may use (name-based
I/O, strongly typed networks); any removed API (bindings, execute_async_v2,
BuilderFlag.FP16/INT8, int8_calibrator) is absent, so using one fails here.
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
import types

import numpy as np
import pytest

from engines import cuda_ops
from engines.base import ArtifactMismatch, BuildError, InferenceError
from engines.build.tensorrt_build import ShapeProfile, TrtBuildOptions, build_plan, compute_profile
from engines.sidecar import read_sidecar
from engines.tensorrt_engine import (
    RuntimeTarget,
    TensorRTEngine,
    check_plan_compatible,
    plan_compatibility_problems,
)

# ---- pure functions ------------------------------------------------------------


def test_profile_defaults_to_serving_shape():
    profile = compute_profile(32, 256)
    assert profile == ShapeProfile(min=(1, 8), opt=(8, 128), max=(32, 256))
    assert profile.to_dict() == {"min": [1, 8], "opt": [8, 128], "max": [32, 256]}


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ((4, 64), {}, ShapeProfile((1, 8), (4, 64), (4, 64))),  # opt clamped to max
        ((1, 8), {}, ShapeProfile((1, 8), (1, 8), (1, 8))),
        ((16, 512), {"opt_batch": 16, "opt_len": 4}, ShapeProfile((1, 8), (16, 8), (16, 512))),
        ((8, 128), {"min_len": 1}, ShapeProfile((1, 1), (8, 128), (8, 128))),
    ],
)
def test_profile_clamps_opt_into_range(args, kwargs, expected):
    assert compute_profile(*args, **kwargs) == expected


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((0, 128), {}, "max_batch must be a positive integer"),
        ((8, 4), {}, "max_len 4 is below the minimum sequence length 8"),
        ((8, 128), {"min_len": 0}, "min_len must be a positive integer"),
        ((8.0, 128), {}, "max_batch must be a positive integer"),
    ],
)
def test_profile_rejects_impossible_limits(args, kwargs, message):
    with pytest.raises(BuildError, match=message):
        compute_profile(*args, **kwargs)


HERE = RuntimeTarget("10.9.0", "NVIDIA H100 80GB HBM3", "9.0")
BUILD = {"tensorrt_version": "10.9.0", "gpu_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}


def test_plan_compatibility():
    assert plan_compatibility_problems(BUILD, HERE) == []
    other = RuntimeTarget("10.11.0", "NVIDIA A10G", "8.6")
    problems = plan_compatibility_problems(BUILD, other)
    assert problems == [
        "TensorRT version: built with '10.9.0', this host has '10.11.0'",
        "GPU: built with 'NVIDIA H100 80GB HBM3', this host has 'NVIDIA A10G'",
        "compute capability: built with '9.0', this host has '8.6'",
    ]
    assert plan_compatibility_problems(None, HERE) == [
        "the sidecar has no 'build' record (not a TensorRT plan sidecar)"
    ]


# ---- fakes --------------------------------------------------------------------


class FakeTensor:
    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, shape, dtype


class FakeNetwork:
    def __init__(self, flags):
        self.flags = flags
        self.inputs, self.outputs = [], []

    @property
    def num_inputs(self):
        return len(self.inputs)

    @property
    def num_outputs(self):
        return len(self.outputs)

    def get_input(self, i):
        return self.inputs[i]

    def get_output(self, i):
        return self.outputs[i]


class FakeParser:
    errors: list[str] = []
    outputs: tuple[str, ...] = ("logits",)

    def __init__(self, network, logger):
        self.network = network

    def parse_from_file(self, path):
        self.network.inputs = [FakeTensor(n, (-1, -1), "int64") for n in ("input_ids", "attention_mask")]
        self.network.outputs = [FakeTensor(n, (-1, -1, 4), "float32") for n in self.outputs]
        return not self.errors

    @property
    def num_errors(self):
        return len(self.errors)

    def get_error(self, i):
        return self.errors[i]


class FakeProfile:
    def __init__(self):
        self.shapes = {}

    def set_shape(self, name, min, opt, max):  # noqa: A002 - TensorRT's keyword names
        if not (np.all(np.array(min) <= opt) and np.all(np.array(opt) <= max)):
            raise RuntimeError("min <= opt <= max violated")
        self.shapes[name] = {"min": min, "opt": opt, "max": max}


class FakeTimingCache:
    def __init__(self, data):
        self.data = data

    def serialize(self):
        return self.data + b"+new"


class FakeConfig:
    def __init__(self):
        self.pool = {}
        self.profiles = []
        self.cache = None
        self.cleared = []

    def clear_flag(self, flag):
        self.cleared.append(flag)

    def set_memory_pool_limit(self, pool, size):
        self.pool[pool] = size

    def add_optimization_profile(self, profile):
        self.profiles.append(profile)
        return len(self.profiles) - 1

    def create_timing_cache(self, data):
        return FakeTimingCache(bytes(data))

    def set_timing_cache(self, cache, ignore_mismatch):
        assert ignore_mismatch is False
        self.cache = cache
        return True

    def get_timing_cache(self):
        return self.cache


class FakeBuilder:
    last = None
    plan: bytes | None = b""

    def __init__(self, logger):
        FakeBuilder.last = self

    def create_network(self, flags):
        self.network = FakeNetwork(flags)
        return self.network

    def create_builder_config(self):
        self.config = FakeConfig()
        return self.config

    def create_optimization_profile(self):
        return FakeProfile()

    def build_serialized_network(self, network, config):
        if FakeBuilder.plan is None:
            return None
        shapes = config.profiles[0].shapes["input_ids"]
        return json.dumps({"min": shapes["min"], "max": shapes["max"]}).encode()


# Device memory of the fake CUDA layer: address -> bytearray.
MEMORY: dict[int, bytearray] = {}
CALLS: list[tuple[str, int]] = []  # (call, thread id)


def _log(call):
    CALLS.append((call, threading.get_ident()))


class FakeEngine:
    outputs: tuple[str, ...] = ("logits",)

    def __init__(self, plan):
        self.profile = json.loads(plan)
        self.names = ["input_ids", "attention_mask", *FakeEngine.outputs]

    @property
    def num_io_tensors(self):
        return len(self.names)

    def get_tensor_name(self, i):
        return self.names[i]

    def get_tensor_mode(self, name):
        return "INPUT" if name in ("input_ids", "attention_mask") else "OUTPUT"

    def get_tensor_dtype(self, name):
        return "float32" if name in ("logits", "case_logits") else "int64"

    def get_tensor_profile_shape(self, name, index):
        assert index == 0
        return tuple(self.profile["min"]), (1, 1), tuple(self.profile["max"])

    def create_execution_context(self):
        return FakeContext()


class FakeContext:
    """logits[b, t, c] = mask[b, t] * (ids[b, t] * 10 + c); case_logits (when the engine has
    them) = -logits."""

    def __init__(self):
        self.shapes, self.addresses = {}, {}

    def set_input_shape(self, name, shape):
        _log("set_input_shape")
        self.shapes[name] = tuple(shape)
        return True

    def set_tensor_address(self, name, address):
        self.addresses[name] = address
        return True

    def infer_shapes(self):
        return [n for n in ("input_ids", "attention_mask") if n not in self.shapes]

    def get_tensor_shape(self, name):
        return (*self.shapes["input_ids"], 4) if name in ("logits", "case_logits") else self.shapes[name]

    def execute_async_v3(self, stream_handle):
        _log("execute_async_v3")
        assert stream_handle == 1234  # a non-default stream
        b, t = self.shapes["input_ids"]
        n = b * t
        ids = np.frombuffer(MEMORY[self.addresses["input_ids"]], np.int64)[:n].reshape(b, t)
        mask = np.frombuffer(MEMORY[self.addresses["attention_mask"]], np.int64)[:n].reshape(b, t)
        logits = (ids[..., None] * 10 + np.arange(4)) * mask[..., None]
        out = np.frombuffer(MEMORY[self.addresses["logits"]], np.float32)
        out[: n * 4] = logits.astype(np.float32).reshape(-1)
        if "case_logits" in self.addresses:
            case = np.frombuffer(MEMORY[self.addresses["case_logits"]], np.float32)
            case[: n * 4] = -logits.astype(np.float32).reshape(-1)
        return True


class FakeRuntime:
    deserialized = 0

    def __init__(self, logger):
        pass

    def deserialize_cuda_engine(self, plan):
        FakeRuntime.deserialized += 1
        return FakeEngine(plan)


def make_fake_trt(version="10.9.0"):
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt.int64, trt.float32 = "int64", "float32"
    trt.Logger = type("Logger", (), {"WARNING": 2, "__init__": lambda self, level: None})
    trt.NetworkDefinitionCreationFlag = types.SimpleNamespace(STRONGLY_TYPED=5)
    trt.MemoryPoolType = types.SimpleNamespace(WORKSPACE="workspace")
    trt.BuilderFlag = types.SimpleNamespace(TF32=6)  # FP16/INT8 are gone in TensorRT 11: absent here
    trt.TensorIOMode = types.SimpleNamespace(INPUT="INPUT", OUTPUT="OUTPUT")
    trt.Builder, trt.OnnxParser, trt.Runtime = FakeBuilder, FakeParser, FakeRuntime
    trt.nptype = lambda dtype: {"int64": np.int64, "float32": np.float32}[dtype]
    return trt


class FakePrimaryContext:
    opened: list[FakePrimaryContext] = []

    def __init__(self, device):
        self.device, self.closed = device, False

    @classmethod
    def open(cls, index=0):
        _log("context push")
        ctx = cls(cuda_ops.DeviceInfo(index, "NVIDIA H100 80GB HBM3", "9.0", 80 << 30))
        cls.opened.append(ctx)
        return ctx

    def close(self):
        _log("context pop")
        self.closed = True


class FakeStream:
    handle = 1234

    def synchronize(self):
        _log("synchronize")


class FakePinned:
    def __init__(self, count, dtype):
        self.array = np.zeros(count, dtype)

    def view(self, count):
        return self.array[:count]

    def free(self):
        _log("pinned free")


class FakeDeviceBuffer:
    def __init__(self, nbytes):
        self.address = 4096 * (len(MEMORY) + 1)
        MEMORY[self.address] = bytearray(nbytes)

    def copy_from_host_async(self, host, stream):
        _log("htod")
        MEMORY[self.address][: host.nbytes] = host.tobytes()

    def copy_to_host_async(self, host, stream):
        _log("dtoh")
        host[:] = np.frombuffer(MEMORY[self.address], host.dtype)[: host.size]

    def free(self):
        _log("device free")


@pytest.fixture
def fake_gpu(monkeypatch):
    """Install the fakes; yields the fake tensorrt module."""
    trt = make_fake_trt()
    pycuda = types.ModuleType("pycuda")
    pycuda.driver = types.ModuleType("pycuda.driver")
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    monkeypatch.setitem(sys.modules, "pycuda", pycuda)
    monkeypatch.setitem(sys.modules, "pycuda.driver", pycuda.driver)
    monkeypatch.setattr(cuda_ops, "device_info",
                        lambda index=0: cuda_ops.DeviceInfo(index, "NVIDIA H100 80GB HBM3", "9.0", 80 << 30))
    monkeypatch.setattr(cuda_ops, "PrimaryContext", FakePrimaryContext)
    monkeypatch.setattr(cuda_ops, "Stream", FakeStream)
    monkeypatch.setattr(cuda_ops, "PinnedBuffer", FakePinned)
    monkeypatch.setattr(cuda_ops, "DeviceBuffer", FakeDeviceBuffer)
    MEMORY.clear()
    CALLS.clear()
    FakeParser.errors = []
    FakeParser.outputs = ("logits",)
    FakeEngine.outputs = ("logits",)
    FakeBuilder.plan = b""
    FakeRuntime.deserialized = 0
    return trt


@pytest.fixture
def onnx_folder(tiny_export, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_export.path.parent, folder)
    return folder


# ---- build ----------------------------------------------------------------------


def test_build_is_strongly_typed_with_profile_and_timing_cache(fake_gpu, onnx_folder, tmp_path):
    cache = tmp_path / "timing.cache"
    cache.write_bytes(b"old")
    options = TrtBuildOptions(max_batch=16, max_len=256, timing_cache=cache, workspace_bytes=1 << 30)
    sidecar = build_plan(onnx_folder / "model.onnx", onnx_folder / "model.fp32.plan", options)
    builder = FakeBuilder.last
    assert builder.network.flags == 1 << 5  # 1 << STRONGLY_TYPED, nothing else
    assert builder.config.pool == {"workspace": 1 << 30}
    shapes = builder.config.profiles[0].shapes
    assert shapes["input_ids"] == shapes["attention_mask"] == {"min": (1, 8), "opt": (8, 128), "max": (16, 256)}
    assert cache.read_bytes() == b"old+new"
    assert sidecar.backend == "tensorrt" and sidecar.precision == "fp32"
    build = read_sidecar(onnx_folder / "model.fp32.plan").build
    assert build["tensorrt_version"] == "10.9.0"
    assert build["gpu_name"] == "NVIDIA H100 80GB HBM3" and build["compute_capability"] == "9.0"
    assert build["profiles"] == [{name: {"min": [1, 8], "opt": [8, 128], "max": [16, 256]}
                                  for name in ("input_ids", "attention_mask")}]
    assert build["strongly_typed"] is True
    assert builder.config.cleared == [] and build["tf32"] is True  # TensorRT's default
    # Built with the device's primary context pushed, and popped afterwards.
    assert [c for c, _ in CALLS] == ["context push", "context pop"]
    assert FakePrimaryContext.opened[-1].closed


def test_a_graph_emulating_int8_is_built_without_tf32(fake_gpu, onnx_folder):
    """TF32 rounds float32 products' inputs to 10-bit mantissas: off for a graph whose
    labels follow ONNX Runtime's float32 (engines.build.from_graph)."""
    build_plan(onnx_folder / "model.onnx", onnx_folder / "model.fp32.plan", TrtBuildOptions(tf32=False))
    assert FakeBuilder.last.config.cleared == [6]  # BuilderFlag.TF32
    assert read_sidecar(onnx_folder / "model.fp32.plan").build["tf32"] is False


def test_parser_errors_are_all_reported(fake_gpu, onnx_folder):
    FakeParser.errors = ["node 3: unsupported op Foo", "node 9: bad shape"]
    with pytest.raises(BuildError, match=r"rejected .*\(2 error\(s\)\): node 3: unsupported op Foo \| node 9: bad shape"):
        build_plan(onnx_folder / "model.onnx", onnx_folder / "model.fp32.plan")


def test_a_case_head_output_is_built_and_other_outputs_refused(fake_gpu, onnx_folder):
    # a graph derived from a folder with a truecasing head (models/default, models/base)
    FakeParser.outputs = ("logits", "case_logits")
    build_plan(onnx_folder / "model.onnx", onnx_folder / "model.fp32.plan")
    FakeParser.outputs = ("logits", "present_kv")  # a streaming graph's
    with pytest.raises(BuildError, match=r"returns \['logits', 'present_kv'\]; expected .* or \['logits', 'case_logits'\]"):
        build_plan(onnx_folder / "model.onnx", onnx_folder / "model.fp32.plan")


def test_failed_build_is_a_build_error(fake_gpu, onnx_folder):
    FakeBuilder.plan = None
    with pytest.raises(BuildError, match="TensorRT built no engine"):
        build_plan(onnx_folder / "model.onnx", onnx_folder / "model.fp32.plan")
    assert not (onnx_folder / "model.fp32.plan").exists()
    assert FakePrimaryContext.opened[-1].closed  # context popped on the error path too


# ---- runtime --------------------------------------------------------------------


@pytest.fixture
def plan(fake_gpu, onnx_folder):
    options = TrtBuildOptions(max_batch=4, max_len=32)
    build_plan(onnx_folder / "model.onnx", onnx_folder / "model.fp32.plan", options)
    CALLS.clear()  # the runtime tests look at the engine's CUDA calls only
    return onnx_folder / "model.fp32.plan"


def expected_logits(ids, mask):
    return ((ids[..., None] * 10 + np.arange(4)) * mask[..., None]).astype(np.float32)


def test_engine_runs_batches_on_one_worker_thread(plan):
    engine = TensorRTEngine(plan)
    try:
        assert engine.io_spec().max_batch == 4 and engine.io_spec().max_len == 32
        rng = np.random.default_rng(0)
        for batch, seq in ((1, 8), (4, 32), (3, 17), (2, 9)):
            ids = rng.integers(1, 80, size=(batch, seq))
            mask = np.ones_like(ids)
            mask[-1, seq // 2:] = 0
            np.testing.assert_array_equal(engine.infer(ids, mask), expected_logits(ids, mask))
    finally:
        engine.close()
    threads = {tid for _, tid in CALLS}
    assert len(threads) == 1 and threading.get_ident() not in threads
    names = [c for c, _ in CALLS]
    assert names[0] == "context push" and names[-1] == "context pop"
    # Per batch: shapes set, copies in, execute, copy out, one synchronize.
    per_batch = names[names.index("execute_async_v3") - 4: names.index("execute_async_v3") + 3]
    assert per_batch == ["set_input_shape", "htod", "set_input_shape", "htod",
                         "execute_async_v3", "dtoh", "synchronize"]
    assert names.count("synchronize") == 4
    assert FakePrimaryContext.opened[-1].closed


def test_a_plan_with_a_case_head_returns_both_heads_from_one_execution(plan):
    plain = TensorRTEngine(plan)
    try:
        assert not plain.has_case
        ids, mask = np.array([[3, 4, 5, 6, 7, 8, 9, 10]]), np.ones((1, 8), np.int64)
        heads = plain.infer_heads(ids, mask)
        assert heads.case is None
        np.testing.assert_array_equal(heads.punctuation, expected_logits(ids, mask))
    finally:
        plain.close()
    FakeEngine.outputs = ("logits", "case_logits")  # a plan built from models/default or models/base
    engine = TensorRTEngine(plan)
    try:
        assert engine.has_case
        CALLS.clear()
        rng = np.random.default_rng(1)
        ids = rng.integers(1, 80, size=(3, 11))
        mask = np.ones_like(ids)
        mask[-1, 5:] = 0
        heads = engine.infer_heads(ids, mask)
        np.testing.assert_array_equal(heads.punctuation, expected_logits(ids, mask))
        np.testing.assert_array_equal(heads.case, -expected_logits(ids, mask))
        np.testing.assert_array_equal(engine.infer(ids, mask), expected_logits(ids, mask))
        names = [c for c, _ in CALLS]
        # one execution gives both heads: two copies out, one synchronize, per call
        assert names.count("execute_async_v3") == 2 and names.count("dtoh") == 4
        assert names.count("synchronize") == 2
    finally:
        engine.close()
    FakeEngine.outputs = ("logits", "present_kv")  # a streaming graph's outputs
    with pytest.raises(ArtifactMismatch, match=r"returns \['logits', 'present_kv'\]"):
        TensorRTEngine(plan)


def test_short_sequences_are_padded_to_the_profile_minimum(plan):
    engine = TensorRTEngine(plan)
    ids, mask = np.array([[5, 6, 7]]), np.ones((1, 3), np.int64)
    try:
        out = engine.infer(ids, mask)
    finally:
        engine.close()
    assert out.shape == (1, 3, 4)
    np.testing.assert_array_equal(out, expected_logits(ids, mask))


def test_shapes_beyond_the_profile_are_refused(plan):
    engine = TensorRTEngine(plan)
    try:
        with pytest.raises(InferenceError, match="batch 5 exceeds this engine's max_batch 4"):
            engine.infer(np.ones((5, 8), np.int64), np.ones((5, 8), np.int64))
        with pytest.raises(InferenceError, match="sequence length 33 exceeds this engine's max_len 32"):
            engine.infer(np.ones((1, 33), np.int64), np.ones((1, 33), np.int64))
    finally:
        engine.close()
    with pytest.raises(InferenceError, match="is closed"):
        engine.infer(np.ones((1, 8), np.int64), np.ones((1, 8), np.int64))


def test_infer_shapes_error_is_an_inference_error(plan, monkeypatch):
    def failing(self):
        raise RuntimeError("infer_shapes error code: -1")  # what the binding raises

    engine = TensorRTEngine(plan)
    monkeypatch.setattr(FakeContext, "infer_shapes", failing)
    try:
        with pytest.raises(InferenceError, match="infer_shapes failed: infer_shapes error code: -1"):
            engine.infer(np.ones((1, 8), np.int64), np.ones((1, 8), np.int64))
    finally:
        engine.close()


def test_plan_from_another_gpu_is_refused_before_deserializing(plan, monkeypatch):
    sidecar_file = plan.with_name(plan.name + ".json")
    data = json.loads(sidecar_file.read_text())
    data["build"]["gpu_name"], data["build"]["compute_capability"] = "NVIDIA A10G", "8.6"
    sidecar_file.write_text(json.dumps(data))
    with pytest.raises(ArtifactMismatch, match=r"refusing TensorRT plan .*GPU: built with 'NVIDIA A10G'.*rebuild it on this host"):
        TensorRTEngine(plan)
    assert FakeRuntime.deserialized == 0
    assert FakePrimaryContext.opened[-1].closed  # context released on the error path


def test_plan_from_another_tensorrt_version_is_refused(plan, monkeypatch):
    monkeypatch.setattr(sys.modules["tensorrt"], "__version__", "11.4.0")
    with pytest.raises(ArtifactMismatch, match="TensorRT version: built with '10.9.0', this host has '11.4.0'"):
        TensorRTEngine(plan)
    assert FakeRuntime.deserialized == 0


def test_check_plan_compatible_message_names_the_fix(plan):
    sidecar = read_sidecar(plan)
    with pytest.raises(ArtifactMismatch, match="streampunct build-engine --backend tensorrt"):
        check_plan_compatible(sidecar, RuntimeTarget("10.9.0", "Tesla T4", "7.5"))
