"""The simulator's timing and the memory model of copies, reduces and all-reduces by columns
(taskrt/othercolumns.py, strategy/timearrays.py other_timings, taskrt/otheruses.py) equal
their per-node definitions (NodeTimer.timing, bufferkeys.buffers_of asked node by node) on
random hand-built graphs: copies plain and reduction (from partial sums or the instance),
some on one device, of parts of regions of several dtypes, one region the graph does not
list; reduces of partial, instance and staged inputs, some staged by a copy that is not
theirs (column_uses falls back to buffers_of then); all-reduces; tasks between. And
OtherColumns' regions read once per run of nodes of one region object (runs_graph)."""
import random
import warnings

import numpy as np
import pytest

from strategy.machine_model import machine_model
from strategy.simulator import NodeTimer, Resources, node_arrays
from strategy.timearrays import node_arrays_by_class
from taskrt import IndexLaunch, Rect, Region, TaskNode
from taskrt.privilege import Privilege, RegionRequirement
from taskrt.taskgraph import COPY, REDUCE, TASK, ReduceInput
from taskrt.bufferuses import BufferUses
from taskrt.liveness import STAGING, Liveness, buffers_of, peak_bytes
from taskrt.othercolumns import OtherColumns, other_columns
from taskrt.otheruses import column_uses
from taskrt.taskclasses import TaskClasses

from sim_graphs import HandGraph, lab
from test_sim_classes import reference_liveness

warnings.simplefilter("ignore")


def random_graph(seed: int, mismatch: str | None = None):
    """A HandGraph of ~150 random nodes on the lab machine (4 devices), and with `mismatch`
    a reduce at the end whose staged input is not a staging buffer of that copy's
    (MISMATCHES)."""
    rng = random.Random(seed)
    h = HandGraph(lab())
    graph = h.graph
    # Big enough to be temporaries (the memory model frees no buffer under 256 KB) for
    # most of their parts.
    regions = [h.region(f"r{k}", rng.randint(1, 400_000), rng.choice(["float32", "bfloat16",
                                                                      "float64"]))
               for k in range(4)]
    regions.append(Region("unlisted", (16,), "float16"))      # not in graph.regions
    for r in regions[:4]:
        for d in range(4):
            if rng.random() < 0.7:
                h.hold(r, d, partial=rng.random() < 0.3)

    def part(r):
        lo = rng.randrange(r.shape[0])
        return Rect((lo,), (rng.randint(lo, r.shape[0]),))     # (possibly empty)
    ids = []
    staging = []                                   # (copy id, region, dst) of reduction copies
    for _ in range(rng.randint(20, 150)):
        preds = rng.sample(ids, min(len(ids), rng.randint(0, 2)))
        kind = rng.random()
        if kind < 0.15:
            i = h.task(f"t{rng.randint(0, 3)}", rng.randrange(4), rng.choice([1e-6, 3e-6]),
                       preds)
        elif kind < 0.6:
            r = rng.choice(regions)
            src, dst = rng.randrange(4), rng.randrange(4)
            reduction = rng.random() < 0.5
            i = h.copy(r, src, dst, preds, reduction=reduction)
            node = h.graph.nodes[i]
            node.rect = part(r)
            node.from_partial = rng.random() < 0.3       # (read only by a reduction copy)
            if reduction:
                staging.append((i, r, dst))
        elif kind < 0.9:
            r = rng.choice(regions)
            d = rng.randrange(4)
            inputs = []
            for _ in range(rng.randint(0, 5)):
                source = rng.choice(["partial", "instance", "staged"])
                mine = [c for c in staging if c[1] is r and c[2] == d]
                if source == "staged" and not mine:
                    source = "instance"
                if source == "staged":
                    c = rng.choice(mine)
                    inputs.append(ReduceInput("staged", part(r), c[0]))
                    preds.append(c[0])
                else:
                    inputs.append(ReduceInput(source, part(r)))
            i = h.reduce(r, d, inputs, sorted(set(preds)))
        else:
            r = rng.choice(regions[:4])
            devs = sorted(rng.sample(range(4), rng.randint(1, 4)))
            i = h.allreduce(r, devs, preds)
            h.graph.nodes[i].in_partial = tuple(rng.random() < 0.3 for _ in devs)
        ids.append(i)
    # A task reading r0..r3 whose output a last task reads: the graph's result is the last
    # task's, so r0..r3 are no results and their buffers temporaries.
    middle, loss = h.region("middle", 4), h.region("loss", 1)
    reads = tuple(RegionRequirement(r, r.rect, Privilege.READ) for r in regions[:4])
    for device, region, reqs in ((0, middle, reads), (1, loss, (
            RegionRequirement(middle, middle.rect, Privilege.READ),))):
        launch = IndexLaunch(f"last {region.name}", None, (1,), lambda color: (),
                             devices=(device,))
        reqs += (RegionRequirement(region, region.rect, Privilege.WRITE_DISCARD),)
        node = TaskNode(len(graph.nodes), launch, (0,), device, reqs, (None,) * len(reqs))
        graph.add(node, ids[-3:])
        ids.append(node.id)
    if mismatch is not None:
        big = [h.region("big", 300_000), h.region("big2", 300_000)]
        unlisted = [Region("unlisted", (300_000,)), Region("unlisted2", (300_000,))]
        copy_region, reduce_region = (unlisted if mismatch == "unlisted name" else
                                      big if mismatch == "region" else big[:1] * 2)
        copy_dst, reduce_device = 1, 2 if mismatch == "device" else 1
        later = mismatch == "copy after the reduce"
        at = len(graph.nodes) + (1 if later else 0)
        if not later:
            h.copy(copy_region, 0, copy_dst, ids[-1:], reduction=mismatch != "plain copy")
        h.reduce(reduce_region, reduce_device,
                 [ReduceInput("staged", reduce_region.rect, at)], ids[-1:])
        if later:
            h.copy(copy_region, 0, copy_dst, ids[-1:], reduction=True)
    return h


# Each makes a reduce's staged input another buffer than its copy's staging buffer: the
# copy's destination or region (listed or not) differs, it is no reduction copy, or it
# comes after the reduce (then the reduce is its buffer's first user).
MISMATCHES = ["device", "region", "unlisted name", "plain copy", "copy after the reduce"]


@pytest.mark.parametrize("seed", range(40))
def test_columns_equal_the_node_by_node_definitions(seed):
    graph = random_graph(seed).graph
    cols = other_columns(graph, TaskClasses.of(graph.nodes))
    assert column_uses(cols, len(graph.regions), 4, 10 ** 6) is not None    # (taken)
    assert_columns_equal_the_definitions(random_graph(seed), seed)


@pytest.mark.parametrize("seed", range(20))
def test_staging_keys_made_when_asked_are_buffers_ofs(seed):
    """BufferUses' extras: the column copies' staging keys (StagingKeys, made when asked),
    iterated or indexed, are buffers_of's keys of the reduction copies in node order; the
    other extras follow."""
    graph = random_graph(seed).graph
    extras = BufferUses.of(graph, TaskClasses.of(graph.nodes)).extras
    want = [k for n in graph.nodes if n.kind is COPY and n.reduction
            for k in buffers_of(n) if k[0] == STAGING]
    assert len(extras.staged) == len(want) > 0
    assert list(extras.staged) == want == [extras[k] for k in range(len(want))]
    assert list(extras) == want + extras.rest == [extras[k] for k in range(len(extras))]


@pytest.mark.parametrize("mismatch", MISMATCHES)
def test_a_staged_input_not_its_copys_staging_buffer_is_asked_node_by_node(mismatch):
    graph = random_graph(7, mismatch).graph
    cols = other_columns(graph, TaskClasses.of(graph.nodes))
    assert column_uses(cols, len(graph.regions), 4, 10 ** 6) is None
    assert_columns_equal_the_definitions(random_graph(7, mismatch), 7)


def assert_columns_equal_the_definitions(h, seed):
    graph = h.graph
    classes = TaskClasses.of(graph.nodes)
    for mm in (lab(), machine_model("p100:1")):
        by_node, by_class = Resources(), Resources()
        want = node_arrays(graph, NodeTimer(mm, h.costs()), by_node)
        got = node_arrays_by_class(graph, classes, NodeTimer(mm, h.costs()), by_class)
        assert by_class.items == by_node.items
        for a, b in zip(got[:3], want[:3]):
            assert a.dtype == b.dtype and np.array_equal(a, b)
    for keep, devices in ((None, None), ("all", None), (None, {1, 3})):
        live = Liveness.of(graph, keep, devices, classes=classes)
        keys, device, nbytes, users, persistent, kept = reference_liveness(graph, keep,
                                                                           devices)
        assert live.keys == keys and live.users == users
        assert keys or keep == "all"                  # (temporaries to compare)
        assert live.device == device and live.nbytes == nbytes
        assert list(live.persistent.items()) == list(persistent.items())
        rng = np.random.default_rng(seed)
        start = np.sort(rng.integers(0, 20, len(graph.nodes))).astype(float)
        end = start + rng.integers(0, 3, len(graph.nodes))
        assert live.peak(start, end) == peak_bytes(device, nbytes, users, start, end,
                                                   persistent)


def runs_graph(seed: int):
    """A HandGraph whose copies and reduces come in runs of one region (as a plan's groups:
    what OtherColumns reads one region per run of), runs of two Region objects of one name
    next to each other (one listed, one not), of several dtypes."""
    rng = random.Random(seed)
    h = HandGraph(lab())
    listed = [h.region(f"r{k}", rng.randint(1, 5000), rng.choice(["float32", "bfloat16",
                                                                   "float64"]))
              for k in range(3)]
    # unlisted: one of a listed one's name (the same str object), another dtype
    twins = [Region(listed[0].name, (77,), "int8"), Region("loose", (40,), "float16")]
    regions = listed + twins
    for _ in range(rng.randint(1, 12)):
        r = rng.choice(regions)
        for _ in range(rng.randint(1, 6)):
            lo = rng.randrange(r.shape[0])
            rect = Rect((lo,), (rng.randint(lo, r.shape[0]),))
            if rng.random() < 0.6:
                i = h.copy(r, rng.randrange(4), rng.randrange(4), reduction=rng.random() < 0.5)
                h.graph.nodes[i].rect = rect
            else:
                h.reduce(r, rng.randrange(4), [ReduceInput(rng.choice(["partial", "instance"]),
                                                           rect)
                                               for _ in range(rng.randint(0, 3))])
    return h.graph


@pytest.mark.parametrize("seed", range(30))
def test_region_columns_read_per_run_equal_the_nodes(seed):
    """OtherColumns' regions, bytes and input bytes (a region read per run of nodes of one
    region object) and its kinds (given by TaskClasses or read) equal the nodes'."""
    for graph in (runs_graph(seed), random_graph(seed).graph):
        classes = TaskClasses.of(graph.nodes)
        index = {name: i for i, name in enumerate(graph.regions)}
        for kinds in (classes.kinds, None):
            cols = OtherColumns.of(graph.nodes, classes.others, graph.regions, kinds)
            copies = [cols.nodes[k] for k in cols.copy_at.tolist()]
            reduces = [cols.nodes[k] for k in cols.reduce_at.tolist()]
            assert [n.kind for n in cols.nodes] == [n.kind for n in graph.nodes
                                                    if n.kind is not TASK]
            assert all(n.kind is COPY for n in copies) and all(n.kind is REDUCE
                                                               for n in reduces)
            assert len(copies) + len(reduces) + len(cols.allreduce_at) == len(cols)
            assert cols.copy_region.tolist() == [index.get(n.region.name, -1) for n in copies]
            assert cols.copy_bytes.tolist() == [n.nbytes for n in copies]
            assert cols.reduce_region.tolist() == [index.get(n.region.name, -1)
                                                   for n in reduces]
            assert cols.reduce_bytes.tolist() == [n.nbytes for n in reduces]
            assert cols.input_bytes.tolist() == [n.region.nbytes(i.rect) for n in reduces
                                                 for i in n.inputs]
