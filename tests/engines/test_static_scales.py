"""Static activation scales (engines.build.static_scales, training.static_scales): a dynamic int8
streaming graph whose rows batch exactly, calibrated on a live stream."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")

from engines.base import GraphPrepError  # noqa: E402
from engines.build.onnx_graph import count_ops, load_model  # noqa: E402
from engines.build.static_scales import (  # noqa: E402
    METHOD,
    ActivationRanges,
    has_static_scales,
    observation_graph,
    uint8_scale,
)
from engines.ort_engine import open_stream_engine  # noqa: E402
from engines.sidecar import read_sidecar  # noqa: E402
from streampunct.errors import InputError  # noqa: E402
from tests.engines.conftest import WORDS, tiny_two_head_model, write_tiny_tokenizer  # noqa: E402

META = {"labels": ["O", "COMMA", "PERIOD", "QUESTION"], "label_position": "last",
        "window": {"size": 30, "left": 6, "right": 4}, "head": "linear", "stream_cache_tokens": 12}


def _folder(path):
    """A model folder with a dynamic int8 whole-window graph and streaming graph of a tiny BERT
    with sharp attention (context matters) and no two equal parameters."""
    from transformers import BertConfig

    from engines.build.builder import BuildConfig, build_model_folder
    from engines.build.stream_graph import build_stream_artifact

    torch.set_num_threads(1)
    model = tiny_two_head_model(path.parent / (path.name + "_config"), BertConfig(
        vocab_size=120, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=160))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        for layer in model.encoder.encoder.layer:
            layer.attention.self.query.weight.mul_(20.0)
            layer.attention.self.key.weight.mul_(20.0)
    build_model_folder(model, path, config=BuildConfig(precision="int8"), model_metadata=dict(META))
    build_stream_artifact(model, path, source_sha256="test")
    write_tiny_tokenizer(path / "tokenizer.json")
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """(the dynamic folder, the same folder calibrated)."""
    import shutil

    from training.static_scales import calibrate

    dynamic = _folder(tmp_path_factory.mktemp("models") / "dynamic")
    static = dynamic.with_name("static")
    shutil.copytree(dynamic, static)
    words = [WORDS[i] for i in np.random.default_rng(0).integers(0, len(WORDS), 400)]
    calibrate(static, words, percentile=100.0, data_name="synthetic")
    return dynamic, static


def _stream_inputs(engine, rng, new_lengths, past):
    """A padded batch of cached windows (each row's new tokens, padded at the end, after ``past``
    cached tokens) and each row alone."""
    layers, heads, dim = engine.stream_shape
    b, t = len(new_lengths), max(new_lengths)
    ids = rng.integers(5, 90, (b, t)).astype(np.int64)
    mask = np.ones((b, past + t), np.int64)
    for k, n in enumerate(new_lengths):
        ids[k, n:] = 0
        mask[k, past + n:] = 0
    batch = {"input_ids": ids, "position_ids": np.tile(np.arange(past, past + t), (b, 1)).astype(np.int64),
             "attention_mask": mask,
             "past_kv": (rng.standard_normal((layers, 2, b, heads, past, dim)) * 0.5).astype(np.float16)}
    alone = []
    for k, n in enumerate(new_lengths):
        alone.append({"input_ids": ids[k:k + 1, :n], "position_ids": batch["position_ids"][k:k + 1, :n],
                      "attention_mask": mask[k:k + 1, :past + n], "past_kv": batch["past_kv"][:, :, k:k + 1]})
    return batch, alone


def _largest_row_difference(engine, rng):
    lengths = [1, 4, 6, 3]
    batch, alone = _stream_inputs(engine, rng, lengths, past=9)
    together, _ = engine.infer_stream(batch)
    diff = 0.0
    for k, (n, inputs) in enumerate(zip(lengths, alone, strict=True)):
        own, _ = engine.infer_stream(inputs)
        diff = max(diff, float(np.abs(together[k, :n] - own[0]).max()))
    return diff


def test_static_rows_batch_exactly_where_dynamic_rows_do_not(folders):
    dynamic, static = folders
    engines = {name: open_stream_engine(folder, {"intra_op_threads": 1}) for name, folder in
               (("dynamic", dynamic), ("static", static))}
    try:
        assert not engines["dynamic"].rows_independent and engines["static"].rows_independent
        diffs = {name: max(_largest_row_difference(e, np.random.default_rng(seed)) for seed in range(3))
                 for name, e in engines.items()}
        assert diffs["static"] == 0.0
        assert diffs["dynamic"] > 1e-4  # the scales span the batch: a row depends on the others
    finally:
        for e in engines.values():
            e.close()


def test_the_graph_keeps_its_weights_and_interface_and_records_its_calibration(folders):
    dynamic, static = folders
    meta = json.loads((static / "streampunct.json").read_text())
    graph = static / meta["stream_artifact"]
    ops, before = count_ops(load_model(graph)), count_ops(load_model(dynamic / meta["stream_artifact"]))
    assert "DynamicQuantizeLinear" not in ops and "MatMulInteger" not in ops
    assert ops["QuantizeLinear"] == before["DynamicQuantizeLinear"]
    assert ops["MatMulIntegerToFloat"] == before["MatMulInteger"]  # every product fused
    side, parent = read_sidecar(graph), read_sidecar(dynamic / meta["stream_artifact"])
    assert has_static_scales(side) and side.recipe["method"] == METHOD
    assert side.inputs == parent.inputs and side.outputs == parent.outputs
    assert side.parent["sha256"] == parent.artifact_sha256
    cal = side.recipe["calibration"]
    assert cal["data"] == "synthetic" and cal["words"] == 400 and cal["percentile"] == 100.0 and cal["calls"] > 50
    assert len(side.recipe["ranges"]) == ops["QuantizeLinear"]
    assert all(lo <= 0.0 <= hi and hi - lo > 0 for lo, hi in side.recipe["ranges"].values())
    assert sorted(p.name for p in static.iterdir()) == sorted(p.name for p in dynamic.iterdir())  # no leftovers


def test_live_labels_stay_close_to_the_dynamic_graphs(folders):
    from streampunct.core.options import SessionOptions
    from streampunct.evaluation.accuracy import live_schedule, schedule_labels
    from streampunct.model import load_model_info

    words = [WORDS[i] for i in np.random.default_rng(7).integers(0, len(WORDS), 300)]  # not the calibration's
    labels = {}
    for folder in folders:
        info = load_model_info(folder)
        engine = open_stream_engine(folder, {"intra_op_threads": 1})
        try:
            labels[folder.name] = schedule_labels(live_schedule(words, seed=3), info.aligner(), info.stream_window,
                                                  engine.infer, SessionOptions(), stream_engine=engine)
        finally:
            engine.close()
    assert len(labels["static"]) == len(words) and len(set(labels["dynamic"])) > 1
    assert np.mean(np.array(labels["static"]) == np.array(labels["dynamic"])) >= 0.95


def test_a_graph_with_static_scales_is_not_calibrated_again(folders, tmp_path):
    from training.static_scales import calibrate

    _, static = folders
    with pytest.raises(GraphPrepError, match="already has static activation scales"):
        calibrate(static, ["w1", "w2"])
    with pytest.raises(GraphPrepError, match="already has static activation scales"):
        observation_graph(static / "model.stream.int8.onnx", tmp_path / "x.onnx")
    with pytest.raises(InputError, match="not a model folder"):
        calibrate(tmp_path, ["w1"])


def test_the_command_refuses_bad_input_in_one_line(folders, tmp_path, capsys):
    from training.static_scales import main

    _, static = folders
    with pytest.raises(SystemExit) as e:
        main([str(static), "--data", str(tmp_path / "missing.tsv")])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().endswith(f"error: {tmp_path / 'missing.tsv'} is not a file")
    data = tmp_path / "words.tsv"
    data.write_text("w1\tO\nw2\tPERIOD\n")
    with pytest.raises(SystemExit) as e:
        main([str(static), "--data", str(data)])
    assert e.value.code == 2
    assert "already has static activation scales" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([str(static), "--data", str(data), "--percentile", "40"])
    assert e.value.code == 2 and "--percentile must be in (50, 100]" in capsys.readouterr().err


@pytest.mark.parametrize("seed", range(5))
def test_uint8_scale_is_dynamic_quantize_linears_for_the_tensors_range(seed):
    """Over a tensor's own min and max (with 0), the constant scale and zero point are those
    DynamicQuantizeLinear computes for it, so a calibration that saw the call's tensor gives it
    the dynamic graph's integers."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((3, 7)) * rng.uniform(0.1, 20) + rng.uniform(-5, 5)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7])],
                              [helper.make_tensor_value_info(n, t, None) for n, t in
                               (("y", TensorProto.UINT8), ("s", TensorProto.FLOAT), ("z", TensorProto.UINT8))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _, s, z = sess.run(None, {"x": x})
    scale, zero = uint8_scale(min(float(x.min()), 0.0), max(float(x.max()), 0.0))
    assert np.float32(s) == pytest.approx(scale, rel=1e-6) and int(z) == int(zero)


def test_ranges_are_percentiles_widened_to_zero():
    r = ActivationRanges(("a", "b"), samples_per_call=1000)
    r.observe([np.linspace(1.0, 3.0, 1000), np.linspace(-4.0, 2.0, 1000)])
    r.observe([np.array([[5.0]]), np.linspace(-4.0, 2.0, 10)])
    full = r.ranges(100.0)
    assert full == {"a": (0.0, 5.0), "b": (-4.0, 2.0)}  # a's range includes 0, as DynamicQuantizeLinear's
    clipped = r.ranges(99.0)
    assert clipped["a"][0] == 0.0 and 2.9 < clipped["a"][1] < 5.0
    assert -4.0 < clipped["b"][0] < -3.8 and 1.8 < clipped["b"][1] < 2.0
    with pytest.raises(ValueError, match="percentile"):
        r.ranges(40)
    with pytest.raises(GraphPrepError, match="no values of"):
        ActivationRanges(("c",)).ranges()
    with pytest.raises(GraphPrepError, match="non-finite"):
        ActivationRanges(("c",)).observe([np.array([np.nan])])


def test_the_weights_read_back_from_the_graph_are_the_dynamic_graphs(folders):
    """The torch backend and the TensorRT source graph read a folder's weights from its graph
    (engines.graph_weights): the fused products must give the same tensors, biases included."""
    from engines.graph_weights import graph_state_dict

    dynamic, static = folders
    before = graph_state_dict(dynamic / "model.stream.int8.onnx")
    after = graph_state_dict(static / "model.stream.int8.onnx")
    assert sorted(after) == sorted(before)
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value, err_msg=name)


def test_a_graph_that_fails_the_check_is_not_installed(folders, tmp_path, monkeypatch):
    import shutil

    import training.static_scales as ss
    from engines.sidecar import sha256_file

    dynamic, _ = folders
    folder = tmp_path / "copy"
    shutil.copytree(dynamic, folder)
    before = sha256_file(folder / "model.stream.int8.onnx")
    monkeypatch.setattr(ss, "MIN_AGREEMENT", 1.01)  # no graph can pass
    with pytest.raises(GraphPrepError, match=r"labels equal the dynamic graph's on .* \(at least 101% required\)"):
        ss.calibrate(folder, [WORDS[i % len(WORDS)] for i in range(120)])
    assert sha256_file(folder / "model.stream.int8.onnx") == before
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in dynamic.iterdir())  # no temp folder
    monkeypatch.setattr(ss, "MIN_AGREEMENT", 0.97)
    ss.calibrate(folder, [WORDS[i % len(WORDS)] for i in range(120)])
    cal = read_sidecar(folder / "model.stream.int8.onnx").recipe["calibration"]
    assert cal["check_words"] == 120 and 0.97 <= cal["check_label_agreement"] <= 1.0


def test_a_folder_it_cannot_write_is_one_line_and_status_2(folders, tmp_path, monkeypatch, capsys):
    import tempfile

    from training.static_scales import main

    dynamic, _ = folders
    data = tmp_path / "words.tsv"
    data.write_text("w1\tO\nw2\tPERIOD\n")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(dynamic))

    monkeypatch.setattr(tempfile, "TemporaryDirectory", refuse)
    with pytest.raises(SystemExit) as e:
        main([str(dynamic), "--data", str(data)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m training.static_scales: error: ") and "Permission denied" in err
    assert "\n" not in err


def test_only_a_bias_of_one_value_per_column_is_fused(tmp_path):
    """A constant added after a product that is not a bias (here [rows, columns]) stays an Add:
    MatMulIntegerToFloat takes one bias value per output column."""
    from onnx import TensorProto, helper, numpy_helper

    from engines.build.onnx_graph import io_specs
    from engines.build.quantize import DynamicQuantOptions, quantize_int8_dynamic
    from engines.build.static_scales import static_scale_graph
    from engines.sidecar import new_sidecar, write_sidecar

    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), n) for n in ("w1", "w2")]
    inits = [*w, numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "layer.bias"),
             numpy_helper.from_array(rng.standard_normal((5, 3)).astype(np.float32), "table")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["m1", "layer.bias"], ["y1"]),
             helper.make_node("MatMul", ["x", "w2"], ["m2"]), helper.make_node("Add", ["m2", "table"], ["y2"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 4])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [5, 3]) for n in ("y1", "y2")],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    fp32 = tmp_path / "m.onnx"
    import onnx

    onnx.save(model, fp32)
    inputs, outputs = io_specs(model)
    write_sidecar(new_sidecar(fp32, backend="onnxruntime", precision="fp32", inputs=inputs, outputs=outputs,
                              source_sha256="t"), fp32)
    int8 = tmp_path / "m.int8.onnx"
    import engines.build.quantize as q

    monkey = pytest.MonkeyPatch()
    monkey.setattr(q, "_checked_ops", lambda path, *a, **k: ({"MatMulInteger": 2}, io_specs(onnx.load(path))))
    try:
        quantize_int8_dynamic(fp32, int8, DynamicQuantOptions())
    finally:
        monkey.undo()
    x = rng.standard_normal((5, 4)).astype(np.float32)
    ranges = {n.input[0]: (min(float(x.min()), 0.0), max(float(x.max()), 0.0))
              for n in onnx.load(int8).graph.node if n.op_type == "DynamicQuantizeLinear"}
    static_scale_graph(int8, tmp_path / "m.static.onnx", ranges, {"data": "synthetic"})
    ops = count_ops(load_model(tmp_path / "m.static.onnx"))
    assert ops["MatMulIntegerToFloat"] == 2 and ops.get("Add") == 1  # the table's Add stays
    got = ort.InferenceSession(str(tmp_path / "m.static.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    ref = ort.InferenceSession(str(int8), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for a, b in zip(got, ref, strict=True):  # this call's own range: the dynamic graph's integers
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_tools_that_read_the_graph_take_it_for_what_it_is(folders, tmp_path):
    """weight_codes compares it with its dynamic graph; a Triton or TensorRT build from a folder
    serving it (as models/base serves its streaming graph) plans fp32 and does not emulate
    dynamic per-row scales."""
    import argparse
    import shutil

    from engines.build.triton_repo import _prepared_for_tensorrt, default_plan_precision
    from engines.build.weight_codes import code_identity
    from training.build_engine import _emulates_int8

    dynamic, static = folders
    same = code_identity(dynamic / "model.stream.int8.onnx", static / "model.stream.int8.onnx")
    assert same["identical_share"] == 1.0 and same["per_op"]["MatMulInteger"]["codes"] > 0
    side = read_sidecar(static / "model.stream.int8.onnx")
    assert not _prepared_for_tensorrt(side) and default_plan_precision(side) == "fp32"
    serving = tmp_path / "serving"
    shutil.copytree(static, serving)
    meta = json.loads((serving / "streampunct.json").read_text())
    (serving / "streampunct.json").write_text(json.dumps({**meta, "artifact": "model.stream.int8.onnx"}))
    assert _emulates_int8(serving, argparse.Namespace(int8_activations=None)) is False
    with pytest.raises(InputError, match="static activation scales, and the emulation is of dynamic"):
        _emulates_int8(serving, argparse.Namespace(int8_activations="emulate"))
    assert _emulates_int8(dynamic, argparse.Namespace(int8_activations=None)) is True


def test_replacing_removes_what_a_killed_run_left_and_keeps_the_graph_on_error(tmp_path):
    from engines.build.static_scales import replacing
    from engines.sidecar import sidecar_path

    graph = tmp_path / "model.stream.int8.onnx"
    graph.write_bytes(b"old graph")
    left = tmp_path / ".static-scales-killed"  # a SIGKILLed run's folder
    left.mkdir()
    (left / graph.name).write_bytes(b"half written")
    with pytest.raises(RuntimeError), replacing(graph) as out:
        assert not left.exists()
        out.write_bytes(b"new graph")
        raise RuntimeError("calibration failed")
    assert graph.read_bytes() == b"old graph"
    with replacing(graph) as out:
        out.write_bytes(b"new graph")
        sidecar_path(out).write_text("{}")
    assert graph.read_bytes() == b"new graph" and sidecar_path(graph).read_text() == "{}"
    assert not list(tmp_path.glob(".static-scales-*"))
