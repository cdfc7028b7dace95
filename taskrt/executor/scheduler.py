"""RankScheduler: which nodes of a TaskGraph this rank runs, and when. A pure state machine.

Events in ("started", "node done", "message arrived"), instructions out, so tests drive it
without MPI and the MPI executor drives it with real messages. Roles of a node on a rank:
  RUN      a task, a copy within the rank, or a reduce: runs when its local preds are done;
  SEND     a copy to another rank: pack and send when the source-side preds are done
           (done as soon as it is packed, so the source may be overwritten);
  RECV     a copy from another rank: the receive is posted at start; unpack into the
           destination once the message arrived and the destination-side preds are done;
  COLLECT  an all-reduce with a device on this rank: starts when its local preds are done
           and every earlier all-reduce of the same rank group has started here (all ranks
           of a group start their collectives in the same order: node id order).
Preds on other ranks are never waited for directly: messages and collectives carry them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..taskgraph import ALLREDUCE, COPY

RUN, SEND, RECV, COLLECT = "run", "send", "recv", "collect"
POST_RECV, UNPACK, START = "post_recv", "unpack", "start"


@dataclass(frozen=True, slots=True)
class Instruction:
    op: str          # RUN, SEND, POST_RECV, UNPACK, START (a collective)
    node: int


def node_ranks(node, machine) -> set[int]:
    """Ranks that take part in a node."""
    devs = machine.devices
    return {devs[d].rank for d in node.devices}


def role_of(node, machine, rank: int) -> str | None:
    devs = machine.devices
    if node.kind is COPY:
        s, d = devs[node.src].rank, devs[node.dst].rank
        if s == d:
            return RUN if s == rank else None
        return SEND if s == rank else RECV if d == rank else None
    if node.kind is ALLREDUCE:
        return COLLECT if any(devs[x].rank == rank for x in node.devices) else None
    return RUN if devs[node.device].rank == rank else None


class RankScheduler:
    def __init__(self, graph, rank: int):
        self.graph = graph
        self.rank = rank
        machine = graph.machine
        self.roles: dict[int, str] = {}
        for n in graph.nodes:
            r = role_of(n, machine, rank)
            if r is not None:
                self.roles[n.id] = r
        # Local preds: preds with a role here. (Ids only grow along edges.)
        self.local_preds: dict[int, list[int]] = {}
        self.local_succs: dict[int, list[int]] = {i: [] for i in self.roles}
        for i in self.roles:
            ps = [p for p in graph.preds[i] if p in self.roles]
            self.local_preds[i] = ps
            for p in ps:
                self.local_succs[p].append(i)
        # Collectives grouped by the ranks taking part, in id order.
        self.groups: dict[tuple[int, ...], list[int]] = {}
        for i, r in self.roles.items():
            if r == COLLECT:
                g = tuple(sorted(node_ranks(graph.nodes[i], machine)))
                self.groups.setdefault(g, []).append(i)
        self.group_of = {i: g for g, ids in self.groups.items() for i in ids}
        self.reset()

    def reset(self) -> None:
        """Forget progress; the next start() begins a new iteration."""
        self.waiting = {i: len(ps) for i, ps in self.local_preds.items()}
        self.arrived: set[int] = set()
        self.done: set[int] = set()
        self.issued: set[int] = set()
        self.group_next = {g: 0 for g in self.groups}
        self.ready_collectives: set[int] = set()

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.roles)

    def pending(self) -> list[int]:
        return sorted(i for i in self.roles if i not in self.done)

    # -- events ------------------------------------------------------------------------------
    def start(self) -> list[Instruction]:
        out = [Instruction(POST_RECV, i) for i, r in sorted(self.roles.items()) if r == RECV]
        for i in sorted(self.roles):
            if self.waiting[i] == 0:
                out.extend(self._preds_done(i))
        return out

    def node_done(self, i: int) -> list[Instruction]:
        """The driver finished this rank's part of node i."""
        if i in self.done:
            raise RuntimeError(f"scheduler: node {i} reported done twice")
        self.done.add(i)
        out = []
        for s in self.local_succs[i]:
            self.waiting[s] -= 1
            if self.waiting[s] == 0:
                out.extend(self._preds_done(s))
        return out

    def message_arrived(self, i: int) -> list[Instruction]:
        """The message of RECV node i is in its buffer."""
        self.arrived.add(i)
        if self.waiting[i] == 0:
            return self._issue(UNPACK, i)
        return []

    def collective_started(self, i: int) -> list[Instruction]:
        """The driver started collective i; the next one of its group may start."""
        g = self.group_of[i]
        self.group_next[g] += 1
        return self._next_collective(g)

    # -- internals ---------------------------------------------------------------------------
    def _issue(self, op: str, i: int) -> list[Instruction]:
        if i in self.issued:
            return []
        self.issued.add(i)
        return [Instruction(op, i)]

    def _preds_done(self, i: int) -> list[Instruction]:
        role = self.roles[i]
        if role == RUN:
            return self._issue(RUN, i)
        if role == SEND:
            return self._issue(SEND, i)
        if role == RECV:
            return self._issue(UNPACK, i) if i in self.arrived else []
        self.ready_collectives.add(i)
        return self._next_collective(self.group_of[i])

    def _next_collective(self, g) -> list[Instruction]:
        ids = self.groups[g]
        k = self.group_next[g]
        if k < len(ids) and ids[k] in self.ready_collectives:
            return self._issue(START, ids[k])
        return []
