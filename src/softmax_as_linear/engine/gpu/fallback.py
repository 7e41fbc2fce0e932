"""When a GPU feature does not run here: the errors that mean "not available on this machine", and the strict mode
that turns every fallback into an error.

A feature that is merely unavailable (no Triton, an old driver, a GPU its compiler does not support) lets training
go on another way, with a warning, and the result's ``engine_path`` names the way that ran. Any other exception is
a bug and is raised. With the environment variable ``SOFTMAX_AS_LINEAR_STRICT=1`` (the tests' setting for paths
they ask for) even an unavailable feature raises.
"""
from __future__ import annotations

import os
import warnings

STRICT_ENV = "SOFTMAX_AS_LINEAR_STRICT"


def strict() -> bool:
    """Whether fallbacks are errors (``SOFTMAX_AS_LINEAR_STRICT=1``)."""
    return os.environ.get(STRICT_ENV, "0") not in ("", "0")


def kernel_unavailable_errors() -> tuple[type[BaseException], ...]:
    """What compiling or launching a Triton kernel raises when this machine cannot run it: Triton's compilation
    errors, a kernel that needs more registers or shared memory than the GPU has, a missing compiler or library."""
    errors: list[type[BaseException]] = [ImportError]
    try:
        from triton.compiler.errors import CompilationError
        from triton.runtime.errors import OutOfResources

        errors += [CompilationError, OutOfResources]
        from triton.runtime.errors import PTXASError

        errors.append(PTXASError)
    except ImportError:
        pass
    return tuple(errors)


def is_driver_error(error: BaseException) -> bool:
    """A ``RuntimeError`` that Triton raises for the CUDA driver (its messages start with ``Triton Error``)."""
    return isinstance(error, RuntimeError) and str(error).startswith("Triton Error")


#: ``cudaErrorNotSupported``, what ``cudaStreamBeginCapture`` returns where the driver or the GPU (some virtualised or
#: partitioned GPUs, old drivers) cannot capture a graph; CUDA's text for it is "operation not supported".
CUDA_ERROR_NOT_SUPPORTED = 801


def is_capture_unsupported(error: BaseException) -> bool:
    """Whether capturing a CUDA graph failed because this machine cannot capture (``cudaErrorNotSupported``), not
    because the captured step did something a graph forbids (a synchronisation: ``cudaErrorStreamCaptureUnsupported``,
    900; an invalidated capture, 901), which is a bug.

    PyTorch 2.8 and later raise ``torch.AcceleratorError`` carrying the CUDA error code (``error_code``): the code
    decides. Older versions raise a plain ``RuntimeError`` whose message is the only record of the code; there, CUDA's
    own text for code 801 (``CUDA error: operation not supported``) is matched, and nothing looser.
    """
    if not isinstance(error, RuntimeError):
        return False
    code = getattr(error, "error_code", None)
    if code is not None:
        return int(code) == CUDA_ERROR_NOT_SUPPORTED
    return "CUDA error: operation not supported" in str(error)


def fall_back(what: str, error: BaseException, instead: str) -> None:
    """Warn that ``what`` does not run here and ``instead`` is used; in strict mode raise instead."""
    message = f"{what} does not run on this machine ({type(error).__name__}: {str(error)[:300]}); {instead}"
    if strict():
        raise RuntimeError(f"{message} -- refused: {STRICT_ENV}=1") from error
    warnings.warn(message, stacklevel=3)
