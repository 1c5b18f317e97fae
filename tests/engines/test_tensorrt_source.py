"""TensorRT from the shipped model folders: ``build-engine --backend tensorrt --model models/X``.

The shipped folders have no checkpoint: the model is rebuilt from the folder's own
quantized graph (weights de-quantized, engines.build.from_graph) and exported as the
whole-window graph TensorRT takes. Without TensorRT the command stops before the
builder with ``--graph-only``; the graph it writes is run here in ONNX Runtime through
the offline decoder on every word of test2011 (a parity check, not tuning) and its
labels compared with the shipped graph's: punctuation, and case classes (the truecasing
head, with the folder's case margin).

models/default's int8 graph becomes a float32 graph that emulates its activation
quantization row by row, compared with the shipped graph run one window a call (as the
server runs it). models/base's 4-bit graph becomes the fp16 graph (what TensorRT builds by
default), which needs validation text for modelopt's calibration (dev2012 under
$STREAMPUNCT_DATA or ../shared/data); without it the test checks its fp32 graph.

models/base (MPNet, 69 MB of 4-bit weights) takes several minutes on 2 CPU cores:
it runs with STREAMPUNCT_LONG_TESTS=1.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from engines.base import ArtifactError  # noqa: E402
from engines.sidecar import read_sidecar  # noqa: E402

from .conftest import DEV2012, REPO  # noqa: E402

TEST2011 = REPO / "data" / "iwslt2011" / "test2011"
LONG = os.environ.get("STREAMPUNCT_LONG_TESTS") == "1"

#: Labels of the derived graph equal to the shipped graph's on at least this share of words.
#: models/default's int8 graph quantizes activations with scales over its whole batch, so
#: its labels move with the batching (batch 1 against batch 32: 99.33% of test2011 words):
#: it is run as the server runs it, one window a call, where its labels depend on the
#: window alone (docs/engines.md, "TensorRT from a shipped model folder").
ACCEPTANCE = 0.995


def _graph_folder(model: str, out, capsys) -> tuple:
    """``build-engine --backend tensorrt --graph-only`` from a shipped folder: (folder, printed)."""
    from streampunct.cli import main

    args = ["build-engine", "--backend", "tensorrt", "--model", str(REPO / "models" / model),
            "--out", str(out), "--graph-only"]
    if DEV2012.is_file():
        args += ["--parity-data", str(DEV2012), "--parity-lines", "300", "--calibration-windows", "16"]
    elif model != "default":
        args += ["--precision", "fp32"]  # no calibration text for the fp16 graph
    assert main(args) == 0
    return out, capsys.readouterr().out


def _labels(folder, artifact=None, batch_size=32):
    """Labels and case classes of every test2011 word, decoded as ``punctuate`` does
    (``batch_size`` windows a call)."""
    from engines.registry import load_engine
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.model import load_model_info
    from streampunct.text.word_labels import read_word_labels

    info = load_model_info(folder)
    engine = load_engine("onnxruntime", folder, artifact=artifact)
    decoder = OfflineDecoder(engine, info.aligner(), info.window, info=info, batch_size=batch_size)
    try:
        labels, cases = decoder.labels_and_cases(read_word_labels(TEST2011).words)
    finally:
        decoder.close()
    return np.asarray(labels), np.asarray(cases), engine.path.name


def _check_folder(model: str, folder, printed: str) -> str:
    """The derived folder: the graph TensorRT takes as its artifact, what it came from."""
    shipped = REPO / "models" / model
    meta = json.loads((folder / "streampunct.json").read_text())
    graph = read_sidecar(folder / meta["artifact"])
    source = meta["built_from"]
    shipped_meta = json.loads((shipped / "streampunct.json").read_text())
    assert source["artifact"] == shipped_meta["artifact"] and source["method"].startswith("engines.graph_weights")
    assert "stream_artifact" not in meta and meta["window"] == shipped_meta["window"]
    assert meta["case_margin"] == shipped_meta["case_margin"]
    assert [o.name for o in graph.outputs] == ["logits", "case_logits"]
    assert [i.name for i in graph.inputs] == ["input_ids", "attention_mask"]
    # the checkpoint the shipped graph was built from names the derived graph too
    assert graph.source_sha256 == read_sidecar(shipped / shipped_meta["artifact"]).source_sha256
    assert read_sidecar(folder / "model.onnx").recipe["weights_from"]["sha256"] == source["sha256"]
    # models/default's int8 activations are emulated in a float32 graph; base's 4-bit graph becomes fp16
    assert graph.precision == ("fp16" if DEV2012.is_file() and model != "default" else "fp32")
    assert "stopped before the TensorRT builder (--graph-only)" in printed
    if DEV2012.is_file():
        assert f"{meta['artifact']:<20} vs {shipped_meta['artifact']} (the source graph, ORT)" in printed
        assert graph.parity["source_graph"] == shipped_meta["artifact"]
    return meta["artifact"]


def _agreement(model: str, folder, artifact: str, shipped_batch: int = 32) -> tuple[float, float, int]:
    want_labels, want_cases, shipped = _labels(REPO / "models" / model, batch_size=shipped_batch)
    got_labels, got_cases, used = _labels(folder)
    assert used == artifact
    assert len(got_labels) == len(want_labels) > 12000
    punct, case = float(np.mean(got_labels == want_labels)), float(np.mean(got_cases == want_cases))
    print(f"{model}: {artifact} vs {shipped} ({shipped_batch} windows a call) on {len(want_labels)} test2011 "
          f"words: punctuation {100 * punct:.2f}%, case {100 * case:.2f}%")
    return punct, case, len(want_labels)


@pytest.mark.slow
@pytest.mark.skipif(not (REPO / "models" / "default" / "model.int8.onnx").is_file(), reason="no models/default")
def test_the_default_model_becomes_the_graph_tensorrt_takes(tmp_path, capsys):
    started = time.perf_counter()
    folder, printed = _graph_folder("default", tmp_path / "trt", capsys)
    artifact = _check_folder("default", folder, printed)
    punct, case, _ = _agreement("default", folder, artifact, shipped_batch=1)
    assert punct >= ACCEPTANCE and case >= ACCEPTANCE
    assert time.perf_counter() - started < 240  # about 60 s on 2 loaded cores


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="models/base takes ~10 minutes on 2 CPU cores: STREAMPUNCT_LONG_TESTS=1")
@pytest.mark.skipif(not (REPO / "models" / "base" / "model.stream.int4.onnx").is_file(), reason="no models/base")
def test_the_base_model_becomes_the_graph_tensorrt_takes(tmp_path, capsys):
    folder, printed = _graph_folder("base", tmp_path / "trt", capsys)
    artifact = _check_folder("base", folder, printed)
    punct, case, _ = _agreement("base", folder, artifact)
    assert punct >= ACCEPTANCE and case >= ACCEPTANCE


def test_a_derived_graph_is_not_a_source(tmp_path):
    """The weights come from an fp32, int8 or int4 graph, not from a derived fp16 one."""
    from engines.build.from_graph import source_graph

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "streampunct.json").write_text(json.dumps({"artifact": "model.fp16.onnx", "labels": ["O"]}))
    (folder / "model.fp16.onnx").write_bytes(b"graph")
    (folder / "model.fp16.onnx.json").write_text(json.dumps({
        "format_version": 2, "artifact": "model.fp16.onnx", "backend": "onnxruntime", "precision": "fp16",
        "inputs": [], "outputs": [], "source_sha256": "", "artifact_sha256": ""}))
    with pytest.raises(ArtifactError, match="is an fp16 onnxruntime graph: the weights are rebuilt from an fp32, int8 or int4"):
        source_graph(folder)


# -- the command on a tiny folder (seconds) ------------------------------------------------


@pytest.fixture(scope="module")
def tiny_int8_folder(tmp_path_factory):
    """A built int8 folder (dynamic int8, case head) of a tiny BERT, as models/default is built."""
    import torch
    from transformers import BertConfig

    from engines.build.builder import BuildConfig, build_model_folder

    from .conftest import METADATA, tiny_two_head_model, write_tiny_tokenizer

    root = tmp_path_factory.mktemp("tiny_int8")
    model = tiny_two_head_model(root / "cfg", BertConfig(
        vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=160))
    with torch.no_grad():  # no two equal initializers (the exporter would merge zero biases)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    tokenizer = write_tiny_tokenizer(root / "tokenizer.json")
    folder = root / "model"
    build_model_folder(model, folder, config=BuildConfig(precision="int8"),
                       model_metadata={**METADATA, "case_margin": 0.5}, copy_files={"tokenizer.json": tokenizer})
    return folder


def test_a_built_folder_becomes_a_tensorrt_graph_folder(tiny_int8_folder, tmp_path, capsys):
    from streampunct.cli import main

    from .conftest import write_word_labels

    words = write_word_labels(tmp_path / "dev.tsv", n_words=300)
    out = tmp_path / "trt"
    assert main(["build-engine", "--backend", "tensorrt", "--model", str(tiny_int8_folder),
                 "--out", str(out), "--graph-only", "--parity-data", str(words)]) == 0
    printed = capsys.readouterr().out
    # an int8 folder: its activation quantization emulated, in a float32 graph (the default precision)
    assert f"rebuilt the model from {tiny_int8_folder}/model.int8.onnx (int8, weights de-quantized, int8 " \
           "activations emulated per row in 14 layers; bert encoder, with case head)" in printed
    assert f"built tensorrt fp32 graph for {tiny_int8_folder}" in printed
    assert "model.onnx           vs model.int8.onnx (the source graph, ORT): label agreement" in printed
    assert "(it ran one window a call)" in printed
    meta = json.loads((out / "streampunct.json").read_text())
    assert meta["artifact"] == "model.onnx" and meta["case_margin"] == 0.5
    assert meta["built_from"]["artifact"] == "model.int8.onnx" and meta["built_from"]["precision"] == "int8"
    assert meta["built_from"]["activations"].startswith("uint8 per row, emulated in float32 in 14 linear layers")
    sidecar = read_sidecar(out / "model.onnx")
    assert [o.name for o in sidecar.outputs] == ["logits", "case_logits"]
    assert sidecar.source_sha256 == read_sidecar(tiny_int8_folder / "model.int8.onnx").source_sha256
    assert sidecar.parity["label_agreement"] >= 0.99  # vs the rebuilt torch module (codes may round apart)
    assert sidecar.parity["label_agreement_vs_source_graph"] >= 0.95
    assert sidecar.parity["source_graph_windows_a_call"] == 1
    assert not list(out.glob("*.plan"))


def test_float_activations_give_the_plain_float_model(tiny_int8_folder, tmp_path, capsys):
    from streampunct.cli import main

    out = tmp_path / "trt"
    assert main(["build-engine", "--backend", "tensorrt", "--model", str(tiny_int8_folder), "--out", str(out),
                 "--graph-only", "--int8-activations", "float", "--precision", "fp32"]) == 0
    printed = capsys.readouterr().out
    assert "(int8, weights de-quantized; bert encoder, with case head)" in printed
    assert "activations" not in json.loads((out / "streampunct.json").read_text())["built_from"]
    assert read_sidecar(out / "model.onnx").parity["label_agreement"] == 1.0  # continuous: no code to round


def test_emulated_activations_need_a_float32_graph(tiny_int8_folder, tmp_path, capsys):
    from streampunct.cli import main

    assert main(["build-engine", "--backend", "tensorrt", "--model", str(tiny_int8_folder),
                 "--out", str(tmp_path / "o"), "--graph-only", "--precision", "fp16"]) == 2
    err = capsys.readouterr().err
    assert "--precision fp16 with emulated int8 activations: the emulated graph is float32" in err
    assert "pass --int8-activations float for an fp16 plan" in err
    assert not (tmp_path / "o").exists()


def test_an_emulated_int8_layer_computes_what_onnx_runtime_computes():
    """One linear layer of a dynamic int8 graph (DynamicQuantizeLinear, MatMulInteger with
    per-channel weight codes, scales, bias) in ONNX Runtime and :func:`row_int8_linear`: the
    same logits up to float rounding of the scales, for rows whose ranges straddle zero or
    not; and a row padded in a batch gives what it gives alone, whatever the padding holds."""
    import onnxruntime as ort
    import torch
    from onnx import TensorProto, helper, numpy_helper

    from engines.build.from_graph import RowMask, row_int8_linear

    rng = np.random.default_rng(7)
    c_in, c_out, tokens = 24, 5, 11
    codes = rng.integers(-63, 64, size=(c_in, c_out)).astype(np.int8)  # 7-bit, as models/default
    zero = np.zeros(c_out, dtype=np.int8)
    scale = rng.uniform(0.001, 0.02, size=c_out).astype(np.float32)
    bias = rng.normal(size=c_out).astype(np.float32)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
        helper.make_node("MatMulInteger", ["q", "w", "z", "wz"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["s", "ws"], ["both"]),
        helper.make_node("Mul", ["accf", "both"], ["scaled"]),
        helper.make_node("Add", ["scaled", "b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "int8_linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, c_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, c_out])],
        [numpy_helper.from_array(codes, "w"), numpy_helper.from_array(zero, "wz"),
         numpy_helper.from_array(scale, "ws"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

    linear = torch.nn.Linear(c_in, c_out)
    with torch.no_grad():
        linear.bias.copy_(torch.from_numpy(bias))
    rows = RowMask()
    layer = row_int8_linear(linear, (codes.astype(np.float32) - zero).T, scale, rows)
    for shift in (0.0, 3.0, -3.0):  # the range straddles zero, or lies above or below it
        x = (rng.normal(size=(1, tokens, c_in)) * 2 + shift).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        rows.use(torch.ones(1, tokens, dtype=torch.int64))
        with torch.no_grad():
            got = layer(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    # padded into a batch beside a longer row, with padding far outside the row's range
    short = x[:, :6]
    batch = np.concatenate([x, np.concatenate([short, np.full((1, tokens - 6, c_in), 50.0, np.float32)], 1)])
    rows.use(torch.tensor([[1] * tokens, [1] * 6 + [0] * (tokens - 6)]))
    with torch.no_grad():
        together = layer(torch.from_numpy(batch)).numpy()
        rows.use(torch.ones(1, 6, dtype=torch.int64))
        alone = layer(torch.from_numpy(short)).numpy()
    np.testing.assert_array_equal(together[1, :6], alone[0])


def test_without_tensorrt_the_build_is_refused_before_the_export(tiny_int8_folder, tmp_path, capsys,
                                                                  monkeypatch):
    import sys

    from streampunct.cli import main

    monkeypatch.setitem(sys.modules, "tensorrt", None)  # as on a host without TensorRT
    out = tmp_path / "trt"
    rc = main(["build-engine", "--backend", "tensorrt", "--precision", "fp32", "--model", str(tiny_int8_folder),
               "--out", str(out)])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert "--backend tensorrt builds a plan with tensorrt" in err and "not installed here" in err
    assert "--graph-only stops before the builder" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_without_tensorrt_a_failing_builder_names_the_graphs_written(tiny_int8_folder, tmp_path, capsys,
                                                                     monkeypatch):
    """The packages look installed but the builder cannot import them: the graphs before it stay."""
    import sys

    from engines import registry
    from streampunct.cli import main

    monkeypatch.setattr(registry, "is_installed", lambda m: True)
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    out = tmp_path / "trt"
    rc = main(["build-engine", "--backend", "tensorrt", "--precision", "fp32", "--model", str(tiny_int8_folder),
               "--out", str(out)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "building TensorRT engines needs the Python package 'tensorrt'" in err
    assert f"The graphs before the builder are in {out} (model.onnx); --graph-only stops there" in err
    assert (out / "model.onnx").is_file() and not list(out.glob("*.plan"))


def test_graph_only_with_a_triton_repository_builds_the_folder_first(tiny_int8_folder, tmp_path, capsys):
    """``--out`` with ``--triton-repo``: the folder is built, then the repository written from it
    (not from --model), its TensorRT entry waiting for build-engine's default plan."""
    from google.protobuf import text_format

    tritonclient = pytest.importorskip("tritonclient.grpc.model_config_pb2")
    from streampunct.cli import main

    out, repo = tmp_path / "trt", tmp_path / "repo"
    assert main(["build-engine", "--backend", "tensorrt", "--model", str(tiny_int8_folder), "--out", str(out),
                 "--graph-only", "--triton-repo", str(repo)]) == 0
    printed = capsys.readouterr().out
    assert f"built tensorrt fp32 graph for {tiny_int8_folder}" in printed
    assert json.loads((out / "streampunct.json").read_text())["artifact"] == "model.onnx"
    assert (repo / "streampunct" / "1" / "model.onnx").read_bytes() == (out / "model.onnx").read_bytes()
    trt = text_format.Parse((repo / "streampunct_trt" / "config.pbtxt").read_text(), tritonclient.ModelConfig())
    parameters = {k: v.string_value for k, v in trt.parameters.items()}
    assert parameters["streampunct_precision"] == "fp32" and parameters["streampunct_min_len"] == "8"
    assert "without --graph-only" in printed and "model.fp32.plan" in printed
    assert main(["build-engine", "--backend", "tensorrt", "--model", str(tiny_int8_folder), "--graph-only",
                 "--triton-repo", str(tmp_path / "r2")]) == 2
    assert "--graph-only builds a folder: pass --out DIR" in capsys.readouterr().err


def test_only_tensorrt_builds_from_a_built_folder(tiny_int8_folder, tmp_path, capsys):
    from streampunct.cli import main

    assert main(["build-engine", "--model", str(tiny_int8_folder), "--out", str(tmp_path / "o")]) == 2
    assert "only --backend tensorrt builds from a built folder's own graph" in capsys.readouterr().err
    assert main(["build-engine", "--model", str(tiny_int8_folder), "--out", str(tmp_path / "o"),
                 "--graph-only"]) == 2
    assert "--graph-only stops a TensorRT build before the builder" in capsys.readouterr().err
    assert main(["build-engine", "--backend", "tensorrt", "--model", str(tiny_int8_folder),
                 "--out", str(tiny_int8_folder), "--graph-only", "--precision", "fp32"]) == 2
    assert "is the folder the model is read from" in capsys.readouterr().err
