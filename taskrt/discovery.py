"""Machine discovery under MPI: every rank learns the global device list.

Each rank contributes its devices: its CUDA GPUs (one per rank by local rank, or
`gpus_per_rank` consecutive ones; with more ranks than GPUs on a node, ranks share GPUs
round-robin), else `cpu_devices` logical CPU devices. The list is allgathered so every rank
builds the same Machine, ranks in order.
"""
from __future__ import annotations

import torch

from .errors import MappingError
from .machine import Device, Machine


def local_rank_and_size(comm) -> tuple[int, int]:
    from mpi4py import MPI
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        return node.Get_rank(), node.Get_size()
    finally:
        node.Free()


def discover_machine(comm=None, use_gpus: bool | None = None, gpus_per_rank: int | None = None,
                     cpu_devices: int = 1) -> Machine:
    """The Machine of this mpirun job (every rank must call it)."""
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    local_rank, local_size = local_rank_and_size(comm)
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if use_gpus is None:
        use_gpus = have > 0
    if use_gpus:
        if have == 0:
            raise MappingError(f"rank {comm.Get_rank()}: GPUs requested but torch sees none. "
                               "Run without --gpus or install a CUDA build of torch.")
        per = gpus_per_rank or 1
        if per < 1:
            raise MappingError(f"discover_machine: gpus_per_rank={per}; use at least 1.")
        first = local_rank * per
        mine = [("cuda", (first + k) % have) for k in range(per)]
    else:
        if cpu_devices < 1:
            raise MappingError(f"discover_machine: cpu_devices={cpu_devices}; use at least 1.")
        mine = [("cpu", k) for k in range(cpu_devices)]
    everyone = comm.allgather(mine)
    devices = []
    for rank, devs in enumerate(everyone):
        for kind, index in devs:
            devices.append(Device(len(devices), rank, kind, index))
    return Machine(tuple(devices))


def launched_by_mpi() -> bool:
    """True when this process is one of several ranks started by mpirun/mpiexec."""
    import os
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"):
        if var in os.environ:
            try:
                return int(os.environ[var]) > 1
            except ValueError:
                pass
    return False


def idle_barrier(comm, delay: float = 2e-5, max_delay: float = 1e-3) -> None:
    """A barrier that sleeps while it waits (a blocking MPI barrier spins a core): ranks
    waiting for rank 0 (a search, a calibration) leave the cores to it."""
    import time
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(delay)
        delay = min(2 * delay, max_delay)
