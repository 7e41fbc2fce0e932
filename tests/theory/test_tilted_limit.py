"""The infinite-prompt limit of attention for cosine labels of Gaussian inputs, against finite prompts."""
import math

import pytest
import torch

from softmax_as_linear.theory import tilted_limit as tl
from softmax_as_linear.theory.cosine_task import CosineTask

f64 = dict(dtype=torch.float64)


def _setting(n=64, seed=0):
    task = CosineTask(d=2, features=8, frequency=1.0, noise_var=0.05, inputs="gaussian")
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, 8, generator=g, **f64)
    query = torch.cat([torch.randn(n, 2, generator=g, **f64), torch.zeros(n, 1, **f64)], -1)
    U = torch.zeros(3, 3, **f64)
    U[:2, :2] = torch.tensor([[0.4, 0.1], [-0.1, 0.3]])
    V = torch.zeros(3, 3, **f64)
    V[2] = torch.tensor([0.3, -0.2, 1.0])
    return task, a, query, U, V, g


def test_smoothing_of_a_cosine_is_its_gaussian_average():
    omega, phase = torch.tensor([[1.2, -0.7]], **f64), torch.tensor([0.4], **f64)
    cov = torch.tensor([[1.0, 0.3], [0.3, 0.5]], **f64)
    mean = torch.tensor([0.2, -0.1], **f64)
    x = mean + torch.randn(400000, 2, generator=torch.Generator().manual_seed(0), **f64) @ torch.linalg.cholesky(cov).T
    values = torch.cos(x @ omega.T + phase).squeeze(-1)
    closed = float(tl.smoothed_cosines(omega, phase, torch.ones(1, **f64), mean, cov))
    assert abs(float(values.mean()) - closed) < 4 * float(values.std()) / math.sqrt(values.numel())


def test_smoothing_of_a_quadratic():
    B, beta = torch.tensor([[1.0, 0.5], [0.5, -2.0]], **f64), torch.tensor([0.3, 0.1], **f64)
    cov, mean = torch.tensor([[1.0, 0.2], [0.2, 2.0]], **f64), torch.tensor([0.5, -1.0], **f64)
    x = mean + torch.randn(400000, 2, generator=torch.Generator().manual_seed(1), **f64) @ torch.linalg.cholesky(cov).T
    values = ((x @ B) * x).sum(-1) + x @ beta + 0.7
    closed = float(tl.smoothed_quadratic(B, beta, 0.7, mean, cov))
    assert abs(float(values.mean()) - closed) < 4 * float(values.std()) / math.sqrt(values.numel())


@pytest.mark.parametrize("activation", ["softmax", "linear"])
def test_finite_prompts_approach_the_limit_at_rate_one_over_L(activation):
    task, a, query, U, V, g = _setting()
    coef = tl.cosine_coefficients(task, a)
    if activation == "linear":
        U = U.clone()
        U[2, :2] = torch.tensor([0.2, -0.1])
        limit = tl.linear_limit(U, V, task.omega, task.phase, coef, torch.eye(2, **f64), task.noise_var, query)
    else:
        limit = tl.softmax_limit(U, V, task.omega, task.phase, coef, torch.eye(2, **f64), query)
    gaps = []
    for L in (300, 3000):
        pred = tl.finite_prompt_predictions(task, U, V, a, query, L, g, activation)
        gaps.append(float(((pred - limit) ** 2).mean()) * L)
    # L E_L settles: the ratio of L E_L at 3000 and 300 is near 1, far from the factor 10 of no convergence
    assert 0.4 < gaps[1] / gaps[0] < 2.5


def test_the_softmax_limit_refuses_a_score_that_reads_labels():
    task, a, query, U, V, _ = _setting(n=2)
    U[2, 0] = 0.1
    with pytest.raises(ValueError, match="U"):
        tl.softmax_limit(U, V, task.omega, task.phase, a, torch.eye(2, **f64), query)


def test_the_linear_limit_is_linear_in_the_query():
    task, a, query, U, V, _ = _setting(n=1)
    coef = tl.cosine_coefficients(task, a)
    args = (U, V, task.omega, task.phase, coef, torch.eye(2, **f64), task.noise_var)
    q2 = query.clone()
    q2[:, :2] *= 3
    assert float(tl.linear_limit(*args, q2)) == pytest.approx(3 * float(tl.linear_limit(*args, query)), rel=1e-12)


def test_quadratic_labels_approach_their_limits():
    B = torch.tensor([[0.5, 0.2], [0.2, -0.3]], **f64)
    labels = tl.QuadraticLabels(B, torch.tensor([0.3, -0.1], **f64), 0.2, noise_var=0.05)
    g = torch.Generator().manual_seed(4)
    n = 64
    query = torch.cat([torch.randn(n, 2, generator=g, **f64), torch.zeros(n, 1, **f64)], -1)
    U, V = torch.zeros(3, 3, **f64), torch.zeros(3, 3, **f64)
    U[:2, :2] = 0.3 * torch.eye(2, **f64)
    V[2] = torch.tensor([0.2, 0.0, 1.0])
    soft, lin = tl.quadratic_limits(U, V, labels, query)
    dummy = torch.zeros(n, 1, **f64)
    for activation, limit in (("softmax", soft), ("linear", lin)):
        gaps = [float(((tl.finite_prompt_predictions(labels, U, V, dummy, query, L, g, activation) - limit) ** 2).mean()) * L
                for L in (300, 3000)]
        assert 0.4 < gaps[1] / gaps[0] < 2.5, (activation, gaps)


def _limit_arguments():
    import numpy as np

    from softmax_as_linear.theory.cosine_task import CosineTask

    task = CosineTask(d=2, features=8, frequency=1.0, noise_var=0.1, inputs="gaussian")
    U, V = torch.zeros(3, 3, dtype=torch.float64), torch.zeros(3, 3, dtype=torch.float64)
    U[:2, :2] = torch.eye(2)
    V[2] = torch.tensor([0.3, 0.0, 1.0])
    coef = tl.cosine_coefficients(task, torch.ones(1, 8, dtype=torch.float64))
    args = dict(U=U, V=V, omega=task.omega, phase=task.phase, coef=coef, cov=torch.eye(2, dtype=torch.float64),
                query=torch.tensor([[0.5, 0.0, 0.0]], dtype=torch.float64))
    return args, np


@pytest.mark.parametrize("limit", ["softmax_limit", "linear_limit"])
@pytest.mark.parametrize("name, bad", [("U", "shape"), ("V", "shape"), ("query", "shape"), ("query", "0-d"),
                                       ("omega", "shape"), ("phase", "shape"), ("coef", "shape"), ("coef", "0-d"),
                                       ("cov", "shape")])
def test_the_limits_name_a_wrong_argument_and_take_numpy_arrays(limit, name, bad):
    """Wrong shapes and 0-d tensors are ValueErrors naming the argument (not raw torch errors); NumPy arrays are
    read as tensors, with the same result."""
    args, np = _limit_arguments()
    extra = {"noise_var": 0.1} if limit == "linear_limit" else {}
    call = getattr(tl, limit)
    expected = call(**args, **extra)
    as_numpy = call(**{k: np.asarray(v) for k, v in args.items()}, **extra)
    assert torch.equal(torch.as_tensor(as_numpy), expected)
    value = args[name]
    if bad == "0-d":
        args[name] = torch.tensor(1.0, dtype=torch.float64)
    elif name == "omega":  # a wider omega would be read as wider inputs (then cov is named): a vector instead
        args[name] = value[0]
    else:
        args[name] = torch.cat([value, value[..., :1]], -1)
    with pytest.raises(ValueError, match=name):
        call(**args, **extra)


def test_the_limit_panel_names_its_own_seed():
    """Chapter 8's limit view refuses a negative seed naming ``seed``, the argument its caller used."""
    from softmax_as_linear.panels import nonlinear as panel

    with pytest.raises(ValueError, match=r"^seed") as caught:
        panel.limit_view(1.0, 1.0, 0.1, 16, seed=-1)
    assert "feature_seed" not in str(caught.value)


def test_quadratic_limits_read_queries_z_q_with_a_zero_label_slot():
    # u = U z_q = (M x_q, 0): linear attention's limit is v_x' M x_q + v_y beta' M x_q, whatever E[y^2] (noise, c)
    B = torch.tensor([[0.5, 0.2], [0.2, -0.3]], **f64)
    beta = torch.tensor([0.3, -0.1], **f64)
    U, V = torch.zeros(3, 3, **f64), torch.zeros(3, 3, **f64)
    U[:2, :2] = torch.tensor([[0.3, 0.1], [0.0, 0.5]], **f64)
    U[2, 2] = 0.7  # reads the query's label slot, which is 0
    V[2] = torch.tensor([0.2, -0.4, 1.0], **f64)
    query = torch.tensor([[0.5, -1.0, 0.0], [2.0, 0.3, 0.0]], **f64)
    Mx = query[:, :2] @ U[:2, :2].T
    for c, noise_var in ((0.2, 0.05), (3.0, 2.0)):
        _, lin = tl.quadratic_limits(U, V, tl.QuadraticLabels(B, beta, c, noise_var=noise_var), query)
        assert torch.allclose(lin, Mx @ V[2, :2] + V[2, 2] * (Mx @ beta), atol=1e-15, rtol=0)
    with pytest.raises(ValueError, match="query"):
        tl.quadratic_limits(U, V, tl.QuadraticLabels(B, beta, 0.2), torch.tensor([[0.5, -1.0, 1.0]], **f64))
