"""Chapter 7's checkers against wrong implementations a student might write (written here, not taken from the
checker's own list), each told what is wrong; and the references against a direct computation."""
import numpy as np
import torch

from softmax_as_linear.exercises import chapter7

from helpers import diagnosis as _message


def test_the_references_agree_with_the_formulas_written_out():
    g = torch.Generator().manual_seed(0)
    B, U, V = (torch.randn(3, 3, generator=g, dtype=torch.float64) for _ in range(3))
    cov = B @ B.T
    A = torch.eye(3, dtype=torch.float64) + V @ cov @ U
    assert torch.allclose(chapter7.next_covariance(cov, U, V), A @ cov @ A.T)
    tokens = torch.randn(5, 3, generator=g, dtype=torch.float64)
    expected = torch.stack([z + V @ (torch.softmax(tokens @ (U @ z), 0) @ tokens) for z in tokens])
    assert torch.allclose(chapter7.residual_attention_layer(tokens, U, V), expected)


def test_next_covariance_without_the_residual():
    def no_residual(cov, U, V):
        A = V @ cov @ U
        return A @ cov @ A.T
    assert "residual is missing" in _message(no_residual, "next_covariance")


def test_next_covariance_multiplied_by_A_once():
    def one_sided(cov, U, V):
        return cov + V @ cov @ U @ cov
    assert "one side only" in _message(one_sided, "next_covariance")


def test_next_covariance_with_A_on_the_wrong_sides_in_numpy():
    def swapped_sides(cov, U, V):
        cov, U, V = (np.asarray(a) for a in (cov, U, V))
        A = np.eye(len(cov)) + V @ cov @ U
        return A.T @ cov @ A
    assert "A^T Gamma A" in _message(swapped_sides, "next_covariance")


def test_next_covariance_with_the_score_matrix_transposed():
    def transposed_u(cov, U, V):
        A = torch.eye(cov.shape[0], dtype=cov.dtype) + V @ cov @ U.T
        return A @ cov @ A.T
    assert "U transposed" in _message(transposed_u, "next_covariance")


def test_next_covariance_with_u_and_v_swapped():
    def swapped(cov, U, V):
        A = torch.eye(cov.shape[0], dtype=cov.dtype) + U @ cov @ V
        return A @ cov @ A.T
    assert "swapped" in _message(swapped, "next_covariance")


def test_residual_layer_without_the_residual():
    def attention_only(tokens, U, V):
        w = torch.softmax(tokens @ U.T @ tokens.T, dim=1)
        return w @ tokens @ V.T
    assert "residual is missing" in _message(attention_only, "residual_attention_layer")


def test_residual_layer_where_each_token_sees_itself_only():
    def alone(tokens, U, V):
        return torch.stack([z + V @ z for z in tokens])
    assert "attends to itself only" in _message(alone, "residual_attention_layer")


def test_residual_layer_with_the_score_transposed():
    def transposed(tokens, U, V):
        return torch.stack([z + V @ (torch.softmax(tokens @ (U.T @ z), 0) @ tokens) for z in tokens])
    assert "U transposed" in _message(transposed, "residual_attention_layer")


def test_residual_layer_normalised_over_the_wrong_axis():
    def columns(tokens, U, V):
        scores = tokens @ U.T @ tokens.T               # row i, column j: z_j^T U z_i
        return tokens + torch.softmax(scores, dim=0) @ tokens @ V.T
    assert "wrong axis" in _message(columns, "residual_attention_layer")


def test_residual_layer_with_raw_exponentials_overflows():
    def naive(tokens, U, V):
        e = torch.exp(tokens @ U.T @ tokens.T)
        return tokens + (e / e.sum(1, keepdim=True)) @ tokens @ V.T
    assert "subtract, in each row, the largest score" in _message(naive, "residual_attention_layer")


def test_residual_layer_updating_the_first_token_only_has_the_wrong_shape():
    def first(tokens, U, V):
        z = tokens[0]
        return z + V @ (torch.softmax(tokens @ (U @ z), 0) @ tokens)
    assert "expected shape (6, 3)" in _message(first, "residual_attention_layer")
