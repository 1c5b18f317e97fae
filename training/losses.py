"""Token classification losses: cross-entropy, focal loss, label smoothing, self-training weights.

All functions take flat logits [N, C] and labels [N] of the labelled positions
and return per-token losses, so that callers choose the reduction (a mean
over tokens, or the weighted sums of self-training).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def smoothed_targets(labels: torch.Tensor, num_classes: int, beta: float) -> torch.Tensor:
    """y_LS = (1 - beta) * onehot(y) + beta / K  (Chen et al., eq. for label smoothing)."""
    onehot = F.one_hot(labels, num_classes).to(torch.float32)
    return (1.0 - beta) * onehot + beta / num_classes


def token_losses(logits: torch.Tensor, labels: torch.Tensor, *, gamma: float = 0.0,
                 smoothing: float = 0.0) -> torch.Tensor:
    """Per-token loss [N]: -sum_k q_k (1 - p_k)^gamma log p_k with q the (smoothed) target.

    ``gamma = 0`` is (label-smoothed) cross-entropy; ``smoothing = 0`` and
    ``gamma > 0`` is the focal loss of Lin et al., -(1 - p_y)^gamma log p_y.
    """
    logp = F.log_softmax(logits.float(), dim=-1)
    if smoothing == 0.0 and gamma == 0.0:
        return F.nll_loss(logp, labels, reduction="none")
    q = smoothed_targets(labels, logits.shape[-1], smoothing)
    if gamma > 0.0:
        q = q * (1.0 - logp.exp()).clamp(min=0.0).pow(gamma)
    return -(q * logp).sum(-1)


def self_training_loss(logits: torch.Tensor, labels: torch.Tensor, pseudo: torch.Tensor, *,
                       alpha: float, beta1: float, beta2: float, gamma: float = 0.0) -> torch.Tensor:
    """Chen et al.'s student loss over one batch of labelled positions.

    (sum over human tokens of CE with smoothing beta1 + alpha * sum over
    pseudo-labelled tokens of CE with smoothing beta2) / (number of tokens).
    ``pseudo`` is a bool [N] marking tokens whose label comes from the teacher.
    """
    pseudo = pseudo.bool()
    n = labels.numel()
    if n == 0:
        return logits.sum() * 0.0
    human = token_losses(logits[~pseudo], labels[~pseudo], gamma=gamma, smoothing=beta1)
    teach = token_losses(logits[pseudo], labels[pseudo], gamma=gamma, smoothing=beta2)
    return (human.sum() + alpha * teach.sum()) / n
