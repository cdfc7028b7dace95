"""A launch's points as the planner plans them: (color, device, requirements) per point, with
every region the points name known to the planner (Planner._expand).

`expand` asks the projection per color by a C loop (map; a point's requirements are its
projection's as a tuple, each checked to be a RegionRequirement once per distinct tuple),
checks the devices at once and the regions once per distinct requirements tuple (a launch
of 1,024 points names a few regions over and over). Where anything is wrong -- a
projection that raises or returns a non-requirement, a device that is not an int on the
machine -- it walks the points in order instead (`expand_walk`, the definition: the first
bad point raises), so the error is the one the walk gives; a region declared twice raises
the walk's error too (no earlier point can fail once the fast checks passed, and the
regions are met in the walk's order). A launch class with its own `requirements` is asked
per point. A projection that is a RequirementsTable's (taskrt/launch.py; the lowering's)
gives its points' tuples and the regions they name, in the walk's order, at once: only those
regions are checked. tests/taskrt/test_expand_points.py compares the two on random launches,
tests/test_launch_templates.py on a lowering's.
"""
from __future__ import annotations

from itertools import chain, repeat

from .errors import MappingError
from .launch import IndexLaunch, RequirementsTable
from .privilege import RegionRequirement


def expand(planner, launch) -> list:
    """Launch `launch`'s points for `planner`, each region it names made known to it."""
    colors = launch.colors
    regions = None                  # (a table's: the regions its points name)
    try:
        if type(launch).requirements is IndexLaunch.requirements:
            table = getattr(launch.projection, "__self__", None)
            if type(table) is RequirementsTable and table.colors is colors and \
                    launch.projection == table.__getitem__:
                reqs_of, regions = list(table.values()), table.regions
            else:
                # (IndexLaunch.requirements by C loops: the projection's tuples, and the
                # type check once per distinct tuple; replicas' points often share one)
                reqs_of = list(map(tuple, map(launch.projection, colors)))
                distinct = dict(zip(map(id, reqs_of), reqs_of)).values()
                if not all(map(isinstance, chain.from_iterable(distinct),
                               repeat(RegionRequirement))):
                    return expand_walk(planner, launch)
        else:
            reqs_of = list(map(launch.requirements, colors))
            distinct = dict(zip(map(id, reqs_of), reqs_of)).values()
    except Exception:               # (the walk raises the first point's error)
        return expand_walk(planner, launch)
    num_devices = len(planner.machine.devices)
    devices = launch.devices
    if devices is None:
        m = len(colors)
        devices = [index * num_devices // m for index in range(m)]
    elif not (set(map(type, devices)) == {int} and min(devices) >= 0 and
              max(devices) < num_devices):
        return expand_walk(planner, launch)
    known = planner.regions
    if regions is not None:
        for region in regions:
            if known.get(region.name) is not region:
                planner._region(region)
        return list(zip(colors, devices, reqs_of))
    # Each distinct requirements tuple once, in the order the walk first meets them.
    for reqs in distinct:
        for req in reqs:
            region = req.region
            if known.get(region.name) is not region:
                planner._region(region)
    return list(zip(colors, devices, reqs_of))


def expand_walk(planner, launch) -> list:
    """expand point by point, in order."""
    points = []
    known = planner.regions
    num_devices = len(planner.machine.devices)
    last = None
    devices = launch.devices
    for index, color in enumerate(launch.colors):
        reqs = launch.requirements(color)
        device = devices[index] if devices is not None else \
            planner._device_of(launch, index)
        if not (isinstance(device, int) and 0 <= device < num_devices):
            raise MappingError(f"Launch '{launch.name}' point {color}: mapped to device "
                               f"{device}, which does not exist on {planner.machine}. Use a "
                               f"device id in 0..{num_devices - 1}.")
        if reqs is not last:          # (replicas' points often share one tuple)
            for req in reqs:
                region = req.region
                if known.get(region.name) is not region:
                    planner._region(region)
            last = reqs
        points.append((color, device, reqs))
    return points
