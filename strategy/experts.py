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

And, for transformers (Shoeybi et al. 2019, Narayanan et al. SC'21):

megatron         Megatron-LM's tensor parallelism of degree t inside a node, data parallelism
                 over the N/t groups: attention split over its heads (column-parallel QKV,
                 row-parallel output projection, reduced as partial sums), a linear column
                 parallel (on its outputs) unless it consumes a column-parallel linear's output,
                 then row parallel (on its inputs: the MLP's second matmul), embeddings split
                 on the vocabulary (partial sums), the loss on the classes (vocabulary-parallel
                 cross entropy). Other operators (layernorms, residual adds) are split on their
                 sample dim over all N devices: Megatron replicates them over the t ranks of a
                 group; here each rank takes 1/t of its group's samples, so the all-reduce of a
                 row-parallel output becomes a reduce-scatter plus an all-gather (the same
                 bytes, as in sequence parallelism). Part (i, j) of an op split (n=N/t, X=t)
                 runs on device i*t + j: a group is t consecutive devices, inside a node.

All take (model, number of devices, devices per node) and return a config for every
operator; where a dim is shorter than the device count, fewer devices are used (as in
strategy/standard.py). Apps name theirs in App.expert (`expert_for`).

    expert = layer_per_device(model, 16, 4)    # 4 nodes x 4 GPUs
"""
from __future__ import annotations

from parallel_ops.config import ParallelConfig
from parallel_ops.op import PARAMETER, REDUCTION, SAMPLE

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


def megatron(model, num_devices: int, devices_per_node: int | None = None,
             tensor_parallel: int | None = None) -> dict[str, ParallelConfig]:
    """Megatron-LM's strategy (module doc); t = tensor_parallel, default the largest
    divisor of devices_per_node that the model's heads, widths and batch allow.

        megatron(gpt, 128, 8, tensor_parallel=4)     # t=4, 32 data-parallel groups
    """
    per_node = min(devices_per_node or num_devices, num_devices)
    if tensor_parallel is None:
        for t in range(per_node, 0, -1):
            if per_node % t == 0 and num_devices % t == 0:
                try:
                    return megatron(model, num_devices, per_node, t)
                except ValueError:
                    if t == 1:
                        raise
    t = tensor_parallel
    if t < 1 or per_node % t or num_devices % t:
        raise ValueError(f"megatron: tensor-parallel degree {t} must divide the devices per "
                         f"node ({per_node}) and the devices ({num_devices}); use one of "
                         f"{[k for k in range(1, per_node + 1) if per_node % k == 0]}.")
    devices, groups = tuple(range(num_devices)), num_devices // t
    column_outputs, out = set(), {}

    def tensor_parallel_on(op, dim: str) -> ParallelConfig:
        sample = first_dim(op, SAMPLE)
        extent = next(d.max_degree for d in op.dims if d.name == dim)
        if sample is None or sample.max_degree < groups or extent < t:
            raise ValueError(f"megatron: operator '{op.name}' ({op.type}) cannot take "
                             f"{groups} data-parallel groups on '{sample and sample.name}' "
                             f"and t={t} on '{dim}' (extents {sample and sample.max_degree}, "
                             f"{extent}); use a batch of at least {groups} or a smaller t.")
        return ParallelConfig(((sample.name, groups), (dim, t)), devices)

    for op in model.ops:
        if t == 1:
            out[op.name] = split_on_sample(op, devices)
        elif op.type == "multihead_attention":
            out[op.name] = tensor_parallel_on(op, "h")
        elif op.type == "linear":
            row = any(x.name in column_outputs for x in op.inputs)
            out[op.name] = tensor_parallel_on(op, "i" if row else "o")
            if not row:
                column_outputs.update(y.name for y in op.outputs)
        elif op.type == "embedding":
            out[op.name] = tensor_parallel_on(op, first_dim(op, REDUCTION).name)
        elif op.type == "softmax_ce":
            out[op.name] = tensor_parallel_on(op, op.dims[-1].name)
        else:
            out[op.name] = split_on_sample(op, devices)
    return out


EXPERTS = {"one_weird_trick": one_weird_trick, "layer_per_device": layer_per_device,
           "megatron": megatron}
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
