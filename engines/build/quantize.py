"""int8 and 4-bit weights for ONNX Runtime on CPU.

**int8** (:func:`quantize_int8_dynamic`): dynamic quantization of the MatMul weights.

``onnxruntime.quantization.quantize_dynamic`` stores each MatMul's constant
weight as int8 (per output channel by default) and quantizes activations on
the fly (``DynamicQuantizeLinear`` + ``MatMulInteger``). Attention's
activation-by-activation MatMuls, LayerNorm, Softmax and the embeddings stay
fp32. No calibration data is needed. This is the CPU int8 path; TensorRT's
int8 uses explicit Q/DQ nodes instead (engines.build.graph_prep).

**int4** (:func:`quantize_int4_weights`): 4-bit weights in blocks of 32
along the reduction axis, each block with its own scale
(``MatMulNBits``, ONNX Runtime's ``MatMulNBitsQuantizer``); optionally the
embedding tables too (``GatherBlockQuantized``). Activations are not
quantized over the whole tensor, as dynamic int8 does: with accuracy level
4 the kernels quantize them to int8 per block of 32, on the fly. A
fine-tuned MPNet, whose activations have outliers, lost 7.9 points of
validation F1 as dynamic int8 and 0.7 as int4 (docs/engines.md).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from engines.base import GraphPrepError
from engines.build.onnx_graph import count_ops, interface_problems, io_specs, load_model
from engines.deps import require
from engines.sidecar import Sidecar, new_sidecar, read_sidecar, write_sidecar
from engines.stream_spec import stream_interface_problems

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DynamicQuantOptions:
    """Settings of ORT dynamic quantization.

    Attributes:
        per_channel: one weight scale per output channel (better accuracy on
            transformer MatMuls at no measurable speed cost on CPU).
        reduce_range: 7-bit weights (default). ORT's u8s8 kernels on x86 CPUs
            without VNNI (AVX2) add pairs of products in saturating int16, so
            8-bit weights give other labels there than on VNNI CPUs; with 7
            bits every x86 CPU computes the same integers, at a cost within
            noise (docs/engines.md).
        exclude_nodes: MatMul node names to leave in fp32.
        quantize_embeddings: also store the embedding tables (Gather) as int8:
            MiniLM's graph shrinks by more than half with the same label
            agreement (docs/engines.md); off by default.
    """

    per_channel: bool = True
    reduce_range: bool = True
    exclude_nodes: tuple[str, ...] = ()
    quantize_embeddings: bool = False


@contextlib.contextmanager
def _quiet_root_logger(level: int = logging.WARNING):
    root = logging.getLogger()
    old = root.level
    root.setLevel(max(old, level))
    try:
        yield
    finally:
        root.setLevel(old)


def quantize_int8_dynamic(
    fp32_path: str | Path,
    out_path: str | Path,
    options: DynamicQuantOptions | None = None,
    *,
    stream: bool = False,
) -> Sidecar:
    """Write ``out_path`` (int8 MatMul weights) from the fp32 ONNX artifact and its sidecar
    (``stream``: the streaming graph's interface, :mod:`engines.stream_spec`)."""
    options = options or DynamicQuantOptions()
    quantization = require("onnxruntime.quantization", feature="int8 quantization")
    onnx = require("onnx", feature="int8 quantization")
    fp32_path, out_path = Path(fp32_path), Path(out_path)
    parent = read_sidecar(fp32_path)
    if parent.precision != "fp32":
        raise GraphPrepError(f"dynamic int8 quantization needs an fp32 graph; {fp32_path} is {parent.precision}")
    op_types = ["MatMul", "Gather"] if options.quantize_embeddings else ["MatMul"]
    try:
        # The quantizer logs every node on the root logger at INFO: keep it to warnings.
        with _quiet_root_logger():
            quantization.quantize_dynamic(
                model_input=str(fp32_path),
                model_output=str(out_path),
                op_types_to_quantize=op_types,
                per_channel=options.per_channel,
                reduce_range=options.reduce_range,
                weight_type=quantization.QuantType.QInt8,
                nodes_to_exclude=list(options.exclude_nodes) or None,
                extra_options={
                    # Only MatMuls with a constant B (the weights) are quantized.
                    "MatMulConstBOnly": True,
                    # Types shape inference cannot tell (after constant folding) are fp32.
                    "DefaultTensorType": onnx.TensorProto.FLOAT,
                },
            )
    except Exception as e:  # the quantizer raises a mix of types
        raise GraphPrepError(f"quantize_dynamic failed on {fp32_path}: {e}") from e
    ops, io = _checked_ops(out_path, "MatMulInteger", "quantize_dynamic left no int8 MatMul", stream=stream)
    sidecar = _write_derived_sidecar(out_path, parent, "int8", io, {
        "method": "onnxruntime.quantization.quantize_dynamic",
        "op_types": op_types,
        "weight_type": "QInt8",
        "int8_matmuls": ops["MatMulInteger"],
        **{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(options).items()},
    })
    logger.info("wrote %s (%d int8 MatMuls)", out_path, ops["MatMulInteger"])
    return sidecar


def _checked_ops(path: Path, required_op: str, missing: str, *, stream: bool = False
                 ) -> tuple[dict[str, int], tuple]:
    """(op counts, (inputs, outputs)) of a quantized graph that holds ``required_op`` and the
    runtime's interface (the streaming graph's with ``stream``); GraphPrepError (``missing``,
    or the interface problems) otherwise."""
    model = load_model(path)
    ops = count_ops(model)
    if not ops.get(required_op):
        raise GraphPrepError(f"{missing} in {path} (ops: {ops})")
    inputs, outputs = io_specs(model)
    if stream:
        problems = stream_interface_problems(inputs, outputs)
    else:
        problems = interface_problems(inputs, outputs)
    if problems:
        raise GraphPrepError(f"{path} has the wrong interface: " + "; ".join(problems))
    return ops, (inputs, outputs)


def _write_derived_sidecar(path: Path, parent: Sidecar, precision: str, io: tuple, recipe: dict) -> Sidecar:
    """Write the sidecar of the ONNX Runtime artifact ``path``, derived from ``parent`` by
    ``recipe``; ``io`` is its (inputs, outputs)."""
    inputs, outputs = io
    sidecar = new_sidecar(path, backend="onnxruntime", precision=precision, inputs=inputs, outputs=outputs,
                          source_sha256=parent.source_sha256, parent=parent, recipe=recipe)
    write_sidecar(sidecar, path)
    return sidecar


#: Reduced-range weights, as ORT's symmetric ``reduce_range``: with u8 activations two
#: products sum to at most 2 * 255 * 64 = 32640, which fits the int16 of AVX2's
#: vpmaddubsw, so no x86 kernel saturates.
REDUCED_RANGE = (-64, 64)


def reduce_weight_range(int8_path: str | Path, out_path: str | Path) -> Sidecar:
    """Rewrite the MatMulInteger weights of a dynamic-int8 graph to 7 bits.

    ONNX Runtime's u8s8 MatMulInteger kernels on x86 CPUs without VNNI (AVX2,
    AVX-512 without VNNI) add pairs of u8 x s8 products in int16 with
    saturation, so an 8-bit-weight graph gives slightly different logits, and
    labels, there than on VNNI CPUs. With weights in [-64, 64] no pair can
    saturate and every x86 kernel computes the same integers. This is
    ``reduce_range=True`` applied to an existing int8 graph, for when the
    fp32 graph is not at hand: each weight column is dequantized with its
    scale and quantized again symmetrically to [-64, 64] (scale max|w| / 64).
    Zero points must be 0 (ORT's symmetric QInt8 weights).
    """
    onnx = require("onnx", feature="int8 requantization")
    numpy_helper = require("onnx.numpy_helper", feature="int8 requantization")
    import numpy as np

    int8_path, out_path = Path(int8_path), Path(out_path)
    parent = read_sidecar(int8_path)
    if parent.precision != "int8":
        raise GraphPrepError(f"{int8_path} is {parent.precision}, not a dynamic int8 graph")
    model = load_model(int8_path)
    inits = {i.name: i for i in model.graph.initializer}
    lo, hi = REDUCED_RANGE
    changed = 0
    for node in model.graph.node:
        if node.op_type != "MatMulInteger" or node.input[1] not in inits:
            continue
        w_name = node.input[1]
        base = w_name.removesuffix("_quantized")
        scale_init = inits.get(base + "_scale")
        zp_init = inits.get(node.input[3]) if len(node.input) > 3 and node.input[3] else None
        if scale_init is None:
            raise GraphPrepError(f"{int8_path}: no scale initializer {base}_scale for weight {w_name}")
        q = numpy_helper.to_array(inits[w_name])
        scale = numpy_helper.to_array(scale_init).astype(np.float64)
        if q.dtype != np.int8 or q.ndim != 2:
            raise GraphPrepError(f"{int8_path}: weight {w_name} is {q.dtype}{list(q.shape)}, expected 2-D int8")
        if zp_init is not None and np.any(numpy_helper.to_array(zp_init) != 0):
            raise GraphPrepError(f"{int8_path}: weight {w_name} has non-zero zero points (asymmetric)")
        if scale.ndim not in (0, 1) or (scale.ndim == 1 and scale.shape[0] != q.shape[1]):
            raise GraphPrepError(f"{int8_path}: scale of {w_name} has shape {list(scale.shape)}")
        if q.min() >= lo and q.max() <= hi:
            continue  # already 7-bit
        w = q.astype(np.float64) * scale
        peak = np.abs(w).max(axis=0) if scale.ndim == 1 else np.abs(w).max()
        new_scale = np.where(peak > 0, peak / hi, scale)
        q7 = np.clip(np.rint(w / new_scale), lo, hi).astype(np.int8)
        inits[w_name].CopyFrom(numpy_helper.from_array(q7, w_name))
        scale_init.CopyFrom(numpy_helper.from_array(new_scale.astype(np.float32), scale_init.name))
        changed += 1
    if not changed:
        raise GraphPrepError(f"{int8_path}: no 8-bit MatMulInteger weight to reduce")
    onnx.save(model, str(out_path))
    recipe = dict(parent.recipe or {})
    recipe.update({"reduce_range": True, "reduced_after_quantization": True,
                   "reduced_matmuls": changed, "weight_range": list(REDUCED_RANGE),
                   # lineage of the 8-bit graph: its own parent and parity figures
                   "parent_of_8bit": parent.parent, "parity_of_8bit": parent.parity})
    sidecar = _write_derived_sidecar(out_path, parent, "int8", io_specs(model), recipe)
    logger.info("wrote %s (%d MatMul weights reduced to 7 bits)", out_path, changed)
    return sidecar


def main(argv: list[str] | None = None) -> int:
    """``python -m engines.build.quantize reduce-range MODEL.int8.onnx [--out PATH]``."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m engines.build.quantize")
    sub = ap.add_subparsers(dest="command", required=True)
    rr = sub.add_parser("reduce-range", help="rewrite a dynamic-int8 graph's MatMul weights to 7 bits "
                                             "(same labels on x86 CPUs with and without VNNI)")
    rr.add_argument("artifact", type=Path, help="int8 ONNX artifact with its .json sidecar")
    rr.add_argument("--out", type=Path, default=None, help="output path (default: in place)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        reduce_weight_range(args.artifact, args.out or args.artifact)
    except GraphPrepError as e:
        print(f"error: {e}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


@dataclass(frozen=True)
class Int4Options:
    """Settings of the 4-bit weight quantization.

    Attributes:
        block_size: weights per scale along the reduction axis.
        accuracy_level: ``MatMulNBits`` compute type: 4 (int8 activations,
            quantized per block; the fastest on x86), 1 (fp32).
        quantize_embeddings: also store the embedding tables (Gather) as 4 bits.
    """

    block_size: int = 32
    accuracy_level: int = 4
    quantize_embeddings: bool = True

    def __post_init__(self) -> None:
        if self.block_size < 16 or self.block_size & (self.block_size - 1):
            raise GraphPrepError(f"block_size must be a power of two >= 16, got {self.block_size}")
        if self.accuracy_level not in (0, 1, 2, 3, 4):
            raise GraphPrepError(f"accuracy_level must be 0-4, got {self.accuracy_level}")


def quantize_int4_weights(
    fp32_path: str | Path,
    out_path: str | Path,
    options: Int4Options | None = None,
    *,
    stream: bool = False,
) -> Sidecar:
    """Write ``out_path`` (4-bit block-quantized MatMul weights) from the fp32 ONNX artifact
    (``stream``: the streaming graph's interface, :mod:`engines.stream_spec`)."""
    options = options or Int4Options()
    nbits = require("onnxruntime.quantization.matmul_nbits_quantizer", feature="int4 quantization")
    fp32_path, out_path = Path(fp32_path), Path(out_path)
    parent = read_sidecar(fp32_path)
    if parent.precision != "fp32":
        raise GraphPrepError(f"4-bit quantization needs an fp32 graph; {fp32_path} is {parent.precision}")
    op_types = ("MatMul", "Gather") if options.quantize_embeddings else ("MatMul",)
    try:
        with _quiet_root_logger():
            config = nbits.DefaultWeightOnlyQuantConfig(
                block_size=options.block_size, is_symmetric=True, accuracy_level=options.accuracy_level,
                op_types_to_quantize=op_types, quant_axes=(("MatMul", 0), ("Gather", 1)),
            )
            quantizer = nbits.MatMulNBitsQuantizer(load_model(fp32_path), algo_config=config)
            quantizer.process()
            quantizer.model.save_model_to_file(str(out_path), use_external_data_format=False)
    except GraphPrepError:
        raise
    except Exception as e:  # the quantizer raises a mix of types
        raise GraphPrepError(f"MatMulNBitsQuantizer failed on {fp32_path}: {e}") from e
    ops, io = _checked_ops(out_path, "MatMulNBits", "the 4-bit quantizer left no MatMulNBits",
                           stream=stream)
    sidecar = _write_derived_sidecar(out_path, parent, "int4", io, {
        "method": "onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer",
        "bits": 4,
        "symmetric": True,
        "op_types": list(op_types),
        "int4_matmuls": ops["MatMulNBits"],
        "int4_gathers": ops.get("GatherBlockQuantized", 0),
        **asdict(options),
    })
    logger.info("wrote %s (%d 4-bit MatMuls, %d 4-bit embedding tables)", out_path, ops["MatMulNBits"],
                ops.get("GatherBlockQuantized", 0))
    return sidecar
