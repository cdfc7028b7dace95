"""The paper's benchmarks as scripts sharing one command line (apps/common.py).

Run one with `mpirun -np 2 python -m mpi4py apps/<name>.py --small`. APPS names them, once:
setup.py registers each as a strategy workload (`python -m strategy search --app NAME`) from
this list.
"""
APPS = ("alexnet", "inception", "resnet", "rnntc", "rnnlm", "nmt", "transformer")
