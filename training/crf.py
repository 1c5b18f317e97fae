"""A linear-chain conditional random field in plain torch.

Emissions are per-position class scores ``[B, L, C]`` over *words* (the
emissions at each word's label token, gathered left-aligned with a mask);
the CRF adds start, end and transition scores. Training minimises the
negative log-likelihood (forward algorithm); inference uses Viterbi.
"""

from __future__ import annotations

import torch
from torch import nn


class CRF(nn.Module):
    """Linear-chain CRF over ``num_tags`` tags.

    Attributes:
        transitions: [C, C], score of tag i followed by tag j.
        start, end: [C], scores of the first and last tag.
    """

    def __init__(self, num_tags: int) -> None:
        super().__init__()
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags).uniform_(-0.1, 0.1))
        self.start = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))
        self.end = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))

    def score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Unnormalised score of ``tags`` [B, L] under left-aligned ``mask`` [B, L] -> [B]."""
        b, length, _ = emissions.shape
        maskf = mask.to(emissions.dtype)
        emit = emissions.gather(2, tags.unsqueeze(-1)).squeeze(-1)  # [B, L]
        s = self.start[tags[:, 0]] + (emit * maskf).sum(1)
        if length > 1:
            trans = self.transitions[tags[:, :-1], tags[:, 1:]]  # [B, L-1]
            s = s + (trans * maskf[:, 1:]).sum(1)
        last = mask.long().sum(1).clamp(min=1) - 1
        s = s + self.end[tags.gather(1, last.unsqueeze(1)).squeeze(1)]
        return s

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """log Z per sequence [B] (forward algorithm)."""
        alpha = self.start + emissions[:, 0]  # [B, C]
        for t in range(1, emissions.shape[1]):
            nxt = torch.logsumexp(alpha.unsqueeze(2) + self.transitions + emissions[:, t].unsqueeze(1), dim=1)
            alpha = torch.where(mask[:, t].unsqueeze(1), nxt, alpha)
        return torch.logsumexp(alpha + self.end, dim=1)

    def nll(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood per sequence [B]; rows with an empty mask give 0."""
        mask = mask.bool()
        tags = torch.where(mask, tags, torch.zeros_like(tags))
        nonempty = mask[:, 0]
        out = self.log_partition(emissions, mask) - self.score(emissions, tags, mask)
        return torch.where(nonempty, out, torch.zeros_like(out))

    @torch.no_grad()
    def viterbi(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """Best tag sequence of each row (length = mask.sum of the row)."""
        mask = mask.bool()
        b, length, c = emissions.shape
        score = self.start + emissions[:, 0]
        back = []
        for t in range(1, length):
            cand = score.unsqueeze(2) + self.transitions  # [B, from, to]
            best, idx = cand.max(dim=1)
            nxt = best + emissions[:, t]
            m = mask[:, t].unsqueeze(1)
            score = torch.where(m, nxt, score)
            # Where masked, point back to the same tag so the path stays put.
            same = torch.arange(c, device=emissions.device).expand(b, c)
            back.append(torch.where(m, idx, same))
        score = score + self.end
        lengths = mask.long().sum(1).tolist()
        best_last = score.argmax(1)
        paths = []
        for row in range(b):
            n = lengths[row]
            if n == 0:
                paths.append([])
                continue
            tag = int(best_last[row])
            path = [tag]
            for t in range(n - 1, 0, -1):
                tag = int(back[t - 1][row, tag])
                path.append(tag)
            paths.append(path[::-1])
        return paths


def viterbi_numpy(emissions, transitions, start, end):
    """Viterbi over one sequence of numpy emissions [L, C] (whole validation documents)."""
    import numpy as np

    emissions = np.asarray(emissions, dtype=np.float64)
    n, c = emissions.shape
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    score = start + emissions[0]
    back = np.zeros((n, c), dtype=np.int64)
    for t in range(1, n):
        cand = score[:, None] + transitions
        back[t] = cand.argmax(0)
        score = cand.max(0) + emissions[t]
    score = score + end
    path = np.zeros(n, dtype=np.int64)
    path[-1] = int(score.argmax())
    for t in range(n - 1, 0, -1):
        path[t - 1] = back[t, path[t]]
    return path
