"""Why one strategy is faster than another: where their simulated iterations differ.

`breakdown` sums a simulated iteration by kind of work: compute (tasks and reductions),
transfers (copies: seconds and bytes) and synchronization (all-reduces: seconds and bytes),
with compute and synchronization also per operator (its tasks; the all-reduces of its
weights). `compare` lines up two strategies: totals, and each operator whose config differs
with what that change saved or cost.

    base = Breakdown.of(SimulationSession(model, mm, costs, None, opt))
    text = compare(model, base_configs, base, new_configs, new).text()
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from itertools import chain
from typing import Callable

from taskrt.taskgraph import COPY, REDUCE, TASK


@dataclass
class Breakdown:
    makespan: float
    compute_s: float = 0.0
    transfer_s: float = 0.0
    transfer_bytes: int = 0
    sync_s: float = 0.0
    sync_bytes: int = 0
    op_compute: dict = field(default_factory=dict)    # operator -> task seconds
    op_sync: dict = field(default_factory=dict)       # operator -> all-reduce seconds
    other_tasks_s: float = 0.0                        # tasks of no operator (input reads)

    @classmethod
    def of(cls, session) -> "Breakdown":
        """The breakdown of a SimulationSession's current graph and result (later(), now)."""
        return cls.later(session)()

    @classmethod
    def later(cls, session) -> Callable[[], "Breakdown"]:
        """Breakdown.of(session) as the session is now, summed when called: what it reads
        is kept (the nodes in id order, their durations, the operator of each launch and
        weight), so a search keeps one for each new best and sums only the last (in make
        demo's search, summing each was ~18% of its CPU). The nodes come from the planner's
        node groups where it has them: a graph's node ids are its groups' nodes in order
        (taskrt/graphview.py), so the object view need not be built."""
        planner = getattr(session, "planner", None)
        return cls._kept(session, list(
            session.graph.nodes if planner is None else
            chain.from_iterable(group.nodes for group in planner.groups())))

    @classmethod
    def of_nodes(cls, session, nodes) -> "Breakdown":
        """The breakdown of the session's result, `nodes` its graph's nodes in id order."""
        return cls._kept(session, nodes)()

    @classmethod
    def _kept(cls, session, nodes) -> Callable[[], "Breakdown"]:
        """_summed of the session's result and `nodes` (its graph's, in id order), with what
        it reads of the session taken now."""
        res = session.result
        return partial(cls._summed, res.makespan, nodes, (res.end - res.start).tolist(),
                       _launch_ops(session), _weight_ops(session))

    @classmethod
    def _summed(cls, makespan: float, nodes, durations: list, launch_op: dict,
                weight_op: dict) -> "Breakdown":
        out = cls(makespan)
        for node, dur in zip(nodes, durations):
            if node.kind is TASK:
                out.compute_s += dur
                op = launch_op.get(node.launch.name)
                if op is not None:
                    out.op_compute[op] = out.op_compute.get(op, 0.0) + dur
                else:
                    out.other_tasks_s += dur
            elif node.kind is REDUCE:
                out.compute_s += dur
            elif node.kind is COPY:
                out.transfer_s += dur
                out.transfer_bytes += node.nbytes
            else:
                out.sync_s += dur
                out.sync_bytes += node.nbytes
                op = _weight_owner(node.region.name, weight_op)
                if op is not None:
                    out.op_sync[op] = out.op_sync.get(op, 0.0) + dur
        return out

    def to_dict(self) -> dict:
        return {k: v for k, v in vars(self).items()}


def _launch_ops(session) -> dict:
    """{launch name: its operator's name} of the session's lowering now."""
    return {launch.name: name for name, part in session.lowering.parts.items()
            for launch in part.forward + part.backward + list(part.updates.values())}


def _weight_ops(session) -> dict:
    """{weight name: its operator's name}."""
    return {w.name: w.owner.name for w in session.model.weights}


def _weight_owner(region: str, weight_op: dict):
    """The operator owning the weight a gradient region belongs to ('fc1.weight@grad')."""
    return weight_op.get(region.partition("@")[0])


@dataclass
class OpChange:
    op: str
    old: object
    new: object
    compute_s: float           # new minus old, summed over the operator's tasks
    sync_s: float              # new minus old, its weights' all-reduces


@dataclass
class Comparison:
    name_a: str
    name_b: str
    a: Breakdown
    b: Breakdown
    changes: list[OpChange]

    def text(self, top: int = 12) -> str:
        a, b = self.a, self.b
        sp = a.makespan / b.makespan if b.makespan > 0 else float("nan")
        lines = [f"{self.name_b} vs {self.name_a}: {_ms(b.makespan)} vs {_ms(a.makespan)} "
                 f"per iteration ({sp:.2f}x)",
                 f"  compute          {_ms(b.compute_s)} vs {_ms(a.compute_s)} (device time, "
                 "all devices)",
                 f"  transfers        {_ms(b.transfer_s)} vs {_ms(a.transfer_s)}; "
                 f"{_mb(b.transfer_bytes)} vs {_mb(a.transfer_bytes)} moved",
                 f"  synchronization  {_ms(b.sync_s)} vs {_ms(a.sync_s)}; "
                 f"{_mb(b.sync_bytes)} vs {_mb(a.sync_bytes)} all-reduced",
                 f"  {len(self.changes)} operator(s) changed"
                 + (", largest effects first:" if self.changes else "")]
        ranked = sorted(self.changes, key=lambda c: -abs(c.compute_s) - abs(c.sync_s))
        for c in ranked[:top]:
            lines.append(f"    {c.op}: {c.old} -> {c.new}: compute {_signed(c.compute_s)}, "
                         f"sync {_signed(c.sync_s)}")
        if len(ranked) > top:
            lines.append(f"    ... and {len(ranked) - top} more")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"a": self.name_a, "b": self.name_b, "a_breakdown": self.a.to_dict(),
                "b_breakdown": self.b.to_dict(),
                "changes": [{"op": c.op, "old": str(c.old), "new": str(c.new),
                             "compute_s": c.compute_s, "sync_s": c.sync_s}
                            for c in self.changes]}


def compare(model, configs_a: dict, a: Breakdown, configs_b: dict, b: Breakdown,
            name_a: str = "data parallel", name_b: str = "searched") -> Comparison:
    changes = []
    for op in model.ops:
        old, new = configs_a.get(op.name), configs_b.get(op.name)
        if old != new:
            changes.append(OpChange(op.name, old, new,
                                    b.op_compute.get(op.name, 0.0) - a.op_compute.get(op.name, 0.0),
                                    b.op_sync.get(op.name, 0.0) - a.op_sync.get(op.name, 0.0)))
    return Comparison(name_a, name_b, a, b, changes)


def _ms(s: float) -> str:
    return f"{s * 1e3:.4g} ms"


def _signed(s: float) -> str:
    return "0 ms" if abs(s) < 1e-12 else f"{s * 1e3:+.3g} ms"


def _mb(n: int) -> str:
    return f"{n / 1e6:.4g} MB"
