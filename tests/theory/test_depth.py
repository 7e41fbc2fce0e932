"""Deep residual attention: the finite-prompt network, its Gaussian recursion, and K = 1 against the one-layer model."""
import math

import numpy as np
import pytest
import torch

from softmax_as_linear import RegressionTask
from softmax_as_linear.theory import attention, depth, models
from softmax_as_linear.theory.models import AttentionModel

from helpers import random_spd

D64 = dict(dtype=torch.float64)


def _weights(K: int, D: int, seed: int, scale_u: float = 0.3, scale_v: float = 0.4):
    g = torch.Generator().manual_seed(seed)
    return scale_u * torch.randn(K, D, D, generator=g, **D64), scale_v * torch.randn(K, D, D, generator=g, **D64)


@pytest.mark.parametrize("activation", ["softmax", "linear"])
def test_one_layer_is_the_one_layer_model(activation):
    task = RegressionTask.kms(d=3, rho=0.5)
    batch = task.sample(8, 25, torch.Generator().manual_seed(1))
    model = AttentionModel(4, activation, seed=5)
    U, V = (t.detach().double() for t in model.uv())
    tokens, query = batch.tokens.double(), batch.query.double()
    deep = depth.deep_predict(tokens, query, U[None], V[None], activation)
    # the query's label entry is 0, so the residual adds nothing to the prediction
    assert torch.allclose(deep, models.predict(tokens, query, U, V, activation), atol=1e-12, rtol=0)
    assert torch.allclose(deep, model(batch.tokens.float(), batch.query.float()).double(), atol=1e-5)


@pytest.mark.parametrize("activation", ["softmax", "linear"])
def test_one_layer_is_query_plus_attention(activation):
    g = torch.Generator().manual_seed(2)
    tokens, query = torch.randn(3, 40, 3, generator=g, **D64), torch.randn(3, 3, generator=g, **D64)
    U, V = _weights(1, 3, 3)
    attend = attention.softmax_attention if activation == "softmax" else attention.linear_attention
    expected = query + attend(tokens, query, U[0], V[0])
    assert torch.allclose(depth.deep_forward(tokens, query, U, V, activation), expected, atol=1e-12)


def test_prompt_tokens_attend_to_the_prompt_and_keep_layers_agrees():
    g = torch.Generator().manual_seed(4)
    tokens, query = torch.randn(2, 30, 2, generator=g, **D64), torch.randn(2, 2, generator=g, **D64)
    U, V = _weights(3, 2, 5)
    layers = depth.deep_forward(tokens, query, U, V, keep_layers=True)
    z = tokens
    for k in range(3):
        step = torch.stack([attention.softmax_attention(z, z[:, i], U[k], V[k]) for i in range(30)], dim=1)
        z = z + step
        assert torch.allclose(layers.tokens[k + 1], z, atol=1e-12)
    assert torch.allclose(layers.queries[-1], depth.deep_forward(tokens, query, U, V), atol=1e-12)
    assert layers.tokens.shape == (4, 2, 30, 2) and layers.prediction.shape == (2,)


@pytest.mark.parametrize("activation", ["softmax", "linear"])
def test_recursion_one_layer_is_lemma_2_1(activation):
    g = torch.Generator().manual_seed(6)
    m, G = torch.randn(3, generator=g, **D64), random_spd(3, g)
    z = torch.randn(3, generator=g, **D64)
    U, V = _weights(1, 3, 7)
    path = depth.gaussian_recursion(m, G, z, U, V, activation)
    limit = attention.gaussian_attention if activation == "softmax" else attention.gaussian_linear_attention
    assert torch.allclose(path.queries[1], z + limit(m, G, z, U[0], V[0]), atol=1e-12)
    # the token law is the pushforward by the same affine map
    A, b = depth.layer_affine_map(m, G, U[0], V[0], activation)
    assert torch.allclose(path.means[1], z.new_zeros(3) + limit(m, G, m, U[0], V[0]) + m, atol=1e-12)
    assert torch.allclose(path.covs[1], A @ G @ A.T, atol=1e-12)
    assert torch.allclose(A @ z + b, path.queries[1], atol=1e-12)


def test_centred_softmax_and_linear_recursions_coincide_at_every_depth():
    g = torch.Generator().manual_seed(8)
    G, z = random_spd(3, g), torch.randn(3, generator=g, **D64)
    U, V = _weights(5, 3, 9)
    soft = depth.gaussian_recursion(torch.zeros(3, **D64), G, z, U, V, "softmax")
    lin = depth.gaussian_recursion(torch.zeros(3, **D64), G, z, U, V, "linear")
    assert torch.allclose(soft.queries, lin.queries, atol=1e-12) and torch.allclose(soft.covs, lin.covs, atol=1e-12)
    assert torch.equal(soft.means, torch.zeros_like(soft.means))


def test_non_centred_gap_of_one_layer_is_chapter_2_term():
    g = torch.Generator().manual_seed(10)
    m, G, z = torch.randn(3, generator=g, **D64), random_spd(3, g), torch.randn(3, generator=g, **D64)
    U, V = _weights(1, 3, 11)
    gap = (depth.gaussian_recursion(m, G, z, U, V).queries[1]
           - depth.gaussian_recursion(m, G, z, U, V, "linear").queries[1])
    expected = (1 - m @ U[0] @ z) * (V[0] @ m)
    assert torch.allclose(gap, expected, atol=1e-12)
    assert torch.allclose(depth.softmax_linear_gap(m, G, z, U[0], V[0]), expected, atol=1e-12)


def _gaps(L: int, n_prompts: int, activation: str, seed: int, mean=None):
    """Squared distances ``(n_prompts,)`` of the K = 2 network's query output to the recursion, and signed errors."""
    g = torch.Generator().manual_seed(seed)
    D = 2
    G = torch.tensor([[1.0, 0.3], [0.3, 0.6]], **D64)
    m = torch.zeros(D, **D64) if mean is None else mean
    chol = torch.linalg.cholesky(G)
    U, V = _weights(2, D, 12)
    tokens = m + torch.randn(n_prompts, L, D, generator=g, **D64) @ chol.T
    query = m + torch.randn(n_prompts, D, generator=g, **D64) @ chol.T
    finite = depth.deep_forward(tokens, query, U, V, activation)
    limit = depth.gaussian_recursion(m, G, query, U, V, activation).queries[-1]
    return ((finite - limit) ** 2).sum(-1), finite - limit


@pytest.mark.parametrize("activation", ["softmax", "linear"])
def test_finite_networks_converge_to_the_recursion_at_rate_one_over_sqrt_L(activation):
    n = 64
    short, _ = _gaps(64, n, activation, 20)
    long_, signed = _gaps(1024, n, activation, 21)
    # E_L = E||out_L - out_inf||^2 falls as 1/L: the ratio of the two means is 16 up to sampling error (delta
    # method on independent samples, 4 standard errors) and an O(1/L) correction (20%)
    log_ratio = math.log(float(short.mean() / long_.mean()))
    se = math.sqrt(float(short.var() / short.mean() ** 2 + long_.var() / long_.mean() ** 2) / n)
    assert abs(log_ratio - math.log(16)) < 4 * se + math.log(1.2), (log_ratio, se)
    # and the finite network is unbiased to leading order: the mean signed error is within 4 standard errors
    assert (signed.mean(0).abs() < 4 * signed.std(0) / math.sqrt(n) + 1e-3).all()


def test_non_centred_finite_networks_separate_as_the_recursion_says():
    mean = torch.tensor([1.0, -0.8], **D64)
    n = 32
    _, soft = _gaps(1024, n, "softmax", 30, mean)
    _, lin = _gaps(1024, n, "linear", 30, mean)  # the same prompts: the signed errors are against each recursion
    # the finite softmax-minus-linear difference is the recursions' difference up to sampling error ...
    paired = soft - lin
    se = paired.std(0) / math.sqrt(n)
    assert (paired.mean(0).abs() < 4 * se + 1e-3).all()
    # ... and the recursions' difference at a typical query is far beyond that error
    U, V = _weights(2, 2, 12)
    G = torch.tensor([[1.0, 0.3], [0.3, 0.6]], **D64)
    separation = (depth.gaussian_recursion(mean, G, mean, U, V).queries[-1]
                  - depth.gaussian_recursion(mean, G, mean, U, V, "linear").queries[-1]).norm()
    assert separation > 20 * float(se.max())


def test_recursion_is_differentiable_in_the_weights():
    g = torch.Generator().manual_seed(13)
    m, G, z = torch.randn(2, generator=g, **D64), random_spd(2, g), torch.randn(2, generator=g, **D64)
    U, V = _weights(3, 2, 14)
    U.requires_grad_(True)
    V.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda u, v: depth.gaussian_recursion(m, G, z, u, v).prediction, (U, V))


def test_finite_network_gradients_match_finite_differences():
    g = torch.Generator().manual_seed(15)
    tokens, query = torch.randn(10, 2, generator=g, **D64), torch.randn(2, generator=g, **D64)
    U, V = _weights(2, 2, 16)
    U.requires_grad_(True)
    V.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda u, v: depth.deep_predict(tokens, query, u, v), (U, V))


def test_batched_weights_broadcast_over_seeds():
    g = torch.Generator().manual_seed(17)
    tokens, query = torch.randn(4, 20, 2, generator=g, **D64), torch.randn(4, 2, generator=g, **D64)
    U, V = _weights(2, 2, 18)
    Ub, Vb = torch.stack([U, 2 * U]), torch.stack([V, V])  # (2, K, D, D) against prompts (2, 4, ...)
    out = depth.deep_forward(tokens, query, Ub[:, None], Vb[:, None])
    assert out.shape == (2, 4, 2)
    assert torch.allclose(out[1], depth.deep_forward(tokens, query, 2 * U, V), atol=1e-12)


def test_tail_index_is_chapter_3s_for_isotropic_laws():
    angle = 0.7
    R = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], **D64)
    sigma, s = 0.8, 0.6
    value = depth.tail_index(sigma**2 * torch.eye(2, **D64), torch.eye(2, **D64), s * R)
    assert math.isclose(float(value), sigma**2 * s**2, rel_tol=1e-12)


def test_bad_arguments_are_named():
    tokens, query = torch.zeros(5, 2), torch.zeros(2)
    with pytest.raises(ValueError, match="U"):
        depth.deep_forward(tokens, query, torch.zeros(2, 2), torch.zeros(1, 2, 2))
    with pytest.raises(ValueError, match="layers"):
        depth.deep_forward(tokens, query, torch.zeros(2, 2, 2), torch.zeros(1, 2, 2))
    with pytest.raises(ValueError, match="activation"):
        depth.deep_forward(tokens, query, torch.zeros(1, 2, 2), torch.zeros(1, 2, 2), "relu")
    with pytest.raises(ValueError, match="cov"):
        depth.gaussian_recursion(torch.zeros(2), -torch.eye(2), query, torch.zeros(1, 2, 2), torch.zeros(1, 2, 2))


def test_law_layer_outputs_for_a_gaussian_law_match_gaussian_prompts():
    from softmax_as_linear import TokenLaw

    U, V = _weights(2, 2, 19)
    G = torch.tensor([[1.0, 0.3], [0.3, 0.6]], **D64)
    law = TokenLaw("gaussian", torch.zeros(2, **D64), G)
    by_law = depth.law_layer_outputs(law, U, V, L=30, n_prompts=3, seed=2, dtype=torch.float64)
    finite, path = depth.layer_outputs(torch.zeros(2, **D64), G, U, V, L=30, n_prompts=3, seed=2, dtype=torch.float64)
    assert torch.allclose(by_law.queries, finite.queries) and torch.allclose(by_law.tokens, finite.tokens)
    assert path.means.shape == (3, 2) and path.queries.shape == (3, 3, 2)


def test_sampled_slope_recovers_a_known_rate_and_takes_ragged_samples():
    rng = torch.Generator().manual_seed(20)
    lengths = [10, 100, 1000]
    samples = [torch.rand(n, generator=rng, dtype=torch.float64).numpy() * 2 / L for L, n in zip(lengths, (40, 30, 20))]
    slope, low, high = depth.sampled_slope(lengths, samples, level=0.99)
    assert low < slope < high and low <= -1 <= high
    with pytest.raises(ValueError, match="2 samples"):
        depth.sampled_slope(lengths, [s[:1] for s in samples])
    # few prompts at a heavily weighted length: a Student-t interval, wider than the normal one of the same variance
    few = samples[:2] + [samples[2][:3]]
    slope, low, high = depth.sampled_slope(lengths, few, level=0.99)
    x = np.log(lengths)
    w = (x - x.mean()) / ((x - x.mean()) ** 2).sum()
    sd = np.sqrt(sum(wi**2 * r.var(ddof=1) / r.size / r.mean() ** 2 for wi, r in zip(w, few)))
    assert high - slope > 2.576 * sd * 1.1


def test_chapter_7_plane_weight_families():
    """Quarter turns: V_l U_l = u v R(90°) at every layer; expanding: u I and v I; rotations at scale 0.5 are Section
    7.2's weights; the first layers are the same at every depth; a bad family or depth is named."""
    U, V = depth.quarter_turn_weights(4, u=0.8, v=0.5)
    assert U.shape == V.shape == (4, 2, 2)
    assert torch.allclose(V @ U, 0.4 * depth.rotation(90).expand(4, 2, 2), atol=1e-12)
    U, V = depth.family_weights("expanding", 2, 0.6, 0.3)
    assert torch.equal(U, 0.6 * torch.eye(2, dtype=torch.float64).expand(2, 2, 2))
    assert torch.equal(V, 0.3 * torch.eye(2, dtype=torch.float64).expand(2, 2, 2))
    U, V = depth.plane_weights(3)
    flip = torch.diag(torch.tensor([1.0, -0.6], dtype=torch.float64))
    assert torch.allclose(U[2], 0.5 * depth.rotation(23 + 2 * 52), atol=0)
    assert torch.allclose(V[1], 0.5 * depth.rotation(-17 + 74) @ flip, atol=0)
    assert torch.equal(depth.plane_weights(2)[0], U[:2])
    R = depth.rotation(30)
    assert torch.allclose(R @ R.T, torch.eye(2, dtype=torch.float64), atol=1e-15) and math.isclose(R[1, 0], 0.5)
    with pytest.raises(ValueError, match="family"):
        depth.family_weights("spirals", 2, 0.1, 0.1)
    with pytest.raises(ValueError, match="K"):
        depth.family_weights("expanding", 0, 0.1, 0.1)
