"""engines.build.weight_codes: the share of identical weight codes of two quantized graphs, and the reason it
exists: an int4 export of weights that sit within half a step of an int4 grid gives that grid's
codes back."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from engines.base import GraphPrepError
from engines.build.quantize import Int4Options, quantize_int4_weights, quantize_int8_dynamic
from engines.build.weight_codes import code_identity, main

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

from engines.graph_weights import _dequantize_nbits  # noqa: E402

NO_EMB = Int4Options(quantize_embeddings=False)


@pytest.fixture(scope="module")
def folder(tiny_export, tmp_path_factory):
    target = tmp_path_factory.mktemp("codes") / "model"
    shutil.copytree(tiny_export.path.parent, target)
    return target


def _matmul_weights(model):
    """The fp32 graph's weight initializers of its MatMul nodes, in node order."""
    init = {i.name: i for i in model.graph.initializer}
    return [init[n.input[1]] for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in init]


def _rewrite(src, dest_dir, new_weight):
    """A copy of the fp32 graph at ``src`` (as dest_dir/model.onnx, with its sidecar) with each
    MatMul weight replaced by new_weight(i, w)."""
    dest_dir.mkdir()
    dest = dest_dir / src.name
    model = onnx.load(str(src))
    for i, t in enumerate(_matmul_weights(model)):
        t.CopyFrom(numpy_helper.from_array(new_weight(i, numpy_helper.to_array(t)).astype(np.float32), t.name))
    onnx.save(model, str(dest))
    sidecar = src.with_name(src.name + ".json")
    if sidecar.exists():
        shutil.copy(sidecar, dest.with_name(dest.name + ".json"))
    return dest


def test_a_graph_against_itself_and_against_other_weights(folder):
    a = folder / "a.int4.onnx"
    quantize_int4_weights(folder / "model.onnx", a, NO_EMB)
    same = code_identity(a, a)
    assert same["identical_share"] == 1.0 and same["tables"] == 13 and set(same["per_op"]) == {"MatMulNBits"}
    rng = np.random.default_rng(0)
    other = _rewrite(folder / "model.onnx", folder / "other",
                     lambda i, w: w + rng.normal(0, 2 * float(np.abs(w).max()) / 7, w.shape))
    b = folder / "b.int4.onnx"
    quantize_int4_weights(other, b, NO_EMB)
    assert code_identity(a, b)["identical_share"] < 0.5


def test_weights_near_an_int4_grid_export_back_to_its_codes(folder):
    """The GPU teacher's case: start on A's grid (an imported int4 graph), move every weight by
    less than half a step, export int4 again: A's codes come back, the training is gone."""
    a = folder / "grid.int4.onnx"
    quantize_int4_weights(folder / "model.onnx", a, NO_EMB)
    qa = onnx.load(str(a))
    init = {i.name: numpy_helper.to_array(i) for i in qa.graph.initializer}
    grids = []
    for n in qa.graph.node:
        if n.op_type == "MatMulNBits":
            attrs = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
            scales = init[n.input[2]]
            block = int(attrs["block_size"])
            step = np.repeat(scales.reshape(int(attrs["N"]), -1), block, axis=1)[:, : int(attrs["K"])].T
            grids.append((_dequantize_nbits(init[n.input[1]], scales, None, attrs, n.name), step))
    rng = np.random.default_rng(1)
    # each weight moved by up to 0.3 of its step, the block maxima kept (the scales stay)
    def moved(i, w):
        g, step = grids[i]
        assert g.shape == w.shape
        delta = rng.uniform(-0.3, 0.3, g.shape) * step
        keep = np.abs(g) >= 7 * step - 1e-6
        return g + np.where(keep, 0, delta)
    tuned = _rewrite(folder / "model.onnx", folder / "tuned", moved)
    b = folder / "tuned.int4.onnx"
    quantize_int4_weights(tuned, b, NO_EMB)
    assert code_identity(a, b)["identical_share"] > 0.99


def test_errors_and_the_command_line(folder, tmp_path, capsys):
    a = folder / "cli.int4.onnx"
    quantize_int4_weights(folder / "model.onnx", a, NO_EMB)
    with pytest.raises(GraphPrepError, match="no stored int4 or int8 weight tables"):
        code_identity(a, folder / "model.onnx")
    i8 = folder / "cli.int8.onnx"
    quantize_int8_dynamic(folder / "model.onnx", i8)
    with pytest.raises(GraphPrepError, match="not the same architecture"):
        code_identity(a, i8)
    out = tmp_path / "r.json"
    assert main([str(a), str(a), "--json", str(out)]) == 0
    assert "weight codes identical: 100.00%" in capsys.readouterr().out
    assert out.read_text().count('"identical_share": 1.0') == 2
    with pytest.raises(SystemExit) as e:
        main([str(a), str(folder / "model.onnx")])
    assert e.value.code == 2
    assert "is it a quantized graph?" in capsys.readouterr().err


def test_int8_graphs_compare_byte_codes(folder):
    a = folder / "a.int8.onnx"
    quantize_int8_dynamic(folder / "model.onnx", a)
    same = code_identity(a, a)
    assert same["identical_share"] == 1.0 and "MatMulInteger" in same["per_op"]
    assert same["per_op"]["MatMulInteger"]["codes"] > 0
    rng = np.random.default_rng(2)
    other = _rewrite(folder / "model.onnx", folder / "other8",
                     lambda i, w: w + rng.normal(0, float(np.abs(w).max()) / 8, w.shape))
    b = folder / "b.int8.onnx"
    quantize_int8_dynamic(other, b)
    assert code_identity(a, b)["per_op"]["MatMulInteger"]["identical_share"] < 0.3


def test_tables_pair_by_op_and_shape_whatever_the_embeddings_order(folder, tmp_path):
    """A plain and a streaming graph of one int4 folder with quantized embeddings store their
    embedding tables in different node orders (word, position, type against type first): they
    pair by op and shape, not by position."""
    a = folder / "emb.int4.onnx"
    quantize_int4_weights(folder / "model.onnx", a, Int4Options(quantize_embeddings=True))
    model = onnx.load(str(a))
    nodes = list(model.graph.node)
    gathers = [k for k, n in enumerate(nodes) if n.op_type == "GatherBlockQuantized"]
    shapes = {k: tuple(i.dims) for k in gathers for i in model.graph.initializer if i.name == nodes[k].input[0]}
    assert len(gathers) >= 2 and len(set(shapes.values())) >= 2
    first, last = gathers[0], gathers[-1]
    nodes[first], nodes[last] = nodes[last], nodes[first]  # both read graph inputs: still in topological order
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    b = tmp_path / "reordered.int4.onnx"
    onnx.save(model, str(b))
    same = code_identity(a, b)
    assert same["identical_share"] == 1.0 and "GatherBlockQuantized" in same["per_op"]


def test_a_folder_stands_for_its_graph_and_a_plain_folder_is_refused(folder, tmp_path, capsys):
    """`weight_codes OLD NEW` with model folders, as the docs write it: each folder's default graph
    (here an fp32 one: refused for that, not with a traceback)."""
    with pytest.raises(GraphPrepError, match=r"model\.onnx: no stored int4 or int8 weight tables"):
        code_identity(folder, folder)
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path), str(folder)])
    assert e.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path} is a folder, not a graph, and not a model folder")
