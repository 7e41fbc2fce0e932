r"""The data the live panels of Chapters 1 and 2 draw: prompts against their token law, and Lemma 2.1 in the plane.

Each function returns the keyword arguments of its builder (:func:`prompt_against_law` for
:func:`~softmax_as_linear.figures.measure_view.measure_view_figure`, :func:`lemma_in_the_plane` for
:func:`~softmax_as_linear.figures.lemma_2_1.lemma_figure`), so a
panel draws ``builder(**data)``. Plane points are ``(n, 2)`` float64 tensors; every draw has a fixed seed, so the
same setting always gives the same figure.
"""
from __future__ import annotations

import torch

from ..core import checks
from ..theory.attention import gaussian_attention, gaussian_linear_attention, softmax_attention, tilted_gaussian
from ..theory.measures import TokenLaw
from ..theory.tilting import importance_moments, infinite_prompt_softmax, quadrature_tilted_moments

PROMPT_SEED = 7          # the prompts of Chapter 1's panel
N_PROMPTS = 32
LEMMA_SAMPLE_SEED = 1    # the tokens of mu in Chapter 2's panel
LEMMA_PROMPT_SEED = 2    # its prompts
LEMMA_SAMPLES, LEMMA_SAMPLES_DRAWN = 4_000, 800
LEMMA_PROMPTS, LEMMA_LENGTH = 16, 2_000


def prompt_against_law(law: TokenLaw, reference_law: TokenLaw, queries, query, U, V, L: int) -> dict:
    r"""Chapter 1's panel: :math:`T[\hat\mu_L](z)` of 32 prompts of ``L`` tokens of ``law`` (seed 7) at ``query``
    ``(2,)``, the limit :math:`T[\mu](z)`, and the images ``(n, 2)`` of the circle ``queries`` ``(n, 2)`` under
    :math:`T[\mu]` for ``law`` and for the Gaussian ``reference_law``. ``U``, ``V`` ``(2, 2)``.

    Returns ``curve``, ``reference`` (images of the circle), ``outputs`` ``(32, 2)``, ``limit`` ``(2,)``,
    ``kind``, ``reference_kind`` and ``length``.
    """
    L = checks.positive_int("L", L)
    tokens = law.sample((N_PROMPTS, L), torch.Generator().manual_seed(PROMPT_SEED))
    return {"curve": infinite_prompt_softmax(law, queries, U, V),
            "reference": infinite_prompt_softmax(reference_law, queries, U, V),
            "outputs": softmax_attention(tokens, query, U, V),
            "limit": infinite_prompt_softmax(law, query, U, V),
            "kind": law.kind, "reference_kind": reference_law.kind, "length": L}


def lemma_in_the_plane(law: TokenLaw, query, U, V, queries) -> dict:
    r"""Chapter 2's panel for a Gaussian ``law`` :math:`\mu = N(m, \Gamma)` in the plane; ``query`` ``(2,)``,
    ``U``, ``V`` ``(2, 2)``, ``queries`` ``(n, 2)`` a circle of queries.

    Returns ``mean`` :math:`m` ``(2,)`` and ``cov`` :math:`\Gamma` ``(2, 2)``; ``tilted_mean``
    :math:`m + \Gamma U z`, the mean of :math:`\nu_z`; ``samples``, the first 800 of 4,000 tokens of :math:`\mu`
    (seed 1); ``weighted_mean``, the importance-weighted mean of the 4,000 tokens; ``quadrature_mean``, the
    quadrature mean of :math:`\nu_z`; ``softmax_curve`` and ``linear_curve``, the images ``(n, 2)`` of the circle
    under the softmax and linear limits; ``outputs`` ``(16, 2)``, softmax attention of 16 prompts of 2,000 tokens
    (seed 2); ``lemma`` ``(2,)``, the lemma's :math:`T[\mu](z) = Vm + V\Gamma U z`; ``radius`` and ``length``.
    """
    if law.D != 2:
        raise ValueError(f"law must be a law in the plane (D = 2), got D = {law.D}")
    samples = law.sample((LEMMA_SAMPLES,), torch.Generator().manual_seed(LEMMA_SAMPLE_SEED))
    prompts = law.sample((LEMMA_PROMPTS, LEMMA_LENGTH), torch.Generator().manual_seed(LEMMA_PROMPT_SEED))
    return {"mean": law.mean, "cov": law.cov,
            "tilted_mean": tilted_gaussian(law.mean, law.cov, query, U)[0],
            "samples": samples[:LEMMA_SAMPLES_DRAWN],
            "weighted_mean": importance_moments(samples, U @ query)[0],
            "quadrature_mean": quadrature_tilted_moments(law, U @ query).mean,
            "softmax_curve": gaussian_attention(law.mean, law.cov, queries, U, V),
            "linear_curve": gaussian_linear_attention(law.mean, law.cov, queries, U, V),
            "outputs": softmax_attention(prompts, query, U, V),
            "lemma": gaussian_attention(law.mean, law.cov, query, U, V),
            "radius": float(queries.norm(dim=-1).max()), "length": LEMMA_LENGTH}
