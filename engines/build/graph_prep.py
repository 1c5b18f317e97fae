"""Precision in the ONNX graph, for TensorRT's strongly typed networks (runs on CPU).

TensorRT 11 builds only strongly typed networks, so fp16 and int8 come from
the graph, prepared here with nvidia-modelopt:

* :func:`prepare_fp16`: ``modelopt.onnx.autocast`` converts to fp16 but keeps
  LayerNorm, Softmax, reductions, Pow and Sqrt in fp32 (BERT-style encoders
  overflow in fp16 LayerNorm: TensorRT issues 2466, 2564, 3101) and keeps the
  int64 inputs / fp32 logits.
* :func:`prepare_int8_qdq`: ``modelopt.onnx.quantization.quantize`` inserts
  explicit Q/DQ nodes calibrated with ONNX Runtime on CPU on validation
  windows; the rest of the graph goes to ``high_precision`` (fp16 by default,
  with the same fp32 islands).

Both results are ordinary ONNX graphs: the tests run them with ONNX Runtime on
CPU and compare labels with the fp32 graph. Every result is checked
(:func:`fp32_island_problems`, Q/DQ count, interface) before its sidecar is
written.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from engines.base import INPUT_NAMES, GraphPrepError
from engines.build.onnx_graph import count_ops, interface_problems, io_specs, load_model
from engines.deps import require
from engines.sidecar import Sidecar, new_sidecar, read_sidecar, write_sidecar

logger = logging.getLogger(__name__)

#: Op types that stay fp32 in the fp16 graph (and in the int8 graph's high-precision part).
KEEP_FP32_OP_TYPES: tuple[str, ...] = (
    "LayerNormalization",
    "Softmax",
    "ReduceMean",
    "ReduceSum",
    "ReduceSumSquare",
    "ReduceMax",
    "ReduceMin",
    "ReduceL2",
    "ReduceLogSumExp",
    "Pow",
    "Sqrt",
)
_FLOAT_TYPES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}


def _modelopt(sub: str):
    return require(f"modelopt.onnx.{sub}", feature="fp16/int8 graph preparation (nvidia-modelopt)")


def tensor_types(model) -> dict[str, int]:
    """ONNX elem type of every tensor name that shape inference can type."""
    onnx = require("onnx", feature="ONNX graph checks")
    inferred = onnx.shape_inference.infer_shapes(model)
    types: dict[str, int] = {}
    graph = inferred.graph
    for value in (*graph.input, *graph.output, *graph.value_info):
        types[value.name] = value.type.tensor_type.elem_type
    for init in graph.initializer:
        types[init.name] = init.data_type
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    types[node.output[0]] = attr.t.data_type
    return types


def fp32_island_problems(model, op_types: Sequence[str] = KEEP_FP32_OP_TYPES) -> list[str]:
    """Nodes of ``op_types`` whose floating inputs/outputs are not float32 (or untyped)."""
    types = tensor_types(model)
    problems = []
    for node in model.graph.node:
        if node.op_type not in op_types:
            continue
        for name in (*node.input, *node.output):
            if not name:
                continue
            elem = types.get(name)
            if elem is None:
                problems.append(f"{node.op_type} {node.name}: type of {name!r} unknown")
            elif elem in _FLOAT_TYPES and elem != 1:
                problems.append(f"{node.op_type} {node.name}: {name!r} is {_FLOAT_TYPES[elem]}")
    return problems


def float_type_counts(model) -> dict[str, int]:
    """How many node outputs have each floating type (a quick check of the fp16 share)."""
    types = tensor_types(model)
    counts: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.output:
            elem = types.get(name)
            if elem in _FLOAT_TYPES:
                counts[_FLOAT_TYPES[elem]] = counts.get(_FLOAT_TYPES[elem], 0) + 1
    return counts


def activation_matmuls(model) -> list[str]:
    """Names of MatMuls with no constant operand (attention's QK^T and PV)."""
    constants = {init.name for init in model.graph.initializer}
    constants |= {o for node in model.graph.node if node.op_type == "Constant" for o in node.output}
    return [
        node.name for node in model.graph.node
        if node.op_type == "MatMul" and not any(i in constants for i in node.input)
    ]


_GELU_OPS = ("Erf", "Gelu", "FastGelu", "BiasGelu", "Tanh")


def gelu_fed_matmuls(model, *, depth: int = 4) -> list[str]:
    """Weight MatMuls whose activation input comes from a GELU (found within
    ``depth`` producers upstream: Erf/Tanh-based or fused Gelu ops)."""
    constants = {init.name for init in model.graph.initializer}
    constants |= {o for node in model.graph.node if node.op_type == "Constant" for o in node.output}
    producer = {o: node for node in model.graph.node for o in node.output}

    def fed_by_gelu(name: str, hops: int) -> bool:
        node = producer.get(name)
        if node is None or hops == 0 or node.op_type in ("MatMul", "Gemm"):
            return False
        if node.op_type in _GELU_OPS:
            return True
        return any(fed_by_gelu(i, hops - 1) for i in node.input if i and i not in constants)

    return [
        node.name for node in model.graph.node
        if node.op_type == "MatMul" and any(i in constants for i in node.input)
        and any(fed_by_gelu(i, depth) for i in node.input if i not in constants)
    ]


def _check_calibration(calibration: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    if sorted(calibration) != sorted(INPUT_NAMES):
        raise GraphPrepError(f"calibration data must hold {list(INPUT_NAMES)}, got {sorted(calibration)}")
    feed = {k: np.ascontiguousarray(v, dtype=np.int64) for k, v in calibration.items()}
    shapes = {v.shape for v in feed.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2 or next(iter(shapes))[0] < 1:
        raise GraphPrepError(f"calibration arrays must share one [N, T] shape, got {shapes}")
    return feed


def _check_result(path: Path, *, keep_fp32: Sequence[str]) -> tuple:
    model = load_model(path)
    inputs, outputs = io_specs(model)
    problems = interface_problems(inputs, outputs)
    problems += fp32_island_problems(model, keep_fp32)
    if problems:
        raise GraphPrepError(f"{path} fails its checks: " + "; ".join(problems[:10]))
    return model, inputs, outputs


def prepare_fp16(
    onnx_path: str | Path,
    out_path: str | Path,
    calibration: Mapping[str, np.ndarray],
    *,
    keep_fp32_op_types: Sequence[str] = KEEP_FP32_OP_TYPES,
    batch_size: int = 8,
) -> Sidecar:
    """fp16 graph with ``keep_fp32_op_types`` in fp32 and fp32/int64 IO.

    ``calibration`` ({input_ids, attention_mask} int64[N, T], real text) lets
    autocast see real activation ranges and keep overflowing nodes in fp32.
    """
    autocast = _modelopt("autocast")
    onnx = require("onnx", feature="fp16 graph preparation")
    onnx_path, out_path = Path(onnx_path), Path(out_path)
    parent = read_sidecar(onnx_path)
    if parent.precision != "fp32":
        raise GraphPrepError(f"fp16 preparation needs an fp32 graph; {onnx_path} is {parent.precision}")
    feed = _check_calibration(calibration)
    with tempfile.TemporaryDirectory(prefix="streampunct-fp16-") as tmp:
        # modelopt may rewrite files next to its input: give it a copy.
        source = Path(tmp) / "model.onnx"
        shutil.copyfile(onnx_path, source)
        n = feed["input_ids"].shape[0]
        (Path(tmp) / "calibration").mkdir()
        for i, start in enumerate(range(0, n, batch_size)):
            np.savez(
                Path(tmp) / "calibration" / f"batch{i:04d}.npz",
                **{k: v[start:start + batch_size] for k, v in feed.items()},
            )
        try:
            model = autocast.convert_to_mixed_precision(
                onnx_path=str(source),
                low_precision_type="fp16",
                op_types_to_exclude=list(keep_fp32_op_types),
                keep_io_types=True,
                calibration_data=str(Path(tmp) / "calibration"),
                providers=["cpu"],
            )
        except Exception as e:  # modelopt raises a mix of types
            raise GraphPrepError(f"fp16 conversion of {onnx_path} failed: {e}") from e
    onnx.save(model, str(out_path))
    model, inputs, outputs = _check_result(out_path, keep_fp32=keep_fp32_op_types)
    floats = float_type_counts(model)
    if not floats.get("float16"):
        raise GraphPrepError(f"{out_path} has no fp16 tensors after conversion ({floats})")
    sidecar = new_sidecar(
        out_path,
        backend="onnxruntime",
        precision="fp16",
        inputs=inputs,
        outputs=outputs,
        source_sha256=parent.source_sha256,
        parent=parent,
        recipe={
            "method": "modelopt.onnx.autocast.convert_to_mixed_precision",
            "fp32_op_types": list(keep_fp32_op_types),
            "calibration_windows": int(feed["input_ids"].shape[0]),
            "node_output_types": floats,
        },
    )
    write_sidecar(sidecar, out_path)
    logger.info("wrote %s (%s)", out_path, floats)
    return sidecar


def prepare_int8_qdq(
    onnx_path: str | Path,
    out_path: str | Path,
    calibration: Mapping[str, np.ndarray],
    *,
    high_precision: str = "fp16",
    calibration_method: str = "entropy",
    keep_fp32_op_types: Sequence[str] = KEEP_FP32_OP_TYPES,
    quantize_attention_matmuls: bool = False,
    quantize_residual_adds: bool = False,
    quantize_gelu_matmuls: bool = False,
    exclude_nodes: Sequence[str] = (),
) -> Sidecar:
    """int8 graph with explicit Q/DQ nodes, calibrated on ``calibration`` with ORT (CPU).

    ``high_precision`` (``fp16`` or ``fp32``) is the type of everything not
    quantized; ``keep_fp32_op_types`` stay fp32 either way.

    By default only the weight MatMuls are quantized, and not those fed by a
    GELU (the feed-forward down-projections, whose inputs have outliers).
    Measured with ONNX Runtime on CPU, residual Adds in int8 cost the most
    label agreement with fp32, then the GELU-fed MatMuls (docs/engines.md);
    attention's activation-by-activation MatMuls are a small share of the
    FLOPs at 128 tokens. Each can be switched on;
    ``exclude_nodes`` are further node-name regular expressions to keep in
    high precision.
    """
    quantization = _modelopt("quantization")
    onnx_path, out_path = Path(onnx_path), Path(out_path)
    parent = read_sidecar(onnx_path)
    if parent.precision != "fp32":
        raise GraphPrepError(f"Q/DQ preparation needs an fp32 graph; {onnx_path} is {parent.precision}")
    if high_precision not in ("fp16", "fp32"):
        raise GraphPrepError(f"high_precision must be fp16 or fp32, got {high_precision!r}")
    feed = _check_calibration(calibration)
    source_model = load_model(onnx_path)
    excluded_nodes = [] if quantize_attention_matmuls else activation_matmuls(source_model)
    if not quantize_gelu_matmuls:
        excluded_nodes += gelu_fed_matmuls(source_model)
    excluded_ops = [] if quantize_residual_adds else ["Add"]
    with tempfile.TemporaryDirectory(prefix="streampunct-qdq-") as tmp:
        # modelopt rewrites files next to its input (it changed model.onnx in place
        # when run on it directly): give it a copy in a scratch folder.
        source = Path(tmp) / "model.onnx"
        shutil.copyfile(onnx_path, source)
        try:
            quantization.quantize(
                str(source),
                quantize_mode="int8",
                calibration_data=feed,
                calibration_method=calibration_method,
                calibration_eps=["cpu"],
                high_precision_dtype=high_precision,
                op_types_to_exclude_fp16=list(keep_fp32_op_types),
                op_types_to_exclude=excluded_ops or None,
                nodes_to_exclude=[re.escape(name) for name in excluded_nodes] + list(exclude_nodes) or None,
                output_path=str(out_path),
                log_level="WARNING",
            )
        except Exception as e:  # modelopt raises a mix of types
            raise GraphPrepError(f"int8 Q/DQ quantization of {onnx_path} failed: {e}") from e
    if not out_path.is_file():
        raise GraphPrepError(f"modelopt wrote no {out_path}")
    model, inputs, outputs = _check_result(out_path, keep_fp32=keep_fp32_op_types)
    ops = count_ops(model)
    n_q, n_dq = ops.get("QuantizeLinear", 0), ops.get("DequantizeLinear", 0)
    if not n_q or not n_dq:
        raise GraphPrepError(f"{out_path} has no Q/DQ nodes (ops: {ops})")
    sidecar = new_sidecar(
        out_path,
        backend="onnxruntime",
        precision="int8",
        inputs=inputs,
        outputs=outputs,
        source_sha256=parent.source_sha256,
        parent=parent,
        recipe={
            "method": "modelopt.onnx.quantization.quantize (explicit Q/DQ)",
            "calibration_method": calibration_method,
            "calibration_windows": int(feed["input_ids"].shape[0]),
            "calibration_eps": ["cpu"],
            "high_precision": high_precision,
            "fp32_op_types": list(keep_fp32_op_types),
            "not_quantized_op_types": excluded_ops,
            "not_quantized_matmuls": len(excluded_nodes),
            "quantize_attention_matmuls": quantize_attention_matmuls,
            "quantize_gelu_matmuls": quantize_gelu_matmuls,
            "excluded_node_patterns": list(exclude_nodes),
            "quantize_linear": n_q,
            "dequantize_linear": n_dq,
        },
    )
    write_sidecar(sidecar, out_path)
    logger.info("wrote %s (%d Q / %d DQ nodes)", out_path, n_q, n_dq)
    return sidecar
