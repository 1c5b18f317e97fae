"""Checkpoint folders: a Hugging Face encoder folder + ``head.safetensors`` + ``streampunct.json``.

::

    config.json, model.safetensors     the encoder (save_pretrained)
    tokenizer.json (+ vocab files)     copied from the base model
    head.safetensors                   head weights (CRF transitions included)
    streampunct.json                   labels, label_position, max_word_tokens, window,
                                       head, head_config, base_model, training_config,
                                       data_hashes, validation, created

``load_checkpoint`` rebuilds the module whose ``forward(input_ids,
attention_mask)`` returns the emissions [B, T, 4] that the engines package
exports to ONNX.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from torch import nn

from engines.base import ArtifactError
from engines.model_meta import has_model_meta, read_model_meta, write_model_meta
from streampunct.core.alignment import Aligner
from streampunct.errors import ModelError
from streampunct.labels import LABELS

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt", "vocab.json", "merges.txt", "sentencepiece.bpe.model", "spm.model")
REQUIRED_KEYS = ("labels", "label_position", "max_word_tokens", "window", "head", "base_model",
                 "training_config", "data_hashes", "validation", "created")


def head_config(model: nn.Module) -> dict[str, Any]:
    head = model.head
    cfg: dict[str, Any] = {"kind": head.kind, "num_labels": len(LABELS)}
    if head.kind == "blstm_crf":
        cfg.update(lstm_input=head.proj.out_features, lstm_hidden=head.lstm.hidden_size)
    cfg["case_head"] = getattr(model, "case_head", None) is not None
    return cfg


def save_checkpoint(directory: str | Path, model: nn.Module, tokenizer: Aligner | str | Path,
                    metadata: dict[str, Any]) -> Path:
    """Write ``model`` (a ``PunctuationModel``) as a checkpoint folder.

    ``tokenizer`` is the base model folder (its tokenizer files are copied)
    or an ``Aligner`` (its ``tokenizer.json`` is written). ``metadata`` must
    hold ``label_position``, ``max_word_tokens`` and ``window``; missing
    record keys are filled with empty values, ``labels``, ``head`` and
    ``created`` are set here. The folder is written beside and then moved
    into place, so a crash never leaves a half-written best checkpoint.
    """
    from safetensors.torch import save_file

    directory = Path(directory)
    tmp = directory.with_name(directory.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.encoder.save_pretrained(str(tmp), safe_serialization=True)
    if isinstance(tokenizer, Aligner):
        tokenizer.tokenizer.save(str(tmp / "tokenizer.json"))
    else:
        src = Path(tokenizer)
        for name in TOKENIZER_FILES:
            if (src / name).is_file():
                shutil.copy2(src / name, tmp / name)
        if not (tmp / "tokenizer.json").is_file():
            raise ModelError(f"{src} has no tokenizer.json to copy")
    state = {k: v.detach().contiguous().cpu() for k, v in model.head.state_dict().items()}
    if getattr(model, "case_head", None) is not None:
        state.update({f"case_head.{k}": v.detach().contiguous().cpu()
                      for k, v in model.case_head.state_dict().items()})
    save_file(state, str(tmp / "head.safetensors"))
    meta = {key: {} for key in ("training_config", "data_hashes", "validation")}
    meta.update(metadata)
    meta["labels"] = list(LABELS)
    meta["head"] = model.head.kind
    meta["head_config"] = head_config(model)
    meta.setdefault("base_model", "")
    meta["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    meta.pop("tokenizer_sha256", None)  # a folder's, not this copy's (build-engine records its own)
    missing = [k for k in REQUIRED_KEYS if k not in meta]
    if missing:
        raise ValueError(f"checkpoint metadata lacks {', '.join(missing)}")
    write_model_meta(tmp, meta)
    if directory.exists():
        shutil.rmtree(directory)
    tmp.rename(directory)
    return directory


def read_metadata(directory: str | Path) -> dict[str, Any]:
    """The checkpoint's ``streampunct.json`` (read through :mod:`engines.model_meta`) as a JSON object."""
    if not has_model_meta(directory):
        raise ModelError(f"{directory} is not a training checkpoint (no streampunct.json)")
    try:
        return read_model_meta(directory).to_dict()
    except ArtifactError as e:
        raise ModelError(str(e)) from None


def read_head_weights(directory: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The punctuation head's and the case head's tensors of ``directory/head.safetensors``
    (the case head's without their ``case_head.`` prefix; empty when it has none)."""
    from safetensors.torch import load_file

    path = Path(directory) / "head.safetensors"
    if not path.is_file():
        raise ModelError(f"{directory}: no head.safetensors (not a checkpoint folder)")
    weights = load_file(str(path))
    prefix = "case_head."
    case = {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}
    head = {k: v for k, v in weights.items() if not k.startswith(prefix)}
    return head, case


def load_head_into(head: nn.Module, weights: dict[str, Any], where: str | Path, kind: str) -> None:
    """Load ``weights`` into ``head``; ModelError naming what does not fit."""
    missing, unexpected = head.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise ModelError(f"{where}: head weights do not match a {kind} head "
                         f"(missing {missing}, unexpected {unexpected})")


def load_checkpoint(directory: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild the ``PunctuationModel`` of a checkpoint folder (eval mode) and its metadata."""
    from training.heads import build_head
    from training.model import CaseHead, PunctuationModel, load_encoder

    directory = Path(directory)
    meta = read_metadata(directory)
    if tuple(meta.get("labels", ())) != LABELS:
        raise ModelError(f"{directory}: labels {meta.get('labels')} differ from {LABELS}")
    hc = meta.get("head_config") or {"kind": meta.get("head", "linear")}
    encoder = load_encoder(directory)
    kwargs = {k: hc[k] for k in ("lstm_input", "lstm_hidden") if k in hc}
    head = build_head(hc["kind"], int(encoder.config.hidden_size), len(LABELS), **kwargs)
    weights, case_weights = read_head_weights(directory)
    load_head_into(head, weights, directory / "head.safetensors", hc["kind"])
    case_head = None
    if hc.get("case_head"):
        case_head = CaseHead(int(encoder.config.hidden_size))
        case_head.load_state_dict(case_weights)
    model = PunctuationModel(encoder, head, case_head)
    model.eval()
    return model, meta


def checkpoint_aligner(directory: str | Path, meta: dict[str, Any] | None = None) -> Aligner:
    meta = meta if meta is not None else read_metadata(directory)
    return Aligner.from_file(Path(directory) / "tokenizer.json",
                             label_position=meta.get("label_position", "last"),
                             max_word_tokens=int(meta.get("max_word_tokens", 16)))
