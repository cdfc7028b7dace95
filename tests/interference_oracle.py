"""check_interference's rule pair by pair: the oracle its fast paths are tested against
(tests/taskrt/test_interference_grids.py, tests/strategy/test_sim_speed_parts.py)."""
import pytest

from taskrt import R, RED, IndexLaunch
from taskrt.errors import PrivilegeError
from taskrt.interference import check_interference


def conflicts(points, replicas: bool) -> bool:
    """Two requirements of a launch (points: (color, device, requirements) each) that touch
    the same elements conflict unless both read, both reduce, or (replicas) they write one
    rect alike from other points on other devices."""
    reqs = [(c, d, r) for c, d, rs in points for r in rs]
    for k, (c1, d1, r1) in enumerate(reqs):
        for c2, d2, r2 in reqs[:k]:
            if r1.region.name != r2.region.name or not r1.rect.overlaps(r2.rect):
                continue
            p1, p2 = r1.privilege, r2.privilege
            if (p1 is R and p2 is R) or (p1 is RED and p2 is RED):
                continue
            if replicas and c1 != c2 and d1 != d2 and r1.rect == r2.rect and p1 is p2:
                continue
            return True
    return False


def check_as_oracle_says(points, replicas: bool) -> None:
    """check_interference on a launch of these points raises PrivilegeError exactly when
    the rule pair by pair finds a conflict."""
    launch = IndexLaunch("l", None, (len(points),), lambda c: (),
                         devices=[d for _, d, _ in points], replicas=replicas)
    if conflicts(points, replicas):
        with pytest.raises(PrivilegeError):
            check_interference(launch, points)
    else:
        check_interference(launch, points)
