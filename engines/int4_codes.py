"""How much of one int4 graph is another: the share of identical 4-bit weight codes.

    python -m engines.int4_codes A.int4.onnx B.int4.onnx [--json OUT]

Compares the quantized tables (``MatMulNBits`` weights, ``GatherBlockQuantized``
embeddings) of two graphs of the same architecture, in graph order (the
tables' names may differ between exports). A model fine-tuned from an imported
int4 graph starts with every weight on that graph's 4-bit grid, and its own int4
export rounds back to the same code every weight that moved by less than half a
step: the GPU teacher of 2026-11-26 (3,042 steps, dev2010 76.76 in torch) came
back as 99.85% of ``models/base``'s codes and scored 73.17 against its 73.40
(docs/training.md, "Release 7"). Run this on any int4 export of such a model
before trusting it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from engines.base import GraphPrepError

QUANTIZED_OPS = {"MatMulNBits": 1, "GatherBlockQuantized": 0}  # op -> input index of its 4-bit table


def quantized_tables(path: str | Path) -> list[tuple[str, np.ndarray]]:
    """(op type, packed uint8 table) of every 4-bit table of the graph at ``path``, in node order."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    init = {i.name: i for i in model.graph.initializer}
    tables = []
    for node in model.graph.node:
        if node.op_type in QUANTIZED_OPS:
            name = node.input[QUANTIZED_OPS[node.op_type]]
            if name not in init:
                raise GraphPrepError(f"{path}: {node.op_type} node {node.name!r} has no stored table {name!r}")
            tables.append((node.op_type, numpy_helper.to_array(init[name]).view(np.uint8)))
    if not tables:
        raise GraphPrepError(f"{path}: no 4-bit tables (MatMulNBits / GatherBlockQuantized); is it an int4 graph?")
    return tables


def code_identity(a: str | Path, b: str | Path) -> dict:
    """The share of identical 4-bit codes of two int4 graphs, overall and per op type."""
    ta, tb = quantized_tables(a), quantized_tables(b)
    if len(ta) != len(tb):
        raise GraphPrepError(f"{a} has {len(ta)} quantized tables, {b} has {len(tb)}: not the same architecture")
    per_op: dict[str, list[int]] = {}
    for i, ((op_a, va), (op_b, vb)) in enumerate(zip(ta, tb)):
        if op_a != op_b or va.shape != vb.shape:
            raise GraphPrepError(f"table {i}: {op_a} {va.shape} against {op_b} {vb.shape}: not the same architecture")
        same = int(np.count_nonzero((va & 15) == (vb & 15)) + np.count_nonzero((va >> 4) == (vb >> 4)))
        counts = per_op.setdefault(op_a, [0, 0])
        counts[0] += same
        counts[1] += 2 * va.size
    same, total = (sum(c[i] for c in per_op.values()) for i in (0, 1))
    return {"a": str(a), "b": str(b), "tables": len(ta), "codes": total, "identical": same,
            "identical_share": same / total,
            "per_op": {op: {"codes": t, "identical_share": s / t} for op, (s, t) in per_op.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engines.int4_codes", description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        report = code_identity(args.a, args.b)
    except (GraphPrepError, FileNotFoundError) as e:
        parser.exit(2, f"error: {e}\n")
    print(f"{report['tables']} quantized tables; 4-bit codes identical: "
          f"{100 * report['identical_share']:.2f}% of {report['codes']:,}")
    for op, r in report["per_op"].items():
        print(f"  {op}: {100 * r['identical_share']:.2f}% of {r['codes']:,}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
