"""The torch serving backend (engines.torch_backend): a model folder's graph weights in torch.

Parity is against ONNX Runtime fp32 on the same weights (labels equal, logits close), for
both encoder layouts (BERT / MiniLM and MPNet), whole windows and cached calls; the graph
weights and the encoder configuration come from the graph alone (engines.graph_weights).
The GPU tests at the end skip without CUDA.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from engines.base import ArtifactError, EngineError, InferenceError  # noqa: E402
from engines.build.stream_graph import export_stream_onnx, layout  # noqa: E402
from engines.graph_weights import encoder_config, graph_state_dict, load_graph  # noqa: E402
from engines.ort_engine import OrtEngine, OrtStreamEngine  # noqa: E402
from engines.registry import available_backends, load_engine  # noqa: E402
from engines.torch_backend import TorchGraphEngine, TorchOptions  # noqa: E402
from tests.engines.conftest import REPO, tiny_two_head_model  # noqa: E402

META = {"labels": ["O", "COMMA", "PERIOD", "QUESTION"], "label_position": "last",
        "window": {"size": 30, "left": 6, "right": 4}, "head": "linear"}
CUDA = torch.cuda.is_available()


def _sharpen(model, kind):
    """Sharper attention than a fresh init's near-uniform one: context and positions matter;
    no two parameters equal (the exporter would merge a fresh init's zero biases into one
    initializer, and a bias would no longer name its layer)."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        for layer in model.encoder.encoder.layer:
            att = layer.attention.self if kind == "bert" else layer.attention.attn
            for w in ((att.query, att.key) if kind == "bert" else (att.q, att.k)):
                w.weight.mul_(20.0)
        if kind == "mpnet":
            model.encoder.encoder.relative_attention_bias.weight.mul_(5.0)
    return model


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    from transformers import BertConfig

    torch.set_num_threads(1)
    return _sharpen(tiny_two_head_model(tmp_path_factory.mktemp("bert"), BertConfig(
        vocab_size=120, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=160)), "bert")


@pytest.fixture(scope="module")
def mpnet(tmp_path_factory):
    from transformers import MPNetConfig

    torch.set_num_threads(1)
    return _sharpen(tiny_two_head_model(tmp_path_factory.mktemp("mpnet"), MPNetConfig(
        vocab_size=120, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32,
        max_position_embeddings=160, relative_attention_num_buckets=32), seed=1), "mpnet")


def _folder(model, path, precision):
    from engines.build.builder import BuildConfig, build_model_folder

    build_model_folder(model, path, config=BuildConfig(precision=precision), model_metadata=dict(META))
    return path


@pytest.fixture(scope="module")
def bert_fp32(bert, tmp_path_factory):
    return _folder(bert, tmp_path_factory.mktemp("bert_fp32"), "fp32")


@pytest.fixture(scope="module")
def mpnet_fp32(mpnet, tmp_path_factory):
    return _folder(mpnet, tmp_path_factory.mktemp("mpnet_fp32"), "fp32")


def _batch(seed=0, b=3, t=12, vocab=120, cls=0):
    """Random windows [CLS] ... with padding at the end of some rows."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, (b, t)).astype(np.int64)
    ids[:, 0] = cls
    mask = np.ones_like(ids)
    for k in range(1, b):
        mask[k, t - 3 * k:] = 0
        ids[k, t - 3 * k:] = 1
    return ids, mask


def _assert_parity(got, want, mask, atol=1e-4):
    real = mask.astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=atol)
    assert np.array_equal(got[real].argmax(-1), want[real].argmax(-1))


# -- the graph alone rebuilds the model ----------------------------------------------------


@pytest.mark.parametrize("kind", ["bert", "mpnet"])
def test_the_graph_gives_back_every_weight_and_the_encoder_config(kind, request):
    model, folder = request.getfixturevalue(kind), request.getfixturevalue(f"{kind}_fp32")
    graph = load_graph(folder / "model.onnx")
    state = graph_state_dict(graph)
    reference = {k: v.numpy() for k, v in model.state_dict().items() if not k.endswith("position_ids")}
    assert state.keys() == reference.keys()
    for name, value in reference.items():
        np.testing.assert_array_equal(state[name], value, err_msg=name)
    config = encoder_config(graph, state)
    hf = model.encoder.config
    assert config["model_type"] == kind
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "layer_norm_eps"):
        assert config[key] == getattr(hf, key), key
    if kind == "mpnet":
        assert config["pad_token_id"] == hf.pad_token_id == 1
        assert config["relative_attention_num_buckets"] == 32


# -- whole windows: parity with ONNX Runtime fp32 ------------------------------------------


@pytest.mark.parametrize("kind", ["bert", "mpnet"])
def test_whole_windows_match_onnxruntime_fp32(kind, request):
    folder = request.getfixturevalue(f"{kind}_fp32")
    ort_engine = load_engine("onnxruntime", folder)
    engine = load_engine("torch", folder, device="cpu")
    assert isinstance(engine, TorchGraphEngine) and engine.name == "torch" and engine.rows_independent
    ids, mask = _batch(cls=0 if kind == "mpnet" else 2)
    want, want_case = ort_engine.infer_heads(ids, mask)
    got, got_case = engine.infer_heads(ids, mask)
    assert got.dtype == np.float32 and got.shape == want.shape == (3, 12, 4)
    _assert_parity(got, want, mask)
    _assert_parity(got_case, want_case, mask)
    np.testing.assert_array_equal(engine.infer(ids, mask), got)
    spec = engine.io_spec()
    assert (spec.backend, spec.artifact, spec.precision) == ("torch", "model.onnx", "fp32")
    assert [t.name for t in spec.outputs] == ["logits", "case_logits"] and spec.num_labels == 4


def test_a_row_does_not_depend_on_its_batch(bert_fp32):
    engine = load_engine("torch", bert_fp32, device="cpu")
    ids, mask = _batch(seed=3, b=4)
    together = engine.infer(ids, mask)
    for k in range(4):
        alone = engine.infer(ids[k : k + 1, : mask[k].sum()], mask[k : k + 1, : mask[k].sum()])
        np.testing.assert_allclose(alone[0], together[k, : mask[k].sum()], atol=1e-5)


# -- cached left context: parity with the streaming graph in ONNX Runtime --------------------


@pytest.mark.parametrize("kind", ["bert", "mpnet"])
def test_cached_calls_match_the_streaming_graph(kind, request, tmp_path):
    model, folder = request.getfixturevalue(kind), request.getfixturevalue(f"{kind}_fp32")
    stream = export_stream_onnx(model, tmp_path / "model.stream.onnx", source_sha256="test").path
    ort_stream = OrtStreamEngine(stream)
    engine = load_engine("torch", folder, device="cpu")  # from the whole-window graph
    assert engine.stream_shape == ort_stream.stream_shape == layout(model)
    layers, heads, dim = engine.stream_shape
    rng = np.random.default_rng(5)
    past_len, new = 7, 5
    ids = rng.integers(5, 120, (2, new)).astype(np.int64)
    ids[:, 0] = 0  # CLS at position 0, then the new tokens after the cache
    pos = np.tile(np.concatenate([[0], np.arange(past_len + 1, past_len + new)]), (2, 1)).astype(np.int64)
    mask = np.ones((2, past_len + new), np.int64)
    mask[1, 4:past_len] = 0  # row 1 holds 4 cached tokens, then padding
    mask[1, -1] = 0
    past = (rng.standard_normal((layers, 2, 2, heads, past_len, dim)) * 0.5).astype(np.float16)
    feed = {"input_ids": ids, "position_ids": pos, "attention_mask": mask, "past_kv": past}
    want, want_present = ort_stream.infer_stream(feed)
    got, got_present = engine.infer_stream(feed)
    assert got.shape == want.shape == (2, new, 8)  # punctuation then case logits
    assert got_present.dtype == np.float16 and got_present.shape == want_present.shape
    _assert_parity(got, want, mask[:, past_len:])
    real = mask[:, past_len:].astype(bool)
    diff = np.abs(got_present.astype(np.float32) - want_present.astype(np.float32))
    assert np.moveaxis(diff, (2, 4), (0, 1))[real].max() <= 2e-3  # one float16 step of values ~1


def test_a_streaming_graph_alone_is_enough(mpnet, tmp_path):
    """models/base ships only its 4-bit streaming graph: its heads come from past_kv and
    MPNet's padding index from the offset it adds to position_ids."""
    from engines.build.builder import BuildConfig, build_model_folder
    from engines.build.stream_graph import build_stream_artifact

    folder = tmp_path / "base"
    build_model_folder(mpnet, folder, config=BuildConfig(precision="int4"), model_metadata=dict(META))
    out = build_stream_artifact(mpnet, folder, source_sha256="test")
    meta = json.loads((folder / "streampunct.json").read_text())
    (folder / "streampunct.json").write_text(json.dumps({**meta, "artifact": out.name, "stream_cache_tokens": 9}))
    (folder / "model.int4.onnx").unlink()
    engine = load_engine("torch", folder, device="cpu")
    assert engine.path.name == "model.stream.int4.onnx" and engine.cache_tokens == 9
    assert engine.encoder_config["pad_token_id"] == 1 and engine.stream_shape == layout(mpnet)
    ort_engine = load_engine("onnxruntime", folder)
    ids, mask = _batch(seed=2)
    got, want = engine.infer(ids, mask), ort_engine.infer(ids, mask)
    # 4-bit weights in both; ONNX Runtime's MatMulNBits computes with int8 activations
    real = mask.astype(bool)
    assert np.mean(got[real].argmax(-1) == want[real].argmax(-1)) >= 0.9
    assert np.abs(got[real] - want[real]).max() < 0.1 * np.abs(want[real]).max()


# -- precision, options and errors -------------------------------------------------------


def test_fp16_keeps_the_labels(bert_fp32):
    """The fp16 path (weights, activations, keys/values) on the CPU, as it runs on CUDA."""
    fp32 = load_engine("torch", bert_fp32, device="cpu")
    fp16 = load_engine("torch", bert_fp32, device="cpu", precision="fp16")
    assert fp16.io_spec().precision == "fp16"
    ids, mask = _batch(seed=4, b=4, t=16)
    _assert_parity(fp16.infer(ids, mask), fp32.infer(ids, mask), mask, atol=2e-2)


def test_options_are_checked_with_one_line_errors(bert_fp32):
    with pytest.raises(EngineError, match="device must be auto, cpu, cuda or cuda:N, not 'gpu'"):
        load_engine("torch", bert_fp32, device="gpu")
    with pytest.raises(EngineError, match="precision must be one of auto, fp32, fp16, not 'int8'"):
        TorchOptions(precision="int8")
    with pytest.raises(EngineError, match=r"unknown option\(s\) providers for the torch backend"):
        load_engine("torch", bert_fp32, providers=["CUDAExecutionProvider"])
    if not CUDA:
        with pytest.raises(EngineError, match="device cuda: torch sees no CUDA GPU"):
            load_engine("torch", bert_fp32, device="cuda")
        assert load_engine("torch", bert_fp32).device.type == "cpu"  # auto


def test_bad_inputs_and_a_closed_engine_raise_inference_errors(bert_fp32):
    engine = load_engine("torch", bert_fp32, device="cpu")
    with pytest.raises(InferenceError, match="attention_mask shape"):
        engine.infer(np.ones((1, 4), np.int64), np.ones((1, 5), np.int64))
    with pytest.raises(InferenceError, match="streaming call shapes do not fit"):
        engine.infer_stream({"input_ids": np.ones((1, 3), np.int64), "position_ids": np.ones((1, 3), np.int64),
                             "attention_mask": np.ones((1, 3), np.int64),
                             "past_kv": np.zeros((2, 2, 1, 2, 1, 8), np.float16)})
    engine.close()
    engine.close()
    with pytest.raises(InferenceError, match="closed"):
        engine.infer(np.ones((1, 4), np.int64), np.ones((1, 4), np.int64))


def test_a_graph_without_a_linear_head_is_refused(bert_fp32):
    import onnx

    from engines.torch_backend import build_graph_model

    graph = onnx.load(str(bert_fp32 / "model.onnx"))
    state = graph_state_dict(graph)
    del state["head.linear.weight"], state["head.linear.bias"]
    with pytest.raises(ArtifactError, match="no linear punctuation head"):
        build_graph_model(state, encoder_config(graph, state), "test")
    state = graph_state_dict(graph)
    state["extra.weight"] = np.zeros(3, np.float32)
    with pytest.raises(ArtifactError, match=r"unexpected \['extra.weight'\]"):
        build_graph_model(state, encoder_config(graph, state), "test")


def test_the_backend_is_registered_where_its_packages_are():
    assert "torch" in available_backends()


def test_an_empty_folder_names_what_is_missing(tmp_path):
    with pytest.raises(ArtifactError, match="no torch artifact"):
        load_engine("torch", tmp_path)


# -- the shipped default model ---------------------------------------------------------------


DEFAULT = REPO / "models" / "default"


@pytest.mark.slow
@pytest.mark.skipif(not (DEFAULT / "model.int8.onnx").is_file(), reason="models/default is not here")
def test_the_default_model_matches_onnxruntime_fp32_on_its_own_weights(tmp_path):
    """models/default's int8 graph in torch against ONNX Runtime fp32 of the same de-quantized
    weights, exported from the training model (Hugging Face's own attention): labels equal,
    logits close; and against the int8 graph itself, whose activations are quantized."""
    from transformers import AutoConfig

    from engines.build.onnx_export import export_onnx
    from engines.graph_weights import read_graph_weights
    from training.model import build_model

    started = time.perf_counter()
    state, config = read_graph_weights(DEFAULT / "model.int8.onnx")
    cfg = dict(config)
    AutoConfig.for_model(cfg.pop("model_type"), **cfg).save_pretrained(tmp_path / "cfg")
    model = build_model(tmp_path / "cfg", random_init=True, dropout=0.0, case_head=True).eval()
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=False)
    export_onnx(model, tmp_path / "model.onnx")
    reference = OrtEngine(tmp_path / "model.onnx")  # fp32
    # one thread: torch's OpenMP threads crawl on a loaded 2-core machine (3 s here, 10 s with 2)
    engine = load_engine("torch", DEFAULT, device="cpu", threads=1)
    assert engine.path.name == "model.int8.onnx" and engine.cache_tokens == 60
    from engines.build.parity import ParityWindows
    from streampunct.core.alignment import Aligner
    from streampunct.core.windowing import WindowConfig
    from streampunct.text.word_labels import read_word_labels

    words = read_word_labels(REPO / "data" / "iwslt2011" / "test2011").words[:1000]
    aligner = Aligner.from_file(DEFAULT / "tokenizer.json")
    windows = ParityWindows.of(aligner.offline_windows(words, WindowConfig(126, 40, 10)))
    got, want, graph = [], [], []
    int8 = load_engine("onnxruntime", DEFAULT)
    for ids, mask in windows.batches(8):
        got.append(engine.infer(ids, mask))
        want.append(reference.infer(ids, mask))
        graph.extend(int8.infer(ids[k : k + 1], mask[k : k + 1]) for k in range(len(ids)))
        real = mask.astype(bool)
        np.testing.assert_allclose(got[-1][real], want[-1][real], atol=1e-3)
    rows, cols = windows.positions[:, 0], windows.positions[:, 1]
    labels = [np.concatenate([np.pad(x, ((0, 0), (0, windows.input_ids.shape[1] - x.shape[1]), (0, 0)))
                              for x in xs])[rows, cols].argmax(-1) for xs in (got, want, graph)]
    assert len(labels[0]) == 1000
    assert np.array_equal(labels[0], labels[1])  # ONNX Runtime fp32, the same weights
    assert np.mean(labels[0] == labels[2]) >= 0.99  # the int8 graph: int8 activations
    assert time.perf_counter() - started < 60  # ~20 s on 2 loaded cores


# -- on a GPU ------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU visible to torch")
@pytest.mark.parametrize("kind", ["bert", "mpnet"])
def test_fp16_on_cuda_matches_onnxruntime_fp32(kind, request, tmp_path):
    model, folder = request.getfixturevalue(kind), request.getfixturevalue(f"{kind}_fp32")
    engine = load_engine("torch", folder, device="cuda")
    assert engine.precision == "fp16" and engine.device.type == "cuda" and engine.device_name != "cpu"
    ids, mask = _batch(cls=0 if kind == "mpnet" else 2)
    _assert_parity(engine.infer(ids, mask), load_engine("onnxruntime", folder).infer(ids, mask), mask, atol=2e-2)
    stream = OrtStreamEngine(export_stream_onnx(model, tmp_path / "s.onnx", source_sha256="t").path)
    layers, heads, dim = engine.stream_shape
    feed = {"input_ids": ids[:, :5], "position_ids": np.tile(np.array([0, 8, 9, 10, 11]), (3, 1)),
            "attention_mask": np.ones((3, 12), np.int64),
            "past_kv": (np.random.default_rng(0).standard_normal((layers, 2, 3, heads, 7, dim)) * 0.5
                        ).astype(np.float16)}
    _assert_parity(engine.infer_stream(feed)[0], stream.infer_stream(feed)[0], np.ones((3, 5)), atol=2e-2)


# -- the server streams on torch ----------------------------------------------------------


async def test_the_server_streams_with_cached_left_context_on_torch(bert, tmp_path):
    """``serve --engine torch`` runs the folder's streaming graph in torch (``--stream-cache
    auto``): each session gets the labels of the stream simulated with the same engine and
    cached left context, not those of whole windows alone."""
    import random

    from engines.build.builder import BuildConfig, build_model_folder
    from engines.build.stream_graph import build_stream_artifact
    from engines.registry import load_stream_engine
    from streampunct.core.options import SessionOptions
    from streampunct.evaluation.accuracy import Event, schedule_labels
    from streampunct.server.app import ServerConfig, serve
    from tests.engines.conftest import WORDS, write_tiny_tokenizer
    from tests.streampunct.conftest import normalized, play_schedule

    folder = tmp_path / "bert_int8"
    build_model_folder(bert, folder, config=BuildConfig(precision="int8"), model_metadata=dict(META))
    build_stream_artifact(bert, folder, source_sha256="test")
    write_tiny_tokenizer(folder / "tokenizer.json")
    engine = load_stream_engine("torch", folder, device="cpu")
    assert engine.name == "torch" and engine.stream_shape == layout(bert)
    server = await serve(ServerConfig(host="127.0.0.1", port=0, model_dir=folder, engine="torch",
                                      engine_options={"device": "cpu"}))
    try:
        await server.wait_ready()
        assert server.runtime.stream_shape == layout(bert)
        rng = random.Random(3)
        differs = False
        for rc in (1, 3):
            events, t = [], 0.0
            for _ in range(30):
                t += 1.0
                events.append(Event(t, tuple(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))))
            events.append(Event(t + 1.0, kind="end"))
            transcript = await play_schedule(server.url, events, rc)
            schedule = normalized(events)
            options = SessionOptions(right_context=rc, max_delay_ms=600_000)
            cached = schedule_labels(schedule, server.aligner, server.window, engine.infer, options,
                                     stream_engine=engine)
            whole = schedule_labels(schedule, server.aligner, server.window, engine.infer, options)
            assert transcript.words == [w for e in schedule for w in e.words]
            assert transcript.labels == cached, f"right context {rc}"
            differs |= cached != whole
        assert differs  # the cached path is what the server took
    finally:
        await server.shutdown()
        engine.close()
    # the simulations (evaluate --live, bench live) take the same streaming engine
    from streampunct.core.decoder import OfflineDecoder

    punct = OfflineDecoder.from_model_dir(folder, engine="torch", device="cpu")
    try:
        simulated = punct.stream_engine("auto", device="cpu")
        assert simulated is not None and simulated.name == "torch" and simulated.stream_shape == layout(bert)
        assert punct.stream_engine("off") is None
    finally:
        punct.close()


# -- folders build-engine --backend tensorrt wrote ----------------------------------------------


def _tensorrt_folder(tiny_export, tmp_path, name, **sidecar_changes):
    """A copy of the tiny export as a TensorRT build's folder: ``name`` (a copy of model.onnx with
    the sidecar a TensorRT build gives it) is the folder's artifact; model.onnx stays beside it."""
    import shutil

    from engines.sidecar import read_sidecar, write_sidecar

    folder = tmp_path / "trt"
    shutil.copytree(tiny_export.path.parent, folder)
    if name != "model.onnx":
        (folder / name).write_bytes((folder / "model.onnx").read_bytes())
    write_sidecar(read_sidecar(folder / "model.onnx").replace(artifact=name, **sidecar_changes), folder / name)
    meta = json.loads((folder / "streampunct.json").read_text())
    (folder / "streampunct.json").write_text(json.dumps({**meta, "artifact": name}))
    return folder


def test_the_torch_backend_reads_the_fp32_graph_beside_an_fp16_one(tiny_export, tmp_path):
    from engines.graph_weights import read_graph_weights
    from engines.registry import resolve_artifact

    folder = _tensorrt_folder(tiny_export, tmp_path, "model.fp16.onnx", precision="fp16")
    assert resolve_artifact("torch", folder) == folder / "model.onnx"
    assert resolve_artifact("onnxruntime", folder) == folder / "model.fp16.onnx"
    with pytest.raises(ArtifactError) as exc:
        read_graph_weights(folder / "model.fp16.onnx")
    assert str(exc.value) == (f"{folder / 'model.fp16.onnx'} is an fp16 graph prepared for TensorRT: its weights "
                              "are not rebuilt here; use the fp32 model.onnx beside it")


def test_an_int8_emulating_graph_names_the_folder_it_was_built_from(tiny_export, tmp_path):
    from engines.graph_weights import read_graph_weights
    from engines.registry import resolve_artifact

    weights_from = {"artifact": "model.int8.onnx", "precision": "int8",
                    "activations": "uint8 per row, emulated in float32 in 14 linear layers"}
    folder = _tensorrt_folder(tiny_export, tmp_path, "model.onnx",
                              recipe={"method": "torch.onnx.export", "weights_from": weights_from})
    meta = json.loads((folder / "streampunct.json").read_text())
    (folder / "streampunct.json").write_text(json.dumps({**meta, "built_from": {"folder": "models/default",
                                                                                 **weights_from}}))
    path = resolve_artifact("torch", folder)
    with pytest.raises(ArtifactError) as exc:
        read_graph_weights(path)
    message = str(exc.value)
    assert message.startswith(f"{path} emulates int8 activations")
    assert "use models/default (model.int8.onnx, the graph it was built from) with --engine torch" in message
    with pytest.raises(ArtifactError, match="emulates int8 activations"):
        load_engine("torch", folder, device="cpu")
