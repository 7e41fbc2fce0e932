"""The paper's experiments: named presets, the data of every figure and where its result file lives,
the reproduction, and trained runs read against the theory."""
