"""Parity figures between two engines: logits and labels compared on given windows.

The windows are arrays (token ids, attention mask and the position of each
word's label token); whoever has text builds them with the runtime's
windowing (``streampunct.core.windowing.offline_windows``), so this module knows
nothing of files, tokenizers or metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

#: One engine call: int64[B,T], int64[B,T] -> float32[B,T,C].
InferFn = Callable[[np.ndarray, np.ndarray], np.ndarray]



@dataclass(frozen=True)
class ParityReport:
    """How far a candidate engine's logits are from a reference's.

    Attributes:
        max_abs_diff: largest |candidate - reference| over attended tokens.
        max_rel_diff: ``max_abs_diff`` / largest |reference logit| (scale-free).
        label_agreement: fraction of label tokens where both argmaxes agree.
        n_tokens: attended tokens compared.
        n_labels: label tokens compared for agreement.
    """

    max_abs_diff: float
    max_rel_diff: float
    label_agreement: float
    n_tokens: int
    n_labels: int

    def to_dict(self) -> dict[str, float | int]:
        return {
            "max_abs_diff": self.max_abs_diff,
            "max_rel_diff": self.max_rel_diff,
            "label_agreement": self.label_agreement,
            "n_tokens": self.n_tokens,
            "n_labels": self.n_labels,
        }


def compare_logits(
    reference: np.ndarray,
    candidate: np.ndarray,
    attention_mask: np.ndarray | None = None,
    positions: np.ndarray | None = None,
) -> ParityReport:
    """Compare logits [B,T,C] on attended tokens; agreement on ``positions`` (k x 2
    (row, token) pairs) when given, else on every attended token."""
    reference = np.asarray(reference, dtype=np.float32)
    candidate = np.asarray(candidate, dtype=np.float32)
    if reference.shape != candidate.shape:
        raise ValueError(f"logit shapes differ: {reference.shape} vs {candidate.shape}")
    mask = (
        np.ones(reference.shape[:2], dtype=bool)
        if attention_mask is None
        else np.asarray(attention_mask).astype(bool)
    )
    ref_tok, cand_tok = reference[mask], candidate[mask]
    diff = float(np.abs(ref_tok - cand_tok).max()) if ref_tok.size else 0.0
    scale = float(np.abs(ref_tok).max()) if ref_tok.size else 0.0
    if positions is not None and len(positions):
        rows, cols = positions[:, 0], positions[:, 1]
        ref_lab, cand_lab = reference[rows, cols].argmax(-1), candidate[rows, cols].argmax(-1)
    else:
        ref_lab, cand_lab = ref_tok.argmax(-1), cand_tok.argmax(-1)
    agreement = float((ref_lab == cand_lab).mean()) if ref_lab.size else 1.0
    return ParityReport(
        max_abs_diff=diff,
        max_rel_diff=diff / scale if scale > 0 else diff,
        label_agreement=agreement,
        n_tokens=int(ref_tok.shape[0]),
        n_labels=int(ref_lab.size),
    )


@dataclass(frozen=True)
class ParityWindows:
    """Model inputs to compare two engines on.

    Attributes:
        input_ids, attention_mask: int64[N, T], right-padded with the pad id / 0.
        positions: int64[K, 2], (window, token) of each word's label token.
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    positions: np.ndarray

    @classmethod
    def of(cls, windows) -> ParityWindows:
        """From any object with these three arrays (e.g. the runtime's ``WindowBatch``)."""
        return cls(windows.input_ids, windows.attention_mask, windows.positions)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def batches(self, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Batches of windows, each trimmed to its longest row."""
        for start in range(0, len(self), batch_size):
            mask = self.attention_mask[start:start + batch_size]
            width = int(mask.sum(axis=1).max())
            yield self.input_ids[start:start + batch_size, :width], mask[:, :width]

    def head(self, n: int) -> ParityWindows:
        """The first ``n`` windows (and their words)."""
        keep = self.positions[:, 0] < n
        return ParityWindows(self.input_ids[:n], self.attention_mask[:n], self.positions[keep])

    def calibration_feed(self, n: int) -> dict[str, np.ndarray]:
        """The first ``n`` windows as an input feed (for Q/DQ calibration)."""
        return {"input_ids": self.input_ids[:n], "attention_mask": self.attention_mask[:n]}


def run_windows(infer: InferFn, windows: ParityWindows, *, batch_size: int = 32) -> np.ndarray:
    """Logits float32[N, T, C] of every window (padded positions left at 0)."""
    chunks = []
    for ids, mask in windows.batches(batch_size):
        logits = np.asarray(infer(ids, mask), dtype=np.float32)
        full = np.zeros((ids.shape[0], windows.input_ids.shape[1], logits.shape[2]), np.float32)
        full[:, : ids.shape[1]] = logits
        chunks.append(full)
    return np.concatenate(chunks, axis=0)


def parity_on_windows(
    reference: InferFn, candidate: InferFn, windows: ParityWindows, *, batch_size: int = 32,
    reference_batch_size: int | None = None,
) -> ParityReport:
    """Run both engines on the same windows; diffs on attended tokens, agreement on
    each word's label token. ``reference_batch_size`` (default ``batch_size``): 1 for a
    reference whose logits depend on its batch (one window a call)."""
    ref = run_windows(reference, windows, batch_size=reference_batch_size or batch_size)
    cand = run_windows(candidate, windows, batch_size=batch_size)
    return compare_logits(ref, cand, windows.attention_mask, windows.positions)
