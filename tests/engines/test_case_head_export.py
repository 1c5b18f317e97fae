"""A model with a truecasing head exports to a two-output graph that the runtime renders with."""


import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")

from engines.base import CASE_OUTPUT_NAME, OUTPUT_NAME  # noqa: E402
from engines.build.onnx_export import export_onnx  # noqa: E402
from engines.ort_engine import OrtEngine  # noqa: E402
from streampunct.labels import CAPITALIZED, LOWER, UPPER  # noqa: E402
from streampunct.text.normalize import apply_case, render  # noqa: E402
from tests.engines.conftest import tiny_two_head_model  # noqa: E402


@pytest.fixture(scope="module")
def two_head_model(tmp_path_factory):
    from transformers import BertConfig

    return tiny_two_head_model(tmp_path_factory.mktemp("bert"), BertConfig(
        vocab_size=120, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=64))


def test_export_has_both_heads_and_matches_torch(two_head_model, tmp_path):
    result = export_onnx(two_head_model, tmp_path / "m.onnx")
    assert [t.name for t in result.sidecar.outputs] == [OUTPUT_NAME, CASE_OUTPUT_NAME]
    assert result.num_labels == 4
    engine = OrtEngine(tmp_path / "m.onnx")
    assert engine.has_case
    ids = np.array([[1, 5, 7, 9, 2, 0]], dtype=np.int64)
    mask = np.array([[1, 1, 1, 1, 1, 0]], dtype=np.int64)
    logits, case = engine.infer_heads(ids, mask)
    with torch.no_grad():
        want_p, want_c = two_head_model.forward_heads(torch.from_numpy(ids), torch.from_numpy(mask))
    np.testing.assert_allclose(logits, want_p.numpy(), atol=1e-4)
    np.testing.assert_allclose(case, want_c.numpy(), atol=1e-4)
    np.testing.assert_allclose(engine.infer(ids, mask), logits, atol=1e-6)  # punctuation alone


def test_one_head_graph_has_no_case(tmp_path):
    from transformers import BertConfig

    from training.model import build_model

    folder = tmp_path / "bert1"
    BertConfig(vocab_size=120, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=32, max_position_embeddings=64).save_pretrained(folder)
    export_onnx(build_model(folder, random_init=True).eval(), tmp_path / "one.onnx")
    engine = OrtEngine(tmp_path / "one.onnx")
    ids = np.array([[1, 5, 2]], dtype=np.int64)
    assert not engine.has_case
    logits, case = engine.infer_heads(ids, np.ones_like(ids))
    assert case is None and logits.shape == (1, 3, 4)


def test_render_with_learned_case_keeps_sentence_rules():
    words = ["nasa", "and", "john", "said", "i", "agree"]
    labels = [0, 0, 0, 0, 0, 2]
    cases = [UPPER, LOWER, CAPITALIZED, LOWER, LOWER, LOWER]
    assert render(words, labels, capitalize=True, cases=cases) == "NASA and John said I agree."
    assert render(words, labels, capitalize=False, cases=cases) == "nasa and john said i agree."
    assert render(words, labels, capitalize=True) == "Nasa and john said I agree."  # rules only
    assert apply_case("iphone", 3) == "Iphone"
    with pytest.raises(ValueError, match="case classes"):
        render(words, labels, cases=[LOWER])
