# Sourced by the GPU check scripts: the repo root, an MPI, and the environment they share.
# Prefers the machine's own MPI and mpi4py (e.g. Debian's Open MPI: run as root, oversubscribed);
# else installs the mpi4py and mpich wheels found in .whl/ into /tmp/site.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
if command -v mpirun >/dev/null && python3 -c "import mpi4py" 2>/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
elif ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    export PATH=/tmp/site/bin:$PATH
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
export SOAPFLOW_MPIRUN=$(command -v mpirun)
step() { echo; echo "=== $* ($(date +%T))"; }
