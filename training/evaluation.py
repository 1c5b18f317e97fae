"""Validation with the offline double-overlap decoder, as the service will run the model.

The torch model is wrapped as an ``infer`` callable and decoded with
``streampunct.core.decoder.decode_offline``; the scores are word-level
per-class and overall (micro) P/R/F1 from ``streampunct.evaluation.scores``. For a CRF
head the emissions are scored twice: argmax per word (what an ONNX engine
serving only the emissions does) and Viterbi over each document's words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from engines.model_meta import has_model_meta
from streampunct.core.alignment import Aligner
from streampunct.core.decoder import decode_offline
from streampunct.core.windowing import WindowConfig
from streampunct.evaluation.scores import Report, evaluate
from training.crf import viterbi_numpy
from training.data import Document
from training.model import make_infer


@dataclass
class Validation:
    """Scores of one validation pass.

    Attributes:
        report: argmax over each word's emissions (serve-time decoding).
        viterbi: CRF heads: Viterbi over each document's words; else None.
    """

    report: Report
    viterbi: Report | None = None

    @property
    def overall_f1(self) -> float:
        return self.report.overall_f1

    def to_dict(self) -> dict:
        out = self.report.to_dict()
        if self.viterbi is not None:
            out["viterbi"] = self.viterbi.to_dict()
        return out


def decode_documents(infer: Callable, aligner: Aligner, docs: Sequence[Document], window: WindowConfig,
                     *, batch_size: int = 32) -> list[np.ndarray]:
    """Per-word emissions float32[n_words, C] of each document from any ``infer`` callable."""
    return [decode_offline(d.words, aligner, window, infer, batch_size=batch_size) for d in docs]


def document_logits(model: nn.Module, aligner: Aligner, docs: Sequence[Document],
                    window: WindowConfig, *, batch_size: int = 32) -> list[np.ndarray]:
    """Per-word emissions float32[n_words, C] of each document (model put in eval mode)."""
    was_training = model.training
    model.eval()
    try:
        return decode_documents(make_infer(model), aligner, docs, window, batch_size=batch_size)
    finally:
        model.train(was_training)


def score(model: nn.Module | None, docs: Sequence[Document], logits: Sequence[np.ndarray]) -> Validation:
    gold = np.concatenate([np.asarray(d.labels, dtype=np.int64) for d in docs])
    pred = np.concatenate([lg.argmax(-1) for lg in logits])
    report = evaluate(gold, pred)
    crf = getattr(getattr(model, "head", None), "crf", None)
    if crf is None:
        return Validation(report)
    with torch.no_grad():
        trans, start, end = (p.detach().double().cpu().numpy()
                             for p in (crf.transitions, crf.start, crf.end))
    vpred = np.concatenate([viterbi_numpy(lg, trans, start, end) for lg in logits])
    return Validation(report, evaluate(gold, vpred))


def validate(model: nn.Module, aligner: Aligner, docs: Sequence[Document], window: WindowConfig,
             *, batch_size: int = 32) -> Validation:
    return score(model, docs, document_logits(model, aligner, docs, window, batch_size=batch_size))


@dataclass
class RuntimeModel:
    """A runtime model folder (ONNX artifact + streampunct.json, e.g. ``models/default``)
    decoded exactly as the service decodes it (its engine, its window unless one is given).

    Used as a self-training teacher, for window tuning and for comparing builds.
    """

    directory: Path
    infer: Callable
    aligner: Aligner
    window: WindowConfig
    close: Callable[[], None]

    @classmethod
    def open(cls, directory: str | Path, *, heads: str = "punct", **engine_options) -> RuntimeModel:
        """``heads="all"``: ``logits`` gives the punctuation logits followed by the case
        head's (as a checkpoint's ``make_infer(heads="all")``) when the graph has one.
        ``engine_options`` go to the engine (``intra_op_threads=1``, for one)."""
        from streampunct.core.decoder import OfflineDecoder

        if heads not in ("punct", "all"):
            raise ValueError(f"heads must be 'punct' or 'all', got {heads!r}")
        p = OfflineDecoder.from_model_dir(directory, **engine_options)
        infer = p.infer_all if heads == "all" else p.engine.infer
        return cls(Path(directory), infer, p.aligner, p.window, p.close)

    def logits(self, docs: Sequence[Document], window: WindowConfig | None = None,
               *, batch_size: int = 32) -> list[np.ndarray]:
        return decode_documents(self.infer, self.aligner, docs, window or self.window, batch_size=batch_size)

    def validate(self, docs: Sequence[Document], window: WindowConfig | None = None,
                 *, batch_size: int = 32) -> Validation:
        return score(None, docs, self.logits(docs, window, batch_size=batch_size))


def is_runtime_model(directory: Path) -> bool:
    """A runtime model folder (ONNX artifact + streampunct.json) rather than a training checkpoint."""
    return has_model_meta(directory) and not (directory / "model.safetensors").is_file() \
        and any(directory.glob("model*.onnx"))
