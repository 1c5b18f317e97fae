"""Discriminative self-training (Chen et al., Interspeech).

1. A teacher is trained on human-labelled data (or taken from
   ``method.self_training.teacher``: a training checkpoint, possibly of a
   larger encoder than the student, or a runtime model folder such as the
   shipped ``models/default``, whose ONNX engine then does the labelling;
   ``training.evaluation.RuntimeModel``).
2. The teacher labels unlabeled transcripts (TEDx automatic captions, ...)
   with the offline double-overlap decoder; the labels are word-level, so
   teacher and student may use different tokenizers.
3. A student is trained from the base encoder on human + pseudo-labelled
   data: loss = (sum_human CE_beta1 + alpha * sum_pseudo CE_beta2) / n_tokens,
   with label smoothing beta1 on human and beta2 on pseudo labels
   (``training.losses.self_training_loss``).
4. While the student beats its teacher's validation F1 (and rounds remain),
   it becomes the next teacher.

Output folder: ``teacher/`` (when trained here), ``student_<i>/``, ``best/``
(a copy of the best model, teacher or student) and ``self_training.json``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from torch import nn

from engines.model_meta import has_model_meta, read_model_meta
from streampunct.core.alignment import Aligner
from streampunct.core.windowing import WindowConfig
from streampunct.labels import LABELS
from training.checkpoint import checkpoint_aligner, load_checkpoint
from training.config import TrainConfig
from training.data import Document, check_unlabeled, load_unlabeled
from training.evaluation import RuntimeModel, document_logits, is_runtime_model, validate
from training.model import resolve_base_model
from training.pipeline import file_hashes, prepare, supervised_trainer
from training.trainer import RunResult, seed_everything

log = logging.getLogger(__name__)


def pseudo_label(model: nn.Module, aligner: Aligner, docs: Sequence[Document], window: WindowConfig,
                 *, batch_size: int = 32) -> list[Document]:
    """Teacher predictions (argmax per word) as pseudo-labelled documents."""
    logits = document_logits(model, aligner, docs, window, batch_size=batch_size)
    return _as_pseudo(docs, logits)


def runtime_pseudo_label(model: RuntimeModel, docs: Sequence[Document], *, batch_size: int = 32
                         ) -> list[Document]:
    """A runtime model folder's predictions (its engine and window) as pseudo-labelled documents."""
    return _as_pseudo(docs, model.logits(docs, batch_size=batch_size))


def _as_pseudo(docs: Sequence[Document], logits: Sequence[np.ndarray]) -> list[Document]:
    return [Document(d.name, list(d.words), [int(x) for x in lg.argmax(-1)], pseudo=True)
            for d, lg in zip(docs, logits, strict=True)]


def label_distribution(docs: Sequence[Document]) -> dict[str, int]:
    counts = np.bincount(np.concatenate([np.asarray(d.labels, dtype=np.int64) for d in docs]),
                         minlength=len(LABELS))
    return {name: int(c) for name, c in zip(LABELS, counts, strict=True)}


def _done_record(run_dir: Path) -> dict | None:
    """The ``done`` record of a finished run (None: it has not finished)."""
    metrics = run_dir / "metrics.jsonl"
    if not has_model_meta(run_dir / "best") or not metrics.is_file():
        return None
    records = (json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines())
    return next((r for r in records if r.get("type") == "done"), None)


def _result_of(run_dir: Path, done: dict) -> RunResult:
    """A finished teacher's result, without running it again; its best F1 unrounded, from the
    run's ``done`` record (the checkpoint's metadata rounds it)."""
    meta = read_model_meta(run_dir / "best")
    f1 = done.get("best_f1")
    return RunResult(run_dir / "best", meta.get("validation")["overall_f1"] if f1 is None else f1,
                     meta.get("validation"), 0, meta.get("window"))


def run_self_training(cfg: TrainConfig, out_dir: Path, *, resume: bool = False) -> RunResult:
    st = cfg.method.self_training
    out_dir.mkdir(parents=True, exist_ok=True)
    setup = prepare(cfg)
    record: dict = {"rounds": []}
    # what the rounds need is checked now, not after the teacher's hours of training
    check_unlabeled(cfg.data.unlabeled, setup.root)
    student_base = resolve_base_model(st.student_base_model or cfg.model.base_model)

    # 1. teacher
    if st.teacher:
        teacher_dir = Path(st.teacher).expanduser().absolute()  # from the current directory
        # Scored with the same window as the students, for a fair comparison.
        window = WindowConfig(cfg.eval.window_size, cfg.eval.window_left, cfg.eval.window_right)
        if is_runtime_model(teacher_dir):
            rt = RuntimeModel.open(teacher_dir)
            try:
                t_val = rt.validate(setup.valid_docs, window, batch_size=cfg.eval.batch_size)
            finally:
                rt.close()
            best = RunResult(teacher_dir, t_val.overall_f1, t_val.to_dict(), 0, rt.window.to_dict())
        else:
            t_model, t_meta = load_checkpoint(teacher_dir)
            v = validate(t_model, checkpoint_aligner(teacher_dir, t_meta), setup.valid_docs,
                         window, batch_size=cfg.eval.batch_size)
            best = RunResult(teacher_dir, v.overall_f1, v.to_dict(), 0, t_meta["window"])
            del t_model
    else:
        teacher_cfg = dataclasses.replace(cfg, method=dataclasses.replace(cfg.method, kind="supervised"))
        run_dir = out_dir / "teacher"
        if resume and (done := _done_record(run_dir)) is not None:
            best = _result_of(run_dir, done)
        else:
            best = supervised_trainer(setup, run_dir, cfg=teacher_cfg).fit(resume=resume)
    record["teacher"] = {"dir": str(best.best_dir), "overall_f1": best.best_f1}
    log.info("teacher %s: validation overall F1 %.2f", best.best_dir, best.best_f1)

    # 2-4. rounds
    unlabeled = load_unlabeled(cfg.data.unlabeled, setup.root, max_words=cfg.data.max_unlabeled_words,
                               seed=cfg.optim.seed)

    hashes = file_hashes(list(cfg.data.unlabeled), setup.root, unlabeled=True)
    for it in range(1, st.max_iterations + 1):
        if is_runtime_model(best.best_dir):
            rt = RuntimeModel.open(best.best_dir)
            try:
                pseudo = runtime_pseudo_label(rt, unlabeled, batch_size=cfg.eval.batch_size)
            finally:
                rt.close()
        else:
            t_model, t_meta = load_checkpoint(best.best_dir)
            t_aligner = checkpoint_aligner(best.best_dir, t_meta)
            pseudo = pseudo_label(t_model, t_aligner, unlabeled, WindowConfig(**t_meta["window"]),
                                  batch_size=cfg.eval.batch_size)
            del t_model
        dist = label_distribution(pseudo)
        log.info("round %d: %d pseudo-labelled words from %s: %s", it, sum(dist.values()),
                 best.best_dir, dist)
        run_dir = out_dir / f"student_{it}"
        meta = {"self_training": {"round": it, "teacher": str(best.best_dir),
                                  "teacher_f1": best.best_f1, "pseudo_words": sum(dist.values()),
                                  "pseudo_labels": dist, "alpha": st.alpha, "beta1": st.beta1,
                                  "beta2": st.beta2},
                "data_hashes": {**setup.data_hashes, **hashes}}
        # each round's draws from its own seed: a resume that skips the finished teacher (or an
        # earlier round) builds the student a run that never stopped builds
        seed_everything(cfg.optim.seed + it)
        trainer = supervised_trainer(setup, run_dir, docs=[*setup.train_docs, *pseudo],
                                     base_path=student_base, metadata=meta)
        result = trainer.fit(resume=resume)
        record["rounds"].append({"round": it, "dir": str(result.best_dir), "overall_f1": result.best_f1,
                                 "teacher_f1": best.best_f1, "pseudo_labels": dist})
        log.info("round %d: student F1 %.2f vs teacher %.2f", it, result.best_f1, best.best_f1)
        if result.best_f1 <= best.best_f1:
            break
        best = result

    final = out_dir / "best"
    if final.exists():
        shutil.rmtree(final)
    shutil.copytree(best.best_dir, final)
    record["best"] = {"dir": str(best.best_dir), "overall_f1": best.best_f1}
    (out_dir / "self_training.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return RunResult(final, best.best_f1, best.validation, best.steps, best.window)
