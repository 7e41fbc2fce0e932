r"""The best weights of one attention layer on a prompt law, by sample-average optimisation on fixed prompts
(Chapter 8).

A prompt has tokens :math:`z_i = (x_i, y_i)` ``(L, D)``, :math:`D = d + 1`, and the query token :math:`(x_q, 0)`, so
only the first :math:`d` columns of the score matrix :math:`U` and the last row :math:`v` of :math:`V` reach the
prediction. Each model's weights are a flat vector :math:`\theta` (float64):

- ``"softmax"``: :math:`\hat y = \sum_i \mathrm{softmax}_i(x_i^\top U_{xx} x_q + y_i\, u_y^\top x_q)\, v^\top z_i` with
  the score's input block written :math:`U_{xx} = w (I + B)`, :math:`\operatorname{tr} B = 0`, so that
  :math:`\theta = (\log w, B \text{ (its } d^2 - 1 \text{ free entries)}, u_y, v)` and the window is
  :math:`w = \operatorname{tr}(U_{xx})/d = e^{\theta_0}` (the log scale keeps the optimisation well conditioned);
- ``"nadaraya_watson"``: the same with :math:`B = 0`, :math:`u_y = 0`, :math:`v = e_{D}`: :math:`\theta = (\log w)`;
- ``"linear"``: normalised linear attention :math:`\hat y = v^\top \hat M W x_q`, :math:`\hat M = \tfrac1L\sum_i z_i
  z_i^\top`, :math:`W = U_{:, :d}`: :math:`\theta = (W, v)`;
- ``"affine"``: linear attention plus a read of the prompt's mean token, :math:`\hat y = c^\top \bar z + v^\top \hat M
  W x_q`: :math:`\theta = (c, W, v)`. Not an attention layer: the reference that tells the intercept a normalised
  softmax layer gets from :math:`v^\top \bar z` (its output at small scores) from locality.

:func:`fit` minimises the mean of :math:`\tfrac12(\hat y - y_q)^2` over a fixed set of prompts (:class:`Prompts`) with
L-BFGS on the exact gradient, in chunks of at most :data:`CHUNK_TOKENS` tokens so memory stays bounded at any
:math:`L`, and reports how close it stopped: the gradient norm and the Newton step :math:`H^{-1}g` left (finite-
difference Hessian). The minimum on the fitting prompts is biased low; :func:`losses` scores the weights on fresh
prompts.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from torch import Tensor

from ..core import checks

#: The models :func:`fit` optimises.
OPTIMUM_MODELS = ("softmax", "nadaraya_watson", "linear", "affine")
#: Tokens per chunk of the objective (a chunk's float64 tensors stay within a few tens of MB).
CHUNK_TOKENS = 1 << 18
#: The log-window grid on which the Nadaraya-Watson fit starts (its minimum then refined by L-BFGS).
LOG_W_GRID = np.linspace(math.log(0.1), math.log(1e5), 61)


@dataclasses.dataclass
class Prompts:
    """A fixed set of prompts: tokens ``(n, L, D)``, query ``(n, D)``, target ``(n,)``, float64; the moments
    linear attention reads (``mean_token`` ``(n, D)``, ``second_moment`` ``(n, D, D)``) computed once on
    first use."""

    tokens: Tensor
    query: Tensor
    target: Tensor
    _moments: tuple[Tensor, Tensor] | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        sizes: dict = {}
        self.tokens = checks.shaped("tokens", self.tokens, "(n, L, D)", sizes)
        if sizes["D"] < 2:
            raise ValueError("tokens must have D >= 2 entries (inputs, then the label), got "
                             f"{tuple(self.tokens.shape)}")
        self.query = checks.shaped("query", self.query, "(n, D)", sizes)
        self.target = checks.shaped("target", self.target, "(n,)", sizes)

    @classmethod
    def draw(cls, task, n_prompts: int, L: int, generator: torch.Generator) -> "Prompts":
        """``n_prompts`` prompts of length ``L`` of ``task`` from ``generator``, drawn in chunks of at most
        :data:`CHUNK_TOKENS` tokens (one :meth:`~softmax_as_linear.theory.cosine_task.CosineTask.sample` call each)."""
        n_prompts, L = checks.positive_int("n_prompts", n_prompts), checks.positive_int("L", L)
        checks.has_attributes("task", task, "sample", kind="CosineTask")
        if not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        chunk, parts = max(1, CHUNK_TOKENS // L), []
        for start in range(0, n_prompts, chunk):
            parts.append(task.sample(min(chunk, n_prompts - start), L, generator, dtype=torch.float64))
        return cls(torch.cat([b.tokens for b in parts]), torch.cat([b.query for b in parts]),
                   torch.cat([b.target for b in parts]))

    @property
    def n(self) -> int:
        return self.tokens.shape[0]

    @property
    def L(self) -> int:
        return self.tokens.shape[1]

    @property
    def d(self) -> int:
        return self.tokens.shape[2] - 1

    def chunks(self):
        """Index slices of at most :data:`CHUNK_TOKENS` tokens."""
        step = max(1, CHUNK_TOKENS // self.L)
        return [slice(s, min(s + step, self.n)) for s in range(0, self.n, step)]

    def moments(self) -> tuple[Tensor, Tensor]:
        r""":math:`\bar z` ``(n, D)`` and :math:`\hat M = \tfrac1L\sum_i z_i z_i^\top` ``(n, D, D)``."""
        if self._moments is None:
            means, seconds = [], []
            for part in self.chunks():
                z = self.tokens[part]
                means.append(z.mean(1)), seconds.append(z.transpose(1, 2) @ z / self.L)
            self._moments = (torch.cat(means), torch.cat(seconds))
        return self._moments


def parameter_count(model: str, d: int) -> int:
    """Length of ``model``'s weight vector :math:`\\theta` for inputs of dimension ``d``."""
    d = checks.positive_int("d", d)
    D = d + 1
    return {"softmax": d * d + d + D, "nadaraya_watson": 1, "linear": D * d + D, "affine": D + D * d + D}[
        checks.one_of("model", model, OPTIMUM_MODELS)]


def start(model: str, d: int, w: float = 1.0) -> np.ndarray:
    r"""A starting :math:`\theta`: softmax and Nadaraya-Watson at window ``w`` reading the label (:math:`v = e_D`),
    linear attention at its infinite-prompt optimum on inputs uniform on the sphere (:math:`W = (dI; 0)`,
    :math:`v = e_D`), the affine reference there plus the prompt's mean label (:math:`c = e_D`)."""
    checks.one_of("model", model, OPTIMUM_MODELS)
    d = checks.positive_int("d", d)
    D = d + 1
    theta = np.zeros(parameter_count(model, d))
    if model in ("softmax", "nadaraya_watson"):
        theta[0] = math.log(checks.positive_float("w", w))
        if model == "softmax":
            theta[-1] = 1.0
        return theta
    W = np.zeros((D, d))
    W[:d] = d * np.eye(d)
    e = np.eye(D)[-1]
    return np.concatenate(([] if model == "linear" else [e]) + [W.ravel(), e])


def softmax_blocks(theta: Tensor, d: int) -> tuple[Tensor, Tensor, Tensor]:
    r"""``U_xx`` ``(..., d, d)``, ``u_y`` ``(..., d)`` and ``v`` ``(..., D)`` of softmax weights ``theta``
    ``(..., p)`` (any leading axes: one run, or a sweep's runs)."""
    d = checks.positive_int("d", d)
    return _softmax_blocks(_theta(_array(theta), "softmax", d, batch=True), d)


def _theta(theta, model: str, d: int, batch: bool = False, dtype=None) -> Tensor:
    """``theta`` as a tensor ``(p,)`` (``(..., p)`` with ``batch``) of ``model``'s length for inputs of dimension
    ``d``, finite (checked on the CPU only: on an accelerator, in a training step, the check would wait for it)."""
    p = parameter_count(model, d)
    tensor = checks.as_float_tensor("theta", theta)
    return checks.shaped("theta", tensor, f"(..., {p})" if batch else f"({p},)", dtype=dtype,
                         check_finite=tensor.device.type == "cpu")


def _softmax_blocks(theta: Tensor, d: int) -> tuple[Tensor, Tensor, Tensor]:
    w = torch.exp(theta[..., 0])
    free = theta[..., 1:d * d]
    last = -free[..., :: d + 1].sum(-1, keepdim=True)  # tr B = 0 fixes the last diagonal entry
    B = torch.cat([free, last], -1).reshape(*theta.shape[:-1], d, d)
    eye = torch.eye(d, dtype=theta.dtype, device=theta.device)
    return w[..., None, None] * (eye + B), theta[..., d * d: d * d + d], theta[..., d * d + d:]


def softmax_prediction(theta: Tensor, tokens: Tensor, query: Tensor) -> Tensor:
    r"""The softmax layer's prediction :math:`\hat y = \sum_i \mathrm{softmax}_i(x_i^\top U_{xx} x_q + y_i\,
    u_y^\top x_q)\, v^\top z_i` at weights ``theta`` ``(..., p)`` on prompts ``tokens`` ``(..., n, L, D)`` with
    queries ``query`` ``(..., n, D)``: ``(..., n)``. The leading axes of ``theta`` and the prompts match (one run's
    weights on its prompts, or every run of a sweep on its own). NumPy arrays accepted; the arguments are brought to
    the widest of their dtypes; finiteness is checked on the CPU only (on an accelerator it would wait for it)."""
    on_cpu = all(not isinstance(t, Tensor) or t.device.type == "cpu" for t in (theta, tokens, query))
    sizes: dict = {}
    tokens = checks.shaped("tokens", tokens, "(..., n, L, D)", sizes, dtype=None, check_finite=on_cpu)
    query = checks.shaped("query", query, "(..., n, D)", sizes, dtype=None, check_finite=on_cpu)
    d = tokens.shape[-1] - 1
    theta = checks.shaped("theta", _array(theta), f"(..., {parameter_count('softmax', d)})", dtype=None,
                          check_finite=on_cpu)
    dtype = torch.promote_types(torch.promote_types(theta.dtype, tokens.dtype), query.dtype)
    theta, tokens, query = theta.to(dtype), tokens.to(dtype), query.to(dtype)
    try:
        torch.broadcast_shapes(theta.shape[:-1], tokens.shape[:-3], query.shape[:-2])
    except RuntimeError:
        raise ValueError(f"theta's leading dimensions {tuple(theta.shape[:-1])} must match the prompts' "
                         f"{tuple(tokens.shape[:-3])} (one run's weights per set of prompts)") from None
    return softmax_prediction_unchecked(theta, tokens, query)


def softmax_prediction_unchecked(theta: Tensor, tokens: Tensor, query: Tensor) -> Tensor:
    """:func:`softmax_prediction` without its argument checks: for a training step's own, valid, tensors (the
    engine's), where the checks would cost as much as the prediction."""
    d = tokens.shape[-1] - 1
    U_xx, u_y, v = _softmax_blocks(theta, d)
    x_q = query[..., :d]
    read = torch.einsum("...ij,...nj->...ni", U_xx, x_q)  # U_xx x_q, (..., n, d)
    scores = (torch.einsum("...nld,...nd->...nl", tokens[..., :d], read)
              + tokens[..., d] * torch.einsum("...nd,...d->...n", x_q, u_y).unsqueeze(-1))
    values = torch.einsum("...nlk,...k->...nl", tokens, v)
    return (torch.softmax(scores, -1) * values).sum(-1)


def to_uv(model: str, theta, d: int) -> tuple[Tensor, Tensor]:
    r"""The :math:`(U, V)` view ``(D, D)`` of an attention model's :math:`\theta` (zero columns and rows where the
    query's zero label and the prediction's last coordinate leave them unread), for
    :func:`~softmax_as_linear.theory.models.predict`. The affine reference is not an attention layer."""
    checks.one_of("model", model, ("softmax", "nadaraya_watson", "linear"))
    d = checks.positive_int("d", d)
    theta = _theta(_array(theta), model, d, dtype=torch.float64)
    D = d + 1
    U, V = torch.zeros(D, D, dtype=torch.float64), torch.zeros(D, D, dtype=torch.float64)
    if model == "nadaraya_watson":
        U[:d, :d], V[d, d] = torch.exp(theta[0]) * torch.eye(d, dtype=torch.float64), 1.0
    elif model == "softmax":
        U_xx, u_y, v = _softmax_blocks(theta, d)
        U[:d, :d], U[d, :d], V[d] = U_xx, u_y, v
    else:
        U[:, :d], V[d] = theta[: D * d].reshape(D, d), theta[D * d:]
    return U, V


def window(model: str, theta) -> float:
    r"""The window :math:`w = \operatorname{tr}(U_{xx})/d` of a softmax or Nadaraya-Watson :math:`\theta`."""
    checks.one_of("model", model, ("softmax", "nadaraya_watson"))
    theta = checks.shaped("theta", _array(theta), "(p,)")
    p, D = theta.shape[0], math.isqrt(theta.shape[0])
    if (model == "nadaraya_watson" and p != 1) or (model == "softmax" and (D < 2 or D * D != p)):
        raise ValueError(f"theta must have {'1 entry' if model == 'nadaraya_watson' else '(d + 1)^2 entries'} for "
                         f"{model}, got {p}")
    return float(math.exp(float(theta[0])))


def _array(theta):
    """A sequence of numbers as a NumPy array (tensors and arrays as they are), or a ``ValueError`` naming theta."""
    if isinstance(theta, (list, tuple)):
        try:
            return np.asarray(theta, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"theta must be a sequence of numbers, got {theta!r}") from None
    return theta


def _checked(model: str, theta, prompts) -> Tensor:
    """``model``, ``prompts`` and ``theta`` (float64 ``(p,)``) checked for :func:`losses`, :func:`loss_and_gradient` and
    :func:`newton_step`."""
    checks.one_of("model", model, OPTIMUM_MODELS)
    if not isinstance(prompts, Prompts):
        raise ValueError(f"prompts must be Prompts, got {type(prompts).__name__}")
    return _theta(_array(theta), model, prompts.d, dtype=torch.float64)


def _predict(model: str, theta: Tensor, prompts: Prompts, part: slice) -> Tensor:
    d, D = prompts.d, prompts.d + 1
    x_q = prompts.query[part, :d]
    if model in ("linear", "affine"):
        mean, second = (m[part] for m in prompts.moments())
        offset = 0 if model == "linear" else D
        W, v = theta[offset: offset + D * d].reshape(D, d), theta[offset + D * d:]
        pred = ((second @ v.unsqueeze(-1)).squeeze(-1) * (x_q @ W.T)).sum(-1)  # v^T M W x_q, M symmetric
        return pred if model == "linear" else pred + mean @ theta[:D]
    z = prompts.tokens[part]
    x, y = z[..., :d], z[..., d]
    if model == "nadaraya_watson":
        scores = torch.exp(theta[0]) * (x @ x_q.unsqueeze(-1)).squeeze(-1)
        return (torch.softmax(scores, -1) * y).sum(-1)
    return softmax_prediction_unchecked(theta, z, prompts.query[part])


def losses(model: str, theta, prompts: Prompts) -> Tensor:
    r"""Per-prompt losses :math:`\tfrac12(\hat y - y_q)^2` of ``model`` at :math:`\theta` on ``prompts``: ``(n,)``."""
    theta = _checked(model, theta, prompts)
    with torch.no_grad():
        return torch.cat([0.5 * (_predict(model, theta, prompts, p) - prompts.target[p]) ** 2
                          for p in prompts.chunks()])


def loss_and_gradient(model: str, theta, prompts: Prompts) -> tuple[float, np.ndarray]:
    """The mean loss on ``prompts`` and its gradient in :math:`\\theta`, accumulated chunk by chunk."""
    theta = _checked(model, theta, prompts).clone().requires_grad_(True)
    total = 0.0
    for part in prompts.chunks():
        loss = 0.5 * ((_predict(model, theta, prompts, part) - prompts.target[part]) ** 2).sum() / prompts.n
        loss.backward()
        loss = loss.detach()
        total += loss.item()
    return total, theta.grad.numpy().copy()


def newton_step(model: str, theta, prompts: Prompts, h: float = 1e-4) -> tuple[np.ndarray, np.ndarray]:
    r"""The Newton step :math:`-H^{-1}g` from :math:`\theta` (``H`` by central differences of the exact gradient,
    symmetrised; a pseudo-inverse, so that a direction the model does not see, such as the scale shared by
    :math:`v` and :math:`W` in linear attention, contributes nothing) and the Hessian's eigenvalues."""
    theta = _checked(model, theta, prompts).numpy()
    h = checks.positive_float("h", h)
    _, g = loss_and_gradient(model, theta, prompts)
    columns = []
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        columns.append((loss_and_gradient(model, theta + e, prompts)[1]
                        - loss_and_gradient(model, theta - e, prompts)[1]) / (2 * h))
    H = np.array(columns)
    H = 0.5 * (H + H.T)
    return -np.linalg.pinv(H, rcond=1e-10, hermitian=True) @ g, np.linalg.eigvalsh(H)


@dataclasses.dataclass
class Fit:
    """An optimum on fixed prompts: ``theta``, the in-sample ``risk``, the final ``gradient_norm``, the Newton
    step left (``newton`` (p,); its first entry is the change of :math:`\\log w` still to come for softmax and
    Nadaraya-Watson), the smallest Hessian eigenvalue (``curvature``; positive at a strict local minimum),
    ``iterations`` and the optimiser's ``message``."""

    model: str
    theta: np.ndarray
    risk: float
    gradient_norm: float
    newton: np.ndarray
    curvature: float
    iterations: int
    message: str

    @property
    def window(self) -> float | None:
        return window(self.model, self.theta) if self.model in ("softmax", "nadaraya_watson") else None


def fit(model: str, prompts: Prompts, theta0=None, gtol: float = 1e-9, max_iterations: int = 2000,
        newton: bool = True) -> Fit:
    r"""The minimiser of the mean loss of ``model`` on ``prompts`` (L-BFGS, SciPy's ``L-BFGS-B`` without bounds, on
    the exact gradient), from ``theta0`` (default :func:`start`; Nadaraya-Watson starts at the best point of
    :data:`LOG_W_GRID`). Stops when the largest gradient entry is below ``gtol`` or the loss stops falling to
    rounding. ``newton=False`` skips the Newton step left (its :math:`2p` gradients; ``newton`` and ``curvature``
    are then NaN)."""
    from scipy.optimize import minimize

    checks.one_of("model", model, OPTIMUM_MODELS)
    if not isinstance(prompts, Prompts):
        raise ValueError(f"prompts must be Prompts, got {type(prompts).__name__}")
    gtol, max_iterations = checks.positive_float("gtol", gtol), checks.positive_int("max_iterations", max_iterations)
    if theta0 is None:
        if model == "nadaraya_watson":
            grid = [float(losses(model, [t], prompts).mean()) for t in LOG_W_GRID]
            theta0 = [LOG_W_GRID[int(np.argmin(grid))]]
        else:
            theta0 = start(model, prompts.d)
    theta0 = checks.shaped("theta0", _array(theta0), f"({parameter_count(model, prompts.d)},)").numpy()
    result = minimize(lambda t: loss_and_gradient(model, t, prompts), theta0, jac=True, method="L-BFGS-B",
                      options={"gtol": gtol, "ftol": 1e-15, "maxiter": max_iterations, "maxcor": 20})
    if newton:
        step, eigenvalues = newton_step(model, result.x, prompts)
    else:
        step, eigenvalues = np.full(result.x.size, np.nan), np.array([np.nan])
    return Fit(model, result.x, float(result.fun), float(np.linalg.norm(result.jac)), step, float(eigenvalues.min()),
               int(result.nit), str(result.message))


def window_hessian(prompts: Prompts, theta, h: float = 1e-4) -> np.ndarray:
    r"""The Hessian of the softmax layer's mean loss on ``prompts`` in its weights other than :math:`\log w`, at
    ``theta`` (central differences of the exact gradient, symmetrised): ``(p - 1, p - 1)``."""
    theta = _checked("softmax", theta, prompts).numpy()
    columns = []
    for j in range(1, theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        columns.append((loss_and_gradient("softmax", theta + e, prompts)[1]
                        - loss_and_gradient("softmax", theta - e, prompts)[1])[1:]
                       / (2 * h))
    H = np.array(columns)
    return 0.5 * (H + H.T)


def fit_at_window(prompts: Prompts, log_w: float, theta0, gtol: float = 1e-8, max_iterations: int = 500,
                  hessian=None) -> Fit:
    r"""The softmax layer's best weights on ``prompts`` with its window held at :math:`w = e^{\text{log\_w}}`: the
    mean loss minimised over every other weight (:math:`B`, :math:`u_y`, :math:`v`) from ``theta0``'s (its first entry
    is replaced by ``log_w``). With ``hessian`` (:func:`window_hessian` at a nearby point) first Newton steps with that
    fixed Hessian while each lowers the loss (at most 15); then, unless the gradient is below ``gtol``, L-BFGS. A
    point of the in-sample profile of the loss over :math:`\log w`; ``newton`` and ``curvature`` are NaN (not
    computed); ``iterations`` counts both kinds of step."""
    from scipy.optimize import minimize

    if not isinstance(prompts, Prompts):
        raise ValueError(f"prompts must be Prompts, got {type(prompts).__name__}")
    log_w = checks.number("log_w", log_w)
    gtol = checks.positive_float("gtol", gtol)
    theta0 = checks.shaped("theta0", _array(theta0), f"({parameter_count('softmax', prompts.d)},)").numpy()

    def value(rest):
        loss, grad = loss_and_gradient("softmax", np.concatenate(([log_w], rest)), prompts)
        return loss, grad[1:]

    rest, steps = theta0[1:].copy(), 0
    loss, grad = value(rest)
    if hessian is not None:
        inverse = np.linalg.pinv(np.asarray(hessian, dtype=float), rcond=1e-10, hermitian=True)
        while np.linalg.norm(grad) >= gtol and steps < 15:
            trial = rest - inverse @ grad
            trial_loss, trial_grad = value(trial)
            if not trial_loss < loss:
                break
            rest, loss, grad, steps = trial, trial_loss, trial_grad, steps + 1
    message = "fixed-Hessian Newton steps"
    if np.linalg.norm(grad) >= gtol:
        result = minimize(value, rest, jac=True, method="L-BFGS-B",
                          options={"gtol": gtol, "ftol": 1e-15, "maxiter": max_iterations, "maxcor": 20})
        rest, loss, grad, steps, message = result.x, float(result.fun), result.jac, steps + int(result.nit), \
            str(result.message)
    theta = np.concatenate(([log_w], rest))
    return Fit("softmax", theta, float(loss), float(np.linalg.norm(grad)), np.full(theta.size, np.nan), float("nan"),
               steps, message)


def conditional_losses(model: str, theta, prompts: Prompts, queries: Tensor, targets: Tensor,
                       noise_var: float) -> Tensor:
    r"""Per-prompt expected losses given the prompt and several queries: for each prompt the mean over its queries
    ``queries`` ``(n, q, d)`` of :math:`\tfrac12(\hat y - f(x_q))^2 + s^2/2`, the noise-free targets ``targets``
    ``(n, q)`` (the conditional expectation of the loss over the query's label noise: the same expected risk as the
    loss on a noisy label, without that noise's variance): ``(n,)``. ``prompts``' own query and target are not
    read."""
    theta = _checked(model, theta, prompts)
    sizes = {"n": prompts.n, "d": prompts.d}
    queries = checks.shaped("queries", queries, "(n, q, d)", sizes)
    targets = checks.shaped("targets", targets, "(n, q)", sizes)
    noise_var = checks.positive_float("noise_var", noise_var, allow_zero=True)
    total = torch.zeros(prompts.n, dtype=torch.float64)
    zero = torch.zeros(prompts.n, 1, dtype=torch.float64)
    with torch.no_grad():
        for j in range(sizes["q"]):
            one = Prompts(prompts.tokens, torch.cat([queries[:, j].to(torch.float64), zero], -1),
                          targets[:, j].to(torch.float64))
            one._moments = prompts._moments
            total += torch.cat([0.5 * (_predict(model, theta, one, p) - one.target[p]) ** 2 for p in one.chunks()])
            prompts._moments = one._moments
    return total / sizes["q"] + 0.5 * noise_var

