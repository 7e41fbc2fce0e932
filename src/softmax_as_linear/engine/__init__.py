"""The training engine: a sweep's settings and files, the training loop and its step interface, the reference
trainer every step is checked against, the batched model and data, and the final evaluation; the GPU's
optimisations are in :mod:`~softmax_as_linear.engine.gpu`."""
