"""Dropping encoder layers for a shallower student."""

import pytest

torch = pytest.importorskip("torch")

from streampunct.errors import InputError  # noqa: E402
from training.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from training.drop_layers import drop_layers  # noqa: E402
from training.model import build_model  # noqa: E402

META = {"label_position": "last", "max_word_tokens": 8, "window": {"size": 30, "left": 6, "right": 4}}


def test_kept_layers_keep_their_weights_and_order(tiny_base_model, tmp_path):
    torch.manual_seed(3)
    src = save_checkpoint(tmp_path / "src", build_model(tiny_base_model, random_init=True, dropout=0.0,
                                                         case_head=True), tiny_base_model, {**META, "name": "m"})
    full, _ = load_checkpoint(src)
    n = len(full.encoder.encoder.layer)
    assert n >= 2
    out = drop_layers(src, [n - 1], tmp_path / "small")
    small, meta = load_checkpoint(out)
    assert small.encoder.config.num_hidden_layers == 1
    assert len(small.encoder.encoder.layer) == 1
    assert meta["drop_layers"] == {"from": str(src), "layers": n, "kept": [n - 1]}
    assert meta["window"] == META["window"]
    sd_full, sd_small = full.state_dict(), small.state_dict()
    w = "encoder.encoder.layer.{}.output.dense.weight"
    torch.testing.assert_close(sd_small[w.format(0)], sd_full[w.format(n - 1)])
    torch.testing.assert_close(small.head.linear.weight, full.head.linear.weight)
    torch.testing.assert_close(small.case_head.linear.weight, full.case_head.linear.weight)
    ids = torch.tensor([[1, 5, 6, 7, 2]])
    assert small(ids, torch.ones_like(ids)).shape == full(ids, torch.ones_like(ids)).shape


def test_bad_layer_lists_are_errors(tiny_base_model, tmp_path):
    src = save_checkpoint(tmp_path / "src", build_model(tiny_base_model, random_init=True, dropout=0.0),
                          tiny_base_model, {**META, "name": "m"})
    with pytest.raises(InputError, match="has layers 0"):
        drop_layers(src, [0, 99], tmp_path / "a")
    with pytest.raises(InputError, match="increasing"):
        drop_layers(src, [1, 0], tmp_path / "b")
    with pytest.raises(InputError, match="no layer"):
        drop_layers(src, [], tmp_path / "c")
