"""Every model of a sweep predicts with its own formula: attention over the prompt, or the infinite-prompt limit."""
import pytest
import torch

from softmax_as_linear.theory import limit_model, models
from softmax_as_linear.theory.regression import RegressionTask


@pytest.fixture
def batch_and_weights():
    task = RegressionTask.isotropic(3, covariates="uniform")
    batch = task.sample(64, 50, torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    U, V = 0.5 * torch.randn(4, 4, generator=g), 0.5 * torch.randn(4, 4, generator=g)
    return task, batch, U, V


@pytest.mark.parametrize("limit", ["softmax_limit", "linear_limit"])
def test_predict_unchecked_refuses_an_infinite_prompt_model(batch_and_weights, limit):
    task, batch, U, V = batch_and_weights
    with pytest.raises(ValueError, match="predict_model"):
        models.predict_unchecked(batch.tokens, batch.query, U, V, limit)


def test_predict_model_reads_the_prompt_or_the_task(batch_and_weights):
    task, batch, U, V = batch_and_weights
    for activation in ("softmax", "linear"):
        torch.testing.assert_close(models.predict_model(activation, batch, task, U, V),
                                   models.predict(batch.tokens, batch.query, U, V, activation))
        limit = models.predict_model(f"{activation}_limit", batch, task, U, V)
        torch.testing.assert_close(limit, limit_model.infinite_prompt_prediction(U, V, task, batch.w, batch.query,
                                                                                 activation))
    # uniform inputs: softmax's limit is not linear attention (the bug this guards against computed the latter)
    softmax_limit = models.predict_model("softmax_limit", batch, task, U, V)
    assert not torch.allclose(softmax_limit, models.predict(batch.tokens, batch.query, U, V, "linear"), atol=1e-3)
    with pytest.raises(ValueError, match="model"):
        models.predict_model("tanh", batch, task, U, V)
