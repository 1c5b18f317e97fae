"""Punctuation classes and the mapping of marks to classes (Che et al., LREC 2016)."""

from __future__ import annotations

import math
from numbers import Real
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

LABELS: tuple[str, ...] = ("O", "COMMA", "PERIOD", "QUESTION")
LABEL_TO_ID: dict[str, int] = {name: i for i, name in enumerate(LABELS)}
O, COMMA, PERIOD, QUESTION = range(4)  # noqa: E741 (O is the class name)
#: The mark each class renders as.
LABEL_TO_MARK: dict[str, str] = {"O": "", "COMMA": ",", "PERIOD": ".", "QUESTION": "?"}
ID_TO_MARK: tuple[str, ...] = tuple(LABEL_TO_MARK[name] for name in LABELS)
#: Punctuation marks and the class they fold into. Dashes count as commas.
MARK_TO_LABEL: dict[str, int] = {
    ",": COMMA,
    ":": COMMA,
    "-": COMMA,
    "\u2013": COMMA,  # en dash
    "\u2014": COMMA,  # em dash
    ".": PERIOD,
    "!": PERIOD,
    ";": PERIOD,
    "?": QUESTION,
}
#: When several marks follow one word ("?!", "...", ".,"), the strongest wins.
_STRENGTH = {O: 0, COMMA: 1, PERIOD: 2, QUESTION: 3}


def label_id(name: str) -> int:
    """The id of a class name; raises ValueError naming the valid classes."""
    try:
        return LABEL_TO_ID[name]
    except KeyError:
        raise ValueError(f"unknown label {name!r}; expected one of {', '.join(LABELS)}") from None


def strongest(a: int, b: int) -> int:
    """The class kept when two marks follow the same word."""
    return a if _STRENGTH[a] >= _STRENGTH[b] else b

#: Case classes of the truecasing head: lower, Capitalized, ALL CAPS, MiXed.
CASE_LABELS: tuple[str, ...] = ("lower", "capitalized", "upper", "mixed")
LOWER, CAPITALIZED, UPPER, MIXED = range(4)


def case_class(word: str) -> int:
    """The case class of a written word, judged on its letters.

    ``"hello"`` lower, ``"Hello"``/``"I"`` capitalized, ``"NASA"`` upper (two or
    more letters, all capitals), ``"iPhone"``/``"McDonald"`` mixed. A word
    without letters is lower.
    """
    letters = [ch for ch in word if ch.isalpha()]
    if not letters or not any(ch.isupper() for ch in letters):
        return LOWER
    if len(letters) >= 2 and all(ch.isupper() for ch in letters):
        return UPPER
    if letters[0].isupper() and not any(ch.isupper() for ch in letters[1:]):
        return CAPITALIZED
    return MIXED

def check_case_margin(margin: float) -> float:
    """``margin`` as a float; ValueError (one line) unless it is a finite number >= 0."""
    if isinstance(margin, bool) or not isinstance(margin, Real) or not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"case margin must be a finite number >= 0, not {margin!r}")
    return float(margin)


#: The server's and the API's default ``partial_mark_threshold`` (0: a partial shows every mark
#: the model picks; :func:`check_partial_mark_threshold`, docs/formatting.md "Interim stability").
PARTIAL_MARK_THRESHOLD = 0.0


def check_partial_mark_threshold(threshold: float) -> float:
    """``threshold`` as a float; ValueError (one line) unless it is a number with 0 <= it < 1.

    A partial shows a provisional word's mark only when the model's probability of that
    mark (the softmax of the punctuation logits of the window that labeled the word) is at
    least this; 0 shows every mark, as finals do (:func:`streampunct.core.stream_state.hold_back_marks`).
    """
    if (isinstance(threshold, bool) or not isinstance(threshold, Real)
            or not (math.isfinite(threshold) and 0 <= threshold < 1)):
        raise ValueError(f"partial mark threshold must be a number in [0, 1), not {threshold!r}")
    return float(threshold)


def case_classes(case_logits, margin: float = 0.0) -> np.ndarray:
    """The case class of each row of a truecasing head's logits (float[..., 4]).

    The argmax, except that CAPITALIZED becomes LOWER where
    ``logit(capitalized) - logit(lower) < margin``. The head learned
    sentence-initial capitals too, so after a period the model missed it
    capitalizes the next word, weakly; :func:`streampunct.text.normalize.render` opens
    sentences by rule, so demoting weak capitals everywhere keeps real
    sentence starts and drops only the mid-sentence capitals the head is not
    sure of. UPPER and MIXED are never changed. ``margin`` 0 is the plain
    argmax; a model folder's ``case_margin`` (``streampunct.json``, tuned on
    validation by ``python -m training.case_margin``) is the margin it serves with.
    Raises ValueError for a bad margin (:func:`check_case_margin`).
    """
    import numpy as np  # here: ``import streampunct`` stays light

    margin = check_case_margin(margin)
    logits = np.asarray(case_logits)
    classes = logits.argmax(-1)
    if margin > 0:
        weak = (classes == CAPITALIZED) & (logits[..., CAPITALIZED] - logits[..., LOWER] < margin)
        classes = np.where(weak, LOWER, classes)
    return classes


def end_of_stream_label(label: int, logits) -> int:
    """The label of the last word of a stream (after ``end``, at the end of a text).

    A stream's end ends its sentence: ``O`` and ``COMMA`` become the sentence
    mark the model prefers for that word, ``QUESTION`` when its question
    logit beats its period logit, else ``PERIOD``. ``logits`` is that word's
    row of class logits; a sentence mark the model chose is kept.
    """
    if label in (PERIOD, QUESTION):
        return label
    return QUESTION if logits[QUESTION] > logits[PERIOD] else PERIOD


def mark_rates(labels: np.ndarray) -> dict:
    """Marks per 100 words of an array of class ids, per class and overall (the sum of the
    rounded classes): ``{"words", "marks_per_100_words", "per_class"}``."""
    n = max(len(labels), 1)
    per = {name: round(100 * float((labels == i).sum()) / n, 2) for i, name in enumerate(LABELS) if i}
    return {"words": int(len(labels)), "marks_per_100_words": round(sum(per.values()), 2), "per_class": per}
