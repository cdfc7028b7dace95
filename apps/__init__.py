"""The paper's benchmarks as scripts sharing one command line (apps/common.py).

Run one with `mpirun -np 2 python -m mpi4py apps/<name>.py --small`. APPS names the paper's
benchmarks and the Transformer (every per-app test runs them), LARGE the apps at today's
sizes (tested on their own). setup.py registers both, from here, as strategy workloads
(`python -m strategy search --app NAME`).
"""
APPS = ("alexnet", "inception", "resnet", "rnntc", "rnnlm", "nmt", "transformer")
LARGE = ("gpt",)
