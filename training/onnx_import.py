"""A shipped int8 or int4 ONNX model back into a training checkpoint, to continue training it.

The release models keep only their quantized graph: the fp32 weights they were
exported from are not in the repository. This module reads the graph's
initializers, de-quantizes them (per-channel int8 MatMul weights, 8-bit
embedding tables; 4-bit block-quantized ``MatMulNBits`` weights and
``GatherBlockQuantized`` embedding tables) and maps them back to the encoder's
parameter names by following each ``MatMulInteger`` / ``MatMulNBits`` to the
``Add`` of its named bias. The result is a checkpoint folder
(``training.checkpoint`` layout) whose logits agree with the graph up to the
quantisation of activations::

    python -m training.onnx_import models/default cache/default_fp32 [--dither 0.5 --seed 0]
    streampunct train --config ... --base-model cache/default_fp32 --set model.init_head=true

``--dither D`` adds uniform noise of +-D quantization steps to every de-quantized
weight. Without it, every imported weight sits on the graph's grid, and an
export of the trained model with the same quantization rounds back to the
graph's code each weight that training moved by less than half a step: the GPU
teacher of 2026-11-26 trained 3,042 steps from ``models/base``'s int4 graph and
exported to 99.85% of its codes, losing the training (docs/training.md,
"Release 7"; ``engines.weight_codes`` measures it). With D = 0.5 the rounding
of the export is independent of the old grid, so a weight's expected export is
its trained value (dithered quantization); the price is noise of the size of
one quantization at the start of training.
"""

from __future__ import annotations

import argparse
import logging
from collections import deque
from pathlib import Path

import numpy as np

from streampunct.errors import InputError, ModelError
from training.cli_support import run_tool

log = logging.getLogger(__name__)

#: module prefixes of exported parameter names: the runtime graph's wrapper, the streaming graph's
_PREFIXES = ("inner.", "model.")
_QUANT = "_quantized"
_Q4 = "_Q4"  # suffix of MatMulNBitsQuantizer's packed tables


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _dither(shape: tuple, dither: tuple[float, np.random.Generator] | None) -> np.ndarray | float:
    """Uniform noise of +-D steps in code units (``dither`` = (D, rng)), or 0."""
    if not dither:
        return 0.0
    amount, rng = dither
    return rng.uniform(-amount, amount, shape).astype(np.float32)


def _dequantize_nbits(packed: np.ndarray, scales: np.ndarray, zero: np.ndarray | None, attrs: dict,
                      where: str, dither: tuple[float, np.random.Generator] | None = None) -> np.ndarray:
    """A ``MatMulNBits`` weight back to fp32 [K, N].

    ``packed`` is uint8 [N, K/block, block*bits/8], 4-bit values low nibble first; ``scales``
    one per (column, block); without zero points the 4-bit zero is 8 (the op's default).
    """
    bits, block, k, n = (int(attrs[a]) for a in ("bits", "block_size", "K", "N"))
    if bits != 4:
        raise ModelError(f"{where}: {bits}-bit MatMulNBits weights are not supported (4 only)")
    if zero is not None:
        raise ModelError(f"{where}: asymmetric MatMulNBits weights (zero points) are not supported")
    blocks = -(-k // block)
    flat = packed.reshape(n, blocks, block // 2)
    q = np.empty((n, blocks, block), dtype=np.float32)
    q[..., 0::2] = flat & 0x0F
    q[..., 1::2] = flat >> 4
    w = (q - 8.0 + _dither(q.shape, dither)) * scales.reshape(n, blocks, 1).astype(np.float32)
    return np.ascontiguousarray(w.reshape(n, blocks * block)[:, :k].T)


def _dequantize_gather_blocks(data: np.ndarray, scales: np.ndarray, zero: np.ndarray | None, attrs: dict,
                              where: str, dither: tuple[float, np.random.Generator] | None = None) -> np.ndarray:
    """A ``GatherBlockQuantized`` table (int4 [rows, hidden], blocks along the hidden axis) to fp32."""
    block, axis = int(attrs.get("block_size", 128)), int(attrs.get("quantize_axis", 1))
    if data.ndim != 2 or axis not in (1, -1):
        raise ModelError(f"{where}: only 2-D tables quantized along their last axis are supported")
    if zero is not None:
        raise ModelError(f"{where}: asymmetric block-quantized tables (zero points) are not supported")
    per = np.repeat(scales.astype(np.float32), block, axis=1)[:, : data.shape[1]]
    return (data.astype(np.float32) + _dither(data.shape, dither)) * per


def _dequantize(q: np.ndarray, scale: np.ndarray, zero: np.ndarray,
                dither: tuple[float, np.random.Generator] | None = None) -> np.ndarray:
    """One scale per tensor, or per output channel (the last axis of a [in, out] weight)."""
    return (q.astype(np.float32) - zero.astype(np.float32) + _dither(q.shape, dither)) * scale.astype(np.float32)


def onnx_state_dict(onnx_path: str | Path, *, dither: float = 0.0, seed: int = 0) -> dict[str, np.ndarray]:
    """``PunctuationModel`` parameter name -> fp32 array (torch layout) from an exported graph;
    ``dither``: uniform noise of +-dither quantization steps on every de-quantized weight."""
    import onnx
    from onnx import numpy_helper

    if not 0.0 <= dither <= 0.5:
        raise InputError(f"dither must be between 0 and 0.5 quantization steps, got {dither}")
    noise = (dither, np.random.default_rng(seed)) if dither else None
    model = onnx.load(str(onnx_path))
    g = model.graph
    init = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    consumers: dict[str, list] = {}
    for node in g.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def torch_name(name: str) -> str:
        for prefix in _PREFIXES:
            if name.startswith(prefix):
                return name[len(prefix):]
        return name

    def bias_after(weight: str, op: str) -> str:
        """The named bias added to the product of ``weight`` (a MatMul's B input)."""
        starts = [n for n in consumers.get(weight, []) if n.op_type == op]
        if len(starts) != 1:
            raise ModelError(f"{onnx_path}: {weight} feeds {len(starts)} {op} nodes, expected 1")
        queue, seen = deque([(starts[0], 0)]), set()
        while queue:
            node, depth = queue.popleft()
            if id(node) in seen or depth > 6:
                continue
            seen.add(id(node))
            if node.op_type == "Add":
                named = [i for i in node.input if i in init and i.endswith(".bias")]
                if named:
                    return named[0]
            for o in node.output:
                queue.extend((c, depth + 1) for c in consumers.get(o, []))
        raise ModelError(f"{onnx_path}: no bias Add after the {op} of {weight}")

    def matmul_weight(weight: str, w: np.ndarray, op: str) -> None:
        target = torch_name(bias_after(weight, op)[: -len(".bias")] + ".weight")
        if target in out:
            # The exporter merges equal initializers (e.g. the zero biases of an untrained
            # model): then a bias no longer names one layer.
            raise ModelError(f"{onnx_path}: two MatMul weights lead to the bias of {target}")
        out[target] = np.ascontiguousarray(w.T)

    out: dict[str, np.ndarray] = {}
    blockwise = set()  # initializers of the 4-bit ops, read from their nodes below
    for node in g.node:
        if node.op_type not in ("MatMulNBits", "GatherBlockQuantized"):
            continue
        names = [i for i in node.input[:4] if i in init]
        blockwise.update(names)
        weight, scales = node.input[0 if node.op_type == "GatherBlockQuantized" else 1], node.input[2]
        zero_name = node.input[3] if len(node.input) > 3 else ""
        zero = init.get(zero_name) if zero_name else None
        if weight not in init or scales not in init:
            raise ModelError(f"{onnx_path}: {node.op_type} {node.name} has no constant weight")
        where = f"{onnx_path}: {node.op_type} {node.name}"
        if node.op_type == "MatMulNBits":
            matmul_weight(weight, _dequantize_nbits(init[weight], init[scales], zero, _attrs(node), where,
                                                    noise), "MatMulNBits")
        else:
            base = weight[: -len(_Q4)] if weight.endswith(_Q4) else weight
            out[torch_name(base)] = _dequantize_gather_blocks(init[weight], init[scales], zero,
                                                              _attrs(node), where, noise)
    for name, arr in init.items():
        if name in blockwise or name.endswith((_QUANT, "_scale", "_zero_point")) or arr.dtype != np.float32:
            continue
        if not name.startswith("onnx::"):
            out[torch_name(name)] = arr          # biases, LayerNorms, fp32 embedding tables
        elif arr.ndim == 2:
            matmul_weight(name, arr, "MatMul")   # an fp32 graph's MatMul weight [in, out]
    for name in init:
        if not name.endswith(_QUANT):
            continue
        base = name[: -len(_QUANT)]
        q, scale, zero = init[name], init[base + "_scale"], init[base + "_zero_point"]
        if not base.startswith("onnx::"):
            # A gathered table (embeddings) keeps its name, one scale per tensor.
            out[torch_name(base)] = _dequantize(q, scale, zero, noise)
        else:
            # A MatMul weight [in, out], one scale per output channel.
            matmul_weight(name, _dequantize(q, scale, zero, noise), "MatMulInteger")
    return out


def import_runtime_model(model_dir: str | Path, dest: str | Path, *, base_model: str = "",
                         dither: float = 0.0, seed: int = 0) -> Path:
    """Write the graph ``model_dir`` serves (``model.int8.onnx``, ``model.int4.onnx`` or
    ``model.onnx``, chosen as ``serve`` chooses) as a checkpoint folder; ``dither`` as in
    ``onnx_state_dict``."""
    import torch

    from engines.base import ArtifactError
    from engines.registry import resolve_artifact
    from streampunct.model import load_model_info
    from training.checkpoint import save_checkpoint
    from training.model import build_model, resolve_base_model

    model_dir = Path(model_dir)
    try:  # the graph the folder serves: streampunct.json's artifact, else the registry's defaults
        graph = resolve_artifact("onnxruntime", model_dir)
    except ArtifactError as e:
        raise InputError(f"{model_dir} has no model.onnx, model.int8.onnx or model.int4.onnx ({e})") from e
    info = load_model_info(model_dir)
    head = info.metadata.get("head", "linear")
    if head not in ("linear", None):
        raise InputError(f"only linear heads can be imported (this model has {head!r})")
    state = onnx_state_dict(graph, dither=dither, seed=seed)
    case_head = any(k.startswith("case_head.") for k in state)
    # Every parameter comes from the graph: only the base model's config is needed.
    model = build_model(resolve_base_model(base_model), case_head=case_head, random_init=True)
    expected = {k for k in model.state_dict() if not k.endswith("position_ids")}
    missing = sorted(expected - state.keys())
    extra = sorted(state.keys() - expected)
    if missing or extra:
        raise ModelError(f"{graph}: parameters missing {missing[:5]}, unexpected {extra[:5]}")
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()}, strict=False)
    meta = {"label_position": info.label_position,
            "max_word_tokens": info.max_word_tokens,
            "window": info.window.to_dict(),
            "base_model": info.metadata.get("base_model", ""),
            "imported_from": str(graph),
            "import_dither": dither,
            "name": f"imported:{model_dir.name}"}
    path = save_checkpoint(dest, model, info.aligner(), meta)
    log.info("wrote %s from %s (%d tensors)", path, graph, len(state))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.onnx_import", description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", help="runtime model folder (model.int8.onnx or model.int4.onnx + streampunct.json)")
    ap.add_argument("dest", help="checkpoint folder to write")
    ap.add_argument("--base-model", default="", help="encoder folder whose config the graph matches")
    ap.add_argument("--dither", type=float, default=0.0,
                    help="uniform noise of +-D quantization steps on each de-quantized weight (0-0.5; 0.5 "
                         "keeps a later export with the same quantization from rounding training away)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the dither noise")
    args = ap.parse_args(argv)
    return run_tool(lambda: import_runtime_model(args.model_dir, args.dest, base_model=args.base_model,
                                                 dither=args.dither, seed=args.seed))


if __name__ == "__main__":
    raise SystemExit(main())
