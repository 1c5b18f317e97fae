"""Reading and checking an ONNX graph's interface (needs the ``onnx`` package)."""

from __future__ import annotations

from pathlib import Path

from engines.base import CASE_OUTPUT_NAME, INPUT_NAMES, OUTPUT_NAME, TensorSpec
from engines.deps import require


def load_model(path: str | Path, *, load_weights: bool = True):
    onnx = require("onnx", feature="reading ONNX graphs")
    return onnx.load(str(path), load_external_data=load_weights)


def _spec(value_info) -> TensorSpec:
    onnx = require("onnx", feature="reading ONNX graphs")
    tensor_type = value_info.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type).name
    shape: list[int | str] = []
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_param"):
            shape.append(dim.dim_param)
        elif dim.HasField("dim_value"):
            shape.append(int(dim.dim_value))
        else:
            shape.append("?")
    return TensorSpec(name=value_info.name, dtype=dtype, shape=tuple(shape))


def io_specs(model) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """Graph inputs (initializers excluded) and outputs as TensorSpecs."""
    initializers = {init.name for init in model.graph.initializer}
    inputs = tuple(_spec(v) for v in model.graph.input if v.name not in initializers)
    outputs = tuple(_spec(v) for v in model.graph.output)
    return inputs, outputs


def interface_problems(
    inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]
) -> list[str]:
    """What is wrong with a graph interface: exactly input_ids/attention_mask int64
    [batch, sequence] (both dynamic) in, logits float32 [batch, sequence, C] out, optionally
    followed by case_logits float32 [batch, sequence, 4] (a truecasing head)."""
    problems: list[str] = []
    names = tuple(t.name for t in inputs)
    if sorted(names) != sorted(INPUT_NAMES):
        problems.append(f"inputs are {list(names)}, expected exactly {list(INPUT_NAMES)}")
    for t in inputs:
        if t.dtype != "int64":
            problems.append(f"input {t.name} is {t.dtype}, expected int64")
        if len(t.shape) != 2 or not all(isinstance(d, str) for d in t.shape):
            problems.append(f"input {t.name} has shape {list(t.shape)}, expected two dynamic axes")
    names_out = [t.name for t in outputs]
    if names_out not in ([OUTPUT_NAME], [OUTPUT_NAME, CASE_OUTPUT_NAME]):
        problems.append(f"outputs are {names_out}, expected ['{OUTPUT_NAME}'] "
                        f"or ['{OUTPUT_NAME}', '{CASE_OUTPUT_NAME}']")
    for out in outputs if not problems else ():
        if out.dtype != "float32":
            problems.append(f"output {out.name} is {out.dtype}, expected float32")
        if len(out.shape) != 3 or not isinstance(out.shape[2], int):
            problems.append(f"output {out.name} has shape {list(out.shape)}, expected [batch, sequence, C]")
        elif not all(isinstance(d, str) for d in out.shape[:2]):
            problems.append(f"output {out.name} has shape {list(out.shape)}: batch and sequence must be dynamic")
    return problems


def count_ops(model) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts
