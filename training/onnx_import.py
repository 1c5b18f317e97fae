"""A shipped int8 ONNX model back into a training checkpoint, to continue training it.

The release models keep only their int8 graph: the fp32 weights they were
exported from are not in the repository. This module reads the graph's
initializers, de-quantizes them (per-channel int8 MatMul weights, 8-bit
embedding tables) and maps them back to the encoder's parameter names by
following each ``MatMulInteger`` to the ``Add`` of its named bias. The result
is a checkpoint folder (``training.checkpoint`` layout) whose logits agree with
the int8 graph up to the quantisation of activations::

    python -m training.onnx_import models/default cache/default_fp32
    streampunct train --config ... --base-model cache/default_fp32 --set model.init_head=true
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

_PREFIX = "inner."
_QUANT = "_quantized"


def _dequantize(q: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """One scale per tensor, or per output channel (the last axis of a [in, out] weight)."""
    return (q.astype(np.float32) - zero.astype(np.float32)) * scale.astype(np.float32)


def onnx_state_dict(onnx_path: str | Path) -> dict[str, np.ndarray]:
    """``PunctuationModel`` parameter name -> fp32 array (torch layout) from an exported graph."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(onnx_path))
    g = model.graph
    init = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    consumers: dict[str, list] = {}
    for node in g.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def torch_name(name: str) -> str:
        return name[len(_PREFIX):] if name.startswith(_PREFIX) else name

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
    for name, arr in init.items():
        if name.endswith((_QUANT, "_scale", "_zero_point")) or arr.dtype != np.float32:
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
            out[torch_name(base)] = _dequantize(q, scale, zero)
        else:
            # A MatMul weight [in, out], one scale per output channel.
            matmul_weight(name, _dequantize(q, scale, zero), "MatMulInteger")
    return out


def import_runtime_model(model_dir: str | Path, dest: str | Path, *, base_model: str = "") -> Path:
    """Write ``model_dir``'s graph (``model.int8.onnx`` or ``model.onnx``) as a checkpoint folder."""
    import torch

    from streampunct.model import load_model_info
    from training.checkpoint import save_checkpoint
    from training.model import build_model, resolve_base_model

    model_dir = Path(model_dir)
    graphs = [model_dir / n for n in ("model.int8.onnx", "model.onnx") if (model_dir / n).is_file()]
    if not graphs:
        raise InputError(f"{model_dir} has no model.onnx or model.int8.onnx")
    info = load_model_info(model_dir)
    head = info.metadata.get("head", "linear")
    if head not in ("linear", None):
        raise InputError(f"only linear heads can be imported (this model has {head!r})")
    state = onnx_state_dict(graphs[0])
    case_head = any(k.startswith("case_head.") for k in state)
    # Every parameter comes from the graph: only the base model's config is needed.
    model = build_model(resolve_base_model(base_model), case_head=case_head, random_init=True)
    expected = {k for k in model.state_dict() if not k.endswith("position_ids")}
    missing = sorted(expected - state.keys())
    extra = sorted(state.keys() - expected)
    if missing or extra:
        raise ModelError(f"{graphs[0]}: parameters missing {missing[:5]}, unexpected {extra[:5]}")
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()}, strict=False)
    meta = {"label_position": info.label_position,
            "max_word_tokens": info.max_word_tokens,
            "window": info.window.to_dict(),
            "base_model": info.metadata.get("base_model", ""),
            "imported_from": str(graphs[0]),
            "name": f"imported:{model_dir.name}"}
    path = save_checkpoint(dest, model, info.aligner(), meta)
    log.info("wrote %s from %s (%d tensors)", path, graphs[0], len(state))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.onnx_import", description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", help="runtime model folder (model.int8.onnx + streampunct.json)")
    ap.add_argument("dest", help="checkpoint folder to write")
    ap.add_argument("--base-model", default="", help="encoder folder whose config the graph matches")
    args = ap.parse_args(argv)
    return run_tool(lambda: import_runtime_model(args.model_dir, args.dest, base_model=args.base_model))


if __name__ == "__main__":
    raise SystemExit(main())
