import math

import pytest

torch = pytest.importorskip("torch")

from training.data import IGNORE  # noqa: E402
from training.scl import scl_clean, scl_paper, select_anchors, supcon  # noqa: E402


def _hand_supcon(z, labels, t, base, guards=False):
    """Khosla et al.'s loss written out with Python floats."""
    n = len(z)
    dot = [[sum(a * b for a, b in zip(z[i], z[j], strict=True)) / t for j in range(n)] for i in range(n)]
    losses = []
    for i in range(n):
        denom = sum(math.exp(dot[i][a]) for a in range(n) if a != i)
        pos = [p for p in range(n) if p != i and labels[p] == labels[i]]
        if not pos:
            if guards:
                losses.append(-(t / base) * 1.0)  # the published code's (0 + eps) / (0 + eps)
            continue
        mean = sum(dot[i][p] - math.log(denom) for p in pos) / len(pos)
        losses.append(-(t / base) * mean)
    return sum(losses) / len(losses)


def _unit(v):
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v]


def test_clean_mode_equals_hand_computed_value_on_four_tokens():
    vectors = [[1.0, 0.5], [0.8, 0.9], [-0.3, 1.0], [0.2, -1.0]]
    labels = [1, 1, 0, 2]  # token 3 (QUESTION) has no positive: left out of the mean
    hidden = torch.tensor([vectors])  # [1, 4, 2]
    y = torch.tensor([labels])
    got = scl_clean(hidden, y, temperature=0.6, base_temperature=0.07)
    expected = _hand_supcon([_unit(v) for v in vectors], labels, 0.6, 0.07)
    assert float(got) == pytest.approx(expected, rel=1e-5)


def test_clean_mode_ignores_unlabelled_positions():
    vectors = [[1.0, 0.5], [9.0, 9.0], [0.8, 0.9], [-0.3, 1.0], [0.2, -1.0], [0.1, 0.1]]
    labels = [1, IGNORE, 1, 0, 0, IGNORE]
    got = scl_clean(torch.tensor([vectors]), torch.tensor([labels]), temperature=0.5, base_temperature=0.07)
    kept = [v for v, y in zip(vectors, labels, strict=True) if y != IGNORE]
    expected = _hand_supcon([_unit(v) for v in kept], [1, 1, 0, 0], 0.5, 0.07)
    assert float(got) == pytest.approx(expected, rel=1e-5)


def test_paper_mode_equals_hand_computed_value_on_four_tokens():
    # one sequence of 4 positions: a labelled COMMA, a non-label sub-token, a
    # labelled COMMA and a padding position; the last two become class O.
    vectors = [[1.0, 0.5], [0.8, 0.9], [-0.3, 1.0], [0.2, -1.0]]
    labels = [1, IGNORE, 1, IGNORE]
    # normalisation along the sequence axis: each hidden dimension over the 4 positions
    norms = [math.sqrt(sum(v[d] ** 2 for v in vectors)) for d in range(2)]
    z = [[v[d] / norms[d] for d in range(2)] for v in vectors]
    expected = _hand_supcon(z, [1, 0, 1, 0], 0.6, 0.07, guards=True)
    got = scl_paper(torch.tensor([vectors]), torch.tensor([labels]), temperature=0.6, base_temperature=0.07)
    assert float(got) == pytest.approx(expected, rel=1e-5)


def test_paper_guards_give_constant_for_anchor_without_positives():
    z = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]]), dim=-1)
    labels = torch.tensor([0, 0, 3])
    got = supcon(z, labels, temperature=0.6, base_temperature=0.07, paper_guards=True)
    expected = _hand_supcon(z.tolist(), labels.tolist(), 0.6, 0.07, guards=True)
    assert float(got) == pytest.approx(expected, rel=1e-5)


def test_scl_gradient_pulls_same_class_together():
    hidden = torch.tensor([[[1.0, 0.2], [0.2, 1.0], [1.0, -0.2], [-0.2, 1.0]]], requires_grad=True)
    labels = torch.tensor([[1, 0, 1, 0]])
    before = scl_clean(hidden, labels, temperature=0.5, base_temperature=0.07)
    before.backward()
    with torch.no_grad():
        moved = hidden - 0.1 * hidden.grad
    after = scl_clean(moved, labels, temperature=0.5, base_temperature=0.07)
    assert float(after) < float(before)


def test_anchor_selection_keeps_every_mark_and_bounds_the_size():
    labels = torch.tensor([0] * 50 + [1, 2, 3] + [0] * 50)
    idx = select_anchors(labels, 10, torch.Generator().manual_seed(0))
    assert len(idx) == 10
    assert {50, 51, 52} <= set(idx.tolist())
    big = scl_clean(torch.randn(1, 103, 8), labels.unsqueeze(0), temperature=0.6,
                    base_temperature=0.07, max_anchors=10)
    assert math.isfinite(float(big))
