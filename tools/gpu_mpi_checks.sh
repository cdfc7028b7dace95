#!/usr/bin/env bash
# Multi-rank checks on a GPU machine (ranks share the GPUs round-robin): the multi-rank test
# module, the demo and Inception-v3 --small on 2 ranks with a trace. Usage as gpu_checks.sh.
set -uo pipefail
OUT=${1:-gpu_out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
source "$(dirname "$0")/gpu_env.sh"
step "mpi4py's MPI"
mpirun -np 2 python3 -c "from mpi4py import MPI; print(MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size(), MPI.Get_library_version().split(chr(10))[0])"
step "multi-rank tests on the GPU (2 and 4 ranks share it)"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_mpi.py 2>&1 | tail -4
step "demo: one process vs two ranks on the GPU"
timeout 120 python3 apps/demo.py --iterations 30 --batch-size 1024 --gpu | tail -1
timeout 120 mpirun -np 2 python3 -m mpi4py apps/demo.py --iterations 30 --batch-size 1024 --gpu | tail -1
step "Inception-v3 --small, 2 ranks on the GPU, with a trace"
timeout 300 mpirun -np 2 python3 -m mpi4py apps/inception.py --small --iterations 5 --quiet \
    --json --device cuda --trace "$OUT/inception_2ranks_gpu_trace.json" | tail -1
step "done"
