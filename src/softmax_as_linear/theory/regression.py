r"""In-context linear regression (paper, Sections 4-5): the task and its prompt sampler.

For each prompt, :math:`w \sim N(0, \tau^2 I_d)`, inputs :math:`x_i \sim N(0, \Sigma)` i.i.d. and labels
:math:`y_i = w^\top x_i + \varepsilon_i`, :math:`\varepsilon_i \sim N(0, s^2)`. Tokens are
:math:`z_i = (x_i, y_i) \in \mathbb{R}^{D}`, :math:`D = d + 1`; the query token is :math:`(x_q, 0)` and the
target :math:`y_q = w^\top x_q + \varepsilon_q`. Given :math:`w`, a token is :math:`N(0, \Gamma_w)` with

.. math:: \Gamma_w = \begin{pmatrix} \Sigma & \Sigma w \\ w^\top \Sigma & w^\top \Sigma w + s^2 \end{pmatrix}.

The task's risks are in :mod:`~softmax_as_linear.theory.risks`, the limits of its gradient flow in
:mod:`~softmax_as_linear.theory.flow_limits`, the gradient noise of SGD in :mod:`~softmax_as_linear.theory.sgd_noise`.

Two samplers of the inputs (``RegressionTask(..., sampler=...)``), with :math:`C` the lower Cholesky
factor of :math:`\Sigma` (:math:`CC^\top = \Sigma`) and :math:`\xi \sim N(0, I_d)`:

- ``"paper"`` (default, the paper's model): prompt and query inputs :math:`x = C\xi \sim N(0, \Sigma)`.
- ``"published"`` (what the paper's published code draws): prompt inputs :math:`x_i = C C \xi_i`, of
  covariance :math:`P = C \Sigma C^\top`, and query inputs :math:`x_q = \xi_q \sim N(0, I_d)`.

Write :math:`P` for the prompt covariance and :math:`Q` for the query covariance (:math:`P = Q = \Sigma`
for ``"paper"``). The risks and limits use :math:`P` wherever the prompt enters and :math:`Q` wherever the
query does; with :math:`\Sigma = I` both samplers coincide.

**Covariate laws** (``RegressionTask(..., covariates=...)``, Chapter 6). The entries of :math:`\xi` are i.i.d.
standardised draws of a law :math:`\lambda` (:mod:`~softmax_as_linear.theory.covariates`): Gaussian (the
paper, and the default), uniform on :math:`[-\sqrt3, \sqrt3]` or Rademacher, so that :math:`x = F\xi` has the
same covariance whatever the law. The Gaussian law draws exactly the random numbers it always drew. The
label noise and :math:`w` stay Gaussian. Second moments, hence
:func:`~softmax_as_linear.theory.risks.infinite_prompt_risk` of linear attention, do not depend on the law;
fourth moments do, through the fourth cumulant :math:`\kappa_4 = \mathbb{E}\xi^4 - 3`, and
:func:`~softmax_as_linear.theory.risks.linear_attention_risk` and
:func:`~softmax_as_linear.theory.risks.optimal_linear_risk` carry them. The infinite-prompt softmax
model of a non-Gaussian law is in :mod:`~softmax_as_linear.theory.limit_model`.

**Where prompts are drawn.** Every regression prompt drawn with torch's generators is drawn here:
:meth:`RegressionTask.sample` and :meth:`RegressionTask.sample_stacked` (training and evaluation under
``rng="torch"``, :class:`~softmax_as_linear.engine.data.SweepData`), :meth:`RegressionTask.stream` and
:meth:`RegressionTask.token_draw` (prompts of any length, token chunk by token chunk: the concentration
estimators) and :meth:`RegressionTask.draw_inputs` (the inputs alone: the Bayes risk). They turn the same
standard draws into the same prompts; the covariate entries come from
:mod:`~softmax_as_linear.theory.covariates`. Prompts of ``rng="philox"`` follow the same law from
counter-based random numbers, other numbers than these: :mod:`~softmax_as_linear.engine.gpu.counter_stream`
draws them in plain torch, :mod:`~softmax_as_linear.engine.gpu.attention_sums` inside the training kernel
(with the device functions of :mod:`~softmax_as_linear.engine.gpu.philox`).
The token laws of Chapters 1-3 are sampled by :meth:`~softmax_as_linear.theory.measures.TokenLaw.sample`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..core import checks
from ..registry import SAMPLERS
from . import covariates as covariate_laws


def _input_factor(covariance: Tensor) -> Tensor:
    r"""A factor :math:`F` with :math:`F F^\top = \Sigma`: the lower Cholesky factor when :math:`\Sigma` is positive
    definite, otherwise :math:`O \operatorname{diag}(\sqrt{\lambda})` from its eigendecomposition (degenerate
    :math:`\Sigma`, Appendix F.3: the inputs then live in the range of :math:`\Sigma`)."""
    factor, info = torch.linalg.cholesky_ex(covariance)
    if int(info) == 0:
        return factor
    values, vectors = torch.linalg.eigh(covariance)
    values = torch.where(values > _rank_tolerance(values), values, torch.zeros_like(values))
    return vectors * values.sqrt()


def _rank_tolerance(values: Tensor) -> float:
    """Eigenvalues below this count as zero (the tolerance of ``torch.linalg.matrix_rank``)."""
    return float(values.abs().max()) * values.numel() * torch.finfo(values.dtype).eps


def is_degenerate(covariance: Tensor) -> bool:
    """Whether the covariance ``(d, d)`` is singular (rank below ``d``)."""
    return int(torch.linalg.matrix_rank(covariance, hermitian=True)) < covariance.shape[-1]


def kms_covariance(d: int, rho: float, *, dtype=torch.float64) -> Tensor:
    r"""Kac-Murdock-Szego matrix :math:`\Sigma_{ij} = \rho^{|i-j|}`, shape ``(d, d)``; needs :math:`-1 < \rho < 1`."""
    d = checks.positive_int("d", d)
    rho = checks.in_open_interval("rho", rho, -1.0, 1.0)
    index = torch.arange(d)
    return torch.tensor(rho, dtype=dtype) ** (index[:, None] - index[None, :]).abs().to(dtype)


@dataclass(frozen=True)
class Batch:
    """A batch of regression prompts.

    tokens ``(n, L, D)``, query ``(n, D)`` (last entry 0), target ``(n,)``, w ``(n, d)``.
    """

    tokens: Tensor
    query: Tensor
    target: Tensor
    w: Tensor


class RegressionTask:
    r"""The in-context linear regression task :math:`(d, \Sigma, \tau^2, s^2)`.

    Args:
        d: input dimension (tokens have ``D = d + 1`` entries).
        covariance: :math:`\Sigma`, a ``(d, d)`` symmetric positive semi-definite matrix (default :math:`I_d`);
            the theory asks it invertible, and Appendix F.3 extends it to a degenerate one.
        task_var: :math:`\tau^2`, variance of each entry of :math:`w` (default ``1 / d``, as in the paper's code).
        noise_var: :math:`s^2`, label-noise variance on prompt and query labels (default 0.1).
        sampler: ``"paper"`` (prompt and query inputs :math:`N(0, \Sigma)`) or ``"published"`` (prompt
            inputs multiplied by the Cholesky factor :math:`C` twice, :math:`N(0, C\Sigma C^\top)`, and
            isotropic query inputs :math:`N(0, I_d)`, as the paper's published code draws them). Labels are
            :math:`y = w^\top x + \varepsilon` with the inputs actually drawn.
        covariates: law of the standardised input entries :math:`\xi_j`
            (:data:`~softmax_as_linear.registry.COVARIATES`): ``"gaussian"`` (default), ``"uniform"`` or
            ``"rademacher"``; inputs are :math:`F\xi` with the factor :math:`F` of the sampler, so their covariance does
            not depend on the law.

    Attributes ``prompt_covariance`` (:math:`P`) and ``query_covariance`` (:math:`Q`), ``(d, d)`` float64;
    ``prompt_factor`` and ``query_factor`` (:math:`F` with :math:`F F^\top = P`, resp. :math:`Q`).
    """

    def __init__(self, d: int, covariance=None, task_var: float | None = None, noise_var: float = 0.1,
                 sampler: str = "paper", covariates: str = "gaussian"):
        self.d = checks.positive_int("d", d)
        if covariance is None:
            covariance = torch.eye(self.d, dtype=torch.float64)
        covariance = checks.as_float_tensor("covariance", covariance).to(torch.float64)
        # positive semi-definite: a degenerate Sigma is allowed (Appendix F.3), sampled through _input_factor
        self.covariance = checks.covariance("covariance", covariance, self.d, definite=False)
        self.task_var = checks.positive_float("task_var", 1.0 / self.d if task_var is None else task_var)
        self.noise_var = checks.positive_float("noise_var", noise_var, allow_zero=True)
        self.sampler = checks.one_of("sampler", sampler, SAMPLERS)
        self.covariates = covariate_laws.check_covariates(covariates)
        self._cholesky = _input_factor(self.covariance)
        if sampler == "published" and is_degenerate(self.covariance):
            raise ValueError("sampler 'published' needs a positive definite covariance (it multiplies by the Cholesky "
                             "factor)")
        self._isotropic = torch.equal(self.covariance, torch.eye(self.d, dtype=torch.float64))
        # Factor F of the prompt inputs (x = F xi): C, or C C for the published sampler.
        self._prompt_factor = self._cholesky if sampler == "paper" else self._cholesky @ self._cholesky
        self._identity_factor = torch.equal(self._prompt_factor, torch.eye(self.d, dtype=torch.float64))
        self.prompt_covariance = self._prompt_factor @ self._prompt_factor.T
        self.query_covariance = self.covariance if sampler == "paper" else torch.eye(self.d, dtype=torch.float64)
        self.prompt_factor = self._prompt_factor
        self.query_factor = self._cholesky if sampler == "paper" else torch.eye(self.d, dtype=torch.float64)
        self._factor_on = {}  # (device, dtype) -> copy, so that sampling copies nothing to the device

    @property
    def is_isotropic(self) -> bool:
        r"""Whether :math:`\Sigma = I_d` exactly (Chapter 4's closed forms and the reductions that rely on them
        apply)."""
        return self._isotropic

    @classmethod
    def isotropic(cls, d: int = 5, task_var: float | None = None, noise_var: float = 0.1,
                  sampler: str = "paper", covariates: str = "gaussian") -> "RegressionTask":
        """:math:`\\Sigma = I_d` (both samplers draw the same prompts)."""
        return cls(d, None, task_var, noise_var, sampler, covariates)

    @classmethod
    def kms(cls, d: int = 5, rho: float = 0.5, task_var: float | None = None, noise_var: float = 0.1,
            sampler: str = "paper", covariates: str = "gaussian") -> "RegressionTask":
        """Anisotropic inputs with the Kac-Murdock-Szego covariance :math:`\\rho^{|i-j|}`."""
        return cls(d, kms_covariance(d, rho), task_var, noise_var, sampler, covariates)

    @property
    def D(self) -> int:
        """Token dimension ``d + 1``."""
        return self.d + 1

    def __repr__(self) -> str:
        eig = torch.linalg.eigvalsh(self.covariance)
        return (f"RegressionTask(d={self.d}, Sigma eigenvalues in [{float(eig[0]):.3g}, {float(eig[-1]):.3g}], "
                f"tau^2={self.task_var:.3g}, s^2={self.noise_var:.3g}, sampler={self.sampler!r}"
                + ("" if self.covariates == "gaussian" else f", covariates={self.covariates!r}") + ")")

    def on_device(self, name: str, like: Tensor) -> Tensor:
        """The task's tensor attribute ``name`` (``"prompt_factor"``, ``"prompt_covariance"``...) with the dtype and
        device of ``like``, copied once and kept (so that a training step, a captured CUDA graph included,
        copies nothing)."""
        key = (name, like.device, like.dtype)
        if key not in self._factor_on:
            self._factor_on[key] = getattr(self, name).to(device=like.device, dtype=like.dtype)
        return self._factor_on[key]

    @property
    def fourth_moment(self) -> float:
        r"""The fourth moment :math:`\mathbb{E}\xi_j^4` of the covariate law (3 for the Gaussian one; the fourth
        cumulant is :math:`\kappa_4 = \mathbb{E}\xi_j^4 - 3`)."""
        return covariate_laws.moment(self.covariates, 4)

    def noise_floor(self) -> float:
        r"""Risk of the predictor that knows :math:`w`, :math:`\tfrac{s^2}{2}`: the minimum of :math:`R_\infty` and
        the level every reference approaches as :math:`L \to \infty`."""
        return 0.5 * self.noise_var

    def zero_risk(self) -> float:
        r"""Risk of the predictor :math:`\hat y = 0`: :math:`\tfrac{\tau^2}{2} \operatorname{tr} Q + \tfrac{s^2}{2}`."""
        return 0.5 * self.task_var * float(torch.trace(self.query_covariance)) + 0.5 * self.noise_var

    def token_covariance(self, w: Tensor) -> Tensor:
        r""":math:`\Gamma_w` of a prompt token (built on the prompt covariance :math:`P`), shape ``(..., D, D)`` for
        ``w (..., d)``."""
        w = checks.vector("w", checks.as_float_tensor("w", w), self.d)
        sigma = self.prompt_covariance.to(w)
        sigma_w = w @ sigma  # (..., d), Sigma symmetric
        corner = (sigma_w * w).sum(-1, keepdim=True) + self.noise_var
        top = torch.cat([sigma.expand(*w.shape[:-1], self.d, self.d), sigma_w.unsqueeze(-1)], dim=-1)
        bottom = torch.cat([sigma_w, corner], dim=-1).unsqueeze(-2)
        return torch.cat([top, bottom], dim=-2)

    def sample(self, n_prompts: int, L: int, generator: torch.Generator | None = None,
               dtype=torch.float32, device=None) -> Batch:
        """Draw ``n_prompts`` independent prompts of length ``L`` (and their queries).

        Reproducible for a given ``generator`` state; sampling happens on the generator's device
        (or ``device`` when no generator is given). The draws, in order: :math:`w` ``(n, d)`` standard
        normal, then ``(n, L + 1, D)`` standard entries (:meth:`fill_standard_`; position 0 is the query).
        """
        n_prompts = checks.positive_int("n_prompts", n_prompts)
        L = checks.positive_int("L", L)
        if generator is not None:
            device = generator.device
        w = torch.randn(n_prompts, self.d, generator=generator, dtype=dtype, device=device)
        z = self.fill_standard_(torch.empty(n_prompts, L + 1, self.D, dtype=dtype, device=device), generator)
        return self._assemble(w, z, by_coordinates=z.device.type == "cpu")  # as sample_stacked, bit for bit

    def sample_stacked(self, n_prompts: int, L: int, generators: list[torch.Generator],
                       dtype=torch.float32) -> Batch:
        """One batch per generator, stacked: every tensor of the :class:`Batch` has a leading axis
        ``(S,)``, ``S = len(generators)``. Entry ``s`` is what :meth:`sample` draws from ``generators[s]``
        (the same random numbers; on a CPU the labels are summed coordinate by coordinate, equal to
        rounding); the arithmetic after the draws is done once for all."""
        n_prompts = checks.positive_int("n_prompts", n_prompts)
        L = checks.positive_int("L", L)
        if not generators:
            raise ValueError("generators must hold at least one generator")
        device = generators[0].device
        w = torch.empty(len(generators), n_prompts, self.d, dtype=dtype, device=device)
        z = torch.empty(len(generators), n_prompts, L + 1, self.D, dtype=dtype, device=device)
        for s, generator in enumerate(generators):
            w[s].normal_(generator=generator)
            self.fill_standard_(z[s], generator)
        return self._assemble(w, z, by_coordinates=device.type == "cpu")

    def fill_standard_(self, z: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Fill ``z (..., D)`` in place with the standard draws of tokens: entries ``:d`` i.i.d. from the
        covariate law (the :math:`\\xi` of :math:`x = F\\xi`), entry ``d`` standard normal (the label noise).
        For the Gaussian law this is one ``normal_`` of the whole tensor, the draws the course always made."""
        if self.covariates == "gaussian":
            return z.normal_(generator=generator)
        covariate_laws.fill_(self.covariates, z[..., : self.d], generator)
        z[..., self.d].normal_(generator=generator)
        return z

    def draw_inputs(self, n: int, L: int, generator: torch.Generator | None = None,
                    dtype=torch.float64) -> Tensor:
        r"""Prompt inputs alone, :math:`X = \Xi F^\top` ``(n, L, d)`` with :math:`\Xi` of i.i.d. entries of the
        covariate law (one ``randn`` of that shape for the Gaussian law)."""
        n, L = checks.positive_int("n", n), checks.positive_int("L", L)
        device = generator.device if generator is not None else None
        xi = covariate_laws.draw(self.covariates, n, L, self.d, generator=generator, dtype=dtype, device=device)
        if self._identity_factor:  # x = xi exactly: the product with I would only copy them (the Bayes risks of
            return xi              # Chapter 6 draw 10^9 inputs)
        return xi @ self._prompt_factor.to(xi).T

    def stream(self, n_prompts: int, generator: torch.Generator | None = None, dtype=torch.float64) -> "PromptStream":
        r"""``n_prompts`` prompts whose tokens are drawn chunk by chunk (:class:`PromptStream`), so that memory does
        not grow with :math:`L`: the concentration estimators (Chapters 3, 4 and 6) draw their prompts here.

        Draws, in order: :math:`w` ``(n, d)`` standard normal, the query inputs' standard entries ``(n, d)``,
        the query label noise ``(n,)``, then for every chunk of ``k`` tokens ``(n, k, D)`` standard entries
        (:meth:`fill_standard_`). Given the same standard draws, tokens, queries and targets are those of
        :meth:`sample` (to rounding: the same products, computed in another order).
        """
        return PromptStream(self, checks.positive_int("n_prompts", n_prompts), generator, dtype)

    def token_draw(self, w: Tensor, generator: torch.Generator | None = None, dtype=torch.float64):
        r"""``draw(k) -> (n, k, D)``: the next ``k`` tokens :math:`(x_i, w^\top x_i + \varepsilon_i)` of ``n`` prompts
        with tasks ``w (n, d)`` (already scaled), each chunk ``(n, k, D)`` standard draws (:meth:`fill_standard_`)
        turned into tokens with the prompt factor :math:`F`: :math:`x = F\xi`, :math:`y = x^\top w + s\varepsilon`."""
        factor = self._prompt_factor.to(device=w.device, dtype=dtype)
        noise_sd = math.sqrt(self.noise_var)

        def draw(k: int) -> Tensor:
            k = checks.positive_int("k", k)
            z = self.fill_standard_(torch.empty(w.shape[0], k, self.D, dtype=dtype, device=w.device), generator)
            x = z[..., :-1] if self._identity_factor else z[..., :-1] @ factor.T  # x = F xi (F = I: xi itself)
            z[..., -1] = (x @ w.unsqueeze(-1)).squeeze(-1) + noise_sd * z[..., -1]
            if not self._identity_factor:
                z[..., :-1] = x
            return z

        return draw

    def _assemble(self, w: Tensor, z: Tensor, by_coordinates: bool = False) -> Batch:
        """Standard normal draws ``w (..., n, d)`` and ``z (..., n, L + 1, D)`` -> the prompts (in place in ``z``).

        ``by_coordinates``: the labels as a sum over the ``D`` coordinates in a fixed order (on a CPU a
        batched product of width one is several times slower; the labels agree to rounding)."""
        d, dtype, device = self.d, z.dtype, z.device
        key = (device, dtype)
        if key not in self._factor_on:
            self._factor_on[key] = self._prompt_factor.to(*key)
        factor = self._factor_on[key]
        w = w * math.sqrt(self.task_var)
        noise = torch.full((*w.shape[:-1], 1), math.sqrt(self.noise_var), dtype=dtype, device=device)
        # y = x^T w + s eps with x = F xi is a single product of the raw draw with (F^T w, s).
        coefficients = torch.cat([w if self._isotropic else w @ factor, noise], -1)
        if by_coordinates:
            y = z[..., 0] * coefficients[..., None, 0]
            for k in range(1, self.D):
                y.addcmul_(z[..., k], coefficients[..., None, k])
        else:
            y = (z @ coefficients.unsqueeze(-1)).squeeze(-1)  # (..., n, L + 1)
        if not self._isotropic:
            if self.sampler == "published":  # isotropic query: x_q = xi_q
                y[..., 0] = (z[..., 0, :] * torch.cat([w, noise], -1)).sum(-1)
                z[..., 1:, :d] = z[..., 1:, :d] @ factor.T
            else:
                z[..., :d] = z[..., :d] @ factor.T
        z[..., d] = y
        query = z[..., 0, :].clone()
        query[..., d] = 0
        return Batch(z[..., 1:, :], query, y[..., 0].clone(), w)


class PromptStream:
    r"""Prompts of a :class:`RegressionTask` drawn token chunk by token chunk (:meth:`RegressionTask.stream`).

    Attributes ``w (n, d)``, ``query (n, D)`` (:math:`(x_q, 0)`) and ``target (n,)``
    (:math:`w^\top x_q + \varepsilon_q`), drawn at construction; ``tokens(k)`` returns the next ``k``
    tokens :math:`(x_i, w^\top x_i + \varepsilon_i)` of every prompt, ``(n, k, D)``. Prompt inputs use the
    task's prompt factor, queries its query factor (both samplers; a degenerate :math:`\Sigma` included).
    """

    def __init__(self, task: RegressionTask, n: int, generator: torch.Generator | None, dtype):
        self.task, self.n, self.generator, self.dtype = task, n, generator, dtype
        self.device = generator.device if generator is not None else None
        like = dict(generator=generator, dtype=dtype, device=self.device)
        self.w = torch.randn(n, task.d, **like) * math.sqrt(task.task_var)
        xi_q = covariate_laws.draw(task.covariates, n, task.d, **like)
        x_q = xi_q @ task.query_factor.to(xi_q).T
        self.target = (x_q * self.w).sum(-1) + torch.randn(n, **like) * math.sqrt(task.noise_var)
        self.query = torch.cat([x_q, torch.zeros_like(x_q[:, :1])], dim=-1)
        # tokens(k): the next k tokens of every prompt, (n, k, D)
        self.tokens = task.token_draw(self.w, generator, dtype)


def covariance_of(kind: str, d: int = 5, rho: float = 0.5, eigenvalues=None) -> Tensor:
    r"""An input covariance by name: ``"isotropic"`` (:math:`I_d`), ``"kms"`` (:func:`kms_covariance` with ``rho``)
    or ``"eigenvalues"`` (the diagonal matrix of ``eigenvalues``, ``d`` numbers at least 0, zeros giving a singular
    :math:`\Sigma` of Appendix F.3; by the rotation invariance of the task only the spectrum matters for the
    risks). ``(d, d)`` float64."""
    checks.one_of("kind", kind, ("isotropic", "kms", "eigenvalues"))
    d = checks.positive_int("d", d)
    if kind == "isotropic":
        return torch.eye(d, dtype=torch.float64)
    if kind == "kms":
        return kms_covariance(d, checks.in_open_interval("rho", rho, -1.0, 1.0))
    try:
        values = torch.tensor([checks.number("eigenvalues", v) for v in eigenvalues], dtype=torch.float64)
    except TypeError:
        raise ValueError(f"eigenvalues must be a sequence of {d} numbers, got {eigenvalues!r}") from None
    if values.shape != (d,):
        raise ValueError(f"eigenvalues: give {d} eigenvalues (d = {d}), got {values.numel()}")
    if bool((values < 0).any()):
        raise ValueError(f"eigenvalues: a covariance Σ has no negative eigenvalue; change {float(values.min()):g} "
                         "to 0 or more (0 gives a singular Σ, Appendix F.3)")
    return torch.diag(values)
