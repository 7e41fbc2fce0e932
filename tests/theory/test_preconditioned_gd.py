"""Preconditioned gradient descent: the risk formula against simulation, one step is the best linear attention, the
best two-step preconditioners beat one step and are scalar for isotropic inputs."""
import pytest
import torch

from softmax_as_linear import RegressionTask
from softmax_as_linear.theory import preconditioned_gd as pgd
from softmax_as_linear.theory.risks import bayes_risk, optimal_linear_risk

TASK = RegressionTask.isotropic(d=3)


def test_two_steps_are_gradient_descent_on_the_prompt():
    g = torch.Generator().manual_seed(0)
    batch = TASK.sample(4, 7, g, dtype=torch.float64)
    gammas = torch.stack([0.7 * torch.eye(3), 0.3 * torch.eye(3) + 0.05]).double()
    x, y = batch.tokens[..., :-1], batch.tokens[..., -1]
    w = torch.zeros(4, 3, dtype=torch.float64)
    for gamma in gammas:
        gradient = ((x @ w.unsqueeze(-1)).squeeze(-1) - y).unsqueeze(-1).mul(x).mean(-2)
        w = w - gradient @ gamma.T
    expected = (w * batch.query[:, :-1]).sum(-1)
    assert torch.allclose(pgd.pgd_predict(gammas, batch.tokens, batch.query), expected, atol=1e-12)


def test_the_conditional_risk_is_the_simulated_one():
    gammas = torch.stack([0.8 * torch.eye(3), 0.4 * torch.eye(3)]).double()
    L = 6
    risk, se = pgd.pgd_risk(gammas, L, TASK, n_samples=20_000, seed=1)
    batch = TASK.sample(200_000, L, torch.Generator().manual_seed(2), dtype=torch.float64)
    losses = 0.5 * (pgd.pgd_predict(gammas, batch.tokens, batch.query) - batch.target) ** 2
    simulated, simulated_se = float(losses.mean()), float(losses.std() / len(losses) ** 0.5)
    assert abs(risk - simulated) < 4 * (se**2 + simulated_se**2) ** 0.5


def test_one_step_is_the_best_linear_attention_and_two_steps_do_better():
    L = 8
    one = pgd.best_preconditioners(L, TASK, steps=1, n_samples=10_000, full=False)
    two = pgd.best_preconditioners(L, TASK, steps=2, n_samples=10_000, full=False)
    assert abs(one.risk - optimal_linear_risk(L, TASK)) < 4 * one.risk_se
    bayes, bayes_se = bayes_risk(L, TASK, n_samples=10_000)
    assert bayes + 4 * bayes_se < two.risk < one.risk - 10 * two.risk_se


@pytest.mark.slow
def test_the_best_full_preconditioners_are_scalar_for_isotropic_inputs():
    full = pgd.best_preconditioners(10, TASK, steps=2, n_samples=20_000)
    scalar = pgd.best_preconditioners(10, TASK, steps=2, n_samples=20_000, full=False)
    off = full.preconditioners - torch.diag_embed(full.preconditioners.diagonal(dim1=-2, dim2=-1))
    assert float(off.abs().max()) < 0.05
    assert abs(full.risk - scalar.risk) < 3 * (full.risk_se + scalar.risk_se)


def test_bad_preconditioners_are_named():
    with pytest.raises(ValueError, match="preconditioners"):
        pgd.pgd_risk(torch.eye(3), 5, TASK, n_samples=10)


def test_the_references_draw_streams_of_their_own(monkeypatch):
    """The preconditioners are fitted and scored on streams no experiment measures on: they once drew the
    "analysis" stream of seeds 0 and 1, which Chapter 7's cross-evaluation draws for its seeds 0 and 1."""
    from softmax_as_linear.core import seeding

    drawn, real = [], seeding.generator
    monkeypatch.setattr(seeding, "generator", lambda seed, stream, L=None, device="cpu":
                        drawn.append((seed, stream, L)) or real(seed, stream, L, device))
    pgd.best_preconditioners(5, TASK, steps=2, n_samples=200, full=False, iterations=2)
    streams = {stream for _, stream, _ in drawn}
    assert streams == {"pgd_fit", "pgd_score"}, drawn
