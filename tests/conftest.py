import os
import sys

# Tests use tiny models, whose buffers are all under Settings.min_temporary_bytes:
# free them anyway (here and in the ranks tests start), so that freeing is what is tested.
# tests/taskrt/test_liveness.py checks the size rule itself.
os.environ.setdefault("TASKRT_MIN_TEMPORARY_BYTES", "0")

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(HERE)
for p in (ROOT, HERE, os.path.join(HERE, "ops")):
    if p not in sys.path:
        sys.path.insert(0, p)


def pytest_sessionfinish(session, exitstatus):
    # "no tests collected" must never look like success.
    if session.testscollected == 0:
        print("\nERROR: no tests were collected; the test command is broken.", file=sys.stderr)
        session.exitstatus = 5


def pytest_configure(config):
    # Tests use tiny shapes: intra-op threads only add overhead, and spin when the machine's
    # few cores are shared with MPI ranks or other jobs.
    import torch
    torch.set_num_threads(1)
