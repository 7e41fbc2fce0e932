"""The GPU code of the engine, which a reader of the training loop can leave aside.

* :mod:`.prompt_kernel`: the training step with the prompts drawn inside a Triton kernel (``rng="philox"``), its
  kernels in :mod:`.philox`, :mod:`.attention_sums` and :mod:`.sgd`, and :mod:`.kernel_step`, its stepper;
* :mod:`.counter_stream`: the same counter-based prompt stream as plain tensors (the kernel's reference, and the
  stream wherever the kernel does not run);
* :mod:`.fused_softmax`: the softmax part of the tensor formulas as one Triton kernel;
* :mod:`.cuda_graph`: a step captured once as a CUDA graph and replayed;
* :mod:`.fallback`: which errors mean "not available here", and the strict mode that makes them errors.

Everything here is an optimisation of :class:`~softmax_as_linear.engine.tensor_step.TensorStepper`'s step, checked
against :mod:`~softmax_as_linear.engine.reference` by ``tests/engine/test_paths.py``.
"""
