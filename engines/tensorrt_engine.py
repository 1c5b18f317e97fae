"""TensorRT engine: a serialized plan run with name-based I/O on one CUDA worker thread.

Threading contract: one worker thread owns everything CUDA. It retains and
pushes the device's primary context, deserializes the plan, allocates pinned
host and device buffers once at the profile's max shapes, and runs every
batch; ``infer`` (from any thread) hands the batch to it and waits. Per batch:
``set_input_shape`` for both inputs, async host-to-device copies on a
non-default stream, ``infer_shapes`` (must leave nothing unresolved),
``execute_async_v3``, an async device-to-host copy, one ``synchronize``, and
the logits copied out of the pinned buffer before the next batch can reuse it.
``close`` releases execution context -> engine -> runtime, frees the buffers
and pops the context, on the same thread.

Before deserializing, the plan's sidecar is compared with this host
(:func:`check_plan_compatible`): a plan built with another TensorRT version or
for another GPU is refused with a message that says how to rebuild it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import (
    CASE_OUTPUT_NAME,
    INPUT_NAMES,
    OUTPUT_NAME,
    ArtifactError,
    ArtifactMismatch,
    EngineBase,
    HeadLogits,
    InferenceError,
    IOSpec,
    check_batch,
    make_options,
)
from engines.deps import require
from engines.sidecar import Sidecar, read_sidecar, verify_artifact

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrtOptions:
    """Settings of the TensorRT engine.

    Attributes:
        device: CUDA device ordinal.
        verify_checksum: compare the plan's sha256 with its sidecar on load.
    """

    device: int = 0
    verify_checksum: bool = True


@dataclass(frozen=True)
class RuntimeTarget:
    """What a plan must have been built for: this host's TensorRT and GPU."""

    tensorrt_version: str
    gpu_name: str
    compute_capability: str


def plan_compatibility_problems(build: Mapping[str, Any] | None, target: RuntimeTarget) -> list[str]:
    """Differences between a plan's build record and this host (empty: compatible).

    A plan is specific to the TensorRT version and to the GPU model it was
    built on (same compute capability is not enough for the tuned tactics).
    """
    if not build:
        return ["the sidecar has no 'build' record (not a TensorRT plan sidecar)"]
    problems = []
    built = (
        ("TensorRT version", "tensorrt_version", target.tensorrt_version),
        ("GPU", "gpu_name", target.gpu_name),
        ("compute capability", "compute_capability", target.compute_capability),
    )
    for what, key, here in built:
        there = build.get(key)
        if str(there) != str(here):
            problems.append(f"{what}: built with {there!r}, this host has {here!r}")
    return problems


def check_plan_compatible(sidecar: Sidecar, target: RuntimeTarget, *, path: Path | None = None) -> None:
    """Raise ArtifactMismatch (with the rebuild command) if the plan was built elsewhere."""
    problems = plan_compatibility_problems(sidecar.build, target)
    if problems:
        name = path or sidecar.artifact
        raise ArtifactMismatch(
            f"refusing TensorRT plan {name}: " + "; ".join(problems) + ". Plans only run "
            "with the TensorRT version and GPU they were built for: rebuild it on this host "
            "with 'streampunct build-engine --backend tensorrt ...'"
        )


def profile_limits(sidecar: Sidecar) -> tuple[int, int, int]:
    """(max_batch, min_len, max_len) of the plan's optimization profile, from its sidecar."""
    try:
        shapes = sidecar.build["profiles"][0]["input_ids"]  # type: ignore[index]
        return int(shapes["max"][0]), int(shapes["min"][1]), int(shapes["max"][1])
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise ArtifactError(f"sidecar of {sidecar.artifact} has no usable build.profiles: {e!r}") from e


def _infer_shapes(context) -> None:
    """``infer_shapes`` returns the names it could not resolve and raises RuntimeError on error."""
    try:
        unresolved = context.infer_shapes()
    except RuntimeError as e:
        raise InferenceError(f"TensorRT infer_shapes failed: {e}") from e
    if unresolved:
        raise InferenceError(f"TensorRT cannot infer shapes of {list(unresolved)}")


@dataclass
class _Binding:
    name: str
    dtype: np.dtype
    host: Any  # cuda_ops.PinnedBuffer
    device: Any  # cuda_ops.DeviceBuffer


@dataclass
class _WorkerState:
    """Everything CUDA; touched only on the worker thread."""

    cuda_context: Any
    runtime: Any
    engine: Any
    context: Any
    stream: Any
    inputs: dict[str, _Binding] = field(default_factory=dict)
    output: _Binding | None = None
    case_output: _Binding | None = None  # the truecasing head's, when the plan has one


class TensorRTEngine(EngineBase):
    """A TensorRT plan and its sidecar behind the Engine protocol.

    Attributes:
        name: ``"tensorrt"``.
        path: the plan file.
        sidecar: its parsed sidecar.
        max_batch, min_len, max_len: the plan's profile limits (shorter
            sequences are padded to ``min_len`` inside ``infer``).
    """

    name = "tensorrt"

    def __init__(self, path: str | Path, options: TrtOptions | None = None) -> None:
        require("tensorrt", feature="the TensorRT engine")
        require("pycuda.driver", feature="the TensorRT engine (CUDA via pycuda)")
        self.options = options or TrtOptions()
        self.path = Path(path)
        if not self.path.is_file():
            raise ArtifactError(f"no TensorRT plan at {self.path}")
        self.sidecar = read_sidecar(self.path)
        if self.sidecar.backend != "tensorrt":
            raise ArtifactMismatch(f"{self.path} is a {self.sidecar.backend} artifact, not a TensorRT plan")
        if self.options.verify_checksum:
            verify_artifact(self.path, self.sidecar)
        self.max_batch, self.min_len, self.max_len = profile_limits(self.sidecar)
        self._lock = threading.Lock()
        self._closed = False
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tensorrt-engine")
        try:
            self._state: _WorkerState = self._worker.submit(self._open).result()
        except BaseException:
            self._worker.shutdown(wait=True)
            raise

    # ---- worker thread -------------------------------------------------

    def _open(self) -> _WorkerState:
        trt = require("tensorrt", feature="the TensorRT engine")
        from engines import cuda_ops

        cuda_context = cuda_ops.PrimaryContext.open(self.options.device)
        state = _WorkerState(cuda_context, None, None, None, None)
        try:
            device = cuda_context.device
            check_plan_compatible(
                self.sidecar,
                RuntimeTarget(trt.__version__, device.name, device.compute_capability),
                path=self.path,
            )
            state.runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
            state.engine = state.runtime.deserialize_cuda_engine(self.path.read_bytes())
            if state.engine is None:
                raise ArtifactMismatch(
                    f"TensorRT {trt.__version__} could not deserialize {self.path} on "
                    f"{device.name}; the plan is corrupt or was built with another TensorRT "
                    "version or GPU: rebuild it on this host"
                )
            state.context = state.engine.create_execution_context()
            if state.context is None:
                raise InferenceError("TensorRT could not create an execution context (GPU memory?)")
            state.stream = cuda_ops.Stream()
            self._allocate(trt, cuda_ops, state)
        except BaseException:
            self._release(state)
            raise
        logger.info(
            "loaded %s (%s) on %s: batch <= %d, %d <= seq <= %d",
            self.path, self.sidecar.precision, device.name, self.max_batch, self.min_len, self.max_len,
        )
        return state

    def _allocate(self, trt, cuda_ops, state: _WorkerState) -> None:
        engine, context = state.engine, state.context
        modes: dict[str, Any] = {}
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            modes[name] = engine.get_tensor_mode(name)
        inputs = sorted(n for n, m in modes.items() if m == trt.TensorIOMode.INPUT)
        outputs = sorted(n for n, m in modes.items() if m == trt.TensorIOMode.OUTPUT)
        if inputs != sorted(INPUT_NAMES) or outputs not in ([OUTPUT_NAME], sorted([OUTPUT_NAME, CASE_OUTPUT_NAME])):
            raise ArtifactMismatch(
                f"{self.path} takes {inputs} and returns {outputs}; expected "
                f"{list(INPUT_NAMES)} -> ['{OUTPUT_NAME}'] or ['{OUTPUT_NAME}', '{CASE_OUTPUT_NAME}']"
            )
        for name in INPUT_NAMES:
            _, _, max_shape = engine.get_tensor_profile_shape(name, 0)
            max_shape = tuple(max_shape)
            if max_shape != (self.max_batch, self.max_len):
                raise ArtifactMismatch(
                    f"{self.path}: profile max shape of {name} is {max_shape}, its sidecar says "
                    f"{(self.max_batch, self.max_len)}"
                )
            if not context.set_input_shape(name, max_shape):
                raise InferenceError(f"set_input_shape({name}, {max_shape}) failed")
            state.inputs[name] = self._bind(trt, cuda_ops, engine, context, name, max_shape)
        _infer_shapes(context)
        out_shape = tuple(context.get_tensor_shape(OUTPUT_NAME))
        if len(out_shape) != 3 or min(out_shape) < 1:
            raise ArtifactMismatch(f"{self.path}: logits shape at max input is {out_shape}")
        classes = self.sidecar.io_spec().num_labels
        if classes is not None and out_shape[2] != classes:
            raise ArtifactMismatch(f"{self.path} returns {out_shape[2]} classes, its sidecar says {classes}")
        state.output = self._bind(trt, cuda_ops, engine, context, OUTPUT_NAME, out_shape)
        if CASE_OUTPUT_NAME in outputs:
            case_shape = tuple(context.get_tensor_shape(CASE_OUTPUT_NAME))
            if len(case_shape) != 3 or case_shape[:2] != out_shape[:2] or case_shape[2] < 1:
                raise ArtifactMismatch(f"{self.path}: case_logits shape at max input is {case_shape}")
            state.case_output = self._bind(trt, cuda_ops, engine, context, CASE_OUTPUT_NAME, case_shape)

    @staticmethod
    def _bind(trt, cuda_ops, engine, context, name: str, shape: tuple[int, ...]) -> _Binding:
        dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
        count = int(np.prod(shape))
        binding = _Binding(
            name, dtype, cuda_ops.PinnedBuffer(count, dtype), cuda_ops.DeviceBuffer(count * dtype.itemsize)
        )
        if not context.set_tensor_address(name, binding.device.address):
            raise InferenceError(f"set_tensor_address({name}) failed")
        return binding

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, ...]:
        state = self._state
        context, stream = state.context, state.stream
        batch, seq = ids.shape
        for name, array in (("input_ids", ids), ("attention_mask", mask)):
            binding = state.inputs[name]
            if not context.set_input_shape(name, (batch, seq)):
                raise InferenceError(f"set_input_shape({name}, {(batch, seq)}) failed")
            host = binding.host.view(batch * seq)
            host[:] = array.reshape(-1)  # casts int64 to the engine's input dtype if it differs
            binding.device.copy_from_host_async(host, stream)
        _infer_shapes(context)
        out_shape = tuple(context.get_tensor_shape(OUTPUT_NAME))
        if out_shape[:2] != (batch, seq):
            raise InferenceError(f"logits shape {out_shape} for input {(batch, seq)}")
        if not context.execute_async_v3(stream.handle):
            raise InferenceError(f"execute_async_v3 failed on a batch of shape {(batch, seq)}")
        copies = [(state.output, out_shape)]
        if state.case_output is not None:
            case_shape = tuple(context.get_tensor_shape(CASE_OUTPUT_NAME))
            if case_shape[:2] != (batch, seq):
                raise InferenceError(f"case_logits shape {case_shape} for input {(batch, seq)}")
            copies.append((state.case_output, case_shape))
        hosts = []
        for binding, shape in copies:
            host_out = binding.host.view(int(np.prod(shape)))
            binding.device.copy_to_host_async(host_out, stream)
            hosts.append((host_out, shape))
        stream.synchronize()
        # Copy out of the pinned buffers: the next batch overwrites them.
        return tuple(np.array(h.reshape(shape), dtype=np.float32, copy=True) for h, shape in hosts)

    def _release(self, state: _WorkerState) -> None:
        """Free in dependency order: execution context, engine, runtime, buffers, context."""
        state.context = None
        state.engine = None
        state.runtime = None
        bindings = [*state.inputs.values(), *(b for b in (state.output, state.case_output) if b is not None)]
        state.inputs, state.output, state.case_output = {}, None, None
        for binding in bindings:
            binding.device.free()
            binding.host.free()
        state.stream = None
        state.cuda_context.close()

    # ---- any thread ----------------------------------------------------

    @property
    def has_case(self) -> bool:
        """The plan returns the truecasing head's ``case_logits`` too."""
        return self._state.case_output is not None

    def _heads(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> tuple[np.ndarray, ...]:
        ids, mask = check_batch(
            input_ids, attention_mask, max_batch=self.max_batch, max_len=self.max_len
        )
        seq = ids.shape[1]
        if seq < self.min_len:
            # Right padding with mask 0 leaves the real tokens' logits unchanged.
            pad = ((0, 0), (0, self.min_len - seq))
            ids, mask = np.pad(ids, pad), np.pad(mask, pad)
        with self._lock:
            if self._closed:
                raise InferenceError(f"TensorRT engine for {self.path.name} is closed")
            future = self._worker.submit(self._run, ids, mask)
        return tuple(out[:, :seq] for out in future.result())

    def infer(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """int64[B,T], int64[B,T] -> float32[B,T,C]; B <= max_batch, T <= max_len."""
        return self._heads(input_ids, attention_mask)[0]

    def infer_heads(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> HeadLogits:
        """The punctuation logits and, for a plan with a truecasing head, its case logits,
        from one execution."""
        outs = self._heads(input_ids, attention_mask)
        return HeadLogits(outs[0], outs[1] if len(outs) > 1 else None)

    def io_spec(self) -> IOSpec:
        return self.sidecar.io_spec(max_batch=self.max_batch, max_len=self.max_len, min_len=self.min_len)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._worker.submit(self._release, self._state).result()
        finally:
            self._worker.shutdown(wait=True)


def open_engine(model_dir: Path, artifact: Path | None, options: Mapping[str, Any]) -> TensorRTEngine:
    """Registry entry point: ``load_engine("tensorrt", model_dir, device=0)``."""
    if artifact is None:
        raise ArtifactError(f"the tensorrt backend needs a .plan artifact in {model_dir}")
    return TensorRTEngine(artifact, make_options(TrtOptions, options, "tensorrt"))
