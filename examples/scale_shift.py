"""A custom partitioned operator written outside the package: y = x * gamma + beta per feature.

Dims: n (sample: the batch), f (parameter: features; splitting it splits gamma and beta).
This file is the worked example of docs/custom_ops.md; tests/test_custom_op.py runs it under
every legal configuration against plain PyTorch.
"""
import torch

from parallel_ops import PARAMETER, SAMPLE, Dim, Model, Op, builder


class ScaleShift(Op):
    type = "scale_shift"

    def __init__(self, model: Model, x, name=None):
        super().__init__(model.unique_name("scale_shift", name))
        n, f = x.shape
        self.inputs = [x]
        model.new_weight(self, "gamma", (f,))       # weights first, then outputs
        model.new_weight(self, "beta", (f,))
        model.new_tensor(self, (n, f))
        self.dims = (Dim("n", SAMPLE, n), Dim("f", PARAMETER, f))
        self.labels = {"inputs": (("n", "f"),),       # which dim splits each axis
                       "weights": (("f",), ("f",)),
                       "outputs": (("n", "f"),)}

    def forward(self, spec, inputs, weights):        # one part, plain PyTorch
        (x,), (gamma, beta) = inputs, weights
        return [x * gamma + beta]

    def reference(self, inputs, weights):            # the whole op, for tests
        return [inputs[0] * weights[0] + weights[1]]

    def init_weights(self, generator):                # ones and zeros, like LayerNorm's affine
        f = self.weights[0].shape[0]
        return [torch.ones(f), torch.zeros(f)]


@builder
def scale_shift(model: Model, x, name=None):
    """y = x * gamma + beta with learnable per-feature gamma and beta."""
    return model.add_op(ScaleShift(model, x, name)).outputs[0]
