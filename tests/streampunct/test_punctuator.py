"""The offline punctuator: a complete text ends its last sentence."""

import numpy as np

from engines.base import EngineBase
from streampunct.core.decoder import OfflineDecoder
from streampunct.core.windowing import WindowConfig
from streampunct.labels import PERIOD, QUESTION, O
from tests.streampunct.fakes import FakeAligner


def test_offline_punctuator_applies_the_end_of_stream_rule_to_the_last_word_only():
    aligner = FakeAligner()
    words = [aligner.word(1, k) for k in range(5)]
    question = aligner.word_ids(words[-1])[0]

    class Engine(EngineBase):
        def infer(self, input_ids, attention_mask):
            logits = np.zeros((*input_ids.shape, 4), dtype=np.float32)
            logits[..., O] = 2.0
            logits[..., QUESTION] = np.where(input_ids == question, 1.0, -1.0)
            return logits

    p = OfflineDecoder(Engine(), aligner, WindowConfig(40, 8, 6))
    assert p.punctuate(words) == [O, O, O, O, QUESTION]
    assert p.punctuate(words, end_of_stream=False) == [O] * 5
    assert p.punctuate(words[:2]) == [O, PERIOD]  # period 0 beats question -1


def test_a_model_with_a_case_head_ends_the_text_too():
    """``capitalize`` with a truecasing head decodes both heads at once: the rule still holds."""
    aligner = FakeAligner()
    words = [aligner.word(1, k) for k in range(5)]
    question = aligner.word_ids(words[-1])[0]

    class Engine(EngineBase):
        has_case = True

        def infer(self, input_ids, attention_mask):
            logits = np.zeros((*input_ids.shape, 4), dtype=np.float32)
            logits[..., O] = 2.0
            logits[..., QUESTION] = np.where(input_ids == question, 1.0, -1.0)
            return logits

        def infer_heads(self, input_ids, attention_mask):
            case = np.zeros((*input_ids.shape, 4), dtype=np.float32)
            case[..., 1] = np.where(input_ids == question, 1.0, -1.0)  # last word Capitalized
            return self.infer(input_ids, attention_mask), case

    p = OfflineDecoder(Engine(), aligner, WindowConfig(40, 8, 6))
    labels, cases = p.labels_and_cases(words)
    assert labels == [O, O, O, O, QUESTION]
    assert cases == [0, 0, 0, 0, 1]
    assert p.labels_and_cases(words, end_of_stream=False)[0] == [O] * 5
    assert p.labels_and_cases(words[:2])[0] == [O, PERIOD]
