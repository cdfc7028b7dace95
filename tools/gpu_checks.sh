#!/usr/bin/env bash
# GPU checks: run on a machine with an NVIDIA GPU and a CUDA build of torch.
#   tools/gpu_checks.sh OUT_DIR
# 1. every operator test with its parallel side on CUDA (logical devices on the GPU(s)),
#    compared with the CPU float64 PyTorch reference;
# 2. the multi-rank tests with ranks on GPUs (two and four ranks sharing one GPU when
#    there is only one), equal to the one-process CPU run and PyTorch;
# 3. the demo and Inception-v3 (--small) on CPU vs GPU, one rank and two ranks, with traces;
# 4. the benchmarks that take a device.
# Wheels in .whl/ (mpi4py, mpich) are installed to /tmp/site first when present, for
# machines without an MPI of their own.
set -uo pipefail
OUT=${1:-gpu_out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
source "$(dirname "$0")/gpu_env.sh"

step "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, mpi4py; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.device_count(), 'mpi4py', mpi4py.__version__)"
echo "mpirun: $SOAPFLOW_MPIRUN"

step "operators on CUDA vs CPU reference"
SOAPFLOW_TEST_DEVICE=cuda timeout 300 python3 -m pytest -q -x -p no:cacheprovider tests/ops \
    tests/test_custom_op.py tests/test_lowering.py 2>&1 | tail -5

step "multi-rank on GPU (ranks share the GPU)"
timeout 300 python3 -m pytest -q -x -p no:cacheprovider tests/test_mpi.py 2>&1 | tail -5

step "demo: CPU vs GPU, one process"
timeout 120 python3 apps/demo.py --iterations 30 --batch-size 1024 | tail -2
timeout 120 python3 apps/demo.py --iterations 30 --batch-size 1024 --gpu | tail -2
step "demo: two ranks on the GPU"
timeout 120 mpirun -np 2 python3 -m mpi4py apps/demo.py --iterations 30 --batch-size 1024 --gpu | tail -2

step "Inception-v3 --small: CPU vs GPU (1 process), 2 ranks sharing the GPU with a trace"
timeout 300 python3 apps/inception.py --small --iterations 5 --quiet --json --device cpu | tail -1
timeout 300 python3 apps/inception.py --small --iterations 5 --quiet --json --device cuda | tail -1
timeout 300 mpirun -np 2 python3 -m mpi4py apps/inception.py --small --iterations 5 --quiet \
    --json --device cuda --trace "$OUT/inception_2ranks_gpu_trace.json" | tail -1
step "ResNet-50 and the Transformer, full width, batch 64, one GPU"
timeout 300 python3 apps/resnet.py --depth 50 --batch-size 64 --iterations 5 --quiet --json \
    --device cuda | tail -1
timeout 300 python3 apps/transformer.py --iterations 5 --quiet --json --device cuda | tail -1

step "benchmark: runtime overhead on the GPU"
SOAPFLOW_BENCH_DEVICE=cuda timeout 300 python3 -m bench runtime_overhead --out "$OUT" 2>&1 | tail -8
step "done"
