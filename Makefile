# Two entry points do all the set-up on a fresh machine (see README):
#   make demo   -- the main job under mpirun
#   make test   -- the test suite
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
MPIRUN := $(VENV)/bin/mpirun
NP     ?= 2

$(VENV)/.installed: setup.py
	@echo "Setting up $(VENV) (first use only; about 2 minutes): torch 2.13 CPU, numpy, mpi4py"
	@echo "with the mpich wheel, msgpack, matplotlib, tqdm, pytest(-xdist), hypothesis, scikit-learn."
	python3 -m venv $(VENV)
	@echo "[1/3] torch 2.13 (the largest download) ..."
	$(PIP) install -q --only-binary=mpi4py "torch==2.13.0"
	@echo "[2/3] soapflow and the rest ..."
	$(PIP) install -q --only-binary=mpi4py -e ".[test]"
	@echo "[3/3] the planner's and simulator's loops, compiled once (numba; 20-40 s) ..."
	$(PY) -m strategy.precompile
	@echo "$(VENV) is ready. To run the commands of README.md by hand: . $(VENV)/bin/activate"
	touch $@

venv: $(VENV)/.installed

demo: venv
	OMP_NUM_THREADS=1 $(MPIRUN) -np $(NP) $(PY) -m mpi4py apps/inception.py --small --iterations 20 --search 20

# One worker per core; a file's tests stay on one worker, so a module's fixtures are built once.
test: venv
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 -n auto --dist loadfile tests

bench: venv
	$(PY) -m bench

.PHONY: venv demo test bench
