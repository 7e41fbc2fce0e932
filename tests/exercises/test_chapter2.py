"""Chapter 2's checkers against wrong implementations a student might write (written here, not taken from the
checker's own list), each told what is wrong."""
import numpy as np
import torch

from softmax_as_linear import exercises

from helpers import diagnosis as _message


def test_the_reference_solutions_of_the_chapter_pass():
    def gaussian_attention(mean, cov, query, U, V):
        return V @ (mean + cov @ (U @ query))

    def tilted_covariance(tokens, u):
        a = torch.softmax(tokens @ u, dim=0)
        centred = tokens - a @ tokens
        return (a[:, None] * centred).T @ centred
    assert exercises.result(gaussian_attention).status == "passed"
    assert exercises.result(tilted_covariance).status == "passed"


def test_gaussian_attention_with_the_query_on_the_left_of_u():
    def row_vector(mean, cov, query, U, V):
        return V @ (mean + cov @ (query @ U))          # z^T U read as U z
    assert "U transposed" in _message(row_vector, "gaussian_attention")


def test_gaussian_attention_with_the_inverse_covariance_in_numpy():
    def precision(mean, cov, query, U, V):
        m, G, z, U, V = (np.asarray(a) for a in (mean, cov, query, U, V))
        return V @ (m + np.linalg.inv(G) @ U @ z)
    assert "not by its inverse" in _message(precision, "gaussian_attention")


def test_gaussian_attention_for_centred_tokens_only():
    def centred(mean, cov, query, U, V):
        return V @ cov @ U @ query
    assert "mean m is missing" in _message(centred, "gaussian_attention")


def test_gaussian_attention_returning_the_tilted_mean():
    def tilted_mean(mean, cov, query, U, V):
        return mean + torch.einsum("ij,jk,k->i", cov, U, query)
    assert "V applied to that mean" in _message(tilted_mean, "gaussian_attention")


def test_gaussian_attention_written_as_linear_attention():
    def second_moment(mean, cov, query, U, V):
        return V @ (cov + mean[:, None] * mean[None, :]) @ U @ query
    assert "normalised linear attention" in _message(second_moment, "gaussian_attention")


def test_gaussian_attention_with_u_and_gamma_swapped():
    def swapped(mean, cov, query, U, V):
        return V @ mean + V @ U @ cov @ query
    assert "in this order" in _message(swapped, "gaussian_attention")


def test_gaussian_attention_with_a_flipped_sign():
    assert "sign is flipped" in _message(lambda m, G, z, U, V: -V @ (m + G @ U @ z), "gaussian_attention")


def test_tilted_covariance_without_subtracting_the_largest_score_overflows():
    def unstable(tokens, u):
        e = torch.exp(tokens @ u)
        a = e / e.sum()
        c = tokens - a @ tokens
        return (a[:, None] * c).T @ c
    assert "subtract the largest score" in _message(unstable, "tilted_covariance")


def test_tilted_covariance_centred_at_the_sample_mean():
    def sample_mean(tokens, u):
        a = torch.softmax(tokens @ u, 0)
        c = tokens - tokens.mean(0)
        return (a[:, None] * c).T @ c
    assert "plain mean" in _message(sample_mean, "tilted_covariance")


def test_tilted_covariance_as_a_second_moment():
    def second_moment(tokens, u):
        a = torch.softmax(tokens @ u, 0)
        return torch.einsum("i,ij,ik->jk", a, tokens, tokens)
    assert "second moment" in _message(second_moment, "tilted_covariance")


def test_tilted_covariance_with_the_weights_on_both_sides():
    def twice(tokens, u):
        a = torch.softmax(tokens @ u, 0)[:, None]
        c = tokens - (a * tokens).sum(0)
        return (a * c).T @ (a * c)
    assert "weighted by a_i squared" in _message(twice, "tilted_covariance")


def test_tilted_covariance_ignoring_the_weights_in_numpy():
    def unweighted(tokens, u):
        return np.cov(np.asarray(tokens).T, bias=True).reshape(tokens.shape[1], tokens.shape[1])
    assert "ignores the softmax weights" in _message(unweighted, "tilted_covariance")


def test_tilted_covariance_with_unnormalised_weights():
    def unnormalised(tokens, u):
        a = torch.softmax(tokens @ u, 0)
        c = tokens - a @ tokens
        return (torch.exp(tokens @ u)[:, None] * c).T @ c
    assert "do not sum to one" in _message(unnormalised, "tilted_covariance")
