"""From a config to a trainer: load data, build model and objective.

``training.run.run(cfg, out_dir)``, the one library call behind ``streampunct
train``, dispatches on ``method.kind`` to the trainers built here or to
``training.self_training`` (which builds on this module).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from streampunct.core.alignment import Aligner
from streampunct.errors import InputError, ModelError
from training.config import TrainConfig
from training.data import (
    Document,
    SequenceDataset,
    data_root,
    drop_unpunctuated,
    held_out_captions,
    load_training_docs,
    load_validation_docs,
    resolve_cache,
    source_paths,
)
from training.model import PunctuationModel, build_model, resolve_base_model
from training.trainer import Trainer, dataset_stream, interleave, seed_everything

log = logging.getLogger(__name__)


@dataclass
class Setup:
    """Data and tokenizer shared by every model of a run.

    Attributes:
        root, cache: data and cache folders.
        base_path: the encoder folder.
        aligner: its tokenizer with the configured label position.
        train_docs, valid_docs: labelled documents.
        data_hashes: source -> sha256 of the files read.
        caption_docs: held-out TEDx captions whose marks each validation counts
            (``eval.caption_marks_words``; empty: none).
    """

    cfg: TrainConfig
    root: Path
    cache: Path
    base_path: Path
    aligner: Aligner
    train_docs: list[Document]
    valid_docs: list[Document]
    data_hashes: dict[str, str]
    caption_docs: list[Document] = field(default_factory=list)


def file_hashes(sources: list[str], root: Path, *, unlabeled: bool = False) -> dict[str, str]:
    from streampunct.text.word_labels import file_sha256

    out = {}
    for s in sources:
        path = source_paths(s, root, unlabeled=unlabeled)
        if path.is_file():
            out[("unlabeled:" if unlabeled else "") + s] = file_sha256(path)
    return out


def make_aligner(cfg: TrainConfig, base_path: Path) -> Aligner:
    return Aligner.from_file(base_path, label_position=cfg.data.label_position,  # type: ignore[arg-type]
                             max_word_tokens=cfg.data.max_word_tokens)


def prepare(cfg: TrainConfig, *, base_model: str | None = None) -> Setup:
    if cfg.optim.threads:
        torch.set_num_threads(cfg.optim.threads)
    seed_everything(cfg.optim.seed)
    d = cfg.data
    root = data_root(d.root)
    cache = resolve_cache(d.cache_dir)
    base_path = resolve_base_model(cfg.model.base_model if base_model is None else base_model)
    aligner = make_aligner(cfg, base_path)
    train_docs = load_training_docs(d.train, root, cache, max_words=d.max_train_words, seed=cfg.optim.seed)
    train_docs = drop_unpunctuated(train_docs, d.min_marks_per_100_words)
    if d.soft_labels:
        from training.distill import attach_soft_labels

        train_docs = attach_soft_labels(train_docs, d.soft_labels, min_marks_per_100_words=d.min_marks_per_100_words)
    valid_docs = load_validation_docs(d.valid, root, cache, max_words=d.max_valid_words)
    hashes = file_hashes([*d.train, d.valid], root)
    log.info("training words: %d in %d documents; validation words: %d",
             sum(map(len, train_docs)), len(train_docs), sum(map(len, valid_docs)))
    captions = held_out_captions(root, cfg.eval.caption_marks_words) if cfg.eval.caption_marks_words else []
    return Setup(cfg, root, cache, base_path, aligner, train_docs, valid_docs, hashes, captions)


def new_model(cfg: TrainConfig, base_path: Path) -> PunctuationModel:
    m = cfg.model
    model = build_model(base_path, head=m.head, dropout=m.dropout, lstm_input=m.lstm_input,
                        lstm_hidden=m.lstm_hidden, random_init=m.random_init, case_head=m.case_head)
    if m.init_head:
        init_head_from(model, base_path)
    return model


def init_head_from(model: PunctuationModel, checkpoint: Path) -> None:
    """Load ``checkpoint/head.safetensors`` into ``model``'s head (and its case head where
    the file has one; a case head the file lacks keeps its fresh weights)."""
    from training.checkpoint import load_head_into, read_head_weights

    try:
        head, case = read_head_weights(checkpoint)
        load_head_into(model.head, head, Path(checkpoint) / "head.safetensors", model.head.kind)
    except ModelError as e:
        raise InputError(f"model.init_head: {e}") from None
    if case and model.case_head is not None:
        model.case_head.load_state_dict(case)
    log.info("head initialised from %s%s", checkpoint, " (case head too)" if case and model.case_head is not None
             else "")


def base_metadata(setup: Setup, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {"base_model": str(setup.base_path), "data_hashes": dict(setup.data_hashes),
            "name": setup.cfg.name}
    meta.update(extra or {})
    return meta


def supervised_trainer(setup: Setup, out_dir: Path, *, docs: list[Document] | None = None,
                       cfg: TrainConfig | None = None, base_path: Path | None = None,
                       metadata: dict[str, Any] | None = None) -> Trainer:
    """A trainer for the token-classification objectives on ``docs`` (default: setup.train_docs)."""
    from training.objectives import SupervisedObjective

    cfg = cfg or setup.cfg
    base_path = base_path or setup.base_path
    aligner = setup.aligner if base_path == setup.base_path else make_aligner(cfg, base_path)
    dataset = SequenceDataset(docs if docs is not None else setup.train_docs, aligner,
                              max_len=cfg.data.max_len, noise=cfg.data.noise,
                              stream_cut_share=cfg.data.stream_cut_share)
    log.info("training sequences per epoch: ~%d (%d tokens)",
             dataset.batches_per_epoch(1), dataset.n_tokens)
    model = new_model(cfg, base_path)
    objective = SupervisedObjective(cfg.method, seed=cfg.optim.seed)
    return Trainer(cfg, model=model, objective=objective, aligner=aligner,
                   stream=dataset_stream(dataset, cfg.optim.batch_size, cfg.optim.seed),
                   steps_per_epoch=dataset.batches_per_epoch(cfg.optim.batch_size),
                   valid_docs=setup.valid_docs, caption_docs=setup.caption_docs, out_dir=out_dir,
                   tokenizer_source=base_path,
                   metadata=base_metadata(setup, metadata))


def adversarial_trainer(setup: Setup, out_dir: Path) -> Trainer:
    from training.adversarial import AuxiliaryModules, TaskDiscriminator
    from training.heads import BLSTMCRFHead
    from training.objectives import AdversarialObjective
    from training.pos_tags import load_pos_docs

    cfg = setup.cfg
    d, m, o, adv = cfg.data, cfg.model, cfg.optim, cfg.method.adversarial
    pos_docs, tagset = load_pos_docs(setup.root, setup.cache, max_words=d.max_pos_words, seed=o.seed)
    pun_set = SequenceDataset(setup.train_docs, setup.aligner, max_len=d.max_len)
    pos_set = SequenceDataset(pos_docs, setup.aligner, max_len=d.max_len, task="pos")
    model = new_model(cfg, setup.base_path)
    hidden = model.hidden_size
    pos_head = BLSTMCRFHead(hidden, len(tagset), dropout=m.dropout, lstm_input=m.lstm_input,
                            lstm_hidden=m.lstm_hidden)
    disc = TaskDiscriminator(hidden, adv.disc_hidden) if adv.use_discriminator else None
    objective = AdversarialObjective(cfg.method, AuxiliaryModules(pos_head, disc))
    bs = o.batch_size
    n_pun = pun_set.batches_per_epoch(bs)

    def stream(epoch: int):
        main = pun_set.iter_batches(bs, o.seed, epoch)
        return interleave(main, lambda cycle: pos_set.iter_batches(bs, o.seed + 1, epoch * 1000 + cycle),
                          adv.pos_every)

    hashes = dict(setup.data_hashes)
    hashes.update(file_hashes([d.pos_source], setup.root))
    meta = base_metadata(setup, {"data_hashes": hashes, "auxiliary": {
        "pos_tagset": list(tagset), "pos_words": sum(map(len, pos_docs)),
        "pos_tagger": "spaCy en_core_web_sm 3.8 (silver PTB tags)",
        "discriminator": adv.use_discriminator}})
    return Trainer(cfg, model=model, objective=objective, aligner=setup.aligner, stream=stream,
                   steps_per_epoch=n_pun + n_pun // adv.pos_every, valid_docs=setup.valid_docs,
                   caption_docs=setup.caption_docs,
                   out_dir=out_dir, tokenizer_source=setup.base_path, metadata=meta)
