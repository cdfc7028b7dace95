"""import_module: capture (fx, else export), convert, report every unsupported node."""
from __future__ import annotations

from typing import Any

import torch

from ..activation import fuse_activations
from .fused import fuse_elementwise
from .packed_attention import fold_attention_heads
from ..errors import UnsupportedModelError
from ..model import Model
from . import hf
from .capture import capture_export, capture_fx, training_mode
from .imported import Imported
from .registry import module_converter
from .values import format_problems
from .walk import Importer


def _example(example_inputs) -> tuple[tuple, dict]:
    if isinstance(example_inputs, dict):
        return (), dict(example_inputs)
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,), {}
    return tuple(example_inputs), {}


def _dtype(module: torch.nn.Module) -> str:
    for p in list(module.parameters()) + list(module.buffers()):
        if p.is_floating_point():
            return str(p.dtype).replace("torch.", "")
    return "float32"


def import_module(module: torch.nn.Module, example_inputs: Any, method: str = "auto",
                  name: str | None = None, seed: int = 0,
                  fuse_activations: bool = True, fuse_elementwise: bool = True) -> Imported:
    """A parallel_ops Model equal to `module` on inputs shaped like `example_inputs` (a
    tensor, a tuple of positional arguments or a dict of keyword arguments). The module's
    current parameters and buffers become the model's initial weights.

    method: "fx" (torch.fx.symbolic_trace, modules kept whole), "export" (torch.export,
    for code fx cannot trace, e.g. Python control flow over shapes) or "auto" (fx, then
    export if fx fails). Raises UnsupportedModelError listing every node that has no
    parallel operator, with its name, target and source location.

    fuse_activations: fold each ReLU, ReLU6, GELU, tanh or sigmoid that alone reads the output
    of a Conv2d, Linear or BatchNorm2d into that operator (parallel_ops/activation.py):
    one launch instead of two, but the operator's reduction dim must then stay whole and
    the activation has no operator (no name) of its own in strategies.

    fuse_elementwise: replace each group of elementwise operators that only feed each other
    (HF GPT-2's GELU: eight) with one operator running their code (importer/fused.py): one
    launch, and autograd's backward, instead of one launch and one backward per member;
    and attention's head split and merge (reshape + transpose of q, k, v and of the output)
    into the attention operator (importer/packed_attention.py).

        imp = import_module(net, (torch.randn(8, 3, 32, 32),))
        imp.model.summary()
    """
    if method not in ("auto", "fx", "export"):
        raise ValueError(f"import_module: method '{method}'; use 'auto', 'fx' or 'export'.")
    with training_mode(module):
        return _import(module, example_inputs, method, name, seed,
                       (fuse_activations, fuse_elementwise))


def _import(module, example_inputs, method, name, seed, fuse) -> Imported:
    args, kwargs = _example(example_inputs)
    kwargs = hf.call_kwargs(module, kwargs)
    hf.register_modules(module)
    model_name = name or type(module).__name__
    fx_error = None
    if method in ("auto", "fx"):
        try:
            cap = capture_fx(module, args, kwargs, module_converter)
        except Exception as e:          # fx cannot trace it: say why, or try export
            if method == "fx":
                raise UnsupportedModelError(
                    f"import of {type(module).__name__}: torch.fx cannot trace it "
                    f"({type(e).__name__}: {e}). Use method='export' (or 'auto').") from e
            fx_error = e
        else:
            return _convert(cap, module, model_name, seed, "fx", fuse)
    try:
        cap = capture_export(module, args, kwargs)
    except Exception as e:
        why = f"; torch.fx failed first ({type(fx_error).__name__}: {fx_error})" \
            if fx_error is not None else ""
        raise UnsupportedModelError(
            f"import of {type(module).__name__}: torch.export failed ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}){why}.") from e
    return _convert(cap, module, model_name, seed, "export", fuse)


def _convert(cap, module, name, seed, method, fuse: tuple) -> Imported:
    model = Model(name, seed=seed, dtype=_dtype(module))
    imp = Importer(cap, module, model)
    imp.run()
    if imp.problems:
        raise UnsupportedModelError(format_problems(module, method, imp.problems))
    inputs, outputs = imp.inputs(), imp.outputs()
    if fuse[0]:
        for op_name in fuse_activations(model, keep=outputs):
            imp.op_paths.pop(op_name, None)
    if fuse[1]:
        for op_name, gone in fold_attention_heads(model, keep=outputs).items():
            for name in gone:
                imp.op_paths.pop(name, None)
        for op_name, members in fuse_elementwise(model, keep=outputs).items():
            imp.op_paths[op_name] = imp.op_paths.get(members[-1], "")
            for m in members:
                imp.op_paths.pop(m, None)
    return Imported(model, module, inputs, outputs, imp.links, imp.counters, method,
                    imp.op_paths)
