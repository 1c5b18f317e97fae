import json

import numpy as np
import pytest

from training.data import Document
from training.distill import read_soft_labels, write_soft_labels
from training.soft_density import density, gate, main


def _probs(argmax: list[int]) -> np.ndarray:
    """Probabilities over 4 punctuation classes (then 4 case classes) with the given argmax."""
    p = np.full((len(argmax), 8), 0.05)
    p[np.arange(len(argmax)), argmax] = 0.85
    p[:, 4] = 0.85
    return p


def _file(tmp_path, tedx_marks: int):
    """ted: 10 words, the teacher marks 2 (gold 3); swda: 4 words, 1 mark; tedx: 10 words (two
    documents), the teacher marks ``tedx_marks`` of them."""
    ted = Document("ted:1", [f"w{i}" for i in range(10)], [0, 1, 0, 0, 2, 0, 0, 0, 0, 2], case=[0] * 10)
    swda = Document("swda:0", ["uh", "yes", "i", "know"], [1, 0, 0, 2])
    tedx = [Document(f"tedx:{k}", [f"c{k}{i}" for i in range(5)], [0] * 5, True) for k in range(2)]
    teacher_tedx = [2 if i < tedx_marks else 0 for i in range(10)]
    docs = [ted, tedx[0], swda, tedx[1]]
    probs = [_probs([0, 1, 0, 0, 0, 0, 0, 0, 0, 2]), _probs(teacher_tedx[:5]), _probs([0, 0, 0, 2]),
             _probs(teacher_tedx[5:])]
    return write_soft_labels(tmp_path / "soft.npz", docs, probs, {"teacher": "t"})


def test_density_counts_teacher_and_gold_marks_per_source(tmp_path):
    with np.load(_file(tmp_path, tedx_marks=1)) as z:
        report = density({k: z[k] for k in z.files})
    assert report["ted"] == {"documents": 1, "words": 10, "teacher_marks_per_100_words": 20.0,
                             "gold_marks_per_100_words": 30.0}
    assert report["swda"]["teacher_marks_per_100_words"] == 25.0 and report["swda"]["gold_marks_per_100_words"] == 50.0
    # the captions have no human labels, and their two documents (apart in the file) count together
    assert report["tedx"] == {"documents": 2, "words": 10, "teacher_marks_per_100_words": 10.0,
                              "gold_marks_per_100_words": None}


def test_a_sparse_source_is_left_out_and_the_rest_is_unchanged(tmp_path):
    path = _file(tmp_path, tedx_marks=1)
    report = gate(path, min_ratio=0.95, out=tmp_path / "kept.npz")
    assert report["ratio"] == 0.5 and report["dropped"] is True
    kept, meta = read_soft_labels(tmp_path / "kept.npz")
    assert [d.name for d in kept] == ["ted:1", "swda:0"]
    assert meta["dropped_sources"] == ["tedx"] and meta["words"] == 14 and meta["teacher"] == "t"
    before = {d.name: d for d in read_soft_labels(path)[0]}
    for d in kept:  # human labels, case and probabilities as they were
        assert d.words == before[d.name].words and d.labels == before[d.name].labels
        assert d.case == before[d.name].case and not d.pseudo
        np.testing.assert_array_equal(d.soft, before[d.name].soft)


def test_a_dense_enough_source_is_kept_as_a_copy(tmp_path):
    path = _file(tmp_path, tedx_marks=2)
    report = gate(path, min_ratio=0.95, out=tmp_path / "kept.npz")
    assert report["ratio"] == 1.0 and report["dropped"] is False
    assert (tmp_path / "kept.npz").read_bytes() == path.read_bytes()


def test_the_cli_prints_the_decision_and_writes_the_report(tmp_path, capsys):
    path = _file(tmp_path, tedx_marks=1)
    rc = main([str(path), "--min-ratio", "0.95", "--out", str(tmp_path / "k.npz"), "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "tedx: 10 words, teacher 10.0 marks per 100 words (no human labels)" in out
    assert "ratio tedx / ted: 0.5" in out and "left out tedx (bound 0.95)" in out
    assert json.loads((tmp_path / "r.json").read_text())["dropped"] is True


@pytest.mark.parametrize("args, message", [
    (["--check", "mrda"], "has no documents of source 'mrda' (it has swda, ted, tedx)"),
    (["--min-ratio", "0.9"], "--min-ratio and --out go together"),
])
def test_bad_requests_are_refused_with_what_is_wrong(tmp_path, capsys, args, message):
    path = _file(tmp_path, tedx_marks=1)
    assert main([str(path), *args]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_file_is_an_error(tmp_path, capsys):
    assert main([str(tmp_path / "none.npz")]) == 2
    assert "no such soft-label file" in capsys.readouterr().err


def _not_soft_labels(tmp_path, kind):
    path = tmp_path / f"{kind}.npz"
    if kind == "binary":
        path.write_bytes(bytes(range(256)) * 4)  # numpy would read it as a pickle, and refuse
    elif kind == "npy":
        np.save(tmp_path / "a.npy", np.zeros(3))
        (tmp_path / "a.npy").rename(path)
    elif kind == "truncated":
        path.write_bytes(_file(tmp_path, tedx_marks=1).read_bytes()[:200])
    else:  # an .npz of other arrays
        np.savez(path, probs=np.zeros(3), names=np.zeros(2))
    return path


@pytest.mark.parametrize(("kind", "why"), [("binary", ""), ("npy", ""), ("truncated", ""),
                                           ("foreign", ": it has no labels, case, lengths, text, meta")])
def test_a_file_that_is_no_soft_label_file_is_one_line(tmp_path, capsys, kind, why):
    path = _not_soft_labels(tmp_path, kind)
    assert main([str(path)]) == 2
    assert capsys.readouterr().err == (f"error: {path} is not a soft-label file "
                                       f"(an .npz written by python -m training.distill label){why}\n")
    with pytest.raises(ValueError, match="is not a soft-label file"):  # training reads it the same way
        read_soft_labels(path)
