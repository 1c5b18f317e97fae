"""The streaming graph (engines.build.stream_graph): new tokens against cached keys/values."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")

from engines.base import ArtifactError, ExportError, TensorSpec  # noqa: E402
from engines.build.stream_graph import (  # noqa: E402
    STREAM_ARTIFACT,
    build_stream_artifact,
    export_stream_onnx,
    layout,
    stream_interface_problems,
)
from engines.ort_engine import OrtEngine, OrtStreamEngine, open_stream_engine  # noqa: E402
from engines.torch_backend import stream_module  # noqa: E402
from tests.engines.conftest import tiny_two_head_model  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from transformers import BertConfig

    torch.set_num_threads(1)
    model = tiny_two_head_model(tmp_path_factory.mktemp("bert"), BertConfig(
        vocab_size=120, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=64))
    with torch.no_grad():  # sharper attention than a fresh init's near-uniform one: context matters
        for layer in model.encoder.encoder.layer:
            layer.attention.self.query.weight.mul_(20.0)
            layer.attention.self.key.weight.mul_(20.0)
    return model


def _run(module, ids, pos, mask, past):
    with torch.no_grad():
        return [t.numpy() for t in module(*(torch.from_numpy(np.asarray(a)) for a in (ids, pos, mask, past)))]


def test_with_no_cache_it_is_the_whole_window(model):
    module = stream_module(model)
    layers, heads, dim = layout(model)
    ids = np.array([[1, 5, 7, 9, 11, 2]], dtype=np.int64)
    logits, case, present = _run(module, ids, np.arange(6)[None], np.ones((1, 6), np.int64),
                                 np.zeros((layers, 2, 1, heads, 0, dim), np.float16))
    with torch.no_grad():
        ref, ref_case = model.forward_heads(torch.from_numpy(ids), torch.ones((1, 6), dtype=torch.long))
    np.testing.assert_allclose(logits, ref.numpy(), atol=1e-5)
    np.testing.assert_allclose(case, ref_case.numpy(), atol=1e-5)
    assert present.shape == (layers, 2, 1, heads, 6, dim)


def test_new_tokens_against_the_cache_are_the_window_whose_old_tokens_did_not_see_them(model):
    """Cached keys/values of A, then B at the positions after A: B's rows equal the whole
    window [A; B] run with a mask where A's tokens attend only to A (what the cache holds)."""
    module = stream_module(model)
    layers, heads, dim = layout(model)
    a = np.array([[1, 5, 7, 9]], dtype=np.int64)
    b = np.array([[11, 13, 2]], dtype=np.int64)
    _, _, present_a = _run(module, a, np.arange(4)[None], np.ones((1, 4), np.int64),
                           np.zeros((layers, 2, 1, heads, 0, dim), np.float16))
    logits_b, _, _ = _run(module, b, np.arange(4, 7)[None], np.ones((1, 7), np.int64), present_a)

    full = torch.from_numpy(np.concatenate([a, b], axis=1))
    mask4 = torch.ones((1, 1, 7, 7), dtype=torch.bool)  # [batch, head, query, key]
    mask4[0, 0, :4, 4:] = False  # A does not see B
    with torch.no_grad():
        hidden = model.encoder(input_ids=full, attention_mask=mask4, token_type_ids=torch.zeros_like(full))
        ref = model.head(hidden.last_hidden_state, torch.ones((1, 7), dtype=torch.long)).numpy()
    np.testing.assert_allclose(logits_b, ref[:, 4:], atol=1e-5)
    # and the mask matters: the cache's one approximation is real
    with torch.no_grad():
        plain = model.encoder(input_ids=full, token_type_ids=torch.zeros_like(full)).last_hidden_state
    assert (plain - hidden.last_hidden_state)[:, :4].abs().max() > 1e-4  # A differs when it sees B


def test_export_matches_torch_and_quantized_artifact_serves_whole_and_cached_calls(model, tmp_path):
    result = export_stream_onnx(model, tmp_path / "s.onnx", source_sha256="abc")
    assert result.max_abs_diff < 1e-3
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "streampunct.json").write_text(json.dumps({"labels": ["O", "COMMA", "PERIOD", "QUESTION"]}))
    out = build_stream_artifact(model, folder, source_sha256="abc", quantize_embeddings=False)
    assert out.name == STREAM_ARTIFACT
    assert json.loads((folder / "streampunct.json").read_text())["stream_artifact"] == STREAM_ARTIFACT
    engine = open_stream_engine(folder)
    assert isinstance(engine, OrtStreamEngine) and engine.has_case
    assert engine.stream_shape == layout(model)
    assert not engine.rows_independent  # dynamic int8: activation scales span the batch
    ids = np.array([[1, 5, 7, 9, 11, 2]], dtype=np.int64)
    logits, case = engine.infer_heads(ids, np.ones_like(ids))
    with torch.no_grad():
        ref, _ = model.forward_heads(torch.from_numpy(ids), torch.ones((1, 6), dtype=torch.long))
    assert (logits.argmax(-1) == ref.numpy().argmax(-1)).mean() >= 0.8
    assert case.shape == (1, 6, 4)
    layers, heads, dim = engine.stream_shape
    inputs = {"input_ids": ids[:, :3], "position_ids": np.array([[0, 4, 5]]),
              "attention_mask": np.ones((1, 7), np.int64),
              "past_kv": np.zeros((layers, 2, 1, heads, 4, dim), np.float16)}
    both, present = engine.infer_stream(inputs)
    assert both.shape == (1, 3, 8)  # punctuation then case logits
    assert present.shape == (layers, 2, 1, heads, 3, dim)


def test_a_folder_without_a_streaming_graph_says_so(tmp_path):
    (tmp_path / "streampunct.json").write_text("{}")
    with pytest.raises(ArtifactError, match="no streaming graph"):
        open_stream_engine(tmp_path)


def test_the_ordinary_graph_is_not_a_streaming_graph(model, tmp_path):
    from engines.build.onnx_export import export_onnx

    export_onnx(model, tmp_path / "m.onnx")
    with pytest.raises(ArtifactError, match="not a streaming graph"):
        OrtStreamEngine(tmp_path / "m.onnx")
    assert OrtEngine(tmp_path / "m.onnx").has_case


def test_interface_problems_name_what_is_wrong():
    ok_in = (TensorSpec("input_ids", "int64", ("batch", "new")), TensorSpec("position_ids", "int64", ("batch", "new")),
             TensorSpec("attention_mask", "int64", ("batch", "total")),
             TensorSpec("past_kv", "float16", (2, 2, "batch", 2, "past", 8)))
    ok_out = (TensorSpec("logits", "float32", ("batch", "new", 4)),
              TensorSpec("present_kv", "float16", (2, 2, "batch", 2, "new", 8)))
    assert stream_interface_problems(ok_in, ok_out) == []
    bad_past = (*ok_in[:3], TensorSpec("past_kv", "float32", (2, 2, "batch", 2, "past", 8)))
    assert any("past_kv" in p for p in stream_interface_problems(bad_past, ok_out))
    assert any("inputs are" in p for p in stream_interface_problems(ok_in[:2], ok_out))


def test_only_bert_and_mpnet_layout_encoders_are_supported():
    class NotBert(torch.nn.Module):
        encoder = torch.nn.Linear(2, 2)

    with pytest.raises(TypeError, match="BERT- or MPNet-layout"):
        stream_module(NotBert())


def test_a_graph_that_drifts_from_torch_is_refused(model, tmp_path):
    with pytest.raises(ExportError, match="differs from torch"):
        export_stream_onnx(model, tmp_path / "s.onnx", source_sha256="abc", atol=0.0)


# --- MPNet (models/base): a relative position bias computed from the positions ---------------


@pytest.fixture(scope="module")
def mpnet(tmp_path_factory):
    from transformers import MPNetConfig

    torch.set_num_threads(1)
    model = tiny_two_head_model(tmp_path_factory.mktemp("mpnet"), MPNetConfig(
        vocab_size=120, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=160, relative_attention_num_buckets=32), seed=1)
    with torch.no_grad():
        for layer in model.encoder.encoder.layer:
            layer.attention.attn.q.weight.mul_(20.0)
            layer.attention.attn.k.weight.mul_(20.0)
        model.encoder.encoder.relative_attention_bias.weight.mul_(5.0)  # positions matter
    return model


def _no_past(model, batch=1):
    layers, heads, dim = layout(model)
    return np.zeros((layers, 2, batch, heads, 0, dim), np.float16)


def test_mpnet_with_no_cache_is_the_whole_window(mpnet):
    module = stream_module(mpnet)
    ids = np.array([[0, 5, 7, 9, 11, 13, 2]], dtype=np.int64)
    logits, case, _ = _run(module, ids, np.arange(7)[None], np.ones((1, 7), np.int64), _no_past(mpnet))
    with torch.no_grad():
        ref, ref_case = mpnet.forward_heads(torch.from_numpy(ids), torch.ones((1, 7), dtype=torch.long))
    np.testing.assert_allclose(logits, ref.numpy(), atol=1e-5)
    np.testing.assert_allclose(case, ref_case.numpy(), atol=1e-5)


def _mpnet_masked_window(model, ids, old):
    """HF's MPNet on the whole window, the first ``old`` tokens not seeing the rest (an
    additive mask: MPNet adds the mask to its scores, so a boolean one would be ignored)."""
    n = ids.shape[1]
    add = torch.zeros((1, 1, n, n))
    add[0, 0, :old, old:] = torch.finfo(torch.float32).min
    with torch.no_grad():
        hidden = model.encoder(input_ids=torch.from_numpy(ids), attention_mask=add).last_hidden_state
        return model.head(hidden, torch.ones((1, n), dtype=torch.long)).numpy()


def test_mpnet_new_tokens_against_the_cache_see_it_at_its_positions(mpnet):
    """The cached keys carry no positions: they are the ones just before the first new token
    that is not CLS. A call of B after A's cache equals the window [A; B] with A blind to B."""
    module = stream_module(mpnet)
    a = np.array([[0, 5, 7, 9, 11]], dtype=np.int64)
    b = np.array([[13, 17, 19, 2]], dtype=np.int64)
    _, _, present_a = _run(module, a, np.arange(5)[None], np.ones((1, 5), np.int64), _no_past(mpnet))
    logits_b, _, _ = _run(module, b, np.arange(5, 9)[None], np.ones((1, 9), np.int64), present_a)
    ref = _mpnet_masked_window(mpnet, np.concatenate([a, b], axis=1), 5)
    np.testing.assert_allclose(logits_b, ref[:, 5:], atol=2e-3)  # float16 keys/values
    # The stream cache's own calls: CLS (position 0) first, then the new tokens after the cache.
    cls_b = np.concatenate([a[:, :1], b], axis=1)
    pos = np.array([[0, 5, 6, 7, 8]])
    logits_cls, _, _ = _run(module, cls_b, pos, np.ones((1, 10), np.int64), present_a)
    shifted, _, _ = _run(module, cls_b, pos + np.array([[0, 1, 1, 1, 1]]), np.ones((1, 10), np.int64), present_a)
    assert np.abs(logits_cls - shifted).max() > 1e-3  # a position off by one is a different bias


def test_mpnet_rows_with_different_cache_lengths_batch_as_they_run_alone(mpnet):
    module = stream_module(mpnet)
    layers, heads, dim = layout(mpnet)
    rng = np.random.default_rng(4)
    rows = []
    for past_len in (6, 3):
        prefix = np.concatenate([[0], rng.integers(5, 100, past_len)])[None].astype(np.int64)
        _, _, present = _run(module, prefix, np.arange(past_len + 1)[None], np.ones((1, past_len + 1), np.int64),
                             _no_past(mpnet))
        new = np.concatenate([[0], rng.integers(5, 100, 3), [2]])[None].astype(np.int64)
        pos = np.concatenate([[0], np.arange(past_len + 1, past_len + 5)])[None]
        kv = present[:, :, :, :, 1:]  # the decided tokens, CLS not kept
        alone, _, _ = _run(module, new, pos, np.ones((1, past_len + 5), np.int64), kv)
        rows.append((new, pos, kv, alone))
    c = 6
    past = np.zeros((layers, 2, 2, heads, c, dim), np.float16)
    mask = np.zeros((2, c + 5), np.int64)
    for k, (_, _, kv, _) in enumerate(rows):
        past[:, :, k, :, : kv.shape[4]] = kv[:, :, 0]
        mask[k, : kv.shape[4]] = 1
        mask[k, c:] = 1
    ids = np.concatenate([r[0] for r in rows])
    pos = np.concatenate([r[1] for r in rows])
    batched, _, _ = _run(module, ids, pos, mask, past)
    for k, (_, _, _, alone) in enumerate(rows):
        np.testing.assert_allclose(batched[k], alone[0], atol=1e-5)


def test_mpnet_int4_folder_gets_an_int4_streaming_graph_that_can_be_its_only_graph(mpnet, tmp_path):
    from engines.build.builder import BuildConfig, build_model_folder
    from engines.registry import load_engine
    from engines.sidecar import read_sidecar

    folder = tmp_path / "base"
    build_model_folder(mpnet, folder, config=BuildConfig(precision="int4"),
                       model_metadata={"labels": ["O", "COMMA", "PERIOD", "QUESTION"], "label_position": "last",
                                       "window": {"size": 30, "left": 6, "right": 4}, "head": "linear"})
    out = build_stream_artifact(mpnet, folder, source_sha256="abc", weights_from="model.int4.onnx (test)")
    assert out.name == "model.stream.int4.onnx"
    sidecar = read_sidecar(out)
    assert sidecar.precision == "int4" and sidecar.recipe["weights_from"] == "model.int4.onnx (test)"
    assert sidecar.recipe["block_size"] == read_sidecar(folder / "model.int4.onnx").recipe["block_size"]
    ids = np.tile(np.array([[0, 5, 7, 9, 11, 13, 17, 19, 23, 2]], dtype=np.int64), (2, 1))
    mask = np.ones_like(ids)
    mask[1, 7:] = 0
    own = load_engine("onnxruntime", folder).infer(ids, mask)
    meta = json.loads((folder / "streampunct.json").read_text())
    meta["artifact"] = out.name  # the streaming graph as the folder's one graph
    (folder / "streampunct.json").write_text(json.dumps(meta))
    (folder / "model.int4.onnx").unlink()
    engine = load_engine("onnxruntime", folder)
    assert isinstance(engine, OrtStreamEngine)
    np.testing.assert_allclose(engine.infer(ids, mask)[mask == 1], own[mask == 1], atol=1e-4)
