"""TaskGraph: fingerprint, counts, summary, and the trace formats."""
import json

import msgpack
import torch

from taskrt import (R, RED, WD, LocalExecutor, Machine, NodeKind, Rect, Region, plan,
                    to_chrome, write_chrome)

from taskrt_helpers import launch, one

M4 = Machine.local(4)
X, Y = Region("x", (8, 8)), Region("y", (8,))
TOP, BOTTOM = Rect.of((0, 4), (0, 8)), Rect.of((4, 8), (0, 8))


def build(devices=(0, 1, 2, 3), reader=2):
    return plan([launch("w", [[(X, TOP, WD)], [(X, BOTTOM, WD)]], devices[:2]),
                 launch("red", [[(X, X.rect, R), (Y, Y.rect, RED)]] * 2, devices[2:],
                        task=lambda ctx, x, y: x.sum(0)),
                 one("r", Y, Y.rect, R, reader)], M4)


def test_fingerprint_is_deterministic_and_sensitive_to_devices():
    a, b = build(), build()
    assert a is not b and a.fingerprint() == b.fingerprint()
    assert build(devices=(0, 1, 3, 2)).fingerprint() != a.fingerprint()
    assert build(reader=3).fingerprint() != a.fingerprint()
    assert len(a.fingerprint()) == 32


def test_counts_summary_and_dump():
    g = build()
    c = g.count()
    assert c == {"task": 5, "copy": 5, "reduce": 1, "allreduce": 0}
    assert g.summary().startswith("TaskGraph: 5 tasks, 5 copies, 1 reduces, 0 all-reduces")
    assert len(g.dump().splitlines()) == len(g)
    assert g.num_edges == sum(len(p) for p in g.preds)
    assert g.bytes_moved() == sum(n.nbytes for n in g.copies())
    assert all(p < i for i, ps in enumerate(g.preds) for p in ps)
    assert all(i in g.succs[p] for i, ps in enumerate(g.preds) for p in ps)
    assert str(g.tasks()[0].requirements[0]) == "WD(x[0:4,0:8])"
    assert g.tasks()[0].cost_key == (("w",), (("WD", (4, 8), "float32"),))


def test_chrome_trace(tmp_path):
    g = build()
    ex = LocalExecutor(g, record_trace=True)
    ex.run()
    doc = to_chrome(ex.trace)
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert [e["args"]["node"] for e in spans] == list(range(len(g)))
    tracks = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {"device 0", "device 3", "link 0->2"} <= tracks
    path = tmp_path / "trace.json"
    write_chrome(str(path), ex.trace)
    assert json.loads(path.read_text()) == json.loads(json.dumps(doc))
    # Node kinds are written as their plain names (NodeKind is a str).
    assert [e["cat"] for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"] \
        == [str(n.kind) for n in g.nodes] and {str(k) for k in NodeKind} == set(g.count())
    back = msgpack.unpackb(msgpack.packb([n.kind for n in g.nodes]))
    assert back == [str(n.kind) for n in g.nodes] and type(back[0]) is str


def test_instance_bytes_per_device():
    g = build()
    ex = LocalExecutor(g)
    per = ex.store.bytes_per_device()
    # Device 0/1: their half of x. 2 and 3: all of x, and y's partial sums, which start in
    # y's instance (y has no value to keep apart); device 2 also a staging buffer for
    # device 3's partial sums.
    assert per == {0: 128, 1: 128, 2: 256 + 32 + 32, 3: 256 + 32}
    assert ex.store.instances["x", 2].tensor.dtype == torch.float32
