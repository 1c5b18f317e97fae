"""A model folder's ONNX graph back to torch weights and the encoder's configuration.

The shipped models keep only their quantized graphs: the fp32 weights they were
exported from are not in the repository. :func:`graph_state_dict` reads a
graph's initializers, de-quantizes them (per-channel int8 MatMul weights, 8-bit
embedding tables; 4-bit block-quantized ``MatMulNBits`` weights and
``GatherBlockQuantized`` embedding tables) and maps them back to the
``PunctuationModel`` parameter names by following each ``MatMulInteger`` /
``MatMulNBits`` to the ``Add`` of its named bias. :func:`encoder_config`
derives the Hugging Face configuration of the encoder (BERT / MiniLM or MPNet)
from the weights' shapes and the graph itself, so that nothing but the graph is
needed to rebuild the model.

Two users: the torch serving backend (:mod:`engines.torch_backend`) and
``python -m training.onnx_import``, which writes the weights as a training
checkpoint (and may dither them: ``dither`` below).

``dither`` D adds uniform noise of +-D quantization steps to every de-quantized
weight (training only; docs/training.md, "Release 7"): without it, every weight
sits on the graph's grid, and an export of a model trained from it with the same
quantization rounds back to the graph's code each weight that training moved
by less than half a step.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import ArtifactError, EngineError
from engines.deps import require

#: module prefixes of exported parameter names: the runtime graph's wrapper, the streaming graph's
_PREFIXES = ("inner.", "model.")
_QUANT = "_quantized"
_Q4 = "_Q4"  # suffix of MatMulNBitsQuantizer's packed tables
_POSITIONS = "encoder.embeddings.position_embeddings.weight"
_RELATIVE = "encoder.encoder.relative_attention_bias.weight"

Dither = tuple[float, np.random.Generator] | None


@dataclass(frozen=True)
class Int8Codes:
    """An int8 graph's ``MatMulInteger`` weight as stored: ``steps`` = code - zero point
    (float32, torch layout [out, in], whole numbers of at most 8 bits) and ``scale``
    (float32 [out], one per output channel); the weight is ``steps * scale[:, None]``."""

    steps: np.ndarray
    scale: np.ndarray


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _dither(shape: tuple, dither: Dither) -> np.ndarray | float:
    """Uniform noise of +-D steps in code units (``dither`` = (D, rng)), or 0."""
    if not dither:
        return 0.0
    amount, rng = dither
    return rng.uniform(-amount, amount, shape).astype(np.float32)


def _dequantize_nbits(packed: np.ndarray, scales: np.ndarray, zero: np.ndarray | None, attrs: dict,
                      where: str, dither: Dither = None) -> np.ndarray:
    """A ``MatMulNBits`` weight back to fp32 [K, N].

    ``packed`` is uint8 [N, K/block, block*bits/8], 4-bit values low nibble first; ``scales``
    one per (column, block); without zero points the 4-bit zero is 8 (the op's default).
    """
    bits, block, k, n = (int(attrs[a]) for a in ("bits", "block_size", "K", "N"))
    if bits != 4:
        raise ArtifactError(f"{where}: {bits}-bit MatMulNBits weights are not supported (4 only)")
    if zero is not None:
        raise ArtifactError(f"{where}: asymmetric MatMulNBits weights (zero points) are not supported")
    blocks = -(-k // block)
    flat = packed.reshape(n, blocks, block // 2)
    q = np.empty((n, blocks, block), dtype=np.float32)
    q[..., 0::2] = flat & 0x0F
    q[..., 1::2] = flat >> 4
    w = (q - 8.0 + _dither(q.shape, dither)) * scales.reshape(n, blocks, 1).astype(np.float32)
    return np.ascontiguousarray(w.reshape(n, blocks * block)[:, :k].T)


def _dequantize_gather_blocks(data: np.ndarray, scales: np.ndarray, zero: np.ndarray | None, attrs: dict,
                              where: str, dither: Dither = None) -> np.ndarray:
    """A ``GatherBlockQuantized`` table (int4 [rows, hidden], blocks along the hidden axis) to fp32."""
    block, axis = int(attrs.get("block_size", 128)), int(attrs.get("quantize_axis", 1))
    if data.ndim != 2 or axis not in (1, -1):
        raise ArtifactError(f"{where}: only 2-D tables quantized along their last axis are supported")
    if zero is not None:
        raise ArtifactError(f"{where}: asymmetric block-quantized tables (zero points) are not supported")
    per = np.repeat(scales.astype(np.float32), block, axis=1)[:, : data.shape[1]]
    return (data.astype(np.float32) + _dither(data.shape, dither)) * per


def _dequantize(q: np.ndarray, scale: np.ndarray, zero: np.ndarray, dither: Dither = None) -> np.ndarray:
    """One scale per tensor, or per output channel (the last axis of a [in, out] weight)."""
    return (q.astype(np.float32) - zero.astype(np.float32) + _dither(q.shape, dither)) * scale.astype(np.float32)


def load_graph(path: str | Path) -> Any:
    """The ONNX model at ``path`` (weights included); ArtifactError when it cannot be read."""
    onnx = require("onnx", feature="reading a model's weights from its graph")
    try:
        return onnx.load(str(path))
    except Exception as e:  # onnx raises protobuf's and its own unrelated types
        raise ArtifactError(f"cannot read the ONNX graph {path}: {e}") from e


def _torch_name(name: str) -> str:
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def graph_state_dict(graph: str | Path | Any, *, dither: float = 0.0, seed: int = 0,
                     where: str | None = None, codes: dict[str, Int8Codes] | None = None) -> dict[str, np.ndarray]:
    """``PunctuationModel`` parameter name -> fp32 array (torch layout) from an exported graph
    (a path, or an ONNX model already loaded: ``where`` then names it in errors);
    ``dither``: uniform noise of +-dither quantization steps on every de-quantized weight.
    ``codes``, when given, receives the integer codes of every ``MatMulInteger`` weight
    under the same name (:class:`Int8Codes`)."""
    from onnx import numpy_helper

    if not 0.0 <= dither <= 0.5:
        raise EngineError(f"dither must be between 0 and 0.5 quantization steps, got {dither}")
    if isinstance(graph, str | Path):
        where, model = where or str(graph), load_graph(graph)
    else:
        where, model = where or "the graph", graph
    noise = (dither, np.random.default_rng(seed)) if dither else None
    g = model.graph
    init = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    consumers: dict[str, list] = {}
    for node in g.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def bias_after(weight: str, op: str) -> str:
        """The named bias added to the product of ``weight`` (a MatMul's B input); an int8
        product with static activation scales (engines.build.static_scales) is one
        ``MatMulIntegerToFloat`` that takes its bias as its last input."""
        ops = (op, "MatMulIntegerToFloat") if op == "MatMulInteger" else (op,)
        starts = [n for n in consumers.get(weight, []) if n.op_type in ops]
        if len(starts) != 1:
            raise ArtifactError(f"{where}: {weight} feeds {len(starts)} {op} nodes, expected 1")
        queue, seen = deque([(starts[0], 0)]), set()
        while queue:
            node, depth = queue.popleft()
            if id(node) in seen or depth > 6:
                continue
            seen.add(id(node))
            if node.op_type == "MatMulIntegerToFloat" and len(node.input) > 6 and node.input[6] in init \
                    and node.input[6].endswith(".bias"):
                return node.input[6]
            if node.op_type == "Add":
                named = [i for i in node.input if i in init and i.endswith(".bias")]
                if named:
                    return named[0]
            for o in node.output:
                queue.extend((c, depth + 1) for c in consumers.get(o, []))
        raise ArtifactError(f"{where}: no bias Add after the {op} of {weight}")

    def matmul_weight(weight: str, w: np.ndarray, op: str) -> str:
        target = _torch_name(bias_after(weight, op)[: -len(".bias")] + ".weight")
        if target in out:
            # The exporter merges equal initializers (e.g. the zero biases of an untrained
            # model): then a bias no longer names one layer.
            raise ArtifactError(f"{where}: two MatMul weights lead to the bias of {target}")
        out[target] = np.ascontiguousarray(w.T)
        return target

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
            raise ArtifactError(f"{where}: {node.op_type} {node.name} has no constant weight")
        at = f"{where}: {node.op_type} {node.name}"
        if node.op_type == "MatMulNBits":
            matmul_weight(weight, _dequantize_nbits(init[weight], init[scales], zero, _attrs(node), at,
                                                    noise), "MatMulNBits")
        else:
            base = weight[: -len(_Q4)] if weight.endswith(_Q4) else weight
            out[_torch_name(base)] = _dequantize_gather_blocks(init[weight], init[scales], zero,
                                                               _attrs(node), at, noise)
    for name, arr in init.items():
        if name in blockwise or name.endswith((_QUANT, "_scale", "_zero_point")) or arr.dtype != np.float32:
            continue
        if not name.startswith("onnx::"):
            out[_torch_name(name)] = arr          # biases, LayerNorms, fp32 embedding tables
        elif arr.ndim == 2:
            matmul_weight(name, arr, "MatMul")   # an fp32 graph's MatMul weight [in, out]
    for name in init:
        if not name.endswith(_QUANT):
            continue
        base = name[: -len(_QUANT)]
        q, scale, zero = init[name], init[base + "_scale"], init[base + "_zero_point"]
        if not base.startswith("onnx::"):
            # A gathered table (embeddings) keeps its name, one scale per tensor.
            out[_torch_name(base)] = _dequantize(q, scale, zero, noise)
        else:
            # A MatMul weight [in, out], one scale per output channel.
            target = matmul_weight(name, _dequantize(q, scale, zero, noise), "MatMulInteger")
            if codes is not None:
                steps = q.astype(np.float32) - zero.astype(np.float32)
                codes[target] = Int8Codes(np.ascontiguousarray(steps.T),
                                          np.broadcast_to(scale.astype(np.float32), (q.shape[1],)).copy())
    return out


# -- the encoder's configuration, from the graph ------------------------------------------


def _constants(model) -> dict[str, np.ndarray]:
    """Initializers and Constant nodes' values by output name."""
    from onnx import numpy_helper

    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _scalar(value: np.ndarray | None) -> int | None:
    if value is None or value.size != 1:
        return None
    return int(value.reshape(()).item())


def _heads_from_graph(model, hidden: int, where: str) -> int:
    """Attention heads: the streaming graph's ``past_kv`` input [L, 2, B, heads, C, head_dim],
    else the head split every layer reshapes to ([B, T, heads or -1, head_dim])."""
    for value in model.graph.input:
        if value.name == "past_kv":
            dims = value.type.tensor_type.shape.dim
            if len(dims) == 6 and dims[3].HasField("dim_value") and dims[3].dim_value > 0:
                return int(dims[3].dim_value)
    consts = _constants(model)
    producer = {o: n for n in model.graph.node for o in n.output}
    found: Counter[int] = Counter()
    for node in model.graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2:
            continue
        shape = consts.get(node.input[1])
        if shape is not None:
            parts = [_scalar(np.asarray(v)) for v in shape.reshape(-1)]
        elif node.input[1] in producer and producer[node.input[1]].op_type == "Concat":
            parts = [_scalar(consts.get(i)) for i in producer[node.input[1]].input]
        else:
            continue
        if len(parts) != 4 or parts[3] is None or parts[3] <= 0 or hidden % parts[3] or parts[3] >= hidden:
            continue
        heads, head_dim = parts[2], parts[3]
        if heads in (-1, hidden // head_dim):
            found[hidden // head_dim] += 1
    if len(found) != 1:
        raise ArtifactError(f"{where}: cannot tell the attention heads from the graph "
                            f"(head splits seen: {dict(found) or 'none'})")
    return next(iter(found))


def _layer_norm_eps(model, where: str) -> float:
    from onnx import helper

    eps = set()
    for node in model.graph.node:
        if node.op_type == "LayerNormalization":
            eps.update(helper.get_attribute_value(a) for a in node.attribute if a.name == "epsilon")
    if len(eps) != 1:
        raise ArtifactError(f"{where}: expected LayerNormalization nodes with one epsilon, found {sorted(eps)}")
    # the attribute is a float32: 1e-12 reads back as 9.99999996e-13
    return float(np.format_float_positional(np.float32(eps.pop()), unique=True, trim="-"))


def _check_activation(model, where: str) -> None:
    """The encoders rebuilt here use exact (erf) GELU; refuse a graph that computes another."""
    ops = {n.op_type for n in model.graph.node}
    gelu = [n for n in model.graph.node if n.op_type == "Gelu"]
    if "Erf" in ops or (gelu and all(_attrs(n).get("approximate", "none") in ("none", b"none") for n in gelu)):
        return
    raise ArtifactError(f"{where}: the graph computes no exact GELU (no Erf node): only BERT- and "
                        "MPNet-family encoders with GELU activations can be rebuilt from a graph")


def _mpnet_padding_idx(model, where: str) -> int:
    """MPNet's padding index, from the position ids the graph gathers the position table with:
    the streaming graph adds ``padding_idx + 1`` to its ``position_ids`` input; Hugging Face's
    whole-window graph adds ``padding_idx`` to the cumulative count of real tokens."""
    consts = _constants(model)
    producer = {o: n for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        if node.op_type not in ("Gather", "GatherBlockQuantized"):
            continue
        table = node.input[0][: -len(_Q4)] if node.input[0].endswith(_Q4) else node.input[0]
        if _torch_name(table) != _POSITIONS:
            continue
        add = producer.get(node.input[1])
        if add is None or add.op_type != "Add":
            break
        offset = next((_scalar(consts[i]) for i in add.input if i in consts), None)
        other = next((i for i in add.input if i not in consts), None)
        if offset is None or other is None:
            break
        while other in producer and producer[other].op_type == "Cast":
            other = producer[other].input[0]
        return offset - 1 if other == "position_ids" else offset
    raise ArtifactError(f"{where}: cannot find how the graph offsets MPNet's positions (its padding index)")


def encoder_config(model, state: dict[str, np.ndarray], where: str = "the graph") -> dict[str, Any]:
    """The Hugging Face configuration (``transformers.AutoConfig.for_model`` keyword arguments,
    ``model_type`` included) of the encoder whose weights ``state`` holds, read from their
    shapes and from the graph ``model`` (heads, LayerNorm epsilon, activation, MPNet's
    padding index). BERT-layout encoders (MiniLM) and MPNet are supported."""
    try:
        vocab, hidden = state["encoder.embeddings.word_embeddings.weight"].shape
        positions = state[_POSITIONS].shape[0]
    except KeyError as e:
        raise ArtifactError(f"{where}: no encoder embeddings ({e.args[0]}) among the graph's weights") from None
    layers = {int(k.split(".")[3]) for k in state if k.startswith("encoder.encoder.layer.")}
    if not layers or layers != set(range(len(layers))):
        raise ArtifactError(f"{where}: encoder layers {sorted(layers)} are not 0..N-1")
    try:
        intermediate = state["encoder.encoder.layer.0.intermediate.dense.weight"].shape[0]
    except KeyError:
        raise ArtifactError(f"{where}: no intermediate (feed-forward) layer among the graph's weights") from None
    _check_activation(model, where)
    config: dict[str, Any] = {
        "vocab_size": int(vocab), "hidden_size": int(hidden), "num_hidden_layers": len(layers),
        "intermediate_size": int(intermediate), "max_position_embeddings": int(positions),
        "hidden_act": "gelu", "layer_norm_eps": _layer_norm_eps(model, where),
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
    }
    if _RELATIVE in state:
        buckets, heads = state[_RELATIVE].shape
        return {"model_type": "mpnet", **config, "num_attention_heads": int(heads),
                "relative_attention_num_buckets": int(buckets),
                "pad_token_id": _mpnet_padding_idx(model, where)}
    if "encoder.encoder.layer.0.attention.self.query.weight" not in state:
        raise ArtifactError(f"{where}: the encoder is neither BERT- nor MPNet-layout")
    types = state.get("encoder.embeddings.token_type_embeddings.weight")
    return {"model_type": "bert", **config, "num_attention_heads": _heads_from_graph(model, int(hidden), where),
            "type_vocab_size": int(types.shape[0]) if types is not None else 0}


def _built_from(folder: Path) -> dict[str, Any]:
    """``streampunct.json``'s ``built_from`` (the folder and graph a TensorRT folder's model was
    rebuilt from), or {}."""
    from engines.model_meta import has_model_meta, read_model_meta

    try:
        built = read_model_meta(folder).record.get("built_from") if has_model_meta(folder) else None
    except ArtifactError:
        return {}
    return dict(built) if isinstance(built, dict) else {}


def _not_rebuildable(path: Path) -> str | None:
    """Why the weights of the graph at ``path`` are not rebuilt (None: they may be), from its
    sidecar: a graph ``build-engine --backend tensorrt`` prepared for TensorRT (fp16, Q/DQ
    int8) or one emulating int8 activations (rounded to codes inside float32 layers)."""
    from engines.sidecar import read_sidecar, sidecar_path

    if not sidecar_path(path).is_file():
        return None
    sidecar = read_sidecar(path)
    recipe = sidecar.recipe or {}
    source = {**_built_from(path.parent), **(recipe.get("weights_from") or {})}
    origin = source.get("folder") or "the folder it was built from"
    if source.get("activations"):
        graph = f"{source['artifact']}, " if source.get("artifact") else ""
        return (f"{path} emulates int8 activations (codes rounded inside float32 layers, a graph built for "
                f"TensorRT): its weights are not rebuilt here; use {origin} ({graph}the graph it was built from) "
                "with --engine torch, or this folder with --engine tensorrt once its plan is built")
    prepared = sidecar.prepared_for_tensorrt()
    if prepared is not None:
        beside = path.with_name("model.onnx")
        use = f"the fp32 {beside.name} beside it" if beside.is_file() and beside != path else origin
        return (f"{path} is an {prepared} graph prepared for TensorRT: its weights are not "
                f"rebuilt here; use {use}")
    return None


def read_graph_weights(path: str | Path, codes: dict[str, Int8Codes] | None = None,
                       ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(state dict, encoder config) of the graph at ``path``: everything needed to rebuild it
    (``codes``: see :func:`graph_state_dict`). ArtifactError, saying what to use instead, for a
    graph prepared for TensorRT or emulating int8 activations (:func:`_not_rebuildable`)."""
    problem = _not_rebuildable(Path(path))
    if problem is not None:
        raise ArtifactError(problem)
    model = load_graph(path)
    state = graph_state_dict(model, where=str(path), codes=codes)
    return state, encoder_config(model, state, str(path))
