"""The paper's benchmarks as scripts sharing one command line (apps/common.py).

Run one with `mpirun -np 2 python -m mpi4py apps/<name>.py --small`; APPS maps names to
their module names for tests and tools.
"""
APPS = ("alexnet", "inception", "resnet", "rnntc", "rnnlm", "nmt", "transformer")
