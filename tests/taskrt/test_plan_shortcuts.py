"""The planner's shortcuts for reads that repeat (taskrt/coherence.py): what a read found is
reused only until something it depends on changes."""
from taskrt import R, RW, WD, Machine, Rect, Region, plan

from taskrt_helpers import copies, one, task_of

M4 = Machine.local(4)
X = Region("x", (8, 8))
FULL, TOP = X.rect, Rect.of((0, 4), (0, 8))


def test_a_read_after_a_write_elsewhere_copies_again():
    """Device 1 reads TOP (a copy from 0), device 2 then writes TOP, and device 1 reads TOP
    again: it no longer holds the value, so a second copy brings it (from 2)."""
    g = plan([one("w", X, FULL, WD, 0), one("r1", X, TOP, R, 1),
              one("w2", X, TOP, WD, 2), one("r2", X, TOP, R, 1)], M4)
    assert [(c.owner, c.src, c.dst, c.rect) for c in copies(g)] == \
        [("r1", 0, 1, TOP), ("r2", 2, 1, TOP)]
    assert g.final_valid["x"] == [(TOP, (1, 2)), (Rect.of((4, 8), (0, 8)), (0,))]


def test_a_read_after_its_buffer_is_written_depends_on_the_new_writer():
    """Two reads of TOP on device 0 with a read-write of it between: the second read
    depends on the read-write (and not only on the first writer)."""
    g = plan([one("w", X, FULL, WD, 0), one("r1", X, TOP, R, 0),
              one("rw", X, TOP, RW, 0), one("r2", X, TOP, R, 0)], M4)
    assert not copies(g)
    assert g.preds[task_of(g, "r1").id] == [task_of(g, "w").id]
    assert g.preds[task_of(g, "rw").id] == [task_of(g, "w").id, task_of(g, "r1").id]
    assert g.preds[task_of(g, "r2").id] == [task_of(g, "rw").id]
