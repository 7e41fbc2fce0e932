"""The training engine: a sweep's settings and files, its batched model and data, the loop, the GPU
kernel and graph, and the final evaluation."""
