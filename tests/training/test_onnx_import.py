"""A runtime model's int8 graph comes back as a training checkpoint that continues training."""

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from streampunct.errors import InputError, ModelError  # noqa: E402
from training.checkpoint import load_checkpoint  # noqa: E402
from training.config import load_config  # noqa: E402
from training.model import build_model  # noqa: E402
from training.onnx_import import import_runtime_model, onnx_state_dict  # noqa: E402
from training.pipeline import new_model  # noqa: E402

WINDOW = {"size": 30, "left": 6, "right": 4}


def runtime_folder(base: Path, out: Path, *, case_head: bool, quantize_embeddings: bool,
                   precision: str = "int8") -> torch.nn.Module:
    from engines.build.builder import BuildConfig, build_model_folder

    torch.manual_seed(3)
    model = build_model(base, random_init=True, dropout=0.0, case_head=case_head).eval()
    with torch.no_grad():  # a trained model's look: no two tensors equal (the exporter merges those)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    build_model_folder(model, out, config=BuildConfig(precision=precision, quantize_embeddings=quantize_embeddings),
                       model_metadata={"labels": ["O", "COMMA", "PERIOD", "QUESTION"],
                                       "label_position": "last", "window": WINDOW, "head": "linear"},
                       copy_files={"tokenizer.json": base / "tokenizer.json"})
    return model


@pytest.mark.parametrize("case_head, quantize_embeddings", [(True, True), (False, False)])
def test_import_recovers_every_parameter(tiny_base_model, tmp_path, case_head, quantize_embeddings):
    original = runtime_folder(tiny_base_model, tmp_path / "rt", case_head=case_head,
                              quantize_embeddings=quantize_embeddings)
    ckpt = import_runtime_model(tmp_path / "rt", tmp_path / "ckpt", base_model=str(tiny_base_model))
    model, meta = load_checkpoint(ckpt)
    assert meta["window"] == WINDOW and meta["imported_from"].endswith("model.int8.onnx")
    assert (model.case_head is not None) == case_head
    want = {k: v for k, v in original.state_dict().items() if not k.endswith("position_ids")}
    got = model.state_dict()
    assert set(want) <= set(got)
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape, name
        # int8 weights: within half a quantisation step of the original, per tensor.
        tol = float(w.abs().max()) / 60 + 1e-7
        assert float((g - w).abs().max()) <= tol, name
    ids = torch.randint(5, 1000, (4, 20))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        a = original(ids, mask).argmax(-1)
        b = model(ids, mask).argmax(-1)
    assert float((a == b).float().mean()) >= 0.9


def test_without_a_base_model_the_encoder_config_comes_from_the_graph(tiny_base_model, tmp_path):
    """training.md's `onnx_import models/default OUT` gives no --base-model: the encoder's shape is
    read from the graph (as the torch backend reads it), so a 5-layer model does not need a
    5-layer base folder; the checkpoint is the one a matching base model gives."""
    import json

    runtime_folder(tiny_base_model, tmp_path / "rt", case_head=True, quantize_embeddings=False)
    given = import_runtime_model(tmp_path / "rt", tmp_path / "given", base_model=str(tiny_base_model))
    derived = import_runtime_model(tmp_path / "rt", tmp_path / "derived")
    base = json.loads((tiny_base_model / "config.json").read_text())
    config = json.loads((derived / "config.json").read_text())
    for key in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "max_position_embeddings", "layer_norm_eps"):
        assert config[key] == base[key], key
    a, _ = load_checkpoint(given)
    b, _ = load_checkpoint(derived)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_import_recovers_an_int4_graph(tiny_base_model, tmp_path):
    """models/base ships 4-bit weights and embeddings (MatMulNBits, GatherBlockQuantized) only."""
    original = runtime_folder(tiny_base_model, tmp_path / "rt", case_head=True, quantize_embeddings=True,
                              precision="int4")
    (tmp_path / "rt" / "model.onnx").unlink()  # as shipped: the 4-bit graph alone
    ckpt = import_runtime_model(tmp_path / "rt", tmp_path / "ckpt", base_model=str(tiny_base_model))
    model, meta = load_checkpoint(ckpt)
    assert meta["imported_from"].endswith("model.int4.onnx") and model.case_head is not None
    want = {k: v for k, v in original.state_dict().items() if not k.endswith("position_ids")}
    got = model.state_dict()
    quantized = 0
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape, name
        # 4-bit symmetric blocks: within one step (block max / 8) of the original
        tol = float(w.abs().max()) / 8 + 1e-7
        assert float((g - w).abs().max()) <= tol, name
        quantized += not torch.equal(g, w)
    assert quantized >= 14 + 3  # every MatMul weight and embedding table came through the 4-bit path
    import onnxruntime as ort

    ids = torch.randint(5, 1000, (4, 20))
    mask = torch.ones_like(ids)
    session = ort.InferenceSession(str(tmp_path / "rt" / "model.int4.onnx"), providers=["CPUExecutionProvider"])
    graph = session.run(["logits"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    with torch.no_grad():
        imported = model(ids, mask).numpy()
    # the imported fp32 weights are the graph's own: only the kernels' int8 activations differ
    assert float(np.mean(imported.argmax(-1) == graph.argmax(-1))) >= 0.95


def test_state_dict_names_follow_the_bias(tiny_base_model, tmp_path):
    runtime_folder(tiny_base_model, tmp_path / "rt", case_head=False, quantize_embeddings=False)
    state = onnx_state_dict(tmp_path / "rt" / "model.int8.onnx")
    q = state["encoder.encoder.layer.0.attention.self.query.weight"]
    k = state["encoder.encoder.layer.0.attention.self.key.weight"]
    assert q.shape == k.shape == (32, 32) and not np.allclose(q, k)
    assert state["head.linear.weight"].shape == (4, 32)
    assert state["encoder.encoder.layer.1.intermediate.dense.weight"].shape == (64, 32)


def test_init_head_continues_the_imported_model(tiny_base_model, tmp_path):
    runtime_folder(tiny_base_model, tmp_path / "rt", case_head=False, quantize_embeddings=False)
    ckpt = import_runtime_model(tmp_path / "rt", tmp_path / "ckpt", base_model=str(tiny_base_model))
    imported, _ = load_checkpoint(ckpt)
    cfg = load_config(None, ["model.init_head=true", "model.case_head=true", "model.dropout=0.0"])
    model = new_model(cfg, ckpt)
    for name, w in imported.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], w, msg=name)
    assert model.case_head is not None  # absent from the file: fresh
    fresh = new_model(load_config(None, ["model.dropout=0.0"]), ckpt)
    assert not torch.equal(fresh.head.linear.weight, imported.head.linear.weight)


def test_merged_initializers_are_refused(tiny_base_model, tmp_path):
    from engines.build.builder import BuildConfig, build_model_folder

    untrained = build_model(tiny_base_model, random_init=True, dropout=0.0).eval()  # zero biases
    build_model_folder(untrained, tmp_path / "rt", config=BuildConfig(),
                       model_metadata={"labels": ["O", "COMMA", "PERIOD", "QUESTION"],
                                       "label_position": "last", "window": WINDOW},
                       copy_files={"tokenizer.json": tiny_base_model / "tokenizer.json"})
    with pytest.raises(ModelError):
        import_runtime_model(tmp_path / "rt", tmp_path / "ckpt", base_model=str(tiny_base_model))


def test_errors_name_the_problem(tiny_base_model, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no model.onnx, model.int8.onnx or model.int4.onnx"):
        import_runtime_model(tmp_path / "empty", tmp_path / "out")
    cfg = load_config(None, ["model.init_head=true", "model.random_init=true"])
    with pytest.raises(InputError, match="not a checkpoint folder"):
        new_model(cfg, tiny_base_model)


def test_dither_keeps_training_that_a_plain_import_would_lose_at_export(tiny_base_model, tmp_path):
    """A model trained from an imported int4 graph and exported to int4 again: without dither,
    weights moved by less than half a step come back as the old graph's codes (the GPU teacher of
    2026-11-26); with --dither 0.5 the export keeps the move in expectation."""
    from engines.build.builder import BuildConfig, build_model_folder

    runtime_folder(tiny_base_model, tmp_path / "rt", case_head=False, quantize_embeddings=True, precision="int4")
    old = onnx_state_dict(tmp_path / "rt" / "model.int4.onnx")
    name = "encoder.encoder.layer.0.intermediate.dense.weight"
    assert name in old
    moved = {}
    for dither in (0.0, 0.5):
        ckpt = import_runtime_model(tmp_path / "rt", tmp_path / f"ckpt{dither}", base_model=str(tiny_base_model),
                                    dither=dither, seed=1)
        model, meta = load_checkpoint(ckpt)
        assert meta["import_dither"] == dither
        w = model.state_dict()[name]
        if dither:  # within half a step of the graph's weights (a step is at most the tensor's max / 7)
            diff = (w - torch.from_numpy(old[name])).abs()
            assert 0 < float(diff.max()) <= 0.5 * float(np.abs(old[name]).max()) / 7 + 1e-6
        else:
            assert torch.equal(w, torch.from_numpy(old[name]))
        delta = 0.15 * float(np.abs(old[name]).max()) / 7  # "training": well under half a step, every weight
        with torch.no_grad():
            model.state_dict()[name].add_(delta)
        out = tmp_path / f"rt{dither}"
        build_model_folder(model, out, config=BuildConfig(precision="int4", quantize_embeddings=True),
                           model_metadata={"labels": ["O", "COMMA", "PERIOD", "QUESTION"], "label_position": "last",
                                           "window": WINDOW, "head": "linear"},
                           copy_files={"tokenizer.json": tiny_base_model / "tokenizer.json"})
        new = onnx_state_dict(out / "model.int4.onnx")
        moved[dither] = float(np.mean(new[name] - old[name])) / delta
    assert moved[0.0] < 0.5  # most of the move rounded away
    assert 0.7 < moved[0.5] < 1.3  # kept, up to the noise of one quantization
    with pytest.raises(InputError, match="dither must be between 0 and 0.5"):
        onnx_state_dict(tmp_path / "rt" / "model.int4.onnx", dither=0.7)


def test_a_folder_without_its_checkpoint_gets_a_streaming_graph_from_its_own_graph(tiny_base_model, tmp_path):
    """training.add_stream_graph --from-graph: the folder's int8 graph imported back, the
    streaming graph built from it with the folder's quantization and source."""
    from engines.ort_engine import OrtEngine, open_stream_engine
    from engines.sidecar import read_sidecar
    from training.add_stream_graph import add_stream_graph_from_graph, main

    runtime_folder(tiny_base_model, tmp_path / "rt", case_head=True, quantize_embeddings=True)
    out = add_stream_graph_from_graph(tmp_path / "rt", str(tiny_base_model))
    assert out.name == "model.stream.int8.onnx"
    own = read_sidecar(tmp_path / "rt" / "model.int8.onnx")
    stream = read_sidecar(out)
    assert stream.source_sha256 == own.source_sha256 and stream.precision == "int8"
    assert stream.recipe["weights_from"].startswith("model.int8.onnx") and stream.recipe["quantize_embeddings"]
    ids = np.random.default_rng(0).integers(5, 1000, (4, 20)).astype(np.int64)
    mask = np.ones_like(ids)
    a = OrtEngine(tmp_path / "rt" / "model.int8.onnx").infer(ids, mask).argmax(-1)
    b = open_stream_engine(tmp_path / "rt").infer(ids, mask).argmax(-1)
    assert float(np.mean(a == b)) >= 0.95
    # a graph given static activation scales gets them back when it is built again
    from engines.build.static_scales import has_static_scales
    from training.static_scales import calibrate

    words = "so what we did was we asked them how do you feel about it and they said fine".split() * 20
    calibrate(tmp_path / "rt", words, percentile=100.0)
    static = read_sidecar(out)
    again = read_sidecar(add_stream_graph_from_graph(tmp_path / "rt", str(tiny_base_model)))
    assert has_static_scales(again) and again.recipe["ranges"] == static.recipe["ranges"]
    assert again.recipe["calibration"]["reapplied_by"] == "training.add_stream_graph"
    assert again.artifact_sha256 == static.artifact_sha256  # the same graph, bit for bit
    with pytest.raises(SystemExit):  # a checkpoint is not taken with --from-graph
        main(["--from-graph", str(tmp_path / "ckpt"), str(tmp_path / "rt")])
    with pytest.raises(SystemExit) as refused:
        main(["--from-graph", str(tmp_path)])
    assert refused.value.code == 2


def test_a_streaming_graph_imports_like_the_graph_it_was_built_from(tiny_base_model, tmp_path):
    """models/base's one graph is its streaming graph: it must import (and continue training)
    as the plain graph does; its parameter names carry the stream module's prefix."""
    import json
    import shutil

    from training.add_stream_graph import add_stream_graph_from_graph

    runtime_folder(tiny_base_model, tmp_path / "rt", case_head=True, quantize_embeddings=True)
    add_stream_graph_from_graph(tmp_path / "rt", str(tiny_base_model))
    plain = onnx_state_dict(tmp_path / "rt" / "model.int8.onnx")
    stream = onnx_state_dict(tmp_path / "rt" / "model.stream.int8.onnx")
    assert set(stream) == set(plain)
    for name, w in plain.items():
        np.testing.assert_allclose(stream[name], w, atol=float(np.abs(w).max()) / 60 + 1e-7, err_msg=name)
    one = tmp_path / "one"  # the streaming graph as the folder's only graph, as models/base ships
    one.mkdir()
    for f in ("model.stream.int8.onnx", "model.stream.int8.onnx.json", "tokenizer.json"):
        shutil.copy(tmp_path / "rt" / f, one / f)
    meta = json.loads((tmp_path / "rt" / "streampunct.json").read_text())
    (one / "streampunct.json").write_text(json.dumps({**meta, "artifact": "model.stream.int8.onnx"}))
    ckpt = import_runtime_model(one, tmp_path / "ckpt", base_model=str(tiny_base_model))
    model, info = load_checkpoint(ckpt)
    assert info["imported_from"].endswith("model.stream.int8.onnx") and model.case_head is not None
