"""The expert strategies the paper compares against (its section 8.1), for any machine.

one_weird_trick  Krizhevsky's "one weird trick" for CNNs: every operator before the first
                 fully connected layer data parallel on all devices; from there on, the fully
                 connected layers split on their outputs (parameter) and the operators
                 between and after them (ReLU, dropout, the loss) on their feature dim, all
                 over every device (model parallelism, so no weight synchronization).
layer_per_device GNMT-style for RNNs: inside a node, operators cut in program order into
                 blocks of balanced work, one block per device of the node (each layer on its
                 own GPU, layers pipelined across time steps); across nodes, data
                 parallelism: every operator split on its sample dim over its device in each
                 node.

Both take (model, number of devices, devices per node) and return a config for every
operator; where a dim is shorter than the device count, fewer devices are used (as in
strategy/standard.py). Apps name theirs in App.expert (`expert_for`).

    expert = layer_per_device(model, 16, 4)    # 4 nodes x 4 GPUs
"""
from __future__ import annotations

from parallel_ops.config import ParallelConfig
from parallel_ops.op import PARAMETER, SAMPLE

from .standard import balanced_blocks, first_dim, op_work, split, split_on_sample


def one_weird_trick(model, num_devices: int, devices_per_node: int | None = None
                    ) -> dict[str, ParallelConfig]:
    devices = list(range(num_devices))
    out, model_parallel = {}, False
    for op in model.ops:
        model_parallel = model_parallel or op.type == "linear"
        if not model_parallel:
            out[op.name] = split_on_sample(op, devices)
        elif op.type == "linear":
            out[op.name] = split(op, first_dim(op, PARAMETER), devices)
        else:
            features = next((d for d in reversed(op.dims) if d.kind != SAMPLE), None)
            out[op.name] = split(op, features, devices) if features is not None else \
                split_on_sample(op, devices)
    return out


def layer_per_device(model, num_devices: int, devices_per_node: int | None = None
                     ) -> dict[str, ParallelConfig]:
    per_node = min(devices_per_node or num_devices, num_devices)
    nodes = num_devices // per_node
    blocks = balanced_blocks([op_work(op) for op in model.ops], per_node)
    out = {}
    for op, slot in zip(model.ops, blocks):
        replicas = [slot + per_node * k for k in range(nodes)]
        sample = first_dim(op, SAMPLE)
        out[op.name] = split(op, sample, replicas) if sample is not None else \
            ParallelConfig((), (slot,))
    return out


EXPERTS = {"one_weird_trick": one_weird_trick, "layer_per_device": layer_per_device}
"""The expert strategies by the name an App gives in `expert`."""


def expert_for(app, model, machine_model) -> dict[str, ParallelConfig] | None:
    """The app's expert strategy on a machine model (None when the app names none)."""
    if app.expert is None:
        return None
    make = EXPERTS.get(app.expert)
    if make is None:
        raise ValueError(f"app '{app.name}': expert '{app.expert}' is not one of "
                         f"{sorted(EXPERTS)}.")
    return make(model, machine_model.num_devices, machine_model.devices_per_node)
