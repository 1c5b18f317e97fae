"""Knowledge distillation: a teacher writes per-word soft labels once; students read them.

``python -m training.distill label --teacher DIR --labelled ted swda --unlabeled tedx --out F.npz``
decodes the texts with the teacher (a training checkpoint, torch; or a runtime
model folder, ONNX) exactly as the service decodes (offline double-overlap
windows) and stores each word's class probabilities as float16: the
punctuation's 4, then the case head's 4 when the teacher has one. Labels are
per *word*, so a student with another tokenizer reads them as they are.

A student trains on them with ``data.soft_labels = ["F.npz"]`` and the loss of
``[method.distill]`` (``training.losses.distill_loss``): documents that are
also in ``data.train`` (same name, same words) get the probabilities
attached to their human labels; the others (unlabeled text) join the
training data as teacher-only documents.

File format (``numpy.savez_compressed``): ``probs`` float16[N, C], ``labels``
int8[N] (human punctuation label, -1 unknown), ``case`` int8[N] (case
class, -1 unknown), ``lengths`` int64[D], ``text`` uint8 (UTF-8 of the
documents, one a line, words separated by spaces), ``names`` uint8 (UTF-8,
one a line), ``meta`` uint8 (UTF-8 JSON: teacher, sources, classes).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from streampunct.errors import InputError
from streampunct.labels import CASE_LABELS, LABELS
from training.cli_support import check_writable, run_tool
from training.data import IGNORE, Document

log = logging.getLogger(__name__)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def logits_to_probs(logits: np.ndarray) -> np.ndarray:
    """Per-word logits [n, 4] or [n, 8] (punctuation, then case) -> probabilities per head."""
    n_punct = len(LABELS)
    parts = [softmax(logits[:, :n_punct])]
    if logits.shape[1] > n_punct:
        parts.append(softmax(logits[:, n_punct : n_punct + len(CASE_LABELS)]))
    return np.concatenate(parts, axis=1)


def _utf8(lines: Sequence[str]) -> np.ndarray:
    return np.frombuffer("\n".join(lines).encode("utf-8"), dtype=np.uint8)


def _lines(arr: np.ndarray) -> list[str]:
    text = arr.tobytes().decode("utf-8")
    return text.split("\n") if text else []


def write_soft_labels(path: str | Path, docs: Sequence[Document], probs: Sequence[np.ndarray],
                      meta: dict) -> Path:
    """Store documents with their per-word teacher probabilities (atomically)."""
    if len(docs) != len(probs):
        raise ValueError("one probability array per document")
    for d, p in zip(docs, probs, strict=True):
        if len(p) != len(d) or any(" " in w or "\n" in w for w in d.words):
            raise ValueError(f"{d.name}: {len(p)} rows for {len(d)} words, or a word holds a space")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    labels = np.concatenate([np.asarray([x if not d.pseudo else -1 for x in d.labels], dtype=np.int8)
                             for d in docs]) if docs else np.zeros(0, np.int8)
    case = np.concatenate([np.asarray(d.case if d.case is not None else [-1] * len(d), dtype=np.int64)
                           .clip(-1, 127).astype(np.int8) for d in docs]) if docs else np.zeros(0, np.int8)
    case[case < 0] = -1
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(
        tmp,
        probs=np.concatenate(probs).astype(np.float16) if docs else np.zeros((0, 4), np.float16),
        labels=labels, case=case,
        lengths=np.asarray([len(d) for d in docs], dtype=np.int64),
        text=_utf8([" ".join(d.words) for d in docs]),
        names=_utf8([d.name for d in docs]),
        meta=_utf8([json.dumps(meta)]),
    )
    tmp.replace(path)
    return path


def unlabeled_only_sources(meta: dict) -> set[str]:
    """Sources a soft-label file took as unlabeled text only (from its metadata). Files written
    before unlabeled words were stored as unknown (2026-11-26) hold O (0) for them: a document
    of such a source with all labels 0 had no human labels."""
    return set(meta.get("unlabeled", [])) - set(meta.get("labelled", []))


#: The arrays of a soft-label file (:func:`write_soft_labels`).
SOFT_LABEL_ARRAYS = ("probs", "labels", "case", "lengths", "text", "names", "meta")


def load_soft_label_arrays(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of a soft-label file, read whole; an :class:`InputError` naming the file when
    it is missing or not one (another file, a damaged or foreign ``.npz``), never numpy's error
    (``np.load`` reads a file it does not recognise as a pickle, and refuses that)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no such soft-label file: {path}")
    not_one = f"{path} is not a soft-label file (an .npz written by python -m training.distill label)"
    try:
        with np.load(path, allow_pickle=False) as z:  # a lone .npy array has no `with`: TypeError
            arrays = {k: z[k] for k in z.files}
    except (ValueError, TypeError, OSError, EOFError, zipfile.BadZipFile, zlib.error):
        raise InputError(not_one) from None
    missing = [k for k in SOFT_LABEL_ARRAYS if k not in arrays]
    if missing:
        raise InputError(f"{not_one}: it has no {', '.join(missing)}")
    return arrays


def read_soft_labels(path: str | Path, *, min_marks_per_100_words: float = 0.0
                     ) -> tuple[list[Document], dict]:
    """Documents with ``soft`` set (float32) and their metadata.

    Words without a human label get the teacher's argmax as label and the
    document is marked ``pseudo`` (no human cross-entropy is taken on it). So does a
    document whose human labels :func:`training.data.lacks_human_marks` (text nobody
    punctuated, filed under a labelled source) when ``min_marks_per_100_words`` > 0.
    """
    from training.data import lacks_human_marks

    z = load_soft_label_arrays(path)
    probs = z["probs"].astype(np.float32)
    labels, case, lengths = z["labels"], z["case"], z["lengths"]
    texts, names = _lines(z["text"]), _lines(z["names"])
    meta = json.loads(z["meta"].tobytes().decode("utf-8"))
    unlabeled_only = unlabeled_only_sources(meta)
    docs = []
    k = 0
    for name, text, n in zip(names, texts, lengths, strict=True):
        n = int(n)
        words = text.split(" ") if n else []
        p = probs[k : k + n]
        lab = labels[k : k + n].astype(np.int64)
        if (name.split(":", 1)[0] in unlabeled_only and not lab.any()) \
                or ((lab >= 0).all() and lacks_human_marks(lab.tolist(), min_marks_per_100_words)):
            lab = np.full_like(lab, -1)
        pseudo = bool((lab < 0).any())
        if pseudo:
            lab = np.where(lab < 0, p[:, : len(LABELS)].argmax(-1), lab)
        c = case[k : k + n].astype(np.int64)
        docs.append(Document(name, words, lab.tolist(), pseudo,
                             np.where(c < 0, IGNORE, c).tolist() if (c >= 0).any() else None, p))
        k += n
    return docs, meta


def attach_soft_labels(train_docs: Sequence[Document], paths: Sequence[str], *,
                       min_marks_per_100_words: float = 0.0) -> list[Document]:
    """Training documents with teacher probabilities attached where a soft-label file has
    the same document (name and words); the files' other documents are appended
    (teacher-only where :func:`read_soft_labels` finds no human labels)."""
    by_name = {d.name: i for i, d in enumerate(train_docs)}
    out = list(train_docs)
    attached = appended = 0
    for path in paths:
        soft_docs, meta = read_soft_labels(path, min_marks_per_100_words=min_marks_per_100_words)
        for sd in soft_docs:
            i = by_name.get(sd.name)
            if i is not None and out[i].words == sd.words:
                d = out[i]
                out[i] = Document(d.name, d.words, d.labels, d.pseudo, d.case, sd.soft)
                attached += 1
            else:
                out.append(sd)
                appended += 1
        log.info("soft labels %s (teacher %s): %d documents attached, %d added",
                 path, meta.get("teacher"), attached, appended)
    return out


# --- labelling ---------------------------------------------------------------------


def teacher_identity(teacher: str | Path) -> str:
    """A sha256 of what a teacher computes with: a runtime folder's artifact (its sidecar's
    ``artifact_sha256``, the file's hash otherwise), or a checkpoint's weight files."""
    import hashlib

    from streampunct.text.word_labels import file_sha256
    from training.evaluation import is_runtime_model

    path = Path(teacher)
    if is_runtime_model(path):
        from engines.model_meta import read_model_meta
        from engines.sidecar import read_sidecar

        artifact = path / read_model_meta(path).artifact
        return read_sidecar(artifact).artifact_sha256 or file_sha256(artifact)
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise InputError(f"{path} is neither a runtime model folder nor a training checkpoint "
                         "(no streampunct.json with an ONNX artifact, no *.safetensors)")
    return hashlib.sha256("".join(f"{f.name}:{file_sha256(f)}\n" for f in files).encode()).hexdigest()


def teacher_decoder(teacher: str | Path, *, device: str = "auto", bf16: bool = False, threads: int = 0):
    """``(decode(docs) -> per-word logits list, description)`` for a checkpoint or runtime folder.
    ``threads`` > 0 caps the CPU threads (ONNX Runtime's intra-op threads, torch's threads)."""
    from training.evaluation import RuntimeModel, decode_documents, is_runtime_model

    path = Path(teacher)
    if is_runtime_model(path):
        if device == "cuda" or bf16:  # ONNX Runtime's CPU graph: neither would be used
            raise InputError(f"{path} is a runtime folder (ONNX Runtime on the CPU): --device cuda and --bf16 "
                             "apply to a training checkpoint teacher")
        # punctuation, then case when the graph has it
        rm = RuntimeModel.open(path, heads="all", **({"intra_op_threads": threads} if threads > 0 else {}))
        return (lambda docs, bs=64: rm.logits(docs, batch_size=bs)), {
            "teacher": str(path), "kind": "runtime", "teacher_sha256": teacher_identity(path)}
    import torch

    from streampunct.core.windowing import WindowConfig
    from training.checkpoint import checkpoint_aligner, load_checkpoint
    from training.model import make_infer

    if threads > 0:
        torch.set_num_threads(threads)
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: torch sees no CUDA device here (use --device cpu or auto)")
    model, meta = load_checkpoint(path)
    dev = "cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device)
    model.to(dev).eval()
    aligner = checkpoint_aligner(path, meta)
    window = WindowConfig(**{k: meta["window"][k] for k in ("size", "left", "right")})
    infer = make_infer(model, heads="all", bf16=bf16)

    def decode(docs, bs=64):
        return decode_documents(infer, aligner, docs, window, batch_size=bs)

    return decode, {"teacher": str(path), "kind": "checkpoint", "teacher_sha256": teacher_identity(path),
                    "case_head": getattr(model, "case_head", None) is not None}


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)`` (the range is checked by :func:`label_sources`)."""
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise InputError(f"--shard must be K/N (e.g. 0/4), got {text!r}") from None
    return k, n


def select_documents(labelled: Sequence[str], unlabeled: Sequence[str], *, data_root_dir: str = "",
                     cache_dir: str = "cache", max_unlabeled_words: int = 0, max_labelled_words: int = 0,
                     seed: int = 13, exclude_held_out_captions: bool = False) -> list[Document]:
    """The documents a labelling run covers, in the order shards take them from.

    ``labelled`` sources are capped like ``data.max_train_words`` with the same seed, so a
    student with the same sources, cap and seed trains on exactly these documents;
    ``unlabeled`` sources are capped by ``max_unlabeled_words`` and stored without human labels.
    ``exclude_held_out_captions`` leaves out the TEDx talks that ``benchmarks.mark_rate`` holds
    out (``training.data.held_out_captions``), so that a caption draw larger than the students'
    400k words keeps that check clean.
    """
    from training.data import (
        data_root,
        held_out_captions,
        load_training_docs,
        load_unlabeled,
        resolve_cache,
    )

    root = data_root(data_root_dir)
    cache = resolve_cache(cache_dir)
    docs: list[Document] = load_training_docs(labelled, root, cache, max_words=max_labelled_words, seed=seed) \
        if labelled else []
    if unlabeled:
        # pseudo documents (no human labels): stored as unknown (-1), so that a student reads the
        # teacher's argmax and takes no human cross-entropy there
        held = {d.name for d in held_out_captions(root)} if exclude_held_out_captions else set()
        docs.extend(load_unlabeled(unlabeled, root, max_words=max_unlabeled_words, seed=seed, exclude=held))
    return docs


def _label(decode, meta: dict, docs: Sequence[Document], out: str | Path, *, batch_size: int,
           labelled: Sequence[str], unlabeled: Sequence[str], shard: tuple[int, int]) -> Path:
    from tqdm import tqdm

    k, n = shard
    t0 = time.perf_counter()
    probs = []
    # Documents in chunks so the progress bar moves; the decoder batches windows itself.
    for d in tqdm(docs, desc=f"soft labels {k}/{n}", unit="doc", mininterval=5.0, file=sys.stderr):
        probs.append(logits_to_probs(decode([d], batch_size)[0]))
    meta = dict(meta, labelled=list(labelled), unlabeled=list(unlabeled), words=sum(map(len, docs)),
                shard=f"{k}/{n}", seconds=round(time.perf_counter() - t0, 1), classes=list(LABELS) + (
                    list(CASE_LABELS) if probs and probs[0].shape[1] > len(LABELS) else []))
    path = write_soft_labels(out, docs, probs, meta)
    log.info("wrote %s: %d documents, %d words", path, len(docs), meta["words"])
    return path


def label_sources(teacher: str | Path, labelled: Sequence[str], unlabeled: Sequence[str], out: str | Path,
                  *, data_root_dir: str = "", cache_dir: str = "cache", max_unlabeled_words: int = 0,
                  max_labelled_words: int = 0, seed: int = 13, batch_size: int = 64, device: str = "auto",
                  bf16: bool = False, shard: tuple[int, int] = (0, 1),
                  exclude_held_out_captions: bool = False, threads: int = 0) -> Path:
    """Soft labels for the documents :func:`select_documents` picks, into one file.

    ``shard=(K, N)`` labels only every N-th document from the K-th: N runs with K = 0..N-1
    (each its own file, written atomically) label the whole selection between them, so a
    labelling job longer than one stretch of machine time is done in parts. A student lists
    all N files in ``data.soft_labels``. :func:`label_shard_dir` runs all N in one process.
    """
    k, n = shard
    if not 0 <= k < n:  # before any data is read
        raise InputError(f"--shard K/N needs 0 <= K < N, got {k}/{n}")
    check_writable(out, "--out")  # now, not after the labelling
    docs = select_documents(labelled, unlabeled, data_root_dir=data_root_dir, cache_dir=cache_dir,
                            max_unlabeled_words=max_unlabeled_words, max_labelled_words=max_labelled_words,
                            seed=seed, exclude_held_out_captions=exclude_held_out_captions)
    decode, meta = teacher_decoder(teacher, device=device, bf16=bf16, threads=threads)
    return _label(decode, meta, docs[k::n], out, batch_size=batch_size, labelled=labelled,
                  unlabeled=unlabeled, shard=(k, n))


def shard_path(out_dir: str | Path, k: int, n: int) -> Path:
    return Path(out_dir) / f"shard_{k:03d}_of_{n:03d}.npz"


def check_shard(path: Path, docs: Sequence[Document], k: int, n: int, teacher: str | Path | None = None,
                teacher_sha256: str | None = None) -> None:
    """A finished shard file holds exactly the selection's documents ``docs[k::n]`` (names and
    word counts), one probability row a word, labelled by ``teacher`` (when given: the same
    :func:`teacher_identity`, ``teacher_sha256`` when known, or, in a file that does not record
    it, the same folder); raises InputError naming the file otherwise."""
    z = np.load(path)
    meta = json.loads(z["meta"].tobytes().decode("utf-8"))
    if teacher is not None:
        recorded = meta.get("teacher_sha256")
        if recorded is not None:
            same = recorded == (teacher_sha256 or teacher_identity(teacher))
        else:
            same = Path(str(meta.get("teacher", ""))).resolve() == Path(teacher).resolve()
        if not same:
            raise InputError(f"{path} was labelled by another teacher ({meta.get('teacher')}) than {teacher}: "
                             "move it away or use another --out (a transfer set has one teacher)")
    want = docs[k::n]
    names = _lines(z["names"])
    lengths = [int(x) for x in z["lengths"]]
    if meta.get("shard") != f"{k}/{n}" or names != [d.name for d in want] \
            or lengths != [len(d) for d in want] or z["probs"].shape[0] != sum(lengths) \
            or not np.isfinite(z["probs"].astype(np.float32)).all():
        raise InputError(f"{path} does not hold shard {k}/{n} of this selection (other sources, cap "
                         "or seed, or a damaged file): move it away or use another --out")


def _claim(lock: Path) -> bool:
    """Take ``lock`` (a shard's ``.lock`` file) for this process; False while another live
    process on this host, or one of another host, holds it (:mod:`training.lockfile`: a lock
    whose process is gone is taken over, and so is one that still does not read after
    :data:`~training.lockfile.UNREADABLE_LOCK_S`)."""
    import os

    from training.lockfile import take

    return take(lock, [os.getpid()]) is None


def label_shard_dir(teacher: str | Path, labelled: Sequence[str], unlabeled: Sequence[str],
                    out_dir: str | Path, shards: int, *, data_root_dir: str = "", cache_dir: str = "cache",
                    max_unlabeled_words: int = 0, max_labelled_words: int = 0, seed: int = 13,
                    batch_size: int = 64, device: str = "auto", bf16: bool = False,
                    exclude_held_out_captions: bool = False, threads: int = 0,
                    poll_s: float = 30.0) -> list[Path]:
    """All ``shards`` shards of a selection into ``out_dir/shard_KKK_of_NNN.npz``, resumably:
    the selection is read once; a shard whose file exists is checked against the selection
    and skipped, so a stopped run started again labels only what is missing. Each file is
    written atomically when its shard is done (no partial file survives a stop).

    Several processes may run the same command (one per free core): each claims the next
    shard nobody holds (``shard_KKK_of_NNN.npz.lock``, released when it is done or stopped;
    a lock whose process died is taken over), and one that finds only shards others hold
    waits for them (every ``poll_s`` seconds), so that every process returns when all are done."""
    if shards < 1:
        raise InputError(f"--shards must be >= 1, got {shards}")
    check_writable(out_dir, "--out", folder=True)  # now, not after the data is read
    docs = select_documents(labelled, unlabeled, data_root_dir=data_root_dir, cache_dir=cache_dir,
                            max_unlabeled_words=max_unlabeled_words, max_labelled_words=max_labelled_words,
                            seed=seed, exclude_held_out_captions=exclude_held_out_captions)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    paths = [shard_path(out_dir, k, shards) for k in range(shards)]
    locks = [p.with_name(p.name + ".lock") for p in paths]
    identity = teacher_identity(teacher)
    checked = set()
    for k, p in enumerate(paths):
        if p.is_file():
            check_shard(p, docs, k, shards, teacher, identity)
            checked.add(k)
    total = sum(map(len, docs))
    log.info("%d documents, %d words in %d shards: %d done, %d to label",
             len(docs), total, shards, len(checked), shards - len(checked))
    decode = meta = None
    while True:
        pending = [k for k in range(shards) if not paths[k].is_file()]
        if not pending:
            break
        k = next((k for k in pending if _claim(locks[k])), None)
        if k is None:
            log.info("%d shards left, all being labelled by other processes; waiting", len(pending))
            time.sleep(poll_s)
            continue
        try:
            if paths[k].is_file():  # finished by another process meanwhile
                continue
            if decode is None:
                decode, meta = teacher_decoder(teacher, device=device, bf16=bf16, threads=threads)
            _label(decode, meta, docs[k::shards], paths[k], batch_size=batch_size, labelled=labelled,
                   unlabeled=unlabeled, shard=(k, shards))
        finally:
            locks[k].unlink(missing_ok=True)
    for k, p in enumerate(paths):  # this process's and the others'
        if k not in checked:
            check_shard(p, docs, k, shards, teacher, identity)
    log.info("all %d shards done in %s (%d words)", shards, out_dir, total)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.distill", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    lab = sub.add_parser("label", help="write a teacher's per-word soft labels for texts")
    lab.add_argument("--teacher", required=True, help="training checkpoint or runtime model folder")
    lab.add_argument("--labelled", nargs="*", default=[], help="labelled sources (ted, dev2012, swda, paths)")
    lab.add_argument("--unlabeled", nargs="*", default=[], help="unlabeled sources (tedx, swda, mrda, ...)")
    lab.add_argument("--max-unlabeled-words", type=int, default=0)
    lab.add_argument("--max-labelled-words", type=int, default=0,
                     help="cap as data.max_train_words does (same --seed: same documents)")
    lab.add_argument("--seed", type=int, default=13, help="the student's optim.seed")
    lab.add_argument("--out", required=True)
    lab.add_argument("--data-root", default="")
    lab.add_argument("--batch-size", type=int, default=64)
    lab.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    lab.add_argument("--bf16", action="store_true")
    lab.add_argument("--shard", default="0/1", metavar="K/N",
                     help="label every N-th document from the K-th only (default 0/1: all); "
                          "N runs, K = 0..N-1, cover the selection")
    lab.add_argument("--exclude-held-out-captions", action="store_true",
                     help="leave out the TEDx talks benchmarks.mark_rate holds out (any caption draw "
                          "larger than the students' 400k words)")
    lab.add_argument("--shards", type=int, default=None, metavar="N",
                     help="label all N shards into the folder --out (shard_KKK_of_NNN.npz), skipping "
                          "finished ones: a stopped run resumes with the same command; the same command "
                          "run again alongside labels other shards (one process per free core)")
    lab.add_argument("--threads", type=int, default=0,
                     help="CPU threads for the teacher (default: all physical cores)")
    args = ap.parse_args(argv)
    if not args.labelled and not args.unlabeled:
        ap.error("nothing to label: give --labelled and/or --unlabeled sources")
    if args.shards is not None:
        if args.shards < 1:
            ap.error(f"--shards must be >= 1, got {args.shards}")
        if args.shard != "0/1":
            ap.error("--shard and --shards exclude each other")
        return run_tool(lambda: label_shard_dir(
            args.teacher, args.labelled, args.unlabeled, args.out, args.shards, data_root_dir=args.data_root,
            max_unlabeled_words=args.max_unlabeled_words, batch_size=args.batch_size,
            max_labelled_words=args.max_labelled_words, seed=args.seed, device=args.device, bf16=args.bf16,
            exclude_held_out_captions=args.exclude_held_out_captions, threads=args.threads,
        ))
    return run_tool(lambda: label_sources(
        args.teacher, args.labelled, args.unlabeled, args.out, data_root_dir=args.data_root,
        max_unlabeled_words=args.max_unlabeled_words, batch_size=args.batch_size,
        max_labelled_words=args.max_labelled_words, seed=args.seed, device=args.device, bf16=args.bf16,
        shard=parse_shard(args.shard), exclude_held_out_captions=args.exclude_held_out_captions,
        threads=args.threads,
    ))


if __name__ == "__main__":
    raise SystemExit(main())
