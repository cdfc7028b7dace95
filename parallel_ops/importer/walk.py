"""The import walk: an fx graph (from fx or export) -> a parallel_ops Model.

Every graph node gets a value (values.py). Nodes whose arguments are all constants (and
buffers) are evaluated with torch right away, so `x.shape[0] * 2`, `torch.arange(S)` or a
causal mask cost nothing. Converters (registry.py) turn the rest into operators.
Unsupported nodes are collected and reported together at the end; each gets a stand-in
value of its result's shape (from torch.export's metadata, or computed on fake tensors for
torch.fx), so the walk goes on and reports the unsupported nodes after it too.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import torch
import torch.fx as fx

from taskrt.errors import TaskrtError

from ..model import Model
from ..op import Op
from ..tensor import Tensor, Weight
from . import extra_ops
from .capture import Captured, buffers_kept, location, module_path, module_stack
from .hints import hint
from .registry import ATEN, FUNCTIONS, GROUPED, METHODS, MODULES, aten_name, \
    describe_target, module_converter
from .input_function import InputFunction
from .values import (SHAPE_ATTRS, SHAPE_METHODS, Derived, Param, Poison, Problem, Stacked,
                     Unsupported, any_value, MetaTensor, walk_values)
from .weights import Link, same


class Importer:
    """Walks a captured graph and builds the model (one per import)."""

    def __init__(self, cap: Captured, module: torch.nn.Module, model: Model):
        self.cap, self.module, self.model = cap, module, model
        self.values: dict[str, Any] = {}
        self.problems: list[Problem] = []
        self.links: dict[str, Link] = {}
        self.counters: dict[str, int] = {}
        self.bound: dict[int, Weight] = {}          # id(param tensor) -> weight
        self.op_paths: dict[str, str] = {}
        self.node: fx.Node | None = None
        self.submodule: torch.nn.Module | None = None
        self.whole_module = False          # converting a whole module call (name = path)
        self.grouped = False               # ... rebuilt from export's nodes (see GROUPED)
        self._aux: str | None = None       # default name of helper ops (see naming)
        self.path = ""
        self.examples: dict[str, torch.Tensor] = {}  # integer/bool input -> example value
        self._materialized: dict[int, Tensor] = {}   # id(Derived) -> its input_function
        self._params = dict(module.named_parameters(remove_duplicate=False))
        self._buffers = dict(module.named_buffers(remove_duplicate=False))

    # -- naming -------------------------------------------------------------------------------
    def taken(self, name: str) -> bool:
        return name in self.model.tensors or any(o.name == name for o in self.model.ops)

    def op_name(self, base: str | None = None) -> str:
        """A fresh op name: the module path or node name, suffixed _1, _2 when reused."""
        if base is None:
            base = self._aux or (self.path if self.whole_module else (
                self.node.name if self.node is not None else "op"))
        name, k = base, 1
        while self.taken(name):
            name = f"{base}_{k}"
            k += 1
        return name

    @contextmanager
    def naming(self, base: str):
        """Within: ops named by default are `base`, `base_1`, ... (helper ops of a module,
        so that the module's main op keeps the module's path as its name)."""
        saved, self._aux = self._aux, base
        try:
            yield
        finally:
            self._aux = saved

    # -- parameters and weights -----------------------------------------------------------------
    def param(self, key: str) -> Param:
        if key in self._params:
            p = self._params[key]
            return Param(key, p, p.requires_grad)
        if key in self._buffers:
            return Param(key, self._buffers[key], False)
        raise Unsupported(f"'{key}' is neither a parameter nor a buffer of the module")

    def module_param(self, module: torch.nn.Module, attr: str) -> Param:
        """The Param of `module.attr` for the module being converted."""
        key = f"{self.path}.{attr}" if self.path else attr
        value = getattr(module, attr)
        if not isinstance(value, torch.Tensor):
            raise Unsupported(f"{type(module).__name__}.{attr} is not a tensor")
        return Param(key, value, isinstance(value, torch.nn.Parameter) and value.requires_grad)

    def bind(self, op: Op, pairs) -> Op:
        """Give op's weights (in order) the values of `pairs` [(Param, Layout | None)]: the
        module's current values become the initial values, and links remember the keys.
        A parameter bound before (tied weights) is shared instead."""
        for k, (p, layout) in enumerate(pairs):
            if p is None:
                continue
            w = op.weights[k]
            if p.transposed:
                raise Unsupported(f"'{p.key}' is used transposed where the operator needs it "
                                  "as stored")
            layout = layout or same(p.value)
            prev = self.bound.get(id(p.value))
            if prev is not None:
                self._tie(op, k, prev, p)
                continue
            try:
                value = layout.to_op(p.value.detach(), w.shape)
            except ValueError as e:
                raise Unsupported(f"'{p.key}': {e}") from None
            self.model.initial_values[w.name] = value.to(getattr(torch, w.dtype))
            w.requires_grad = w.requires_grad and p.trainable
            self.links[w.name] = Link(w.name, p.key, layout)
            self.bound[id(p.value)] = w
        return op

    def _tie(self, op: Op, k: int, prev: Weight, p: Param) -> None:
        fresh = op.weights[k]
        if op.stages() != [op] or tuple(prev.shape) != tuple(fresh.shape):
            raise Unsupported(f"parameter '{p.key}' is shared with weight '{prev.name}' "
                              f"{prev.shape}; sharing is supported only between weights of "
                              "equal layout used by single-launch operators (tied "
                              "embedding/linear)")
        m = self.model
        m.weights.remove(fresh)
        del m.tensors[fresh.name]
        m.initial_values.pop(fresh.name, None)
        op.weights[k] = prev
        prev.users.append(op)

    def count_steps(self, key: str, value: torch.Tensor) -> None:
        """A buffer that counts training steps (num_batches_tracked)."""
        self.counters[key] = int(value)

    # -- operands ---------------------------------------------------------------------------------
    def register(self, op: Op) -> Op:
        """Add an importer-built op (extra_ops) to the model."""
        return extra_ops.register(self.model, op)

    def tensor(self, value, what: str = "operand") -> Tensor:
        """A model Tensor for `value`: parameters and constants become operators."""
        if isinstance(value, Tensor):
            return value
        if isinstance(value, Stacked):
            return self.stack(value)
        if isinstance(value, Derived):
            return self._materialize(value)
        if isinstance(value, Param) and value.transposed:
            t = self.tensor(Param(value.key, value.value, value.trainable))
            return self.model.transpose(t, 0, 1, name=self.op_name(f"{t.name}_t"))
        if isinstance(value, Param):
            base = value.key.replace(".", "_")
            cls = extra_ops.ParameterOp if value.trainable else extra_ops.ConstantOp
            prev = self.bound.get(id(value.value))
            if prev is not None and prev.owner is not None and prev.owner.type in (
                    "parameter", "constant"):
                return prev.owner.outputs[0]
            op = cls(self.model, tuple(value.value.shape), name=self.op_name(base))
            if not value.value.is_floating_point():
                self._int_constant(op, value.value)
            self.register(op)
            return self.bind(op, [(value, None)]).outputs[0]
        if isinstance(value, torch.Tensor):
            op = extra_ops.ConstantOp(self.model, tuple(value.shape), name=self.op_name(
                f"{self.node.name}_const" if self.node is not None else "const"))
            if not value.is_floating_point():
                self._int_constant(op, value)
            self.register(op)
            w = op.weights[0]
            self.model.initial_values[w.name] = value.detach().clone().to(
                getattr(torch, w.dtype)).reshape(w.shape).contiguous()
            return op.outputs[0]
        raise Unsupported(f"{what} {value!r} is not a tensor")

    def _int_constant(self, op: Op, value: torch.Tensor) -> None:
        dtype = str(value.dtype).replace("torch.", "")
        if dtype == "bool":
            raise Unsupported("a boolean tensor used as data")
        op.weights[0].dtype = dtype
        op.outputs[0].dtype = dtype

    def _materialize(self, value: Derived) -> Tensor:
        """The input_function operator computing a Derived value (one per value)."""
        if id(value) not in self._materialized:
            base = f"{self.node.name}_input" if self.node is not None else "input_function"
            op = InputFunction(self.model, list(value.sources), value.fn, value.example,
                               name=self.op_name(base))
            self._materialized[id(value)] = self.register(op).outputs[0]
        return self._materialized[id(value)]

    def stack(self, value: Stacked) -> Tensor:
        items = [self.model.reshape(t, (1, *t.shape), name=self.op_name(f"{t.name}_unsq"))
                 for t in value.items]
        if len(items) == 1:
            return items[0]
        return self.model.concat(items, 0, name=self.op_name(f"{self.node.name}_stack"))

    # -- the walk ---------------------------------------------------------------------------------
    def run(self) -> None:
        """Convert every node in order; problems are collected, not raised."""
        cap = self.cap
        for key, value in cap.mutated.items():
            if key.rsplit(".", 1)[-1] == "num_batches_tracked":
                self.count_steps(key, value)
            else:
                self.problems.append(Problem(key, "buffer", "in-place update", "forward", "",
                                             "forward changes this buffer in place, which "
                                             "torch.fx does not record; use method='export'"))
        groups = self._export_groups() if cap.kind == "export" else {}
        skip: set[str] = set()
        for node in cap.graph.nodes:
            if node.name in skip:
                continue
            self.node, self.submodule = node, None
            self.path = module_path(node)
            self.whole_module = node.op == "call_module" or self._in_leaf_module(node)
            self._aux = None
            if self.whole_module and node.op == "call_function":
                # export: a helper node inside a module with weights (LSTM's transposes)
                # must not take the name its main operator gets, the module's path.
                m = self._submodule(self.path)
                if any(True for _ in m.parameters(recurse=False)):
                    self._aux = f"{self.path}.{node.name}"
            before = len(self.model.ops)
            if node.name in groups:
                path, mtype, members, outs = groups[node.name]
                skip.update(n.name for n in members)
                self._convert_group(node, path, members, outs)
            else:
                self._convert_node(node)
            for op in self.model.ops[before:]:
                self.op_paths[op.name] = self.path

    def _convert_node(self, node: fx.Node) -> None:
        try:
            self.values[node.name] = self._convert(node)
        except (Unsupported, TaskrtError) as e:
            self._problem(node, str(e))
        except Exception as e:
            raise RuntimeError(f"import: converting node '{node.name}' ("
                               f"{describe_target(node, self.cap.root)}) at {location(node)} "
                               f"failed: {type(e).__name__}: {e}") from e

    def _in_leaf_module(self, node: fx.Node) -> bool:
        if self.cap.kind != "export" or not self.path:
            return False
        m = self._submodule(self.path)
        return m is not None and module_converter(m) is not None

    def _problem(self, node: fx.Node, reason: str) -> None:
        self.problems.append(Problem(node.name, node.op, describe_target(node, self.cap.root),
                                     location(node), module_path(node), reason))
        self.values[node.name] = self._stand_in(node)

    def _stand_in(self, node: fx.Node):
        """Model inputs shaped like the node's result (a tensor, or a tuple of them), so the
        nodes after an unsupported one are converted and reported too; Poison where the
        result's shape is unknown. The model is never used: the import fails."""
        value = node.meta.get("val")
        if value is None and self.cap.kind == "fx":
            value = self._fake_result(node)
        if value is None:
            return Poison(node.name)
        made = []

        def stand_in(v):
            if not isinstance(v, torch.Tensor):
                return v
            dtype = self.model.dtype if v.is_floating_point() else \
                str(v.dtype).replace("torch.", "")
            made.append(self.model.input(f"unsupported.{node.name}.{len(made)}",
                                         tuple(v.shape), dtype=dtype))
            return made[-1]
        return walk_values(value, stand_in)

    def _fake_result(self, node: fx.Node):
        """The node's result computed on fake tensors (shapes only), or None."""
        from torch._subclasses.fake_tensor import FakeTensorMode
        args, kwargs = self._arg(node.args), self._arg(node.kwargs)
        if any_value((args, kwargs), lambda v: isinstance(v, Poison)):
            return None
        try:
            with buffers_kept(self.cap.root), FakeTensorMode(allow_non_fake_inputs=True):
                args, kwargs = walk_values((args, kwargs), lambda v: torch.empty(
                    v.shape, dtype=getattr(torch, v.dtype)) if isinstance(v, Tensor) else
                    (v.view if isinstance(v, Param) else v))
                if node.op == "call_module":
                    return self.cap.root.get_submodule(node.target)(*args, **kwargs)
                if node.op == "call_method":
                    return getattr(args[0], node.target)(*args[1:], **kwargs)
                return node.target(*args, **kwargs)
        except Exception:          # its shape stays unknown: dependents are not reported
            return None

    def _arg(self, a):
        return walk_values(a, lambda v: self.values[v.name] if isinstance(v, fx.Node) else v)

    def _convert(self, node: fx.Node):
        cap = self.cap
        if node.op == "placeholder":
            return self._placeholder(node)
        if node.op == "get_attr":
            return self._get_attr(node)
        if node.op == "output":
            return None
        args, kwargs = self._arg(node.args), self._arg(node.kwargs)
        if any_value((args, kwargs), lambda v: isinstance(v, Poison)):
            return Poison(node.name)
        if node.op == "call_module":
            m = cap.root.get_submodule(node.target)
            self.submodule = m
            conv = module_converter(m)
            if conv is None:
                live = (Tensor, Param, Stacked)
                if not any_value((args, kwargs), lambda v: isinstance(v, live)) \
                        and not any(True for _ in m.parameters()):
                    return m(*args, **kwargs)
                raise Unsupported(self._hint())
            return conv(self, m, *args, **kwargs)
        if node.op == "call_method":
            return self._call(node, METHODS.get(node.target), args, kwargs,
                              lambda a, k: getattr(a[0], node.target)(*a[1:], **k))
        name = aten_name(node.target)
        conv = ATEN.get(name) if name is not None else FUNCTIONS.get(node.target)
        if conv is None and name and name.endswith("_") and args and isinstance(args[0], Tensor):
            conv = ATEN.get(name[:-1])      # x.add_(y) on an activation: its new value
        return self._call(node, conv, args, kwargs, lambda a, k: node.target(*a, **k))

    def _call(self, node, conv, args, kwargs, evaluate):
        live = any_value((args, kwargs), lambda v: isinstance(v, (Tensor, Stacked, Derived)) or
                         (isinstance(v, Param) and v.trainable))
        inplace = (node.op == "call_method" and str(node.target).endswith("_")
                   and not str(node.target).startswith("__")) or (
            (aten_name(node.target) or "").endswith("_"))
        if inplace and any_value(args, lambda v: isinstance(v, Param)):
            if conv is None:            # never mutate the user's module while importing
                raise Unsupported("an in-place update of a module buffer")
            return conv(self, *args, **kwargs)
        if not live:            # constants (and buffers): evaluate now
            return evaluate(*self._constants((args, kwargs)))
        if self._shape_query(node, args):
            meta = walk_values(args, lambda v: MetaTensor(v) if isinstance(v, Tensor) else
                               v.example if isinstance(v, Derived) else
                               (v.view if isinstance(v, Param) else v))
            return evaluate(meta, kwargs)
        if self._derivable(node, args, kwargs):
            return self._derive(args, kwargs, evaluate)
        if conv is None:
            raise Unsupported(self._hint())
        return conv(self, *args, **kwargs)

    def _derivable(self, node, args, kwargs) -> bool:
        """Code on integer/bool inputs only (masks, shifted labels), not read as indices."""
        def int_value(v):
            return isinstance(v, Derived) or (isinstance(v, Tensor) and v.name in self.examples)
        if not any_value((args, kwargs), int_value):
            return False
        if any_value((args, kwargs), lambda v: isinstance(v, (Stacked, Poison)) or (
                isinstance(v, Tensor) and v.name not in self.examples) or (
                isinstance(v, Param) and v.trainable)):
            return False
        return (aten_name(node.target) or getattr(node.target, "__name__", "")) \
            not in _TAKES_INDICES

    def _derive(self, args, kwargs, evaluate):
        """The node's value as a function of the integer inputs it reads (a Derived)."""
        sources: list[Tensor] = []

        def collect(v):
            for t in (v.sources if isinstance(v, Derived) else
                      (v,) if isinstance(v, Tensor) else ()):
                if t not in sources:
                    sources.append(t)
            return v
        walk_values((args, kwargs), collect)
        names = [t.name for t in sources]

        def fn(*values):
            env = dict(zip(names, values))

            def value(v):
                if isinstance(v, Derived):
                    return v.fn(*(env[t.name] for t in v.sources))
                if isinstance(v, Tensor):
                    return env[v.name]
                return v.view if isinstance(v, Param) else v
            a, k = walk_values((args, kwargs), value)
            return evaluate(a, k)
        example = fn(*(self.examples[n] for n in names))
        if example is None:
            return None
        if not isinstance(example, torch.Tensor):
            raise Unsupported(f"a value computed from the inputs {names} that is not a "
                              f"tensor ({type(example).__name__}): it would be fixed at "
                              "import time")
        one = [v for v in walk_values(args, lambda v: v) if isinstance(v, (Tensor, Derived))]
        if len(one) == 1 and isinstance(one[0], Tensor) and self._is_copy(self.node) and \
                tuple(one[0].shape) == tuple(example.shape) and \
                self.examples[one[0].name].dtype == example.dtype:
            return one[0]           # a view, copy or same-dtype cast of an input: itself
        return Derived(tuple(sources), fn, example)

    @staticmethod
    def _is_copy(node) -> bool:
        name = aten_name(node.target) or str(node.target)
        return name in _COPIES

    def _constants(self, ak):
        args, kwargs = walk_values(ak, lambda v: v.view if isinstance(v, Param) else v)
        return args, kwargs

    @staticmethod
    def _shape_query(node, args) -> bool:
        if node.op == "call_method":
            return node.target in SHAPE_METHODS
        if node.target is getattr:
            return args[1] in SHAPE_ATTRS
        name = aten_name(node.target)
        return name in ("sym_size", "sym_numel", "sym_stride")

    def _hint(self) -> str:
        return hint(self.node, self.cap.root)

    def _placeholder(self, node: fx.Node):
        cap = self.cap
        if node.name in cap.params:
            return self.param(cap.params[node.name])
        if node.name in cap.constants:
            return cap.constants[node.name]
        value = cap.inputs[node.name]
        if not isinstance(value, torch.Tensor):
            return value
        if value.is_floating_point():
            dtype = self.model.dtype
        else:
            dtype = str(value.dtype).replace("torch.", "")
        name = node.target if cap.kind == "fx" else node.name
        t = self.model.input(name, tuple(value.shape), dtype=dtype)
        if not value.is_floating_point():
            self.examples[t.name] = value
        return t

    def _get_attr(self, node: fx.Node):
        target = str(node.target)
        if target in self._params or target in self._buffers:
            return self.param(target)
        if target in self.cap.submodules:       # export: a higher-order op's graph
            return self.cap.submodules[target]
        obj = self.cap.root
        for part in target.split("."):
            obj = getattr(obj, part)
        return obj

    # -- export: modules export decomposes, rebuilt from their nodes -------------------------
    def _export_groups(self) -> dict:
        """first node name -> (path, type, member nodes, nodes used outside) of each call of
        a GROUPED module type."""
        groups, current = {}, None
        for node in self.cap.graph.nodes:
            if node.op != "call_function":
                current = None
                continue
            hit = None
            for path, mtype in module_stack(node):
                m = self._submodule(path)
                if m is not None and type(m) in GROUPED:
                    hit = (path, type(m))
                    break
            if hit is None:
                current = None
                continue
            if current is not None and current[0] == hit[0]:
                current[2].append(node)
            else:
                current = [hit[0], hit[1], [node]]
                groups[node.name] = current
        out = {}
        for first, (path, mtype, members) in groups.items():
            names = {n.name for n in members}
            used = [n for n in members if any(u.name not in names for u in n.users)
                    or n in (self.cap.user_outputs or [])]
            out[first] = (path, mtype, members, used)
        return out

    def _submodule(self, path: str):
        try:
            return self.module.get_submodule(path) if path else self.module
        except AttributeError:
            return None

    def _convert_group(self, first: fx.Node, path: str, members, outs) -> None:
        names = {n.name for n in members}
        ext = []
        for n in members:
            for a in n.all_input_nodes:
                if a.name not in names and a not in ext:
                    ext.append(a)
        m = self.module.get_submodule(path)
        own = {f"{path}.{k}" for k, _ in m.named_parameters()} | \
            {f"{path}.{k}" for k, _ in m.named_buffers()}
        args = []
        for a in ext:
            v = self.values.get(a.name)
            if isinstance(v, Param) and v.key in own:
                continue
            args.append(v)
        self.path, self.submodule, self.whole_module = path, m, True
        self._aux = None              # the module's operator takes the module's path
        try:
            if any(isinstance(v, Poison) for v in args):
                raise _Skip()
            self.grouped = True
            result = MODULES[type(m)](self, m, *args)
            results = [r for r in (result if isinstance(result, tuple) else (result,))
                       if r is not None]
            for n in [n for n in outs if self._copy_of_outside(n, names)]:
                # x.to(its own dtype) inside the module is x: a later `x + residual`
                # reads that node, which is the module's input, not a result.
                self.values[n.name] = self.values[n.args[0].name]
                outs = [o for o in outs if o is not n]
            if len(outs) > len(results):
                raise Unsupported(f"{len(outs)} results of the call are used; only "
                                  f"{len(results)} are supported")
            for n, r in zip(outs, results):
                self.values[n.name] = r
        except _Skip:
            for n in outs:
                self.values[n.name] = Poison(first.name)
        except (Unsupported, TaskrtError) as e:
            self.problems.append(Problem(first.name, "module call", f"{type(m).__module__}."
                                         f"{type(m).__qualname__}", location(first), path,
                                         str(e)))
            for n in outs:
                self.values[n.name] = self._stand_in(n)
        finally:
            self.grouped = False
        for n in members:
            self.values.setdefault(n.name, Poison(first.name))

    def _copy_of_outside(self, node: fx.Node, members: set) -> bool:
        """A copy-like node (to, alias, contiguous) whose value is a node outside the
        group with the same shape and dtype."""
        src = node.args[0] if node.args else None
        if not isinstance(src, fx.Node) or src.name in members or not self._is_copy(node):
            return False
        a, b = node.meta.get("val"), src.meta.get("val")
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and \
            a.shape == b.shape and a.dtype == b.dtype

    # -- result ------------------------------------------------------------------------------
    def outputs(self) -> list:
        out_node = next(n for n in self.cap.graph.nodes if n.op == "output")
        if self.cap.user_outputs is not None:
            raw = self.cap.user_outputs
        else:
            raw = out_node.args[0]
        flat, _ = torch.utils._pytree.tree_flatten(self._arg(raw))
        return [self.stack(v) if isinstance(v, Stacked) else v for v in flat]

    def inputs(self) -> list[Tensor]:
        return [v for n in self.cap.graph.nodes if n.op == "placeholder"
                for v in [self.values.get(n.name)] if isinstance(v, Tensor)]


# Operations that read integer tensors as indices: their integer operands stay operands.
_TAKES_INDICES = {"embedding", "cross_entropy_loss", "cross_entropy", "nll_loss",
                  "nll_loss_nd", "gather", "index_select"}
# Operations whose result, at the operand's shape and dtype, is the operand's value.
_COPIES = {"view", "reshape", "_unsafe_view", "contiguous", "clone", "alias", "to", "_to_copy",
           "lift_fresh_copy", "type_as", "float", "long", "int", "expand", "expand_as"}


class _Skip(Exception):
    pass
