"""The load bench's exactly-once check: every word final once, in order, echoed as sent."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass


@dataclass(frozen=True)
class FinalsCheck:
    """What the finals of one stream got wrong (all zero: every word final exactly once).

    Attributes:
        lost: sent words that never got a final.
        duplicated: finals for a word that already had one.
        out_of_order: first finals for a word that came after a final for a later word.
        mismatched: finals whose word differs from the word sent at that index
            (after normalization), or for an index that was never sent.
        finalized: distinct sent words that got a final.
    """

    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    mismatched: int = 0
    finalized: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.out_of_order or self.mismatched)

    def __add__(self, other: FinalsCheck) -> FinalsCheck:
        return FinalsCheck(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


def _final_items(message: object) -> tuple[int, list[str]]:
    """(start, words) of a ``final`` as a protocol object or its JSON dict."""
    if isinstance(message, Mapping):
        words = message["words"]
        start = message["start"]
    else:
        words = message.words  # type: ignore[attr-defined]
        start = message.start  # type: ignore[attr-defined]
    out = []
    for w in words:
        if isinstance(w, Mapping):
            out.append(str(w["w"]))
        elif isinstance(w, str):
            out.append(w)
        else:
            out.append(str(w.w))
    return int(start), out


def check_finals(sent_words: Sequence[str], final_messages: Iterable[object]) -> FinalsCheck:
    """Check the finals of one stream against the words sent, in arrival order.

    ``sent_words`` are the words the client sent (index i = stream word i;
    compared after :func:`~streampunct.text.normalize.normalize_word`, so send words
    that normalize to something). ``final_messages`` are ``final`` messages
    (:class:`~streampunct.core.wire.Final` or their JSON dicts) in the order
    they arrived. Pure: no clock, no I/O.
    """
    from streampunct.text.normalize import normalize_word

    sent = [normalize_word(w) for w in sent_words]
    seen = [0] * len(sent)
    duplicated = out_of_order = mismatched = 0
    highest = -1
    for message in final_messages:
        start, words = _final_items(message)
        for k, word in enumerate(words):
            index = start + k
            if not 0 <= index < len(sent):
                mismatched += 1
                continue
            seen[index] += 1
            if seen[index] > 1:
                duplicated += 1
                continue
            if index < highest:
                out_of_order += 1
            highest = max(highest, index)
            if normalize_word(word) != sent[index]:
                mismatched += 1
    finalized = sum(1 for s in seen if s)
    return FinalsCheck(len(sent) - finalized, duplicated, out_of_order, mismatched, finalized)


# -- transcript and schedule -----------------------------------------------------
