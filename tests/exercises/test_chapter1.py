"""Chapter 1's checkers against wrong implementations a student might write (written here, not taken from the
checker's own list), each told what is wrong."""
import numpy as np
import torch

from helpers import diagnosis as _message


def test_softmax_without_the_largest_score_subtracted_overflows():
    def unstable(tokens, query, U, V):
        e = torch.exp(tokens @ U @ query)
        return V @ ((e / e.sum()) @ tokens)
    assert "subtract the largest score" in _message(unstable, "softmax_attention")


def test_softmax_with_the_score_read_the_other_way():
    def swapped(tokens, query, U, V):
        return V @ (torch.softmax(query @ U @ tokens.T, 0) @ tokens)
    assert "U transposed" in _message(swapped, "softmax_attention")


def test_softmax_weights_left_unnormalised():
    def unnormalised(tokens, query, U, V):
        return V @ (torch.exp(tokens @ U @ query) @ tokens)
    assert "do not sum to one" in _message(unnormalised, "softmax_attention")


def test_softmax_with_v_on_the_wrong_side_in_numpy():
    def right_multiplied(tokens, query, U, V):
        t, q, U, V = (np.asarray(a) for a in (tokens, query, U, V))
        s = t @ U @ q
        w = np.exp(s - s.max())
        return (w / w.sum()) @ t @ V
    assert "V transposed" in _message(right_multiplied, "softmax_attention")


def test_softmax_returning_every_token_has_the_wrong_shape():
    def per_token(tokens, query, U, V):
        w = torch.softmax(tokens @ U @ query, 0)
        return (w[:, None] * tokens) @ V.T
    assert "expected shape (3,)" in _message(per_token, "softmax_attention")


def test_linear_attention_without_the_average():
    def summed(tokens, query, U, V):
        return V @ ((tokens @ U @ query) @ tokens)
    assert "without dividing by L" in _message(summed, "linear_attention")


def test_linear_attention_with_a_sign_or_a_factor_of_two():
    assert "sign is flipped" in _message(lambda t, q, U, V: -V @ ((t @ U @ q) @ t) / len(t), "linear_attention")
    assert "factor of two" in _message(lambda t, q, U, V: V @ ((t @ U @ q) @ t) / (2 * len(t)), "linear_attention")


def test_linear_attention_written_as_softmax():
    def softmax(tokens, query, U, V):
        return V @ (torch.softmax(tokens @ U @ query, 0) @ tokens)
    assert "not by its exponential" in _message(softmax, "linear_attention")
