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


def kd_terms(logits: torch.Tensor, teacher_probs: torch.Tensor, temperature: float) -> torch.Tensor:
    """Per-token T^2 KL(teacher_T || student_T) [N]; ``teacher_probs`` are plain probabilities,
    tempered here as p^(1/T) renormalised (= softmax(teacher_logits / T))."""
    t = temperature
    logq = torch.log(teacher_probs.float().clamp(min=1e-8)) / t
    q = torch.softmax(logq, dim=-1)
    logp = F.log_softmax(logits.float() / t, dim=-1)
    return (t * t) * (q * (torch.log(q.clamp(min=1e-12)) - logp)).sum(-1)


def distill_loss(logits: torch.Tensor, soft: torch.Tensor, labels: torch.Tensor, pseudo: torch.Tensor,
                 *, temperature: float, alpha: float) -> torch.Tensor:
    """Knowledge distillation over one batch of labelled positions [N].

    (sum over tokens with a teacher row of T^2 KL + alpha * sum over human-labelled
    tokens of CE) / N. ``soft`` [N, C] holds teacher probabilities, NaN rows
    where the teacher said nothing; ``pseudo`` marks tokens without a human label.
    """
    n = labels.numel()
    if n == 0:
        return logits.sum() * 0.0
    has_soft = ~torch.isnan(soft).any(-1)
    kd = kd_terms(logits[has_soft], soft[has_soft], temperature).sum()
    human = ~pseudo.bool()
    ce = token_losses(logits[human], labels[human]).sum() if human.any() else logits.sum() * 0.0
    return (kd + alpha * ce) / n


def case_loss(case_logits: torch.Tensor, case_labels: torch.Tensor | None, labels: torch.Tensor,
              soft: torch.Tensor | None, *, temperature: float) -> torch.Tensor:
    """Case head loss over the label tokens: CE on known case classes, plus T^2 KL to the
    teacher's case probabilities (``soft[..., 4:8]``) where it gave them; a mean over the
    tokens that have either."""
    keep = labels != -100
    logits = case_logits[keep]
    total = logits.sum() * 0.0
    count = 0
    if case_labels is not None:
        y = case_labels[keep]
        known = y != -100
        if known.any():
            total = total + F.cross_entropy(logits[known].float(), y[known], reduction="sum")
            count += int(known.sum())
    if soft is not None and soft.shape[-1] >= 8:
        s = soft[keep][:, 4:8]
        has = ~torch.isnan(s).any(-1)
        if case_labels is not None:
            has = has & (case_labels[keep] == -100)  # a human case label wins
        if has.any():
            total = total + kd_terms(logits[has], s[has], temperature).sum()
            count += int(has.sum())
    return total / max(count, 1)
