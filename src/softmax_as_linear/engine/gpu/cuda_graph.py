"""A training step captured once as a CUDA graph and replayed: the same kernels and random numbers as
running it op by op, without launching some hundred kernels from Python at every step."""
from __future__ import annotations

from typing import Callable

import torch

from . import fallback


def cuda_graphed(step: Callable, sources: list, warmup: int = 3) -> Callable:
    """``step`` run eagerly ``warmup`` times on a side stream (so that every buffer exists), then
    captured once as a CUDA graph and replayed at every later call.

    Every call is a real step: capturing runs nothing, so the call that captures replays at once.
    ``sources``: what the step draws its prompts from. Each must be *graph-safe* (``graph_safe`` true): whatever
    changes from step to step lives on the device (torch generators, registered with the graph here so that each
    replay draws what the eager step would have drawn; or a step counter in a device tensor). A source that keeps its
    position in Python (a counter the graph would bake in, replaying one batch for ever) is refused with a
    ``ValueError``. Where this machine cannot capture (``cudaErrorNotSupported``:
    :func:`~softmax_as_linear.engine.gpu.fallback.is_capture_unsupported`), a warning says so and the
    steps go on op by op (an error in strict mode, :mod:`~softmax_as_linear.engine.gpu.fallback`); the returned
    function's ``captured`` says whether the graph runs. Any other error while capturing is raised.
    """
    unsafe = [type(s).__name__ for s in sources if not getattr(s, "graph_safe", False)]
    if unsafe:
        raise ValueError(f"cannot capture a step that draws from {unsafe} as a CUDA graph: its position is a Python "
                         "number, so every replay would draw the same batch")
    generators = [g for s in sources for g in getattr(s, "generators", [])]
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
            graph = torch.cuda.CUDAGraph()
            try:
                for g in generators:
                    graph.register_generator_state(g)
                with torch.cuda.graph(graph):
                    out = step()
            except RuntimeError as error:
                if not fallback.is_capture_unsupported(error):
                    raise
                fallback.fall_back("capturing the training step as a CUDA graph", error, "going on op by op")
                graph = False
                return step()
            run.captured = True
        graph.replay()
        return out

    run.captured = False
    return run
