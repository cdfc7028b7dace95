"""Lowering: (model, strategy, machine, optimizer) -> the launches of one training iteration.

Order: forward launches of every stage in program order (the loss stages write the
gradient of the logits), backward launches in reverse order, one update launch per
trainable weight, and a launch moving the loss to device 0. Gradient regions are named
`<tensor>@grad` and only ever receive Red+ contributions (halos and replicas sum).

Where data lives before an iteration (the plan's initial state):
  inputs   every (rect, device) a forward part reads, so the data loader writes each part
           straight to the devices that need it;
  weights  the points of their update launch (one per distinct (device, part)); weights
           without an update use the parts their first user reads. The update leaves them
           there, so the same graph replays every iteration.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from taskrt import IndexLaunch, Machine, Rect, Region, RegionRequirement
from taskrt.privilege import RED, RW, R, WD

from .config import ParallelConfig, data_parallel, validate
from .errors import ConfigError
from .model import Model
from .op import Op
from .tasks import (DIN, DOUT, DW, IN, OUT, W, StageArgs, backward_task, forward_task,
                    read_task, update_task)
from .tensor import Tensor


@dataclass
class Lowered:
    launches: list[IndexLaunch]
    initial: dict[Region, list[tuple[Rect, int]]]
    regions: dict[str, Region]
    configs: dict[str, ParallelConfig]
    loss_region: Region | None = None
    state_regions: dict[str, list[Region]] = field(default_factory=dict)  # weight -> opt state


class _Lowering:
    def __init__(self, model: Model, strategy: Mapping[str, ParallelConfig] | None,
                 machine: Machine, optimizer, training: bool):
        self.model, self.machine, self.optimizer, self.training = model, machine, optimizer, training
        self.regions: dict[str, Region] = {}
        self.launches: list[IndexLaunch] = []
        self.initial: dict[str, dict[tuple[Rect, int], None]] = {}
        self.has_grad: set[str] = set()
        self.forward_launch: dict[str, IndexLaunch] = {}
        self.configs = self._configs(strategy or {})

    def _configs(self, strategy) -> dict[str, ParallelConfig]:
        names = {o.name for o in self.model.ops}
        unknown = sorted(set(strategy) - names)
        if unknown:
            raise ConfigError(f"Strategy names operators {unknown} that model "
                              f"'{self.model.name}' does not have; its operators include "
                              f"{sorted(names)[:8]}.")
        out = {}
        for op in self.model.ops:
            cfg = strategy.get(op.name) or data_parallel(op, self.machine)
            validate(op, cfg, self.machine)
            out[op.name] = cfg
        return out

    def region(self, t: Tensor, grad: bool = False) -> Region:
        name = t.grad_name if grad else t.name
        r = self.regions.get(name)
        if r is None:
            r = self.regions[name] = Region(name, t.shape, t.dtype)
        return r

    def _initial(self, t: Tensor, rect: Rect, device: int) -> None:
        self.initial.setdefault(t.name, {})[(rect, device)] = None

    def _require(self, reqs: list, layout: list, tensors, rects, slot: str, privilege,
                 grad: bool = False, only=None) -> None:
        """Append, in order, a requirement on each tensor's non-empty rect (its gradient with
        `grad`; only where only[i] is true, when given) and the task argument slot it fills."""
        for i, (t, r) in enumerate(zip(tensors, rects)):
            if not r.empty and (only is None or only[i]):
                reqs.append(RegionRequirement(self.region(t, grad=grad), r, privilege))
                layout.append((slot, i))

    # -- forward ---------------------------------------------------------------------------
    def _points(self, stage: Op, cfg: ParallelConfig):
        degrees = cfg.aligned(stage.parent or stage)
        launch_colors = IndexLaunch("_", None, degrees, lambda c: ()).colors
        specs = [stage.part(degrees, c) for c in launch_colors]
        devices = list(cfg.devices)
        if not stage.replicated:
            return degrees, specs, devices
        seen, keep_specs, keep_devs = set(), [], []
        for s, d in zip(specs, devices):
            key = (d, s.outputs)
            if key not in seen:
                seen.add(key)
                keep_specs.append(s)
                keep_devs.append(d)
        return (len(keep_specs),), keep_specs, keep_devs

    def lower_forward(self, op: Op, stage: Op) -> None:
        cfg = self.configs[op.name]
        domain, specs, devices = self._points(stage, cfg)
        grad = self.training and stage.differentiable and (
            any(t.requires_grad for t in stage.inputs + stage.weights))
        input_grads = tuple(self.training and t.requires_grad for t in stage.inputs)
        weight_grads = tuple(self.training and w.requires_grad for w in stage.weights)
        colors = IndexLaunch("_", None, domain, lambda c: ()).colors
        spec_of, layout_of, reqs_of = {}, {}, {}
        for c, spec, dev in zip(colors, specs, devices):
            reqs, layout = [], []
            for i, (t, r) in enumerate(zip(stage.inputs, spec.inputs)):
                if not r.empty:
                    reqs.append(RegionRequirement(self.region(t), r, R))
                    layout.append((IN, i))
                    if t in self.model.inputs:
                        self._initial(t, r, dev)
            self._require(reqs, layout, stage.weights, spec.weights, W, R)
            for i, (t, r) in enumerate(zip(stage.outputs, spec.outputs)):
                if not r.empty:
                    priv = (RW if (stage.replicated and t.is_weight)
                            else RED if stage.output_partial(spec, i) else WD)
                    reqs.append(RegionRequirement(self.region(t), r, priv))
                    layout.append((OUT, i))
                    if t.is_weight:
                        self._initial(t, r, dev)
                    if t.name.endswith("@grad"):
                        self.has_grad.add(t.name[:-5])
            spec_of[c], layout_of[c], reqs_of[c] = spec, tuple(layout), tuple(reqs)
        args = StageArgs(stage, spec_of, layout_of, grad, input_grads, weight_grads,
                         self.training)
        launch = IndexLaunch(f"{stage.name}/fwd", forward_task, domain, reqs_of.__getitem__,
                             devices=devices, args=args, cost_tag=stage.cost_tag + ("fwd",),
                             replicas=stage.replicated)
        self.launches.append(launch)
        self.forward_launch[stage.name] = launch

    # -- backward --------------------------------------------------------------------------
    def lower_backward(self, op: Op, stage: Op) -> None:
        fwd = self.forward_launch[stage.name]
        a: StageArgs = fwd.args
        if not a.grad:
            return
        outs_with_grad = [t.name in self.has_grad for t in stage.outputs]
        if not any(outs_with_grad):
            return
        reqs_of, layout_of = {}, {}
        for c in fwd.colors:
            spec = a.specs[c]
            reqs, layout = [], []
            self._require(reqs, layout, stage.outputs, spec.outputs, DOUT, R, grad=True,
                          only=outs_with_grad)
            # Reads of the saved inputs and weights: no data moves (they are already on
            # this device), but later writers must wait for this task.
            self._require(reqs, layout, stage.inputs, spec.inputs, IN, R)
            self._require(reqs, layout, stage.weights, spec.weights, W, R)
            self._require(reqs, layout, stage.inputs, spec.inputs, DIN, RED, grad=True,
                          only=a.input_grads)
            self._require(reqs, layout, stage.weights, spec.weights, DW, RED, grad=True,
                          only=a.weight_grads)
            reqs_of[c], layout_of[c] = tuple(reqs), tuple(layout)
        for t in stage.inputs:
            if t.requires_grad:
                self.has_grad.add(t.name)
        for w in stage.weights:
            if w.requires_grad:
                self.has_grad.add(w.name)
        args = StageArgs(stage, a.specs, layout_of, True, a.input_grads, a.weight_grads,
                         self.training)
        self.launches.append(IndexLaunch(
            f"{stage.name}/bwd", backward_task, fwd.domain, reqs_of.__getitem__,
            devices=fwd.devices, args=args, cost_tag=stage.cost_tag + ("bwd",),
            state_from=fwd.name))

    # -- update ----------------------------------------------------------------------------
    def lower_update(self, w, lowered_states: dict) -> None:
        owner = w.owner
        stage = next(s for s in owner.stages() if w in s.weights)
        k = stage.weights.index(w)
        fwd = self.forward_launch[stage.name]
        pieces = []
        for c, dev in zip(fwd.colors, fwd.devices):
            r = fwd.args.specs[c].weights[k]
            if not r.empty and (r, dev) not in pieces:
                pieces.append((r, dev))
        states = [Region(f"{w.name}@{s}", w.shape, w.dtype) for s in self.optimizer.state_names]
        lowered_states[w.name] = states
        for s in states:
            self.regions[s.name] = s
        for r, dev in pieces:
            self._initial(w, r, dev)
            for s in states:
                self.initial.setdefault(s.name, {})[(r, dev)] = None

        def projection(c, pieces=pieces, w=w, states=states):
            r, _ = pieces[c[0]]
            return (RegionRequirement(self.region(w), r, RW),
                    RegionRequirement(self.region(w, grad=True), r, R),
                    *(RegionRequirement(s, r, RW) for s in states))
        self.launches.append(IndexLaunch(
            f"{w.name}/update", update_task, (len(pieces),), projection,
            devices=[d for _, d in pieces], args=self.optimizer,
            cost_tag=(type(self.optimizer).__name__.lower(), "update"), replicas=True))

    def _weights_home(self) -> None:
        """Weights nobody updates live where their first user reads them."""
        for w in self.model.weights:
            if w.name in self.initial:
                continue
            for launch in self.launches:
                found = False
                for c, dev in zip(launch.colors, launch.devices):
                    for req in launch.requirements(c):
                        if req.region.name == w.name:
                            self._initial(w, req.rect, dev)
                            found = True
                if found:
                    break

    def run(self) -> Lowered:
        model = self.model
        for op in model.ops:
            op.training = self.training
            for stage in op.stages():
                stage.training = self.training
                self.lower_forward(op, stage)
        loss_region = None
        if model.loss_op is not None:
            loss_t = model.loss_op.loss_tensor
            loss_region = self.region(loss_t)
            self.launches.append(IndexLaunch(
                "loss/read", read_task, (1,),
                lambda c: (RegionRequirement(loss_region, loss_region.rect, R),),
                devices=[0], cost_tag=("read",)))
        states: dict = {}
        if self.training:
            for op in reversed(model.ops):
                for stage in reversed(op.stages()):
                    self.lower_backward(op, stage)
            if self.optimizer is not None:
                for w in model.weights:
                    if w.requires_grad and w.name in self.has_grad:
                        self.lower_update(w, states)
        self._weights_home()
        initial = {self.regions[name]: list(pieces) for name, pieces in self.initial.items()}
        return Lowered(self.launches, initial, self.regions, self.configs, loss_region, states)


def lower(model: Model, strategy: Mapping[str, ParallelConfig] | None, machine: Machine,
          optimizer=None, training: bool = True) -> Lowered:
    """The launches of one iteration of `model` under `strategy` on `machine`."""
    return _Lowering(model, strategy, machine, optimizer, training).run()
