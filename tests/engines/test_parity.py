"""Parity figures, validation text reading, window encoding and F1."""

from __future__ import annotations

import numpy as np
import pytest

from engines.base import DataError
from engines.parity import (
    compare_logits,
    encode_windows,
    load_tokenizer,
    micro_f1,
    read_word_labels,
    word_predictions,
)

from .conftest import LABELS, VOCAB


def test_compare_logits_values():
    ref = np.zeros((1, 3, 2), np.float32)
    ref[0, :, 0] = [2.0, -4.0, 1.0]
    cand = ref.copy()
    cand[0, 1, 0] = -3.5  # still below 0: same label
    cand[0, 2, 0] = -1.0  # flips argmax of token 2
    report = compare_logits(ref, cand)
    assert report.max_abs_diff == pytest.approx(2.0)
    assert report.max_rel_diff == pytest.approx(0.5)  # 2.0 / max |ref| = 4.0
    assert report.label_agreement == pytest.approx(2 / 3)
    assert (report.n_tokens, report.n_labels) == (3, 3)
    masked = compare_logits(ref, cand, attention_mask=np.array([[1, 1, 0]]))
    assert masked.max_abs_diff == pytest.approx(0.5) and masked.label_agreement == 1.0
    at = compare_logits(ref, cand, positions=np.array([[0, 2]]))
    assert at.label_agreement == 0.0 and at.n_labels == 1


def test_compare_logits_shape_mismatch():
    with pytest.raises(ValueError, match="logit shapes differ"):
        compare_logits(np.zeros((1, 2, 3)), np.zeros((1, 2, 4)))


def test_read_word_labels(tmp_path):
    path = tmp_path / "d.tsv"
    path.write_text("Hello\tO\nworld\tCOMMA\n\tPERIOD\nhow\tO\n\tQUESTION\nfine\tO\n\n")
    data = read_word_labels(path, LABELS)
    assert data.words == ("hello", "world", "how", "fine")
    # An empty word gives its label to the previous word only if that one had none.
    assert data.labels.tolist() == [0, 1, 3, 0]
    assert read_word_labels(path, LABELS, max_lines=2).words == ("hello", "world")


@pytest.mark.parametrize(
    ("text", "message"),
    [("a\tO\nb\tEXCLAIM\n", r"d.tsv:2: unknown label 'EXCLAIM'"), ("a O\n", r"d.tsv:1: expected 'word<TAB>LABEL'"),
     ("\n\n", "holds no word/label lines")],
)
def test_read_word_labels_errors(tmp_path, text, message):
    path = tmp_path / "d.tsv"
    path.write_text(text)
    with pytest.raises(DataError, match=message):
        read_word_labels(path, LABELS)


def test_encode_windows_frames_and_label_positions(tiny_export, tiny_words):
    tokenizer = load_tokenizer(tiny_export.path.parent)
    data = read_word_labels(tiny_words, LABELS)
    windows = encode_windows(tokenizer, data, max_len=32)
    cls, sep = VOCAB.index("[CLS]"), VOCAB.index("[SEP]")
    lengths = windows.attention_mask.sum(axis=1)
    assert lengths.max() <= 32
    assert (windows.input_ids[:, 0] == cls).all()
    assert all(windows.input_ids[i, n - 1] == sep for i, n in enumerate(lengths))
    assert len(windows.positions) == len(data.words)
    # The label sits on the last sub-token: a split word "w1p3" -> w1 ##p3 labels ##p3.
    split = [i for i, w in enumerate(data.words) if w.endswith("p3")]
    assert split
    row, col = windows.positions[split[0]]
    assert windows.input_ids[row, col] == VOCAB.index("##p3")
    assert windows.input_ids[row, col - 1] == VOCAB.index(data.words[split[0]][:-2])
    first = encode_windows(tokenizer, data, max_len=32, label_position="first")
    row, col = first.positions[split[0]]
    assert first.input_ids[row, col] == VOCAB.index(data.words[split[0]][:-2])
    # Batches are trimmed to their longest window; head() keeps whole windows.
    ids, mask = next(windows.batches(2))
    assert ids.shape[1] == mask[:2].sum(axis=1).max()
    head = windows.head(2)
    assert len(head) == 2 and (head.positions[:, 0] < 2).all()


def test_word_predictions_and_micro_f1():
    gold = np.array([0, 1, 2, 3, 1, 0])
    pred = np.array([0, 1, 2, 0, 2, 1])
    scores = micro_f1(gold, pred, [1, 2, 3], LABELS)
    assert scores["COMMA"]["precision"] == pytest.approx(50.0)
    assert scores["COMMA"]["recall"] == pytest.approx(50.0)
    assert scores["QUESTION"]["f1"] == 0.0
    # overall: tp=2 (COMMA, PERIOD), fp=2, fn=2 -> P = R = F1 = 50
    assert scores["overall"]["f1"] == pytest.approx(50.0)
    assert scores["overall"]["support"] == 4
    logits = np.zeros((1, 3, 4), np.float32)
    logits[0, 1, 2] = 1.0
    from engines.parity import EvalWindows

    windows = EvalWindows(np.zeros((1, 3)), np.ones((1, 3)), np.array([[0, 1], [0, 2]]), np.array([2, 0]))
    assert word_predictions(logits, windows).tolist() == [2, 0]
