"""The four-matrix model and its (U, V) view."""
import pytest
import torch

from softmax_as_linear import RegressionTask
from softmax_as_linear.theory import models
from softmax_as_linear.theory.models import AttentionModel


@pytest.mark.parametrize("activation", ["softmax", "linear"])
def test_uv_view_gives_the_same_predictions(activation):
    task = RegressionTask.kms(d=5, rho=0.5)
    batch = task.sample(16, 30, torch.Generator().manual_seed(2))
    model = AttentionModel(6, activation, seed=327)
    U, V = model.uv()
    assert torch.allclose(model(batch.tokens, batch.query), models.predict(batch.tokens, batch.query, U, V, activation),
                          atol=1e-6)


def test_uv_view_gradients_match():
    task = RegressionTask.isotropic(d=3)
    batch = task.sample(8, 20, torch.Generator().manual_seed(3))
    model = AttentionModel(4, "softmax", seed=1)
    loss = ((model(batch.tokens, batch.query) - batch.target) ** 2).mean()
    direct = torch.autograd.grad(loss, list(model.parameters()))
    U, V = model.uv()
    loss_uv = ((models.predict(batch.tokens, batch.query, U, V) - batch.target) ** 2).mean()
    via_uv = torch.autograd.grad(loss_uv, list(model.parameters()))
    for a, b in zip(direct, via_uv):
        assert torch.allclose(a, b, atol=1e-6)


def test_same_seed_same_weights_for_both_activations():
    soft, lin = AttentionModel(6, "softmax", seed=327), AttentionModel(6, "linear", seed=327)
    for a, b in zip(soft.parameters(), lin.parameters()):
        assert torch.equal(a, b)
    other = AttentionModel(6, "softmax", seed=328)
    assert not torch.equal(soft.W_Q.weight, other.W_Q.weight)


def test_default_initialisation_is_pytorch_linear():
    model = AttentionModel(6, seed=0)
    bound = 1 / 6**0.5
    for weight in model.weights().values():
        assert weight.abs().max() <= bound


def test_seeded_model_leaves_global_rng_alone():
    torch.manual_seed(5)
    expected = torch.rand(1)
    torch.manual_seed(5)
    AttentionModel(6, seed=1)
    assert torch.equal(torch.rand(1), expected)


@pytest.mark.parametrize("call, match", [
    (lambda: AttentionModel(6, "relu"), "activation"),
    (lambda: AttentionModel(0), "D"),
    (lambda: models.predict(torch.zeros(2, 3), torch.zeros(3), torch.eye(3), torch.eye(3), "tanh"), "activation"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
