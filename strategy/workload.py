"""The interface between the strategy tools and the programs that define models: what
`python -m strategy` (search, simulate, show, replay, profile) needs of a workload, and the
one loader that finds a workload by name or file (`load_workload`).

strategy/ sits below apps/ and never imports it. A package offers its workloads under the
entry-point group `soapflow.workloads` (setup.py registers the paper's apps there); a Python
file given by path defines `APP`. Either way the object only has to provide what
`Workload` lists, so a user's own model file works like a built-in app.

    w = load_workload("alexnet")                       # or "my_model.py"
    built = w.build_from_flags(["--small"], devices=4)  # model, optimizer, batch, ...
    w.main(["--small", "--simulate", "--machine", "p100"])
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Callable, Mapping, Protocol, Sequence, runtime_checkable

GROUP = "soapflow.workloads"


class WorkloadError(ValueError):
    """A workload cannot be found, or refuses its flags; the message is for the user."""


@dataclass(frozen=True)
class BuiltWorkload:
    """A workload's model built from its flags, with what the strategy tools need of it."""
    name: str
    model: object                                   # parallel_ops.Model
    optimizer: object                               # parallel_ops SGD/Adam, or None
    batch_size: int                                 # global batch the model was built for
    int_ranges: Mapping[str, int] = field(default_factory=dict)   # integer input -> bound
    strategy_file: str | None = None                # --strategy of its flags, if any
    devices_per_rank: int = 1                       # --devices-per-rank of its flags
    mixed_strategy: Callable[[object, int], dict] | None = None   # (model, devices) -> configs
    expert: str | None = None                       # its expert strategy (strategy/experts.py)
    synthetic: Callable[[int, int], dict] | None = None   # (seed, iteration) -> a batch


@runtime_checkable
class Workload(Protocol):
    """What the strategy tools use of a workload (apps.app.App provides it)."""
    name: str

    def main(self, argv: Sequence[str]) -> int:
        """Its own command line (search and simulate run through it); the exit status."""

    def build_from_flags(self, argv: Sequence[str], devices: int,
                         batch_size: int | None = None) -> BuiltWorkload:
        """Its model for these flags on `devices` devices (global batch: `batch_size`, else
        the flags' or its default); raises WorkloadError for flags it refuses."""


def workload_names() -> list[str]:
    """The names registered under the entry-point group, sorted."""
    return sorted({ep.name for ep in entry_points(group=GROUP)})


def load_workload(spec: str) -> Workload:
    """The workload registered as `spec`, or the `APP` of the Python file `spec`."""
    if spec.endswith(".py"):
        return _from_file(spec)
    found = [ep for ep in entry_points(group=GROUP) if ep.name == spec]
    if not found:
        names = workload_names()
        raise WorkloadError(f"no such app '{spec}'; use "
                            f"{', '.join(names) if names else '(none registered)'}, or a "
                            "Python file defining APP" +
                            ("" if names else ". Install the project first (make venv)"))
    return _checked(found[0].load())


def _from_file(path: str) -> Workload:
    if not os.path.isfile(path):
        raise WorkloadError("no such file")
    name = "soapflow_workload_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return _checked(getattr(module, "APP", None))


def _checked(obj) -> Workload:
    if obj is None:
        raise WorkloadError("the module defines no APP record (see apps/alexnet.py)")
    if not isinstance(obj, Workload):
        raise WorkloadError(f"its APP ({type(obj).__name__}) lacks "
                            "main(argv) and build_from_flags(argv, devices); define it with "
                            "apps.common.App")
    return obj
