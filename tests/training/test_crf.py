import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from training.crf import CRF, viterbi_numpy  # noqa: E402
from training.data import IGNORE  # noqa: E402
from training.heads import gather_labelled  # noqa: E402


def _path_score(crf, em, path):
    s = float(crf.start[path[0]]) + float(em[0, path[0]])
    for t in range(1, len(path)):
        s += float(crf.transitions[path[t - 1], path[t]]) + float(em[t, path[t]])
    return s + float(crf.end[path[-1]])


def _crf(c, seed):
    torch.manual_seed(seed)
    crf = CRF(c)
    with torch.no_grad():
        crf.transitions.normal_()
        crf.start.normal_()
        crf.end.normal_()
    return crf


@pytest.mark.parametrize("seed", range(5))
def test_viterbi_equals_brute_force(seed):
    c, b, length = 3, 4, 5
    crf = _crf(c, seed)
    em = torch.randn(b, length, c)
    lengths = [5, 3, 1, 4]
    mask = torch.arange(length).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    paths = crf.viterbi(em, mask)
    for row, n in enumerate(lengths):
        best = max(itertools.product(range(c), repeat=n), key=lambda p, r=row: _path_score(crf, em[r], p))
        assert tuple(paths[row]) == best
        np_path = viterbi_numpy(em[row, :n].numpy(), crf.transitions.detach().numpy(),
                                crf.start.detach().numpy(), crf.end.detach().numpy())
        assert tuple(np_path.tolist()) == best


def test_nll_equals_brute_force_partition():
    c, length = 3, 4
    crf = _crf(c, 7)
    em = torch.randn(2, length, c)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    tags = torch.tensor([[0, 2, 1, 1], [2, 2, 0, 0]])
    nll = crf.nll(em, tags, mask)
    for row, n in enumerate([4, 2]):
        log_z = np.logaddexp.reduce([_path_score(crf, em[row], p)
                                     for p in itertools.product(range(c), repeat=n)])
        expected = log_z - _path_score(crf, em[row], tags[row, :n].tolist())
        assert float(nll[row]) == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_gather_labelled_left_aligns_label_positions():
    labels = torch.tensor([[IGNORE, 1, IGNORE, 0, 2, IGNORE], [IGNORE, IGNORE, 3, IGNORE, IGNORE, IGNORE]])
    em = torch.arange(2 * 6 * 4, dtype=torch.float32).reshape(2, 6, 4)
    words, tags, mask = gather_labelled(em, labels)
    assert mask.tolist() == [[True, True, True], [True, False, False]]
    assert tags.tolist() == [[1, 0, 2], [3, 0, 0]]
    torch.testing.assert_close(words[0], em[0, [1, 3, 4]])
    torch.testing.assert_close(words[1, 0], em[1, 2])
