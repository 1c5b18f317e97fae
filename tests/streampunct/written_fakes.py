"""Test doubles for written forms: a tiny number normalizer, a word-level aligner and model."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from streampunct.labels import O
from streampunct.text.written_form import Phrase

NUMBERS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve".split())}
NUMBERS.update({w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())})


class FakeNormalizer:
    """Runs of number words as digits ("twenty five" -> "25", "two hundred five" -> "205"),
    "dollars" after a run -> "$25"; one word below ten stays spoken. Context-free and greedy,
    like a WFST's longest match. ``calls`` records every run it was asked about."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def phrases(self, words: Sequence[str], *, first: int = 0, until: int | None = None) -> list[Phrase]:
        self.calls.append(tuple(words))
        out: list[Phrase] = []
        i, n = 0, len(words)
        while i < n:
            if words[i] not in NUMBERS:
                i += 1
                continue
            j, value = i, 0
            while j < n and (words[j] in NUMBERS or (words[j] == "hundred" and j > i)):
                value = value * 100 if words[j] == "hundred" else value + NUMBERS[words[j]]
                j += 1
            text = str(value)
            if j < n and words[j] == "dollars":
                text, j = f"${value}", j + 1
            elif j - i == 1 and value < 10:
                i = j
                continue
            out.append(Phrase(i, j, text))
            i = j
        return out


class WordAligner:
    """One token per word; ids are given out in order of first sight (and can be read back)."""

    cls_id, sep_id, pad_id, unk_id = 1, 2, 0, 3
    label_position = "last"

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.words: dict[int, str] = {}

    def word_ids(self, word: str) -> tuple[int, ...]:
        if word not in self.ids:
            self.ids[word] = 10 + len(self.ids)
            self.words[self.ids[word]] = word
        return (self.ids[word],)

    def label_offset(self, n_tokens: int) -> int:
        return n_tokens - 1


def marks_model(aligner: WordAligner, marks: dict[str, int]):
    """A model that labels each word by ``marks`` (default O), whatever its context."""

    def infer(input_ids: np.ndarray) -> np.ndarray:
        labels = [marks.get(aligner.words.get(int(t), ""), O) for t in np.asarray(input_ids)]
        logits = np.zeros((len(labels), 4), dtype=np.float32)
        logits[np.arange(len(labels)), labels] = 1.0
        return logits

    return infer
