"""Test doubles for the pure core: an aligner with chosen word lengths, a model."""

from __future__ import annotations

import numpy as np


class FakeAligner:
    """Word ``"t{n}x{k}"`` has n sub-tokens; ids encode (word serial, sub-token)."""

    cls_id, sep_id, pad_id, unk_id = 1, 2, 0, 3

    def __init__(self, label_position: str = "last") -> None:
        self.label_position = label_position

    @staticmethod
    def word(n_tokens: int, serial: int) -> str:
        return f"t{n_tokens}x{serial}"

    def word_ids(self, word: str) -> tuple[int, ...]:
        n, serial = word[1:].split("x")
        return tuple(10 + int(serial) * 16 + k for k in range(int(n)))

    def label_offset(self, n_tokens: int) -> int:
        return n_tokens - 1 if self.label_position == "last" else 0


def fake_label(token_id: int) -> int:
    """A deterministic 'model': the label depends only on the token itself."""
    return (token_id * 7919) % 4


def fake_infer(input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    logits = np.zeros(input_ids.shape + (4,), dtype=np.float32)
    labels = (input_ids * 7919) % 4
    np.put_along_axis(logits, labels[..., None], 1.0, axis=-1)
    return logits * attention_mask[..., None]


def ended(labels: list[int]) -> list[int]:
    """``labels`` of one-hot logits (the fake engines') as a stream's ``end`` leaves them.

    The last word's O or COMMA becomes a sentence mark; with one-hot logits
    the period and question logits tie at 0, and a tie gives PERIOD.
    """
    from streampunct.labels import end_of_stream_label

    if not labels:
        return labels
    return [*labels[:-1], end_of_stream_label(labels[-1], np.eye(4, dtype=np.float32)[labels[-1]])]


def ended_or_final_before(labels: list[int]) -> tuple[list[int], list[int]]:
    """What a stream ended by the client may get when timing decides: the last
    word got its mark at ``end``, or it was final (by delay or right context)
    before ``end`` arrived and is never revised."""
    return ended(labels), labels
