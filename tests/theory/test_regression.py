"""In-context regression's task and sampler: the law of the prompts, the two samplers, every drawing path,
covariate laws, a degenerate input covariance (Appendix F.3), bad input."""
import pytest
import torch

from softmax_as_linear.theory import covariates, regression

from helpers import REGRESSION_TASKS, rank_four_covariance


def test_token_covariance_matches_samples():
    task = REGRESSION_TASKS["kms"]()
    g = torch.Generator().manual_seed(31)
    batch = task.sample(1, 200_000, g, dtype=torch.float64)
    tokens = batch.tokens[0]
    empirical = tokens.T @ tokens / tokens.shape[0]
    assert torch.allclose(empirical, task.token_covariance(batch.w[0]), atol=0.02)


def test_sampling_is_reproducible_and_has_the_right_law():
    task = REGRESSION_TASKS["kms"]()
    a = task.sample(4, 6, torch.Generator().manual_seed(1))
    b = task.sample(4, 6, torch.Generator().manual_seed(1))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.query, b.query)
    assert a.tokens.shape == (4, 6, 4) and a.query.shape == (4, 4) and a.target.shape == (4,)
    assert torch.all(a.query[:, -1] == 0)
    big = task.sample(200_000, 1, torch.Generator().manual_seed(2), dtype=torch.float64)
    x_q = big.query[:, :3]
    assert torch.allclose(x_q.T @ x_q / 200_000, task.covariance, atol=0.02)
    residual = big.target - (x_q * big.w).sum(-1)
    assert residual.var().item() == pytest.approx(task.noise_var, rel=0.03)
    assert big.w.var(0).mean().item() == pytest.approx(task.task_var, rel=0.03)


@pytest.mark.parametrize("sampler", regression.SAMPLERS)
@pytest.mark.parametrize("kind", ["isotropic", "kms"])
def test_stacked_sampling_draws_what_each_generator_draws_alone(kind, sampler):
    task = REGRESSION_TASKS[kind]() if sampler == "paper" else getattr(regression.RegressionTask, kind)(3, sampler=sampler)
    seeds = (5, 6, 7)
    stacked = task.sample_stacked(4, 9, [torch.Generator().manual_seed(s) for s in seeds], dtype=torch.float64)
    for i, seed in enumerate(seeds):
        alone = task.sample(4, 9, torch.Generator().manual_seed(seed), dtype=torch.float64)
        for name in ("tokens", "query", "target", "w"):
            torch.testing.assert_close(getattr(stacked, name)[i], getattr(alone, name), rtol=1e-12, atol=1e-12)


def test_kms_covariance():
    sigma = regression.kms_covariance(4, 0.5)
    assert sigma[0, 3] == pytest.approx(0.125) and torch.equal(sigma, sigma.T)


@pytest.mark.parametrize("call, match", [
    (lambda: regression.kms_covariance(3, 1.0), "rho"),
    (lambda: regression.kms_covariance(3, -1.5), "rho"),
    (lambda: regression.RegressionTask(2, torch.tensor([[1.0, 2.0], [2.0, 1.0]])), "covariance"),
    (lambda: regression.RegressionTask(2, torch.eye(3)), "covariance"),
    (lambda: regression.RegressionTask(2, torch.tensor([[float("nan"), 0.0], [0.0, 1.0]])), "covariance"),
    (lambda: regression.RegressionTask(0), "d"),
    (lambda: regression.RegressionTask(2, task_var=-1.0), "task_var"),
    (lambda: regression.RegressionTask(2, noise_var=float("nan")), "noise_var"),
    (lambda: regression.RegressionTask(2).sample(3, 0), "L"),
    (lambda: regression.RegressionTask(2).sample_stacked(3, 4, []), "generators"),
    (lambda: regression.RegressionTask(2).sample_stacked(0, 4, [torch.Generator()]), "n_prompts"),
    (lambda: regression.RegressionTask(2, sampler="code"), "sampler"),
    (lambda: regression.RegressionTask.kms(2, sampler=None), "sampler"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_published_sampler_draws_what_the_published_code_draws():
    # Prompt inputs C C xi (covariance C Sigma C^T), isotropic queries, labels from the inputs drawn;
    # the same raw normals as the paper's sampler, so the two differ only by the factor applied.
    paper, published = (regression.RegressionTask.kms(3, 0.6, sampler=s) for s in regression.SAMPLERS)
    C = torch.linalg.cholesky(paper.covariance)
    a = paper.sample(5, 4, torch.Generator().manual_seed(3), dtype=torch.float64)
    b = published.sample(5, 4, torch.Generator().manual_seed(3), dtype=torch.float64)
    assert torch.equal(a.w, b.w)
    xi_prompt = torch.linalg.solve_triangular(C, a.tokens[..., :3].transpose(-1, -2), upper=False).transpose(-1, -2)
    assert torch.allclose(b.tokens[..., :3], xi_prompt @ (C @ C).T)
    assert torch.allclose(b.query[:, :3], torch.linalg.solve_triangular(C, a.query[:, :3].T, upper=False).T)
    noise_prompt = a.tokens[..., 3] - (a.tokens[..., :3] * a.w[:, None]).sum(-1)
    assert torch.allclose(b.tokens[..., 3] - (b.tokens[..., :3] * b.w[:, None]).sum(-1), noise_prompt)
    assert torch.allclose(b.target - (b.query[:, :3] * b.w).sum(-1), a.target - (a.query[:, :3] * a.w).sum(-1))
    big = published.sample(100_000, 2, torch.Generator().manual_seed(4), dtype=torch.float64)
    x = big.tokens[..., :3].reshape(-1, 3)
    assert torch.allclose(x.T @ x / x.shape[0], C @ paper.covariance @ C.T, atol=0.03)
    assert torch.allclose(big.query[:, :3].T @ big.query[:, :3] / 100_000, torch.eye(3, dtype=torch.float64), atol=0.02)
    assert torch.allclose(published.prompt_covariance, C @ paper.covariance @ C.T)
    assert torch.equal(published.query_covariance, torch.eye(3, dtype=torch.float64))
    assert "published" in repr(published)


def test_samplers_coincide_for_isotropic_inputs():
    a, b = (regression.RegressionTask.isotropic(3, sampler=s).sample(4, 5, torch.Generator().manual_seed(1)) for s in regression.SAMPLERS)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.query, b.query) and torch.equal(a.target, b.target)


def test_degenerate_task_samples_inputs_in_the_range():
    sigma, u = rank_four_covariance()
    task = regression.RegressionTask(5, sigma)
    batch = task.sample(2_000, 3, torch.Generator().manual_seed(0), dtype=torch.float64)
    x = batch.tokens[..., :5].reshape(-1, 5)
    assert float((x @ u).abs().max()) < 1e-6                   # no variance along the null direction
    assert float((x.T @ x / x.shape[0] - sigma).abs().max()) < 0.05


def test_covariance_of_and_noise_floor():
    assert torch.equal(regression.covariance_of("isotropic", 3), torch.eye(3, dtype=torch.float64))
    assert torch.equal(regression.covariance_of("kms", 4, 0.3), regression.kms_covariance(4, 0.3))
    assert torch.equal(regression.covariance_of("eigenvalues", 2, eigenvalues=[1.0, 0.2]),
                       torch.diag(torch.tensor([1.0, 0.2], dtype=torch.float64)))
    with pytest.raises(ValueError, match="eigenvalues: give 5 eigenvalues"):
        regression.covariance_of("eigenvalues", 5, eigenvalues=[1.0])
    assert torch.equal(regression.covariance_of("eigenvalues", 2, eigenvalues=[1.0, 0.0]),  # singular: Appendix F.3
                       torch.diag(torch.tensor([1.0, 0.0], dtype=torch.float64)))
    with pytest.raises(ValueError, match="no negative eigenvalue; change -0.5"):
        regression.covariance_of("eigenvalues", 2, eigenvalues=[1.0, -0.5])
    with pytest.raises(ValueError, match="kind"):
        regression.covariance_of("diagonal", 2)
    assert REGRESSION_TASKS["isotropic"]().noise_floor() == pytest.approx(0.1)


def _covariates_and_samplers():
    cases = []
    for name in ("gaussian", "uniform", "rademacher"):
        cases += [(name, lambda name=name: regression.RegressionTask.kms(4, 0.5, 0.3, 0.2, "paper", name)),
                  (name, lambda name=name: regression.RegressionTask.kms(4, 0.5, 0.3, 0.2, "published", name)),
                  (name, lambda name=name: regression.RegressionTask(5, rank_four_covariance()[0], 0.3, 0.2, "paper", name))]
    return cases


@pytest.mark.parametrize("name,make", _covariates_and_samplers())
def test_every_path_draws_the_prompts_of_sample_from_the_same_random_numbers(name, make):
    """sample(), sample_stacked(), stream() (queries and token chunks), token_draw (through stream()) and
    draw_inputs (the Bayes risk) turn the same standard draws into the same prompts."""
    task = make()
    n, L, d = 6, 9, task.d
    batch = task.sample(n, L, torch.Generator().manual_seed(3), dtype=torch.float64)
    stacked = task.sample_stacked(n, L, [torch.Generator().manual_seed(3)], dtype=torch.float64)
    for a, b in zip((batch.tokens, batch.query, batch.target, batch.w), (stacked.tokens, stacked.query, stacked.target, stacked.w)):
        assert torch.equal(a, b[0])
    # the stream draws w, the query entries, the query noise, then token chunks (its documented order):
    # rebuild those standard draws and hand them to sample()'s arithmetic
    g = torch.Generator().manual_seed(5)
    stream = task.stream(n, g)
    chunks = [stream.tokens(4), stream.tokens(5)]
    # (each draw into a fresh tensor of its own shape, as the stream makes them: a generator fills a strided
    # view in another order than a contiguous tensor)
    g = torch.Generator().manual_seed(5)
    w_raw = torch.randn(n, d, generator=g, dtype=torch.float64)
    query_entries = covariates.draw(task.covariates, n, d, generator=g)
    query_noise = torch.randn(n, generator=g, dtype=torch.float64)
    first = task.fill_standard_(torch.empty(n, 4, d + 1, dtype=torch.float64), g)
    second = task.fill_standard_(torch.empty(n, 5, d + 1, dtype=torch.float64), g)
    z = torch.cat([torch.cat([query_entries, query_noise[:, None]], -1)[:, None], first, second], 1)
    assembled = task._assemble(w_raw, z)
    assert torch.allclose(stream.w, assembled.w, atol=1e-14)
    assert torch.allclose(stream.query, assembled.query, atol=1e-12)
    assert torch.allclose(stream.target, assembled.target, atol=1e-12)
    assert torch.allclose(torch.cat(chunks, 1), assembled.tokens, atol=1e-12)
    # the inputs alone, as the Bayes risk draws them
    X = task.draw_inputs(n, L, torch.Generator().manual_seed(8))
    xi = covariates.draw(task.covariates, n, L, d, generator=torch.Generator().manual_seed(8))
    z = torch.cat([xi, torch.zeros(n, L, 1, dtype=torch.float64)], -1)
    assert torch.allclose(X, task._assemble(torch.zeros(n, d, dtype=torch.float64),
                                            torch.cat([z[:, :1], z], 1)).tokens[..., :d], atol=1e-12)
    # inputs in the range of a degenerate Sigma, whatever the law
    _, u = rank_four_covariance()
    if d == 5 and task.sampler == "paper":  # (the factor's last pivot is about 1e-8, not 0)
        assert float((batch.tokens[..., :d] @ u).abs().max()) < 1e-6
        assert float((stream.query[:, :d] @ u).abs().max()) < 1e-6


def test_gaussian_law_draws_what_the_course_always_drew():
    task = regression.RegressionTask.kms(5, 0.5)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(4, 5, generator=g)
    z = torch.randn(4, 8, 6, generator=g)
    expected = task._assemble(w, z, by_coordinates=True)  # the labels summed as sample() sums them on a CPU
    batch = task.sample(4, 7, torch.Generator().manual_seed(0))
    assert torch.equal(batch.tokens, expected.tokens) and torch.equal(batch.target, expected.target)


@pytest.mark.parametrize("name", ["uniform", "rademacher"])
def test_sampled_inputs_have_the_law_and_the_covariance(name):
    task = regression.RegressionTask.kms(3, 0.6, covariates=name)
    X = task.draw_inputs(2000, 100, torch.Generator().manual_seed(1)).reshape(-1, 3)
    xi = torch.linalg.solve_triangular(task.prompt_factor, X.T, upper=False).T
    assert torch.allclose(X.T @ X / X.shape[0], task.covariance, atol=0.01)
    assert abs(float((xi**4).mean()) - task.fourth_moment) < 0.01
    if name == "rademacher":
        assert torch.allclose(xi.abs(), torch.ones_like(xi), atol=1e-9)


def test_covariate_law_is_checked_and_shown():
    with pytest.raises(ValueError, match="covariates"):
        regression.RegressionTask.isotropic(3, covariates="laplace")
    assert "covariates='uniform'" in repr(regression.RegressionTask.isotropic(3, covariates="uniform"))
    assert "covariates" not in repr(regression.RegressionTask.isotropic(3))
