"""ReduceInput (taskrt/taskgraph.py) is not a frozen dataclass (graph_of remakes 1.1M of them
for a large tensor-parallel graph, and frozen's object.__setattr__ costs twice the time), but
still compares and hashes by value as the frozen one did: equal fields, equal inputs and
equal hashes, whether made apart or shared; a set or dict of them dedupes by value."""
import random

from taskrt.geometry import Rect
from taskrt.taskgraph import ReduceInput


def test_reduce_inputs_compare_and_hash_by_value():
    rng = random.Random(0)
    made = []
    for _ in range(2000):
        lo = tuple(rng.randrange(4) for _ in range(2))
        rect = Rect(lo, tuple(x + rng.randrange(1, 3) for x in lo))
        source = rng.choice(("partial", "staged", "instance"))
        copy_id = rng.choice((-1, rng.randrange(3)))
        a = ReduceInput(source, rect, copy_id)
        b = ReduceInput(source, Rect(rect.lo, rect.hi), copy_id)     # equal, made apart
        assert a == b and hash(a) == hash(b) and hash(a) == hash((source, rect, copy_id))
        assert a != (source, rect, copy_id)
        made += [a, b]
    by_value = {(i.source, i.rect, i.copy_id) for i in made}
    assert len(set(made)) == len(by_value) == len(dict.fromkeys(made))
    assert ReduceInput("staged", Rect((0,), (2,))) == ReduceInput("staged", Rect((0,), (2,)), -1)
    assert ReduceInput("staged", Rect((0,), (2,)), 1) != ReduceInput("staged", Rect((0,), (2,)), 2)
