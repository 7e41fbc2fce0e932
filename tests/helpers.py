"""Helpers shared by the tests: random matrices and Monte Carlo checks."""
import math

import torch


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
