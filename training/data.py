"""Training data: sources -> word/label documents -> token sequences -> batches.

A *document* is a continuous stretch of words (a talk, a file) with one label
per word. Documents are encoded once into sub-token ids with the label on one
sub-token per word (``Aligner``). Each epoch cuts every document into
sequences of at most ``max_len - 2`` content tokens at word boundaries,
starting at a fresh random offset so that a word meets different contexts in
different epochs, then shuffles the sequences into batches. Everything is
seeded by ``(seed, epoch)``, so a resumed run sees the same batches.

Converted text (TED talks, dev2010, SwDA) is cached under ``cache/`` keyed by
the source file's hash and the converter's source, so a changed converter
invalidates the cache.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import random
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from streampunct.core.alignment import Aligner
from streampunct.errors import InputError
from streampunct.labels import O
from training.augment import IGNORE, NoiseConfig, augment

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Named sources, relative to the data root.
LABELLED_FILES = {
    "dev2012": "iwslt2011_che/dev2012",
    "train2012_partial": "iwslt2011_che/train2012_partial/train2012_slice_alyakubovich",
}
CASED_FILES = {
    "dev2010": "cased_spoken/ted_iwslt_dev2010_cased.txt",
    "swda": "cased_spoken/swda_train_cased.txt",
    "swda_val": "cased_spoken/swda_val_cased.txt",
}
TED_FILE = "ted_talks/ted.jsonl.gz"
UNLABELED_FILES = {
    "tedx": "unlabeled/tedx_autocaptions.txt.gz",
    "swda": "unlabeled/swda_train.txt",
    "mrda": "unlabeled/mrda_train.txt",
    "maptask": "unlabeled/maptask_train.txt",
}
#: Never used for training or model selection.
FORBIDDEN = ("test2011", "test2011asr", "tst2011")


def data_root(configured: str = "") -> Path:
    """The data folder: config ``data.root`` (``--data-root``), else ``$STREAMPUNCT_DATA``, else
    ../shared/data next to the repository; a relative path is taken from the current directory,
    as every other path a command is given."""
    if configured:
        root = Path(configured).expanduser().absolute()
    elif os.environ.get("STREAMPUNCT_DATA"):
        root = Path(os.environ["STREAMPUNCT_DATA"]).expanduser().absolute()
    else:
        root = REPO_ROOT.parent / "shared" / "data"
    if not root.is_dir():
        what = "is a file, not a folder" if root.exists() else "does not exist"
        raise InputError(f"data folder {root} {what}: give one (--data-root, data.root in a config, or "
                         f"$STREAMPUNCT_DATA), or build "
                         f"one from the public sources with python -m training.build_data (docs/data.md)")
    return root


#: The stage of ``python -m training.build_data`` that writes each named file of the data folder.
_BUILD_STAGES = {"iwslt2011_che/": "iwslt", "cased_spoken/ted_iwslt_dev2010": "dev2010", "ted_talks/": "ted",
                 "unlabeled/tedx": "tedx", "cased_spoken/": "spoken", "unlabeled/": "spoken"}


def named_file(root: Path, relative: str, source: str) -> Path:
    """``root / relative``, the file of the named source ``source``; an :class:`InputError` that
    names the build stage that writes it when the data folder lacks it."""
    path = root / relative
    if not path.is_file():
        stage = next(stage for prefix, stage in _BUILD_STAGES.items() if relative.startswith(prefix))
        raise InputError(f"data folder {root} has no {relative} (source {source!r}): build it with "
                         f"python -m training.build_data --sources SRC --out {root} --only {stage} (docs/data.md)")
    return path


#: The environment variable that moves the default cache folder (``data.cache_dir`` ``cache``).
CACHE_ENV = "STREAMPUNCT_CACHE"


def resolve_cache(cache_dir: str = "cache") -> Path:
    """The folder converted data are cached in, made if need be: ``cache_dir`` (config
    ``data.cache_dir``; relative to the repository); the default ``cache`` is ``$STREAMPUNCT_CACHE``
    when set (for every tool that converts data: train, the checkpoint report, window tuning,
    distillation, the recipe), else the repository's git-ignored ``cache/``."""
    path = Path(cache_dir)
    if cache_dir == "cache" and os.environ.get(CACHE_ENV):
        path = Path(os.environ[CACHE_ENV]).expanduser().absolute()
    elif not path.is_absolute():
        path = REPO_ROOT / path
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Document:
    """A continuous word sequence with one label per word.

    Attributes:
        name: where it came from (for logs).
        words: normalized words.
        labels: label ids (punctuation or POS tag ids); ``IGNORE`` where unknown.
        pseudo: the labels are a teacher's predictions, not human marks.
        case: case class of each word (``streampunct.labels.case_class``), ``IGNORE``
            where unknown; None when the source has no case (lowercase files).
        soft: a teacher's per-word probabilities float[n_words, C] (C = 4, or 8
            with the case head's 4 after the punctuation's), NaN rows where the
            teacher said nothing; None without a teacher (see ``training.distill``).
    """

    name: str
    words: list[str]
    labels: list[int]
    pseudo: bool = False
    case: list[int] | None = None
    soft: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.words)


# --- sources ------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    from streampunct.text.word_labels import file_sha256

    return file_sha256(path)


def _converter_fingerprint() -> str:
    import streampunct.text.convert

    return hashlib.sha256(Path(streampunct.text.convert.__file__).read_bytes()).hexdigest()[:12]


def is_test_set(path: str | Path) -> bool:
    """Whether ``path`` names a test set (:data:`FORBIDDEN`), in any case (``TEST2011.txt``),
    by its own name or, for a link, by the name of the file it leads to."""
    p = Path(path)
    names = [p.name]
    try:
        names.append(p.resolve().name)
    except (OSError, RuntimeError):
        pass
    return any(bad in name.lower() for name in names for bad in FORBIDDEN)


def _check_allowed(path: Path) -> None:
    if is_test_set(path):
        raise InputError(f"{path.name} is a test set: never train or select models on it")


def _cached_docs(cache: Path, key: str, build) -> list[Document]:
    """Load documents from ``cache/<key>.jsonl.gz`` or build and store them."""
    path = cache / f"{key}.jsonl.gz"
    if path.is_file():
        docs = []
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                obj = json.loads(line)
                docs.append(Document(obj["name"], obj["words"], obj["labels"], case=obj.get("case")))
        return docs
    docs = build()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # two runs may convert the same text at once
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        for d in docs:
            rec = {"name": d.name, "words": d.words, "labels": d.labels}
            if d.case is not None:
                rec["case"] = d.case
            f.write(json.dumps(rec) + "\n")
    tmp.replace(path)
    return docs


def load_ted_talks(root: Path, cache: Path) -> list[Document]:
    """All TED talks of ``ted.jsonl.gz`` converted to word/label documents (cached)."""
    from streampunct.text.convert import text_to_word_labels_cased
    from streampunct.text.word_labels import iter_ted_talks

    src = named_file(root, TED_FILE, "ted")
    key = f"ted_{_sha256(src)[:12]}_{_converter_fingerprint()}"

    def build() -> list[Document]:
        log.info("converting %s (cached afterwards)", src)
        docs = []
        for talk_id, text in iter_ted_talks(src):
            words, labels, case = text_to_word_labels_cased(text)
            if words:
                docs.append(Document(f"ted:{talk_id}", words, labels, case=case))
        return docs

    return _cached_docs(cache, key, build)


#: Conversational training text is cut into documents of this many lines (turns), so that
#: a word cap samples it evenly and epochs shuffle it; validation files stay one document.
CHUNKED_LINES = {"swda": 200}


def load_cased_text(path: Path, cache: Path, name: str, *, lines_per_doc: int = 0) -> list[Document]:
    """A cased, punctuated text file (one segment a line) as converted documents: one, or one
    per ``lines_per_doc`` lines (named ``name:k``)."""
    from streampunct.text.convert import text_to_word_labels_cased

    _check_allowed(path)
    key = f"{name}_{_sha256(path)[:12]}_{_converter_fingerprint()}" + (f"_c{lines_per_doc}" if lines_per_doc else "")

    def build() -> list[Document]:
        text = path.read_text(encoding="utf-8", errors="replace")
        if not lines_per_doc:
            words, labels, case = text_to_word_labels_cased(text)
            return [Document(name, words, labels, case=case)]
        lines = text.splitlines()
        docs = []
        for k in range(0, len(lines), lines_per_doc):
            words, labels, case = text_to_word_labels_cased("\n".join(lines[k : k + lines_per_doc]))
            if words:
                docs.append(Document(f"{name}:{k // lines_per_doc}", words, labels, case=case))
        return docs

    return _cached_docs(cache, key, build)


def load_labelled(source: str, root: Path, cache: Path) -> list[Document]:
    """Documents of one named labelled source or ``word<TAB>LABEL`` file path."""
    from streampunct.text.word_labels import read_word_labels

    if source == "ted":
        return load_ted_talks(root, cache)
    if source in LABELLED_FILES:
        path = named_file(root, LABELLED_FILES[source], source)
    elif source in CASED_FILES:
        return load_cased_text(named_file(root, CASED_FILES[source], source), cache, source,
                               lines_per_doc=CHUNKED_LINES.get(source, 0))
    else:
        path = source_paths(source, root)  # a file: from the current directory
        _check_allowed(path)  # a test set is refused by name, whether or not it is there
        if not path.exists():
            names = ["ted", *LABELLED_FILES, *CASED_FILES]
            hint = (f" ({source!r} is an unlabeled source: data.unlabeled, not data.train)"
                    if source in UNLABELED_FILES else "")
            raise InputError(f"labelled source {source!r} is neither a name ({', '.join(names)}) nor a "
                             f"word<TAB>LABEL file (no {path}){hint}")
    _check_allowed(path)
    wl = read_word_labels(path)
    return [Document(source, wl.words, wl.labels)]


def source_paths(source: str, root: Path, *, unlabeled: bool = False) -> Path:
    """The file behind a named source (for data hashes)."""
    if unlabeled and source in UNLABELED_FILES:
        return root / UNLABELED_FILES[source]
    if source == "ted":
        return root / TED_FILE
    if source in LABELLED_FILES:
        return root / LABELLED_FILES[source]
    if source in CASED_FILES:
        return root / CASED_FILES[source]
    return Path(source).expanduser().absolute()


def cap_words(docs: list[Document], max_words: int, seed: int) -> list[Document]:
    """At most ``max_words`` words: documents in a seeded random order, the last one cut."""
    if max_words <= 0 or sum(len(d) for d in docs) <= max_words:
        return docs
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    out, total = [], 0
    for i in order:
        d = docs[i]
        take = min(len(d), max_words - total)
        out.append(Document(d.name, d.words[:take], d.labels[:take], d.pseudo,
                            d.case[:take] if d.case is not None else None,
                            d.soft[:take] if d.soft is not None else None))
        total += take
        if total >= max_words:
            break
    return out


#: Shortest document the punctuation-density rule judges (shorter ones are kept as they are).
MIN_JUDGED_WORDS = 50


def lacks_human_marks(labels: Sequence[int], min_marks_per_100_words: float) -> bool:
    """A labelled document of at least MIN_JUDGED_WORDS words with fewer marks per 100 words
    than ``min_marks_per_100_words``: text nobody punctuated (automatic captions filed as
    transcripts), whose O labels are not human decisions. Human text has 10-15."""
    n = len(labels)
    if min_marks_per_100_words <= 0 or n < MIN_JUDGED_WORDS:
        return False
    marks = sum(1 for x in labels if x > 0)
    return 100.0 * marks / n < min_marks_per_100_words


def drop_unpunctuated(docs: Sequence[Document], min_marks_per_100_words: float) -> list[Document]:
    """``docs`` without the human-labelled documents that :func:`lacks_human_marks`."""
    kept = [d for d in docs if d.pseudo or not lacks_human_marks(d.labels, min_marks_per_100_words)]
    if len(kept) < len(docs):
        log.info("left out %d labelled documents (%d words) with under %.1f marks per 100 words: "
                 "no human punctuation", len(docs) - len(kept),
                 sum(map(len, docs)) - sum(map(len, kept)), min_marks_per_100_words)
    return kept


def load_training_docs(sources: Sequence[str], root: Path, cache: Path, *,
                       max_words: int = 0, seed: int = 0) -> list[Document]:
    docs: list[Document] = []
    for source in sources:
        docs.extend(load_labelled(source, root, cache))
    return cap_words(docs, max_words, seed)


def load_validation_docs(source: str, root: Path, cache: Path, *, max_words: int = 0) -> list[Document]:
    docs = load_labelled(source, root, cache)
    if max_words > 0:
        docs = cap_words(docs, max_words, seed=0)
    return docs


def check_unlabeled(sources: Sequence[str], root: Path) -> list[Path]:
    """The files of unlabeled ``sources``; an :class:`InputError` for a test set or a file that
    is not there (before any work that needs them)."""
    paths = []
    for source in sources:
        if source in UNLABELED_FILES:  # a named source: the data folder's file, or which stage builds it
            paths.append(named_file(root, UNLABELED_FILES[source], source))
            continue
        path = source_paths(source, root, unlabeled=True)
        _check_allowed(path)  # a test set is refused by name, whether or not it is there
        if not path.is_file():
            names = ", ".join(UNLABELED_FILES)
            raise InputError(f"no such unlabeled file: {path} (data.unlabeled takes {names} or a text file)")
        paths.append(path)
    return paths


def load_unlabeled(sources: Sequence[str], root: Path, *, max_words: int, seed: int,
                   exclude: Collection[str] = ()) -> list[Document]:
    """Unpunctuated transcripts, one document a line (TEDx: one talk a line); documents named in
    ``exclude`` are left out before the cap counts (``held_out_captions``' names, for one).

    Words go through the same converter as the labelled text so that
    contractions are split the IWSLT way (``it 's``). The documents are marked ``pseudo``:
    their O labels are placeholders, never human labels (a soft-label file once stored them as
    human O, and students learned to leave ASR text unpunctuated).
    """
    from streampunct.text.convert import text_to_word_labels

    groups: list[tuple[str, str]] = []
    for source, path in zip(sources, check_unlabeled(sources, root), strict=True):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
        # Conversational files have one utterance a line: group them into
        # documents of ~200 lines so that sequences span several turns.
        group = 1 if source == "tedx" else 200
        groups.extend((f"{source}:{k}", " ".join(lines[k : k + group]))
                      for k in range(0, len(lines), group))
    # Convert only what the cap needs, in a seeded random order.
    random.Random(seed).shuffle(groups)
    if exclude:
        skip = set(exclude)
        groups = [g for g in groups if g[0] not in skip]
    docs: list[Document] = []
    total = 0
    for name, text in groups:
        if max_words > 0 and total >= max_words:
            break
        words, _ = text_to_word_labels(text)
        if max_words > 0:
            words = words[: max_words - total]
        if words:
            docs.append(Document(name, words, [O] * len(words), pseudo=True))
            total += len(words)
    return docs


# TEDx captions held out from training: benchmarks.mark_rate measures how densely a model marks
# ASR output on them. The release students trained on CAPTION_TRAINING_DRAW; every other caption
# draw leaves out held_out_captions' talks (training.distill label --exclude-held-out-captions).
CAPTION_TRAINING_DRAW = {"max_words": 400_000, "seed": 15}
HELD_OUT_CAPTION_WORDS = 100_000


def fitted_caption_draw(root: Path, draw: dict) -> dict:
    """``draw`` shrunk to a data folder whose captions it would take entirely (a tiny folder, with
    fewer caption words than the draw: nothing would be held out): at most half the folder's
    caption words, and never the last talk in the draw's order, so that talks are held out. The
    same draw for every caller (label's exclusion, the trainer's caption marks, mark_rate), as it
    depends on the folder alone. ``draw`` itself where it leaves talks out or the folder holds
    fewer than two talks."""
    talks = load_unlabeled(["tedx"], root, max_words=0, seed=draw.get("seed", 0))
    if len(talks) < 2:
        return draw
    total = sum(map(len, talks))
    # load_unlabeled stops once it holds max_words words: this many ends before the last talk starts
    fitted = {**draw, "max_words": min(total // 2, total - len(talks[-1]))}
    log.warning("the TEDx caption training draw (%s words) would take every caption talk in %s (%d words in "
                "%d talks): drawing %d words instead, so that talks are held out", f"{draw.get('max_words', 0):,}",
                root, total, len(talks), fitted["max_words"])
    return fitted


def held_out_captions(root: Path, words: int = HELD_OUT_CAPTION_WORDS, seed: int = 7,
                      training_draw: dict | None = None) -> list[Document]:
    """Caption talks outside ``training_draw`` (default CAPTION_TRAINING_DRAW), a seeded sample
    of about ``words`` words, whole talks. Where the draw would take every talk (a folder with
    fewer caption words than the draw), the draw is :func:`fitted_caption_draw`'s; empty only
    where the folder holds fewer than two caption talks."""
    draw = CAPTION_TRAINING_DRAW if training_draw is None else training_draw
    everything = load_unlabeled(["tedx"], root, max_words=0, seed=0)
    drawn = {d.name for d in load_unlabeled(["tedx"], root, **draw)}
    rest = [d for d in everything if d.name not in drawn]
    if not rest and everything:
        drawn = {d.name for d in load_unlabeled(["tedx"], root, **fitted_caption_draw(root, draw))}
        rest = [d for d in everything if d.name not in drawn]
    random.Random(seed).shuffle(rest)
    out, total = [], 0
    for d in rest:
        if total >= words:
            break
        out.append(d)
        total += len(d)
    return out


# --- encoding and batching ----------------------------------------------------------


@dataclass
class EncodedDoc:
    """A document as sub-token ids.

    Attributes:
        ids: int32[n_tokens] content token ids (no CLS/SEP).
        word_start: int64[n_words + 1] token offset of each word, then n_tokens.
        label_tok: int64[n_words] token index carrying each word's label.
        labels: int64[n_words].
        pseudo: labels come from a teacher.
        case: int64[n_words] case classes (``IGNORE`` where unknown) or None.
        soft: float32[n_words, C] teacher probabilities (NaN rows: none) or None.
    """

    ids: np.ndarray
    word_start: np.ndarray
    label_tok: np.ndarray
    labels: np.ndarray
    pseudo: bool = False
    case: np.ndarray | None = None
    soft: np.ndarray | None = None

    @property
    def n_words(self) -> int:
        return len(self.labels)


def encode_document(doc: Document, aligner: Aligner) -> EncodedDoc:
    ids, starts, label_pos = aligner.encode_words(doc.words)
    return EncodedDoc(
        ids=np.asarray(ids, dtype=np.int32),
        word_start=np.asarray([*starts, len(ids)], dtype=np.int64),
        label_tok=np.asarray(label_pos, dtype=np.int64),
        labels=np.asarray(doc.labels, dtype=np.int64),
        pseudo=doc.pseudo,
        case=np.asarray(doc.case, dtype=np.int64) if doc.case is not None else None,
        soft=np.asarray(doc.soft, dtype=np.float32) if doc.soft is not None else None,
    )


@dataclass
class Batch:
    """Padded model inputs.

    Attributes:
        input_ids, attention_mask: int64[B, T] (``[CLS] tokens [SEP] pad...``).
        labels: int64[B, T], ``IGNORE`` except on label tokens.
        pseudo: bool[B], the sequence's labels come from a teacher.
        task: ``"pun"`` or ``"pos"`` (adversarial multi-task).
        case_labels: int64[B, T] case classes on label tokens (``IGNORE``
            elsewhere), or None when no document of the batch has case.
        soft: float32[B, T, C] teacher probabilities on label tokens, NaN
            elsewhere, or None when no document has them.
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    labels: np.ndarray
    pseudo: np.ndarray
    task: str = "pun"
    case_labels: np.ndarray | None = None
    soft: np.ndarray | None = None

    @property
    def n_labelled(self) -> int:
        return int((self.labels != IGNORE).sum())


def cut_sequences(doc: EncodedDoc, content_len: int, offset: int) -> list[tuple[int, int]]:
    """Word spans ``[w0, w1)`` of at most ``content_len`` tokens, cut at word boundaries.

    The first span holds only the words within the first ``offset`` tokens
    (``offset`` in ``[0, content_len)``; 0 gives full spans from the start).
    """
    spans = []
    ws = doc.word_start
    offset = min(offset, content_len)
    w = 0
    n = doc.n_words
    if offset > 0:
        end = int(np.searchsorted(ws, ws[0] + offset, side="right")) - 1
        if end > 0:
            spans.append((0, min(end, n)))
            w = min(end, n)
    while w < n:
        end = int(np.searchsorted(ws, ws[w] + content_len, side="right")) - 1
        end = max(end, w + 1)  # a word longer than content_len still forms a span (truncated)
        end = min(end, n)
        spans.append((w, end))
        w = end
    return spans


def make_batch(items: Sequence[tuple[EncodedDoc, int, int]], aligner: Aligner, content_len: int,
               task: str = "pun") -> Batch:
    """Pad sequences ``(doc, w0, w1)`` into one batch."""
    lengths = []
    for doc, w0, w1 in items:
        lengths.append(min(int(doc.word_start[w1] - doc.word_start[w0]), content_len) + 2)
    t = max(lengths)
    b = len(items)
    input_ids = np.full((b, t), aligner.pad_id, dtype=np.int64)
    mask = np.zeros((b, t), dtype=np.int64)
    labels = np.full((b, t), IGNORE, dtype=np.int64)
    pseudo = np.zeros(b, dtype=bool)
    case = np.full((b, t), IGNORE, dtype=np.int64) if any(d.case is not None for d, _, _ in items) else None
    soft_c = next((d.soft.shape[1] for d, _, _ in items if d.soft is not None), 0)
    soft = np.full((b, t, soft_c), np.nan, dtype=np.float32) if soft_c else None
    for row, (doc, w0, w1) in enumerate(items):
        t0 = int(doc.word_start[w0])
        n = lengths[row] - 2
        input_ids[row, 0] = aligner.cls_id
        input_ids[row, 1 : n + 1] = doc.ids[t0 : t0 + n]
        input_ids[row, n + 1] = aligner.sep_id
        mask[row, : n + 2] = 1
        pos = doc.label_tok[w0:w1] - t0 + 1
        keep = pos <= n  # a truncated over-long word loses its label token
        labels[row, pos[keep]] = doc.labels[w0:w1][keep]
        pseudo[row] = doc.pseudo
        if case is not None and doc.case is not None:
            case[row, pos[keep]] = doc.case[w0:w1][keep]
        if soft is not None and doc.soft is not None and doc.soft.shape[1] == soft_c:
            soft[row, pos[keep]] = doc.soft[w0:w1][keep]
    return Batch(input_ids, mask, labels, pseudo, task, case, soft)


def stream_cut(doc: EncodedDoc, w0: int, w1: int, rng: np.random.Generator) -> tuple[int, int]:
    """Streaming-aware cut: end the span ``[w0, w1)`` at a random word.

    The server decides words with little or no right context (a delay bound
    fires, a chunk ends); a span that ends at a random word teaches the last
    words of the span to decide that way (their right context is 0, 1, 2...
    words), with the left context the span had.
    """
    if w1 - w0 < 2:
        return w0, w1
    return w0, int(rng.integers(w0 + 1, w1 + 1))


class SequenceDataset:
    """Encoded documents that yield shuffled batches, one fresh cut per epoch.

    Options (both seeded by ``(seed, epoch)``, so resumed runs replay them):
    ``noise`` rewrites a share of the documents each epoch with disfluencies
    and ASR errors (``training.augment``); ``stream_cut_share`` ends that share
    of the spans at a random word (``stream_cut``).
    """

    def __init__(self, docs: Sequence[Document], aligner: Aligner, *, max_len: int,
                 task: str = "pun", noise: NoiseConfig | None = None,
                 stream_cut_share: float = 0.0) -> None:
        self.aligner = aligner
        self.content_len = max_len - 2
        self.task = task
        self.noise = noise if noise is not None and noise.enabled else None
        self.stream_cut_share = stream_cut_share
        self.raw = [d for d in docs if len(d)] if self.noise is not None else []
        self.docs = [encode_document(d, aligner) for d in docs if len(d)]
        if not self.docs:
            raise InputError("no training words")

    def epoch_docs(self, rng: np.random.Generator) -> list[EncodedDoc]:
        """The documents of one epoch: noisy copies of a share when noise is on."""
        if self.noise is None:
            return self.docs
        out = []
        for raw, enc in zip(self.raw, self.docs, strict=True):
            if rng.random() >= self.noise.share:
                out.append(enc)
                continue
            words, labels, case, soft = augment(raw.words, raw.labels, raw.case, raw.soft, rng, self.noise)
            out.append(encode_document(Document(raw.name, words, labels, raw.pseudo, case, soft),
                                       self.aligner))
        return out

    @property
    def n_words(self) -> int:
        return sum(d.n_words for d in self.docs)

    @property
    def n_tokens(self) -> int:
        return sum(len(d.ids) for d in self.docs)

    def epoch_sequences(self, seed: int, epoch: int) -> list[tuple[EncodedDoc, int, int]]:
        rng = np.random.default_rng([seed, epoch])
        seqs = []
        for doc in self.epoch_docs(rng):
            offset = int(rng.integers(0, self.content_len))
            seqs.extend((doc, w0, w1) for w0, w1 in cut_sequences(doc, self.content_len, offset))
        if self.stream_cut_share > 0:
            chosen = rng.random(len(seqs)) < self.stream_cut_share
            seqs = [(d, *stream_cut(d, w0, w1, rng)) if c else (d, w0, w1)
                    for (d, w0, w1), c in zip(seqs, chosen, strict=True)]
        order = rng.permutation(len(seqs))
        return [seqs[i] for i in order]

    def batches_per_epoch(self, batch_size: int) -> int:
        # Cuts vary a little with the offset: estimate from epoch 0 (exact enough
        # for the learning-rate schedule).
        if getattr(self, "_n_seqs", None) is None:
            self._n_seqs = len(self.epoch_sequences(0, 0))
        return -(-self._n_seqs // batch_size)

    def iter_batches(self, batch_size: int, seed: int, epoch: int) -> Iterator[Batch]:
        seqs = self.epoch_sequences(seed, epoch)
        for k in range(0, len(seqs), batch_size):
            yield make_batch(seqs[k : k + batch_size], self.aligner, self.content_len, self.task)
