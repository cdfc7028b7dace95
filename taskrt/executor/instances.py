"""Physical instances: the device buffers a TaskGraph runs on, allocated once per graph.

Each (region, device) gets one tensor covering the bounding rect of every rect used there;
Red+ requirements get a second tensor of partial sums; each reduction copy gets a staging
tensor. Views for every node are sliced once, so replaying the graph allocates nothing.
"""
from __future__ import annotations

import torch

from ..geometry import Rect
from ..region import Region

TORCH_DTYPES = {name: getattr(torch, name) for name in
                ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16",
                 "int32", "int64", "bool")}


class Buffer:
    """One tensor holding `rect` of a region on one device."""
    __slots__ = ("rect", "tensor")

    def __init__(self, region: Region, rect: Rect, device: str):
        self.rect = rect
        self.tensor = torch.zeros(rect.shape, dtype=TORCH_DTYPES[region.dtype], device=device)

    def view(self, rect: Rect) -> torch.Tensor:
        return self.tensor[rect.slices_within(self.rect)]


class InstanceStore:
    """The instances, partial-sum buffers and staging buffers of the devices one process owns."""

    def __init__(self, graph, device_ids):
        self.graph = graph
        machine = graph.machine
        self.owned = set(device_ids)
        self.torch_device = {d: machine.devices[d].torch_device for d in self.owned}
        self.instances: dict[tuple[str, int], Buffer] = {}
        self.partials: dict[tuple[str, int], Buffer] = {}
        self.staging: dict[int, Buffer] = {}
        for (name, dev), rect in graph.instance_rects.items():
            if dev in self.owned:
                self.instances[name, dev] = Buffer(graph.regions[name], rect, self.torch_device[dev])
        for (name, dev), rect in graph.partial_rects.items():
            if dev in self.owned:
                self.partials[name, dev] = Buffer(graph.regions[name], rect, self.torch_device[dev])
        for node in graph.nodes:
            if node.kind == "copy" and node.reduction and node.dst in self.owned:
                self.staging[node.id] = Buffer(node.region, node.rect, self.torch_device[node.dst])

    def instance(self, region_name: str, device: int, rect: Rect) -> torch.Tensor:
        return self.instances[region_name, device].view(rect)

    def partial(self, region_name: str, device: int, rect: Rect) -> torch.Tensor:
        return self.partials[region_name, device].view(rect)

    def bytes_per_device(self) -> dict[int, int]:
        out = {d: 0 for d in self.owned}
        for bufs in (self.instances, self.partials):
            for (_, dev), b in bufs.items():
                out[dev] += b.tensor.numel() * b.tensor.element_size()
        for cid, b in self.staging.items():
            out[self.graph.nodes[cid].dst] += b.tensor.numel() * b.tensor.element_size()
        return out
