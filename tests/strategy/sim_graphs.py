"""Hand-built inputs for the simulator tests (test_sim_exact.py): a machine file with round
numbers, and TaskGraphs built node by node whose task times are exact seconds in a real
Profile read by a real CostModel; and `same_result`, the equality of two simulations that
the session tests (test_change_all.py, test_memory_last.py) assert.

The machine "lab": one node of four devices of kind "X" (1 GB/s memory, 1 us launch
overhead), each joined to one switch "sw" by its own duplex PCIe link. d0..d2's links take
1 us and 1 GB/s; d3's is the slow one (3 us, 0.25 GB/s) unless `uniform`. Every transfer
between two devices is therefore two hops: the source's link up, the destination's down.
"""
from __future__ import annotations

import numpy as np

from strategy.costs import CostModel, Measurement, Profile
from strategy.machines import from_dict
from strategy.simulator import ROUTE
from taskrt import (AllReduceNode, CopyNode, IndexLaunch, Rect, ReduceNode, Region,
                    TaskGraph, TaskNode)

KIND = "X"
LATENCY, BANDWIDTH = 1e-6, 1e9                  # d0..d2's links
SLOW_LATENCY, SLOW_BANDWIDTH = 3e-6, 2.5e8      # d3's link in the non-uniform machine
MEMORY_BANDWIDTH, LAUNCH_OVERHEAD = 1e9, 1e-6


def lab_dict(uniform: bool = False, capacity: int = 10**9) -> dict:
    """The machine file object of "lab" (docs/machines.md's format)."""
    def pcie(k, latency=LATENCY, bandwidth=BANDWIDTH):
        return {"kind": "pcie", "ends": [f"d{k}", "sw"], "latency": latency,
                "bandwidth": bandwidth}
    slow = pcie(3) if uniform else pcie(3, SLOW_LATENCY, SLOW_BANDWIDTH)
    return {
        "format": "soapflow-machine", "version": 1, "name": "lab",
        "summary": "one switch" + (", uniform" if uniform else ", d3 slow"),
        "device_specs": {KIND: {"fp32_flops": 1e12, "fp16_flops": 1e12, "fp64_flops": 1e12,
                                "memory_bandwidth": MEMORY_BANDWIDTH,
                                "memory_capacity": capacity,
                                "launch_overhead": LAUNCH_OVERHEAD}},
        "switches": [],
        "node_types": {"box": {"devices": [KIND] * 4, "points": ["sw"],
                               "links": [pcie(0), pcie(1), pcie(2), slow]}},
        "nodes": ["box"],
        "links": [],
    }


def lab(uniform: bool = False, capacity: int = 10**9):
    return from_dict(lab_dict(uniform, capacity), "lab")


class HandGraph:
    """A TaskGraph built node by node; `profile` holds each task's chosen seconds."""

    def __init__(self, model):
        self.model = model
        self.graph = TaskGraph(model.taskrt_machine())
        self.profile = Profile()

    def costs(self) -> CostModel:
        return CostModel(self.profile)

    def region(self, name: str, elements: int, dtype: str = "float32") -> Region:
        r = self.graph.regions.get(name)
        if r is None:
            r = self.graph.regions[name] = Region(name, (elements,), dtype)
        return r

    def task(self, name: str, device: int, seconds: float, preds=()) -> int:
        launch = IndexLaunch(name, None, (1,), lambda color: (), devices=(device,))
        node = TaskNode(len(self.graph.nodes), launch, (0,), device, (), ())
        self.profile.add(node.cost_key, KIND, Measurement(seconds))
        return self._add(node, preds)

    def copy(self, region: Region, src: int, dst: int, preds=(), reduction=False) -> int:
        node = CopyNode(len(self.graph.nodes), "hand", region, region.rect, src, dst,
                        reduction=reduction)
        return self._add(node, preds)

    def reduce(self, region: Region, device: int, inputs, preds=()) -> int:
        node = ReduceNode(len(self.graph.nodes), "hand", region, region.rect, device,
                          tuple(inputs))
        return self._add(node, preds)

    def allreduce(self, region: Region, devices, preds=()) -> int:
        node = AllReduceNode(len(self.graph.nodes), "hand", region, region.rect,
                             tuple(devices))
        return self._add(node, preds)

    def hold(self, region: Region, device: int, elements: int | None = None,
             partial: bool = False) -> None:
        """Give `device` an instance (or partial-sum buffer) of the region's first elements."""
        rect = Rect((0,), (region.shape[0] if elements is None else elements,))
        rects = self.graph.partial_rects if partial else self.graph.instance_rects
        rects[region.name, device] = rect

    def _add(self, node, preds) -> int:
        self.graph.add(node, list(preds))
        return node.id


def hold(free: dict, resources, t: float, d: float) -> tuple[float, float]:
    """(start, end) of work of d seconds on `resources`, at t the earliest, as the list
    scheduler's rule says in plain Python (the oracles' copy of it): FIFO per resource;
    all held together from when all are free, or, after simulator.ROUTE, a copy's links
    each in turn (a link serves it once free and once it left the link before), the copy
    timed on its last. `free` (resource -> when free) is updated."""
    if len(resources) > 1 and resources[0] is ROUTE:
        for r in resources[1:]:
            t = max(t, free.get(r, 0.0))
            free[r] = t + d
        return t, t + d
    t = max([t] + [free.get(r, 0.0) for r in resources])
    for r in resources:
        free[r] = t + d
    return t, t + d


def same_result(got, want, where) -> None:
    """Two simulation results equal node for node: makespan, every node's start and end,
    each device's peak memory and what is over capacity."""
    assert got.makespan == want.makespan, where
    assert np.array_equal(got.start, want.start), where
    assert np.array_equal(got.end, want.end), where
    assert got.memory == want.memory, where
    assert got.over_capacity == want.over_capacity, where
