"""The data of the live measure panels: Lemma 2.1's closed forms where the lemma gives them, seeded draws of the
stated sizes, and a setting the panel cannot draw is a ValueError naming its argument."""
import math

import pytest
import torch

from softmax_as_linear.experiments import live_measures
from softmax_as_linear.theory.measures import TokenLaw

F64 = dict(dtype=torch.float64)


def _circle(n=9, radius=1.5):
    angles = torch.linspace(0, 2 * math.pi, n, **F64)
    return radius * torch.stack([angles.cos(), angles.sin()], dim=-1)


def test_prompt_against_law_draws_seeded_prompts_around_the_limit():
    law, gaussian = TokenLaw.standard("laplace", 2), TokenLaw.standard("gaussian", 2)
    U, V, z = 0.3 * torch.eye(2, **F64), torch.eye(2, **F64), _circle()[1]
    data = live_measures.prompt_against_law(law, gaussian, _circle(), z, U, V, 20)
    assert data["outputs"].shape == (32, 2) and data["curve"].shape == data["reference"].shape == (9, 2)
    assert (data["kind"], data["reference_kind"], data["length"]) == ("laplace", "gaussian", 20)
    # the Gaussian law's limit is Lemma 2.1's V m + V Gamma U z = 0.3 z (m = 0, Gamma = I)
    torch.testing.assert_close(data["reference"], 0.3 * _circle(), atol=1e-6, rtol=0)
    torch.testing.assert_close(data["limit"], data["curve"][1], atol=1e-10, rtol=0)   # the limit at z, on the image of the circle
    again = live_measures.prompt_against_law(law, gaussian, _circle(), z, U, V, 20)
    assert torch.equal(again["outputs"], data["outputs"])
    with pytest.raises(ValueError, match="L"):
        live_measures.prompt_against_law(law, gaussian, _circle(), z, U, V, 0)


def test_lemma_in_the_plane_gives_the_lemma_and_its_estimates():
    mean, cov = torch.tensor([0.6, -0.4], **F64), torch.tensor([[1.2, 0.3], [0.3, 0.35]], **F64)
    law = TokenLaw("gaussian", mean, cov)
    z, U, V = torch.tensor([0.8, 0.5], **F64), 0.6 * torch.eye(2, **F64), torch.tensor([[0.0, -1.0], [1.0, 0.0]], **F64)
    data = live_measures.lemma_in_the_plane(law, z, U, V, _circle())
    tilted = mean + cov @ U @ z
    torch.testing.assert_close(data["tilted_mean"], tilted)
    torch.testing.assert_close(data["lemma"], V @ tilted)
    torch.testing.assert_close(data["quadrature_mean"], tilted, atol=1e-4, rtol=0)
    assert data["samples"].shape == (800, 2) and data["outputs"].shape == (16, 2)
    assert data["radius"] == pytest.approx(1.5) and data["length"] == 2_000
    # 16 prompts of 2,000 tokens: their mean output within a loose 6 standard errors of the lemma
    spread = data["outputs"].std(0) / 16 ** 0.5
    assert torch.all((data["outputs"].mean(0) - data["lemma"]).abs() < 6 * spread + 1e-3)
    with pytest.raises(ValueError, match="law"):
        live_measures.lemma_in_the_plane(TokenLaw.standard("gaussian", 3), torch.zeros(3), torch.eye(3),
                                         torch.eye(3), _circle())
