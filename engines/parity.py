"""Parity figures between two engines, on random shapes or on validation text.

Validation text is a ``word<TAB>LABEL`` file (Che et al. format, e.g. IWSLT
``dev2012``). It is cut into non-overlapping ``[CLS] words... [SEP]`` windows
of at most ``max_len`` tokens at word boundaries; each word's label sits on
its last (or first) sub-token, as the sidecar's ``label_position`` says. This
is deliberately simpler than the service's double-overlap decoding: it is
for comparing two engines on identical inputs, not for reporting accuracy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engines.base import DataError
from engines.deps import require

#: One engine call: int64[B,T], int64[B,T] -> float32[B,T,C].
InferFn = Callable[[np.ndarray, np.ndarray], np.ndarray]

_CLS = ("[CLS]", "<s>")
_SEP = ("[SEP]", "</s>")
_PAD = ("[PAD]", "<pad>")
_UNK = ("[UNK]", "<unk>")


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
class WordLabelData:
    """Words and gold label ids read from a ``word<TAB>LABEL`` file.

    Attributes:
        words: lowercased words.
        labels: int64 label ids (indices into the label names given to the reader).
        source: the file, for messages.
    """

    words: tuple[str, ...]
    labels: np.ndarray
    source: str


def read_word_labels(
    path: str | Path, label_names: Sequence[str], *, max_lines: int | None = None
) -> WordLabelData:
    """Read ``word<TAB>LABEL`` lines (the first ``max_lines`` when given).

    A line whose word is empty carries its label over to the previous word
    when that word has the first label (``O``) so no punctuation is lost.
    """
    index = {name: i for i, name in enumerate(label_names)}
    words: list[str] = []
    labels: list[int] = []
    path = Path(path)
    try:
        handle = open(path, encoding="utf-8", errors="replace")
    except OSError as e:
        raise DataError(f"cannot read {path}: {e}") from e
    with handle:
        for lineno, line in enumerate(handle, 1):
            if max_lines is not None and lineno > max_lines:
                break
            line = line.rstrip("\n")
            if not line.strip():
                continue
            word, sep, label = line.rpartition("\t")
            if not sep:
                raise DataError(f"{path}:{lineno}: expected 'word<TAB>LABEL', got {line[:40]!r}")
            if label not in index:
                raise DataError(
                    f"{path}:{lineno}: unknown label {label!r}; expected one of {list(label_names)}"
                )
            word = word.strip().lower()
            if not word:
                if words and labels[-1] == 0:
                    labels[-1] = index[label]
                continue
            words.append(word)
            labels.append(index[label])
    if not words:
        raise DataError(f"{path} holds no word/label lines")
    return WordLabelData(tuple(words), np.asarray(labels, dtype=np.int64), str(path))


@dataclass(frozen=True)
class EvalWindows:
    """Validation text as model inputs.

    Attributes:
        input_ids, attention_mask: int64[N, T], right-padded with the pad id / 0.
        positions: int64[K, 2], (window, token) of each word's label token.
        gold: int64[K], each word's gold label id.
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    positions: np.ndarray
    gold: np.ndarray

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def batches(self, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Batches of windows, each trimmed to its longest row."""
        for start in range(0, len(self), batch_size):
            mask = self.attention_mask[start:start + batch_size]
            width = int(mask.sum(axis=1).max())
            yield self.input_ids[start:start + batch_size, :width], mask[:, :width]

    def head(self, n: int) -> EvalWindows:
        """The first ``n`` windows (and their words)."""
        keep = self.positions[:, 0] < n
        return EvalWindows(
            self.input_ids[:n], self.attention_mask[:n], self.positions[keep], self.gold[keep]
        )

    def calibration_feed(self, n: int) -> dict[str, np.ndarray]:
        """The first ``n`` windows as an input feed (for Q/DQ calibration)."""
        return {"input_ids": self.input_ids[:n], "attention_mask": self.attention_mask[:n]}


def _special(tokenizer, names: tuple[str, ...]) -> int:
    for name in names:
        token_id = tokenizer.token_to_id(name)
        if token_id is not None:
            return int(token_id)
    raise DataError(f"tokenizer has none of the special tokens {names}")


def load_tokenizer(path: str | Path):
    """A ``tokenizers.Tokenizer`` from tokenizer.json (or a folder holding one), without
    the padding/truncation settings such files often carry."""
    tokenizers = require("tokenizers", feature="tokenizing validation text")
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise DataError(f"no tokenizer.json at {path}")
    tokenizer = tokenizers.Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def encode_windows(
    tokenizer,
    data: WordLabelData,
    *,
    max_len: int = 128,
    label_position: str = "last",
    max_word_tokens: int = 16,
) -> EvalWindows:
    """Cut ``data`` into ``[CLS] ... [SEP]`` windows of at most ``max_len`` tokens."""
    if isinstance(tokenizer, str | Path):
        tokenizer = load_tokenizer(tokenizer)
    if max_len < max_word_tokens + 2:
        raise ValueError(f"max_len {max_len} must leave room for a {max_word_tokens}-token word")
    cls_id, sep_id = _special(tokenizer, _CLS), _special(tokenizer, _SEP)
    pad_id, unk_id = _special(tokenizer, _PAD), _special(tokenizer, _UNK)
    cache: dict[str, list[int]] = {}
    budget = max_len - 2
    windows: list[list[int]] = []
    positions: list[tuple[int, int]] = []
    current: list[int] = [cls_id]
    for word in data.words:
        ids = cache.get(word)
        if ids is None:
            ids = tokenizer.encode(word, add_special_tokens=False).ids or [unk_id]
            if len(ids) > max_word_tokens:
                ids = ids[: max_word_tokens - 1] + ids[-1:]
            cache[word] = ids
        if len(current) - 1 + len(ids) > budget:
            windows.append(current + [sep_id])
            current = [cls_id]
        offset = len(ids) - 1 if label_position == "last" else 0
        positions.append((len(windows), len(current) + offset))
        current.extend(ids)
    windows.append(current + [sep_id])
    width = max(len(w) for w in windows)
    input_ids = np.full((len(windows), width), pad_id, dtype=np.int64)
    attention_mask = np.zeros((len(windows), width), dtype=np.int64)
    for row, window in enumerate(windows):
        input_ids[row, : len(window)] = window
        attention_mask[row, : len(window)] = 1
    return EvalWindows(
        input_ids, attention_mask, np.asarray(positions, dtype=np.int64), data.labels.copy()
    )


def run_windows(infer: InferFn, windows: EvalWindows, *, batch_size: int = 32) -> np.ndarray:
    """Logits float32[N, T, C] of every window (padded positions left at 0)."""
    chunks = []
    for ids, mask in windows.batches(batch_size):
        logits = np.asarray(infer(ids, mask), dtype=np.float32)
        full = np.zeros((ids.shape[0], windows.input_ids.shape[1], logits.shape[2]), np.float32)
        full[:, : ids.shape[1]] = logits
        chunks.append(full)
    return np.concatenate(chunks, axis=0)


def parity_on_windows(
    reference: InferFn, candidate: InferFn, windows: EvalWindows, *, batch_size: int = 32
) -> ParityReport:
    """Run both engines on the same windows; diffs on attended tokens, agreement on
    each word's label token."""
    ref = run_windows(reference, windows, batch_size=batch_size)
    cand = run_windows(candidate, windows, batch_size=batch_size)
    return compare_logits(ref, cand, windows.attention_mask, windows.positions)


def word_predictions(logits: np.ndarray, windows: EvalWindows) -> np.ndarray:
    """Predicted label id of each word (argmax at its label token)."""
    return logits[windows.positions[:, 0], windows.positions[:, 1]].argmax(-1)


def micro_f1(
    gold: np.ndarray, pred: np.ndarray, classes: Sequence[int], names: Sequence[str] | None = None
) -> dict[str, dict[str, float]]:
    """Precision/recall/F1 (in %) per class and micro-averaged over ``classes``
    (the punctuation classes; the no-punctuation class is left out as usual)."""
    gold, pred = np.asarray(gold), np.asarray(pred)
    result: dict[str, dict[str, float]] = {}
    tp_all = fp_all = fn_all = 0
    for c in classes:
        tp = int(((pred == c) & (gold == c)).sum())
        fp = int(((pred == c) & (gold != c)).sum())
        fn = int(((pred != c) & (gold == c)).sum())
        tp_all, fp_all, fn_all = tp_all + tp, fp_all + fp, fn_all + fn
        result[names[c] if names else str(c)] = _prf(tp, fp, fn)
    result["overall"] = _prf(tp_all, fp_all, fn_all)
    return result


def _prf(tp: int, fp: int, fn: int) -> dict[str, float]:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": 100 * p, "recall": 100 * r, "f1": 100 * f, "support": float(tp + fn)}
