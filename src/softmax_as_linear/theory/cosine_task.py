r"""In-context regression of a nonlinear function (Chapter 8): a Gaussian-process prior from random cosine features.

Each prompt draws a function

.. math::

    f_a(x) &= \varphi(x)^\top a, \qquad a \sim N(0, \tau^2 I_m), \\
    \varphi_j(x) &= \sqrt{2/m}\, \cos(\omega_j^\top x + b_j),

with :math:`m` features :math:`\omega_j \sim N(0, \gamma^2 I_d)`, :math:`b_j \sim U[0, 2\pi)` drawn once for the task
(from ``feature_seed``) and shared by every prompt. Given the features, :math:`f_a` is exactly a Gaussian process
with kernel :math:`k(x, x') = \tau^2 \varphi(x)^\top \varphi(x')`, which tends to the Gaussian kernel
:math:`\tau^2 e^{-\gamma^2 \|x - x'\|^2 / 2}` as :math:`m \to \infty` (Rahimi & Recht's random features); the
frequency scale :math:`\gamma` plays the role of the Lipschitz constant (:math:`\mathbb{E}\|\nabla f\|^2 = \tau^2
\gamma^2 d` for the limiting kernel). Inputs are uniform on the unit sphere :math:`S^{d-1}`
(``inputs="sphere"``) or :math:`N(0, I_d)` (``inputs="gaussian"``, the measure view's). Tokens are
:math:`z_i = (x_i, f_a(x_i) + \varepsilon_i)`, :math:`\varepsilon_i \sim N(0, s^2)`; the query token is
:math:`(x_q, 0)` and the target :math:`f_a(x_q) + \varepsilon_q`.

Because :math:`f_a` is linear in :math:`a`, the Bayes predictor of a prompt is the posterior mean of Bayesian linear
regression on the features, and its risk given the prompt's inputs is in closed form (:meth:`CosineTask.bayes_risk`);
only the inputs are averaged by Monte Carlo. The interface (:meth:`CosineTask.sample_stacked`,
:meth:`CosineTask.zero_risk`, ``D``) is the one the training engine reads from
:class:`~softmax_as_linear.theory.regression.RegressionTask`; a batch's ``w`` holds the coefficients :math:`a`.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ..core import checks
from .regression import Batch

#: The input laws of the task.
INPUTS = ("sphere", "gaussian")

#: Monte Carlo inputs behind the task's moments (zero risk, best affine predictor): fixed, so they are numbers.
MOMENT_SAMPLES = 1 << 17

#: The moments of every task met in this process (:meth:`CosineTask.zero_risk`, :meth:`CosineTask.best_affine_risk`),
#: keyed on what they are functions of (:meth:`CosineTask._moment_key`): each computed once, the same floats.
_MOMENTS: dict[tuple, object] = {}


class CosineTask:
    r"""The random-cosine-feature task :math:`(d, m, \gamma, \tau^2, s^2)` with inputs on the sphere or Gaussian.

    Args:
        d: input dimension (tokens have ``D = d + 1`` entries).
        features: :math:`m`, the number of cosine features.
        frequency: :math:`\gamma`, the scale of the frequencies :math:`\omega_j \sim N(0, \gamma^2 I_d)`.
        task_var: :math:`\tau^2`, the variance of each coefficient :math:`a_j` (so
            :math:`\operatorname{Var} f(x) \approx \tau^2`).
        noise_var: :math:`s^2`, the label noise.
        inputs: ``"sphere"`` (uniform on :math:`S^{d-1}`) or ``"gaussian"`` (:math:`N(0, I_d)`).
        feature_seed: the seed of the generator that draws the features (first :math:`\omega` ``(m, d)``, then
            :math:`b` ``(m,)``).

    Attributes ``omega (m, d)`` and ``phase (m,)``, float64.
    """

    def __init__(self, d: int = 2, features: int = 64, frequency: float = 2.0, task_var: float = 1.0,
                 noise_var: float = 0.05, inputs: str = "sphere", feature_seed: int = 0):
        self.d = checks.int_at_least("d", d, 2 if inputs == "sphere" else 1)
        self.features = checks.positive_int("features", features)
        self.frequency = checks.positive_float("frequency", frequency, allow_zero=True)
        self.task_var = checks.positive_float("task_var", task_var)
        self.noise_var = checks.positive_float("noise_var", noise_var, allow_zero=True)
        self.inputs = checks.one_of("inputs", inputs, INPUTS)
        self.feature_seed = checks.int_at_least("feature_seed", feature_seed, 0)
        g = torch.Generator().manual_seed(self.feature_seed)
        self.omega = self.frequency * torch.randn(self.features, self.d, generator=g, dtype=torch.float64)
        self.phase = 2 * math.pi * torch.rand(self.features, generator=g, dtype=torch.float64)
        self._on = {}

    @property
    def D(self) -> int:
        """Token dimension ``d + 1``."""
        return self.d + 1

    def __repr__(self) -> str:
        return (f"CosineTask(d={self.d}, features={self.features}, frequency={self.frequency:g}, "
                f"tau^2={self.task_var:g}, s^2={self.noise_var:g}, inputs={self.inputs!r})")

    def _features_on(self, like: Tensor) -> tuple[Tensor, Tensor]:
        key = (like.device, like.dtype)
        if key not in self._on:
            self._on[key] = (self.omega.to(*key), self.phase.to(*key))
        return self._on[key]

    def feature_map(self, x: Tensor) -> Tensor:
        r""":math:`\varphi(x) = \sqrt{2/m} \cos(\Omega x + b)`, ``x (..., d)`` -> ``(..., m)`` (a NumPy array is read
        as a tensor)."""
        return self._feature_map(checks.shaped("x", x, f"(..., {self.d})", dtype=None))

    def _feature_map(self, x: Tensor) -> Tensor:
        """:meth:`feature_map` without the checks (the task's own, valid, inputs)."""
        omega, phase = self._features_on(x)
        return math.sqrt(2.0 / self.features) * torch.cos(x @ omega.T + phase)

    def function(self, a: Tensor, x: Tensor) -> Tensor:
        r""":math:`f_a(x) = \varphi(x)^\top a`: coefficients ``a (..., m)``, inputs ``x (..., n, d)`` ->
        ``(..., n)`` (NumPy arrays read as tensors, in the wider dtype of the two)."""
        a = checks.shaped("a", a, f"(..., {self.features})", dtype=None)
        x = checks.shaped("x", x, f"(..., n, {self.d})", dtype=None)
        dtype = torch.promote_types(a.dtype, x.dtype)
        a, x = a.to(dtype), x.to(dtype)
        try:
            torch.broadcast_shapes(a.shape[:-1], x.shape[:-2])
        except RuntimeError:
            raise ValueError(f"a's leading dimensions {tuple(a.shape[:-1])} and x's {tuple(x.shape[:-2])} must "
                             "broadcast (one coefficient vector per prompt)") from None
        return self._function(a, x)

    def _function(self, a: Tensor, x: Tensor) -> Tensor:
        """:meth:`function` without the checks (the task's own, valid, draws)."""
        return (self._feature_map(x) @ a.unsqueeze(-1)).squeeze(-1)

    def draw_inputs(self, shape: tuple[int, ...], generator: torch.Generator | None = None, dtype=torch.float64,
                    device=None) -> Tensor:
        """Inputs ``(*shape, d)`` of the task's law: one ``randn`` of that shape, normalised to the sphere for
        ``"sphere"``."""
        x = torch.randn(*shape, self.d, generator=generator, dtype=dtype, device=device)
        return x / x.norm(dim=-1, keepdim=True) if self.inputs == "sphere" else x

    def sample(self, n_prompts: int, L: int, generator: torch.Generator | None = None, dtype=torch.float32,
               device=None) -> Batch:
        """``n_prompts`` prompts of length ``L``. Draws, in order: :math:`a` ``(n, m)`` standard normal, the inputs
        ``(n, L + 1, d)`` (position 0 is the query), the label noise ``(n, L + 1)``."""
        n_prompts, L = checks.positive_int("n_prompts", n_prompts), checks.positive_int("L", L)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        if generator is not None:
            device = generator.device
        a = torch.randn(n_prompts, self.features, generator=generator, dtype=dtype, device=device)
        x = self.draw_inputs((n_prompts, L + 1), generator, dtype, device)
        noise = torch.randn(n_prompts, L + 1, generator=generator, dtype=dtype, device=device)
        return self._assemble(a, x, noise)

    def sample_stacked(self, n_prompts: int, L: int, generators: list[torch.Generator], dtype=torch.float32) -> Batch:
        """One :meth:`sample` per generator, stacked on a leading axis ``(S,)`` (the same random numbers)."""
        if not generators:
            raise ValueError("generators must hold at least one generator")
        batches = [self.sample(n_prompts, L, g, dtype) for g in generators]
        return Batch(*(torch.stack([getattr(b, k) for b in batches]) for k in ("tokens", "query", "target", "w")))

    def _assemble(self, a: Tensor, x: Tensor, noise: Tensor) -> Batch:
        a = a * math.sqrt(self.task_var)
        y = self._function(a, x) + math.sqrt(self.noise_var) * noise
        tokens = torch.cat([x, y.unsqueeze(-1)], -1)
        query = torch.cat([x[..., 0, :], torch.zeros_like(y[..., :1])], -1)
        return Batch(tokens[..., 1:, :], query, y[..., 0].clone(), a)

    def noise_floor(self) -> float:
        r"""Risk of the predictor that knows :math:`f`, :math:`\tfrac{s^2}{2}`."""
        return 0.5 * self.noise_var

    def _moment_key(self, *what) -> tuple:
        """The key of ``what`` in :data:`_MOMENTS`: with what the features and the moment inputs are functions of,
        and torch's number of threads (the last digit of a threaded sum may follow it)."""
        return (*what, self.d, self.features, self.frequency, self.inputs, self.feature_seed, MOMENT_SAMPLES,
                torch.get_num_threads())

    def _moment_inputs(self) -> Tensor:
        return self.draw_inputs((MOMENT_SAMPLES,), torch.Generator().manual_seed(self.feature_seed + 1))

    def zero_risk(self) -> float:
        r"""Risk of :math:`\hat y = 0`, :math:`\tfrac{\tau^2}{2} \mathbb{E}_x \|\varphi(x)\|^2 + \tfrac{s^2}{2}`, the
        expectation a mean over :data:`MOMENT_SAMPLES` fixed inputs (the scale of the divergence threshold)."""
        key = self._moment_key("zero")
        if key not in _MOMENTS:
            _MOMENTS[key] = float((self.feature_map(self._moment_inputs()) ** 2).sum(-1).mean())
        return 0.5 * self.task_var * _MOMENTS[key] + 0.5 * self.noise_var

    def best_affine_risk(self) -> tuple[float, float]:
        r""":math:`R^*_{\mathrm{aff}}`: the risk of the best predictor affine in :math:`x_q` *that knows* :math:`f`,
        :math:`\tfrac{\tau^2}{2} \mathbb{E}_x\|\varphi(x) - \mu - Bx\|^2 + \tfrac{s^2}{2}` with :math:`\mu + Bx` the
        least-squares affine fit of the features. Every predictor affine in the query (linear attention at every
        :math:`L`, whatever its weights) has risk at least this. Fitted on :data:`MOMENT_SAMPLES` fixed inputs and
        scored on as many others: (value, standard error).

        The same float to its last bit in every process, whatever the number of threads: the fit solves the normal
        equations :math:`(X^\top X) c = X^\top \Phi` in float64 (a well-conditioned :math:`(d+1) \times (d+1)`
        system: the inputs' moments), with every sum over samples taken by NumPy's pairwise summation, whose order is
        fixed, rather than by a threaded BLAS or LAPACK call, whose order (and last digit) follows the threads."""
        key = self._moment_key("affine", self.task_var, self.noise_var)
        if key not in _MOMENTS:
            _MOMENTS[key] = self._best_affine_risk()
        return _MOMENTS[key]

    def _best_affine_risk(self) -> tuple[float, float]:
        x = self._moment_inputs().numpy()
        x2 = self.draw_inputs((MOMENT_SAMPLES,), torch.Generator().manual_seed(self.feature_seed + 2)).numpy()
        design = lambda t: np.concatenate([np.ones_like(t[:, :1]), t], -1)  # noqa: E731
        X, phi = design(x), self.feature_map(torch.as_tensor(x)).numpy()
        gram = (X[:, :, None] * X[:, None, :]).sum(0)  # (d + 1, d + 1)
        moments = (X[:, :, None] * phi[:, None, :]).sum(0)  # (d + 1, m)
        coef = np.linalg.solve(gram, moments)
        X2 = design(x2)
        fit = sum(X2[:, k:k + 1] * coef[k] for k in range(X2.shape[1]))  # elementwise: no threaded product
        loss = 0.5 * self.task_var * ((self.feature_map(torch.as_tensor(x2)).numpy() - fit) ** 2).sum(-1)
        return float(loss.mean()) + 0.5 * self.noise_var, float(loss.std(ddof=1) / math.sqrt(loss.size))

    def posterior(self, tokens: Tensor, query: Tensor) -> tuple[Tensor, Tensor]:
        r"""The Bayes predictor of each prompt and its conditional excess risk: with :math:`\Phi` ``(L, m)`` the
        prompt's features and :math:`C = (\Phi^\top\Phi / s^2 + I / \tau^2)^{-1}` the posterior covariance of
        :math:`a`, the posterior mean :math:`\hat y = \varphi_q^\top C \Phi^\top y / s^2` and
        :math:`\varphi_q^\top C \varphi_q` (the expected squared error of :math:`\hat y` against :math:`f(x_q)` given
        the prompt). tokens ``(..., L, D)``, query ``(..., D)`` -> ``(...)``, ``(...)``; needs :math:`s^2 > 0`."""
        if self.noise_var <= 0:
            raise ValueError("the posterior needs noise_var > 0 (noise-free labels make it a projection)")
        tokens = checks.shaped("tokens", tokens, f"(..., L, {self.D})")
        query = checks.shaped("query", query, f"(..., {self.D})")
        try:
            torch.broadcast_shapes(tokens.shape[:-2], query.shape[:-1])
        except RuntimeError:
            raise ValueError(f"query's leading dimensions {tuple(query.shape[:-1])} must match the tokens' "
                             f"{tuple(tokens.shape[:-2])} (one query per prompt)") from None
        phi = self.feature_map(tokens[..., :-1])
        phi_q = self.feature_map(query[..., :-1])
        precision = (phi.transpose(-1, -2) @ phi / self.noise_var
                     + torch.eye(self.features, dtype=phi.dtype) / self.task_var)
        chol = torch.linalg.cholesky(precision)
        rhs = torch.stack([phi_q, (phi.transpose(-1, -2) @ tokens[..., -1:]).squeeze(-1) / self.noise_var], -1)
        solved = torch.cholesky_solve(rhs, chol)
        return (phi_q * solved[..., 1]).sum(-1), (phi_q * solved[..., 0]).sum(-1)

    def bayes_risk(self, L: int, n_prompts: int = 4096, seed: int = 0) -> tuple[float, float]:
        r"""The :math:`L`-Bayes risk :math:`\tfrac12 \mathbb{E}[\varphi_q^\top C \varphi_q] + \tfrac{s^2}{2}`, exact
        given the inputs and averaged over ``n_prompts`` prompts: (value, standard error)."""
        g = torch.Generator().manual_seed(checks.int_at_least("seed", seed, 0))
        batch = self.sample(checks.positive_int("n_prompts", n_prompts), checks.positive_int("L", L), g, torch.float64)
        _, excess = self.posterior(batch.tokens, batch.query)
        loss = 0.5 * excess
        return float(loss.mean()) + 0.5 * self.noise_var, float(loss.std() / math.sqrt(n_prompts))
