"""Cased, punctuated text -> word/label sequences in the Che et al. (IWSLT2011) format.

Conventions, checked against ``dev2012``:

* the label of a word is the punctuation that follows it; ``, : -`` and dashes
  -> COMMA, ``. ! ;`` -> PERIOD, ``?`` -> QUESTION; when several marks follow
  one word the strongest wins (``?!`` -> QUESTION);
* words are lowercased, quotes and brackets dropped;
* contractions are split as in the IWSLT files: ``do n't``, ``ca n't``,
  ``it 's``, ``you 're``, ``i 'm``, ``we 'll``; ``'ve`` and ``'d`` stay joined
  (``we've``, ``i'd``);
* a free-standing dash (``--``, ``—``) is a comma on the word before it;
* titles (``Mr.``, ``Dr.``) and dotted abbreviations (``U.S.``) do not end a
  sentence by their dot.
"""

from __future__ import annotations

import re
import unicodedata

from streampunct.labels import COMMA, MARK_TO_LABEL, O, case_class, strongest
from streampunct.text.normalize import fix_mojibake, normalize_word

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})
_DASHES = re.compile(r"\s*(?:--+|\u2014|\u2013(?=\s)|(?<=\s)\u2013)\s*")
_SPLIT_CLITICS = ("n't", "'s", "'re", "'m", "'ll")
_TITLES = frozenset({"mr", "mrs", "ms", "dr"})  # as in dev2012 ("st." and "etc." end with PERIOD there)


def _is_mark_or_junk(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PSZC"


def _split_clitic(word: str) -> list[str]:
    for clitic in _SPLIT_CLITICS:
        if word.endswith(clitic) and len(word) > len(clitic):
            stem = word[: -len(clitic)]
            if clitic == "n't" or stem[-1].isalnum():
                return [stem, clitic]
    return [word]


def text_to_word_labels(text: str, *, split_contractions: bool = True) -> tuple[list[str], list[int]]:
    """Convert cased, punctuated text to ``(words, label_ids)``.

    With ``split_contractions`` False, words are kept as they are written
    (for text that is already tokenized the IWSLT way).

    Returns empty lists for text with no words (only punctuation, or blank).
    """
    words, labels, _ = text_to_word_labels_cased(text, split_contractions=split_contractions)
    return words, labels


def text_to_word_labels_cased(text: str, *, split_contractions: bool = True
                              ) -> tuple[list[str], list[int], list[int]]:
    """Like :func:`text_to_word_labels`, plus each word's case class as written
    (``streampunct.labels.case_class``: lower / capitalized / upper / mixed)."""
    text = unicodedata.normalize("NFKC", fix_mojibake(text)).translate(_APOSTROPHES)
    text = _DASHES.sub(" -- ", text)
    words: list[str] = []
    labels: list[int] = []
    cases: list[int] = []
    for token in text.split():
        if set(token) <= set("-\u2013\u2014"):
            if labels:
                labels[-1] = strongest(labels[-1], COMMA)
            continue
        start, end = 0, len(token)
        lead_marks = O
        while start < end and _is_mark_or_junk(token[start]):
            if token[start] == "'" and start + 1 < end and token[start + 1].isalnum():
                break
            lead_marks = strongest(lead_marks, MARK_TO_LABEL.get(token[start], O))
            start += 1
        if lead_marks != O and labels:
            labels[-1] = strongest(labels[-1], lead_marks)
        while end > start and _is_mark_or_junk(token[end - 1]):
            end -= 1
        core, trail = token[start:end], token[end:]
        if not core:
            # Only punctuation: its marks belong to the word before.
            mark = O
            for ch in trail:
                mark = strongest(mark, MARK_TO_LABEL.get(ch, O))
            if labels:
                labels[-1] = strongest(labels[-1], mark)
            continue
        label = O
        trail_marks = trail
        lowered = core.lower()
        if trail.startswith(".") and (lowered in _TITLES or "." in core):
            trail_marks = trail[1:]  # the dot belongs to the abbreviation
        for ch in trail_marks:
            label = strongest(label, MARK_TO_LABEL.get(ch, O))
        split = _split_clitic(lowered) if split_contractions else [lowered]
        cased = _cased_pieces(core, split)
        pieces = [(p, case_class(c)) for p, c in ((normalize_word(p), c) for p, c in zip(split, cased, strict=True))
                  if p]
        if not pieces:
            if labels:
                labels[-1] = strongest(labels[-1], label)
            continue
        for piece, case in pieces:
            words.append(piece)
            labels.append(O)
            cases.append(case)
        labels[-1] = label
    return words, labels, cases


def _cased_pieces(core: str, lowered_pieces: list[str]) -> list[str]:
    """The written (cased) form of each lowercased piece of ``core``."""
    if sum(map(len, lowered_pieces)) != len(core):  # lowercasing changed the length (rare)
        return lowered_pieces
    out, k = [], 0
    for piece in lowered_pieces:
        out.append(core[k : k + len(piece)])
        k += len(piece)
    return out
