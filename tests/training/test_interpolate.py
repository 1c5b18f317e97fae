"""Weight-space interpolation between a starting checkpoint and its fine-tuned descendant."""

import pytest

torch = pytest.importorskip("torch")

from streampunct.errors import InputError  # noqa: E402
from training.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from training.interpolate import interpolate  # noqa: E402
from training.model import build_model  # noqa: E402

META = {"label_position": "last", "max_word_tokens": 8, "window": {"size": 30, "left": 6, "right": 4}}


def checkpoint(base, path, seed, *, case_head):
    torch.manual_seed(seed)
    model = build_model(base, random_init=True, dropout=0.0, case_head=case_head)
    return save_checkpoint(path, model, base, {**META, "name": path.name})


def test_interpolation_mixes_shared_weights_and_keeps_the_rest(tiny_base_model, tmp_path):
    start = checkpoint(tiny_base_model, tmp_path / "start", 1, case_head=False)
    tuned = checkpoint(tiny_base_model, tmp_path / "tuned", 2, case_head=True)
    a, _ = load_checkpoint(start)
    b, _ = load_checkpoint(tuned)
    for t in (0.0, 0.25, 1.0):
        out = interpolate(start, tuned, t, tmp_path / f"mix{t}")
        m, meta = load_checkpoint(out)
        assert meta["interpolation"] == {"start": str(start), "tuned": str(tuned), "t": t}
        assert meta["window"] == META["window"]
        w = "encoder.encoder.layer.1.output.dense.weight"
        want = (1 - t) * a.state_dict()[w] + t * b.state_dict()[w]
        torch.testing.assert_close(m.state_dict()[w], want)
        torch.testing.assert_close(m.head.linear.weight, (1 - t) * a.head.linear.weight + t * b.head.linear.weight)
        torch.testing.assert_close(m.case_head.linear.weight, b.case_head.linear.weight)  # only in tuned


def test_bad_weight_and_missing_parameters_are_errors(tiny_base_model, tmp_path):
    start = checkpoint(tiny_base_model, tmp_path / "start", 1, case_head=True)
    tuned = checkpoint(tiny_base_model, tmp_path / "tuned", 2, case_head=False)
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        interpolate(start, tuned, 1.5, tmp_path / "x")
    from streampunct.errors import ModelError

    with pytest.raises(ModelError, match="lacks"):
        interpolate(start, tuned, 0.5, tmp_path / "y")
