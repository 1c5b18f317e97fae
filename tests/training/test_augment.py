"""Noise augmentation and streaming-aware cuts keep labels where the audio keeps them."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streampunct.labels import CAPITALIZED, COMMA, LOWER, PERIOD, QUESTION, O
from training.augment import FILLERS, IGNORE, NoiseConfig, augment
from training.data import EncodedDoc, cut_sequences, stream_cut

OFF = NoiseConfig(share=1.0, asr_rate=0.0, filler=0.0, repeat=0.0, restart=0.0, split_merge=0.0)
WORDS = ["so", "i", "went", "to", "the", "store", "and", "bought", "milk", "then", "what", "did", "you", "do"]
LABELS = [COMMA, O, O, O, O, O, O, O, PERIOD, O, O, O, O, QUESTION]


def run(cfg, seed=0, case=None, soft=None):
    return augment(WORDS, LABELS, case, soft, np.random.default_rng(seed), cfg)


def test_no_noise_is_identity():
    w, lab, case, soft = run(OFF, case=[1] * len(WORDS), soft=np.ones((len(WORDS), 4)))
    assert w == WORDS and lab == LABELS and case == [1] * len(WORDS)
    np.testing.assert_array_equal(soft, np.ones((len(WORDS), 4)))


def test_fillers_are_set_off_by_commas_and_keep_the_sentence_marks():
    cfg = NoiseConfig(share=1.0, asr_rate=0.0, filler=1.0, repeat=0.0, restart=0.0, split_merge=0.0)
    w, lab, case, soft = run(cfg, case=[LOWER] * len(WORDS), soft=np.ones((len(WORDS), 4)))
    filler_words = {x for f in FILLERS for x in f}
    noise = [c != LOWER for c in case]  # real words are all lowercase here
    kept = [(x, y) for x, y, f in zip(w, lab, noise, strict=True) if not f]
    # every real word once; before a filler (here: every word) O becomes COMMA, marks stay
    assert kept == [(x, COMMA if y == O else y) for x, y in zip(WORDS, LABELS, strict=True)]
    added = [x for x, f in zip(w, noise, strict=True) if f]
    assert len(added) >= len(WORDS) and all(x in filler_words for x in added)
    # "uh," / "you know,": the filler's last word takes the comma
    ends = [k for k, f in enumerate(noise) if f and (k + 1 == len(noise) or not noise[k + 1])]
    assert all(lab[k] == COMMA for k in ends)
    assert all(lab[k] == O for k, f in enumerate(noise) if f and k not in ends)
    # no case label for a filler, but the capital for one that starts a sentence ("milk. Um, then")
    for k, f in enumerate(noise):
        if f:
            starts = k > 0 and lab[k - 1] in (PERIOD, QUESTION)
            assert case[k] == (CAPITALIZED if starts else IGNORE), (k, w[k])
    assert np.isnan(soft[[i for i, f in enumerate(noise) if f]]).all()  # no teacher label for noise
    # a word whose O became COMMA has no teacher label either (the teacher said no comma)
    real = [i for i, f in enumerate(noise) if not f]
    relabelled = [i for i, y in zip(real, LABELS, strict=True) if y == O]
    assert np.isnan(soft[relabelled]).all()
    assert not np.isnan(soft[[i for i, y in zip(real, LABELS, strict=True) if y != O]]).any()


def test_noise_that_starts_a_sentence_takes_the_capital_from_the_word_after_it():
    words, labels = ["it", "ended", "then", "john", "came"], [O, PERIOD, O, O, PERIOD]
    case = [CAPITALIZED, LOWER, CAPITALIZED, CAPITALIZED, LOWER]  # "It ended. Then John came."
    cfg = NoiseConfig(share=1.0, asr_rate=0.0, filler=1.0, repeat=0.0, restart=0.0, split_merge=0.0)
    w, lab, c, _ = augment(words, labels, case, None, np.random.default_rng(3), cfg)
    k_then = w.index("then")
    # "It, uh, ended. Um, then, ...": the filler after the period takes the capital, "then" loses it
    # (IGNORE: a name would keep it); the first word of the document keeps its own
    assert c[0] == CAPITALIZED and c[k_then] == IGNORE
    assert c[w.index("ended") + 1] == CAPITALIZED and lab[w.index("ended")] == PERIOD
    k_john = w.index("john")
    assert c[k_john] == CAPITALIZED  # not after a sentence start: a name keeps its label
    # a repeated sentence-initial word: the first copy starts the sentence
    cfg = NoiseConfig(share=1.0, asr_rate=0.0, filler=0.0, repeat=1.0, restart=0.0, split_merge=0.0)
    w, lab, c, _ = augment(["the", "store", "closed"], [O, O, PERIOD], [CAPITALIZED, LOWER, LOWER], None,
                           np.random.default_rng(0), cfg)
    assert w[:3] == ["the", "the", "store"] and c[:3] == [CAPITALIZED, IGNORE, IGNORE]
    assert lab[:2] == [COMMA, O]
    # no case labels at all: nothing is invented
    _, _, none_case, _ = augment(words, labels, None, None, np.random.default_rng(3), cfg)
    assert none_case is None


def test_repetitions_and_restarts_leave_a_comma_on_the_abandoned_try():
    cfg = NoiseConfig(share=1.0, asr_rate=0.0, filler=0.0, repeat=1.0, restart=0.0, split_merge=0.0)
    w, lab, _, _ = augment(["i", "went"], [O, PERIOD], None, None, np.random.default_rng(0), cfg)
    assert w == ["i", "i", "went", "went"] and lab == [COMMA, O, COMMA, PERIOD]
    cfg = NoiseConfig(share=1.0, asr_rate=0.0, filler=0.0, repeat=0.0, restart=1.0, split_merge=0.0)
    w, lab, _, _ = augment(["to", "the", "store"], [O, O, PERIOD], None, None, np.random.default_rng(0), cfg)
    # "to, to the store.": the first try ends with a comma, the sentence mark stays once
    assert w[:3] == ["to", "to", "the"] and w[-1] == "store" and lab[-1] == PERIOD
    assert lab[0] == COMMA and lab.count(PERIOD) == 1


def test_deletion_passes_a_mark_to_the_word_before():
    cfg = NoiseConfig(share=1.0, asr_rate=1.0, substitute=0.0, delete=1.0, insert=0.0, filler=0.0,
                      repeat=0.0, restart=0.0, split_merge=0.0)
    w, lab, _, _ = run(cfg)
    assert w == []  # everything deleted at rate 1
    w, lab, _, _ = augment(["a", "b", "c"], [O, PERIOD, O], None, None, _FixedRng([1.0, 0.0, 1.0]), cfg)
    assert w == ["a", "c"] and lab == [PERIOD, O]


class _FixedRng:
    """A generator whose first uniform column is given (deletion draws), the rest 1.0 (nothing else fires)."""

    def __init__(self, first):
        self.first = first

    def random(self, shape):
        out = np.ones(shape)
        if out.ndim == 2:
            out[:, 0] = self.first
        return out

    def integers(self, lo, hi, size):
        return np.full(size, lo)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), rate=st.floats(0.0, 0.5))
def test_noise_keeps_lengths_consistent_and_marks_count(seed, rate):
    cfg = NoiseConfig(share=1.0, asr_rate=rate, filler=rate, repeat=rate, restart=rate, split_merge=rate)
    w, lab, case, soft = run(cfg, seed, case=[0] * len(WORDS), soft=np.zeros((len(WORDS), 8)))
    assert len(w) == len(lab) == len(case) == len(soft)
    assert all(x for x in w) and set(lab) <= {O, COMMA, PERIOD, QUESTION}
    # noise never invents sentence ends (only commas, around fillers and abandoned tries)
    assert sum(x in (PERIOD, QUESTION) for x in lab) <= sum(x in (PERIOD, QUESTION) for x in LABELS)


def test_same_seed_same_noise():
    cfg = NoiseConfig(share=1.0, asr_rate=0.3, filler=0.2)
    assert run(cfg, 7)[:2] == run(cfg, 7)[:2]
    assert run(cfg, 7)[:2] != run(cfg, 8)[:2]


def test_stream_cut_ends_a_span_at_a_random_word():
    doc = EncodedDoc(ids=np.arange(20, dtype=np.int32), word_start=np.arange(21), label_tok=np.arange(20),
                     labels=np.zeros(20, dtype=np.int64))
    rng = np.random.default_rng(0)
    ends = {stream_cut(doc, 0, 10, rng)[1] for _ in range(300)}
    assert ends == set(range(1, 11))  # anywhere from one word to the whole span
    assert stream_cut(doc, 3, 4, rng) == (3, 4)
    assert cut_sequences(doc, 10, 0) == [(0, 10), (10, 20)]


def test_noise_config_is_validated():
    from streampunct.errors import InputError

    with pytest.raises(InputError, match="data.noise.share"):
        NoiseConfig(share=2.0).validate()
    with pytest.raises(InputError, match="positive sum"):
        NoiseConfig(substitute=0, delete=0, insert=0).validate()
