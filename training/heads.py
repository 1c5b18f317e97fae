"""Classification heads on top of the encoder's last hidden layer.

Both heads map hidden states [B, T, H] to per-token emissions [B, T, C]; the
model exports exactly these emissions. The BLSTM-CRF head also owns a CRF,
used for the training likelihood and for Viterbi decoding over the words of
a document during validation.
"""

from __future__ import annotations

import torch
from torch import nn

from training.crf import CRF
from training.data import IGNORE


class LinearHead(nn.Module):
    """Dropout + one linear layer (Huang et al., Chen et al.)."""

    kind = "linear"

    def __init__(self, hidden: int, num_labels: int, *, dropout: float = 0.1) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(hidden, num_labels)
        self.crf = None

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(hidden))


class BLSTMCRFHead(nn.Module):
    """Linear map, one bidirectional LSTM layer, per-token emissions, and a CRF (Yi et al.).

    Yi et al. map BERT's 768 dimensions to 120 and use 240 LSTM cells with a
    recurrent projection to 120 and peepholes; torch's LSTM has no peepholes
    and its projection does not export to the ONNX LSTM op, so the default
    here is a plain BiLSTM of ``lstm_hidden`` cells per direction.

    Padding positions are zeroed before the LSTM; in training and at serve
    time batches are right-padded, so the backward direction sees the same
    kind of inputs in both.
    """

    kind = "blstm_crf"

    def __init__(self, hidden: int, num_labels: int, *, dropout: float = 0.1,
                 lstm_input: int = 120, lstm_hidden: int = 120) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(hidden, lstm_input)
        self.lstm = nn.LSTM(lstm_input, lstm_hidden, num_layers=1, batch_first=True,
                            bidirectional=True)
        self.out = nn.Linear(2 * lstm_hidden, num_labels)
        self.crf = CRF(num_labels)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.proj(self.dropout(hidden))
        x = x * attention_mask.unsqueeze(-1).to(x.dtype)
        x, _ = self.lstm(x)
        return self.out(self.dropout(x))


def build_head(kind: str, hidden: int, num_labels: int, *, dropout: float = 0.1,
               lstm_input: int = 120, lstm_hidden: int = 120) -> nn.Module:
    if kind == "linear":
        return LinearHead(hidden, num_labels, dropout=dropout)
    if kind == "blstm_crf":
        return BLSTMCRFHead(hidden, num_labels, dropout=dropout, lstm_input=lstm_input,
                            lstm_hidden=lstm_hidden)
    raise ValueError(f"unknown head {kind!r}")


def gather_labelled(emissions: torch.Tensor, labels: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Word-level view of token emissions: the labelled positions of each row, left-aligned.

    Returns ``(word_emissions [B, L, C], tags [B, L], mask [B, L])`` where L is
    the most labelled positions in a row; tags are 0 where the mask is off.
    """
    labelled = labels != IGNORE
    order = torch.argsort((~labelled).to(torch.int8), dim=1, stable=True)
    length = max(int(labelled.sum(1).max()), 1)
    order = order[:, :length]
    mask = labelled.gather(1, order)
    tags = torch.where(mask, labels.gather(1, order), torch.zeros_like(order))
    words = emissions.gather(1, order.unsqueeze(-1).expand(-1, -1, emissions.shape[-1]))
    return words, tags, mask
