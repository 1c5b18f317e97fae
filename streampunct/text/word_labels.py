"""Readers for word/label files (Che et al. format) and the TED transcript collection.

The IWSLT2011 files are ``word<TAB>LABEL`` lines. Their known quirks (see
``shared/data/iwslt2011_che/PROVENANCE.md``) are repaired here, never by
silently dropping a label:

* mojibake of a music note (``â™?``) stuck to a word is removed;
* a line whose word is empty, or becomes empty once normalized (the ``--``
  tokens of dev2012), is folded into the word before it: that word keeps the
  stronger of the two labels (a dash itself counts as a comma). The number of
  folded lines is reported in ``WordLabels.folded``; such a line before the
  first word has no word to take its label, which goes, counted there too.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from streampunct.errors import InputError
from streampunct.labels import COMMA, LABEL_TO_ID, LABELS, O, strongest
from streampunct.text.normalize import normalize_word
from streampunct.text.textfile import decode_text, read_text, require_file, split_lines


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


def _read_text(path: Path) -> str:
    """A file's text (gunzipped when it ends in ``.gz``), read and decoded as every transcript is
    (:func:`streampunct.text.textfile.read_text`: by its byte-order mark, UTF-16, Latin-1)."""
    if path.suffix != ".gz":
        return read_text(path)  # a device or a pipe in pieces: binary or endless input is refused as it comes
    try:
        return decode_text(gzip.decompress(path.read_bytes()), str(path))
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise InputError(f"cannot read {path}: {e}") from None


def _source_text(path: str | Path) -> tuple[str, str]:
    """The text of a data file (:func:`_read_text`), or of stdin for ``-``; and its name."""
    if str(path) == "-":
        return read_text("-"), "stdin"
    path = require_file(path)
    return _read_text(path), str(path)


def label_of(name: str) -> int | None:
    """The label id of a label name as a ``word<TAB>LABEL`` file writes it, in any case
    (``COMMA``, ``comma``, ``Comma``; spaces around it ignored), else None. ASCII only: no
    other letter stands for one of the label's (``perıod``, with a dotless i, is no label)."""
    name = name.strip()
    return LABEL_TO_ID.get(name.upper()) if name.isascii() else None


def split_labeled_line(line: str) -> tuple[str, str] | None:
    """``(word, label)`` of a line that looks like ``word<TAB>LABEL`` (its last tab is followed by
    one of :data:`~streampunct.labels.LABELS`, in any case: :func:`label_of`), else None; the label
    as :data:`~streampunct.labels.LABELS` spells it. :func:`labeled_pair` checks the word."""
    word, tab, name = line.rpartition("\t")
    label = label_of(name) if tab else None
    return (word, LABELS[label]) if label is not None else None


_INNER_SPACE = re.compile(r"\S\s+\S")


def labeled_pair(line: str, source: str, lineno: int, *, strict_labels: bool = True) -> tuple[str, int]:
    """The word and label id of a ``word<TAB>LABEL`` line, or an :class:`InputError` that starts
    with ``source:lineno``: no tab, more than one, a word holding a space, or (when
    ``strict_labels``) an unknown label (else it counts as O). Labels are read in any case
    (:func:`label_of`: ``comma`` is ``COMMA``)."""
    word, sep, label_name = line.rpartition("\t")
    label = label_of(label_name) if sep else None
    if label is not None and "\t" not in word and _INNER_SPACE.search(word) is None:
        return word, label
    where = f"{source}:{lineno}"
    if not sep:
        raise InputError(f"{where}: expected 'word<TAB>LABEL', got {line[:80]!r}")
    if "\t" in word:
        raise InputError(f"{where}: expected one tab ('word<TAB>LABEL'), got {line[:80]!r}")
    if _INNER_SPACE.search(word):
        raise InputError(f"{where}: a word cannot hold a space ('word<TAB>LABEL', one word a line), "
                         f"got {line[:80]!r}")
    if strict_labels:
        raise InputError(f"{where}: unknown label {label_name.strip()!r} (expected {', '.join(LABELS)})")
    return word, O


def is_word_label_text(lines: Sequence[str], source: str) -> bool:
    """Whether text lines are a ``word<TAB>LABEL`` file rather than plain text.

    True when every non-blank line looks like one (:func:`split_labeled_line`);
    False when fewer than half do (plain text, whose tabs are spaces); when at
    least half do but not all, an :class:`InputError` names the first line that
    does not (a label file with a broken line is not read as text)."""
    filled = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    bad = [(n, line) for n, line in filled if split_labeled_line(line) is None]
    if not filled or len(bad) * 2 > len(filled):
        return False
    if bad:
        n, line = bad[0]
        labeled_pair(line, source, n)  # the reason it is not a labelled line
        raise InputError(f"{source}:{n}: expected 'word<TAB>LABEL' as on the other lines, got {line[:80]!r}")
    return True


def parse_word_labels(lines: Sequence[str], source: str, *, strict_labels: bool = True) -> WordLabels:
    """``word<TAB>LABEL`` lines (blank lines skipped) as words and labels; see :func:`read_word_labels`."""
    words: list[str] = []
    labels: list[int] = []
    folded = 0
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        word, label = labeled_pair(line, source, lineno, strict_labels=strict_labels)
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
    return WordLabels(words, labels, folded=folded, source=source)


def read_word_labels(path: str | Path, *, strict_labels: bool = True) -> WordLabels:
    """Read a ``word<TAB>LABEL`` file (one word a line; blank lines are skipped; ``.gz`` is
    gunzipped; ``-`` reads stdin), decoded as transcripts are (UTF-8, UTF-16 or UTF-32 by byte-order mark,
    Windows-1252 when not UTF-8).

    Raises :class:`InputError` with the line number for a line without a tab,
    with two, with a space inside the word, or with an unknown label (unless
    ``strict_labels`` is False, in which case such a label counts as O).
    """
    text, name = _source_text(path)
    return parse_word_labels(split_lines(text), name, strict_labels=strict_labels)


def read_punctuated_text(path: str | Path) -> WordLabels:
    """Punctuated text (cased or not) as words and labels, converted as training converts it; a
    ``word<TAB>LABEL`` file is refused (read as prose its labels would be words, every mark a miss)."""
    from streampunct.text.convert import text_to_word_labels

    text, name = _source_text(path)
    lines = split_lines(text)
    if "\t" in text and is_word_label_text(lines, name):
        raise InputError(f"{name}: a word<TAB>LABEL file, not punctuated text (read it as labels, "
                         "without --text)")
    words, labels = text_to_word_labels(text)
    return WordLabels(words, labels, 0, name)


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
