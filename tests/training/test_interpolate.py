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


def test_a_runtime_start_mixes_its_graph_and_dithers_the_mix(tiny_base_model, tmp_path):
    """models/base of release 3: (1 - t) * the release-2 graph (de-quantized) + t * the teacher,
    plus the graph's seeded +-half-step noise (what ``onnx_import --dither`` adds), so the 4-bit
    export keeps the mix instead of rounding it back to the old codes."""
    import numpy as np

    from training.onnx_import import import_runtime_model, onnx_state_dict

    from .test_onnx_import import runtime_folder

    runtime_folder(tiny_base_model, tmp_path / "rt", case_head=True, quantize_embeddings=True, precision="int4")
    tuned = checkpoint(tiny_base_model, tmp_path / "tuned", 2, case_head=True)
    b, _ = load_checkpoint(tuned)
    graph = onnx_state_dict(tmp_path / "rt" / "model.int4.onnx")
    name = "encoder.encoder.layer.1.output.dense.weight"
    plain = interpolate(tmp_path / "rt", tuned, 0.5, tmp_path / "plain")
    m, meta = load_checkpoint(plain)
    assert meta["interpolation"]["start_graph"].endswith("model.int4.onnx")
    torch.testing.assert_close(m.state_dict()[name], 0.5 * torch.from_numpy(graph[name]) + 0.5 * b.state_dict()[name])
    torch.testing.assert_close(m.case_head.linear.weight,
                               0.5 * torch.from_numpy(graph["case_head.linear.weight"]) + 0.5 * b.case_head.linear.weight)

    noisy = interpolate(tmp_path / "rt", tuned, 0.5, tmp_path / "noisy", dither=0.5, seed=16)
    n, meta = load_checkpoint(noisy)
    assert meta["interpolation"]["dither"] == 0.5 and meta["interpolation"]["seed"] == 16
    # the noise is exactly the dithered import's (same seed) minus the plain import
    d, _ = load_checkpoint(import_runtime_model(tmp_path / "rt", tmp_path / "d", base_model=str(tiny_base_model),
                                                dither=0.5, seed=16))
    noise = d.state_dict()[name] - torch.from_numpy(graph[name])
    assert float(noise.abs().max()) > 0
    assert torch.equal(n.state_dict()[name], m.state_dict()[name] + noise)
    step = float(np.abs(graph[name]).max()) / 7  # a 4-bit step is at most the tensor's max / 7
    assert float((n.state_dict()[name] - m.state_dict()[name]).abs().max()) <= 0.5 * step + 1e-6

    with pytest.raises(InputError, match="runtime model folder"):
        interpolate(tuned, tuned, 0.5, tmp_path / "x", dither=0.5)
