"""lstm: one LSTM layer per operator, unrolled over time as the paper does.

A layer over x (N, T, I) writes its hidden states into its output sequence (N, T, H), equal
to torch.nn.LSTM(I, H, batch_first=True). Its stages are its T cell steps: step t reads
x[:, t], h_{t-1} and c_{t-1} (from the internal sequences `<name>.hidden` and `<name>.cell`,
each (N, T-1, H), or from the initial states h0, c0 at t = 0; nothing at t = 0 without them,
meaning zeros), and writes h_t into the output sequence and into `<name>.hidden`, and c_t
into `<name>.cell` (at the last step, into the final states h_n, c_n when asked for). The
recurrence goes through `<name>.hidden` rather than the output sequence so that the output's
gradient is what its consumers give it, as torch's is. All steps share the layer's weights
and its config; one operator per layer lets different layers run on different devices
(operation parallelism, as GNMT's layer per GPU). Steps 2..T-2 declare themselves step 1
moved along time (Stage.moved), so a config's launch templates are made once per layer, not
once per step.

Dims: n (sample), h (parameter: hidden units; a part computes the i, f, g, o gates of its
hidden units and reads the whole h_{t-1} of its samples). Weights are stored gate-major so
one rect covers the four gates' rows of a hidden range: weight_ih as (4, H, I), weight_hh
as (4, H, H), bias_ih and bias_hh as (4, H) (torch's (4H, ...) reshaped).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.func import functional_call

from taskrt.geometry import Rect

from .errors import ShapeError
from .model import Model, builder
from . import workshape
from .op import PARAMETER, SAMPLE, Dim, Op, PartSpec, PartWork, Stage
from .tensor import Tensor


def _step_kind(info) -> tuple[bool, bool]:
    """What of a step's (t, steps) decides what it keeps for backward (LSTM._step branches
    on the first and the last step only): 40 steps are 3 kinds to measure, not 40."""
    t, steps = info
    return t == 0, t == steps - 1


class LSTM(Op):
    type = "lstm"

    def __init__(self, model: Model, x: Tensor, hidden_size: int, h0: Tensor | None = None,
                 c0: Tensor | None = None, return_state: bool = False,
                 name: str | None = None):
        super().__init__(model.unique_name("lstm", name))
        if x.ndim != 3:
            raise ShapeError(f"lstm '{self.name}': input '{x.name}' has shape {x.shape}; it "
                             "needs (batch, time, features).")
        if hidden_size < 1:
            raise ShapeError(f"lstm '{self.name}': hidden_size {hidden_size} must be positive.")
        batch, steps, fin = x.shape
        hid = hidden_size
        if (h0 is None) != (c0 is None):
            raise ShapeError(f"lstm '{self.name}': give both initial states h0 and c0, or "
                             "neither.")
        for s in (h0, c0):
            if s is not None and tuple(s.shape) != (batch, hid):
                raise ShapeError(f"lstm '{self.name}': initial state '{s.name}' has shape "
                                 f"{s.shape}; it must be (batch, hidden) = {(batch, hid)}.")
        self.params = {"input_size": fin, "hidden_size": hid, "steps": steps}
        self.inputs = [x] + ([h0, c0] if h0 is not None else [])
        model.new_weight(self, "weight_ih", (4, hid, fin))
        model.new_weight(self, "weight_hh", (4, hid, hid))
        model.new_weight(self, "bias_ih", (4, hid))
        model.new_weight(self, "bias_hh", (4, hid))
        y = model.new_tensor(self, (batch, steps, hid), x.dtype)
        finals = []
        if return_state:
            finals = [model.new_tensor(self, (batch, hid), x.dtype, suffix=".h_n"),
                      model.new_tensor(self, (batch, hid), x.dtype, suffix=".c_n")]
        self.dims = (Dim("n", SAMPLE, batch), Dim("h", PARAMETER, hid))
        self.labels = None          # the step stages give their rects
        hidden, cell = (Tensor(f"{self.name}.{k}", (batch, steps - 1, hid), x.dtype,
                               producer=self, requires_grad=y.requires_grad)
                        for k in ("hidden", "cell"))
        self._stages = []
        for t in range(steps):
            ins = self.inputs[:] if t == 0 else [x, hidden, cell]
            outs = [y] + ([hidden, cell] if t < steps - 1 else finals)
            # A middle step's parts are step 1's moved along time (its templates too).
            moved = (1, 1, t - 1, (t, steps)) if 2 <= t < steps - 1 else None
            self._stages.append(Stage(self, f"step{t}", ins, outs, self._step,
                                      weights=self.weights, part=self._step_part(t),
                                      type="lstm.step",    # every step does the same work
                                      state_info=_step_kind, work=_step_work,
                                      saved_state=_step_saved_bytes, moved=moved))

    def stages(self):
        return self._stages

    def _step_part(self, t: int):
        """The rects of step t's point for an (n, h) part."""
        steps, last = self.params["steps"], self.params["steps"] - 1

        def part(stage, degrees, color):
            rg = stage.ranges(degrees, color)
            (n0, n1), (h0, h1) = rg["n"], rg["h"]
            fin, hid = self.params["input_size"], self.params["hidden_size"]
            ins = [Rect((n0, t, 0), (n1, t + 1, fin))]
            if t > 0:
                ins += [Rect((n0, t - 1, 0), (n1, t, hid)), Rect((n0, t - 1, h0), (n1, t, h1))]
            elif len(stage.inputs) == 3:
                ins += [Rect((n0, 0), (n1, hid)), Rect((n0, h0), (n1, h1))]
            weights = (Rect((0, h0, 0), (4, h1, fin)), Rect((0, h0, 0), (4, h1, hid)),
                       Rect((0, h0), (4, h1)), Rect((0, h0), (4, h1)))
            outs = [Rect((n0, t, h0), (n1, t + 1, h1))]
            if t < last:
                outs += [Rect((n0, t, h0), (n1, t + 1, h1))] * 2
            else:
                outs += [Rect((n0, h0), (n1, h1))] * (len(stage.outputs) - 1)
            return PartSpec(tuple(ins), weights, tuple(outs), info=(t, steps))
        return part

    @staticmethod
    def _step(spec, inputs, weights):
        """One cell step for a part of the samples and hidden units."""
        t, steps = spec.info
        w_ih, w_hh, b_ih, b_hh = weights
        hp = w_ih.shape[1]
        x = inputs[0][:, 0]
        gates = F.linear(x, w_ih.reshape(4 * hp, -1), b_ih.reshape(-1)) + b_hh.reshape(-1)
        h_prev = c_prev = None
        if len(inputs) == 3:
            h_prev, c_prev = inputs[1], inputs[2]
            if t > 0:
                h_prev, c_prev = h_prev[:, 0], c_prev[:, 0]
        # At t = 0 without initial states, h_{-1} = 0: weight_hh is read (so it has a home
        # and update points even when T = 1) but contributes nothing and gets zero gradient.
        if h_prev is not None:
            gates = gates + F.linear(h_prev, w_hh.reshape(4 * hp, -1))
        gates = gates.reshape(x.shape[0], 4, hp)
        i, f = torch.sigmoid(gates[:, 0]), torch.sigmoid(gates[:, 1])
        g, o = torch.tanh(gates[:, 2]), torch.sigmoid(gates[:, 3])
        c = i * g if c_prev is None else f * c_prev + i * g
        h = o * torch.tanh(c)
        if t < steps - 1:
            return [h.unsqueeze(1), h.unsqueeze(1), c.unsqueeze(1)]
        return [h.unsqueeze(1), h, c][:len(spec.outputs)]

    def reference(self, inputs, weights):
        fin, hid = self.params["input_size"], self.params["hidden_size"]
        x = inputs[0]
        module = torch.nn.LSTM(fin, hid, batch_first=True, device="meta", dtype=x.dtype)
        names = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
        params = {k: w.reshape(4 * hid, *w.shape[2:]) for k, w in zip(names, weights)}
        args = (x,) if len(inputs) == 1 else (x, (inputs[1][None], inputs[2][None]))
        y, (h_n, c_n) = functional_call(module, params, args)
        return [y, h_n[0], c_n[0]][:len(self.outputs)]

    def init_weights(self, generator):
        bound = 1 / math.sqrt(self.params["hidden_size"])
        return [torch.empty(w.shape).uniform_(-bound, bound, generator=generator)
                for w in self.weights]


def _step_work(stage, phase, spec, plan):
    """LSTM._step's kernels. Forward: the input's addmm and b_hh's add, the recurrent mm and
    its add, four gate activations, the cell (i*g, or f*c + i*g) and h = o*tanh(c). Backward
    (autograd): the h gradients' sum, o's and tanh's products and derivative, the cell
    output's gradient added, the cell's products, per gate its derivative and
    select_backward (summed: 3 adds; f's only with a previous cell), each product's mm per
    wanted gradient, the biases' sums, a select_backward per sliced input (t > 0) that wants
    a gradient; w_hh's zero gradient at t = 0 without initial states. Parts whose weights
    want no gradient are counted."""
    t, steps = spec.info
    n, fin = spec.inputs[0].shape[0], spec.inputs[0].shape[2]
    hp, hid = spec.weights[1].shape[1], spec.weights[1].shape[2]
    recurrent = len(spec.inputs) == 3
    x_mm, h_mm = workshape.mm((n, fin), (fin, 4 * hp)), workshape.mm((n, hid), (hid, 4 * hp))
    if phase == "fwd":
        return PartWork(x_mm + recurrent * h_mm, 9 + 2 * recurrent + 2 * recurrent)
    if not all(plan.need_weights):
        return None
    need = plan.need_inputs
    outs = len(spec.outputs)            # y, then (hidden, cell) or the final (h_n, c_n)
    h_grads, c_out = 1 + (outs > 1), outs > 2
    k = (h_grads - 1) + 3 + c_out + 2 + (11 if recurrent else 8) + 2 + 1   # to the biases' sums
    flops = 2 * x_mm                                   # w_ih's gradient and x's
    k += need[0] * (1 + 1)                             # x's mm and select_backward
    flops -= (not need[0]) * x_mm
    if recurrent:
        k += 1 + need[1] * (1 + (t > 0)) + 1 + need[2] * (1 + (t > 0))
        flops += h_mm + need[1] * h_mm
    else:
        k += 1                                         # w_hh's zero gradient
    return PartWork(flops, k)


def _step_saved_bytes(stage, spec, input_grads, weight_grads):
    """What LSTM._step's autograd graph keeps besides the part's regions: the four gate
    activations' results (sigmoid's and tanh's) and tanh(c), each (n, hp), at every step (f's
    too at t = 0, where nothing reads it: its node is made and keeps it). The linears keep x,
    h_{t-1} and the weights, views of regions; c is an output or read only by tanh. Parts
    whose weights want no gradient, and empty parts, are measured."""
    if not all(weight_grads) or any(r.empty for r in spec.inputs[:1] + spec.weights):
        return None
    n, hp = spec.inputs[0].shape[0], spec.weights[1].shape[1]
    return 5 * n * hp * getattr(torch, stage.inputs[0].dtype).itemsize


@builder
def lstm(model: Model, x: Tensor, hidden_size: int, num_layers: int = 1, state=None,
         return_state: bool = False, name: str | None = None):
    """The output sequence (N, T, H) of a stack of LSTM layers over x (N, T, I); like
    torch.nn.LSTM(I, hidden_size, num_layers, batch_first=True)(x)[0].

    Layers are operators named `name` (one layer) or `name_l0`, `name_l1`, ... `state`
    gives each layer's initial (h0, c0), each (N, H); with return_state=True the result is
    (output, [(h_n, c_n) per layer]), like torch's (output, (h_n, c_n)) unstacked.
    """
    base = model.unique_name("lstm", name)
    if num_layers < 1:
        raise ShapeError(f"lstm '{base}': num_layers {num_layers} must be at least 1.")
    if state is not None and len(state) != num_layers:
        raise ShapeError(f"lstm '{base}': state gives {len(state)} (h0, c0) pairs for "
                         f"{num_layers} layers; give one pair per layer.")
    out, finals = x, []
    for k in range(num_layers):
        h0, c0 = state[k] if state is not None else (None, None)
        layer_name = base if num_layers == 1 else f"{base}_l{k}"
        op = model.add_op(LSTM(model, out, hidden_size, h0, c0, return_state, layer_name))
        out = op.outputs[0]
        if return_state:
            finals.append((op.outputs[1], op.outputs[2]))
    return (out, finals) if return_state else out
