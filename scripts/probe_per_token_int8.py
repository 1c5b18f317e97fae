"""Probe (not used by the server): an int8 graph whose rows are independent by construction.

`build-engine`'s int8 graphs quantize each matrix product's input with one scale for the whole
engine call (DynamicQuantizeLinear), so a window's logits depend on the other windows and the
padding of its call (docs/server.md, "Batch rows"). This rewrites each DynamicQuantizeLinear as
per-token symmetric quantization (scale max|x| / 127 over the hidden axis, uint8 with zero
point 128) and applies the per-token scale in its own Mul after each product, since ONNX Runtime's
MatMulIntegerToFloat fusion (extended optimizations) takes the product's scale as one scalar and
gives wrong logits otherwise. Then it checks that rows are independent (a batch with padding
against each row alone) and times engine calls against the original graph, one thread.

    python scripts/probe_per_token_int8.py models/default build/per_token_probe \
        --json benchmarks/results/batch_rows_cache/per_token_probe.json
    python -m benchmarks.compare_models models/default build/per_token_probe --valid dev2010
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from engines.sidecar import sha256_file


def per_token(model: onnx.ModelProto) -> tuple[int, int]:
    g = model.graph
    consts = {"ptq_127": np.float32(127), "ptq_128": np.float32(128), "ptq_eps": np.float32(1e-8),
              "ptq_one": np.float32(1), "ptq_zp": np.uint8(128)}
    g.initializer.extend(numpy_helper.from_array(np.array(v), k) for k, v in consts.items())
    nodes, scales, k = [], set(), 0
    for n in g.node:
        if n.op_type != "DynamicQuantizeLinear":
            nodes.append(n)
            continue
        x, (q, s, zp), p = n.input[0], n.output, f"ptq{k}_"
        k += 1
        nodes += [helper.make_node("Abs", [x], [p + "abs"]),
                  helper.make_node("ReduceMax", [p + "abs"], [p + "max"], axes=[-1], keepdims=1),
                  helper.make_node("Max", [p + "max", "ptq_eps"], [p + "maxe"]),
                  helper.make_node("Div", [p + "maxe", "ptq_127"], [s]),
                  helper.make_node("Div", [x, s], [p + "xs"]),
                  helper.make_node("Round", [p + "xs"], [p + "r"]),
                  helper.make_node("Add", [p + "r", "ptq_128"], [p + "r128"]),
                  helper.make_node("Cast", [p + "r128"], [q], to=TensorProto.UINT8)]
        scales.add(s)
        for m in g.node:  # the zero point is the constant 128 now
            for i, name in enumerate(m.input):
                if name == zp:
                    m.input[i] = "ptq_zp"
    consumers: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    after, moved = {}, 0
    for n in nodes:  # Mul(x_scale, w_scale) -> Mul(1, w_scale); the product's Mul, then x_scale
        hit = [i for i, name in enumerate(n.input) if name in scales] if n.op_type == "Mul" else []
        if not hit:
            continue
        s = n.input[hit[0]]
        n.input[hit[0]] = "ptq_one"
        for m in consumers.get(n.output[0], []):
            out = m.output[0]
            m.output[0] = out + "_ptqpre"
            after[id(m)] = helper.make_node("Mul", [out + "_ptqpre", s], [out])
            moved += 1
    del g.node[:]
    for n in nodes:
        g.node.append(n)
        if id(n) in after:
            g.node.append(after[id(n)])
    onnx.checker.check_model(model)
    return k, moved


def session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def rows_alone_diff(s: ort.InferenceSession) -> float:
    """Largest |logit| difference between a padded batch of 4 windows and each window alone."""
    rng = np.random.default_rng(1)
    ids = rng.integers(1000, 20000, (4, 40)).astype(np.int64)
    lengths = [40, 25, 40, 10]
    mask = (np.arange(40)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    batch = s.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    worst = 0.0
    for r, n in enumerate(lengths):
        alone = s.run(None, {"input_ids": ids[r : r + 1, :n], "attention_mask": mask[r : r + 1, :n]})[0]
        worst = max(worst, float(np.abs(batch[r, :n] - alone[0]).max()))
    return worst


def ms_per_call(s: ort.InferenceSession, b: int, t: int, seconds: float = 1.0) -> float:
    ids = np.random.default_rng(0).integers(1000, 20000, (b, t)).astype(np.int64)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    best = float("inf")
    for _ in range(3):
        for _ in range(5):
            s.run(None, feed)
        t0, k = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            s.run(None, feed)
            k += 1
        best = min(best, (time.perf_counter() - t0) / k * 1000)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", type=Path, help="a model folder with a plain int8 graph (model.int8.onnx)")
    ap.add_argument("out", type=Path, help="a new model folder: the per-token graph, no streaming graph")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    src_graph = args.src / "model.int8.onnx"
    args.out.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "model.int8.onnx.json"):
        shutil.copy(args.src / f, args.out / f)
    meta = json.loads((args.src / "streampunct.json").read_text())
    meta.pop("stream_artifact", None)
    (args.out / "streampunct.json").write_text(json.dumps(meta, indent=2))
    model = onnx.load(str(src_graph))
    replaced, moved = per_token(model)
    graph = args.out / "model.int8.onnx"
    onnx.save(model, str(graph))
    side = json.loads((args.out / "model.int8.onnx.json").read_text())
    side["artifact_sha256"] = sha256_file(graph)
    side.setdefault("recipe", {})["per_token_probe"] = "scripts/probe_per_token_int8.py"
    (args.out / "model.int8.onnx.json").write_text(json.dumps(side, indent=2))
    old, new = session(src_graph), session(graph)
    report = {"src": str(src_graph), "replaced": replaced, "scales_moved": moved,
              "rows_alone_max_diff": {"per_tensor": rows_alone_diff(old), "per_token": rows_alone_diff(new)},
              "ms_per_call_1_thread": {}}
    for b, t in [(1, 30), (8, 30), (1, 126), (16, 40)]:
        a, p = ms_per_call(old, b, t), ms_per_call(new, b, t)
        report["ms_per_call_1_thread"][f"{b}x{t}"] = {"per_tensor": round(a, 2), "per_token": round(p, 2),
                                                     "ratio": round(p / a, 2)}
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
