"""The per-rank scheduler as a pure state machine, driven without MPI: several ranks'
schedulers run against a fake network with random delivery orders; every node runs once, after
its local predecessors, messages pair up, and collectives start in the same order everywhere."""
import random

import pytest

from parallel_ops import SGD
from taskrt import Machine
from taskrt.executor.scheduler import (COLLECT, POST_RECV, RECV, RUN, SEND, START, UNPACK,
                                       RankScheduler, node_ranks)

from mpi.models import cnn, lstm_model, mlp, random_strategy


def graph_of(build, ranks, devices_per_rank, seed):
    model, _ = build()
    machine = Machine.grid(ranks, devices_per_rank)
    strategy = random_strategy(model, len(machine), seed)
    return model.compile(machine, strategy, SGD(lr=0.1), executor="local").graph


def drive(graph, ranks, seed):
    """Run every rank's scheduler to completion; returns the log of (rank, instruction)."""
    rng = random.Random(seed)
    scheds = [RankScheduler(graph, r) for r in range(ranks)]
    queue = [(r, ins) for r, s in enumerate(scheds) for ins in s.start()]
    started: dict[int, set[int]] = {}           # collective -> ranks that started it
    order: dict[int, list[int]] = {r: [] for r in range(ranks)}
    posted, sent, log = set(), set(), []
    while queue:
        r, ins = queue.pop(rng.randrange(len(queue)))
        log.append((r, ins))
        s, i = scheds[r], ins.node
        node = graph.nodes[i]
        if ins.op == POST_RECV:
            posted.add((r, i))
            if i in sent:                         # it was sent before the receive was posted
                queue += [(r, x) for x in s.message_arrived(i)]
            continue
        assert all(p in s.done for p in s.local_preds[i]), f"rank {r} ran {i} too early"
        if ins.op in (RUN, UNPACK):
            queue += [(r, x) for x in s.node_done(i)]
        elif ins.op == SEND:
            dst = graph.machine.devices[node.dst].rank
            sent.add(i)
            queue += [(r, x) for x in s.node_done(i)]
            if (dst, i) in posted:
                queue += [(dst, x) for x in scheds[dst].message_arrived(i)]
        elif ins.op == START:
            order[r].append(i)
            queue += [(r, x) for x in s.collective_started(i)]
            group = started.setdefault(i, set())
            group.add(r)
            if group == node_ranks(node, graph.machine):
                for q in group:
                    queue += [(q, x) for x in scheds[q].node_done(i)]
    for r, s in enumerate(scheds):
        assert s.finished, f"rank {r} stuck with {s.pending()[:5]}"
    return scheds, order


@pytest.mark.parametrize("build", [mlp, cnn, lstm_model], ids=["mlp", "cnn", "lstm"])
@pytest.mark.parametrize("ranks,per_rank", [(2, 1), (2, 2), (3, 1)])
def test_random_delivery_orders_finish_and_respect_dependences(build, ranks, per_rank):
    for seed in range(3):
        graph = graph_of(build, ranks, per_rank, seed)
        scheds, order = drive(graph, ranks, seed)
        for node in graph.nodes:
            owners = {r for r, s in enumerate(scheds) if node.id in s.roles}
            assert owners == node_ranks(node, graph.machine), node.describe()
        # Collectives of one group start in one order on every member.
        for s in scheds:
            for group, ids in s.groups.items():
                for r in group:
                    assert [i for i in order[r] if i in ids] == ids


def test_roles_of_a_copy_between_ranks():
    graph = graph_of(mlp, 2, 1, seed=1)
    cross = [n for n in graph.copies()
             if graph.machine.devices[n.src].rank != graph.machine.devices[n.dst].rank]
    assert cross, "the random strategy should move data between ranks"
    for n in cross:
        src, dst = (graph.machine.devices[n.src].rank, graph.machine.devices[n.dst].rank)
        assert RankScheduler(graph, src).roles[n.id] == SEND
        assert RankScheduler(graph, dst).roles[n.id] == RECV


def test_a_receive_waits_for_its_local_predecessors_and_its_message():
    # Data parallel on 2 ranks: every gradient all-reduce is a collective of both ranks.
    model, _ = mlp()
    graph = model.compile(Machine.grid(2, 1), None, SGD(lr=0.1), executor="local").graph
    s = RankScheduler(graph, 0)
    assert any(r == COLLECT for r in s.roles.values())
    first = s.start()
    assert all(ins.op != START for ins in first) or s.groups
    with pytest.raises(RuntimeError, match="reported done twice"):
        run = next(ins.node for ins in first if ins.op == RUN)
        s.node_done(run)
        s.node_done(run)


def test_scheduler_for_one_rank_runs_every_node():
    model, _ = cnn()
    graph = model.compile(Machine.local(3), random_strategy(model, 3, 5), SGD(lr=0.1),
                          executor="local").graph
    (s,), _ = drive(graph, 1, seed=0)
    assert len(s.done) == len(graph.nodes)
    assert set(s.roles.values()) <= {RUN, COLLECT}
