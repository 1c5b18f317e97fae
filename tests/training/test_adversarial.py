import pytest

torch = pytest.importorskip("torch")

from training.adversarial import TaskDiscriminator, grad_reverse, grl_lambda, masked_max_pool  # noqa: E402


def test_gradient_reversal_negates_and_scales():
    x = torch.randn(3, 5, requires_grad=True)
    upstream = torch.randn(3, 5)
    y = grad_reverse(x, 0.37)
    torch.testing.assert_close(y, x)  # identity forward
    y.backward(upstream)
    torch.testing.assert_close(x.grad, -0.37 * upstream)


def test_grl_schedule():
    assert grl_lambda(0.0) == 0.0
    assert grl_lambda(1.0) == pytest.approx(2 / (1 + torch.exp(torch.tensor(-10.0)).item()) - 1)
    values = [grl_lambda(p / 10) for p in range(11)]
    assert values == sorted(values) and values[-1] > 0.99


def test_discriminator_trains_itself_but_reverses_encoder_gradient():
    torch.manual_seed(0)
    disc = TaskDiscriminator(4, hidden=8)
    shared = torch.randn(2, 3, 4, requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    target = torch.tensor([0, 1])

    def grads(scale):
        disc.zero_grad()
        shared.grad = None
        torch.nn.functional.cross_entropy(disc(shared, mask, scale), target).backward()
        return shared.grad.clone(), disc.net[0].weight.grad.clone()

    g_enc_rev, g_disc_rev = grads(0.5)
    # reference: same network without reversal
    disc.zero_grad()
    shared.grad = None
    pooled = masked_max_pool(shared, mask)
    torch.nn.functional.cross_entropy(disc.net(pooled), target).backward()
    torch.testing.assert_close(g_enc_rev, -0.5 * shared.grad)
    torch.testing.assert_close(g_disc_rev, disc.net[0].weight.grad)


def test_masked_max_pool_skips_padding():
    h = torch.tensor([[[1.0], [5.0], [9.0]]])
    assert masked_max_pool(h, torch.tensor([[1, 1, 0]])).item() == 5.0
