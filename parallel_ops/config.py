"""ParallelConfig: how one operator is split (degree per named dim) and where the parts run.

Degrees are given by dim name in the operator's natural order (batch first, then NCHW-style
order); dims not named have degree 1. Parts are numbered row-major over the degrees, and
`devices[i]` runs part i. Degrees need not divide extents (parts are balanced blocks).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Mapping, Sequence

from taskrt.machine import Machine

from .errors import ConfigError
from .op import SAMPLE, Op


def format_devices(devices: Sequence[int]) -> str:
    devices = list(devices)
    if len(devices) > 1 and all(_is_int(d) for d in devices) and \
            devices == list(range(devices[0], devices[0] + len(devices))):
        return f"{devices[0]}-{devices[-1]}"
    return ",".join(map(str, devices))


def _is_int(x) -> bool:
    """A whole number, not a bool (JSON's true is not a degree or a device id)."""
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class ParallelConfig:
    degrees: tuple[tuple[str, int], ...]
    devices: tuple[int, ...]

    @staticmethod
    def of(devices: Sequence[int], **degrees: int) -> "ParallelConfig":
        """ParallelConfig.of([0, 1, 2, 3], n=2, c=2): batch in 2, channels in 2, on 4 devices."""
        return ParallelConfig(tuple(degrees.items()), tuple(devices))

    def degree(self, dim: str) -> int:
        return dict(self.degrees).get(dim, 1)

    @property
    def num_parts(self) -> int:
        return prod(d for _, d in self.degrees)

    def aligned(self, op: Op) -> tuple[int, ...]:
        """Degrees in the order of op.dims (call validate first)."""
        given = dict(self.degrees)
        return tuple(given.get(d.name, 1) for d in op.dims)

    def __str__(self) -> str:
        degs = ",".join(f"{k}={v}" for k, v in self.degrees if v != 1) or "1"
        return f"[{degs}]@{format_devices(self.devices)}"


def config_problems(op: Op, cfg: ParallelConfig, num_devices: int) -> list[str]:
    """Every problem of `cfg` for `op` on a machine of `num_devices` devices (empty: none)."""
    problems = []
    dims = {d.name: d for d in op.dims}
    for name, deg in cfg.degrees:
        if name not in dims:
            problems.append(f"unknown dim '{name}'; {op.type} has dims "
                            f"{', '.join(str(d) for d in op.dims) or 'none'}")
            continue
        if not _is_int(deg) or deg < 1:
            problems.append(f"degree {deg!r} on '{name}' must be a positive integer")
        elif deg > 1 and dims[name].whole:
            problems.append(f"degree {deg} on '{name}': it must stay whole ({dims[name].whole})")
        elif deg > dims[name].extent:
            problems.append(f"degree {deg} on '{name}' exceeds its extent "
                            f"{dims[name].extent}; use at most {dims[name].extent}")
    names = [n for n, _ in cfg.degrees]
    if len(set(names)) != len(names):
        problems.append(f"dims named twice in {names}")
    parts = prod(d for _, d in cfg.degrees if _is_int(d) and d > 0)
    if len(cfg.devices) != parts:
        problems.append(f"{len(cfg.devices)} devices {list(cfg.devices)} for {parts} parts; "
                        "give exactly one device per part")
    devices = cfg.devices
    # (Checked per device only when some are not plain ints or out of range: a data-
    # parallel config on 1,024 devices is validated per operator.)
    plain = all(type(d) is int for d in devices)
    wrong = [] if plain else [d for d in devices if not _is_int(d)]
    if wrong:
        problems.append(f"device ids {wrong} are not whole numbers; write devices as "
                        "numbers, e.g. [0, 1]")
    bad = [] if plain and (not devices or (min(devices) >= 0 and max(devices) < num_devices)) \
        else [d for d in devices if _is_int(d) and not 0 <= d < num_devices]
    if bad:
        problems.append(f"devices {bad} do not exist (machine has 0..{num_devices - 1})")
    return problems


def validate(op: Op, cfg: ParallelConfig, machine: Machine) -> None:
    """Raise ConfigError listing every problem of `cfg` for `op` on `machine`."""
    problems = config_problems(op, cfg, len(machine))
    if problems:
        raise ConfigError(f"{op.type} '{op.name}' config {cfg}: " + "; ".join(problems) + ".")


def data_parallel(op: Op, machine: Machine) -> ParallelConfig:
    """Split the sample dim over as many devices as it allows (all of them when it can)."""
    sample = next((d for d in op.dims if d.kind == SAMPLE), None)
    if sample is None:
        return ParallelConfig((), (0,))
    n = min(len(machine), sample.extent)
    return ParallelConfig(((sample.name, n),), tuple(range(n)))


Strategy = Mapping[str, ParallelConfig]
