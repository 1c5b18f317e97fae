"""Parity figures on given windows."""

from __future__ import annotations

import numpy as np
import pytest

from engines.build.parity import ParityWindows, compare_logits, parity_on_windows


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


def test_windows_batches_are_trimmed_and_head_keeps_whole_windows(tiny_windows):
    ids, mask = next(tiny_windows.batches(2))
    assert ids.shape[1] == mask.sum(axis=1).max()
    head = tiny_windows.head(2)
    assert len(head) == 2 and (head.positions[:, 0] < 2).all()
    assert len(head.positions) == int((tiny_windows.positions[:, 0] < 2).sum())
    feed = tiny_windows.calibration_feed(3)
    assert feed["input_ids"].shape[0] == 3 and feed["attention_mask"].dtype == np.int64


def test_parity_on_windows_compares_label_tokens_only():
    ids = np.array([[1, 2, 3, 0]], np.int64)
    mask = np.array([[1, 1, 1, 0]], np.int64)
    windows = ParityWindows(ids, mask, np.array([[0, 1]]))

    def reference(i, m):
        out = np.zeros((*i.shape, 2), np.float32)
        out[..., 0] = 1.0
        return out

    def candidate(i, m):
        out = reference(i, m)
        out[0, 2, 1] = 3.0  # flips the argmax of token 2, which carries no label
        return out

    report = parity_on_windows(reference, candidate, windows)
    assert report.label_agreement == 1.0 and report.n_labels == 1
    assert report.max_abs_diff == pytest.approx(3.0) and report.n_tokens == 3
