"""The search's proposals beyond one operator's random config (SearchSpace.propose): moves
aimed at memory, pairs of coupled operators, groups trading devices, and activation
recomputation toggled per segment.

Memory. A strategy over a device's capacity is invalid (strategy/search.py); from such a
start (data parallelism of a model whose weights and Adam state do not fit one device) a
uniformly chosen operator rarely is one that matters. `shard_move` looks where the memory
is: on the fullest device of the current simulation, the bytes of every operator there
(`bytes_on`: its regions' instances and partial-sum buffers, that is its weights, their
gradients and optimizer state, its activations; and the saved state its forward parts
keep for their backward, taskrt.liveness.state_key as the memory model counts it), and
proposes, for an operator drawn with probability proportional to its weights' bytes there,
a config that splits its weights finer (SearchSpace.shard). Where activations fill the
device instead, strategy/memory_moves.py spreads them (it draws between the two).

Trades and alignment (`GuidedSpace`, the tied GPT search's space, strategy/tied.py). A
shard move trades sample degree for a weight split; nothing took it back: halving a weight
split alone leaves half the devices idle, so a chain that split attention 8 ways could
not reach 4 or 2. `trade` doubles or halves a weight-splitting dim's degree and does the
opposite to the sample degree, on the same devices (tensor for data parallelism, either
way). `aligned` gives an operator the split its producer's output (or its consumer's
input) has on the tensor they share, on the same devices, where the operators' labels
(dim names per tensor axis) allow it: a linear reading a column-parallel linear's output
becomes row parallel, the loss after a vocabulary-split output layer vocabulary-parallel,
so no exchange is needed between them. Both only propose; the chain decides.

Pairs. `pair_move` gives an operator's proposed config, matched, to a dataflow neighbour
too (strategy/search.py PAIR_MOVE): coupled operators move together.

Exchanges. `exchange_move` makes two groups of operators trade devices: the operators on
one operator's device set move to another device list of the space, those on that list to
the first (strategy/search.py EXCHANGE_MOVE). Operation-parallel strategies (operators on
single devices and pairs) come in near-ties that differ by which group sits where: on the
2-step RNNLM's exhaustive check 15 local optima within 0.05% of the optimum, and from 11 of
them no single or pair proposal reaches it (docs/design.md); a placement is a relabelling
away. Of the exchanges, RESIZE `swap` two operators' disjoint device sets of any sizes
(the operators on each take the other's list, degrees resized: a data-parallel group stays
data parallel), RELABEL `relabel` every operator's devices by one permutation keeping
node-aligned blocks, the rest trade a device set for a list of its size. The 2-step RNNLM's
slowest seeds sat at +0.036%: embed split over two devices, rnn_l0 on a third, rnn_l1 and
the softmax on the fourth; the optimum has embed there and the two data parallel on embed's
pair, a swap (or that placement's mirror: a relabel, then a swap). Neither moves more than
GROUP_MOST operators: on a large model such a move is nearly a new strategy, costs about a
session build and is rejected (Inception-v3 @16: 5 relabels of 50+ operators in 300
proposals, +30% of the search's CPU).

Recomputation. `RecomputeUnits` are the segments (parallel_ops/recompute.py) a search may
switch on and off one at a time: the distinct segments of the named plans it was given
(for the GPT: one per transformer block, and one per attention operator). Units that share
an operator exclude each other (an operator is in one segment at most): switching one on
switches those off (`toggle`: a block's full recomputation replaces its attention-only
one, and the other way round). A state is the set of units switched on; a plan name is
kept where the state is one of the plans. `target` names the unit to switch on to free the
most bytes on the fullest device: the saved state of its operators and the activations
made inside it (those of every operator but its last), less what the units it switches off
free.
"""
from __future__ import annotations

import random
import weakref
from math import prod

from parallel_ops.config import ParallelConfig
from taskrt.liveness import own_bytes, state_key

from .space import SearchSpace, _weight_dims

TRADE, ALIGN = 0.2, 0.2      # GuidedSpace's shares of proposals: trades, alignments
RESIZE = 0.5                 # share of exchange moves that swap two operators' device sets
RELABEL = 0.25               # ... and that rename every operator's devices at once
GROUP_MOST = 8               # the most operators a swap or relabel moves (else no move)


def fullest_device(result) -> int:
    """The device with the highest peak memory of a simulation."""
    return max(result.memory, key=lambda d: (result.memory[d], -d))


def region_owner(name: str, ops: dict):
    """The operator whose region `name` is: its output ('h0/attn'), a weight of it
    ('h0/attn.in_proj_weight'), or either's gradient, optimizer state or recomputed copy
    ('...@grad', '...@exp_avg', '...@re'); None for the model's inputs."""
    base = name.split("@")[0]
    while base not in ops and "." in base:
        base = base.rsplit(".", 1)[0]
    return ops.get(base)


def bytes_on(session, device: int) -> tuple[dict, dict, dict]:
    """({op name: bytes of its weights' regions}, {op name: bytes of its other regions},
    {op name: bytes of the saved state its forward parts keep}) on `device` in the
    session's plan: instances and partial-sum buffers as the memory model holds them (their
    bounding rects), saved state as taskrt.liveness.state_key gives it (the keeping task's
    launch: an operator's forward, or its recompute when its segment is recomputed).

    It walks every region and task node of the plan (~2 ms at Inception-v3 on 16 GPUs),
    and an out-of-memory chain asks it for most proposals, of a state that mostly stays
    the same (its proposals are rejected and undone): so the last answer per session is
    kept, for the same device and configs (the dicts are shared: do not modify them)."""
    memo = _bytes_on_memo.get(session)
    if memo is not None and memo[0] == device and memo[1] == session.configs:
        return memo[2]
    got = _bytes_on(session, device)
    _bytes_on_memo[session] = (device, dict(session.configs), got)
    return got


_bytes_on_memo: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _bytes_on(session, device: int) -> tuple[dict, dict, dict]:
    owners = _owners.get(session)
    if owners is None:
        owners = _owners[session] = {}
    ops = weights = None
    by_weight: dict[str, int] = {}
    by_activation: dict[str, int] = {}
    for name, rp in session.planner.planners.items():
        owner = owners.get(name)
        if owner is None:
            if ops is None:
                ops = {op.name: op for op in session.model.ops}
                weights = {w.name for op in ops.values() for w in op.weights}
            owner = owners[name] = _owner_entry(name, ops, weights)
        op_name, into = owner
        if op_name is None:
            continue
        nbytes = 0
        rect = rp.instance_rects.get(device)
        if rect is not None:
            nbytes = rp.region.nbytes(rect)
        rect = rp.partial_rects.get(device)
        if rect is not None:
            nbytes += rp.region.nbytes(rect)
        if nbytes:
            into = by_weight if into else by_activation
            into[op_name] = into.get(op_name, 0) + nbytes
    return by_weight, by_activation, saved_on(session, device)


def _owner_entry(name: str, ops: dict, weights: set) -> tuple:
    """(owning operator's name or None, whether region `name` is a weight's or its state's,
    `weights` the model's weight names): what _bytes_on needs of a region name, kept per
    session (_owners)."""
    op = region_owner(name, ops)
    return (None, False) if op is None else (op.name, name.split("@")[0] in weights)


# Per session, {region name: _owner_entry}: the model's regions keep their names and owners.
_owners: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def saved_on(session, device: int) -> dict:
    """{op name: bytes of the saved state its keeping launches' point tasks hold on
    `device`} (bytes_on's third part)."""
    keeper = {id(launch): name for name, part in session.lowering.parts.items()
              for launch in part.forward + part.recompute if launch.saved_bytes}
    planner = session.planner
    planner.refresh()
    out: dict[str, int] = {}
    for li, lp in enumerate(planner.plans):
        name = keeper.get(id(lp.launch))
        if name is None:
            continue
        for node in planner.launch_groups(li)[-1].nodes:
            key = state_key(node)
            if key is not None and key[2] == device:
                out[name] = out.get(name, 0) + own_bytes(key)
    return out


def shard_move(space, session, rng: random.Random):
    """(op name, config) splitting the weights of an operator that holds many bytes on the
    fullest device (module doc), or None when no operator there can be split further."""
    device = fullest_device(session.result)
    by_weight = bytes_on(session, device)[0]
    # a session standing for a deeper model (strategy/tied.py) says how many operators
    # each of its operators stands for: the draw weighs the full model's bytes
    times = getattr(session, "multiplicity", {})
    by_weight = {name: b * times.get(name, 1) for name, b in by_weight.items()}
    searchable = {op.name: op for op in space.searchable()}
    pool = [(name, b) for name, b in by_weight.items() if name in searchable]
    while pool:
        name = pop_drawn(pool, rng)
        new = space.shard(searchable[name], session.configs[name], rng)
        if new is not None:
            return name, new
    return None


def pop_drawn(pool: list, rng: random.Random) -> str:
    """Pop and return a name of `pool` ([(name, weight)]) drawn with probability
    proportional to its weight."""
    x, k = rng.random() * sum(b for _, b in pool), 0
    while k < len(pool) - 1 and x >= pool[k][1]:
        x -= pool[k][1]
        k += 1
    return pool.pop(k)[0]


def pair_move(space, configs, name: str, cfg, rng: random.Random):
    """('pair', name, cfg, partner, its config matched to cfg, name's config now): operator
    `name`'s new config also given to a neighbour in the dataflow (SearchSpace.partners),
    matched (SearchSpace.match: same devices and sample degree); None when it has none or
    the partner has that config already. Operators sharing devices are coupled (moving one
    alone adds transfers): on the 2-step RNNLM on 4 GPUs a chain with two of them on one
    device reached them on two devices only over a barrier of single moves of 0.6-0.7% of
    the time; with pair moves the worst barrier is 0.05% (docs/design.md)."""
    op = space.op(name)
    partners = space.partners(op)
    if not partners:
        return None
    other = rng.choice(partners)
    new = space.match(other, cfg, op)
    if new is None or new == configs[other.name]:
        return None
    return "pair", name, cfg, other.name, new, configs[name]


def exchange_move(space, configs, rng: random.Random):
    """('group', ((op name, new config), ...), (their configs now, ...)): a uniformly drawn
    operator's device set and another device list trade places (module doc). Half the time
    (RESIZE) the other list is that of another operator, on devices disjoint from the
    first's and as many or not (`swap`); else a device list of the space of the first's
    length (SearchSpace.random_devices): every searchable operator whose devices are that
    set moves onto the other list (its device at position k of the first list to position
    k of the other), and every one whose devices are the other list's set moves back the
    same way; degrees are kept. A moved list outside the space's device families is put in
    order (the same devices); None when it is still outside, when the two lists are the
    same set (an operator on every device: nothing to trade) or when nothing would
    change."""
    ops = space.searchable()
    first = tuple(configs[rng.choice(ops).name].devices)
    r = rng.random()
    if r < RESIZE:
        return swap(space, configs, first, rng)
    if r < RESIZE + RELABEL:
        return relabel(space, configs, rng)
    other = tuple(space.random_devices(len(first), rng))
    if set(first) == set(other):
        return None
    there, back = dict(zip(first, other)), dict(zip(other, first))
    a, b = set(first), set(other)
    changes = []
    for op in ops:
        cfg = configs[op.name]
        devs = set(cfg.devices)
        if devs == a:
            moved = tuple(there[d] for d in cfg.devices)
        elif devs == b:
            moved = tuple(back[d] for d in cfg.devices)
        else:
            continue
        if not space.has_devices(moved):
            moved = tuple(sorted(moved))
            if not space.has_devices(moved):
                return None
        changes.append((op.name, ParallelConfig(cfg.degrees, moved)))
    if not changes:
        return None
    return "group", tuple(changes), tuple(configs[name] for name, _ in changes)


def swap(space, configs, first: tuple, rng: random.Random):
    """exchange_move's trade of `first`'s device set with the device list of another
    operator on disjoint devices (drawn uniformly among such operators): the operators on
    either set take the other's list, their degrees resized to its length (`resized`),
    as the 2-step RNNLM's optimum needs from its nearest ties: the embedding split over
    two devices and the LSTM and softmax on a third trade places, the two on two devices
    data parallel (module doc). None when no operator is on devices disjoint from
    `first`'s or an operator has no config of the other's length."""
    ops = space.searchable()
    a = set(first)
    lists = {}
    for op in ops:
        devs = tuple(configs[op.name].devices)
        if not a & set(devs):
            lists.setdefault(frozenset(devs), devs)
    if not lists:
        return None
    other = lists[rng.choice(sorted(lists, key=sorted))]
    b = set(other)
    changes = []
    for op in ops:
        cfg = configs[op.name]
        devs = set(cfg.devices)
        if devs == a or devs == b:
            new = resized(space, op, cfg, other if devs == a else first)
            if new is None:
                return None
            changes.append((op.name, new))
    if len(changes) > GROUP_MOST:
        return None
    return "group", tuple(changes), tuple(configs[name] for name, _ in changes)


def relabel(space, configs, rng: random.Random):
    """Every searchable operator's devices renamed by one permutation of the devices that
    keeps node-aligned blocks (`block_permutation`); None when that changes nothing or
    gives a list outside the space's families (the same devices in order too)."""
    perm = block_permutation(space.n, rng)
    changes = []
    for op in space.searchable():
        cfg = configs[op.name]
        moved = tuple(perm[d] for d in cfg.devices)
        if moved == cfg.devices:
            continue
        if not space.has_devices(moved):
            moved = tuple(sorted(moved))
            if not space.has_devices(moved):
                return None
        if moved != cfg.devices:
            changes.append((op.name, ParallelConfig(cfg.degrees, moved)))
            if len(changes) > GROUP_MOST:
                return None
    if not changes:
        return None
    return "group", tuple(changes), tuple(configs[name] for name, _ in changes)


def block_permutation(n: int, rng: random.Random) -> list[int]:
    """A permutation of range(n) that swaps the two halves of a block of even size, or not
    (even odds), from the whole range down to pairs: consecutive aligned blocks stay
    consecutive and aligned."""
    perm = list(range(n))

    def shuffle(lo: int, size: int) -> None:
        if size < 2 or size % 2:
            return
        half = size // 2
        if rng.random() < 0.5:
            perm[lo:lo + size] = perm[lo + half:lo + size] + perm[lo:lo + half]
        shuffle(lo, half)
        shuffle(lo + half, half)

    shuffle(0, n)
    return perm


def resized(space, op, cfg, devices: tuple):
    """`op`'s config `cfg` on `devices`: its degrees where the count is the same; else
    the sample degree scaled by the ratio of the counts where that gives a degree tuple of
    the space (data parallelism stays data parallelism), else the tuple of that product
    keeping the most of cfg's degrees (the first in the space's order); None when the space
    has none."""
    current = tuple(cfg.degree(d.name) for d in op.dims)
    q, p = len(devices), len(cfg.devices)
    allowed = [t for t in space.degree_tuples(op) if prod(t) == q]
    if q != p:
        sample = next((i for i, d in enumerate(op.dims) if d.kind == "sample"), None)
        if sample is not None and (current[sample] * q) % p == 0:
            t = list(current)
            t[sample] = current[sample] * q // p
            if tuple(t) in allowed:
                current = tuple(t)
    if current not in allowed:
        if not allowed:
            return None
        current = max(allowed, key=lambda t: sum(k == c for k, c in zip(t, current)))
    return space.config(op, current, devices)


def trade(space, op, cfg, rng: random.Random):
    """`cfg` with a weight-splitting dim's degree doubled and the sample degree halved, or
    the other way round, on the same devices (module doc); None when neither is allowed."""
    current = tuple(cfg.degree(d.name) for d in op.dims)
    sample = next((i for i, d in enumerate(op.dims) if d.kind == "sample"), None)
    if sample is None:
        return None
    allowed, weight_dims, options = set(space.degree_tuples(op)), _weight_dims(op), []
    for i, d in enumerate(op.dims):
        if d.name not in weight_dims or i == sample:
            continue
        for up, down in ((i, sample), (sample, i)):
            if current[down] % 2 == 0:
                t = list(current)
                t[up], t[down] = t[up] * 2, t[down] // 2
                if tuple(t) in allowed:
                    options.append(tuple(t))
    if not options:
        return None
    return space.config(op, rng.choice(options), cfg.devices)


def aligned(space, configs, rng: random.Random):
    """(op name, config): an operator given the split of the tensor it shares with its
    producer or a consumer, as that one splits it, on its devices (module doc); None when
    no pair of operators allows it."""
    ops = [op for op in space.searchable() if op.labels]
    made = {}
    for op in ops:
        for tensor, labels in zip(op.outputs, op.labels.get("outputs", ())):
            made[tensor.name] = (op, labels)
    pairs = []
    for op in ops:
        for tensor, labels in zip(op.inputs, op.labels.get("inputs", ())):
            if tensor.name in made:
                producer, out_labels = made[tensor.name]
                pairs += [(op, labels, producer, out_labels), (producer, out_labels, op, labels)]
    rng.shuffle(pairs)
    for op, labels, other, other_labels in pairs:
        cfg = configs[other.name]
        axes = [cfg.degree(name) if name else 1 for name in other_labels]
        if len(axes) != len(labels) or any(k > 1 and not name
                                           for k, name in zip(axes, labels)):
            continue
        want = {name: k for name, k in zip(labels, axes) if name}
        t = tuple(want.get(d.name, 1) for d in op.dims)
        if prod(t) != len(cfg.devices) or t not in set(space.degree_tuples(op)):
            continue
        new = space.config(op, t, cfg.devices)
        if new != configs[op.name]:
            return op.name, new
    return None


class GuidedSpace(SearchSpace):
    """A SearchSpace whose proposals are also trades (TRADE of them) and alignments (ALIGN)
    besides SearchSpace.propose's (module doc). With `op_weights` ({op name: weight},
    default 1) an operator is drawn with probability proportional to its weight (the tied
    search weighs a block's operator by the square root of the blocks it stands for)."""

    def __init__(self, *args, op_weights: dict | None = None, **kw):
        super().__init__(*args, **kw)
        self.op_weights = dict(op_weights or {})

    def draw_op(self, rng: random.Random, ops: list):
        if not self.op_weights:
            return rng.choice(ops)
        return rng.choices(ops, [self.op_weights.get(op.name, 1.0) for op in ops])[0]

    def propose(self, rng: random.Random, configs):
        r = rng.random()
        if r < TRADE:
            ops = self.searchable()
            for _ in range(len(ops)):
                op = self.draw_op(rng, ops)
                new = trade(self, op, configs[op.name], rng)
                if new is not None:
                    return op.name, new
        elif r < TRADE + ALIGN:
            move = aligned(self, configs, rng)
            if move is not None:
                return move
        return super().propose(rng, configs)


class RecomputeUnits:
    """The segments a search toggles (module doc) and the named plans among their states.

        units = RecomputeUnits({"none": [], "full": per_block(model, block_of),
                                "selective": per_op(model, "multihead_attention")})
        units.segments(units.plans["full"]), units.name(frozenset({0, 3}))
        units.toggle(units.plans["full"], k)     # unit k switched (module doc)
    """

    def __init__(self, plans: dict):
        self.units: list[tuple[str, ...]] = []
        index: dict[tuple, int] = {}
        self.plans: dict[str, frozenset] = {}
        for name, segments in plans.items():
            state = set()
            for seg in segments:
                key = tuple(seg)
                if key not in index:
                    index[key] = len(self.units)
                    self.units.append(key)
                state.add(index[key])
            self.plans[name] = frozenset(state)
        members = [set(unit) for unit in self.units]
        # per unit, the others sharing an operator with it: never on together
        self.excludes = [frozenset(j for j, other in enumerate(members)
                                   if j != k and other & mine)
                         for k, mine in enumerate(members)]

    def __len__(self) -> int:
        return len(self.units)

    def segments(self, state: frozenset) -> list[list[str]]:
        return [list(self.units[k]) for k in sorted(state)]

    def toggle(self, state: frozenset, k: int) -> frozenset:
        """`state` with unit k switched off when it is on, else on with the units that
        share an operator with it off."""
        if k in state:
            return state - {k}
        return (state - self.excludes[k]) | {k}

    def name(self, state: frozenset) -> str:
        """The plan's name where `state` is a named plan, else which segments are on."""
        for name, s in self.plans.items():
            if s == state:
                return name
        on = sorted(state)
        return (f"{len(on)} of {len(self.units)} segments: "
                + ", ".join(self.units[k][0] if len(self.units[k]) > 1
                            else self.units[k][0] + " alone" for k in on))

    def freed(self, k: int, by_activation: dict, saved: dict) -> int:
        """Bytes switching unit k on frees, by bytes_on's counts: its operators' saved
        state and the activations of all but its last operator (its output is kept)."""
        unit = self.units[k]
        return (sum(saved.get(name, 0) for name in unit)
                + sum(by_activation.get(name, 0) for name in unit[:-1]))

    def target(self, session, state: frozenset) -> int | None:
        """The unit not yet on that frees the most bytes on the fullest device (`freed`,
        less what the units it would switch off free); None when no unit frees any."""
        device = fullest_device(session.result)
        _, by_activation, saved = bytes_on(session, device)
        best, most = None, 0
        for k in range(len(self.units)):
            if k in state:
                continue
            gain = self.freed(k, by_activation, saved) - sum(
                self.freed(j, by_activation, saved) for j in self.excludes[k] & state)
            if gain > most:
                best, most = k, gain
        return best


__all__ = ["fullest_device", "region_owner", "bytes_on", "saved_on", "shard_move", "pair_move",
           "trade",
           "aligned", "GuidedSpace",
           "RecomputeUnits"]
