r"""In-context linear regression (paper, Sections 4-5): the task, its risks and the reference solutions.

For each prompt, :math:`w \sim N(0, \tau^2 I_d)`, inputs :math:`x_i \sim N(0, \Sigma)` i.i.d. and labels
:math:`y_i = w^\top x_i + \varepsilon_i`, :math:`\varepsilon_i \sim N(0, s^2)`. Tokens are
:math:`z_i = (x_i, y_i) \in \mathbb{R}^{D}`, :math:`D = d + 1`; the query token is :math:`(x_q, 0)` and the
target :math:`y_q = w^\top x_q + \varepsilon_q`. Given :math:`w`, a token is :math:`N(0, \Gamma_w)` with

.. math:: \Gamma_w = \begin{pmatrix} \Sigma & \Sigma w \\ w^\top \Sigma & w^\top \Sigma w + s^2 \end{pmatrix}.

Every risk here is the theory's :math:`R = \tfrac12 \mathbb{E}[(\hat y - y_q)^2]` (half the mean squared
error), and includes the label-noise floor :math:`s^2/2`.

Two samplers of the inputs (``RegressionTask(..., sampler=...)``), with :math:`C` the lower Cholesky
factor of :math:`\Sigma` (:math:`CC^\top = \Sigma`) and :math:`\xi \sim N(0, I_d)`:

- ``"paper"`` (default, the paper's model): prompt and query inputs :math:`x = C\xi \sim N(0, \Sigma)`.
- ``"published"`` (what the paper's published code draws): prompt inputs :math:`x_i = C C \xi_i`, of
  covariance :math:`P = C \Sigma C^\top`, and query inputs :math:`x_q = \xi_q \sim N(0, I_d)`.

Write :math:`P` for the prompt covariance and :math:`Q` for the query covariance (:math:`P = Q = \Sigma`
for ``"paper"``). The references below use :math:`P` wherever the prompt enters and :math:`Q` wherever the
query does; with :math:`\Sigma = I` both samplers coincide.

**Covariate laws** (``RegressionTask(..., law=...)``, Chapter 6). The entries of :math:`\xi` are i.i.d.
standardised draws of a law :math:`\lambda` (:mod:`~softmax_as_linear.theory.covariates`): Gaussian (the
paper, and the default), uniform on :math:`[-\sqrt3, \sqrt3]` or Rademacher, so that :math:`x = F\xi` has the
same covariance whatever the law. The Gaussian law draws exactly the random numbers it always drew. The
label noise and :math:`w` stay Gaussian. Second moments, hence :func:`infinite_prompt_risk` of linear
attention, do not depend on the law; fourth moments do, through the fourth cumulant :math:`\kappa_4 = \mathbb{E}\xi^4 - 3`, and
:func:`linear_attention_risk` and :func:`optimal_linear_risk` carry them. The infinite-prompt softmax
model of a non-Gaussian law is in :mod:`~softmax_as_linear.theory.limit_model`.

**One sampler.** Every prompt of the library is drawn here: :meth:`RegressionTask.sample` and
:meth:`RegressionTask.sample_stacked` (training and evaluation), :meth:`RegressionTask.stream` (prompts of
any length, token by token chunks: the concentration estimators) and :meth:`RegressionTask.draw_inputs`
(the inputs alone: the Bayes risk). They turn the same standard draws into the same prompts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..core import checks
from ..registry import SAMPLERS
from . import covariates


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


def _degenerate(covariance: Tensor) -> bool:
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
        law: law of the standardised input entries :math:`\xi_j` (:data:`~softmax_as_linear.registry.COVARIATE_LAWS`):
            ``"gaussian"`` (default), ``"uniform"`` or ``"rademacher"``; inputs are :math:`F\xi` with the factor
            :math:`F` of the sampler, so their covariance does not depend on the law.

    Attributes ``prompt_covariance`` (:math:`P`) and ``query_covariance`` (:math:`Q`), ``(d, d)`` float64;
    ``prompt_factor`` and ``query_factor`` (:math:`F` with :math:`F F^\top = P`, resp. :math:`Q`).
    """

    def __init__(self, d: int, covariance=None, task_var: float | None = None, noise_var: float = 0.1,
                 sampler: str = "paper", law: str = "gaussian"):
        self.d = checks.positive_int("d", d)
        if covariance is None:
            covariance = torch.eye(self.d, dtype=torch.float64)
        covariance = checks.as_float_tensor("covariance", covariance).to(torch.float64)
        # positive semi-definite: a degenerate Sigma is allowed (Appendix F.3), sampled through _input_factor
        self.covariance = checks.covariance("covariance", covariance, self.d, definite=False)
        self.task_var = checks.positive_float("task_var", 1.0 / self.d if task_var is None else task_var)
        self.noise_var = checks.positive_float("noise_var", noise_var, allow_zero=True)
        self.sampler = checks.one_of("sampler", sampler, SAMPLERS)
        self.law = covariates.check_law(law)
        self._cholesky = _input_factor(self.covariance)
        if sampler == "published" and _degenerate(self.covariance):
            raise ValueError("sampler 'published' needs a positive definite covariance (it multiplies by the Cholesky factor)")
        self._isotropic = torch.equal(self.covariance, torch.eye(self.d, dtype=torch.float64))
        # Factor F of the prompt inputs (x = F xi): C, or C C for the published sampler.
        self._prompt_factor = self._cholesky if sampler == "paper" else self._cholesky @ self._cholesky
        self.prompt_covariance = self._prompt_factor @ self._prompt_factor.T
        self.query_covariance = self.covariance if sampler == "paper" else torch.eye(self.d, dtype=torch.float64)
        self.prompt_factor = self._prompt_factor
        self.query_factor = self._cholesky if sampler == "paper" else torch.eye(self.d, dtype=torch.float64)
        self._factor_on = {}  # (device, dtype) -> copy, so that sampling copies nothing to the device

    @property
    def is_isotropic(self) -> bool:
        r"""Whether :math:`\Sigma = I_d` exactly (Chapter 4's closed forms and the reductions that rely on them apply)."""
        return self._isotropic

    @classmethod
    def isotropic(cls, d: int = 5, task_var: float | None = None, noise_var: float = 0.1,
                  sampler: str = "paper", law: str = "gaussian") -> "RegressionTask":
        """:math:`\\Sigma = I_d` (both samplers draw the same prompts)."""
        return cls(d, None, task_var, noise_var, sampler, law)

    @classmethod
    def kms(cls, d: int = 5, rho: float = 0.5, task_var: float | None = None, noise_var: float = 0.1,
            sampler: str = "paper", law: str = "gaussian") -> "RegressionTask":
        """Anisotropic inputs with the Kac-Murdock-Szego covariance :math:`\\rho^{|i-j|}`."""
        return cls(d, kms_covariance(d, rho), task_var, noise_var, sampler, law)

    @property
    def D(self) -> int:
        """Token dimension ``d + 1``."""
        return self.d + 1

    def __repr__(self) -> str:
        eig = torch.linalg.eigvalsh(self.covariance)
        return (f"RegressionTask(d={self.d}, Sigma eigenvalues in [{float(eig[0]):.3g}, {float(eig[-1]):.3g}], "
                f"tau^2={self.task_var:.3g}, s^2={self.noise_var:.3g}, sampler={self.sampler!r}"
                + ("" if self.law == "gaussian" else f", law={self.law!r}") + ")")

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
        r"""The fourth moment :math:`\mathbb{E}\xi_j^4` of the covariate law (3 for the Gaussian one; the fourth cumulant is :math:`\kappa_4 = \mathbb{E}\xi_j^4 - 3`)."""
        return covariates.moment(self.law, 4)

    def noise_floor(self) -> float:
        r"""Risk of the predictor that knows :math:`w`, :math:`\tfrac{s^2}{2}`: the minimum of :math:`R_\infty` and
        the level every reference approaches as :math:`L \to \infty`."""
        return 0.5 * self.noise_var

    def zero_risk(self) -> float:
        r"""Risk of the predictor :math:`\hat y = 0`: :math:`\tfrac{\tau^2}{2} \operatorname{tr} Q + \tfrac{s^2}{2}`."""
        return 0.5 * self.task_var * float(torch.trace(self.query_covariance)) + 0.5 * self.noise_var

    def token_covariance(self, w: Tensor) -> Tensor:
        r""":math:`\Gamma_w` of a prompt token (built on the prompt covariance :math:`P`), shape ``(..., D, D)`` for ``w (..., d)``."""
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
        if self.law == "gaussian":
            return z.normal_(generator=generator)
        covariates.fill_(self.law, z[..., : self.d], generator)
        z[..., self.d].normal_(generator=generator)
        return z

    def draw_inputs(self, n: int, L: int, generator: torch.Generator | None = None,
                    dtype=torch.float64) -> Tensor:
        r"""Prompt inputs alone, :math:`X = \Xi F^\top` ``(n, L, d)`` with :math:`\Xi` of i.i.d. entries of the
        covariate law (one ``randn`` of that shape for the Gaussian law)."""
        n, L = checks.positive_int("n", n), checks.positive_int("L", L)
        device = generator.device if generator is not None else None
        xi = covariates.draw(self.law, n, L, self.d, generator=generator, dtype=dtype, device=device)
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
            x = z[..., :-1] @ factor.T
            z[..., -1] = (x @ w.unsqueeze(-1)).squeeze(-1) + noise_sd * z[..., -1]
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
        xi_q = covariates.draw(task.law, n, task.d, **like)
        x_q = xi_q @ task.query_factor.to(xi_q).T
        self.target = (x_q * self.w).sum(-1) + torch.randn(n, **like) * math.sqrt(task.noise_var)
        self.query = torch.cat([x_q, torch.zeros_like(x_q[:, :1])], dim=-1)
        # tokens(k): the next k tokens of every prompt, (n, k, D)
        self.tokens = task.token_draw(self.w, generator, dtype)


def _block(U: Tensor, V: Tensor, d: int):
    """Split the (U, V) parameters into the pieces that act on a regression query."""
    A_x, a_y = U[..., :d, :d], U[..., d, :d]
    v_x, v_y = V[..., d, :d], V[..., d, d]
    return A_x, a_y, v_x, v_y


def infinite_prompt_risk(U, V, task: RegressionTask, activation: str = "softmax") -> Tensor:
    r"""Closed form of :math:`R_\infty(U, V) = \tfrac12 \mathbb{E}[(v^\top \Gamma_w U z_q - y_q)^2]`.

    Normalised linear attention has this infinite-prompt risk for every covariate law (its limit
    :math:`v^\top \Gamma_w U z_q` involves second moments only); softmax attention shares it for Gaussian
    covariates (Lemma 2.1 with centred tokens). For softmax attention with a non-Gaussian law there is no
    polynomial closed form: ``ValueError``, and
    :func:`~softmax_as_linear.theory.limit_model.infinite_prompt_risk_estimate` estimates it. With
    :math:`A = U_{:, :d} = [A_x; a_y^\top]`, :math:`v = V_{D, :} = (v_x, v_y)`, prompt covariance :math:`P`
    and query covariance :math:`Q` (both :math:`\Sigma` for the paper's sampler),
    :math:`M = v_y A_x^\top P + a_y (P v_x)^\top` and :math:`c_0 = A_x^\top P v_x + v_y s^2 a_y`, the
    prediction is :math:`b_w^\top x_q` with :math:`b_w = A^\top \Gamma_w v = c_0 + M w + v_y (w^\top P w) a_y` and

    .. math::
        R_\infty = \tfrac12\big[\tau^2 \operatorname{tr}((I - M)^\top Q (I - M)) + c_0^\top Q c_0
        + 2 v_y \tau^2 \operatorname{tr}P\, c_0^\top Q a_y
        + v_y^2 \tau^4 ((\operatorname{tr}P)^2 + 2 \operatorname{tr}P^2)\, a_y^\top Q a_y\big] + \tfrac{s^2}{2}

    U, V ``(..., D, D)`` -> ``(...)``. Differentiable in U and V.
    """
    U = checks.square("U", checks.as_float_tensor("U", U), task.D)
    V = checks.square("V", checks.as_float_tensor("V", V, like=U), task.D)
    checks.one_of("activation", activation, ("softmax", "linear"))
    if activation == "softmax" and task.law != "gaussian":
        raise ValueError(f"task: softmax attention has no closed-form infinite-prompt risk for {task.law} covariates; "
                         "use limit_model.infinite_prompt_risk_estimate, or activation='linear'")
    return infinite_prompt_risk_unchecked(U, V, task)


def _prediction_terms(U: Tensor, V: Tensor, task: RegressionTask) -> dict:
    """Pieces of b_w = c0 + M w + v_y (w^T P w) a_y shared by the risk formulas."""
    d, s2 = task.d, task.noise_var
    P = task.prompt_covariance.to(U)
    A_x, a_y, v_x, v_y = _block(U, V, d)
    P_vx = v_x @ P
    M = v_y[..., None, None] * (A_x.transpose(-1, -2) @ P) + a_y.unsqueeze(-1) * P_vx.unsqueeze(-2)
    c0 = (A_x.transpose(-1, -2) @ P_vx.unsqueeze(-1)).squeeze(-1) + (v_y * s2)[..., None] * a_y
    return dict(P=P, Q=task.query_covariance.to(U), A_x=A_x, a_y=a_y, v_x=v_x, v_y=v_y, P_vx=P_vx, M=M, c0=c0,
                tr_P=torch.trace(P), tr_P2=torch.trace(P @ P))


def _mean_square(t: dict, E: Tensor, tau2: float) -> Tensor:
    r""":math:`\mathbb{E}_w[(c_0 + E w + v_y (w^\top P w) a_y)^\top Q (\cdot)]` for ``w ~ N(0, tau2 I)``."""
    Q, c0, a_y, v_y = t["Q"], t["c0"], t["a_y"], t["v_y"]
    quad = lambda a, b: ((a @ Q) * b).sum(-1)  # noqa: E731  a^T Q b
    return (tau2 * (E * (Q @ E)).sum((-1, -2)) + quad(c0, c0)
            + 2 * v_y * tau2 * t["tr_P"] * quad(c0, a_y)
            + v_y**2 * tau2**2 * (t["tr_P"] ** 2 + 2 * t["tr_P2"]) * quad(a_y, a_y))


def infinite_prompt_risk_unchecked(U: Tensor, V: Tensor, task: RegressionTask) -> Tensor:
    """:func:`infinite_prompt_risk` without argument checks (for gradient-flow loops)."""
    t = _prediction_terms(U, V, task)
    E = torch.eye(task.d, dtype=U.dtype, device=U.device) - t["M"]  # b_w - w = c0 - E w + ...
    return 0.5 * _mean_square(t, E, task.task_var) + 0.5 * task.noise_var


def linear_attention_risk(U, V, L: int, task: RegressionTask) -> Tensor:
    r"""Exact risk :math:`R_L(U, V)` of normalised linear attention at prompt length ``L``.

    The prediction is :math:`\hat y = v^\top M_L U z_q`, :math:`M_L = \tfrac1L \sum_i z_i z_i^\top`. Given
    :math:`w` and :math:`x_q`, :math:`\hat y` is a mean of ``L`` i.i.d. terms :math:`(v^\top z_i)(z_i^\top g)`,
    :math:`g = A x_q`, with mean :math:`v^\top \Gamma_w g` and, by Isserlis' theorem, variance
    :math:`(v^\top \Gamma_w g)^2 + (v^\top \Gamma_w v)(g^\top \Gamma_w g)`. Averaging over :math:`x_q \sim N(0, Q)`
    (:math:`B = A Q A^\top`) and then over :math:`w \sim N(0, \tau^2 I)` in closed form:

    .. math::
        R_L = R_\infty + \frac{1}{2L}\Big(\mathbb{E}_w[b_w^\top Q b_w]
              + \mathbb{E}_w[(v^\top \Gamma_w v)\operatorname{tr}(\Gamma_w B)]\Big),

    where :math:`\mathbb{E}_w[b_w^\top Q b_w]` is the bracket of :func:`infinite_prompt_risk` with
    :math:`I - M` replaced by :math:`M`, and, writing :math:`v^\top \Gamma_w v = \alpha_0 + 2 v_y (P v_x)^\top w + v_y^2 w^\top P w`
    and :math:`\operatorname{tr}(\Gamma_w B) = \beta_0 + 2 (P b_{xy})^\top w + b_{yy} w^\top P w`
    (:math:`\alpha_0 = v_x^\top P v_x + v_y^2 s^2`, :math:`\beta_0 = \operatorname{tr}(P B_{xx}) + s^2 b_{yy}`),

    .. math::
        \mathbb{E}_w[(v^\top \Gamma_w v)\operatorname{tr}(\Gamma_w B)] = \alpha_0\beta_0
        + \tau^2 \operatorname{tr}P\,(\alpha_0 b_{yy} + v_y^2 \beta_0) + 4 v_y \tau^2 (P v_x)^\top P b_{xy}
        + v_y^2 b_{yy} \tau^4 ((\operatorname{tr}P)^2 + 2 \operatorname{tr}P^2).

    For a non-Gaussian covariate law, the fourth moments of the inputs add :func:`_fourth_moment_correction`.
    Its minimum over (U, V) is :func:`optimal_linear_risk`. Valid for both samplers (:math:`P`, :math:`Q`
    as in the module docstring). U, V ``(..., D, D)`` -> ``(...)``, differentiable; ``L`` may also be a
    tensor broadcasting against the batch shape.
    """
    U = checks.square("U", checks.as_float_tensor("U", U), task.D)
    V = checks.square("V", checks.as_float_tensor("V", V, like=U), task.D)
    if not torch.is_tensor(L):
        L = checks.positive_int("L", L)
    elif not bool((L > 0).all()):
        raise ValueError("L must be positive")
    return linear_attention_risk_unchecked(U, V, L, task)


def linear_attention_risk_unchecked(U: Tensor, V: Tensor, L, task: RegressionTask) -> Tensor:
    """:func:`linear_attention_risk` without argument checks."""
    d, tau2, s2 = task.d, task.task_var, task.noise_var
    t = _prediction_terms(U, V, task)
    P, Q, A_x, a_y, v_x, v_y = t["P"], t["Q"], t["A_x"], t["a_y"], t["v_x"], t["v_y"]
    eye = torch.eye(d, dtype=U.dtype, device=U.device)
    infinite = 0.5 * _mean_square(t, eye - t["M"], tau2) + 0.5 * s2
    mean_b2 = _mean_square(t, t["M"], tau2)
    # B = A Q A^T with A = [A_x; a_y^T]: blocks B_xx = A_x Q A_x^T, b_xy = A_x Q a_y, b_yy = a_y^T Q a_y.
    A_xQ = A_x @ Q
    B_xx = A_xQ @ A_x.transpose(-1, -2)
    b_xy = (A_xQ @ a_y.unsqueeze(-1)).squeeze(-1)
    b_yy = ((a_y @ Q) * a_y).sum(-1)
    alpha0 = (t["P_vx"] * v_x).sum(-1) + v_y**2 * s2
    beta0 = (P * B_xx).sum((-1, -2)) + s2 * b_yy
    tr_P, tr_P2 = t["tr_P"], t["tr_P2"]
    mean_ab = (alpha0 * beta0 + tau2 * tr_P * (alpha0 * b_yy + v_y**2 * beta0)
               + 4 * v_y * tau2 * (t["P_vx"] * (b_xy @ P)).sum(-1)
               + v_y**2 * b_yy * tau2**2 * (tr_P**2 + 2 * tr_P2))
    risk = infinite + (mean_b2 + mean_ab) / (2 * L)
    if task.law != "gaussian":
        risk = risk + _fourth_moment_correction(t, task) / (2 * L)
    return risk


def _fourth_moment_correction(t: dict, task: RegressionTask) -> Tensor:
    r"""What a non-Gaussian covariate law adds to :math:`2L\,(R_L - R_\infty)` of linear attention.

    Given :math:`w` and :math:`x_q`, the variance term holds :math:`\mathbb{E}[(p^\top x)^2 (q^\top x)^2]` with
    :math:`p = v_x + v_y w`, :math:`q = (A_x + w a_y^\top) x_q`; for :math:`x = F\xi` it exceeds its Gaussian value by
    :math:`\kappa_4\sum_j (c_j^\top p)^2 (c_j^\top q)^2` (:math:`c_j` the columns of :math:`F`). The average
    over :math:`x_q` and :math:`w` depends on :math:`w` through :math:`\omega_j = c_j^\top w \sim N(0, \sigma_j^2)`,
    :math:`\sigma_j^2 = \tau^2 \|c_j\|^2`, only:

    .. math:: \kappa_4 \sum_j \big[\alpha_j^2 g_{0j} + \sigma_j^2 (\alpha_j^2 g_2 + 4 \alpha_j v_y g_{1j}
        + v_y^2 g_{0j}) + 3 v_y^2 g_2 \sigma_j^4\big],

    :math:`\alpha_j = c_j^\top v_x`, :math:`r_j = A_x^\top c_j`, :math:`g_{0j} = r_j^\top Q r_j`,
    :math:`g_{1j} = r_j^\top Q a_y`, :math:`g_2 = a_y^\top Q a_y`.
    """
    F = task.prompt_factor.to(t["Q"])
    Q, A_x, a_y, v_x, v_y = t["Q"], t["A_x"], t["a_y"], t["v_x"], t["v_y"]
    alpha = v_x @ F  # (..., d): c_j^T v_x
    sigma2 = task.task_var * (F**2).sum(0)  # (d,)
    R = A_x.transpose(-1, -2) @ F  # (..., d, d): column j is r_j
    QR = Q @ R
    g0 = (R * QR).sum(-2)  # (..., d)
    g1 = (QR * a_y.unsqueeze(-1)).sum(-2)
    g2 = ((a_y @ Q) * a_y).sum(-1, keepdim=True)
    v = v_y.unsqueeze(-1)
    terms = (alpha**2 * g0 + sigma2 * (alpha**2 * g2 + 4 * alpha * v * g1 + v**2 * g0) + 3 * v**2 * g2 * sigma2**2)
    return (task.fourth_moment - 3) * terms.sum(-1)


def finite_prompt_covariance(L: int, task: RegressionTask) -> Tensor:
    r""":math:`\Gamma_L = (1 + \tfrac1L) P + \tfrac{\operatorname{tr}P + s^2/\tau^2}{L} I_d`, shape ``(d, d)``
    (:math:`P` the prompt covariance, :math:`\Sigma` for the paper's sampler)."""
    L = checks.positive_int("L", L)
    sigma = task.prompt_covariance
    eye = torch.eye(task.d, dtype=sigma.dtype)
    return (1 + 1 / L) * sigma + (torch.trace(sigma) + task.noise_var / task.task_var) / L * eye


def optimal_linear_risk(L: int, task: RegressionTask) -> float:
    r"""Smallest risk of normalised linear attention at prompt length ``L`` (over all U, V).

    The optimum predicts :math:`\hat y = x_q^\top \Gamma_L^{-1} \tfrac1L \sum_i y_i x_i`, with risk
    :math:`\tfrac{\tau^2}{2}\operatorname{tr}(Q (I - P \Gamma_L^{-1})) + \tfrac{s^2}{2}`, that is
    :math:`\tfrac{\tau^2}{2}[\operatorname{tr}\Sigma - \operatorname{tr}(\Sigma \Gamma_L^{-1} \Sigma)] + \tfrac{s^2}{2}`
    for the paper's sampler (:math:`P = Q = \Sigma`). Terms even in :math:`w` cannot help, so the optimal
    matrix :math:`\Gamma_L^{-1}` is the same whatever the query covariance :math:`Q`.

    For a covariate law with fourth cumulant :math:`\kappa_4 = \mathbb{E}\xi^4 - 3` (inputs :math:`F\xi`, :math:`G = F^\top F`), the
    statistic :math:`h = \frac1L \sum_i y_i x_i` has :math:`\mathbb{E}[hh^\top] = \tau^2 F N F^\top` with

    .. math:: N = (1 + \tfrac1L) G + \tfrac{\operatorname{tr}P + s^2/\tau^2}{L} I_d + \tfrac{\kappa_4}{L}\operatorname{diag}(G),

    the optimum predicts :math:`x_q^\top P (F N F^\top)^{-1} h` and its risk is
    :math:`\tfrac{\tau^2}{2}[\operatorname{tr}Q - \operatorname{tr}(Q F N^{-1} F^\top)] + \tfrac{s^2}{2}` (for
    :math:`\kappa_4 = 0`, the formula above by the push-through identity).
    """
    if task.law != "gaussian":
        L = checks.positive_int("L", L)
        F, Q = task.prompt_factor, task.query_covariance
        G = F.T @ F
        eye = torch.eye(task.d, dtype=G.dtype)
        N = ((1 + 1 / L) * G + (torch.trace(G) + task.noise_var / task.task_var) / L * eye
             + (task.fourth_moment - 3) / L * torch.diag(torch.diagonal(G)))
        excess = torch.trace(Q) - torch.trace(Q @ F @ torch.linalg.solve(N, F.T))
        return float(0.5 * task.task_var * excess + 0.5 * task.noise_var)
    gamma_L = finite_prompt_covariance(L, task)
    P, Q = task.prompt_covariance, task.query_covariance
    excess = torch.trace(Q) - torch.trace(Q @ P @ torch.linalg.inv(gamma_L))
    return float(0.5 * task.task_var * excess + 0.5 * task.noise_var)


def bayes_risk(L: int, task: RegressionTask, n_samples: int = 20_000, generator: torch.Generator | None = None,
               seed: int = 0) -> tuple[float, float]:
    r"""Risk of the Bayes-optimal (posterior-mean, i.e. ridge) predictor at prompt length ``L``, by Monte Carlo.

    .. math:: R_{\mathrm{Bayes}}(L) = \tfrac12 \mathbb{E}_X\big[\operatorname{tr}(Q\, C_X)\big] + \tfrac{s^2}{2},
        \qquad C_X = \big(X^\top X / s^2 + I / \tau^2\big)^{-1}

    (:math:`C_X` is the posterior covariance of :math:`w` given the prompt, whose rows are drawn from
    :math:`N(0, P)`; with :math:`s = 0` it is :math:`\tau^2 (I - P_X)`, so the risk is 0 once :math:`L \ge d`.)
    The predictor :math:`\hat y = \hat w^\top x_q` with the posterior mean :math:`\hat w` minimises
    :math:`\mathbb{E}[(\hat w - w)^\top Q (\hat w - w)]` for every :math:`Q`, so it is the Bayes predictor for
    both samplers: under ``"published"`` it is the ridge estimate from the (:math:`C\Sigma C^\top`) prompt,
    scored on isotropic queries (:math:`Q = I`). The posterior of :math:`w` is Gaussian whatever the law of
    the inputs (Gaussian prior, Gaussian noise), so ridge regression stays Bayes-optimal for every covariate
    law; only the law of :math:`X` (:meth:`RegressionTask.draw_inputs`) changes the risk.

    Returns ``(estimate, standard_error)`` over ``n_samples`` draws of the inputs :math:`X` (``L x d``).
    """
    L = checks.positive_int("L", L)
    n_samples = checks.int_at_least("n_samples", n_samples, 2)
    if generator is None:
        generator = torch.Generator().manual_seed(seed)
    d = task.d
    sigma = task.query_covariance
    totals = []
    for start in range(0, n_samples, 4096):
        n = min(4096, n_samples - start)
        X = task.draw_inputs(n, L, generator)
        gram = X.transpose(-1, -2) @ X
        eye = torch.eye(d, dtype=torch.float64)
        if task.noise_var > 0:
            posterior = task.task_var * torch.linalg.inv(eye + (task.task_var / task.noise_var) * gram)
        else:
            posterior = task.task_var * (eye - torch.linalg.pinv(gram, hermitian=True) @ gram)
        totals.append(0.5 * (posterior * sigma).sum((-1, -2)))
    values = torch.cat(totals) + 0.5 * task.noise_var
    return float(values.mean()), float(values.std() / math.sqrt(n_samples))


def limit_parameters(task: RegressionTask, L: int | None = None) -> tuple[Tensor, Tensor]:
    r"""Limit of the gradient flow from the Assumption 5.1 initialisation (Remark 5.3, Zhang et al. 2024).

    .. math:: U^* = c^{-1} \begin{pmatrix} G^{-1} & 0 \\ 0 & 0 \end{pmatrix}, \quad V^* = c\, e_D e_D^\top,
        \quad c = \operatorname{tr}(G^{-2})^{1/4},

    with :math:`G = P` (the prompt covariance, :math:`\Sigma` for the paper's sampler) for infinite prompts
    (the limit of softmax and of normalised linear attention alike) and :math:`G = \Gamma_L` at prompt
    length ``L``. At finite ``L`` this is the limit of *normalised linear attention* trained on
    :math:`R_L` (Zhang et al. 2024, Theorem 4.1, there without label noise; the noise enters
    :math:`\Gamma_L` through :math:`s^2/\tau^2`), which attains :func:`optimal_linear_risk`; it is not the limit
    of softmax attention at finite ``L``, which has no closed form. For a degenerate :math:`\Sigma` use
    :func:`degenerate_limit_parameters` (Appendix F.3).

    For a non-Gaussian covariate law the infinite-prompt limit (``L=None``) is that of normalised linear
    attention only (the flow of softmax attention goes elsewhere, or nowhere: Chapter 6,
    :func:`~softmax_as_linear.theory.flow.infinite_prompt_flow`), and ``L`` must be None.
    Returns ``(U*, V*)``, each ``(D, D)`` in float64.
    """
    if L is not None and task.law != "gaussian":
        raise ValueError(f"L: the finite-L limit is derived for Gaussian covariates only, got law {task.law!r}")
    if L is None and _degenerate(task.prompt_covariance):
        raise ValueError("task: the covariance is degenerate; its limit depends on the initialisation "
                         "(Appendix F.3): use degenerate_limit_parameters(task, alpha)")
    G = task.prompt_covariance if L is None else finite_prompt_covariance(L, task)
    G_inv = torch.linalg.inv(G)
    c = torch.trace(G_inv @ G_inv) ** 0.25
    D = task.D
    U = torch.zeros(D, D, dtype=torch.float64)
    U[: task.d, : task.d] = G_inv / c
    V = torch.zeros(D, D, dtype=torch.float64)
    V[task.d, task.d] = c
    return U, V


def degenerate_limit_parameters(task: RegressionTask, alpha: float, theta=None) -> tuple[Tensor, Tensor]:
    r"""Limit of the infinite-prompt gradient flow from Assumption 5.1 for a possibly degenerate :math:`\Sigma`
    (Appendix F.3, extending Zhang et al. 2024 with the Moore-Penrose inverse :math:`\Sigma^+`).

    The gradient of :math:`R_\infty` in the block :math:`A_x` of :math:`U` has the form :math:`\Sigma(\cdot)\Sigma`,
    so with :math:`\Pi` the orthogonal projection on the range of :math:`\Sigma` only :math:`\Pi A_x \Pi` moves;
    the rest, :math:`N = \alpha(\Theta\Theta^\top - \Pi\Theta\Theta^\top\Pi)`, keeps its initial value. The
    flow converges to

    .. math:: A_x^* = \Sigma^+ / c + N, \qquad v_y^* = c, \qquad
        c^2 = \tfrac12\big(\|N\|_F^2 + \sqrt{\|N\|_F^4 + 4\|\Sigma^+\|_F^2}\big),

    where :math:`c` keeps the balance :math:`\|A_x\|_F^2 = v_y^2` of the start; the predictor
    :math:`v_y x_q^\top A_x^{*\top}\Sigma w = x_q^\top \Pi w = w^\top x_q` (inputs lie in the range of
    :math:`\Sigma`) is Bayes optimal. For an invertible :math:`\Sigma`, :math:`N = 0` and this is
    :func:`limit_parameters` (Remark 5.3). ``alpha``, ``theta``: as in :func:`block_init`.
    Returns ``(U*, V*)``, each ``(D, D)`` in float64.
    """
    U0, _ = block_init(task, alpha, theta)
    d = task.d
    sigma = task.prompt_covariance
    pinv = torch.linalg.pinv(sigma, hermitian=True)
    project = sigma @ pinv
    start = U0[:d, :d]
    N = start - project @ start @ project
    n2, p2 = float((N**2).sum()), float((pinv**2).sum())
    c = math.sqrt(0.5 * (n2 + math.sqrt(n2**2 + 4 * p2)))
    U = torch.zeros(task.D, task.D, dtype=torch.float64)
    U[:d, :d] = pinv / c + N
    V = torch.zeros(task.D, task.D, dtype=torch.float64)
    V[d, d] = c
    return U, V


def block_init(task: RegressionTask, alpha: float, theta=None) -> tuple[Tensor, Tensor]:
    r"""Initialisation of Assumption 5.1: :math:`U(0) = \alpha \begin{pmatrix}\Theta\Theta^\top & 0\\ 0 & 0\end{pmatrix}`,
    :math:`V(0) = \alpha\, e_D e_D^\top`.

    ``theta`` is a ``(d, k)`` matrix with the two conditions of Assumption 5.1,
    :math:`\|\Theta\Theta^\top\|_F = 1` and :math:`\Theta\Theta^\top\Sigma \neq 0` (automatic for an invertible
    :math:`\Sigma`); the default has :math:`\Theta\Theta^\top = I_d/\sqrt d`. Returns ``(U0, V0)``, each
    ``(D, D)`` in float64. The scale condition under which the flow provably converges is
    :func:`init_scale_bound`.
    """
    alpha = checks.positive_float("alpha", alpha)
    d = task.d
    if theta is None:
        gram = torch.eye(d, dtype=torch.float64) / math.sqrt(d)
    else:
        theta = checks.finite("theta", checks.as_float_tensor("theta", theta).to(torch.float64))
        if theta.ndim != 2 or theta.shape[0] != d:
            raise ValueError(f"theta must have shape ({d}, k), got {tuple(theta.shape)}")
        gram = theta @ theta.T
        norm = float(torch.linalg.matrix_norm(gram))
        if abs(norm - 1.0) > 1e-6:
            raise ValueError(f"theta must satisfy ||theta theta^T||_F = 1, got {norm:.6g}")
        if float(torch.linalg.matrix_norm(gram @ task.covariance)) < 1e-12:
            raise ValueError("theta must satisfy theta theta^T Sigma != 0 (Assumption 5.1): this start is invisible "
                             "to every input")
    U = torch.zeros(task.D, task.D, dtype=torch.float64)
    U[:d, :d] = alpha * gram
    V = torch.zeros(task.D, task.D, dtype=torch.float64)
    V[d, d] = alpha
    return U, V


def init_scale_bound(task: RegressionTask, L: int | None = None) -> float:
    r"""Largest block-initialisation scale covered by Zhang, Frei & Bartlett (2024, Theorem 4.1), which
    Theorem 5.2 inherits: gradient flow from :func:`block_init` converges to :func:`limit_parameters` when

    .. math:: \alpha^2 \sqrt d\, \|\Gamma\|_{\mathrm{op}} < 2, \qquad\text{i.e.}\qquad
        \alpha < \frac{\sqrt 2}{d^{1/4}\, \|\Gamma\|_{\mathrm{op}}^{1/2}},

    with :math:`\Gamma = (1 + \tfrac1L)\Sigma + \tfrac{\operatorname{tr}\Sigma}{L} I_d` for prompts of length ``L``
    (their setting has no label noise) and its infinite-prompt limit :math:`\Gamma = \Sigma` for ``L=None``.
    The power :math:`\tfrac12` of :math:`\|\Gamma\|` is forced by a symmetry of the flow: inputs scaled by
    :math:`\sqrt c` map the flow from :math:`(c\Sigma, \alpha)` onto the flow from :math:`(\Sigma, \alpha\sqrt c)`,
    sped up and shrunk. A sufficient condition, not a necessary one. Uses :math:`\Sigma` (the paper's model).
    """
    sigma = task.covariance
    if L is not None:
        L = checks.positive_int("L", L)
        sigma = (1 + 1 / L) * sigma + float(torch.trace(sigma)) / L * torch.eye(task.d, dtype=sigma.dtype)
    norm = float(torch.linalg.matrix_norm(sigma, ord=2))
    if norm == 0:
        raise ValueError("task: the covariance is zero")
    return math.sqrt(2) / (task.d**0.25 * math.sqrt(norm))


def linear_attention_gradients(batch: Batch, U: Tensor, V: Tensor) -> Tensor:
    r"""Per-prompt gradients of the half squared error :math:`r = \tfrac12(\hat y - y_q)^2` of normalised linear
    attention, :math:`\hat y = v^\top M U z_q` with :math:`M = \tfrac1L Z^\top Z` and :math:`v` the last row of V:

    .. math:: \partial_U r = (\hat y - y_q)\, M v\, z_q^\top, \qquad
        \partial_{v} r = (\hat y - y_q)\, M U z_q, \qquad \text{other rows of } V\!: 0 .

    ``batch`` of ``n`` prompts, U, V ``(D, D)`` -> ``(n, 2 D^2)``, the gradients in ``U``, then ``V``, flattened.
    """
    tokens, query, target = batch.tokens.to(U.dtype), batch.query.to(U.dtype), batch.target.to(U.dtype)
    D = U.shape[-1]
    M = tokens.transpose(-1, -2) @ tokens / tokens.shape[-2]  # (n, D, D)
    v = V[-1]
    MUz = (M @ (U @ query.unsqueeze(-1))).squeeze(-1)  # (n, D)
    residual = MUz @ v - target
    grad_U = residual[:, None, None] * (M @ v)[:, :, None] * query[:, None, :]
    grad_V = torch.zeros(len(residual), D, D, dtype=U.dtype)
    grad_V[:, -1] = residual[:, None] * MUz
    return torch.cat([grad_U.flatten(1), grad_V.flatten(1)], 1)


def sgd_noise_floor(task: RegressionTask, L: int, lr: float, batch_size: int, n_prompts: int = 20_000,
                    seed: int = 0) -> tuple[float, float]:
    r"""Expected excess risk :math:`\mathbb{E}[R_L(\theta)] - R^*_{\mathrm{lin}}(L)` at which SGD on normalised linear
    attention settles around its optimum :math:`\theta^*_L` (:func:`limit_parameters` at ``L``).

    SGD at learning rate ``lr`` on the MSE (:math:`= 2R`) is :math:`\theta \leftarrow \theta - \eta(\nabla R + \xi)`
    with :math:`\eta = 2\,\mathrm{lr}` and noise :math:`\xi` of covariance :math:`C/B` (``B`` = ``batch_size``,
    :math:`C` the covariance of the per-prompt gradients, :func:`linear_attention_gradients`). Near the optimum,
    with :math:`H = \nabla^2 R_L(\theta^*_L)` (exact: autograd on :func:`linear_attention_risk`) of eigenvalues
    :math:`\lambda_k`, the stationary covariance :math:`S = (I - \eta H) S (I - \eta H) + \eta^2 C/B` gives

    .. math:: \tfrac12 \operatorname{tr}(H S) = \frac{\eta}{2B} \sum_{\lambda_k > 0} \frac{\tilde C_{kk}}{2 - \eta\lambda_k},

    :math:`\tilde C` in the eigenbasis of :math:`H` (:math:`\eta\,\operatorname{tr}C / (4B)` for small steps). The flat
    directions of :math:`H` (the rescaling :math:`(cU, v/c)` and the unused entries) receive no gradient noise.
    :math:`C` is the mean of :math:`g g^\top` over ``n_prompts`` fresh prompts (:math:`\nabla R_L = 0` at the optimum), so
    the floor is a mean of per-prompt terms: returns ``(floor, standard_error)``.
    """
    L = checks.positive_int("L", L)
    eta = 2 * checks.positive_float("lr", lr)
    batch_size = checks.positive_int("batch_size", batch_size)
    n_prompts = checks.int_at_least("n_prompts", n_prompts, 2)
    U, V = limit_parameters(task, L)
    D = task.D
    theta = torch.cat([U.flatten(), V.flatten()])

    def risk(th):
        return linear_attention_risk_unchecked(th[: D * D].reshape(D, D), th[D * D:].reshape(D, D), L, task)

    H = torch.autograd.functional.hessian(risk, theta)
    eigenvalues, basis = torch.linalg.eigh(H)
    keep = eigenvalues > 1e-9 * float(eigenvalues.max())
    if float((eta * eigenvalues).max()) >= 2:
        raise ValueError(f"lr: SGD with step {eta:g} on R is unstable at this optimum (largest eta lambda >= 2)")
    generator = torch.Generator().manual_seed(seed)
    terms = []
    for start in range(0, n_prompts, 4096):
        batch = task.sample(min(4096, n_prompts - start), L, generator, dtype=torch.float64)
        projected = linear_attention_gradients(batch, U, V) @ basis[:, keep]  # (n, k)
        terms.append((projected**2 / (2 - eta * eigenvalues[keep])).sum(-1) * eta / (2 * batch_size))
    values = torch.cat(terms)
    return float(values.mean()), float(values.std() / math.sqrt(values.numel()))


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
