"""A table-driven probe of Chapter 8's public API: every argument of every public function, given a wrong shape, a
NumPy array, a dtype mix, NaN, infinity, an empty array, a negative number where it must be positive or an integer
that is not one, either works (NumPy input and dtype mixes: the same numbers as the tensors give) or raises a
``ValueError`` that names the argument; never a torch error, never a silent NaN. Valid calls are unchanged."""
from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Callable

import numpy as np
import pytest
import torch

from softmax_as_linear.theory import attention_optimum as ao
from softmax_as_linear.theory import circle_quadrature as cq
from softmax_as_linear.theory import kernel_smoother as ks
from softmax_as_linear.theory import tilted_limit as tl
from softmax_as_linear.theory.cosine_task import CosineTask

F64 = dict(dtype=torch.float64)


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=_g(seed), **F64)


def _cov(d=2):
    return torch.tensor([[1.0, 0.3], [0.3, 0.5]], **F64) if d == 2 else torch.eye(d, **F64)


SPHERE = CosineTask(d=2, features=6, frequency=1.0, noise_var=0.05, inputs="sphere")
GAUSS = CosineTask(d=2, features=6, frequency=1.0, noise_var=0.05, inputs="gaussian")


def _uv():
    U, V = torch.zeros(3, 3, **F64), torch.zeros(3, 3, **F64)
    U[:2, :2] = torch.tensor([[0.4, 0.1], [-0.1, 0.3]])
    V[2] = torch.tensor([0.3, -0.2, 1.0])
    return U, V


def _query(n=4, seed=1):
    return torch.cat([_rand(n, 2, seed=seed), torch.zeros(n, 1, **F64)], -1)


def _sphere_prompt(n=3, L=5):
    batch = SPHERE.sample(n, L, _g(2), torch.float64)
    return batch.tokens, batch.query


def _prompts(n=6, L=4):
    return ao.Prompts.draw(SPHERE, n, L, _g(3))


@dataclasses.dataclass
class Probe:
    """One public function: ``call(**kwargs)`` on ``valid()``'s arguments; ``arrays`` the arguments that are arrays,
    ``numbers`` the real ones (``"positive"``, ``"nonnegative"`` or ``"any"``), ``integers`` the counts (with their
    least value), ``others`` arguments with a wrong value each."""

    name: str
    call: Callable
    valid: Callable[[], dict]
    arrays: tuple = ()
    numbers: dict = dataclasses.field(default_factory=dict)
    integers: dict = dataclasses.field(default_factory=dict)
    others: dict = dataclasses.field(default_factory=dict)
    sequences: tuple = ()  # arrays (n,) of any length: their wrong shape is a second axis


NOT_A_TASK = {"task": 3}
PROBES = [
    Probe("tilted_limit.smoothed_cosines", tl.smoothed_cosines,
          lambda: dict(omega=_rand(5, 2), phase=_rand(5, seed=1), coef=_rand(3, 5, seed=2), mean=_rand(3, 2, seed=3),
                       cov=_cov()), arrays=("omega", "phase", "coef", "mean", "cov"),
          others={"cov": -_cov()}),
    Probe("tilted_limit.smoothed_quadratic", tl.smoothed_quadratic,
          lambda: dict(B=_cov(), beta=_rand(2), c=0.5, mean=_rand(4, 2, seed=1), cov=_cov()),
          arrays=("B", "beta", "mean", "cov"), numbers={"c": "any"}, others={"cov": -_cov()}),
    Probe("tilted_limit.cosine_coefficients", tl.cosine_coefficients, lambda: dict(task=GAUSS, a=_rand(4, 6)),
          arrays=("a",), others=NOT_A_TASK),
    Probe("tilted_limit.softmax_limit", tl.softmax_limit,
          lambda: dict(U=_uv()[0], V=_uv()[1], omega=GAUSS.omega, phase=GAUSS.phase,
                       coef=tl.cosine_coefficients(GAUSS, _rand(4, 6)), cov=torch.eye(2, **F64), query=_query()),
          arrays=("U", "V", "omega", "phase", "coef", "cov", "query"), others={"cov": -torch.eye(2, **F64)}),
    Probe("tilted_limit.linear_limit", tl.linear_limit,
          lambda: dict(U=_uv()[0], V=_uv()[1], omega=GAUSS.omega, phase=GAUSS.phase,
                       coef=tl.cosine_coefficients(GAUSS, _rand(4, 6)), cov=torch.eye(2, **F64), noise_var=0.05,
                       query=_query()),
          arrays=("U", "V", "omega", "phase", "coef", "cov", "query"), numbers={"noise_var": "nonnegative"}),
    Probe("tilted_limit.token_moments", tl.token_moments,
          lambda: dict(omega=GAUSS.omega, phase=GAUSS.phase, coef=_rand(4, 6), cov=torch.eye(2, **F64),
                       noise_var=0.05), arrays=("omega", "phase", "coef", "cov"), numbers={"noise_var": "nonnegative"}),
    Probe("tilted_limit.finite_prompt_predictions", tl.finite_prompt_predictions,
          lambda: dict(task=GAUSS, U=_uv()[0], V=_uv()[1], a=_rand(4, 6), query=_query(), L=50, generator=_g(4)),
          arrays=("U", "V", "a", "query"), integers={"L": 1, "chunk": 1},
          others={"task": 3, "generator": 4, "activation": "relu"}),
    Probe("tilted_limit.QuadraticLabels", tl.QuadraticLabels, lambda: dict(B=_cov(), beta=_rand(2), c=0.1),
          arrays=("B", "beta"), numbers={"c": "any", "noise_var": "nonnegative"}),
    Probe("tilted_limit.quadratic_limits", tl.quadratic_limits,
          lambda: dict(U=_uv()[0], V=_uv()[1], labels=tl.QuadraticLabels(_cov(), _rand(2)), query=_query()),
          arrays=("U", "V", "query"), others={"labels": 3}),
    Probe("kernel_smoother.kernel_weights", ks.kernel_weights,
          lambda: dict(zip(("tokens", "query"), _sphere_prompt()), w=5.0), arrays=("tokens", "query"),
          numbers={"w": "nonnegative"}),
    Probe("kernel_smoother.softmax_weights", ks.softmax_weights,
          lambda: dict(zip(("tokens", "query"), _sphere_prompt()), w=5.0), arrays=("tokens", "query"),
          numbers={"w": "nonnegative"}),
    Probe("kernel_smoother.nadaraya_watson", ks.nadaraya_watson,
          lambda: dict(zip(("tokens", "query"), _sphere_prompt()), w=torch.tensor([1.0, 5.0, 20.0], **F64)),
          arrays=("tokens", "query", "w"), numbers={}),
    Probe("kernel_smoother.effective_sample_size", ks.effective_sample_size,
          lambda: dict(zip(("tokens", "query"), _sphere_prompt()), w=5.0), arrays=("tokens", "query"),
          numbers={"w": "nonnegative"}),
    Probe("kernel_smoother.bandwidth_risks", ks.bandwidth_risks,
          lambda: dict(task=SPHERE, L=8, grid=np.array([1.0, 10.0]), n_prompts=16),
          arrays=("grid",), integers={"L": 1, "n_prompts": 1, "seed": 0}, others=NOT_A_TASK, sequences=("grid",)),
    Probe("kernel_smoother.best_bandwidth", ks.best_bandwidth,
          lambda: dict(task=SPHERE, L=8, grid=np.array([1.0, 10.0, 100.0]), n_prompts=16),
          arrays=("grid",), integers={"L": 1, "n_prompts": 1, "seed": 0}, others=NOT_A_TASK, sequences=("grid",)),
    Probe("kernel_smoother.circle_limit_losses", ks.circle_limit_losses,
          lambda: dict(task=SPHERE, w=np.array([1.0, 10.0]), n_samples=8, nodes=64),
          arrays=("w",), integers={"n_samples": 1, "seed": 0, "nodes": 3}, others={"task": GAUSS}, sequences=("w",)),
    Probe("circle_quadrature.circle_nodes", cq.circle_nodes, lambda: dict(nodes=16), integers={"nodes": 3}),
    Probe("circle_quadrature.feature_moments", cq.feature_moments, lambda: dict(task=SPHERE, nodes=64),
          integers={"nodes": 3}, others={"task": GAUSS}),
    Probe("circle_quadrature.linear_limit_risk", cq.linear_limit_risk, lambda: dict(task=SPHERE, nodes=64),
          integers={"nodes": 3}, others=NOT_A_TASK),
    Probe("circle_quadrature.intercept_share", cq.intercept_share, lambda: dict(task=SPHERE, nodes=64),
          integers={"nodes": 3}, others=NOT_A_TASK),
    Probe("circle_quadrature.affine_limit_risk", cq.affine_limit_risk, lambda: dict(task=SPHERE, nodes=64),
          integers={"nodes": 3}, others=NOT_A_TASK),
    Probe("circle_quadrature.zero_limit_risk", cq.zero_limit_risk, lambda: dict(task=SPHERE, nodes=64),
          integers={"nodes": 3}, others=NOT_A_TASK),
    Probe("circle_quadrature.limit_constants", cq.limit_constants, lambda: dict(task=SPHERE, nodes=64),
          integers={"nodes": 3}, others=NOT_A_TASK),
    Probe("circle_quadrature.constants_over_draws", cq.constants_over_draws,
          lambda: dict(task=SPHERE, feature_seeds=[0, 1], nodes=64), integers={"nodes": 3},
          others={"task": 3, "feature_seeds": [0, float("nan")]}),
    Probe("CosineTask", CosineTask, lambda: dict(d=2, features=6),
          numbers={"frequency": "nonnegative", "task_var": "positive", "noise_var": "nonnegative"},
          integers={"d": 2, "features": 1, "feature_seed": 0}, others={"inputs": "cube"}),
    Probe("CosineTask.feature_map", SPHERE.feature_map, lambda: dict(x=_rand(5, 2)), arrays=("x",)),
    Probe("CosineTask.function", SPHERE.function, lambda: dict(a=_rand(3, 6), x=_rand(3, 5, 2, seed=1)),
          arrays=("a", "x")),
    Probe("CosineTask.sample", SPHERE.sample, lambda: dict(n_prompts=4, L=3, generator=_g()),
          integers={"n_prompts": 1, "L": 1}, others={"generator": 3}),
    Probe("CosineTask.posterior", SPHERE.posterior, lambda: dict(zip(("tokens", "query"), _sphere_prompt())),
          arrays=("tokens", "query")),
    Probe("CosineTask.bayes_risk", SPHERE.bayes_risk, lambda: dict(L=4, n_prompts=8),
          integers={"L": 1, "n_prompts": 1, "seed": 0}),
    Probe("attention_optimum.Prompts", ao.Prompts,
          lambda: dict(tokens=_prompts().tokens, query=_prompts().query, target=_prompts().target),
          arrays=("tokens", "query", "target")),
    Probe("attention_optimum.Prompts.draw", ao.Prompts.draw,
          lambda: dict(task=SPHERE, n_prompts=4, L=3, generator=_g()), integers={"n_prompts": 1, "L": 1},
          others={"task": 3, "generator": 3}),
    Probe("attention_optimum.parameter_count", ao.parameter_count, lambda: dict(model="softmax", d=2),
          integers={"d": 1}, others={"model": "relu"}),
    Probe("attention_optimum.start", ao.start, lambda: dict(model="softmax", d=2, w=2.0), numbers={"w": "positive"},
          integers={"d": 1}, others={"model": "relu"}),
    Probe("attention_optimum.softmax_blocks", ao.softmax_blocks, lambda: dict(theta=_rand(9), d=2),
          arrays=("theta",), integers={"d": 1}),
    Probe("attention_optimum.softmax_prediction", ao.softmax_prediction,
          lambda: dict(theta=_rand(9) * 0.1, tokens=_prompts().tokens, query=_prompts().query),
          arrays=("theta", "tokens", "query")),
    Probe("attention_optimum.to_uv", ao.to_uv, lambda: dict(model="linear", theta=_rand(9), d=2), arrays=("theta",),
          integers={"d": 1}, others={"model": "affine"}),
    Probe("attention_optimum.window", ao.window, lambda: dict(model="softmax", theta=_rand(9)), arrays=("theta",),
          others={"model": "linear"}),
    Probe("attention_optimum.losses", ao.losses, lambda: dict(model="linear", theta=_rand(9), prompts=_prompts()),
          arrays=("theta",), others={"model": "relu", "prompts": 3}),
    Probe("attention_optimum.loss_and_gradient", ao.loss_and_gradient,
          lambda: dict(model="linear", theta=_rand(9), prompts=_prompts()), arrays=("theta",),
          others={"model": "relu", "prompts": 3}),
    Probe("attention_optimum.newton_step", ao.newton_step,
          lambda: dict(model="nadaraya_watson", theta=np.array([1.0]), prompts=_prompts()), arrays=("theta",),
          numbers={"h": "positive"}, others={"model": "relu", "prompts": 3}),
    Probe("attention_optimum.fit", ao.fit,
          lambda: dict(model="nadaraya_watson", prompts=_prompts(), theta0=np.array([1.0]), max_iterations=5),
          arrays=("theta0",), numbers={"gtol": "positive"}, integers={"max_iterations": 1},
          others={"model": "relu", "prompts": 3}),
]


def _wrong_shape(value: torch.Tensor) -> torch.Tensor:
    if value.ndim == 0:
        return torch.stack([value, value])
    return torch.cat([value, value[..., :1]], -1)


def _poisoned(value: torch.Tensor, bad: float) -> torch.Tensor:
    value = value.clone().double()
    value.view(-1)[0] = bad
    return value


def _array_mutations(value, sequence: bool) -> dict:
    value = torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value)
    wrong = torch.stack([value, value], -1) if sequence else _wrong_shape(value)
    return {"numpy": value.numpy(), "float32": value.float(), "wrong shape": wrong,
            "NaN": _poisoned(value, math.nan), "infinity": _poisoned(value, math.inf),
            "empty": torch.empty(*value.shape[:-1], 0, **F64) if value.ndim else torch.empty(0, **F64)}


def _number_mutations(kind: str, valid) -> dict:
    mutations = {"numpy": np.float64(valid), "NaN": math.nan, "infinity": math.inf, "text": "x", "empty": []}
    if kind != "any":
        mutations["negative"] = -1.0
    if kind == "positive":
        mutations["zero"] = 0.0
    return mutations


def _integer_mutations(least: int, valid) -> dict:
    return {"numpy": np.int64(valid), "below": least - 1, "fraction": least + 0.5, "NaN": math.nan, "text": "3"}


ACCEPTABLE = ("numpy", "float32")


def _as_numbers(result):
    if isinstance(result, torch.Tensor):
        return [result.detach().double()]
    if isinstance(result, np.ndarray):
        return [torch.as_tensor(result).double()]
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in _as_numbers(r)]
    if isinstance(result, dict):
        return [t for r in result.values() for t in _as_numbers(r)]
    if isinstance(result, float):
        return [torch.tensor(result, **F64)]
    if dataclasses.is_dataclass(result):
        return [t for f in dataclasses.fields(result) for t in _as_numbers(getattr(result, f.name))]
    return []


_REFERENCES: dict[str, list] = {}


def _reference(probe: Probe) -> list:
    """The numbers of ``probe``'s valid call, computed once per process: the call is deterministic (its arguments
    are built from fixed seeds), and the cases that compare an accepted input with it would otherwise repeat it."""
    if probe.name not in _REFERENCES:
        _REFERENCES[probe.name] = _as_numbers(probe.call(**probe.valid()))
    return _REFERENCES[probe.name]


def _default(function, arg):
    return inspect.signature(function).parameters[arg].default


def _cases():
    for probe in PROBES:
        valid = probe.valid()
        for arg in probe.arrays:
            for what, value in _array_mutations(valid[arg], arg in probe.sequences).items():
                yield probe, arg, what, value
        for arg, kind in probe.numbers.items():
            for what, value in _number_mutations(kind, valid.get(arg, _default(probe.call, arg))).items():
                yield probe, arg, what, value
        for arg, least in probe.integers.items():
            for what, value in _integer_mutations(least, valid.get(arg, _default(probe.call, arg))).items():
                yield probe, arg, what, value
        for arg, value in probe.others.items():
            yield probe, arg, "wrong value", value


CASES = list(_cases())


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.name)
def test_valid_calls_work(probe):
    for number in _reference(probe):
        assert torch.isfinite(number).all()


@pytest.mark.parametrize("probe, arg, what, value", CASES,
                         ids=[f"{p.name}-{arg}-{what}" for p, arg, what, _ in CASES])
def test_bad_input_is_a_value_error_naming_the_argument(probe, arg, what, value):
    kwargs = probe.valid()
    kwargs[arg] = value
    try:
        result = probe.call(**kwargs)
    except ValueError as error:
        assert arg in str(error), f"the ValueError does not name {arg}: {error}"
        return
    assert what in ACCEPTABLE, f"{arg} = {what} was accepted"
    numbers = _as_numbers(result)
    assert all(torch.isfinite(n).all() for n in numbers), f"{arg} = {what}: a silent NaN or infinity"
    if what in ACCEPTABLE:
        reference = _reference(probe)
        tolerance = 1e-4 if what == "float32" else 1e-12
        for got, want in zip(numbers, reference):
            torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)
