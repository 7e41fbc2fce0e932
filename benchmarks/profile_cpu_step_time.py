"""The CPU step of ``train`` on the paper sweep (one seed, 38 runs; 1 compute thread + the data thread): wall ms per
step and thread CPU ms per step (compute thread, data thread), for whichever version of the engine is on PYTHONPATH
(the step interface, or the step function of commits before it), so that two versions can be run back to back:

    PYTHONPATH=src python benchmarks/profile_cpu_step_time.py [STEPS] [ROUNDS]

On a loaded machine compare thread CPU times: on an idle 2-core machine the busier thread sets the step.
"""
import sys
import time

import torch

from softmax_as_linear.engine.batched import SweepModel
from softmax_as_linear.engine.data import SweepData
from softmax_as_linear.experiments.presets import sweep_config, sweep_seeds

torch.set_num_threads(1)
steps, rounds = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (15, 3)
config = sweep_config("paper", seeds=sweep_seeds(1))
dev = torch.device("cpu")
best = None
for _ in range(rounds):
    sweep = SweepModel(config, dev, None)
    data = SweepData(config, sweep.task, dev, sweep.dtype, prefetch=True, prepare=sweep.prepare)
    spent = [0.0]
    draw = data._draw_prepared

    def timed():
        t = time.thread_time()
        try:
            return draw()
        finally:
            spent[0] += time.thread_time() - t
    data._draw_prepared = timed
    try:
        from softmax_as_linear.engine.stepper import make_optimizer
        from softmax_as_linear.engine.tensor_step import TensorStepper
        stepper = TensorStepper(sweep, data, make_optimizer(sweep))
        step, version = stepper.step, "engine"
    except ImportError:
        from softmax_as_linear.engine.train import make_step
        opt = torch.optim.SGD(list(sweep.params.values()), lr=config.lr)
        step = make_step(sweep, data, opt, torch.ones(sweep.shape, dtype=torch.bool), torch.full(sweep.shape, -1),
                         torch.tensor(0))
        version = "cb3baed"
    for _ in range(3):
        step()
    spent[0], wall, cpu = 0.0, time.perf_counter(), time.thread_time()
    for _ in range(steps):
        step()
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    data.close()
    row = (1e3 * wall / steps, 1e3 * cpu / steps, 1e3 * spent[0] / steps)
    best = row if best is None else tuple(min(a, b) for a, b in zip(best, row))
print(f"{version}: wall {best[0]:.2f} ms/step, compute thread {best[1]:.2f} ms, data thread {best[2]:.2f} ms "
      f"(best of {rounds} x {steps} steps); idle-machine estimate {max(best[1], best[2]):.2f} ms/step")
