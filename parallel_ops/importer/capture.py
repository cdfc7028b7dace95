"""Capturing a torch.nn.Module's graph: torch.fx at module level, or torch.export.

Both give an fx Graph; `Captured` says what each placeholder is (a user input, a parameter
or buffer with its state-dict key, a constant) and which output values belong to the user.
fx keeps every module the importer knows as one `call_module` node (the tracer treats those
types as leaves) and traces through everything else (Sequential, user blocks). torch.export
records ATen operators with the module path of each node (`nn_module_stack`), which the
converter uses to name operators and to regroup modules that export decomposes
(MultiheadAttention).
"""
from __future__ import annotations

import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

_TORCH_DIR = os.path.dirname(torch.__file__)
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


@dataclass
class Captured:
    kind: str                                   # "fx" or "export"
    graph: fx.Graph
    root: torch.nn.Module                       # get_attr targets resolve here
    inputs: dict[str, Any] = field(default_factory=dict)       # placeholder -> example value
    params: dict[str, str] = field(default_factory=dict)       # placeholder -> state key
    constants: dict[str, torch.Tensor] = field(default_factory=dict)
    user_outputs: list | None = None            # output nodes/values given to the user
    submodules: dict = field(default_factory=dict)   # export: graphs of higher-order ops
    mutated: dict[str, torch.Tensor] = field(default_factory=dict)  # fx: buffers the trace
    #                                             changed in place (key -> value before)


@contextmanager
def training_mode(module: torch.nn.Module):
    """Within: `module` and its submodules in train() mode; afterwards each has its own
    flag back. The import builds a training graph (dropout, batch statistics) whatever
    the flag; Trainer(training=False) evaluates that graph as eval() would."""
    flags = [(m, m.training) for m in module.modules()]
    module.train()
    try:
        yield
    finally:
        for m, flag in flags:
            m.training = flag


@contextmanager
def buffers_kept(module: torch.nn.Module):
    """Within: code may change `module`'s buffers in place; afterwards they hold their old
    values again, and the dict yielded maps each changed buffer's key to that value."""
    before = {k: b.detach().clone() for k, b in module.named_buffers()}
    mutated: dict[str, torch.Tensor] = {}
    try:
        yield mutated
    finally:
        with torch.no_grad():
            for k, b in module.named_buffers():
                if k in before and not torch.equal(b, before[k]):
                    mutated[k] = before[k]
                    b.copy_(before[k])


class _LeafTracer(fx.Tracer):
    """Keeps modules that have a converter whole; traces through all others."""

    def __init__(self, converter):
        super().__init__()
        self.converter = converter
        self.record_stack_traces = True

    def is_leaf_module(self, m, qualname):
        # Known modules, and torch.nn layers without a converter (reported as unsupported);
        # containers and user modules (subclasses of known ones that redefine forward too)
        # are traced through.
        if self.converter(m) is not None:
            return True
        containers = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)
        return type(m).__module__.startswith("torch.nn") and not isinstance(m, containers)


def capture_fx(module: torch.nn.Module, args: tuple, kwargs: dict, converter) -> Captured:
    """Symbolic trace keeping modules that `converter(m)` knows as call_module nodes
    (raises on failure)."""
    tracer = _LeafTracer(converter)
    # fx runs in-place updates of buffers (timm's `num_batches_tracked.add_(1)`) on the
    # real tensors without recording them: undo them and report which buffers changed.
    with buffers_kept(module) as mutated:
        graph = tracer.trace(module)
    cap = Captured("fx", graph, module, mutated=mutated)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    given = list(args)
    for k, node in enumerate(placeholders):
        if k < len(given):
            cap.inputs[node.name] = given[k]
        elif node.target in kwargs:
            cap.inputs[node.name] = kwargs[node.target]
        elif node.args:
            cap.inputs[node.name] = node.args[0]            # the parameter's default
        else:
            raise TypeError(f"import: forward argument '{node.target}' has no example value; "
                            "pass it in example_inputs.")
    unknown = set(kwargs) - {n.target for n in placeholders}
    if unknown:
        raise TypeError(f"import: example inputs {sorted(unknown)} are not arguments of "
                        f"{type(module).__name__}.forward.")
    return cap


def capture_export(module: torch.nn.Module, args: tuple, kwargs: dict) -> Captured:
    """torch.export.export with static shapes; parameters become keyed placeholders."""
    from torch.export import export
    from torch.export.graph_signature import InputKind, OutputKind
    ep = export(module, args, kwargs)
    graph = ep.graph
    cap = Captured("export", graph, module)
    cap.submodules = dict(ep.graph_module.named_children())
    flat, _ = torch.utils._pytree.tree_flatten((args, kwargs))
    user = iter(flat)
    for spec in ep.graph_signature.input_specs:
        name = spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            cap.inputs[name] = next(user)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            cap.params[name] = spec.target
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            cap.constants[name] = ep.constants[spec.target]
        else:
            raise TypeError(f"import: export input '{name}' of kind {spec.kind} is not "
                            "supported.")
    out_node = next(n for n in graph.nodes if n.op == "output")
    outs = list(out_node.args[0])
    cap.user_outputs = [o for o, spec in zip(outs, ep.graph_signature.output_specs)
                        if spec.kind == OutputKind.USER_OUTPUT]
    return cap


def location(node: fx.Node) -> str:
    """file:line of the user code that made `node` (the innermost frame outside torch)."""
    trace = node.meta.get("stack_trace") or getattr(node, "stack_trace", None) or ""
    frames = _FRAME.findall(trace)
    user = [f for f in frames if not os.path.abspath(f[0]).startswith(_TORCH_DIR)]
    pick = user[-1] if user else (frames[-1] if frames else None)
    if pick is None:
        return "unknown location"
    return f"{pick[0]}:{pick[1]} in {pick[2]}"


def module_path(node: fx.Node) -> str:
    """Qualified name of the innermost module that made `node` ('' at the top)."""
    if node.op == "call_module":
        return str(node.target)
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return _clean_path(path)


def module_stack(node: fx.Node) -> list[tuple[str, type | str]]:
    """(qualified name, module type) from outermost to innermost, for export nodes."""
    stack = node.meta.get("nn_module_stack") or {}
    return [(_clean_path(p), t) for p, t in stack.values()]


def _clean_path(path: str) -> str:
    # export may print paths as "L['self'].blocks[0].attn" or "blocks.0.attn"
    path = re.sub(r"^L\['self'\]\.?", "", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"\['([^']+)'\]", r".\1", path)
    path = re.sub(r"@\d+$", "", path)
    return path.strip(".")
