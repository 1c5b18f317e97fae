"""TensorRT from the shipped model folders: ``build-engine --backend tensorrt --model models/X``.

The shipped folders have no checkpoint: the model is rebuilt from the folder's own
quantized graph (weights de-quantized, engines.build.from_graph) and exported as the
whole-window graph TensorRT takes. Without TensorRT the command stops before the
builder with ``--graph-only``; the graph it writes is run here in ONNX Runtime through
the offline decoder on every word of test2011 (a parity check, not tuning) and its
labels compared with the shipped graph's: punctuation, and case classes (the truecasing
head, with the folder's case margin).

The fp16 graph (what TensorRT builds by default) needs validation text for modelopt's
calibration (dev2012 under $STREAMPUNCT_DATA or ../shared/data); without it the test
checks the fp32 graph (``--precision fp32``, a plan TensorRT also builds).

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
ACCEPTANCE = 0.995
#: models/default's punctuation: its shipped int8 graph quantizes activations with scales
#: over the whole batch, so its own labels move with the batching: at batch 8 or 1 they
#: agree with its batch-32 labels (the offline decoder's) on 99.44% / 99.33% of test2011
#: words; the derived graph (no activation quantization) 99.45% (docs/engines.md).
DEFAULT_PUNCTUATION = 0.994


def _graph_folder(model: str, out, capsys) -> tuple:
    """``build-engine --backend tensorrt --graph-only`` from a shipped folder: (folder, printed)."""
    from streampunct.cli import main

    args = ["build-engine", "--backend", "tensorrt", "--model", str(REPO / "models" / model),
            "--out", str(out), "--graph-only"]
    if DEV2012.is_file():
        args += ["--parity-data", str(DEV2012), "--parity-lines", "300", "--calibration-windows", "16"]
    else:
        args += ["--precision", "fp32"]  # no calibration text for the fp16 graph
    assert main(args) == 0
    return out, capsys.readouterr().out


def _labels(folder, artifact=None):
    """Labels and case classes of every test2011 word, decoded as ``punctuate`` does."""
    from engines.registry import load_engine
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.model import load_model_info
    from streampunct.text.word_labels import read_word_labels

    info = load_model_info(folder)
    engine = load_engine("onnxruntime", folder, artifact=artifact)
    decoder = OfflineDecoder(engine, info.aligner(), info.window, info=info)
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
    assert graph.precision == ("fp16" if DEV2012.is_file() else "fp32")
    assert "stopped before the TensorRT builder (--graph-only)" in printed
    if DEV2012.is_file():
        assert f"{meta['artifact']:<20} vs {shipped_meta['artifact']} (the source graph, ORT)" in printed
        assert graph.parity["source_graph"] == shipped_meta["artifact"]
    return meta["artifact"]


def _agreement(model: str, folder, artifact: str) -> tuple[float, float, int]:
    want_labels, want_cases, shipped = _labels(REPO / "models" / model)
    got_labels, got_cases, used = _labels(folder)
    assert used == artifact
    assert len(got_labels) == len(want_labels) > 12000
    punct, case = float(np.mean(got_labels == want_labels)), float(np.mean(got_cases == want_cases))
    print(f"{model}: {artifact} vs {shipped} on {len(want_labels)} test2011 words: "
          f"punctuation {100 * punct:.2f}%, case {100 * case:.2f}%")
    return punct, case, len(want_labels)


@pytest.mark.slow
@pytest.mark.skipif(not (REPO / "models" / "default" / "model.int8.onnx").is_file(), reason="no models/default")
def test_the_default_model_becomes_the_graph_tensorrt_takes(tmp_path, capsys):
    started = time.perf_counter()
    folder, printed = _graph_folder("default", tmp_path / "trt", capsys)
    artifact = _check_folder("default", folder, printed)
    punct, case, _ = _agreement("default", folder, artifact)
    assert punct >= DEFAULT_PUNCTUATION
    assert case >= ACCEPTANCE
    assert time.perf_counter() - started < 240  # 60-90 s on 2 loaded cores with dev2012 (fp16)


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
    assert main(["build-engine", "--backend", "tensorrt", "--precision", "fp32", "--model", str(tiny_int8_folder),
                 "--out", str(out), "--graph-only", "--parity-data", str(words)]) == 0
    printed = capsys.readouterr().out
    assert f"rebuilt the model from {tiny_int8_folder}/model.int8.onnx (int8, weights de-quantized; bert " \
           "encoder, with case head)" in printed
    assert f"built tensorrt fp32 graph for {tiny_int8_folder}" in printed
    assert "model.onnx           vs model.int8.onnx (the source graph, ORT): label agreement" in printed
    meta = json.loads((out / "streampunct.json").read_text())
    assert meta["artifact"] == "model.onnx" and meta["case_margin"] == 0.5
    assert meta["built_from"]["artifact"] == "model.int8.onnx" and meta["built_from"]["precision"] == "int8"
    sidecar = read_sidecar(out / "model.onnx")
    assert [o.name for o in sidecar.outputs] == ["logits", "case_logits"]
    assert sidecar.source_sha256 == read_sidecar(tiny_int8_folder / "model.int8.onnx").source_sha256
    assert sidecar.parity["label_agreement"] == 1.0  # vs the rebuilt torch module
    assert sidecar.parity["label_agreement_vs_source_graph"] >= 0.9
    assert not list(out.glob("*.plan"))


def test_without_tensorrt_the_graphs_are_written_and_the_builder_named(tiny_int8_folder, tmp_path, capsys,
                                                                       monkeypatch):
    import sys

    from streampunct.cli import main

    monkeypatch.setitem(sys.modules, "tensorrt", None)  # as on a host without TensorRT
    out = tmp_path / "trt"
    rc = main(["build-engine", "--backend", "tensorrt", "--precision", "fp32", "--model", str(tiny_int8_folder),
               "--out", str(out)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "building TensorRT engines needs the Python package 'tensorrt'" in err
    assert f"The graphs before the builder are in {out} (model.onnx); --graph-only stops there" in err
    assert (out / "model.onnx").is_file() and not list(out.glob("*.plan"))


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
