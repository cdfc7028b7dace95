"""IndexLaunch: one task function run over a color space, each point on its own device.

The projection maps a color to the region requirements of that point task. Task functions
follow one calling convention (see taskrt.executor.local): `fn(ctx, *tensors)` gets one tensor
per requirement and returns one tensor (or None when it wrote in place) per writing
requirement (WD, RW, Red+), in requirement order.

`batch` (optional) runs the point tasks of several launches in one call: `batch(ctxs,
tensors)` with one TaskContext and one tuple of requirement tensors per point, in node
order. It must do exactly what calling `task` on each point in turn would, for tasks that
only write in place (they return None per writing requirement). An executor that runs nodes
in a fixed order may use it for consecutive points on one device whose launches have the
same `batch` and the same `args` (taskrt.executor.local: the optimizer's updates, one
multi-tensor call instead of a task per weight); others call `task` per point.

A projection may be a RequirementsTable's __getitem__ (the lowering's): its table also says
which regions the points name, so the planner learns them without reading every point's
requirements (taskrt/expand.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from typing import Any, Callable, Hashable, Sequence

from .errors import MappingError, PrivilegeError
from .privilege import RegionRequirement

Color = tuple[int, ...]


@dataclass(eq=False)
class IndexLaunch:
    name: str
    task: Callable[..., Any]
    domain: tuple[int, ...]                                   # color space: a grid of this shape
    projection: Callable[[Color], Sequence[RegionRequirement]]
    devices: Sequence[int] | None = None                      # device per color, in color order
    args: Any = None                                          # static arguments, given as ctx.args
    cost_tag: Hashable = None                                 # (op type, params, phase) for costs
    state_from: str | None = None                             # launch whose per-point state we get
    replicas: bool = False                                    # points writing one rect on several
    #                                                           devices compute the same value
    batch: Callable[..., None] | None = None                  # runs many points at once (above)
    # Per color: bytes of the state its point keeps for the launch that takes it (set on
    # both launches of the pair; taskrt.liveness counts them from the one to the other).
    saved_bytes: dict[Color, int] | None = None
    colors: tuple[Color, ...] = field(init=False)

    def __post_init__(self):
        self.domain = tuple(int(d) for d in self.domain)
        if any(d < 1 for d in self.domain):
            raise MappingError(f"Launch '{self.name}': domain {self.domain} has an empty "
                               "dimension. Every extent must be at least 1.")
        self.colors = colors_of(self.domain)
        if self.devices is not None:
            self.devices = tuple(self.devices)
            if len(self.devices) != len(self.colors):
                raise MappingError(f"Launch '{self.name}': {len(self.devices)} devices for "
                                   f"{len(self.colors)} points (domain {self.domain}). Give one "
                                   "device per point.")
        if self.cost_tag is None:
            self.cost_tag = (self.name,)

    def requirements(self, color: Color) -> tuple[RegionRequirement, ...]:
        reqs = tuple(self.projection(color))
        for r in reqs:
            if not isinstance(r, RegionRequirement):
                raise PrivilegeError(f"Launch '{self.name}' point {color}: projection returned "
                                     f"{r!r}, not a RegionRequirement.")
        return reqs

    def __str__(self) -> str:
        return f"{self.name}{list(self.domain)}"


_COLORS: dict[tuple[int, ...], tuple[Color, ...]] = {}


def colors_of(domain: tuple[int, ...]) -> tuple[Color, ...]:
    """The colors of a grid of this shape in row-major order, one tuple shared by every
    launch of that domain (a launch on 1,024 devices would otherwise hold its own 1,024
    color tuples; the point tasks of launches of one shape share them too)."""
    colors = _COLORS.get(domain)
    if colors is None:
        colors = tuple(product(*(range(d) for d in domain)))
        if len(_COLORS) < 4096:
            _COLORS[domain] = colors
    return colors



class RequirementsTable(dict):
    """color -> a point's requirements tuple (RegionRequirements only), for the colors of
    `colors` in that order, with `regions`: every region those tuples name, in the order a
    walk of the points in color order first meets it (one may be listed again later: it
    is known by then). A launch whose
    projection is a table's __getitem__ is expanded from these (taskrt/expand.py), so the
    maker (parallel_ops/launch_template.py) promises both; tests/test_launch_templates.py
    checks a lowering's tables against the walk.

    `columns`, where the maker gives it: every point's tuple names the same regions, each
    once, in the order of `regions`, and with one privilege per region; and per position
    k a pair of objects (the order of the points' parts, the parts) such that tables whose
    pairs at the same k are the same two objects ask, point by point, equal rects with
    equal privileges there (one pair may stand at two positions).
    regionclasses.RegionClasses.find keys a launch's regions by them instead of by every
    point's rect."""

    def __init__(self, colors: tuple, reqs: list, regions: list, columns: list | None = None):
        super().__init__(zip(colors, reqs))
        self.colors, self.regions, self.columns = colors, regions, columns
