"""CPU-side precision work: ORT dynamic int8, the fp16 graph and the Q/DQ int8 graph.

The fp16 and Q/DQ graphs are meant for TensorRT, but they are plain ONNX:
here they run through ONNX Runtime on CPU and their labels are compared
with the fp32 graph.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from engines.base import GraphPrepError
from engines.build.onnx_graph import count_ops, load_model
from engines.build.parity import parity_on_windows
from engines.build.quantize import (
    REDUCED_RANGE,
    DynamicQuantOptions,
    Int4Options,
    quantize_int4_weights,
    quantize_int8_dynamic,
    reduce_weight_range,
)
from engines.ort_engine import OrtEngine, OrtOptions

onnx = pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def folder(tiny_export, tmp_path_factory):
    target = tmp_path_factory.mktemp("prep") / "model"
    shutil.copytree(tiny_export.path.parent, target)
    return target


def _engine(path):
    return OrtEngine(path, OrtOptions(intra_op_threads=1))


def test_dynamic_int8_quantizes_matmul_weights_only(folder, tiny_windows):
    sidecar = quantize_int8_dynamic(folder / "model.onnx", folder / "model.int8.onnx")
    assert sidecar.precision == "int8" and sidecar.backend == "onnxruntime"
    assert sidecar.parent["artifact"] == "model.onnx"
    assert sidecar.recipe["per_channel"] is True and sidecar.recipe["reduce_range"] is True
    ops = count_ops(load_model(folder / "model.int8.onnx"))
    # 2 layers x (q, k, v, attention output, 2 feed-forward) + the head = 13 weight MatMuls.
    assert ops["MatMulInteger"] == 13 == sidecar.recipe["int8_matmuls"]
    assert ops.get("MatMul", 0) == 4  # attention's QK^T and PV stay fp32
    report = parity_on_windows(
        _engine(folder / "model.onnx").infer, _engine(folder / "model.int8.onnx").infer, tiny_windows
    )
    assert report.label_agreement >= 0.99
    assert report.n_labels == len(tiny_windows.positions)


def test_dynamic_int8_rows_depend_on_the_batch_and_the_engine_says_so(folder):
    # Activation scales span the whole input tensor: a window's logits change when
    # another window (or padding) shares its call. The batcher runs such rows alone.
    if not (folder / "model.int8.onnx").exists():
        quantize_int8_dynamic(folder / "model.onnx", folder / "model.int8.onnx")
    fp32, int8 = _engine(folder / "model.onnx"), _engine(folder / "model.int8.onnx")
    assert fp32.rows_independent and not int8.rows_independent
    window = np.array([[2, 10, 11, 12, 3]], dtype=np.int64)
    other = np.array([[2, 40, 41, 42, 43, 44, 45, 46, 3]], dtype=np.int64)
    batch = np.zeros((2, 9), dtype=np.int64)
    mask = np.zeros((2, 9), dtype=np.int64)
    batch[0, :5], mask[0, :5] = window[0], 1
    batch[1], mask[1] = other[0], 1

    def changed(engine) -> float:
        alone = engine.infer(window, np.ones_like(window))[0]
        together = engine.infer(batch, mask)[0, :5]
        return float(np.abs(alone - together).max())

    assert changed(fp32) < 1e-4
    assert changed(int8) > 1e-4


def test_dynamic_int8_options_are_recorded(folder, tmp_path):
    out = folder / "model.pt.int8.onnx"
    sidecar = quantize_int8_dynamic(
        folder / "model.onnx", out, DynamicQuantOptions(per_channel=False, reduce_range=True)
    )
    assert (sidecar.recipe["per_channel"], sidecar.recipe["reduce_range"]) == (False, True)
    assert sidecar.recipe["op_types"] == ["MatMul"]
    out.unlink()


def _weights(path):
    from onnx import numpy_helper

    model = load_model(path)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    names = [n.input[1] for n in model.graph.node if n.op_type == "MatMulInteger"]
    return {n: (inits[n], inits[n.removesuffix("_quantized") + "_scale"]) for n in names}


def test_default_int8_weights_are_7_bit(folder, tmp_path):
    quantize_int8_dynamic(folder / "model.onnx", tmp_path / "model.int8.onnx")
    lo, hi = REDUCED_RANGE
    for q, _ in _weights(tmp_path / "model.int8.onnx").values():
        assert q.min() >= lo and q.max() <= hi


def test_an_8_bit_graph_is_reduced_to_7_bit_weights(folder, tiny_windows, tmp_path):
    full = tmp_path / "model.int8.onnx"
    quantize_int8_dynamic(folder / "model.onnx", full, DynamicQuantOptions(reduce_range=False))
    before = _weights(full)
    assert max(int(np.abs(q).max()) for q, _ in before.values()) == 127
    out = tmp_path / "model.r7.int8.onnx"
    sidecar = reduce_weight_range(full, out)
    after = _weights(out)
    lo, hi = REDUCED_RANGE
    assert set(after) == set(before) and sidecar.recipe["reduced_matmuls"] == len(before) == 13
    assert sidecar.recipe["reduce_range"] is True and sidecar.parent["artifact"] == "model.int8.onnx"
    for name, (q8, s8) in before.items():
        q7, s7 = after[name]
        assert q7.dtype == np.int8 and q7.min() >= lo and q7.max() <= hi
        # each column keeps its peak at the 7-bit edge, and the dequantized weights move
        # by at most half a new step
        np.testing.assert_allclose(s7, np.abs(q8 * s8).max(axis=0) / hi, rtol=1e-6)
        assert np.all(np.abs(q7 * s7 - q8 * s8) <= s7 / 2 + 1e-7)
    report = parity_on_windows(_engine(full).infer, _engine(out).infer, tiny_windows)
    assert report.label_agreement >= 0.99
    with pytest.raises(GraphPrepError, match="no 8-bit MatMulInteger weight"):
        reduce_weight_range(out, tmp_path / "again.onnx")
    with pytest.raises(GraphPrepError, match="not a dynamic int8 graph"):
        reduce_weight_range(folder / "model.onnx", tmp_path / "fp32.onnx")


def test_embeddings_can_be_quantized_too(folder, tiny_windows):
    out = folder / "model.emb.int8.onnx"
    sidecar = quantize_int8_dynamic(folder / "model.onnx", out, DynamicQuantOptions(quantize_embeddings=True))
    assert sidecar.recipe["op_types"] == ["MatMul", "Gather"]
    model = load_model(out)
    tables = {t.name: (t.data_type, list(t.dims)) for t in model.graph.initializer}
    # The word embedding table (100 x 32) is stored as 8-bit integers.
    assert tables["inner.encoder.embeddings.word_embeddings.weight_quantized"] == (
        onnx.TensorProto.UINT8, [100, 32])
    report = parity_on_windows(_engine(folder / "model.onnx").infer, _engine(out).infer, tiny_windows)
    assert report.label_agreement >= 0.99
    out.unlink()


def test_int4_stores_matmul_weights_and_embeddings_in_4_bit_blocks(folder, tiny_windows):
    out = folder / "model.int4.onnx"
    sidecar = quantize_int4_weights(folder / "model.onnx", out)
    assert sidecar.precision == "int4" and sidecar.parent["artifact"] == "model.onnx"
    assert sidecar.recipe["block_size"] == 32 and sidecar.recipe["accuracy_level"] == 4
    ops = count_ops(load_model(out))
    # the 13 weight MatMuls (attention's activation products stay fp32) and the embedding tables
    assert ops["MatMulNBits"] == 13 == sidecar.recipe["int4_matmuls"] and ops.get("MatMul", 0) == 4
    assert ops.get("GatherBlockQuantized", 0) == sidecar.recipe["int4_gathers"] >= 1
    assert out.stat().st_size < (folder / "model.onnx").stat().st_size / 2  # graph overhead of a tiny model
    fp32, int4 = _engine(folder / "model.onnx"), _engine(out)
    report = parity_on_windows(fp32.infer, int4.infer, tiny_windows)
    assert report.label_agreement >= 0.97 and report.max_rel_diff < 0.5
    plain = quantize_int4_weights(folder / "model.onnx", folder / "model.int4m.onnx",
                                  Int4Options(quantize_embeddings=False, accuracy_level=1))
    assert plain.recipe["op_types"] == ["MatMul"] and plain.recipe["int4_gathers"] == 0
    with pytest.raises(GraphPrepError, match="block_size"):
        Int4Options(block_size=24)
    with pytest.raises(GraphPrepError, match="needs an fp32 graph"):
        quantize_int4_weights(out, folder / "again.onnx")
    out.unlink()
    (folder / "model.int4m.onnx").unlink()


def test_quantizing_a_quantized_graph_is_refused(folder):
    with pytest.raises(GraphPrepError, match="needs an fp32 graph"):
        quantize_int8_dynamic(folder / "model.int8.onnx", folder / "again.onnx")


@pytest.fixture(scope="module")
def graph_prep():
    pytest.importorskip("modelopt.onnx.autocast", reason="needs nvidia-modelopt[onnx]")
    from engines.build import graph_prep

    return graph_prep


def test_fp16_graph_keeps_layernorm_softmax_in_fp32(folder, tiny_windows, graph_prep):
    feed = tiny_windows.calibration_feed(8)
    sidecar = graph_prep.prepare_fp16(folder / "model.onnx", folder / "model.fp16.onnx", feed)
    model = load_model(folder / "model.fp16.onnx")
    assert graph_prep.fp32_island_problems(model) == []
    types = graph_prep.tensor_types(model)
    islands = [n for n in model.graph.node if n.op_type in ("LayerNormalization", "Softmax")]
    assert len(islands) == 5 + 2  # 2 layers x 2 LayerNorms + embeddings LayerNorm; 2 Softmax
    assert all(types[n.output[0]] == onnx.TensorProto.FLOAT for n in islands)
    matmuls = [n for n in model.graph.node if n.op_type == "MatMul"]
    assert all(types[n.output[0]] == onnx.TensorProto.FLOAT16 for n in matmuls)
    assert sidecar.precision == "fp16"
    assert sidecar.recipe["node_output_types"]["float16"] > sidecar.recipe["node_output_types"]["float32"]
    # IO stays int64 in, float32 out.
    assert [(t.name, t.dtype) for t in sidecar.inputs] == [("input_ids", "int64"), ("attention_mask", "int64")]
    assert sidecar.outputs[0].dtype == "float32"
    report = parity_on_windows(
        _engine(folder / "model.onnx").infer, _engine(folder / "model.fp16.onnx").infer, tiny_windows
    )
    assert report.label_agreement >= 0.99
    assert report.max_rel_diff < 0.01


def test_qdq_graph_has_calibrated_qdq_nodes(folder, tiny_windows, graph_prep):
    feed = tiny_windows.calibration_feed(8)
    sidecar = graph_prep.prepare_int8_qdq(folder / "model.onnx", folder / "model.qdq.onnx", feed)
    model = load_model(folder / "model.qdq.onnx")
    ops = count_ops(model)
    assert ops["QuantizeLinear"] > 0 and ops["DequantizeLinear"] > 0
    assert sidecar.recipe["quantize_linear"] == ops["QuantizeLinear"]
    assert sidecar.recipe["calibration_windows"] == 8
    assert sidecar.precision == "int8"
    assert graph_prep.fp32_island_problems(model) == []
    # Every weight MatMul reads a dequantized (int8) weight.
    producers = {o: n for n in model.graph.node for o in n.output}
    weight_matmuls = [
        n for n in model.graph.node
        if n.op_type == "MatMul" and any(producers.get(i) is not None and producers[i].op_type == "DequantizeLinear" for i in n.input)
    ]
    assert len(weight_matmuls) >= 10  # 13 weight MatMuls less the 2 GELU-fed (+ maybe the head)
    # By default attention's activation MatMuls, the GELU-fed feed-forward
    # down-projections and the residual Adds stay unquantized.
    fp32_model = load_model(folder / "model.onnx")
    attention = set(graph_prep.activation_matmuls(fp32_model))
    gelu_fed = set(graph_prep.gelu_fed_matmuls(fp32_model))
    assert gelu_fed == {f"/inner/encoder/encoder/layer.{i}/output/dense/MatMul" for i in (0, 1)}
    assert len(attention) == 4 and sidecar.recipe["not_quantized_matmuls"] == 6
    assert not (attention | gelu_fed) & {n.name for n in weight_matmuls}
    assert sidecar.recipe["not_quantized_op_types"] == ["Add"]
    report = parity_on_windows(
        _engine(folder / "model.onnx").infer, _engine(folder / "model.qdq.onnx").infer, tiny_windows
    )
    assert report.label_agreement >= 0.97
    data = json.loads((folder / "model.qdq.onnx.json").read_text())
    assert data["recipe"]["not_quantized_op_types"] == ["Add"]
    assert data["parent"]["artifact"] == "model.onnx"


def test_fp32_island_check_catches_fp16_layernorm(graph_prep):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 4])
    scale = helper.make_tensor("scale", TensorProto.FLOAT16, [4], np.ones(4, np.float16).tolist())
    node = helper.make_node("LayerNormalization", ["x", "scale"], ["y"], name="ln", axis=-1)
    model = helper.make_model(
        helper.make_graph([node], "g", [x], [y], [scale]), opset_imports=[helper.make_opsetid("", 17)]
    )
    problems = graph_prep.fp32_island_problems(model)
    assert "LayerNormalization ln: 'x' is float16" in problems
    assert "LayerNormalization ln: 'y' is float16" in problems


def test_bad_calibration_data_is_refused(folder, graph_prep):
    with pytest.raises(GraphPrepError, match="must hold"):
        graph_prep.prepare_fp16(folder / "model.onnx", folder / "x.onnx", {"input_ids": np.ones((2, 4))})
    with pytest.raises(GraphPrepError, match=r"share one \[N, T\] shape"):
        graph_prep.prepare_int8_qdq(
            folder / "model.onnx", folder / "x.onnx",
            {"input_ids": np.ones((2, 4)), "attention_mask": np.ones((2, 5))},
        )
