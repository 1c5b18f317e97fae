"""The offline decode throughput figure: windows, overlap factor and the ratio."""

from __future__ import annotations

import time

import numpy as np
import pytest

from benchmarks.decode_throughput import measure_decode_throughput
from engines.base import EngineBase
from streampunct.core.windowing import WindowConfig
from tests.streampunct.fakes import FakeAligner, fake_infer


class SlowEngine(EngineBase):
    """Cost proportional to padded tokens, like a real engine."""

    def __init__(self, us_per_token: float = 2.0) -> None:
        self.us = us_per_token
        self.calls: list[tuple[int, int]] = []

    def infer(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        self.calls.append(ids.shape)
        time.sleep(ids.size * self.us * 1e-6)
        return fake_infer(ids, mask)


def test_ratio_compares_decode_with_the_ceiling_over_the_overlap():
    aligner = FakeAligner()
    words = [aligner.word(1 + k % 3, k) for k in range(3000)]
    window = WindowConfig(30, 8, 6)
    engine = SlowEngine(us_per_token=20.0)  # engine cost well above the scheduler's noise on a loaded machine
    r = measure_decode_throughput(engine, aligner, window, words, batch_size=8, repeats=1)
    assert r["words"] == 3000 and r["tokens"] == sum(1 + k % 3 for k in range(3000))
    assert r["overlap_factor"] == round(30 / 16, 3)
    # Word boundaries make real windows a little shorter than W: the factor is close to W/S.
    assert 1.0 < r["actual_overlap_factor"] <= r["overlap_factor"] * 1.2
    # The report rounds its inputs (ceiling to 0.1 tokens/s): recomputing from them may differ by
    # a rounding step.
    assert r["ideal_decode_words_per_s"] == pytest.approx(
        r["words"] / (r["tokens"] * r["overlap_factor"] / r["engine_ceiling_tokens_per_s"]), rel=1e-5)
    # Cost follows tokens here, so the decoder gets most of the ceiling (and no more than ~all of it).
    assert 0.3 < r["ratio_to_ideal"] < 1.5
