"""How much of one quantized graph is another: the share of identical weight codes.

    python -m engines.build.weight_codes A.onnx B.onnx [--json OUT]

Compares the stored quantized tables of two graphs of the same architecture
and precision, paired by op and shape, in graph order within each (the tables'
names, and the order of the embeddings, may differ between exports: a plain and
a streaming graph); a model folder stands for the graph ONNX Runtime serves
from it:
int4 (``MatMulNBits`` weights, ``GatherBlockQuantized`` embeddings; two codes a
byte) or int8 (``MatMulInteger`` weights, quantized embedding tables).

A model fine-tuned from an imported quantized graph starts with every weight on
that graph's grid, and its own export rounds back to the same code every weight
that moved by less than half a step: a GPU teacher once came back as almost
all of ``models/base``'s 4-bit codes, and so scored as ``models/base`` did
(docs/history.md). Int8 steps are 16 times finer. Run this on the export of
any model trained from a quantized graph before trusting it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from engines.base import EngineError, GraphPrepError

# op -> (input index of its quantized table, bits a code)
QUANTIZED_OPS = {"MatMulNBits": (1, 4), "GatherBlockQuantized": (0, 4), "MatMulInteger": (1, 8), "Gather": (0, 8),
                 "DequantizeLinear": (0, 8), "MatMulIntegerToFloat": (1, 8)}
#: ops that store the same table: a graph with static activation scales (engines.build.static_scales)
#: holds its dynamic graph's MatMulInteger weights in MatMulIntegerToFloat nodes
SAME_TABLE = {"MatMulIntegerToFloat": "MatMulInteger"}


def quantized_tables(path: str | Path) -> list[tuple[str, int, np.ndarray]]:
    """(op type, bits, table) of every stored quantized weight table of the graph at ``path``,
    in node order (activations, quantized at run time, are not stored and not listed)."""
    import onnx
    from onnx import numpy_helper

    path = _graph_path(path)
    model = onnx.load(str(path))
    init = {i.name: i for i in model.graph.initializer}
    tables = []
    for node in model.graph.node:
        if node.op_type not in QUANTIZED_OPS:
            continue
        index, bits = QUANTIZED_OPS[node.op_type]
        name = node.input[index] if len(node.input) > index else ""
        if name not in init:
            if bits == 4:
                raise GraphPrepError(f"{path}: {node.op_type} node {node.name!r} has no stored table {name!r}")
            continue  # an int8 op on a run-time tensor (MatMulInteger's A side, say)
        table = numpy_helper.to_array(init[name])
        if bits == 8 and table.dtype not in (np.int8, np.uint8):
            continue
        tables.append((node.op_type, bits, table.view(np.uint8)))
    if not tables:
        raise GraphPrepError(f"{path}: no stored int4 or int8 weight tables; is it a quantized graph?")
    return tables


def _graph_path(path: str | Path) -> Path:
    """``path``, or the graph ONNX Runtime serves from a model folder (``streampunct.json``'s
    ``artifact``, else the default names); :class:`GraphPrepError` when neither is there."""
    path = Path(path)
    if path.is_dir():
        from engines.registry import resolve_artifact

        try:
            return resolve_artifact("onnxruntime", path)
        except EngineError as e:
            raise GraphPrepError(f"{path} is a folder, not a graph, and not a model folder: {e}") from None
    if not path.is_file():
        raise GraphPrepError(f"no graph at {path}")
    return path


def _identical_codes(bits: int, a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    if bits == 4:
        return int(np.count_nonzero((a & 15) == (b & 15)) + np.count_nonzero((a >> 4) == (b >> 4))), 2 * a.size
    return int(np.count_nonzero(a == b)), a.size


def _by_kind(tables: list[tuple[str, int, np.ndarray]]) -> dict[tuple[str, tuple[int, ...]], list[tuple[int, np.ndarray]]]:
    """Tables grouped by (op, shape) (ops that store the same table as one), each group in node order."""
    groups: dict[tuple[str, tuple[int, ...]], list[tuple[int, np.ndarray]]] = {}
    for op, bits, table in tables:
        groups.setdefault((SAME_TABLE.get(op, op), table.shape), []).append((bits, table))
    return groups


def code_identity(a: str | Path, b: str | Path) -> dict:
    """The share of identical weight codes of two quantized graphs, overall and per op type."""
    ta, tb = quantized_tables(a), quantized_tables(b)
    ga, gb = _by_kind(ta), _by_kind(tb)
    if {k: len(v) for k, v in ga.items()} != {k: len(v) for k, v in gb.items()}:
        def differing(x: dict, y: dict) -> str:
            return ", ".join(f"{len(v)} {op} {list(shape)}" for (op, shape), v in x.items()
                             if len(v) != len(y.get((op, shape), []))) or "none of them"

        raise GraphPrepError(f"{a} has {differing(ga, gb)} where {b} has {differing(gb, ga)}: not the same "
                             "architecture and precision")
    per_op: dict[str, list[int]] = {}
    for kind, tables in ga.items():
        for (bits, va), (_, vb) in zip(tables, gb[kind], strict=True):
            same, n = _identical_codes(bits, va, vb)
            counts = per_op.setdefault(kind[0], [0, 0])
            counts[0] += same
            counts[1] += n
    same, total = (sum(c[i] for c in per_op.values()) for i in (0, 1))
    return {"a": str(a), "b": str(b), "tables": len(ta), "codes": total, "identical": same,
            "identical_share": same / total,
            "per_op": {op: {"codes": t, "identical_share": s / t} for op, (s, t) in per_op.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engines.build.weight_codes", description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        report = code_identity(args.a, args.b)
    except (GraphPrepError, FileNotFoundError) as e:
        parser.exit(2, f"error: {e}\n")
    print(f"{report['tables']} quantized tables; weight codes identical: "
          f"{100 * report['identical_share']:.2f}% of {report['codes']:,}")
    for op, r in report["per_op"].items():
        print(f"  {op}: {100 * r['identical_share']:.2f}% of {r['codes']:,}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
