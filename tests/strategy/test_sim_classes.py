"""The full simulation's work per task class (taskrt/taskclasses.py, taskrt.liveness's
BufferUses, strategy/timearrays.py) equals the per-node definitions it stands for: every
task of a class has its class's cost key, buffers (on its own device) and reads/writes; the
memory model equals one built node by node from liveness.buffers_of; the timing arrays
equal NodeTimer asked node by node, resource numbering included, with and without host
costs."""
import random
import warnings

import numpy as np
import pytest

from strategy.costs import CostModel
from strategy.delta import SimulationSession
from strategy.experts import megatron
from strategy.machine_model import machine_model
from strategy.memsweep import liveness_peak
from strategy.simulator import NodeTimer, Resources, node_arrays
from strategy.timearrays import node_arrays_by_class
from taskrt import bufferuses, othercolumns
from taskrt.liveness import (INSTANCE, PARTIAL, STAGING, STATE, Liveness, buffers_of,
                             is_temporary, own_bytes, peak_bytes, resolve_keep, results_of,
                             task_reads_writes)
from taskrt.taskclasses import TaskClasses
from taskrt.taskgraph import TASK

from mpi.models import cnn, lstm_model, mlp, random_strategy
from test_delta import app_model, cpu_ranks_with_host, p100_with_host

warnings.simplefilter("ignore")       # analytic-cost fallback warnings

BUILDS = {"mlp": lambda: mlp()[0], "cnn": lambda: cnn()[0], "lstm": lambda: lstm_model()[0],
          "inception": lambda: app_model("inception"),
          "transformer": lambda: app_model("transformer"), "gpt": lambda: app_model("gpt"),
          "gpt-t2": lambda: app_model("gpt"), "gpt-t4": lambda: app_model("gpt")}


def graph_of(name: str, seed: int, machine=None):
    """The graph of model `name` on 4 devices: data parallel (seed -1), a random strategy
    of `seed`, or for "gpt-tK" Megatron's with t=K (most nodes copies and reduces)."""
    model = BUILDS[name]()
    if name.startswith("gpt-t"):
        strategy = megatron(model, 4, 4, tensor_parallel=int(name[len("gpt-t"):]))
    else:
        strategy = None if seed < 0 else random_strategy(model, 4, seed)
    mm = machine() if machine else machine_model("p100:1")
    return SimulationSession(model, mm, CostModel(), strategy).graph, mm


# Small models data parallel (seed -1) and under random strategies; apps: Inception's
# concats and Red+ patterns, the transformer's saved state.
CASES = [(name, seed) for name in ("mlp", "cnn", "lstm") for seed in (-1, 3, 4)] + \
    [("inception", 3), ("transformer", -1), ("transformer", 3), ("gpt-t2", -1), ("gpt-t4", -1)]


def reference_liveness(graph, keep=None, devices=None):
    """taskrt.liveness's model node by node: (keys, device, nbytes, users, persistent, kept)."""
    users: dict = {}
    read_by_writer: set = set()
    reads_of_writers: dict = {}
    for node in graph.nodes:
        for key in buffers_of(node, graph.nodes):
            lst = users.setdefault(key, [])
            if not lst or lst[-1] != node.id:
                lst.append(node.id)
        if node.kind is TASK:
            reads, writes = task_reads_writes(node)
            if writes:
                read_by_writer.update(reads)
                for name in writes:
                    reads_of_writers.setdefault(name, []).append(reads)
    kept = resolve_keep(graph, keep, results_of(graph.regions, read_by_writer,
                                                lambda name: reads_of_writers.get(name, ())))
    buffers = [((kind, name, dev, None), graph.regions[name].nbytes(rect))
               for kind, rects in ((INSTANCE, graph.instance_rects),
                                   (PARTIAL, graph.partial_rects))
               for (name, dev), rect in rects.items()]
    buffers += [(key, key[3].nbytes) for key in users if key[0] == STAGING]
    keys, device, nbytes, lists, persistent = [], [], [], [], {}
    for key, size in buffers:
        if devices is not None and key[2] not in devices:
            continue
        if not is_temporary(key[1], size, kept):
            persistent[key[2]] = persistent.get(key[2], 0) + size
        elif key in users:
            keys.append(key), device.append(key[2]), nbytes.append(size)
            lists.append(users[key])
    for key, lst in users.items():
        if key[0] == STATE and (devices is None or key[2] in devices):
            keys.append(key), device.append(key[2]), nbytes.append(own_bytes(key))
            lists.append(lst)
    return keys, device, nbytes, lists, persistent, kept


@pytest.mark.parametrize("name,seed", CASES)
def test_every_task_of_a_class_is_like_its_first(name, seed):
    graph, _ = graph_of(name, seed)
    classes = TaskClasses.of(graph.nodes)
    assert len(classes) < len(classes.ids) or len(classes.ids) < 8
    for i, c in zip(classes.ids.tolist(), classes.cls.tolist()):
        node, first = graph.nodes[i], classes.first[c]
        assert node.cost_key == first.cost_key
        assert task_reads_writes(node) == task_reads_writes(first)
        mine = [k for k in buffers_of(node) if k[0] != STATE]
        assert [k[:2] for k in mine] == [k[:2] for k in buffers_of(first) if k[0] != STATE]
        assert all(k[2] == node.device for k in mine)


@pytest.mark.parametrize("name,seed", CASES)
def test_liveness_equals_the_model_node_by_node(name, seed):
    graph, _ = graph_of(name, seed)
    assert_liveness_equals_the_model(graph, seed)


@pytest.mark.parametrize("name,seed", [c for c in CASES if c[1] != 4])
def test_liveness_in_small_chunks_equals_the_model_node_by_node(name, seed, monkeypatch):
    """BufferUses hands out the tasks' uses chunk by chunk (GPT-3 at 1,024 GPUs: 16 chunks of
    65,536 tasks): chunks of 3 tasks, as many as a graph has, give the model node by node
    too."""
    monkeypatch.setattr(bufferuses, "_TASK_CHUNK", 3)
    graph, _ = graph_of(name, seed)
    assert_liveness_equals_the_model(graph, seed)


def test_a_listed_buffer_nobody_uses_is_no_temporary():
    """Liveness numbers the used temporaries among all candidate buffers: a region's buffer
    that the graph lists but no node uses (here one added on a further device) is none, and
    the temporaries after it keep their users."""
    graph, _ = graph_of("mlp", 3)
    live = Liveness.of(graph)
    name = live.keys[0][1]                      # a temporary region: the first temporary's
    top = max(d for _, d in graph.instance_rects)
    graph.instance_rects[name, top + 1] = graph.instance_rects[live.keys[0][1:3]]
    assert (INSTANCE, name, top + 1, None) not in Liveness.of(graph).keys
    assert_liveness_equals_the_model(graph, 3)


@pytest.mark.parametrize("name,seed", [c for c in CASES if c[1] != 4])
def test_relabelled_uses_are_the_uses_relabelled(name, seed):
    """BufferUses.uses(relabel) leaves out the tasks' uses of a region's buffers of one kind
    that relabel makes -1 on every device (the memory model's persistent buffers): the
    other uses are uses() relabelled, each as often, and some were left out."""
    from collections import Counter
    graph, _ = graph_of(name, seed)
    uses = bufferuses.BufferUses.of(graph)
    n = len(uses.nbytes)
    n_rect = n - len(uses.extras)
    rng = np.random.default_rng(seed + 20)
    for dead, loose in ((0.0, 0.0), (0.3, 0.2), (0.7, 0.5), (1.0, 0.0)):
        relabel = rng.integers(0, 7, n + 1)
        regions = np.flatnonzero(rng.random(len(graph.regions)) < dead)
        relabel[:n_rect][np.isin(uses.region[:n_rect], regions)] = -1  # whole regions
        relabel[:n][rng.random(n) < loose] = -1                         # single buffers
        relabel[-1] = -1
        want, got, left_out = Counter(), Counter(), 0
        for (b, nodes), (c, same) in zip(uses.uses(), uses.uses(relabel)):
            b = relabel[b]
            want.update(zip(b[b >= 0].tolist(), nodes[b >= 0].tolist()))
            got.update(zip(c[c >= 0].tolist(), same[c >= 0].tolist()))
            left_out += len(b) - len(c)
        assert got == want
        if dead == loose == 0:
            assert left_out == 0
        if dead == 1:
            assert left_out > 0


def assert_liveness_equals_the_model(graph, seed):
    some = {0, 2}
    for keep, devices in ((None, None), ("all", None), (None, some)):
        live = Liveness.of(graph, keep, devices)
        keys, device, nbytes, users, persistent, kept = reference_liveness(graph, keep, devices)
        assert live.keys == keys
        assert live.device == device and live.nbytes == nbytes
        assert live.users == users
        assert list(live.persistent.items()) == list(persistent.items())
        assert live.kept == kept
        rng = np.random.default_rng(seed + 10)
        n = len(graph.nodes)
        start = np.sort(rng.integers(0, 50, n)).astype(float)
        end = start + rng.integers(0, 3, n)         # some take no time: ties and late frees
        want = peak_bytes(device, nbytes, users, start, end, persistent)
        assert live.peak(start, end) == want
        # The temporaries with their lifetimes on the timeline instead of their uses (the
        # simulator's memory).
        on, s, e = Liveness.on_timeline(graph, start, end, keep, devices)
        assert on.keys == keys and on.device == device and on.nbytes == nbytes
        assert list(on.persistent.items()) == list(persistent.items()) and on.kept == kept
        assert list(on.peak(s, e).items()) == list(want.items())
        assert list(liveness_peak(on, s, e).items()) == list(want.items())


@pytest.mark.parametrize("machine", [None, p100_with_host, cpu_ranks_with_host],
                         ids=["p100", "p100-host", "cpu-ranks-host"])
@pytest.mark.parametrize("name,seed", [c for c in CASES if c[1] != 4 and c[0] != "inception"])
def test_timing_by_class_equals_the_timer_node_by_node(name, seed, machine):
    graph, mm = graph_of(name, seed, machine)
    costs = CostModel()
    by_node, by_class = Resources(), Resources()
    want = node_arrays(graph, NodeTimer(mm, costs), by_node)
    got = node_arrays_by_class(graph, TaskClasses.of(graph.nodes), NodeTimer(mm, costs),
                               by_class)
    assert by_class.items == by_node.items         # numbered by first use, as node by node
    for a, b in zip(got[:3], want[:3]):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert (got[3] is None) == (machine is None)
    if machine is not None:
        for a, b in zip(got[3], want[3]):
            assert np.array_equal(a, b)


def test_a_preempted_timer_is_asked_node_by_node():
    """A timer drawing random slices per node keeps its draws in node order."""
    from strategy.preemption import PreemptedTimer
    from strategy.simulator import simulate
    graph, _ = graph_of("cnn", 3)
    mm = p100_with_host()
    costs = CostModel()
    asked = []

    class Recording(PreemptedTimer):
        def timing(self, node):
            asked.append(node.id)
            return super().timing(node)
    a = simulate(graph, mm, costs, Recording(mm, costs, 1.5, 1e-5, random.Random(1)))
    assert asked == list(range(len(graph.nodes)))
    b = simulate(graph, mm, costs, PreemptedTimer(mm, costs, 1.5, 1e-5, random.Random(1)))
    assert np.array_equal(a.end, b.end) and a.memory == b.memory


# Random strategies of the GPT, the LSTM and the CNN: the copies and reduces of
# tensor-parallel and mixed configs (reduction copies from partial sums and instances,
# reduces of staged, partial and instance inputs).
RANDOM = [(name, seed) for seed in range(10) for name in ("gpt", "lstm", "cnn")]


@pytest.mark.parametrize("name,seed", RANDOM)
def test_copies_and_reduces_by_columns_equal_the_node_by_node_definitions(name, seed):
    """strategy/timearrays.py's other_timings and taskrt/otheruses.py's column_uses (taken,
    not fallen back from) against NodeTimer.timing and buffers_of asked node by node."""
    graph, mm = graph_of(name, seed)
    classes = TaskClasses.of(graph.nodes)
    cols = othercolumns.other_columns(graph, classes)
    assert bufferuses.column_uses(cols, len(graph.regions), 8, 10 ** 6) is not None
    costs = CostModel()
    by_node, by_class = Resources(), Resources()
    want = node_arrays(graph, NodeTimer(mm, costs), by_node)
    got = node_arrays_by_class(graph, classes, NodeTimer(mm, costs), by_class)
    assert by_class.items == by_node.items
    for a, b in zip(got[:3], want[:3]):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    keys, device, nbytes, users, persistent, kept = reference_liveness(graph)
    live = Liveness.of(graph, classes=classes)
    assert live.keys == keys and live.users == users
    assert live.device == device and live.nbytes == nbytes
    assert list(live.persistent.items()) == list(persistent.items())

