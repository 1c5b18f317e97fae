"""Adversarial multi-task learning with a POS auxiliary task (Yi et al., TASLP).

A shared encoder feeds two task heads (punctuation and POS tagging, each a
BLSTM-CRF) and a task discriminator. The discriminator reads the max-pooled
shared representation through a gradient reversal layer and predicts which
task the batch came from ({PUN, POS}); the reversal pushes the encoder
towards task-invariant features. The discriminator learns with weight 1; the
encoder receives its gradient negated and scaled by
lambda(p) = 2 / (1 + exp(-gamma p)) - 1, p the training progress in [0, 1].
"""

from __future__ import annotations

import math

import torch
from torch import nn

PUN, POS = 0, 1


class _GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return -ctx.scale * grad, None


def grad_reverse(x: torch.Tensor, scale: float) -> torch.Tensor:
    """Identity forward; backward multiplies the gradient by ``-scale``."""
    return _GradReverse.apply(x, scale)


def grl_lambda(progress: float, gamma: float = 10.0) -> float:
    """Yi et al.'s schedule: 0 at the start, approaching 1 as progress -> 1."""
    return 2.0 / (1.0 + math.exp(-gamma * progress)) - 1.0


def masked_max_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Max over the valid positions of each row: [B, T, H] -> [B, H]."""
    neg = torch.finfo(hidden.dtype).min
    return hidden.masked_fill(attention_mask.unsqueeze(-1) == 0, neg).max(dim=1).values


class TaskDiscriminator(nn.Module):
    """Max-pool -> gradient reversal -> FC(hidden) + ReLU -> logits over {PUN, POS}."""

    def __init__(self, in_features: int, hidden: int = 1024, num_tasks: int = 2) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, num_tasks))

    def forward(self, shared: torch.Tensor, attention_mask: torch.Tensor, scale: float) -> torch.Tensor:
        pooled = masked_max_pool(shared, attention_mask)
        return self.net(grad_reverse(pooled, scale))


class AuxiliaryModules(nn.Module):
    """What adversarial training adds to the punctuation model (dropped at export)."""

    def __init__(self, pos_head: nn.Module, discriminator: TaskDiscriminator | None) -> None:
        super().__init__()
        self.pos_head = pos_head
        self.discriminator = discriminator
