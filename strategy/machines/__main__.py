"""Show a machine model and optionally save it as a file to edit:

    python -m strategy.machines p100:2 --save p100x2.json
    mpirun -np 2 python -m mpi4py -m strategy.machines local --save local.json
"""
import argparse
import sys

from .errors import MachineModelError
from .presets import machine_model, presets_text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m strategy.machines", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("machine", help=f"a preset: {presets_text()}; NAME:NODES for another "
                                   "node count (p100:2 is 8 GPUs), 'local' or a machine file")
    p.add_argument("--save", metavar="FILE", help="write it (JSON for .json, else msgpack)")
    a = p.parse_args(argv)
    try:
        m = machine_model(a.machine)
    except MachineModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rank = 0
    if a.machine.strip().lower() == "local":
        from taskrt.discovery import launched_by_mpi
        if launched_by_mpi():
            from mpi4py import MPI
            rank = MPI.COMM_WORLD.Get_rank()
    if rank == 0:
        print(m)
        for kind, spec in m.device_specs.items():
            print(f"  {spec}, launch {spec.launch_overhead * 1e6:.3g} us")
        if m.num_devices > 1:
            last = m.num_devices - 1
            for b in sorted({1, last}):
                print(f"  path 0 -> {b}: " + " + ".join(str(l) for l in m.path(0, b)))
        if a.save:
            m.save(a.save)
            print(f"saved {a.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
