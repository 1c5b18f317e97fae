"""Punctuation metrics: per-class P/R/F1, overall micro and macro F1, confusion matrix.

O is excluded from every average. A miss (gold mark, predicted O) is a false
negative of the gold class; a wrong mark (gold COMMA, predicted PERIOD) is a
false negative of the gold class and a false positive of the predicted class;
a spurious mark (gold O) is a false positive of the predicted class. The
"overall" figure is the micro average over COMMA, PERIOD and QUESTION, the
"Overall" column of the papers. Figures are percentages (0-100).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streampunct.labels import LABELS

MARK_CLASSES: tuple[int, ...] = (1, 2, 3)


def _prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    p = 100.0 * tp / (tp + fp) if tp + fp else 0.0
    r = 100.0 * tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f


@dataclass(frozen=True)
class Report:
    """Scores of one prediction against gold labels.

    Attributes:
        per_class: class name -> (precision, recall, f1), for COMMA, PERIOD, QUESTION.
        overall: micro-averaged (precision, recall, f1) over the three marks.
        macro_f1: mean of the three per-class F1 values.
        confusion: 4x4 counts, rows gold, columns predicted, in LABELS order.
        n_words: number of scored words.
    """

    per_class: dict[str, tuple[float, float, float]]
    overall: tuple[float, float, float]
    macro_f1: float
    confusion: np.ndarray
    n_words: int

    @property
    def overall_f1(self) -> float:
        return self.overall[2]

    def to_dict(self) -> dict:
        def prf(t):
            return {"precision": round(t[0], 2), "recall": round(t[1], 2), "f1": round(t[2], 2)}

        return {
            "n_words": self.n_words,
            "per_class": {name: prf(v) for name, v in self.per_class.items()},
            "overall": prf(self.overall),
            "overall_f1": round(self.overall_f1, 2),
            "macro_f1": round(self.macro_f1, 2),
            "confusion": {"labels": list(LABELS), "matrix": self.confusion.tolist()},
        }

    def table(self) -> str:
        """A small text table for terminals and logs."""
        lines = [f"{'class':<10}{'P':>7}{'R':>7}{'F1':>7}"]
        for name, (p, r, f) in self.per_class.items():
            lines.append(f"{name:<10}{p:7.1f}{r:7.1f}{f:7.1f}")
        p, r, f = self.overall
        lines.append(f"{'OVERALL':<10}{p:7.1f}{r:7.1f}{f:7.1f}")
        lines.append(f"{'macro F1':<10}{'':>14}{self.macro_f1:7.1f}")
        return "\n".join(lines)


def confusion_matrix(gold: Sequence[int], pred: Sequence[int], n_classes: int = 4) -> np.ndarray:
    g = np.asarray(gold, dtype=np.int64)
    p = np.asarray(pred, dtype=np.int64)
    if g.shape != p.shape:
        raise ValueError(f"gold has {g.size} labels but prediction has {p.size}")
    if g.size and (g.min() < 0 or g.max() >= n_classes or p.min() < 0 or p.max() >= n_classes):
        raise ValueError(f"label ids must be in 0..{n_classes - 1}")
    return np.bincount(g * n_classes + p, minlength=n_classes * n_classes).reshape(
        n_classes, n_classes
    )


def evaluate(gold: Sequence[int], pred: Sequence[int]) -> Report:
    """Score predicted label ids against gold label ids (same length)."""
    cm = confusion_matrix(gold, pred)
    per_class = {}
    tp_all = fp_all = fn_all = 0
    for c in MARK_CLASSES:
        tp = int(cm[c, c])
        fp = int(cm[:, c].sum() - tp)
        fn = int(cm[c, :].sum() - tp)
        tp_all, fp_all, fn_all = tp_all + tp, fp_all + fp, fn_all + fn
        per_class[LABELS[c]] = _prf(tp, fp, fn)
    macro = sum(v[2] for v in per_class.values()) / len(per_class)
    return Report(per_class, _prf(tp_all, fp_all, fn_all), macro, cm, int(cm.sum()))
