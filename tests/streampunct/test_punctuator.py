"""The offline punctuator: a complete text ends its last sentence."""

import numpy as np

from streampunct.labels import PERIOD, QUESTION, O
from streampunct.punctuator import Punctuator
from streampunct.windowing import WindowConfig
from tests.streampunct.fakes import FakeAligner


def test_offline_punctuator_applies_the_end_of_stream_rule_to_the_last_word_only():
    aligner = FakeAligner()
    words = [aligner.word(1, k) for k in range(5)]
    question = aligner.word_ids(words[-1])[0]

    class Engine:
        def infer(self, input_ids, attention_mask):
            logits = np.zeros((*input_ids.shape, 4), dtype=np.float32)
            logits[..., O] = 2.0
            logits[..., QUESTION] = np.where(input_ids == question, 1.0, -1.0)
            return logits

    p = Punctuator(Engine(), aligner, WindowConfig(40, 8, 6))
    assert p.punctuate(words) == [O, O, O, O, QUESTION]
    assert p.punctuate(words, end_of_stream=False) == [O] * 5
    assert p.punctuate(words[:2]) == [O, PERIOD]  # period 0 beats question -1
