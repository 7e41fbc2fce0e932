"""Chapter 7's regression figure: the four models, the three references and the warm start, one trace each."""
import numpy as np

from softmax_as_linear.figures.depth_regression import depth_risk_figure


def test_the_figure_holds_every_model_and_reference():
    lengths = [10, 20, 40]
    models = ("softmax_1", "softmax_2", "linear_1", "linear_2")
    summary = {"lengths": lengths, "seeds": [327, 0], "mean": {m: np.full(3, 0.2) for m in models},
               "se": {m: np.full(3, 0.01) for m in models}}
    refs = {k: [0.3, 0.2, 0.1] for k in ("optimal_linear", "pgd_2", "bayes")}
    names = [trace.name for trace in depth_risk_figure(summary, refs, np.full((2, 3), 0.15)).data]
    assert len(names) == 8 and "softmax, 2 layers, from the linear weights" in names
    assert len(depth_risk_figure(summary, refs).data) == 7
