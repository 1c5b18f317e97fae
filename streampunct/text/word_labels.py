"""Readers for word/label files (Che et al. format) and the TED transcript collection.

The IWSLT2011 files are ``word<TAB>LABEL`` lines. Their known quirks (see
``shared/data/iwslt2011_che/PROVENANCE.md``) are repaired here, never by
silently dropping a label:

* mojibake of a music note (``â™?``) stuck to a word is removed;
* a line whose word is empty, or becomes empty once normalized (the ``--``
  tokens of dev2012), is folded into the word before it: that word keeps the
  stronger of the two labels (a dash itself counts as a comma). The number of
  folded lines is reported in ``WordLabels.folded``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from streampunct.errors import InputError
from streampunct.labels import COMMA, LABEL_TO_ID, LABELS, O, strongest
from streampunct.text.normalize import normalize_word
from streampunct.text.textfile import require_file


@dataclass
class WordLabels:
    """A word sequence with one label id per word.

    Attributes:
        words: normalized words (lowercase, no edge punctuation).
        labels: label ids (see :data:`streampunct.labels.LABELS`).
        folded: input lines merged into the previous word (empty or
            punctuation-only words); their labels were kept on that word.
        source: where the data came from (path), for messages.
    """

    words: list[str]
    labels: list[int]
    folded: int = 0
    source: str = ""
    extra: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.words)

    def label_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(LABELS, 0)
        for label in self.labels:
            counts[LABELS[label]] += 1
        return counts


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def read_word_labels(path: str | Path, *, strict_labels: bool = True) -> WordLabels:
    """Read a ``word<TAB>LABEL`` file (one word a line; blank lines are skipped).

    Raises :class:`InputError` with the line number for a line without a tab
    or with an unknown label (unless ``strict_labels`` is False, in which case
    such a line counts as O). Bytes that are not valid UTF-8 are replaced.
    """
    path = require_file(path)
    words: list[str] = []
    labels: list[int] = []
    folded = 0
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            word, sep, label_name = line.rpartition("\t")
            if not sep:
                raise InputError(f"{path}:{lineno}: expected 'word<TAB>LABEL', got {line[:80]!r}")
            label_name = label_name.strip()
            if label_name in LABEL_TO_ID:
                label = LABEL_TO_ID[label_name]
            elif strict_labels:
                raise InputError(
                    f"{path}:{lineno}: unknown label {label_name!r} (expected {', '.join(LABELS)})"
                )
            else:
                label = O
            norm = normalize_word(word)
            if not norm:
                # Empty or punctuation-only word: its label belongs to the word before.
                folded += 1
                if words:
                    mark = COMMA if word.strip() and set(word.strip()) <= set("-\u2013\u2014") else O
                    labels[-1] = strongest(strongest(labels[-1], mark), label)
                continue
            words.append(norm)
            labels.append(label)
    return WordLabels(words, labels, folded=folded, source=str(path))


def read_punctuated_text(path: str | Path) -> WordLabels:
    """Punctuated text (cased or not) as words and labels, converted as training converts it."""
    from streampunct.text.convert import text_to_word_labels

    path = require_file(path)
    with _open_text(path) as f:
        words, labels = text_to_word_labels(f.read())
    return WordLabels(words, labels, 0, str(path))


def write_word_labels(path: str | Path, data: WordLabels) -> None:
    """Write a ``word<TAB>LABEL`` file."""
    with open(path, "w", encoding="utf-8") as f:
        for word, label in zip(data.words, data.labels, strict=True):
            f.write(f"{word}\t{LABELS[label]}\n")


def iter_ted_talks(path: str | Path) -> Iterator[tuple[str, str]]:
    """Yield ``(talk_id, text)`` from ``ted.jsonl.gz`` (one JSON object a line)."""
    path = require_file(path)
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                yield str(obj["id"]), str(obj["text"])
            except (json.JSONDecodeError, KeyError) as e:
                raise InputError(f"{path}:{lineno}: not a talk record ({e})") from None


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
