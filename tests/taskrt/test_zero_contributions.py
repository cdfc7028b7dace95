"""Zero contributions (taskrt.executor.zeros): a Red+ contribution marked as zero is not
added onto the partial sums (no pass over the target), and a target it is stored into is
zeroed, so the sum is the same as with plain zeros, every iteration."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from taskrt import R, RED, IndexLaunch, LocalExecutor, Machine, Region, RegionRequirement, plan
from taskrt.executor.zeros import is_zero, zero_contribution


class CountAdds(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.adds = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.add_.Tensor:
            self.adds += 1
        return func(*args, **(kwargs or {}))


def contribution(kind: str):
    """A task contributing x * 2 ("x2"), a marked zero ("zero") or plain zeros ("plain")."""
    def contribute(ctx, xv, sv):
        if kind == "x2":
            return xv * 2
        if kind == "zero":
            return zero_contribution(xv.shape, xv.dtype, xv.device)
        return torch.zeros((), dtype=xv.dtype).expand(xv.shape)
    return contribute


def executor(kinds):
    x, s = Region("x", (3, 4)), Region("s", (3, 4))
    launches = [IndexLaunch(f"p{i}", contribution(k), (1,),
                            lambda c: [RegionRequirement(x, x.rect, R),
                                       RegionRequirement(s, s.rect, RED)], devices=[0])
                for i, k in enumerate(kinds)]
    return LocalExecutor(plan(launches, Machine.local(1), initial={x: [(x.rect, 0)]}))


@pytest.mark.parametrize("kinds, adds", [(("x2", "zero", "zero"), 0),
                                         (("zero", "x2", "zero"), 1),
                                         (("zero", "zero"), 0)])
def test_zeros_are_not_added_and_the_sum_is_right_every_iteration(kinds, adds):
    ex = executor(kinds)
    for step in range(3):
        x = torch.arange(12.).reshape(3, 4) + step
        ex.write("x", x)
        with CountAdds() as counted:
            ex.run()
        want = x * 2 if "x2" in kinds else torch.zeros(3, 4)
        assert torch.equal(ex.read("s"), want)
        assert counted.adds == adds          # an add of zeros is a pass over s for nothing


def test_unmarked_zeros_are_still_added():
    ex = executor(("x2", "plain"))
    ex.write("x", torch.ones(3, 4))
    with CountAdds() as counted:
        ex.run()
    assert torch.equal(ex.read("s"), torch.full((3, 4), 2.))
    assert counted.adds == 1


def test_the_mark_is_the_zero_contribution_alone():
    z = zero_contribution((2, 3), torch.float64, "cpu")
    assert is_zero(z) and torch.equal(z, torch.zeros(2, 3, dtype=torch.float64))
    assert not is_zero(torch.zeros(2, 3)) and not is_zero(z + 1) and not is_zero(None)

