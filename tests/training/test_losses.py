import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from training.losses import self_training_loss, smoothed_targets, token_losses  # noqa: E402


def _case():
    g = torch.Generator().manual_seed(0)
    return torch.randn(7, 4, generator=g), torch.tensor([0, 1, 2, 3, 0, 1, 0])


def test_focal_reduces_to_cross_entropy_at_gamma_zero():
    logits, labels = _case()
    expected = F.cross_entropy(logits, labels, reduction="none")
    torch.testing.assert_close(token_losses(logits, labels, gamma=0.0), expected)
    # the general (smoothing) code path too
    torch.testing.assert_close(token_losses(logits, labels, gamma=0.0, smoothing=1e-12), expected)


def test_focal_matches_its_formula():
    logits, labels = _case()
    p = logits.softmax(-1)[torch.arange(7), labels]
    expected = -((1 - p) ** 2) * p.log()
    torch.testing.assert_close(token_losses(logits, labels, gamma=2.0), expected)
    assert (token_losses(logits, labels, gamma=2.0) < F.cross_entropy(logits, labels, reduction="none")).all()


def test_label_smoothing_matches_its_formula():
    logits, labels = _case()
    beta, k = 0.2, 4
    q = smoothed_targets(labels, k, beta)
    assert q[0].tolist() == pytest.approx([1 - beta + beta / k, beta / k, beta / k, beta / k])
    logp = logits.log_softmax(-1)
    expected = torch.stack([-sum(((1 - beta) * (c == int(y)) + beta / k) * logp[i, c]
                                 for c in range(k)) for i, y in enumerate(labels)])
    torch.testing.assert_close(token_losses(logits, labels, smoothing=beta), expected)
    torch.testing.assert_close(token_losses(logits, labels, smoothing=beta),
                               F.cross_entropy(logits, labels, label_smoothing=beta, reduction="none"))


def test_self_training_loss_weights_pseudo_tokens_and_smooths_separately():
    logits, labels = _case()
    pseudo = torch.tensor([False, False, True, True, False, True, False])
    alpha, b1, b2 = 0.3, 0.05, 0.2
    logp = logits.log_softmax(-1)
    total = 0.0
    for i in range(7):
        beta = b2 if pseudo[i] else b1
        ce = -sum(((1 - beta) * (c == int(labels[i])) + beta / 4) * float(logp[i, c]) for c in range(4))
        total += (alpha if pseudo[i] else 1.0) * ce
    got = self_training_loss(logits, labels, pseudo, alpha=alpha, beta1=b1, beta2=b2)
    assert float(got) == pytest.approx(total / 7, rel=1e-5)
    # alpha = 0 removes the pseudo-labelled tokens from the sum
    only_human = self_training_loss(logits, labels, pseudo, alpha=0.0, beta1=0.0, beta2=0.5)
    human = F.cross_entropy(logits[~pseudo], labels[~pseudo], reduction="sum") / 7
    assert float(only_human) == pytest.approx(float(human), rel=1e-5)
    assert math.isfinite(float(self_training_loss(logits[:0], labels[:0], pseudo[:0],
                                                  alpha=1, beta1=0, beta2=0)))
