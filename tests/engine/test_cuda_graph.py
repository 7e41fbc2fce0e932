"""The CUDA-graph wrapper's fallback, on any machine (CUDA's stream and graph stood in for): only a capture that
this machine cannot do (cudaErrorNotSupported) goes on op by op, with a warning, an error in strict mode; any other
error while capturing is raised."""
import contextlib

import pytest
import torch

from softmax_as_linear.engine.gpu import cuda_graph, fallback


def _accelerator_error(code, text):
    error = torch.AcceleratorError(text)
    error.error_code = code  # what PyTorch sets from the cudaError_t
    return error


NOT_SUPPORTED = _accelerator_error(801, "CUDA error: operation not supported")
OLD_TORCH_NOT_SUPPORTED = RuntimeError("CUDA error: operation not supported")  # PyTorch < 2.8: no error code
CAPTURE_MISUSE = _accelerator_error(900, "CUDA error: operation not permitted when stream is capturing")
SAME_TEXT_OTHER_CODE = _accelerator_error(900, "operation not supported while capturing")
OTHER_TEXT = RuntimeError("this dtype is not supported")


@pytest.mark.parametrize("error, unsupported", [
    (NOT_SUPPORTED, True), (OLD_TORCH_NOT_SUPPORTED, True), (CAPTURE_MISUSE, False), (SAME_TEXT_OTHER_CODE, False),
    (OTHER_TEXT, False), (ValueError("CUDA error: operation not supported"), False)])
def test_only_cuda_error_not_supported_means_the_machine_cannot_capture(error, unsupported):
    assert fallback.is_capture_unsupported(error) is unsupported


def _capture_failing_with(monkeypatch, error):
    """torch.cuda's streams and graphs stood in for; entering the capture raises ``error``."""
    class Graph:
        def register_generator_state(self, g):
            pass

        def replay(self):
            raise AssertionError("a failed capture must not be replayed")

    def graph(g):
        raise error

    class Stream:
        def wait_stream(self, other):
            pass

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", Stream)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", graph)


class _Source:
    graph_safe = True


@pytest.mark.parametrize("error", [NOT_SUPPORTED, OLD_TORCH_NOT_SUPPORTED])
def test_a_machine_that_cannot_capture_goes_on_op_by_op_with_a_warning(monkeypatch, error):
    _capture_failing_with(monkeypatch, error)
    monkeypatch.delenv(fallback.STRICT_ENV, raising=False)
    steps = []
    run = cuda_graph.cuda_graphed(lambda: steps.append(1) or len(steps), [_Source()], warmup=2)
    assert [run(), run()] == [1, 2]  # the warm-up steps
    with pytest.warns(UserWarning, match="CUDA graph does not run on this machine.*going on op by op"):
        assert run() == 3
    assert run() == 4 and not run.captured  # the path records no "+graph"


@pytest.mark.parametrize("error", [CAPTURE_MISUSE, SAME_TEXT_OTHER_CODE, OTHER_TEXT])
def test_any_other_error_while_capturing_is_raised(monkeypatch, error):
    _capture_failing_with(monkeypatch, error)
    run = cuda_graph.cuda_graphed(lambda: None, [_Source()], warmup=0)
    with pytest.raises(RuntimeError) as raised:
        run()
    assert raised.value is error


def test_strict_mode_turns_the_fallback_into_an_error(monkeypatch):
    _capture_failing_with(monkeypatch, NOT_SUPPORTED)
    monkeypatch.setenv(fallback.STRICT_ENV, "1")
    run = cuda_graph.cuda_graphed(lambda: None, [_Source()], warmup=0)
    with pytest.raises(RuntimeError, match="refused"):
        run()
