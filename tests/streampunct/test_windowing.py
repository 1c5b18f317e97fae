import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streampunct.core.decoder import decode_offline
from streampunct.core.windowing import (
    TokenLayout,
    WindowConfig,
    offline_windows,
    pad_batch,
    plan_offline,
    select_window,
)
from tests.streampunct.fakes import FakeAligner, fake_infer, fake_label

MAX_WORD = 6


@st.composite
def geometry(draw):
    left = draw(st.integers(0, 30))
    right = draw(st.integers(0, 30))
    size = draw(st.integers(left + right + 2 * MAX_WORD, left + right + 2 * MAX_WORD + 60))
    return WindowConfig(size, left, right)


@settings(max_examples=300, deadline=None)
@given(
    counts=st.lists(st.integers(1, MAX_WORD), min_size=1, max_size=300),
    cfg=geometry(),
    position=st.sampled_from(["last", "first"]),
)
def test_offline_plan_decides_each_word_once_with_context(counts, cfg, position):
    layout = TokenLayout.from_counts(counts, position)
    windows = plan_offline(layout, cfg)
    total = layout.ends[-1]
    decided = [j for w in windows for j in range(w.first_word, w.last_word + 1)]
    assert decided == list(range(len(counts)))
    for w in windows:
        assert w.token_end - w.token_start <= cfg.size
        assert w.token_start in layout.starts and w.token_end in layout.ends  # whole words only
        for j in range(w.first_word, w.last_word + 1):
            lp = layout.label_pos[j]
            assert w.token_start <= layout.starts[j] and layout.ends[j] <= w.token_end
            if w.token_start > 0:
                assert lp - w.token_start >= cfg.left
            if w.token_end < total:
                assert w.token_end - 1 - lp >= cfg.right


def test_step_is_about_size_minus_overlaps():
    layout = TokenLayout.from_counts([1] * 1000)
    windows = plan_offline(layout, WindowConfig(126, 40, 20))
    steps = {windows[k + 1].first_word - windows[k].first_word for k in range(1, len(windows) - 2)}
    assert steps == {66}
    assert windows[0].token_start == 0 and windows[0].last_word == 105


def test_window_geometry_validation():
    with pytest.raises(ValueError, match="too small"):
        WindowConfig(40, 20, 20).validate_for(16)
    with pytest.raises(ValueError):
        WindowConfig(10, -1, 0)


def test_select_window_decides_only_what_has_right_context():
    layout = TokenLayout.from_counts([1] * 50)
    w = select_window(layout, 0, 49, 50, WindowConfig(30, 5, 5))
    assert (w.token_start, w.token_end, w.first_word, w.last_word) == (0, 30, 0, 24)


def test_pad_batch():
    ids, mask = pad_batch([np.array([1, 5, 2]), np.array([1, 2])], pad_id=0)
    assert ids.tolist() == [[1, 5, 2], [1, 2, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert ids.dtype == np.int64 and mask.dtype == np.int64


@settings(max_examples=50, deadline=None)
@given(counts=st.lists(st.integers(1, MAX_WORD), min_size=1, max_size=200), batch=st.integers(1, 8))
def test_decode_offline_reads_each_words_label_token(counts, batch):
    aligner = FakeAligner()
    words = [aligner.word(n, k) for k, n in enumerate(counts)]
    logits = decode_offline(words, aligner, WindowConfig(40, 8, 6), fake_infer, batch_size=batch)
    expected = [fake_label(aligner.word_ids(w)[-1]) for w in words]
    assert np.argmax(logits, axis=-1).tolist() == expected


def test_decode_offline_empty():
    assert decode_offline([], FakeAligner(), WindowConfig(), fake_infer).shape == (0, 4)


@settings(max_examples=50, deadline=None)
@given(counts=st.lists(st.integers(1, MAX_WORD), min_size=1, max_size=200),
       position=st.sampled_from(["last", "first"]))
def test_offline_windows_are_the_offline_decoders_windows(counts, position):
    aligner = FakeAligner(position)
    words = [aligner.word(n, k) for k, n in enumerate(counts)]
    cfg = WindowConfig(40, 8, 6)
    batch = offline_windows([aligner.word_ids(w) for w in words], cfg, label_position=position,
                            cls_id=aligner.cls_id, sep_id=aligner.sep_id, pad_id=aligner.pad_id)
    lengths = batch.attention_mask.sum(axis=1)
    assert (batch.input_ids[:, 0] == aligner.cls_id).all()
    assert all(batch.input_ids[row, n - 1] == aligner.sep_id for row, n in enumerate(lengths))
    assert lengths.max() <= cfg.size + 2 and len(batch.positions) == len(words)
    rows, cols = batch.positions[:, 0], batch.positions[:, 1]
    expected = [aligner.word_ids(w)[aligner.label_offset(len(aligner.word_ids(w)))] for w in words]
    assert batch.input_ids[rows, cols].tolist() == expected
    logits = fake_infer(batch.input_ids, batch.attention_mask)[rows, cols]
    decoded = decode_offline(words, aligner, cfg, fake_infer)
    assert logits.argmax(-1).tolist() == decoded.argmax(-1).tolist()
