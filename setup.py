"""soapflow: FlexFlow-style SOAP parallel training in Python on PyTorch and MPI."""
import ast
import os

from setuptools import find_packages, setup


def app_names() -> tuple:
    """apps/__init__.py's APPS and LARGE, read without importing the package (it needs
    torch)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "apps", "__init__.py")
    with open(path) as f:
        tree = ast.parse(f.read())
    lists = {t.id: ast.literal_eval(node.value) for node in tree.body
             if isinstance(node, ast.Assign) for t in node.targets
             if getattr(t, "id", None) in ("APPS", "LARGE")}
    if "APPS" not in lists:
        raise RuntimeError("apps/__init__.py defines no APPS")
    return lists["APPS"] + lists.get("LARGE", ())


setup(
    name="soapflow",
    version="0.1.0",
    description="Legion-style task runtime, SOAP-partitioned operators, simulator and MCMC "
                "strategy search for training deep networks on many devices",
    packages=find_packages(include=["taskrt", "taskrt.*", "parallel_ops", "parallel_ops.*",
                                    "strategy", "strategy.*", "apps"]),
    python_requires=">=3.10",
    install_requires=[
        # The CPU wheel on these machines is 2.13.0; a CUDA build of the same release works
        # too (install it first, see README "GPUs").
        "torch>=2.13,<2.14",
        "numpy",
        "mpi4py>=4",
        "mpich",        # an MPI from the package index: mpirun/mpiexec and libmpi
        "msgpack>=1.0",
        # Pinned so that nothing moves torch or numpy (checked with pip install --dry-run):
        # matplotlib draws `python -m strategy show --graph` without Graphviz and the
        # benchmark's Figure 6; tqdm shows progress of slow phases on a terminal.
        "matplotlib==3.11.2",
        "tqdm==4.70.1",
        # Compiles the simulator's list scheduler (strategy/listsched.py); pinned because its
        # releases track numpy's closely.
        "numba==0.68.0",
    ],
    # scikit-learn ships the digits images of the apps' real-data path (--data digits).
    # transformers is pinned so that installing it never moves torch off 2.13 (its real GPT-2,
    # BERT and Llama classes are imported by tests/importer; it does not require torch).
    # timm: its model classes for tests/importer/test_import_vision*.py, with a CUDA build of
    # torch only. torchvision 0.28.0 is the release for torch 2.13 (it pins torch==2.13.0, so
    # nothing moves torch), but its wheel needs CUDA libraries: beside the CPU build it cannot
    # be imported, and breaks transformers' imports too. Without it those tests run the same
    # blocks in plain torch (docs/importer.md).
    # pytest-xdist runs the suite on every core (`make test`, `-n auto --dist loadfile`).
    extras_require={"test": ["pytest>=8", "pytest-xdist==3.8.0", "hypothesis>=6",
                             "scikit-learn", "transformers==5.18.0"],
                    "timm": ["timm==1.0.29", "torchvision==0.28.0"]},
    # The strategy tools find apps here (strategy/workload.py), never by importing apps.
    entry_points={"soapflow.workloads": [f"{name} = apps.{name}:APP"
                                         for name in app_names()]},
)
