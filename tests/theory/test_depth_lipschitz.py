"""The Lipschitz chain of deep attention: the compact constant bounds the layer's difference quotients, the local
constant is the Gaussian average it claims (infinite past the tail index 1/2), and the chain sums as stated."""
import math

import pytest
import torch

from softmax_as_linear.theory import depth
from softmax_as_linear.theory.depth_lipschitz import (
    chain_bound,
    compact_layer_constant,
    gaussian_local_constant,
    lipschitz_comparison,
)


def _layer(tokens, point, U, V):
    return point + depth.deep_forward_unchecked(tokens, point, U[None], V[None])


def test_compact_constant_bounds_the_difference_quotients():
    g = torch.Generator().manual_seed(0)
    U, V = 0.7 * torch.randn(3, 3, generator=g, dtype=torch.float64), torch.randn(3, 3, generator=g, dtype=torch.float64)
    R, L = 1.5, 20

    def in_ball(x):
        return x * (R * torch.rand(x.shape[:-1] + (1,), generator=g, dtype=torch.float64) / x.norm(dim=-1, keepdim=True))

    worst = 0.0
    for _ in range(200):
        X, z = in_ball(torch.randn(L, 3, generator=g, dtype=torch.float64)), in_ball(torch.randn(3, generator=g, dtype=torch.float64))
        X2 = in_ball(X + 0.05 * torch.randn(L, 3, generator=g, dtype=torch.float64))
        z2 = in_ball(z + 0.05 * torch.randn(3, generator=g, dtype=torch.float64))
        distance = max(float((z - z2).norm()), float(((X - X2) ** 2).sum(-1).mean().sqrt()))
        worst = max(worst, float((_layer(X, z, U, V) - _layer(X2, z2, U, V)).norm()) / distance)
    bound = compact_layer_constant(U, V, R)
    assert worst <= bound
    with pytest.raises(ValueError, match="radius"):
        compact_layer_constant(U, V, -1.0)


def test_local_constant_is_the_gaussian_average_and_infinite_past_the_tail_index():
    identity, zero = torch.eye(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    # expanding family of Section 7.6: layer 1 light (a = 0.36), layer 2 heavy (a = 1.23 on Gamma_1)
    U, V = 0.6 * identity, 0.6 * identity
    path = depth.gaussian_recursion(zero, identity, zero, torch.stack([U, U]), torch.stack([V, V]))
    assert math.isfinite(gaussian_local_constant(U, V, zero, identity))
    assert gaussian_local_constant(U, V, zero, path.covs[1]) == math.inf
    # small weights (a < 1/4): the closed-form tilt against plain Monte Carlo over the query law
    g = torch.Generator().manual_seed(1)
    U = 0.3 * torch.randn(2, 2, generator=g, dtype=torch.float64)
    V = 0.5 * torch.randn(2, 2, generator=g, dtype=torch.float64)
    mean, cov = torch.tensor([0.3, -0.2], dtype=torch.float64), torch.tensor([[1.0, 0.3], [0.3, 0.6]], dtype=torch.float64)
    zeta = mean + torch.randn(200_000, 2, generator=g, dtype=torch.float64) @ torch.linalg.cholesky(cov).T
    u = zeta @ U.T
    gu = u @ cov
    S = (torch.eye(2, dtype=torch.float64) + gu[:, :, None] * u[:, None, :] + u[:, :, None] * gu[:, None, :]
         + (u * u).sum(-1)[:, None, None] * (cov + gu[:, :, None] * gu[:, None, :]))
    samples = torch.exp((u * gu).sum(-1)) * torch.einsum("ij,njk,lk->nil", V, S, V).diagonal(dim1=-2, dim2=-1).sum(-1)
    A = torch.eye(2, dtype=torch.float64) + V @ cov @ U
    direct = float(torch.linalg.matrix_norm(A, 2)) + math.sqrt(float(samples.mean()))
    se = float(samples.std() / math.sqrt(samples.numel())) / (2 * math.sqrt(float(samples.mean())))
    assert abs(gaussian_local_constant(U, V, mean, cov, n_samples=1 << 17) - direct) < 5 * se + 1e-3


def test_chain_bound():
    bound = chain_bound([0.1, 0.2, 0.3], [5.0, 2.0, 3.0])
    assert torch.allclose(bound, torch.tensor([0.1, 0.1 * 2 + 0.2, (0.1 * 2 + 0.2) * 3 + 0.3], dtype=torch.float64))
    assert chain_bound([0.1, 0.2], [1.0, math.inf])[1] == math.inf
    with pytest.raises(ValueError, match="same length"):
        chain_bound([0.1], [1.0, 2.0])


def test_comparison_bounds_the_measured_error():
    identity, zero = torch.eye(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    U = torch.stack([0.4 * identity, 0.3 * identity])
    V = torch.stack([0.4 * identity.flip(0), 0.3 * identity])
    out = lipschitz_comparison(zero, identity, U, V, L=64, n_prompts=16, seed=2, n_samples=1 << 12)
    assert out["K"] == 2 and len(out["bound_compact"]) == 2
    assert out["bound_compact"][0] == out["one_layer"][0]
    assert all(b >= m for b, m in zip(out["bound_compact"][1:], out["measured"][1:]))
