"""dropout: zero elements with probability p and scale the rest by 1/(1-p) while training.

Dims: n (sample: axis 0) and a1, a2, ... (attribute: every other axis). The mask does not
come from torch's RNG, which would make it depend on the split and on the device: element
i of the tensor is kept when a counter-based hash of (model seed, model.step_count, the
op's name, i) is at least p * 2**32. Every part hashes its own global indices, so all
splits, devices and ranks see one mask, and each step draws a new one. Compiled with
training=False the op is the identity. The reference applies the same mask function to the
whole tensor: it cannot match torch's own dropout, whose mask comes from the global RNG;
it matches F.dropout's formula (x * mask * (1 / (1 - p))), not its draw.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import torch

from taskrt.geometry import Rect

from .elementwise import axis_dims, axis_names
from .errors import ShapeError
from .model import Model, builder
from .op import Op, PartWork
from .tensor import Tensor

_M32 = 0xFFFFFFFF


def _mul32(x, c: int):
    """x * c mod 2**32 for 32-bit x and c, without overflowing int64."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & _M32


def _mix32(x):
    """Wellons' lowbias32, a bijective 32-bit hash (on ints or int64 tensors)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def _key(seed: int, step: int, name: str) -> int:
    key = 0
    for word in (seed & _M32, (seed >> 32) & _M32, step & _M32, zlib.crc32(name.encode())):
        key = _mix32(key ^ word)
    return key


def keep_mask(seed: int, step: int, name: str, p: float, shape, rect: Rect,
              device=None) -> torch.Tensor:
    """The keep mask (bool) of `rect` of a tensor of `shape` at this step."""
    key = _key(seed, step, name)
    threshold = round(p * 2 ** 32)
    if (device is None or torch.device(device).type == "cpu") and math.prod(shape) <= _M32:
        return torch.from_numpy(_mask_uint32(_low_indices(tuple(shape), rect), key, threshold))
    index = torch.zeros((), dtype=torch.int64, device=device)
    stride = 1
    for axis in reversed(range(len(shape))):
        view = [1] * len(shape)
        view[axis] = -1
        index = index + (torch.arange(rect.lo[axis], rect.hi[axis], dtype=torch.int64,
                                      device=device) * stride).view(view)
        stride *= shape[axis]
    h = _mix32(_mix32((index & _M32) ^ key) ^ (index >> 32))
    return h >= threshold


# The same hash on the CPU in numpy's uint32, whose products wrap mod 2**32 by definition: 16
# array operations instead of ~60 on int64 tensors (keep_mask was ~20% of an imported tiny
# GPT-2's iteration). For tensors of at most 2**32 elements (index >> 32 is then 0, and
# _mix32(x ^ 0) is _mix32(x)). Equal to the tensor formula bit for bit (tests/ops/test_dropout).
_INDEX_CACHE: dict = {}
_INDEX_CACHE_BYTES = [0]
_CACHE_LIMIT_BYTES = 64 << 20          # a part's flat indices are reused every step


def _low_indices(shape: tuple, rect: Rect) -> np.ndarray:
    """The flat indices (all below 2**32) of `rect` within `shape`, as uint32 of the rect's
    shape; cached while the cache holds under _CACHE_LIMIT_BYTES."""
    key = (shape, rect)
    got = _INDEX_CACHE.get(key)
    if got is not None:
        return got
    index = np.zeros((), dtype=np.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        view = [1] * len(shape)
        view[axis] = -1
        index = index + (np.arange(rect.lo[axis], rect.hi[axis], dtype=np.uint32)
                         * np.uint32(stride)).reshape(view)
        stride *= shape[axis]
    index = np.ascontiguousarray(np.broadcast_to(index, rect.shape), dtype=np.uint32)
    if _INDEX_CACHE_BYTES[0] + index.nbytes <= _CACHE_LIMIT_BYTES:
        index.setflags(write=False)
        _INDEX_CACHE[key] = index
        _INDEX_CACHE_BYTES[0] += index.nbytes
    return index


def _mask_uint32(index: np.ndarray, key: int, threshold: int) -> np.ndarray:
    h = np.bitwise_xor(index, np.uint32(key))
    for _ in range(2):                  # _mix32 twice, in place
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x7FEB352D)
        h ^= h >> np.uint32(15)
        h *= np.uint32(0x846CA68B)
        h ^= h >> np.uint32(16)
    return h >= np.uint64(threshold) if threshold > _M32 else h >= np.uint32(threshold)


class Dropout(Op):
    type = "dropout"

    def __init__(self, model: Model, x: Tensor, p: float, name: str | None = None):
        super().__init__(model.unique_name("dropout", name))
        if not 0.0 <= p <= 1.0:
            raise ShapeError(f"dropout '{self.name}': p={p} is not a probability. Use "
                             "0 <= p <= 1.")
        if x.ndim < 1:
            raise ShapeError(f"dropout '{self.name}': input '{x.name}' is a scalar; it needs "
                             "at least a batch axis.")
        self.model = model
        self.params = {"p": p}
        self.inputs = [x]
        model.new_tensor(self, x.shape, x.dtype)
        names = axis_names(x.ndim)
        self.dims = axis_dims(x.shape)
        self.labels = {"inputs": (names,), "weights": (), "outputs": (names,)}

    def _keep(self, x: torch.Tensor, rect: Rect) -> torch.Tensor:
        p = self.params["p"]
        return keep_mask(self.model.seed, self.model.step_count, self.name, p,
                         self.inputs[0].shape, rect, x.device)

    def capture_hazard(self, spec=None) -> str | None:
        """Its mask changes every step (a hash of model.step_count, made on the host): a
        CUDA graph would replay one mask (taskrt.executor.capture runs it eagerly)."""
        if self.training and self.params["p"] != 0.0:
            return "dropout's mask is a hash of the step count, made per step on the host"
        return None

    def _factor(self) -> float:
        p = self.params["p"]
        return 0.0 if p == 1.0 else 1.0 / (1.0 - p)

    def _apply(self, x: torch.Tensor, rect: Rect) -> torch.Tensor:
        if not self.training or self.params["p"] == 0.0:
            return x
        return x * self._keep(x, rect) * self._factor()

    def forward(self, spec, inputs, weights):
        return [self._apply(inputs[0], spec.outputs[0])]

    # dx = dy * keep / (1 - p): one multiplication, without an autograd graph per part.
    explicit_backward = True

    def forward_saving(self, spec, inputs, weights):
        """forward() as x * (keep * (1 / (1 - p))), saving that factor for backward. In
        float32 and float64 this is x * keep * (1 / (1 - p)) bit for bit (x * keep is exact,
        and torch rounds the Python factor to the dtype either way); reduced precision
        types compute the factor's product in float32, so they take autograd's path."""
        x = inputs[0]
        if x is None or x.dtype not in (torch.float32, torch.float64):
            return None
        if not self.training or self.params["p"] == 0.0:
            return [x], None
        scaled = self._keep(x, spec.outputs[0]).to(x.dtype) * self._factor()
        return [x * scaled], scaled

    def backward(self, spec, saved, output_grads, need_inputs, need_weights):
        if not need_inputs[0]:
            return [None], []
        dy = output_grads[0]
        return [dy if saved is None else dy * saved], []

    def saved_state_bytes(self, spec, input_grads, weight_grads):
        """forward_saving keeps the scaled mask of its part (none when it keeps every
        value); reduced precision parts (autograd's path) are measured."""
        dtype = self.inputs[0].dtype
        if spec.inputs[0].empty or dtype not in ("float32", "float64"):
            return None
        if not self.training or self.params["p"] == 0.0:
            return 0
        return math.prod(spec.outputs[0].shape) * getattr(torch, dtype).itemsize

    def work(self, phase, spec, plan):
        """forward_saving's mask made with tensor operations (off the CPU, as on meta: a
        zeros, per axis an arange, a product and a sum, the 40 operations of the hash, a
        comparison), its cast and scaling, the product; backward's product. Reduced
        precision parts (autograd's path) are counted."""
        dtype = self.inputs[0].dtype
        if spec.inputs[0].empty or dtype not in ("float32", "float64"):
            return None
        mask = self.training and self.params["p"] != 0.0
        if phase == "bwd":
            return PartWork(0, int(mask))
        return PartWork(0, 45 + 3 * len(spec.inputs[0].shape) if mask else 0)

    def reference(self, inputs, weights):
        """The same hash mask applied to the whole tensor (see the module docstring)."""
        x = inputs[0]
        return [self._apply(x, Rect.from_shape(x.shape))]


@builder
def dropout(model: Model, x: Tensor, p: float = 0.5, name: str | None = None) -> Tensor:
    """Like torch.nn.functional.dropout(x, p, training) but with a split-independent mask."""
    return model.add_op(Dropout(model, x, p, name)).outputs[0]
