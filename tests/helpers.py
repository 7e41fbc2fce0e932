"""Helpers shared by the tests: random matrices, Monte Carlo checks and small regression tasks."""
import math

import torch

from softmax_as_linear.registry import SAMPLERS
from softmax_as_linear.theory import regression


def random_spd(D: int, generator: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    """A random symmetric positive definite matrix with eigenvalues in [0.3, 1.3] * scale."""
    Q, _ = torch.linalg.qr(torch.randn(D, D, generator=generator, dtype=torch.float64))
    eig = 0.3 + torch.rand(D, generator=generator, dtype=torch.float64)
    return scale * (Q * eig) @ Q.T


def chunk_mean_check(chunks: torch.Tensor, expected: torch.Tensor, n_se: float = 5.0, floor: float = 1e-4):
    """Assert the mean over dim 0 of independent estimates matches ``expected`` within ``n_se`` standard errors."""
    mean = chunks.mean(0)
    se = chunks.std(0) / chunks.shape[0] ** 0.5
    err = (mean - expected).abs()
    assert torch.all(err <= n_se * se + floor), f"error {err.tolist()} vs {n_se} se {se.tolist()}"


def rank_four_covariance(d: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """A degenerate input covariance (Appendix F.3): the projector ``I - u u^T`` of rank ``d - 1``, and ``u``."""
    u = torch.ones(d, dtype=torch.float64) / math.sqrt(d)
    return torch.eye(d, dtype=torch.float64) - torch.outer(u, u), u


#: Small regression tasks (d = 3) by name: isotropic, KMS and a random covariance, with label noise.
REGRESSION_TASKS = {
    "isotropic": lambda: regression.RegressionTask.isotropic(d=3, task_var=0.5, noise_var=0.2),
    "kms": lambda: regression.RegressionTask.kms(d=3, rho=0.6, task_var=0.4, noise_var=0.1),
    "random": lambda: regression.RegressionTask(3, random_spd(3, torch.Generator().manual_seed(99)), 0.7, 0.3),
}

#: The KMS and random tasks under each sampler, by ``(name, sampler)``.
SAMPLER_TASKS = {
    (name, sampler): (lambda name=name, sampler=sampler: regression.RegressionTask(
        3, REGRESSION_TASKS[name]().covariance, REGRESSION_TASKS[name]().task_var, REGRESSION_TASKS[name]().noise_var, sampler))
    for name in ("kms", "random") for sampler in SAMPLERS
}


def random_uv(seed, D=4, scale=0.5):
    """Random parameters ``(U, V)``, each ``(D, D)`` float64, from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(D, D, generator=g, dtype=torch.float64),
            scale * torch.randn(D, D, generator=g, dtype=torch.float64))


def mc_mean(values):
    """Mean of i.i.d. ``values`` and its standard error."""
    return float(values.mean()), float(values.std() / math.sqrt(values.numel()))


def diagnosis(function, name: str) -> str:
    """What the coding exercise ``name``'s checker tells a student whose function is ``function``, which must fail."""
    from softmax_as_linear import exercises

    answer = exercises.result(function, name)
    assert answer.status == "failed", answer
    return answer.message
