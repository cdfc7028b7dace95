"""Launch templates: what a stage's launches ask for per point, made once per (stage
structure, config) and shared by every operator of that structure.

The points of a launch differ only in their rects and devices, and a model's repeated
blocks are operators of one structure at one shape (GPT-3's 32 blocks, Inception's
repeated modules): their parts, privileges, layouts and saved-state bytes are equal. A
template holds them once: the PartSpec of every point, the distinct (slot, index, rect,
privilege) "atoms" a launch requires and per point the atoms it asks for in order, the
layouts, the (rect, device) pieces of initial data, and the bytes a forward part keeps for
its backward. Lowering an operator then only makes one RegionRequirement per atom on the
operator's own regions (parallel_ops/lowering.py); nothing is computed per point twice.
A stage that declares itself another stage of its operator moved (Stage.moved: an LSTM's
middle steps are step 1 moved along time) gets that stage's templates with the input and
output rects moved (`_moved_forward`): the same points, atoms, layouts and getters, only
new rects (checked) and their groups.

When two stages have one structure (`signature`): the same class, and equal attributes
other than the name, compared structurally: tensors by shape, dtype and gradient flags
(never by name), functions by code and closure values, operators (a stage's parent) by
their own attributes; any other object by identity. So equal signatures mean equal inputs
to part() and to everything the lowering reads of a stage, while an attribute the
signature cannot compare only loses the sharing.
"""
from __future__ import annotations

import weakref
from collections import deque
from itertools import repeat
from operator import attrgetter, itemgetter, le
from types import FunctionType, MethodType

import torch

from taskrt.errors import PrivilegeError
from taskrt.geometry import Rect, rect_mover
from taskrt.launch import RequirementsTable, colors_of
from taskrt.privilege import RED, RW, R, WD, Privilege, RegionRequirement

from .op import Op, PartSpec
from .saved_state import saved_bytes_of_parts
from .tasks import DIN, DOUT, DW, IN, OUT, W
from .tensor import Tensor

_LEAVES = (bool, int, float, complex, bytes, type(None))


class _Same:
    """An object compared by identity inside a signature. It holds the object weakly where
    it can (templates outlive a lowering: a signature must not keep a model alive); one
    whose object is gone equals nothing."""
    __slots__ = ("ref", "_hash")

    def __init__(self, obj):
        try:
            self.ref = weakref.ref(obj)
        except TypeError:
            self.ref = lambda obj=obj: obj
        self._hash = id(obj)

    def __eq__(self, other):
        if type(other) is not _Same:
            return False
        mine = self.ref()
        return mine is not None and mine is other.ref()

    def __hash__(self):
        return self._hash


class Signature:
    """A stage's structure as a hashable value (`signature`), its hash computed once (a
    template lookup per stage and config)."""
    __slots__ = ("value", "_hash")

    def __init__(self, value: tuple):
        self.value, self._hash = value, hash(value)

    def __eq__(self, other):
        return self is other or (type(other) is Signature and self._hash == other._hash
                                 and self.value == other.value)

    def __hash__(self):
        return self._hash


def signature(stage: Op, roots: dict) -> Signature:
    """A value equal for two stages exactly when they have one structure (module doc):
    equal signatures, equal parts under every config. A stage is identified by its
    operator's signature and its position among the operator's stages (`roots` caches
    the operators'). An operator's signature is interned (`_interned`): one object per
    value, so a stage's is hashed and compared without walking its operator's structure
    again (as a template lookup per stage would: tuples keep no hash)."""
    root = stage.parent or stage
    sig = roots.get(root)
    if sig is None:
        sig = roots[root] = _interned(Signature(_sig(root, frozenset())))
    if stage is root:
        return Signature((sig, -1))
    for k, s in enumerate(root.stages()):
        if s is stage:
            return Signature((sig, k))
    return Signature((sig, _sig(stage, frozenset())))   # a stage its operator does not list


REMEMBERED_SIGNATURES = 4096     # operators' signatures interned (then it starts again)
_SIGNATURES: dict[Signature, Signature] = {}


def _interned(sig: Signature) -> Signature:
    """The one Signature object of `sig`'s value (until REMEMBERED_SIGNATURES are kept;
    after a restart an equal signature is a new object, still equal by value)."""
    got = _SIGNATURES.get(sig)
    if got is None:
        if len(_SIGNATURES) >= REMEMBERED_SIGNATURES:
            _SIGNATURES.clear()
        got = _SIGNATURES[sig] = sig
    return got


def _kind(t: type) -> int:
    """Which case of `_sig` a value of type `t` takes (the cases in their order; a type's
    case never changes, so `_sig` looks it up once per type)."""
    if t is str:
        return _STR
    if t is tuple or t is list or (issubclass(t, (tuple, list))
                                   and not issubclass(t, _LEAVES + (Tensor,))):
        return _SEQ
    if issubclass(t, _LEAVES):
        return _LEAF
    if issubclass(t, Tensor):
        return _TENSOR
    if issubclass(t, dict):
        return _DICT
    if issubclass(t, Op):
        return _OP
    if t is FunctionType:
        return _FUNCTION
    if t is MethodType:
        return _METHOD
    if t.__eq__ is object.__eq__ or issubclass(t, torch.Tensor):   # (a tensor's == is
        return _SAME                                                  # elementwise)
    return _VALUE


_STR, _SEQ, _LEAF, _TENSOR, _DICT, _OP, _FUNCTION, _METHOD, _SAME, _VALUE = range(10)
_KINDS: dict[type, int] = {}


def _sig(v, visiting: frozenset):
    t = type(v)
    kind = _KINDS.get(t)
    if kind is None:
        kind = _KINDS[t] = _kind(t)
    if kind == _STR:
        return v
    if kind == _SEQ:
        return (t, tuple([_sig(x, visiting) for x in v]))
    if kind == _LEAF:
        return (t, v)                         # 1, 1.0 and True are equal keys otherwise
    if kind == _TENSOR:
        return (t, v.shape, v.dtype, v.requires_grad, v.is_weight)
    if kind == _OP:
        if id(v) in visiting:
            return (t, "<cycle>")             # a stage's parent lists the stage again
        visiting = visiting | {id(v)}
        return (t, tuple([(k, _sig(x, visiting)) for k, x in vars(v).items()
                          if k != "name"]))
    if kind == _DICT:
        return (t, tuple([(_sig(k, visiting), _sig(x, visiting)) for k, x in v.items()]))
    if kind == _FUNCTION:
        cells = tuple([_sig(c.cell_contents, visiting) for c in v.__closure__ or ()])
        return (t, v.__code__, _sig(v.__defaults__, visiting),
                _sig(v.__kwdefaults__, visiting), cells)
    if kind == _METHOD:
        return (t, v.__func__, _sig(v.__self__, visiting))
    if kind == _SAME:
        return _Same(v)
    try:                                      # a value type (a dtype, a frozen dataclass)
        hash(v)
        return (t, v)
    except TypeError:
        return _Same(v)


_set_region = RegionRequirement.region.__set__       # (slots of a frozen dataclass)
_set_rect = RegionRequirement.rect.__set__
_set_privilege = RegionRequirement.privilege.__set__


def requirements(region, rects: tuple, privileges: tuple) -> list:
    """[RegionRequirement(region, r, p) for r, p in zip(rects, privileges)] without its
    check that a rect lies in the region, for a template's group, whose rects were checked
    against its tensor's shape (the shape of each region lowering makes for it) when the
    template was made; the loops run in C (a GPT-3 on 1,024 GPUs makes 1.3M of them)."""
    n = len(rects)
    made = list(map(RegionRequirement.__new__, repeat(RegionRequirement, n)))
    deque(map(_set_region, made, repeat(region, n)), 0)
    deque(map(_set_rect, made, rects), 0)
    deque(map(_set_privilege, made, privileges), 0)
    return made


def _check(stage: Op, tensor, rects) -> None:
    """RegionRequirement's check of rects against the region of `tensor` (once per atom of
    a template, not per requirement)."""
    shape = tensor.shape
    whole, n = Rect.from_shape(shape), len(shape)
    for rect in rects:
        if rect is not whole and (len(rect.lo) != n or not (rect.empty or (
                min(rect.lo, default=0) >= 0 and all(map(le, rect.hi, shape))))):
            raise PrivilegeError(f"Requirement on '{tensor.name}': rect {rect} is not inside "
                                 f"the region {whole}. Clip it to the region (part() of "
                                 f"{stage} gives it).")


_SLOTS: dict[str, tuple] = {}


def slots(group: str, n: int) -> tuple:
    """The layout entries (group, 0), (group, 1), ... (at least n), one shared tuple per
    pair: every point of every launch has a layout entry per requirement."""
    made = _SLOTS.get(group, ())
    if len(made) < n:
        made = _SLOTS[group] = made + tuple((group, i) for i in range(len(made), max(n, 16)))
    return made


class Interned:
    """Values the templates keep once: equal layouts (a launch's points mostly have one),
    and equal groups of atoms (_Requirements.finish; a backward finds its forward's group
    of an input by identity)."""
    __slots__ = ("layouts", "_groups")

    def __init__(self):
        self.layouts: dict[tuple, tuple] = {}
        self._groups: dict[tuple, tuple] = {}

    def layout(self, layout: tuple) -> tuple:
        return self.layouts.setdefault(layout, layout)

    def group(self, rects: tuple, codes: tuple) -> Group:
        """The Group of these rects and privilege codes (one object per equal group)."""
        keys = tuple(zip(rects, codes))
        g = self._groups.get(keys)
        if g is None:
            g = self._groups[keys] = Group(rects, codes)
        return g


REMEMBERED_TEMPLATES = 4096       # forward templates kept (a search meets many configs)
REMEMBERED_POINTS = 1 << 21       # and their points at most (a template of 1,024 points
#                                   holds 1,024 PartSpecs)
_TEMPLATES: dict[tuple, "ForwardTemplate"] = {}
_INTERNED: list = []
_POINTS = [0]


def forward_template(stage: Op, sig: Signature, degrees: tuple, devices: tuple,
                     base: "ForwardTemplate | None" = None) -> "ForwardTemplate":
    """The forward template of `stage` (whose signature is `sig`) under these degrees (in
    the order of its dims) and devices: made once per process for every stage of that
    structure, until REMEMBERED_TEMPLATES or REMEMBERED_POINTS are reached (then the
    cache starts again). `base`: for a stage declaring itself moved (Stage.moved), the
    template of the stage it names under the same config; this one is made by moving it."""
    key = (sig, degrees, devices)
    got = _TEMPLATES.get(key)
    if got is None:
        if len(_TEMPLATES) >= REMEMBERED_TEMPLATES or _POINTS[0] >= REMEMBERED_POINTS \
                or not _INTERNED:
            _TEMPLATES.clear()
            _INTERNED[:] = [Interned()]
            _POINTS[0] = 0
        if base is not None and base._interned is _INTERNED[0]:
            got = _TEMPLATES[key] = _moved_forward(base, stage)
        else:                           # (or its base was made before the cache restarted)
            got = _TEMPLATES[key] = ForwardTemplate(stage, degrees, devices, _INTERNED[0])
        _POINTS[0] += len(got.colors)
    return got


def points(stage: Op, degrees: tuple, devices: tuple) -> tuple:
    """(domain, specs, devices) of a stage's forward launch: one point per color of the
    degrees, or for a replicated stage one per distinct (device, output rects)."""
    launch_colors = colors_of(degrees)
    specs = [stage.part(degrees, c) for c in launch_colors]
    if not stage.replicated:
        return degrees, specs, devices
    seen, keep_specs, keep_devs = set(), [], []
    for s, d in zip(specs, devices):
        key = (d, s.outputs)
        if key not in seen:
            seen.add(key)
            keep_specs.append(s)
            keep_devs.append(d)
    return (len(keep_specs),), keep_specs, tuple(keep_devs)


def _getter(atoms: list):
    """A function of the made atoms giving a point's requirements tuple (C-level for two
    or more; itemgetter gives a bare value for one)."""
    if len(atoms) >= 2:
        return itemgetter(*atoms)
    if atoms:
        k = atoms[0]
        return lambda made: (made[k],)
    return lambda made: ()


_PRIVILEGE = {p.code: p for p in Privilege}


class Group:
    """The atoms of one launch on one (slot, index): rects and privileges, in order."""
    __slots__ = ("rects", "privileges", "keys", "one_privilege")

    def __init__(self, rects: tuple, codes: tuple):
        self.rects, self.privileges = rects, tuple([_PRIVILEGE[c] for c in codes])
        self.keys = tuple(zip(rects, codes))
        self.one_privilege = len(set(codes)) == 1      # (once per interned group)


class _Requirements:
    """The requirements of a launch's points as atoms (slot, index, rect, privilege code) and
    per point the atoms it asks for, in order. finish() numbers the atoms group by group
    ((slot, index) in the order first asked for, so the operator's regions are made in the
    order its points first use them), so a launch makes each group in one piece."""
    __slots__ = ("groups", "getters", "points", "_atoms", "_index", "_stage", "_tensors",
                 "by_position", "order")

    def __init__(self, stage: Op):
        self._stage = stage
        self._tensors = _tensors_of(stage)
        self._atoms: list[tuple] = []
        self._index: dict = {}
        self.points: list[tuple] = []
        self.groups: list[tuple] = []     # (slot, index, Group)
        self.getters: list = []           # per point: requirements tuple from the atoms

    def add_point(self, asked: list) -> None:
        index, atoms, got = self._index, self._atoms, []
        for atom in asked:
            k = index.get(atom)
            if k is None:
                k = index[atom] = len(atoms)
                atoms.append(atom)
            got.append(k)
        self.points.append(tuple(got))

    def finish(self, intern) -> None:
        """Number the atoms group by group; `intern` keeps equal (rect, privilege) tuples
        once (so an operator finds its forward's group again in its backward by identity)."""
        atoms, by_group = self._atoms, {}
        for k, (s, i, _, _) in enumerate(atoms):
            by_group.setdefault((s, i), []).append(k)
        number, n = [0] * len(atoms), 0
        for (s, i), ks in by_group.items():
            for k in ks:
                number[k] = n
                n += 1
            rects = tuple([atoms[k][2] for k in ks])
            _check(self._stage, self._tensors[s][i], rects)
            self.groups.append((s, i, intern(rects, tuple([atoms[k][3] for k in ks]))))
        self.getters = [_getter([number[k] for k in p]) for p in self.points]
        # Whether every point asks group k at position k (numbers start[k] to start[k+1]):
        # then a launch's table has columns (make), once per template.
        starts, n = [], 0
        for ks in by_group.values():
            starts.append(n)
            n += len(ks)
        starts.append(n)
        groups = len(by_group)
        self.by_position = all(
            len(p) == groups and all(starts[k] <= number[a] < starts[k + 1]
                                     for k, a in enumerate(p)) for p in self.points)
        self.order = object()   # (names the getters in a table's columns; picklable)
        self.points = self._atoms = self._index = self._stage = self._tensors = None

    def moved(self, stage: Op, move, intern) -> "_Requirements":
        """These requirements with every rect of an input, output or their gradients moved
        by `move` (a translation: equal atoms stay equal, so the numbering, the getters and
        the weights' groups stay), the moved rects checked against `stage`'s tensors."""
        new = _Requirements.__new__(_Requirements)
        new.points = new._atoms = new._index = new._stage = new._tensors = None
        new.getters, new.groups = self.getters, []
        new.by_position, new.order = self.by_position, self.order
        tensors = _tensors_of(stage)
        for s, i, group in self.groups:
            if s not in (W, DW):
                rects = tuple(map(move, group.rects))
                _check(stage, tensors[s][i], rects)
                group = intern(rects, tuple([code for _, code in group.keys]))
            new.groups.append((s, i, group))
        return new

    def make(self, colors, regions: dict, shared) -> RequirementsTable:
        """color -> requirements tuple on the operator's regions (regions[slot][index]),
        each group's made by `shared.group` (parallel_ops.lowering._Shared). The table's
        regions are the groups' in order: the groups are numbered in the order the points
        first ask for them (finish), so that is the order a walk of the points meets them
        (two groups on one region name it twice). Its columns (RequirementsTable) where
        every point asks group k at position k, the groups' regions are distinct and each
        group has one privilege: per position (an object standing for the getters, the
        group), the group's atoms being its requirements in order (shared.group)."""
        made, named = [], []
        for s, i, group in self.groups:
            region = regions[s][i]
            made += shared.group(region, group)
            named.append(region)
        columns = None
        if self.by_position and len({r.name for r in named}) == len(named) and \
                all(group.one_privilege for _, _, group in self.groups):
            columns = [(self.order, group) for _, _, group in self.groups]
        return RequirementsTable(colors, [get(made) for get in self.getters], named, columns)


class ForwardTemplate:
    """A stage's forward launch under one config (degrees, devices); its backward
    (`backward`), its weights' update pieces (`pieces`) and its saved bytes, on demand."""

    def __init__(self, stage: Op, degrees: tuple, devices: tuple, interned: Interned):
        self.domain, specs, self.devices = points(stage, degrees, devices)
        self.colors = colors_of(self.domain)
        self.specs = dict(zip(self.colors, specs))
        self.reqs = _Requirements(stage)
        self.layout_of: dict = {}
        self._interned = interned
        layout = interned.layout
        in_slots, out_slots = slots(IN, len(stage.inputs)), slots(OUT, len(stage.outputs))
        w_slots = slots(W, len(stage.weights))
        replicated = stage.replicated
        weight_out = [t.is_weight for t in stage.outputs]
        events: list[tuple] = []        # (slot, index, rect, device): inputs, weight outputs
        n_in, n_out = len(stage.inputs), len(stage.outputs)
        for c, spec, dev in zip(self.colors, specs, self.devices):
            asked, layout_ = [], []
            for i, r in enumerate(spec.inputs[:n_in]):     # (a spec may say more)
                if not r.empty:
                    asked.append((IN, i, r, "R"))
                    layout_.append(in_slots[i])
                    events.append((IN, i, r, dev))
            for i, r in enumerate(spec.weights):
                if not r.empty:
                    asked.append((W, i, r, "R"))
                    layout_.append(w_slots[i])
            for i, r in enumerate(spec.outputs[:n_out]):
                if not r.empty:
                    priv = (RW if (replicated and weight_out[i])
                            else RED if stage.output_partial(spec, i) else WD)
                    asked.append((OUT, i, r, priv.code))
                    layout_.append(out_slots[i])
                    if weight_out[i]:
                        events.append((OUT, i, r, dev))
            self.reqs.add_point(asked)
            self.layout_of[c] = layout(tuple(layout_))
        self.reqs.finish(interned.group)
        self.events = events
        self.initial_groups: dict[tuple, dict] = {}   # (slot, index) -> {(rect, device)}
        for s, i, r, dev in events:
            self.initial_groups.setdefault((s, i), {})[(r, dev)] = None
        self._backward: dict = {}
        self._pieces: dict = {}
        self._held = None
        self._base = self._move = None      # a moved template's (_moved_forward)

    def initial(self, into: dict, names: dict) -> None:
        """Record where the forward's data starts: names maps (slot, index) to the tensor
        name for the inputs and outputs that count (model inputs, weight outputs), as
        pieces {(rect, device): None} per name, in the order the points read them."""
        keys = [k for k in self.initial_groups if k in names]
        if len({names[k] for k in keys}) == len(keys):
            for k in keys:
                into.setdefault(names[k], {}).update(self.initial_groups[k])
            return
        for s, i, r, dev in self.events:           # one name twice: interleave as read
            name = names.get((s, i))
            if name is not None:
                into.setdefault(name, {})[(r, dev)] = None

    def backward(self, stage: Op, outs_with_grad: tuple, input_grads: tuple,
                 weight_grads: tuple, recomputed: bool) -> "_BackwardTemplate":
        key = (outs_with_grad, input_grads, weight_grads, recomputed)
        got = self._backward.get(key)
        if got is None:
            if self._base is None:
                got = _BackwardTemplate(self, stage, *key)
            else:                           # (the base's stage has the same tensors)
                base = self._base.backward(stage, *key)
                got = _BackwardTemplate.__new__(_BackwardTemplate)
                got.reqs = base.reqs.moved(stage, self._move, self._interned.group)
                got.layout_of = base.layout_of
            self._backward[key] = got
        return got

    def pieces(self, k: int) -> list:
        """The distinct (rect, device) pieces of weight k over the points, in order."""
        got = self._pieces.get(k)
        if got is None:
            got = self._pieces[k] = list(dict.fromkeys(
                (self.specs[c].weights[k], dev) for c, dev in zip(self.colors, self.devices)
                if not self.specs[c].weights[k].empty))
        return got

    def pieces_at(self, k: int) -> dict:
        """{piece: None} of pieces(k), one dict (read, never written)."""
        got = self._pieces.get(("at", k))
        if got is None:
            got = self._pieces[("at", k)] = dict.fromkeys(self.pieces(k))
        return got

    def held(self, stage: Op, input_grads: tuple, weight_grads: tuple) -> dict:
        """saved_bytes_of_parts of the points (one dict, shared by the launches made from
        this template: nothing writes it), None when every point keeps nothing."""
        if self._held is None:
            held = saved_bytes_of_parts(stage, self.specs, input_grads, weight_grads)
            self._held = (held if any(held.values()) else None,)
        return self._held[0]


class _BackwardTemplate:
    """A stage's backward launch over its forward template's points: per point the output
    gradients it reads (those that exist), the saved inputs and weights (read: later
    writers wait for it), the input and weight gradients it contributes (Red+), and with
    recomputation the recomputed outputs."""

    def __init__(self, fwd: ForwardTemplate, stage: Op, outs_with_grad, input_grads,
                 weight_grads, recomputed: bool):
        self.reqs = _Requirements(stage)
        self.layout_of: dict = {}
        groups = [(DOUT, R, outs_with_grad, "outputs"), (IN, R, None, "inputs"),
                  (W, R, None, "weights"), (DIN, RED, input_grads, "inputs"),
                  (DW, RED, weight_grads, "weights")]
        if recomputed:
            groups.append((OUT, R, None, "outputs"))
        groups = [(slot, priv.code, only, attrgetter(field),
                   slots(slot, len(getattr(stage, field))))
                  for slot, priv, only, field in groups]
        add, layout = self.reqs.add_point, fwd._interned.layout
        for c in fwd.colors:
            spec = fwd.specs[c]
            asked, layout_ = [], []
            for slot, code, only, field, table in groups:
                for i, r in enumerate(field(spec)):
                    if not r.empty and (only is None or only[i]):
                        asked.append((slot, i, r, code))
                        layout_.append(table[i])
            add(asked)
            self.layout_of[c] = layout(tuple(layout_))
        self.reqs.finish(fwd._interned.group)


def _tensors_of(stage: Op) -> dict:
    """A stage's tensors per requirement slot."""
    return {IN: stage.inputs, DIN: stage.inputs, W: stage.weights, DW: stage.weights,
            OUT: stage.outputs, DOUT: stage.outputs}


def _moved_forward(base: ForwardTemplate, stage: Op) -> ForwardTemplate:
    """The forward template of `stage`, which declares its parts `base`'s stage's moved
    (Stage.moved: inputs and outputs by delta along axis, its own info): what
    ForwardTemplate(stage, ...) makes, from `base` (tests/test_moved_templates.py)."""
    _, axis, delta, info = stage.moved
    move = rect_mover(axis, delta)
    t = ForwardTemplate.__new__(ForwardTemplate)
    t.domain, t.devices, t.colors = base.domain, base.devices, base.colors
    t.specs = {c: PartSpec(tuple(map(move, s.inputs)), s.weights, tuple(map(move, s.outputs)),
                           s.partial, info) for c, s in base.specs.items()}
    t._interned = base._interned
    t.reqs = base.reqs.moved(stage, move, t._interned.group)
    t.layout_of = base.layout_of
    t.events = [(s, i, move(r), dev) for s, i, r, dev in base.events]
    t.initial_groups = {}
    for s, i, r, dev in t.events:
        t.initial_groups.setdefault((s, i), {})[(r, dev)] = None
    t._backward, t._pieces, t._held = {}, {}, None
    t._base, t._move = base, move
    return t
