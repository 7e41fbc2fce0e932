"""The seeding rule: one generator seed per (seed, stream[, L]), streams kept apart, bad input named."""
import pytest
import torch

from softmax_as_linear.core import seeding


def test_the_rule_as_documented():
    assert seeding.stream_seed(327, "init") == 327
    assert seeding.stream_seed(327, "train") == 10_327
    assert seeding.stream_seed(327, "held_out") == 20_327
    assert seeding.stream_seed(327, "prompts", 50) == 40_327 * 1_000_003 + 50
    assert seeding.stream_seed(0, "bayes", 50) == 30_000 * 1_000_003 + 50


def test_streams_never_share_a_generator_seed():
    seen = {}
    for seed in (0, 1, 327, 9_999):
        for stream in seeding.STREAM_OFFSETS:
            for L in ((1, 10, 1000) if stream in seeding.PER_LENGTH_STREAMS else (None,)):
                value = seeding.stream_seed(seed, stream, L)
                assert value not in seen, (seed, stream, L, seen.get(value))
                seen[value] = (seed, stream, L)


def test_generator_draws_the_stream():
    a = torch.randn(3, generator=seeding.generator(5, "train"))
    b = torch.randn(3, generator=torch.Generator().manual_seed(10_005))
    assert torch.equal(a, b)


@pytest.mark.parametrize("call, match", [
    (lambda: seeding.stream_seed(10_000, "init"), "seed"),
    (lambda: seeding.stream_seed(-1, "init"), "seed"),
    (lambda: seeding.stream_seed(1, "dropout"), "stream"),
    (lambda: seeding.stream_seed(1, "prompts"), "L"),
    (lambda: seeding.stream_seed(1, "train", 10), "L"),
    (lambda: seeding.stream_seed(1, "prompts", 0), "L"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
