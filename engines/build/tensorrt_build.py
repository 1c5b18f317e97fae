"""Build a TensorRT plan from an fp16 or Q/DQ int8 ONNX graph (GPU host).

One code path for TensorRT 10 and 11 (see docs/tensorrt notes): a strongly
typed network (precision comes from the ONNX graph, no precision flags, no
calibrator), the ONNX parser, one optimization profile over batch
1..max_batch and sequence min_len..max_len with the opt shape at the serving
default, an optional timing cache, and every returned status checked. The
sidecar records the GPU, its compute capability, the TensorRT version and the
profile, so that the loader can refuse a plan built elsewhere.

:func:`compute_profile` is pure and imports nothing from TensorRT.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from engines.base import CASE_OUTPUT_NAME, INPUT_NAMES, OUTPUT_NAME, BuildError
from engines.deps import require
from engines.sidecar import Sidecar, new_sidecar, read_sidecar, write_sidecar

logger = logging.getLogger(__name__)

#: The serving default: a window of 126 content tokens plus [CLS] and [SEP].
SERVING_SEQ_LEN = 128
SERVING_BATCH = 8


@dataclass(frozen=True)
class ShapeProfile:
    """(batch, seq) shapes of one optimization profile, for both inputs.

    Attributes:
        min, opt, max: (batch, seq) at the low end, the tuned point and the high end.
    """

    min: tuple[int, int]
    opt: tuple[int, int]
    max: tuple[int, int]

    def to_dict(self) -> dict[str, list[int]]:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


def compute_profile(
    max_batch: int,
    max_len: int,
    *,
    opt_batch: int = SERVING_BATCH,
    opt_len: int = SERVING_SEQ_LEN,
    min_len: int = 8,
) -> ShapeProfile:
    """min/opt/max shapes: batch 1..max_batch, sequence min_len..max_len, opt at the
    serving default clamped into range. Raises BuildError for impossible limits."""
    for name, value in (("max_batch", max_batch), ("max_len", max_len), ("min_len", min_len),
                        ("opt_batch", opt_batch), ("opt_len", opt_len)):
        if not isinstance(value, int) or value < 1:
            raise BuildError(f"{name} must be a positive integer, got {value!r}")
    if max_len < min_len:
        raise BuildError(f"max_len {max_len} is below the minimum sequence length {min_len}")
    opt = (min(opt_batch, max_batch), min(max(opt_len, min_len), max_len))
    return ShapeProfile(min=(1, min_len), opt=opt, max=(max_batch, max_len))


@dataclass(frozen=True)
class TrtBuildOptions:
    """Settings of a TensorRT build.

    Attributes:
        max_batch, max_len: the largest (batch, seq) the plan accepts.
        opt_batch, opt_len: the shape TensorRT tunes for (serving default).
        min_len: the shortest sequence the plan accepts (the engine pads shorter input).
        workspace_bytes: builder workspace memory pool limit.
        timing_cache: file to read tactic timings from and write back (None: no cache).
        device: CUDA device ordinal (recorded in the sidecar).
        optimization_level: builder optimization level 0..5 (None: TensorRT's default, 3).
        tf32: let float32 matrix products use TF32 (TensorRT's default). Off for a graph
            that emulates int8 activations: its attention products then stay float32 as
            in ONNX Runtime (its integer products are exact either way).
    """

    max_batch: int = 32
    max_len: int = 256
    opt_batch: int = SERVING_BATCH
    opt_len: int = SERVING_SEQ_LEN
    min_len: int = 8
    workspace_bytes: int = 4 << 30
    timing_cache: Path | None = None
    device: int = 0
    optimization_level: int | None = None
    tf32: bool = True

    def profile(self) -> ShapeProfile:
        return compute_profile(
            self.max_batch, self.max_len,
            opt_batch=self.opt_batch, opt_len=self.opt_len, min_len=self.min_len,
        )


def _parse(trt, network, logger_, onnx_path: Path):
    parser = trt.OnnxParser(network, logger_)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise BuildError(
            f"TensorRT's ONNX parser rejected {onnx_path} ({len(errors)} error(s)): "
            + " | ".join(errors or ["no error recorded"])
        )
    return parser


def _check_network(trt, network) -> None:
    inputs = {network.get_input(i).name: network.get_input(i) for i in range(network.num_inputs)}
    outputs = [network.get_output(i).name for i in range(network.num_outputs)]
    if sorted(inputs) != sorted(INPUT_NAMES) or outputs not in ([OUTPUT_NAME], [OUTPUT_NAME, CASE_OUTPUT_NAME]):
        raise BuildError(
            f"network takes {sorted(inputs)} and returns {outputs}; "
            f"expected {list(INPUT_NAMES)} -> ['{OUTPUT_NAME}'] or ['{OUTPUT_NAME}', '{CASE_OUTPUT_NAME}']"
        )
    for name, tensor in inputs.items():
        shape = tuple(tensor.shape)
        if len(shape) != 2 or shape[0] != -1 or shape[1] != -1:
            raise BuildError(f"input {name} has shape {shape}; expected dynamic [-1, -1]")
        if tensor.dtype != trt.int64:
            raise BuildError(f"input {name} is {tensor.dtype}; expected int64")


def _load_timing_cache(config, path: Path | None):
    if path is None:
        return None
    previous = path.read_bytes() if path.is_file() else b""
    cache = config.create_timing_cache(previous)
    if cache is None:
        raise BuildError(f"TensorRT could not create a timing cache from {path}")
    if not config.set_timing_cache(cache, ignore_mismatch=False):
        raise BuildError(
            f"timing cache {path} does not match this GPU/TensorRT; delete it to start a new one"
        )
    return cache


def _build(trt, onnx_path: Path, options: TrtBuildOptions, profile: ShapeProfile):
    """Parse, configure and build on the current CUDA context; returns the serialized plan."""
    trt_logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(trt_logger)
    # Strongly typed: tensor types follow the ONNX graph. Required for the Q/DQ
    # and fp16 graphs on TensorRT 10; the only mode TensorRT 11 has.
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    if network is None:
        raise BuildError("TensorRT could not create a network definition")
    parser = _parse(trt, network, trt_logger, onnx_path)
    _check_network(trt, network)

    config = builder.create_builder_config()
    if config is None:
        raise BuildError("TensorRT could not create a builder config")
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_bytes)
    if options.optimization_level is not None:
        config.builder_optimization_level = options.optimization_level
    if not options.tf32:
        config.clear_flag(trt.BuilderFlag.TF32)
    trt_profile = builder.create_optimization_profile()
    for name in INPUT_NAMES:
        try:
            trt_profile.set_shape(name, min=profile.min, opt=profile.opt, max=profile.max)
        except (RuntimeError, TypeError, ValueError) as e:
            raise BuildError(f"invalid profile for {name} {profile.to_dict()}: {e}") from e
    if config.add_optimization_profile(trt_profile) < 0:
        raise BuildError(f"TensorRT rejected the optimization profile {profile.to_dict()}")
    _load_timing_cache(config, options.timing_cache)

    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise BuildError(
            f"TensorRT built no engine from {onnx_path} (see the TensorRT log above; "
            "'out of memory' means raise workspace_bytes or lower max_batch/max_len)"
        )
    if options.timing_cache is not None:
        options.timing_cache.parent.mkdir(parents=True, exist_ok=True)
        options.timing_cache.write_bytes(memoryview(config.get_timing_cache().serialize()))
    del parser, network, config, builder
    return plan


def build_plan(
    onnx_path: str | Path,
    plan_path: str | Path,
    options: TrtBuildOptions | None = None,
) -> Sidecar:
    """Build ``plan_path`` from ``onnx_path`` (fp16 or Q/DQ graph with its sidecar).

    Raises BuildError naming the failed step (parser errors listed), CudaError
    for a missing device, and DependencyMissing without tensorrt/pycuda.
    """
    options = options or TrtBuildOptions()
    trt = require("tensorrt", feature="building TensorRT engines")
    from engines import cuda_ops

    onnx_path, plan_path = Path(onnx_path), Path(plan_path)
    source = read_sidecar(onnx_path)
    profile = options.profile()

    # TensorRT builds for the device of the calling thread's current context:
    # make options.device's primary context current for the build.
    cuda_context = cuda_ops.PrimaryContext.open(options.device)
    device = cuda_context.device
    started = time.perf_counter()
    try:
        plan = _build(trt, onnx_path, options, profile)
    finally:
        cuda_context.close()
    seconds = time.perf_counter() - started
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    plan_path.write_bytes(memoryview(plan))

    sidecar = new_sidecar(
        plan_path,
        backend="tensorrt",
        precision=source.precision,
        inputs=source.inputs,
        outputs=source.outputs,
        source_sha256=source.source_sha256,
        parent=source,
        recipe={"method": "tensorrt strongly typed network from ONNX", "source_recipe": source.recipe},
        build={
            "tensorrt_version": trt.__version__,
            "gpu_name": device.name,
            "compute_capability": device.compute_capability,
            "device": options.device,
            "profiles": [{name: profile.to_dict() for name in INPUT_NAMES}],
            "workspace_bytes": options.workspace_bytes,
            "optimization_level": options.optimization_level,
            "tf32": options.tf32,
            "timing_cache": str(options.timing_cache) if options.timing_cache else None,
            "strongly_typed": True,
            "build_seconds": round(seconds, 1),
        },
    )
    write_sidecar(sidecar, plan_path)
    logger.info("built %s in %.0f s on %s", plan_path, seconds, device.name)
    return sidecar
