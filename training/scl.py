"""Token-level supervised contrastive learning (Huang et al., Interspeech 2021).

For anchor token i with positives P(i) (other tokens of the same class) and
A(i) all other tokens:

    SCL_i = -(temperature / base_temperature) / |P(i)| *
            sum_{p in P(i)} log( exp(z_i.z_p / temperature) / sum_{a in A(i)} exp(z_i.z_a / temperature) )

This is the SupConLoss of Khosla et al. as used by the published code: the
similarities are divided by ``temperature`` and the loss is scaled by
``temperature / base_temperature`` (the "tau = temperature / base_temperature"
of the issue is this ratio; with temperature 0.6 and base 0.07 it is 8.57).
The training loss is (1 - lambda) CE + lambda SCL.

Two modes:

``paper``
    Faithful to the published code (hqsiswiliam/punctuation-restoration-scl):
    every position of the batch, padding and non-label sub-tokens included,
    is a token of class O (in the CE term too); the last hidden layer is L2
    normalised along the *sequence* axis (``F.normalize(h, dim=1)`` on
    [B, T, H]), not per token; the loss is the mean over all B*T anchors, with
    the code's 1e-20 guards (an anchor without positives contributes the
    constant -temperature/base_temperature). The published code also zeroes
    the attention mask on non-label sub-tokens; we do not, so that training
    and inference see the same attention.
``clean``
    Only labelled positions (one per word) take part; each token vector is L2
    normalised; anchors without positives are left out of the mean. To bound
    the similarity matrix, at most ``max_anchors`` tokens are used per batch:
    every punctuation token (up to the cap) and a random sample of O tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from training.data import IGNORE


def supcon(z: torch.Tensor, labels: torch.Tensor, *, temperature: float,
           base_temperature: float, paper_guards: bool = False) -> torch.Tensor:
    """Supervised contrastive loss over N feature vectors ``z`` [N, H] (already normalised)."""
    n = z.shape[0]
    if n < 2:
        return z.sum() * 0.0
    z = z.float()
    sim = z @ z.T / temperature
    sim = sim - sim.max(dim=1, keepdim=True).values.detach()
    not_self = ~torch.eye(n, dtype=torch.bool, device=z.device)
    pos = (labels.unsqueeze(0) == labels.unsqueeze(1)) & not_self
    posf = pos.to(sim.dtype)
    scale = temperature / base_temperature
    if paper_guards:
        exp = torch.exp(sim) * not_self.to(sim.dtype) + 1e-20
        log_prob = sim - torch.log(exp.sum(1, keepdim=True))
        mean_pos = ((posf * log_prob).sum(1) + 1e-20) / (posf.sum(1) + 1e-20)
        return -(scale * mean_pos).mean()
    log_denominator = torch.logsumexp(sim.masked_fill(~not_self, float("-inf")), dim=1, keepdim=True)
    log_prob = sim - log_denominator
    n_pos = posf.sum(1)
    has_pos = n_pos > 0
    if not bool(has_pos.any()):
        return z.sum() * 0.0
    mean_pos = (posf * log_prob).sum(1)[has_pos] / n_pos[has_pos]
    return -(scale * mean_pos).mean()


def scl_paper(hidden: torch.Tensor, labels: torch.Tensor, *, temperature: float,
              base_temperature: float) -> torch.Tensor:
    """``paper`` mode on hidden [B, T, H] and token labels [B, T] (IGNORE counts as O)."""
    b, t, h = hidden.shape
    z = F.normalize(hidden.float(), dim=1).reshape(b * t, h)
    y = torch.where(labels == IGNORE, torch.zeros_like(labels), labels).reshape(-1)
    return supcon(z, y, temperature=temperature, base_temperature=base_temperature,
                  paper_guards=True)


def select_anchors(labels: torch.Tensor, max_anchors: int, generator: torch.Generator | None = None
                   ) -> torch.Tensor:
    """Indices into flat ``labels`` (O = 0): all marks first (up to the cap), then random O."""
    marks = torch.nonzero(labels != 0).squeeze(1)
    others = torch.nonzero(labels == 0).squeeze(1)
    if marks.numel() + others.numel() <= max_anchors:
        return torch.cat([marks, others])
    if marks.numel() >= max_anchors:
        perm = torch.randperm(marks.numel(), generator=generator)[:max_anchors]
        return marks[perm]
    perm = torch.randperm(others.numel(), generator=generator)[: max_anchors - marks.numel()]
    return torch.cat([marks, others[perm]])


def scl_clean(hidden: torch.Tensor, labels: torch.Tensor, *, temperature: float,
              base_temperature: float, max_anchors: int = 1024,
              generator: torch.Generator | None = None) -> torch.Tensor:
    """``clean`` mode: labelled positions only, per-token normalisation, bounded anchors."""
    labelled = labels != IGNORE
    z = hidden[labelled]
    y = labels[labelled]
    if z.shape[0] > max_anchors:
        idx = select_anchors(y.cpu(), max_anchors, generator).to(z.device)
        z, y = z[idx], y[idx]
    z = F.normalize(z.float(), dim=-1)
    return supcon(z, y, temperature=temperature, base_temperature=base_temperature)
