"""Test doubles: for the pure core, an aligner with chosen word lengths and a model; for the
server, an engine whose calls the test lets through (:class:`GatedEngine`) and the waits that
tests hand off with instead of sleeping (:func:`until`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import numpy as np

from engines.fake import FakeEngine as _FakeEngine


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


# -- hand-offs: what a test waits on instead of sleeping ------------------------------------------

#: Longest a hand-off waits before the test fails (a hang, not a slow machine).
HANDOFF_TIMEOUT = 30.0


async def until(condition: Callable[[], bool], timeout: float = HANDOFF_TIMEOUT) -> None:
    """Wait until ``condition()`` holds: a state that the code under test reaches by itself and
    announces to no one (a server's session set, a count of words received). The one polling
    wait of the tests; where the code or a fake sets an event, wait on that instead."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


class GatedEngine(_FakeEngine):
    """The fake engine (:mod:`engines.fake`) whose calls wait for the test.

    Each call counts itself in (``entered``) and then blocks in its worker thread until the
    test lets it through: ``release(n)`` lets n more calls pass, ``open()`` every call from
    then on, ``close_gate()`` makes later calls wait again. A test thus knows that a call is
    in the engine (``await engine.wait_entered(n)``) and decides when it ends, instead of
    sleeping for an engine cost. A call the test never lets through fails after ``timeout``.
    """

    def __init__(self, *, open: bool = False, timeout: float = HANDOFF_TIMEOUT, **options) -> None:
        super().__init__(**options)
        self.timeout = timeout
        self.entered = 0
        self._passes = 0
        self._open = open
        self._cond = threading.Condition()

    def infer(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        with self._cond:
            self.entered += 1
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self._open or self._passes > 0, self.timeout):
                raise RuntimeError("the test never let this engine call through")
            if not self._open:
                self._passes -= 1
        return super().infer(input_ids, attention_mask)

    def release(self, n: int = 1) -> None:
        with self._cond:
            self._passes += n
            self._cond.notify_all()

    def open(self) -> None:
        with self._cond:
            self._open = True
            self._cond.notify_all()

    def close_gate(self) -> None:
        with self._cond:
            self._open, self._passes = False, 0

    async def wait_entered(self, n: int, timeout: float = HANDOFF_TIMEOUT) -> None:
        """Return once ``n`` calls (in all, since the engine was made) have entered the engine."""

        def wait() -> bool:
            with self._cond:
                return self._cond.wait_for(lambda: self.entered >= n, timeout)

        assert await asyncio.to_thread(wait), f"{self.entered} engine calls entered, not {n}"
