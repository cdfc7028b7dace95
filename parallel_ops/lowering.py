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
from taskrt.privilege import RW, R

from .config import ParallelConfig, data_parallel, validate
from .errors import ConfigError
from .launch_template import (ForwardTemplate, Group, Signature, forward_template,
                              requirements, signature)
from .model import Model
from .op import Op
from .recompute import recomputed_name
from .tasks import (DIN, DOUT, DW, IN, OUT, W, StageArgs, backward_task, forward_task,
                    read_task, update_batch, update_task)
from .tensor import Tensor


@dataclass
class Lowered:
    launches: list[IndexLaunch]
    initial: dict[Region, list[tuple[Rect, int]]]
    regions: dict[str, Region]
    configs: dict[str, ParallelConfig]
    loss_region: Region | None = None
    state_regions: dict[str, list[Region]] = field(default_factory=dict)  # weight -> opt state


@dataclass
class OpLaunches:
    """The launches one operator contributes under one config, and where its data starts."""
    forward: list[IndexLaunch]
    backward: list[IndexLaunch]                 # in backward order (last stage first)
    updates: dict[str, IndexLaunch]             # weight name -> its update launch
    initial_forward: dict[str, dict]            # tensor -> {(rect, device): None}, forward
    initial_update: dict[str, dict]             # weights and optimizer state at updates
    recompute: list[IndexLaunch] = field(default_factory=list)  # also first in `backward`


def resolve_configs(model: Model, strategy, machine: Machine) -> dict[str, ParallelConfig]:
    """Every operator's config: the strategy's, else data parallel; all validated."""
    strategy = strategy or {}
    names = {o.name for o in model.ops}
    unknown = sorted(set(strategy) - names)
    if unknown:
        raise ConfigError(f"Strategy names operators {unknown} that model "
                          f"'{model.name}' does not have; its operators include "
                          f"{sorted(names)[:8]}.")
    out = {}
    for op in model.ops:
        cfg = strategy.get(op.name) or data_parallel(op, machine)
        validate(op, cfg, machine)
        out[op.name] = cfg
    return out


class _LaunchRegions:
    """The regions of a stage's tensors in one launch, each looked up on its first use (so
    a region is made only where some point uses it, as when looked up point by point)."""
    __slots__ = ("_tensors", "_lookup", "_got")

    def __init__(self, tensors, lookup):
        self._tensors, self._lookup = tensors, lookup
        self._got = [None] * len(tensors)

    def __getitem__(self, i: int):
        r = self._got[i]
        if r is None:
            r = self._got[i] = self._lookup(self._tensors[i])
        return r


class _Shared:
    """Requirements made while lowering one operator, each kept once: equal ones (a
    weight's whole rect read by every point of a data-parallel launch; a forward's rects
    read again by its backward) are one object, which saves the memory of a copy per
    point. Made a group at a time (a launch's atoms on one region, launch_template.py):
    a group asked for again (a backward reading its forward's inputs) is found whole."""
    __slots__ = ("regions",)

    def __init__(self):
        # region name -> [region, {id(group): (group, its requirements)}, {(rect, privilege
        # code): requirement}, made once the region gets a second, different group]
        self.regions: dict[str, list] = {}

    def group(self, region: Region, group: Group) -> list:
        """The requirements on `region` of the atoms of `group`, in order."""
        got = self.regions.get(region.name)
        if got is None or got[0] is not region:
            reqs = requirements(region, group.rects, group.privileges)
            self.regions[region.name] = [region, {id(group): (group, reqs)}, None]
            return reqs
        _, groups, atoms = got
        hit = groups.get(id(group))
        if hit is not None:
            return hit[1]
        if atoms is None:
            atoms = got[2] = {}
            for old, reqs in groups.values():
                for key, q in zip(old.keys, reqs):
                    atoms.setdefault(key, q)
        reqs = list(map(atoms.get, group.keys))
        if not all(reqs):               # the atoms not made yet, made in one call
            missing = [k for k, q in enumerate(reqs) if q is None]
            made = requirements(region, tuple([group.rects[k] for k in missing]),
                                tuple([group.privileges[k] for k in missing]))
            for k, q in zip(missing, made):
                reqs[k] = atoms.setdefault(group.keys[k], q)
        groups[id(group)] = (group, reqs)
        return reqs


class _Lowering:
    """Lowers operators one at a time (each depends only on its own config), then assembles
    the iteration in program order, so a search can re-lower just the operator it changed."""

    def __init__(self, model: Model, machine: Machine, optimizer, training: bool):
        self.model, self.machine, self.optimizer, self.training = model, machine, optimizer, training
        self.regions: dict[str, Region] = {}
        self.state_regions: dict[str, list[Region]] = {}
        for op in model.ops:              # first: some operators' stages depend on the mode
            op.training = training
            for stage in op.stages():
                stage.training = training
        self.has_grad = self._gradients()
        self.model_inputs = {t.name for t in model.inputs}
        # Recomputation (parallel_ops/recompute.py): op name -> its segment, and which op
        # makes each activation (a segment's own activations are read as `<t>@re`).
        self.segment_of: dict[str, int] = dict(getattr(model, "recompute", {}))
        self.producer = {t.name: op.name for op in model.ops for stage in op.stages()
                         for t in stage.outputs}
        self.shared = _Shared()           # a new one per operator lowered (op())
        # Each stage's signature (launch_template.py: its templates are shared by the
        # stages of one structure), and each operator's, made once per lowering.
        self._signature_of: dict[Op, Signature] = {}
        self._roots: dict[Op, Signature] = {}
        self._owned: tuple | None = None      # (len(model.weights), id(owner) -> weights)

    def _gradients(self) -> set[str]:
        """Names of the tensors that get a gradient (depends on the graph, not on configs):
        the loss writes its logits' gradient; a differentiable stage with an output that has
        a gradient gives one to its inputs that require it and to its trainable weights."""
        has: set[str] = set()
        for op in self.model.ops:
            for stage in op.stages():
                for t in stage.outputs:
                    if t.name.endswith("@grad"):
                        has.add(t.name[:-5])
        if not self.training:
            return has
        for op in reversed(self.model.ops):
            for stage in reversed(op.stages()):
                if not (stage.differentiable and any(t.requires_grad
                                                     for t in stage.inputs + stage.weights)):
                    continue
                if not any(t.name in has for t in stage.outputs):
                    continue
                has.update(t.name for t in stage.inputs + stage.weights if t.requires_grad)
        return has

    def region(self, t: Tensor, grad: bool = False) -> Region:
        name = t.grad_name if grad else t.name
        r = self.regions.get(name)
        if r is None:
            r = self.regions[name] = Region(name, t.shape, t.dtype)
        return r

    @staticmethod
    def _initial(into: dict, name: str, rect: Rect, device: int) -> None:
        into.setdefault(name, {})[(rect, device)] = None

    def recomputed(self, t: Tensor, segment: int | None) -> Region:
        """The region a launch of `segment` (None: not recomputing) reads for `t`: `<t>@re`
        when an operator of the same segment makes t, else t's own."""
        if segment is None or self.segment_of.get(self.producer.get(t.name)) != segment:
            return self.region(t)
        name = recomputed_name(t.name)
        r = self.regions.get(name)
        if r is None:
            r = self.regions[name] = Region(name, t.shape, t.dtype)
        return r

    def _regions(self, tensors, grad: bool = False, segment: int | None = None
                 ) -> "_LaunchRegions":
        """The regions of `tensors` (their gradients with `grad`; as read when recomputing
        `segment`), each looked up once per launch rather than once per point."""
        if grad:
            return _LaunchRegions(tensors, lambda t: self.region(t, grad=True))
        return _LaunchRegions(tensors, lambda t: self.recomputed(t, segment))

    def template(self, stage: Op, cfg: ParallelConfig) -> ForwardTemplate:
        """The forward template of `stage` under `cfg` (launch_template.py)."""
        sig = self._signature_of.get(stage)
        if sig is None:
            sig = self._signature_of[stage] = signature(stage, self._roots)
        moved = getattr(stage, "moved", None)       # (made from the stage it names, moved)
        base = None if moved is None else self.template(stage.parent.stages()[moved[0]], cfg)
        return forward_template(stage, sig, tuple(int(d) for d in cfg.aligned(
            stage.parent or stage)), tuple(cfg.devices), base)

    # -- forward ---------------------------------------------------------------------------
    def lower_forward(self, stage: Op, template: ForwardTemplate, initial: dict,
                      recompute: int | None = None) -> IndexLaunch:
        """The forward launch of `stage` (its points: `template`); with `recompute` (its
        segment), the launch that runs it again in backward, from and to the segment's
        recomputed regions."""
        grad = self.training and stage.differentiable and (
            any(t.requires_grad for t in stage.inputs + stage.weights))
        input_grads = tuple(self.training and t.requires_grad for t in stage.inputs)
        weight_grads = tuple(self.training and w.requires_grad for w in stage.weights)
        regions = {IN: self._regions(stage.inputs, segment=recompute),
                   W: self._regions(stage.weights),
                   OUT: self._regions(stage.outputs, segment=recompute)}
        reqs_of = template.reqs.make(template.colors, regions, self.shared)
        names = {(IN, i): t.name for i, t in enumerate(stage.inputs)
                 if t.name in self.model_inputs}
        names.update({(OUT, i): t.name for i, t in enumerate(stage.outputs) if t.is_weight})
        template.initial(initial, names)
        # A recomputed stage keeps nothing in its forward; its recompute launch keeps it.
        keep = grad and (recompute is not None or self.segment_of.get(
            (stage.parent or stage).name) is None)
        args = StageArgs(stage, template.specs, template.layout_of, keep, input_grads,
                         weight_grads, self.training)
        kind = "fwd" if recompute is None else "recompute"
        return IndexLaunch(f"{stage.name}/{kind}", forward_task, template.domain,
                           reqs_of.__getitem__, devices=template.devices, args=args,
                           cost_tag=stage.cost_tag + ("fwd",), replicas=stage.replicated)

    # -- backward --------------------------------------------------------------------------
    def lower_backward(self, stage: Op, fwd: IndexLaunch, template: ForwardTemplate,
                       recompute: int | None = None) -> IndexLaunch | None:
        """The backward launch of `stage`, with its state from `fwd` (the recompute launch
        of `recompute`, the stage's segment, when it has one; its points: `template`)."""
        a: StageArgs = fwd.args
        if not a.grad:
            return None
        outs_with_grad = tuple(t.name in self.has_grad for t in stage.outputs)
        if not any(outs_with_grad):
            return None
        bt = template.backward(stage, outs_with_grad, a.input_grads, a.weight_grads,
                               recompute is not None)
        # Reads of the saved inputs and weights: no data moves (they are already on this
        # device), but later writers must wait for this task. With recomputation the
        # recomputed outputs too: autograd may keep them (an activation's output), and a
        # recomputed output nobody else reads would otherwise be a result of the graph,
        # kept for good.
        regions = {DOUT: self._regions(stage.outputs, grad=True),
                   IN: self._regions(stage.inputs, segment=recompute),
                   W: self._regions(stage.weights),
                   DIN: self._regions(stage.inputs, grad=True),
                   DW: self._regions(stage.weights, grad=True),
                   OUT: self._regions(stage.outputs, segment=recompute)}
        reqs_of = bt.reqs.make(template.colors, regions, self.shared)
        args = StageArgs(stage, a.specs, bt.layout_of, True, a.input_grads, a.weight_grads,
                         self.training)
        bwd = IndexLaunch(f"{stage.name}/bwd", backward_task, fwd.domain, reqs_of.__getitem__,
                          devices=fwd.devices, args=args, cost_tag=stage.cost_tag + ("bwd",),
                          state_from=fwd.name)
        # What each forward point keeps for this backward besides regions (saved_state.py).
        held = template.held(stage, a.input_grads, a.weight_grads)
        if held is not None:
            fwd.saved_bytes = bwd.saved_bytes = held
        return bwd

    # -- update ----------------------------------------------------------------------------
    def lower_update(self, w, templates: dict[str, ForwardTemplate], initial: dict
                     ) -> IndexLaunch:
        """The update launch of weight `w`: one point per distinct (part, device) of the
        forward that reads it (`templates`: stage name -> its forward template)."""
        stage = next(s for s in w.owner.stages() if w in s.weights)
        pieces = templates[stage.name].pieces(stage.weights.index(w))
        states = self.state_regions.get(w.name)
        if states is None:
            dtype = getattr(self.optimizer, "state_dtype", lambda d: d)(w.dtype)
            states = [Region(f"{w.name}@{s}", w.shape, dtype)
                      for s in self.optimizer.state_names]
            self.state_regions[w.name] = states
            for s in states:
                self.regions[s.name] = s
        # One {piece: None} for the weight and its state, shared by the weights of the
        # operators of one structure (nothing writes it: merged_initial copies).
        at = templates[stage.name].pieces_at(stage.weights.index(w))
        for name in [w.name] + [s.name for s in states]:
            initial[name] = {**initial[name], **at} if name in initial else at

        made: dict[Rect, tuple] = {}      # per piece rect: replicas have equal ones

        def projection(c, pieces=pieces, w=w, states=states):
            r, _ = pieces[c[0]]
            reqs = made.get(r)
            if reqs is None:
                reqs = made[r] = (RegionRequirement(self.region(w), r, RW),
                                  RegionRequirement(self.region(w, grad=True), r, R),
                                  *(RegionRequirement(s, r, RW) for s in states))
            return reqs
        return IndexLaunch(f"{w.name}/update", update_task, (len(pieces),), projection,
                           devices=[d for _, d in pieces], args=self.optimizer,
                           cost_tag=(type(self.optimizer).__name__.lower(), "update"),
                           replicas=True, batch=update_batch
                           if callable(getattr(self.optimizer, "update_many", None)) else None)

    def op(self, op: Op, cfg: ParallelConfig) -> OpLaunches:
        """The launches of one operator under `cfg`."""
        out = OpLaunches([], [], {}, {}, {})
        self.shared = _Shared()
        forward, templates = {}, {}
        for stage in op.stages():
            template = templates[stage.name] = self.template(stage, cfg)
            launch = self.lower_forward(stage, template, out.initial_forward)
            forward[stage.name] = launch
            out.forward.append(launch)
        if self.training:
            segment = self.segment_of.get(op.name)
            if segment is not None:
                out.recompute = [self.lower_forward(stage, templates[stage.name], {},
                                                    recompute=segment)
                                 for stage in op.stages()]
                out.backward += out.recompute
                forward = {launch.args.stage.name: launch for launch in out.recompute}
            for stage in reversed(op.stages()):
                launch = self.lower_backward(stage, forward[stage.name],
                                             templates[stage.name], segment)
                if launch is not None:
                    out.backward.append(launch)
            if self.optimizer is not None:
                for w in self._weights_of(op):
                    if w.requires_grad and w.name in self.has_grad:
                        out.updates[w.name] = self.lower_update(w, templates,
                                                                out.initial_update)
        return out

    def _weights_of(self, op: Op) -> list:
        """The model's weights that `op` owns, in the model's order (grouped by owner once
        per lowering, not a walk of every weight per operator: 221 x 472 at Inception)."""
        weights = self.model.weights
        if self._owned is None or self._owned[0] != len(weights):
            owned: dict[int, list] = {}
            for w in weights:
                owned.setdefault(id(w.owner), []).append(w)
            self._owned = (len(weights), owned)
        return [w for w in self._owned[1].get(id(op), ()) if w.owner is op]

    def assemble(self, parts: dict[str, OpLaunches], configs) -> "Lowered":
        """The iteration in program order: forward launches, the loss read, backward launches
        in reverse, updates; and where data starts."""
        model = self.model
        launches = [l for op in model.ops for l in parts[op.name].forward]
        loss_region = None
        if model.loss_op is not None:
            loss_region = self.region(model.loss_op.loss_tensor)
            launches.append(IndexLaunch(
                "loss/read", read_task, (1,),
                lambda c: (RegionRequirement(loss_region, loss_region.rect, R),),
                devices=[0], cost_tag=("read",)))
        launches += self._backward_phase(parts)
        updates = {}
        for part in parts.values():
            updates.update(part.updates)
        launches += [updates[w.name] for w in backward_order(model) if w.name in updates]
        initial = self.merged_initial(parts)
        self._weights_home(launches, initial)
        states = {w: s for w, s in self.state_regions.items() if w in updates}
        return Lowered(launches, {self.regions[n]: list(p) for n, p in initial.items()},
                       self.regions, dict(configs), loss_region, states)

    def _backward_phase(self, parts: dict[str, OpLaunches]) -> list[IndexLaunch]:
        """Backward launches in reverse program order, each segment's recompute launches (in
        program order) before the first backward launch of the segment."""
        members: dict[int, list[str]] = {}
        for op in self.model.ops:
            segment = self.segment_of.get(op.name)
            if segment is not None:
                members.setdefault(segment, []).append(op.name)
        out = []
        for op in reversed(self.model.ops):
            part = parts[op.name]
            for name in members.pop(self.segment_of.get(op.name), ()):
                out += parts[name].recompute
            out += part.backward[len(part.recompute):]
        return out

    def merged_initial(self, parts: dict[str, OpLaunches], names=None, ops=None,
                       weights=None) -> dict[str, dict]:
        """Where data starts, per region name: every operator's forward pieces, then the
        pieces of updated weights and their optimizer state at their updates (for the
        regions in the set `names` only, when given; `ops` and `weights`: the operators and
        weights, in the model's order, that may name them, when known)."""
        initial: dict[str, dict] = {}
        for op in (self.model.ops if ops is None else ops):
            fwd = parts[op.name].initial_forward
            for name in (fwd if names is None else [n for n in fwd if n in names]):
                initial.setdefault(name, {}).update(fwd[name])
        for w in (self.model.weights if weights is None else weights):
            owner = parts[w.owner.name]
            if w.name not in owner.updates:
                continue
            for name in [w.name] + [s.name for s in self.state_regions.get(w.name, ())]:
                if names is None or name in names:
                    initial.setdefault(name, {}).update(owner.initial_update.get(name, {}))
        return initial

    def _weights_home(self, launches, initial: dict) -> None:
        """Weights nobody updates live where their first user reads them."""
        for w in self.model.weights:
            if w.name in initial:
                continue
            for launch in launches:
                found = False
                for c, dev in zip(launch.colors, launch.devices):
                    for req in launch.requirements(c):
                        if req.region.name == w.name:
                            self._initial(initial, w.name, req.rect, dev)
                            found = True
                if found:
                    break


def backward_order(model: Model) -> list:
    """The weights in the order backward finishes their gradients: the last operator's
    first. Updates are launched in this order, so the all-reduces of their gradients come in
    it too, and every rank (which starts its collectives in program order) and the simulator
    (FIFO per link in program order) can start each as soon as its gradient is ready,
    overlapping synchronization with the rest of backward."""
    position = {op.name: k for k, op in enumerate(model.ops)}
    return sorted(model.weights, key=lambda w: -position[w.owner.name])


def lower(model: Model, strategy: Mapping[str, ParallelConfig] | None, machine: Machine,
          optimizer=None, training: bool = True) -> Lowered:
    """The launches of one iteration of `model` under `strategy` on `machine`."""
    configs = resolve_configs(model, strategy, machine)
    lowering = _Lowering(model, machine, optimizer, training)
    parts = {op.name: lowering.op(op, configs[op.name]) for op in model.ops}
    return lowering.assemble(parts, configs)


REMEMBERED_PARTS = 4096     # OpLaunches an IncrementalLowering keeps for configs it may see again


class IncrementalLowering:
    """Lowering that re-lowers only the operator whose config changed (for the search).

    An operator's launches under a config are a function of the two, so the lowering keeps
    those it made (up to REMEMBERED_PARTS, then it starts again): a search coming back to a
    config gets the same launch objects, and the planner the same task nodes
    (Planner._task_node), so nothing about them is computed again."""

    def __init__(self, model: Model, strategy, machine: Machine, optimizer=None,
                 training: bool = True):
        self.model, self.machine = model, machine
        self.configs = resolve_configs(model, strategy, machine)
        self.lowering = _Lowering(model, machine, optimizer, training)
        self.parts = {op.name: self.lowering.op(op, self.configs[op.name]) for op in model.ops}
        self._made = {(name, self.configs[name]): part for name, part in self.parts.items()}
        # Region name -> the operators whose initial_forward names it, and the weights it is
        # or is optimizer state of (for initial_of).
        self._ops = {op.name: op for op in model.ops}
        self._position = {op.name: k for k, op in enumerate(model.ops)}
        self._weights: dict[str, list] = {}
        self._weight_position = {id(w): k for k, w in enumerate(model.weights)}
        for w in model.weights:
            for name in [w.name] + [s.name for s in self.lowering.state_regions.get(w.name, ())]:
                self._weights.setdefault(name, []).append(w)
        self._readers: dict[str, set[str]] = {}
        for name, part in self.parts.items():
            self._note_readers(name, part, True)

    def _note_readers(self, op_name: str, part: OpLaunches, add: bool) -> None:
        for name in part.initial_forward:
            if add:
                self._readers.setdefault(name, set()).add(op_name)
            else:
                self._readers[name].discard(op_name)

    def _set(self, op_name: str, cfg: ParallelConfig, part: OpLaunches) -> None:
        self._note_readers(op_name, self.parts[op_name], False)
        self._note_readers(op_name, part, True)
        self.configs[op_name], self.parts[op_name] = cfg, part

    def lowered(self) -> Lowered:
        return self.lowering.assemble(self.parts, self.configs)

    def initial_of(self, names: set[str]) -> dict:
        """lowered().initial for the regions named in `names` that an operator's launches
        (OpLaunches.initial_forward / initial_update) name, without lowering the rest."""
        readers = self._readers
        ops = sorted({op for name in names for op in readers.get(name, ())},
                     key=self._position.__getitem__)
        weights = {id(w): w for name in names for w in self._weights.get(name, ())}
        merged = self.lowering.merged_initial(
            self.parts, names, [self._ops[name] for name in ops],
            sorted(weights.values(), key=lambda w: self._weight_position[id(w)]))
        regions = self.lowering.regions
        return {regions[name]: list(pieces) for name, pieces in merged.items()}

    def change(self, op_name: str, cfg: ParallelConfig) -> OpLaunches:
        """Give one operator a new config; returns its new launches."""
        part = self._made.get((op_name, cfg))
        if part is None:
            op = self.model.op(op_name)
            validate(op, cfg, self.machine)
            part = self.lowering.op(op, cfg)
            if len(self._made) >= REMEMBERED_PARTS:
                self._made.clear()
            self._made[op_name, cfg] = part
        self._set(op_name, cfg, part)
        return part

    def restore(self, op_name: str, cfg: ParallelConfig, part: OpLaunches) -> None:
        """Put back an operator's earlier config and the launches change() returned for it."""
        self._set(op_name, cfg, part)
