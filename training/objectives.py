"""Per-batch training objectives: supervised (CE / focal / smoothing / SCL / CRF),
self-training (weighted, discriminatively smoothed) and adversarial multi-task.

An objective is an ``nn.Module`` so that the parameters it adds (the POS head
and the task discriminator) are optimised and checkpointed with the model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from training.adversarial import POS, PUN, AuxiliaryModules, grl_lambda
from training.config import MethodConfig
from training.data import IGNORE, Batch
from training.heads import gather_labelled
from training.losses import case_loss, distill_loss, self_training_loss, token_losses
from training.scl import scl_clean, scl_paper


def to_torch(batch: Batch, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    out = {
        "input_ids": torch.as_tensor(batch.input_ids, device=device),
        "attention_mask": torch.as_tensor(batch.attention_mask, device=device),
        "labels": torch.as_tensor(batch.labels, device=device),
        "pseudo": torch.as_tensor(batch.pseudo, device=device),
    }
    if batch.case_labels is not None:
        out["case_labels"] = torch.as_tensor(batch.case_labels, device=device)
    if batch.soft is not None:
        out["soft"] = torch.as_tensor(batch.soft, device=device)
    return out


def crf_loss(head: nn.Module, emissions: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """CRF negative log-likelihood over the words of the batch, per labelled word."""
    words, tags, mask = gather_labelled(emissions, labels)
    n = mask.sum().clamp(min=1)
    return head.crf.nll(words, tags, mask).sum() / n


class SupervisedObjective(nn.Module):
    """Token classification; covers the ``supervised`` and ``self_training`` kinds."""

    def __init__(self, method: MethodConfig, *, seed: int = 0) -> None:
        super().__init__()
        self.method = method
        self.gamma = method.focal_gamma if method.loss == "focal" else 0.0
        self._gen = torch.Generator().manual_seed(seed)

    def task_loss(self, model: nn.Module, emissions: torch.Tensor, labels: torch.Tensor,
                  attention_mask: torch.Tensor, pseudo: torch.Tensor,
                  soft: torch.Tensor | None = None) -> torch.Tensor:
        m = self.method
        if getattr(model.head, "crf", None) is not None:
            return crf_loss(model.head, emissions, labels)
        if soft is not None and m.scl.enabled and m.scl.mode == "paper":
            raise ValueError("distillation needs labelled positions: use method.scl.mode = 'clean'")
        if m.scl.enabled and m.scl.mode == "paper":
            # Published code: every position (padding too) is a target, O where unlabelled.
            flat_labels = torch.where(labels == IGNORE, torch.zeros_like(labels), labels).reshape(-1)
            flat_logits = emissions.reshape(-1, emissions.shape[-1])
            flat_pseudo = pseudo.unsqueeze(1).expand_as(labels).reshape(-1)
        else:
            keep = labels != IGNORE
            flat_labels = labels[keep]
            flat_logits = emissions[keep]
            flat_pseudo = pseudo.unsqueeze(1).expand_as(labels)[keep]
        if soft is not None:
            n_punct = emissions.shape[-1]
            flat_soft = soft[keep][:, :n_punct]
            return distill_loss(flat_logits, flat_soft, flat_labels, flat_pseudo,
                                temperature=m.distill.temperature, alpha=m.distill.alpha)
        if m.kind == "self_training":
            st = m.self_training
            return self_training_loss(flat_logits, flat_labels, flat_pseudo, alpha=st.alpha,
                                      beta1=st.beta1, beta2=st.beta2, gamma=self.gamma)
        losses = token_losses(flat_logits, flat_labels, gamma=self.gamma, smoothing=m.label_smoothing)
        return losses.mean() if losses.numel() else emissions.sum() * 0.0

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor], progress: float,
                task: str = "pun") -> tuple[torch.Tensor, dict[str, float]]:
        hidden = model.encode(batch["input_ids"], batch["attention_mask"])
        emissions = model.head(hidden, batch["attention_mask"])
        soft = batch.get("soft")
        task = self.task_loss(model, emissions, batch["labels"], batch["attention_mask"], batch["pseudo"],
                              soft)
        logs = {"task": float(task.detach())}
        case_head = getattr(model, "case_head", None)
        if case_head is not None and ("case_labels" in batch or soft is not None):
            case = case_loss(case_head(hidden), batch.get("case_labels"), batch["labels"], soft,
                             temperature=self.method.distill.temperature)
            logs["case"] = float(case.detach())
            task = task + self.method.case_weight * case
        scl = self.method.scl
        if not scl.enabled:
            return task, logs
        if scl.mode == "paper":
            c = scl_paper(hidden, batch["labels"], temperature=scl.temperature,
                          base_temperature=scl.base_temperature)
        else:
            c = scl_clean(hidden, batch["labels"], temperature=scl.temperature,
                          base_temperature=scl.base_temperature, max_anchors=scl.max_anchors,
                          generator=self._gen)
        logs["scl"] = float(c.detach())
        return (1.0 - scl.weight) * task + scl.weight * c, logs


class AdversarialObjective(nn.Module):
    """Punctuation and POS batches through one encoder, plus the task discriminator."""

    def __init__(self, method: MethodConfig, aux: AuxiliaryModules) -> None:
        super().__init__()
        self.method = method
        self.aux = aux

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor], progress: float,
                task: str = "pun") -> tuple[torch.Tensor, dict[str, float]]:
        hidden = model.encode(batch["input_ids"], batch["attention_mask"])
        head = model.head if task == "pun" else self.aux.pos_head
        emissions = head(hidden, batch["attention_mask"])
        loss = crf_loss(head, emissions, batch["labels"])
        logs = {f"{task}_loss": float(loss.detach())}
        if self.aux.discriminator is not None:
            scale = grl_lambda(progress, self.method.adversarial.gamma)
            logits = self.aux.discriminator(hidden, batch["attention_mask"], scale)
            target = torch.full((logits.shape[0],), PUN if task == "pun" else POS,
                                dtype=torch.long, device=logits.device)
            adv = F.cross_entropy(logits, target)
            loss = loss + adv
            logs.update(adv=float(adv.detach()), grl_lambda=scale,
                        disc_acc=float((logits.argmax(-1) == target).float().mean()))
        return loss, logs
