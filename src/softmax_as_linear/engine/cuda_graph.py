"""A training step captured once as a CUDA graph and replayed: the same kernels and random numbers as
running it op by op, without launching some hundred kernels from Python at every step."""
from __future__ import annotations

import warnings
from typing import Callable

import torch


def cuda_graphed(step: Callable, generators: list[torch.Generator], warmup: int = 3) -> Callable:
    """``step`` run eagerly ``warmup`` times on a side stream (so that every buffer exists), then
    captured once as a CUDA graph and replayed at every later call.

    Every call is a real step: capturing runs nothing, so the call that captures replays at once.
    The data generators are registered with the graph, so each replay draws what the eager step
    would have drawn and advances the generators as it would. Where capture fails (an old driver,
    say), a warning says so and the steps go on op by op.
    """
    calls, graph, out = 0, None, None
    side = torch.cuda.Stream()

    def run():
        nonlocal calls, graph, out
        if graph is False:
            return step()
        if graph is None and calls < warmup:
            calls += 1
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                result = step()
            torch.cuda.current_stream().wait_stream(side)
            return result
        if graph is None:
            try:
                graph = torch.cuda.CUDAGraph()
                for g in generators:
                    graph.register_generator_state(g)
                with torch.cuda.graph(graph):
                    out = step()
            except (RuntimeError, AttributeError) as error:
                warnings.warn(f"capturing the training step as a CUDA graph failed ({error}); going on op by op")
                graph = False
                return step()
        graph.replay()
        return out

    return run
